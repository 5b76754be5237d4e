"""The tokenize stage end to end with upsampled documents: index.json's repeat counts, the
manifest's tokens before and after per rule, a refused count in rejected/tokenize, a new
version when the upsampling changes, and the loader's epoch accounting over the result."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from storage.index import validate_index
from storage.loader import Source, TokenDataset
from storage.shards import decode_shard
from tests.conftest import shared
from tests.pipelines.test_tokenize import folders, job, load_version, rewrite_docs, run_with

UPSAMPLED = {"d001": (3, ["top_quality"]), "d002": (2, ["top_quality", "label_code"]), "d003": (99, ["x"])}


def own(doc_id: str) -> str:
    """The corpus's own id of a document id (``<own id>@<hash of file and offset>``)."""
    return doc_id.rsplit("@", 1)[0]


def upsample(row: dict) -> dict:
    repeats, rules = UPSAMPLED.get(own(row["id"]), (1, []))
    return {**row, "repeats": repeats, "repeat_rules": rules}


def doc_tokens(directory: Path, index: dict) -> dict[str, int]:
    """Each document's token count, read from a version's shards (every copy agrees)."""
    found: dict[str, set[int]] = {}
    for entry in index["shards"]:
        shard = decode_shard((directory / entry["name"]).read_bytes())
        for row in pq.read_table(directory / entry["documents"]).to_pylist():
            found.setdefault(own(row["id"]), set()).add(len(shard.doc(row["position"])))
    assert all(len(sizes) == 1 for sizes in found.values())
    return {doc_id: sizes.pop() for doc_id, sizes in found.items()}


def test_upsampled_version_index_manifest_and_epochs(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    config = job(tmp_path, f"  model: {model}\n  target_shard_bytes: 2000\n  max_repeats: 8\n")
    out = tmp_path / "out"
    run_with(config)
    plain, plain_dir = load_version(out)
    assert plain["repeat_docs"] == plain["repeat_tokens"] == 0 and plain["upsampling"]["rules"] == {}

    rewrite_docs(out, upsample)
    run_with(config, "--force", "--stages", "tokenize")
    assert len(folders(out)) == 2  # another upsampling, another version
    version = (out / "tokens" / "CURRENT").read_text().strip()
    directory = out / "tokens" / version
    index = validate_index(json.loads((directory / "index.json").read_text()))
    assert index["content_key"] != plain["content_key"]
    table = pq.read_table(directory / "documents").to_pylist()
    copies = {doc_id: sorted((r["copy"], r["shard"]) for r in table if own(r["id"]) == doc_id) for doc_id in UPSAMPLED}
    assert [c for c, _ in copies["d001"]] == [0, 1, 2] and len({s for _, s in copies["d001"]}) == 3
    assert [c for c, _ in copies["d002"]] == [0, 1] and len({s for _, s in copies["d002"]}) == 2
    assert copies["d003"] == []  # 99 > max_repeats 8: refused

    per_doc = doc_tokens(plain_dir, plain)
    assert doc_tokens(directory, index) == {k: v for k, v in per_doc.items() if k != "d003"}
    one, two = per_doc["d001"], per_doc["d002"]
    assert index["repeat_docs"] == 3 and index["repeat_tokens"] == 2 * one + two
    assert sum(s["repeat_tokens"] for s in index["shards"]) == index["repeat_tokens"]
    assert index["num_docs"] == plain["num_docs"] - 1 + 3
    assert index["num_tokens"] == plain["num_tokens"] - per_doc.get("d003", 0) + 2 * one + two
    assert index["upsampling"] == {
        "documents": 59, "upsampled_docs": 2, "tokens_before": index["num_tokens"] - 2 * one - two,
        "tokens_after": index["num_tokens"], "repeat_docs": 3, "repeat_tokens": 2 * one + two,
        "rules": {"label_code": {"documents": 1, "tokens_before": two, "tokens_after": 2 * two},
                  "top_quality": {"documents": 2, "tokens_before": one + two, "tokens_after": 3 * one + 2 * two}}}

    manifest = json.loads((out / "manifests" / "tokenize.json").read_text())
    assert manifest["extra"]["upsampling"] == index["upsampling"]
    assert manifest["counts"]["rejected_by_reason"] == {"repeats": 1} and manifest["counts"]["out"] == 59
    assert manifest["extra"]["counters"]["repeat_tokens"] == index["repeat_tokens"]
    rejected = pq.read_table(out / "rejected" / "tokenize").to_pylist()
    assert [(own(r["id"]), r["reason"], r["reason_detail"], r["repeats"]) for r in rejected] == [
        ("d003", "repeats", "repeats 99 outside 1..8 (tokenize.max_repeats)", 99)]

    run_with(config, "--force", "--stages", "tokenize")  # the same upsampling: the version is reused
    again = json.loads((out / "manifests" / "tokenize.json").read_text())
    assert again["extra"]["version_reused"] is True and again["extra"]["upsampling"] == index["upsampling"]

    epoch = TokenDataset([Source(str(directory / "index.json"))], seq_len=64, batch_size=2).epoch_tokens()
    assert 0 < epoch.repeat_tokens < epoch.tokens
    share = index["repeat_tokens"] / index["num_tokens"]
    assert abs(epoch.repeat_share - share) < 0.1  # the epoch reads (nearly) every token once
