"""Tokenize end to end: train or take a tokenizer, shuffled shards, index.json, versions."""

from __future__ import annotations

import glob
import io
import json
import hashlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import xxhash

from pipelines.config import ConfigError, load_config
from pipelines.run import main
from storage.shards import HEADER_SIZE, ShardError, decode_shard
from tests.conftest import shared
from transforms.extract.html import normalize_text


def corpus(tmp_path: Path, n: int = 60) -> Path:
    lines = [line.strip() for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    paras = [" ".join(lines[i:i + 8]) for i in range(0, 8 * n, 8)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i:03d}", "text": p}) + "\n" for i, p in enumerate(paras)))
    return path


def job(tmp_path: Path, tokenize: str, out: str = "out") -> str:
    config = tmp_path / f"{out}.yaml"
    config.write_text(f"output: {tmp_path / out}\ninputs:\n  - format: jsonl\n    path: {corpus(tmp_path)}\n"
                      f"tokenize:\n{tokenize}beam_args: ['--runner=FnApiRunner']\n")
    return str(config)


def run(config: str) -> str:
    out = io.StringIO()
    assert main(["--config", config, "--log-level", "WARNING"], out=out) == 0, out.getvalue()
    return out.getvalue()


def load_version(out: Path) -> tuple[dict, Path]:
    index = sorted(glob.glob(f"{out}/tokens/*/index.json"))[-1]
    return json.loads(Path(index).read_text()), Path(index).parent


def test_given_tokenizer_round_trip_every_document_once(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n  target_shard_bytes: 4000\n"))
    index, directory = load_version(tmp_path / "out")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert index["tokenizer"]["sha256"] and index["dtype"] == "uint16" and index["num_shards"] > 3
    docs = {json.loads(line)["id"]: json.loads(line)["text"] for line in open(tmp_path / "docs.jsonl")}
    positions = pq.read_table(directory / "documents").to_pylist()
    seen = []
    for entry in index["shards"]:
        shard = decode_shard((directory / entry["name"]).read_bytes(), entry["name"])
        assert shard.num_docs == entry["num_docs"] and len(shard.tokens) == entry["num_tokens"]
        ids = [p["id"] for p in sorted(positions, key=lambda p: p["position"]) if p["shard"] == entry["name"]]
        # each shard's own documents table (written beside it by the worker) lists exactly its docs
        own = pq.read_table(directory / entry["documents"]).to_pylist()
        assert entry["documents"] == "documents/" + entry["name"].replace(".tfs", ".parquet")
        assert [p["id"] for p in own] == ids and [p["position"] for p in own] == list(range(len(ids)))
        for i, doc_id in enumerate(ids):
            tokens = shard.doc(i).tolist()
            assert tokens[-1] == sp.eos_id()
            # the text extract keeps: normalised (the book's leading BOM, U+FEFF, is dropped)
            assert sp.decode(tokens[:-1]) == sp.decode(sp.encode(normalize_text(docs[doc_id.rsplit("@", 1)[0]])))
            seen.append(doc_id.rsplit("@", 1)[0])
    assert sorted(seen) == sorted(docs)  # every kept document, exactly once
    assert index["num_docs"] == len(docs) and index["lineage"]["input_stage"] == "extract"
    manifest = json.loads((tmp_path / "out" / "manifests" / "tokenize.json").read_text())
    assert manifest["extra"]["tokenizer_sha256"] == index["tokenizer"]["sha256"]
    assert manifest["extra"]["dataset_version"] == index["version"]


def test_shuffle_is_deterministic_for_a_seed(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    orders = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        run(job(tmp_path, f"  model: {model}\n  seed: {seed}\n  target_shard_bytes: 4000\n", name))
        _, directory = load_version(tmp_path / name)
        rows = pq.read_table(directory / "documents").to_pylist()
        orders.append([(r["shard"], r["position"], r["id"]) for r in rows])
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_trained_tokenizer_versions_and_resume(tmp_path):
    config = job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 1000000\n")
    table = run(config)
    assert "tokenizer" in table and Path(tmp_path / "out" / "tokenizer" / "tokenizer.model").exists()
    first, _ = load_version(tmp_path / "out")
    assert first["num_shards"] == 1
    assert "resumed" in run(config).split("tokenize ", 1)[1].splitlines()[0]
    run(job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 2000\n"))  # config change: new version
    versions = sorted(glob.glob(f"{tmp_path}/out/tokens/*/index.json"))
    # the old one intact (two versions made in the same second sort by their hash, not their age)
    old = Path(tmp_path / "out" / "tokens" / first["version"] / "index.json")
    assert len(versions) == 2 and str(old) in versions and json.loads(old.read_text()) == first


def test_corrupted_shard_is_detected(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n"))
    index, directory = load_version(tmp_path / "out")
    path = directory / index["shards"][0]["name"]
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    with pytest.raises(ShardError, match=index["shards"][0]["name"]):
        decode_shard(bytes(data), index["shards"][0]["name"])


def test_missing_or_wrong_tokenizer_fails_before_running(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenize\.model: not a sentencepiece model"):
        load_config(job(tmp_path, f"  model: {tmp_path}/missing.model\n"))
    with pytest.raises(ConfigError, match=r"tokenize\.model: not a sentencepiece model"):
        load_config(job(tmp_path, f"  model: {shared('models', 'lid.176.ftz')}\n"))
    with pytest.raises(ConfigError, match="model_type"):
        load_config(job(tmp_path, "  model_type: wordpiece\n"))


def test_empty_corpus_gives_an_empty_version(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    config = tmp_path / "e.yaml"
    config.write_text(f"output: {tmp_path / 'e'}\ninputs:\n  - format: jsonl\n    path: {empty}\n"
                      f"tokenize:\n  model: {model}\nbeam_args: ['--runner=FnApiRunner']\n")
    run(str(config))
    index, _ = load_version(tmp_path / "e")
    assert index["num_docs"] == 0 and index["shards"] == []


def test_documents_longer_than_a_shard_are_never_split(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n  target_shard_bytes: 64\n"))
    index, directory = load_version(tmp_path / "out")
    assert index["num_docs"] == 60 and all(s["num_bytes"] > 64 for s in index["shards"])
    total = 0
    for entry in index["shards"]:
        shard = decode_shard((directory / entry["name"]).read_bytes(), entry["name"])
        total += shard.num_docs
        assert all(shard.doc(i)[-1] == 2 for i in range(shard.num_docs))  # whole docs, EOS last
    assert total == 60


def test_identical_trainings_write_identical_tokenizer_bytes(tmp_path):
    """The trainer stored its (temporary) output path in the model: two identical
    trainings gave different bytes, so two runners could never agree on the sha256."""
    from pipelines.tokenize_stage import train_tokenizer
    from transforms.tokenize.tokenize import TokenizeConfig

    texts = [line for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines() if line]
    config = TokenizeConfig(vocab_size=500)
    a = train_tokenizer(config, texts, str(tmp_path / "a" / "tokenizer.model"))
    b = train_tokenizer(config, texts, str(tmp_path / "b" / "tokenizer.model"))
    assert a["sha256"] == b["sha256"]
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() == (tmp_path / "b" / "tokenizer.model").read_bytes()
    assert spm.SentencePieceProcessor(model_file=str(tmp_path / "a" / "tokenizer.model")).get_piece_size() == 500


# --- issue 13: tokenizer settings sentencepiece refuses fail at config time -----------------

@pytest.mark.parametrize("fields,key", [
    ({"character_coverage": 0.9}, "character_coverage"), ({"character_coverage": 0.9799}, "character_coverage"),
    ({"character_coverage": 1.0001}, "character_coverage"), ({"character_coverage": 0.0}, "character_coverage"),
    ({"train_sample_docs": 0}, "train_sample_docs"), ({"train_sample_docs": -5}, "train_sample_docs"),
    ({"vocab_size": 10_000_000_000}, "vocab_size"), ({"vocab_size": (1 << 30) + 1}, "vocab_size"),
    ({"vocab_size": 259}, "vocab_size"), ({"vocab_size": 15, "byte_fallback": False}, "vocab_size"),
    ({"target_shard_bytes": 0}, "target_shard_bytes"), ({"batch_size": 0}, "batch_size"),
])
def test_tokenize_config_refuses_what_sentencepiece_refuses(fields, key):
    from transforms.tokenize.tokenize import TokenizeConfig

    with pytest.raises(ValueError, match=key):
        TokenizeConfig(**fields)


@pytest.mark.parametrize("fields", [{"character_coverage": 0.98}, {"character_coverage": 1.0},
                                    {"train_sample_docs": 1}, {"vocab_size": 1 << 30}, {"vocab_size": 260},
                                    {"vocab_size": 16, "byte_fallback": False},
                                    {"vocab_size": 100, "model": "given.model"}])  # a given model: not trained
def test_tokenize_config_accepts_the_boundaries(fields):
    from transforms.tokenize.tokenize import TokenizeConfig

    TokenizeConfig(**fields)


def test_the_coverage_bound_is_sentencepieces_own(tmp_path):
    """0.98 trains; 0.9799 is refused by sentencepiece itself: the config check matches it."""
    import dataclasses
    import types

    from pipelines.tokenize_stage import train_tokenizer
    from transforms.tokenize.tokenize import CHARACTER_COVERAGE_RANGE, TokenizeConfig

    texts = [line for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines() if line][:2000]
    low = CHARACTER_COVERAGE_RANGE[0]
    config = TokenizeConfig(vocab_size=400, character_coverage=low)
    assert train_tokenizer(config, texts, str(tmp_path / "t.model"))["sha256"]
    # what the config check refuses, handed to the trainer anyway (bypassing the check)
    below = types.SimpleNamespace(**{**dataclasses.asdict(config), "character_coverage": low - 0.0001})
    with pytest.raises(ValueError, match="character_coverage"):
        train_tokenizer(below, texts, str(tmp_path / "u.model"))


def test_a_vocabulary_too_small_for_the_corpus_names_the_key_and_the_size(tmp_path):
    from pipelines.tokenize_stage import train_tokenizer
    from transforms.tokenize.tokenize import TokenizeConfig

    texts = [line for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines() if line]
    with pytest.raises(ValueError, match=r"tokenize\.vocab_size: 260 is smaller than the \d{3} pieces"):
        train_tokenizer(TokenizeConfig(vocab_size=260), texts, str(tmp_path / "t.model"))
    assert not (tmp_path / "t.model").exists()


def test_absurd_vocab_size_in_a_job_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenize.*vocab_size must be in 16\.\.1073741824"):
        load_config(job(tmp_path, "  vocab_size: 10000000000\n"))
    with pytest.raises(ConfigError, match="character_coverage must be in"):
        load_config(job(tmp_path, "  character_coverage: 0.9\n"))
    with pytest.raises(ConfigError, match="train_sample_docs must be >= 1"):
        load_config(job(tmp_path, "  train_sample_docs: 0\n"))


# --- issue 13 items 15 and 17: self-contained versions keyed by their tokens ----------------

def run_with(config: str, *args: str) -> str:
    out = io.StringIO()
    assert main(["--config", config, "--log-level", "WARNING", "--no-report", *args], out=out) == 0, out.getvalue()
    return out.getvalue()


def rewrite_docs(out: Path, change) -> None:
    """Rewrites the extract stage's documents in place (same schema), row by row."""
    import pyarrow as pa

    for path in sorted((out / "docs" / "extract").glob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(pa.Table.from_pylist([change(r) for r in table.to_pylist()], schema=table.schema), path)


def folders(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "tokens").iterdir() if p.is_dir())


def sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


REVIEWED = [{"name": "quality", "value": "high", "score": 1.0, "origin": "human", "version": "review-1",
             "reviewer": "ann", "reviewed_at": "2026-01-01T00:00:00Z"}]


def test_a_version_is_self_contained_and_changes_only_when_its_tokens_change(tmp_path):
    config = job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 4000\n")
    run_with(config)
    out = tmp_path / "out"
    index, directory = load_version(out)
    assert index["index_version"] == 3 and (out / "tokens" / "CURRENT").read_text().strip() == index["version"]
    model = directory / "tokenizer.model"
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert index["tokenizer"]["file"] == "tokenizer.model" and sha(model) == index["tokenizer"]["sha256"]
    assert {k: index["tokenizer"][k] for k in ("vocab_size", "eos_id", "bos_id", "pad_id", "unk_id")} == {
        "vocab_size": sp.get_piece_size(), "eos_id": sp.eos_id(), "bos_id": sp.bos_id(), "pad_id": sp.pad_id(),
        "unk_id": sp.unk_id()}
    assert index["version"].endswith("-" + index["content_key"][:12])
    for entry in index["shards"]:
        assert sha(directory / entry["documents"]) == entry["documents_sha256"]
        raw = (directory / entry["name"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(raw[HEADER_SIZE:]).hexdigest()  # both of every byte after the header
        assert entry["xxh3_128"] == xxhash.xxh3_128(raw[HEADER_SIZE:]).hexdigest()
        shard = decode_shard(raw, entry["name"])
        assert all(shard.doc(i)[-1] == index["tokenizer"]["eos_id"] for i in range(shard.num_docs))
    first_manifest = json.loads((out / "manifests" / "tokenize.json").read_text())
    index_bytes = (directory / "index.json").read_bytes()

    # review labels imported: the documents' labels change, their texts do not. The tokenizer
    # is retrained (same bytes) and tokenize reruns, but the version is reused, not rewritten.
    rewrite_docs(out, lambda row: {**row, "labels": REVIEWED})
    table = run_with(config, "--force", "--stages", "tokenizer,tokenize")
    assert folders(out) == [index["version"]] and (directory / "index.json").read_bytes() == index_bytes
    manifest = json.loads((out / "manifests" / "tokenize.json").read_text())
    assert manifest["extra"]["version_reused"] is True and first_manifest["extra"]["version_reused"] is False
    assert manifest["counts"] == first_manifest["counts"]
    counters = dict(manifest["extra"]["counters"])
    assert counters.pop("version_reused") == 1 and "version_reused" not in first_manifest["extra"]["counters"]
    assert counters == first_manifest["extra"]["counters"]
    # the --force run says it rewrote nothing
    assert table.split("\ntokenize ", 1)[1].splitlines()[0].endswith("; identical token version reused, nothing rewritten")
    assert manifest["extra"]["dataset_version"] == index["version"]

    # a retrained tokenizer (another vocabulary): a new version; the old one keeps its own
    # tokenizer, whose sha256 still matches its index (the shared tokenizer/ file changed)
    changed = tmp_path / "vocab500.yaml"  # the same output, another vocabulary
    changed.write_text(Path(config).read_text().replace("vocab_size: 400", "vocab_size: 500"))
    run_with(str(changed), "--stages", "tokenizer,tokenize")
    assert len(folders(out)) == 2 and (directory / "index.json").read_bytes() == index_bytes
    assert sha(model) == index["tokenizer"]["sha256"] != sha(out / "tokenizer" / "tokenizer.model")
    newest = (out / "tokens" / "CURRENT").read_text().strip()
    assert newest != index["version"] and json.loads((out / "tokens" / newest / "index.json").read_text())[
        "tokenizer"]["sha256"] == sha(out / "tokenizer" / "tokenizer.model")

    # one document's text changes: new tokens, a new version
    run_with(config, "--stages", "tokenizer,tokenize")
    assert len(folders(out)) == 2 and (out / "tokens" / "CURRENT").read_text().strip() == index["version"]
    rewrite_docs(out, lambda row: {**row, "text": row["text"] + " Changed."} if row["source_id"] == "d007" else row)
    run_with(config, "--force", "--stages", "tokenizer,tokenize")
    assert len(folders(out)) == 3


def test_identical_runs_give_identical_versions(tmp_path):
    """Two outputs, the same corpus and settings: the same key, tokenizer bytes and shards."""
    indexes = []
    for name in ("a", "b"):
        run_with(job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 4000\n", name))
        indexes.append(load_version(tmp_path / name))
    (a, dir_a), (b, dir_b) = indexes
    assert a["content_key"] == b["content_key"] and a["version"] != "" and b["version"].endswith(a["content_key"][:12])
    assert (dir_a / "tokenizer.model").read_bytes() == (dir_b / "tokenizer.model").read_bytes()
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]


def test_version_key_depends_on_exactly_what_decides_the_tokens():
    from transforms.tokenize.tokenize import TokenizeConfig, version_key

    base = TokenizeConfig()
    key = version_key(base, "a" * 64, 10, 12345, 3)
    assert version_key(TokenizeConfig(batch_size=7), "a" * 64, 10, 12345, 3) == key  # how, not what
    assert version_key(TokenizeConfig(vocab_size=999), "a" * 64, 10, 12345, 3) == key  # only via the model
    for other in (version_key(TokenizeConfig(seed=1), "a" * 64, 10, 12345, 3),
                  version_key(TokenizeConfig(append_eos=False), "a" * 64, 10, 12345, 3),
                  version_key(TokenizeConfig(target_shard_bytes=1000), "a" * 64, 10, 12345, 3),
                  version_key(TokenizeConfig(dataset="web"), "a" * 64, 10, 12345, 3),
                  version_key(base, "b" * 64, 10, 12345, 3), version_key(base, "a" * 64, 11, 12345, 3),
                  version_key(base, "a" * 64, 10, 12346, 3), version_key(base, "a" * 64, 10, 12345, 4)):
        assert other != key


def test_document_fingerprints_ignore_order_and_separate_id_from_text():
    from transforms.tokenize.tokenize import SumFingerprints, doc_fingerprint

    prints = [doc_fingerprint(f"d{i}", f"text {i}") for i in range(50)]
    assert all(0 <= half < 1 << 63 for p in prints for half in p)  # fits any runner's int64 coder
    fn = SumFingerprints()
    forward = fn.extract_output(fn.merge_accumulators(
        [fn.add_input(fn.create_accumulator(), p) for p in prints]))
    backward = fn.create_accumulator()
    for p in reversed(prints):
        backward = fn.add_input(backward, p)
    assert forward == fn.extract_output(backward) and json.loads(forward)["documents"] == 50
    assert json.loads(fn.extract_output(fn.add_input(fn.create_accumulator(), prints[0])))["sum"] != \
        json.loads(forward)["sum"]
    assert doc_fingerprint("ab", "c") != doc_fingerprint("a", "bc")
    assert doc_fingerprint("d1", "x") != doc_fingerprint("d1", "y")


def test_a_killed_tokenize_leaves_no_version_folder_behind_after_the_rerun(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    model = shared("models", "spm_test_model_botchan.model")
    config = job(tmp_path, f"  model: {model}\n  target_shard_bytes: 2000\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.run", "--config", config, "--log-level", "ERROR",
                             "--no-progress", "--no-report"], cwd=root, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tokens = tmp_path / "out" / "tokens"
    deadline, left = time.monotonic() + 300, []
    while not left:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        left = [p.parent for p in tokens.glob("*/tokenizer.model") if not (p.parent / "index.json").exists()]
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert left[0].is_dir() and not (left[0] / "index.json").exists()
    # another key's leftover, from a run killed an hour ago
    (tokens / "v20200101T000000-0123456789ab").mkdir()
    (tokens / "v20200101T000000-0123456789ab" / "shard-00000-of-00009.tfs").write_bytes(b"half")
    lease = tmp_path / "out" / "_lease.json"  # the killed run's heartbeat stopped: 10 minutes pass
    then = lease.stat().st_mtime - 600  # (the store's clock: the file's mtime)
    os.utime(lease, (then, then))
    run_with(config)
    index, directory = load_version(tmp_path / "out")
    assert folders(tmp_path / "out") == [directory.name] and (directory / "index.json").exists()
    assert index["num_docs"] == 60


def test_without_the_lease_incomplete_versions_wait_out_the_safety_age(tmp_path):
    import os
    import socket
    import time

    from pipelines.tokenize_stage import INCOMPLETE_MAX_AGE_S, holds_output_lease, remove_stale_versions

    tokens = tmp_path / "tokens"
    for name in ("v1-old", "v2-recent", "v3-done"):
        (tokens / name).mkdir(parents=True)
        (tokens / name / "shard-00000-of-00001.tfs").write_bytes(b"x")
    (tokens / "v3-done" / "index.json").write_text("{}")
    now = time.time()
    for name, age in (("v1-old", INCOMPLETE_MAX_AGE_S + 60), ("v2-recent", INCOMPLETE_MAX_AGE_S - 60)):
        os.utime(tokens / name / "shard-00000-of-00001.tfs", (now - age, now - age))
    assert INCOMPLETE_MAX_AGE_S == 24 * 3600
    assert remove_stale_versions(str(tokens), now) == ["v1-old"]
    assert folders(tmp_path) == ["v2-recent", "v3-done"]
    assert remove_stale_versions(str(tokens), now, max_age_s=0) == ["v2-recent"]  # the lease holder's view
    assert not holds_output_lease(str(tmp_path))  # no lease file
    lease = {"owner": "x", "host": socket.gethostname(), "pid": os.getpid(), "command": "test",
             "acquired_at": now, "heartbeat_at": now, "ttl_s": 120.0}
    (tmp_path / "_lease.json").write_text(json.dumps(lease))
    assert holds_output_lease(str(tmp_path))
    (tmp_path / "_lease.json").write_text(json.dumps({**lease, "pid": os.getpid() + 1}))
    assert not holds_output_lease(str(tmp_path))  # another process's run
    (tmp_path / "_lease.json").write_text(json.dumps({**lease, "heartbeat_at": now - 600}))
    assert not holds_output_lease(str(tmp_path))  # a dead run's


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_index_json_names_no_path_outside_its_version(tmp_path, monkeypatch):
    """A run with a relative output: before, index.json's tokenizer.path was
    'out/tokenizer/tokenizer.model', a path outside the version that means something only
    from the run's working directory. Now the index names only files inside the version
    (the manifest still says where the model was taken from)."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "relative.yaml"
    config.write_text(f"output: out\ninputs:\n  - format: jsonl\n    path: {corpus(tmp_path)}\n"
                      "tokenize:\n  vocab_size: 400\n  target_shard_bytes: 4000\n"
                      "beam_args: ['--runner=FnApiRunner']\n")
    run(str(config))
    index, directory = load_version(tmp_path / "out")
    assert set(index["tokenizer"]) == {"file", "sha256", "vocab_size", "eos_id", "bos_id", "pad_id", "unk_id"}
    paths = [s for s in _strings(index) if "/" in s or "\\" in s or s.endswith(".model")]
    assert paths and all(p.startswith("documents/") or p == "tokenizer.model" for p in paths), paths
    assert all((directory / p).is_file() for p in paths)
    manifest = json.loads((tmp_path / "out" / "manifests" / "tokenize.json").read_text())
    assert manifest["extra"]["tokenizer"] == "out/tokenizer/tokenizer.model"


PAUSED_PROMOTE = """
import sys
import storage.tiers as tiers
copy_file, copied = tiers.copy_file, []
def paused(*args, **kwargs):
    sent = copy_file(*args, **kwargs)
    copied.append(args[1])
    if len(copied) == 1:
        print("copied one file", flush=True)
        sys.stdin.readline()
    return sent
tiers.copy_file = paused
from pipelines.tiers import main
sys.exit(main(sys.argv[1:]))
"""


def test_tokenize_never_removes_a_version_folder_a_live_copy_writes(tmp_path):
    """Another output's ``pipelines.tiers promote`` (it holds that output's lease, not
    this one's) copies a version into this output's tokens/ (its warm tier) and is paused
    after its first file; this output's tokenize runs meanwhile, holding this output's
    lease. Before: tokenize removed the half-written folder as a killed run's leftover."""
    import subprocess
    import sys

    from storage.tiers import StorageConfig, verify_version

    settings = f"  model: {shared('models', 'spm_test_model_botchan.model')}\n  target_shard_bytes: 2000\n"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    here = job(tmp_path / "a", settings)
    run(here)
    run(job(tmp_path / "b", settings + "  seed: 7\n"))
    source, version = load_version(tmp_path / "b" / "out")
    promote = tmp_path / "promote.yaml"
    promote.write_text(f"output: {tmp_path / 'b' / 'out'}\ninputs: []\ncrawl:\n  seeds: [http://x]\nstorage:\n"
                       f"  cold: {tmp_path / 'b' / 'out' / 'tokens'}\n  warm: {tmp_path / 'a' / 'out' / 'tokens'}\n")
    target = tmp_path / "a" / "out" / "tokens" / version.name
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_PROMOTE, "promote", "--config", str(promote),
                             "--version", version.name], cwd=Path(__file__).resolve().parents[2],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "copied one file"
        assert target.is_dir() and not (target / "index.json").exists()
        code = main(["--config", here, "--stages", "tokenize", "--force", "--log-level", "WARNING"], out=io.StringIO())
        assert code == 0 and target.is_dir()
    finally:
        printed, err = proc.communicate("\n", timeout=300)
    assert proc.returncode == 0, err
    assert f"promoted {version.name} cold -> warm" in printed
    assert verify_version(str(target.parent), version.name, StorageConfig()) == []
    assert json.loads((target / "index.json").read_text())["num_shards"] == source["num_shards"] > 10
    assert not (target / "_writer.json").exists()


def test_incomplete_versions_with_a_live_writer_are_kept(tmp_path):
    """The cleanup takes a folder's writer lease before deleting it: a live writer keeps
    its folder, a killed one's (its lease not rewritten for the TTL) is removed."""
    import os
    import time

    from pipelines.lease import version_writer
    from pipelines.tokenize_stage import remove_stale_versions

    tokens = tmp_path / "tokens"
    for name in ("v1-live", "v2-killed"):
        (tokens / name).mkdir(parents=True)
        (tokens / name / "shard-00000-of-00002.tfs").write_bytes(b"half")
    live = version_writer(str(tokens / "v1-live"), command="pipelines.tiers promote").acquire()
    killed = version_writer(str(tokens / "v2-killed"), heartbeat=False).acquire()
    then = time.time() - 121
    os.utime(tokens / "v2-killed" / "_writer.json", (then, then))
    try:
        assert remove_stale_versions(str(tokens), time.time(), max_age_s=0) == ["v2-killed"]
        assert folders(tmp_path) == ["v1-live"]
    finally:
        live.release()
    assert remove_stale_versions(str(tokens), time.time(), max_age_s=0) == ["v1-live"]
    killed.release()
