"""TokenizeToShards with upsampled documents: copies as separate entries in different
shards, the documents tables' copy column, the shard records' repeat counts per rule,
bad repeat counts rejected; without repeats the shards are the ones written before."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from storage.repeats import copy_buckets, min_copy_distance, upsampling_summary
from storage.shards import decode_shard
from tests.conftest import shared
from transforms.doc import Doc
from transforms.tokenize.tokenize import (TokenizeConfig, TokenizeToShards, doc_fingerprint, fingerprint_of,
                                          shuffle_key)

SEED = 4
# (repeats, rules) of the upsampled (and the refused) documents; every other one is x1
UPSAMPLED = {"d000": (3, ("top_quality",)), "d001": (5, ("top_quality", "label_code")),
             "d002": (2, ("label_code",)), "d005": (16, ("top_quality",)), "d006": (1, ("label_code",)),
             "d003": (17, ("top_quality",)), "d004": (0, ())}
# The shards the tokenize stage wrote before upsampling existed (commit eda65f1), for these
# 40 documents at seed 4 and 1,500-byte shards: sha256 of each shard's payload and index.
BEFORE = ["708a66d1f24c43dc", "01e2d095e4b5dc41", "b285735cbd4d04db", "d3763762ba1c6d90", "0399c1dff452ba4e",
          "6a61d2e9d2b00599", "a3e08993057e72ba", "4300b6480361ca9d", "26adaca2931a7ccb", "16144f6f6eca95eb"]


def documents(upsampled: dict[str, tuple[int, tuple[str, ...]]]) -> list[Doc]:
    lines = [line.strip() for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    docs = []
    for i in range(40):
        repeats, rules = upsampled.get(f"d{i:03d}", (1, ()))
        docs.append(Doc(id=f"d{i:03d}", url="", text=" ".join(lines[8 * i:8 * i + 8]), source="t", fetched_at="",
                        repeats=repeats, repeat_rules=rules))
    return docs


def tokenize(tmp_path: Path, docs: list[Doc], beam_options, target: int = 1500) -> dict:
    model = str(shared("models", "spm_test_model_botchan.model"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "version"
    pipeline = TestPipeline(options=beam_options)
    result = (pipeline | beam.Create(docs)
              | TokenizeToShards(TokenizeConfig(target_shard_bytes=target, seed=SEED), model, str(out)))
    result.kept | "Records" >> beam.Map(json.dumps) | beam.io.WriteToText(str(tmp_path / "records"),
                                                                          shard_name_template="")
    result.rejected | "Why" >> beam.Map(lambda r: json.dumps([r.doc.id, r.reason, r.detail])) | "WriteWhy" >> \
        beam.io.WriteToText(str(tmp_path / "rejected"), shard_name_template="")
    run = pipeline.run()
    run.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in run.metrics().query(
        MetricsFilter().with_namespace("tokenize"))["counters"]}
    records = sorted((json.loads(line) for line in open(tmp_path / "records")), key=lambda r: r["name"])
    return {"out": out, "records": records, "counters": counters,
            "rejected": sorted(json.loads(line) for line in open(tmp_path / "rejected"))}


def test_copies_are_separate_entries_in_different_shards(tmp_path, beam_options):
    got = tokenize(tmp_path, documents(UPSAMPLED), beam_options)
    out, records = got["out"], got["records"]
    shards = len(records)
    assert shards > 5
    entries = defaultdict(list)  # id -> [(shard number, copy, tokens)]
    for number, record in enumerate(records):
        shard = decode_shard((out / record["name"]).read_bytes(), record["name"])
        table = pq.read_table(out / record["documents"]).to_pylist()
        assert [r["position"] for r in table] == list(range(shard.num_docs)) == list(range(record["num_docs"]))
        copies = [r for r in table if r["copy"] > 0]
        assert record["repeat_docs"] == len(copies)
        assert record["repeat_tokens"] == sum(len(shard.doc(r["position"])) for r in copies)
        for row in table:
            entries[row["id"]].append((number, row["copy"], shard.doc(row["position"]).tolist()))
    for doc_id, (repeats, _) in UPSAMPLED.items():
        if repeats not in range(1, 17):
            assert doc_id not in entries  # refused, not written
            continue
        found = sorted(entries[doc_id], key=lambda e: e[1])
        assert [copy for _, copy, _ in found] == list(range(repeats))  # copy 0..r-1, each once
        assert all(tokens == found[0][2] for _, _, tokens in found)  # one token array, r times
        buckets = [number for number, _, _ in found]
        first = shuffle_key(SEED + 1, doc_id) % shards
        assert buckets == copy_buckets(first, repeats, shards)  # the documented rule
        if repeats <= shards:  # never two copies in one shard, as far apart as the shards allow
            assert len(set(buckets)) == repeats
            assert min_copy_distance(buckets, shards) == (shards // repeats if repeats > 1 else shards)
        else:
            assert max(Counter(buckets).values()) == -(-repeats // shards)
    assert all(len(v) == 1 for k, v in entries.items() if k not in UPSAMPLED or UPSAMPLED[k][0] == 1)

    summary = upsampling_summary(records)
    tokens = {doc_id: len(v[0][2]) for doc_id, v in entries.items()}
    top = ("d000", 3), ("d001", 5), ("d005", 16)
    code = ("d001", 5), ("d002", 2), ("d006", 1)  # a rule that left a document at x1 still counts it
    assert summary["rules"] == {
        "label_code": {"documents": 3, "tokens_before": sum(tokens[d] for d, _ in code),
                       "tokens_after": sum(tokens[d] * r for d, r in code)},
        "top_quality": {"documents": 3, "tokens_before": sum(tokens[d] for d, _ in top),
                        "tokens_after": sum(tokens[d] * r for d, r in top)}}
    extra = 2 + 4 + 1 + 15
    assert summary["documents"] == 38 and summary["upsampled_docs"] == 4 and summary["repeat_docs"] == extra
    assert summary["tokens_before"] == sum(tokens.values())
    assert summary["repeat_tokens"] == summary["tokens_after"] - summary["tokens_before"] == sum(
        tokens[d] * (r - 1) for d, r in (("d000", 3), ("d001", 5), ("d002", 2), ("d005", 16)))

    counters = got["counters"]
    assert counters["records_in"] == 40 and counters["records_out"] == 38 and counters["rejected_repeats"] == 2
    assert counters["repeat_docs"] == extra and counters["repeat_tokens"] == summary["repeat_tokens"]
    assert counters["tokens"] == summary["tokens_before"]
    assert got["rejected"] == [["d003", "repeats", "repeats 17 outside 1..16 (tokenize.max_repeats)"],
                               ["d004", "repeats", "repeats 0 outside 1..16 (tokenize.max_repeats)"]]


def test_without_repeats_the_shards_are_the_ones_written_before_upsampling(tmp_path, beam_options):
    got = tokenize(tmp_path, documents({}), beam_options)
    assert [r["sha256"][:16] for r in got["records"]] == BEFORE
    assert all(r["repeat_docs"] == r["repeat_tokens"] == 0 and r["rules"] == {} for r in got["records"])
    tables = [pq.read_table(got["out"] / r["documents"]) for r in got["records"]]
    assert {c for t in tables for c in t.column("copy").to_pylist()} == {0}
    assert "repeat_docs" not in got["counters"] and "repeat_tokens" not in got["counters"]


def test_the_fingerprint_changes_with_the_upsampling_and_only_then():
    assert doc_fingerprint("d1", "x") == (7698544784047468230, 2239949842034933593)  # as before upsampling
    assert doc_fingerprint("d1", "x", 1, ()) == doc_fingerprint("d1", "x")
    variants = {doc_fingerprint("d1", "x", r, rules) for r, rules in
                ((1, ()), (2, ()), (3, ()), (2, ("top",)), (2, ("top", "code")), (1, ("top",)), (0, ()))}
    assert len(variants) == 7  # another count or another rule: another dataset version
    assert doc_fingerprint("d1", "x", 2, ("a", "b")) == doc_fingerprint("d1", "x", 2, ("b", "a", "a"))
    doc = Doc(id="d1", url="", text="x", source="t", fetched_at="", repeats=20, repeat_rules=("top",))
    # over the cap the stage refuses the document: the same key as any other refused count
    assert fingerprint_of(doc, 16) == doc_fingerprint("d1", "x", 0, ("top",)) != fingerprint_of(doc, 32)
    assert fingerprint_of(doc, 32) == doc_fingerprint("d1", "x", 20, ("top",))


@pytest.mark.parametrize("value", [0, -1, 1001, 10 ** 9])
def test_max_repeats_is_validated(value):
    with pytest.raises(ValueError, match="max_repeats must be in 1..1000"):
        TokenizeConfig(max_repeats=value)


def test_upsampled_shards_are_the_same_on_every_run(tmp_path, beam_options):
    docs = documents(UPSAMPLED)
    first = tokenize(tmp_path / "a", docs, beam_options)["records"]
    again = tokenize(tmp_path / "b", list(reversed(docs)), beam_options)["records"]  # another input order
    assert [(r["name"], r["sha256"], r["documents_sha256"]) for r in first] == \
        [(r["name"], r["sha256"], r["documents_sha256"]) for r in again]


def tokenize_in_parts(tmp_path: Path, docs: list[Doc], beam_options, part_bytes: int) -> dict:
    model = str(shared("models", "spm_test_model_botchan.model"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    pipeline = TestPipeline(options=beam_options)
    config = TokenizeConfig(target_shard_bytes=1500, seed=SEED, part_bytes=part_bytes)
    result = (pipeline | beam.Create(docs)
              | TokenizeToShards(config, model, str(tmp_path / "version"), parts=str(tmp_path / "parts")))
    result.kept | beam.Map(json.dumps) | beam.io.WriteToText(str(tmp_path / "records"), shard_name_template="")
    pipeline.run().wait_until_finish()
    return {"records": sorted((json.loads(line) for line in open(tmp_path / "records")), key=lambda r: r["name"]),
            "parts_left": (tmp_path / "parts").exists()}


@pytest.mark.parametrize("part_bytes", [1, 100, 400, 1 << 20])
def test_a_shard_written_in_parts_is_the_shard_written_whole(tmp_path, beam_options, part_bytes):
    """1,500-byte shards as 2**12 (the cap), 16, 4 parts or one: the same shard bytes,
    documents tables and repeat counts, and the parts are gone at the end."""
    whole = tokenize(tmp_path / "whole", documents(UPSAMPLED), beam_options)["records"]
    got = tokenize_in_parts(tmp_path / "parts", documents(UPSAMPLED), beam_options, part_bytes)
    assert got["records"] == whole
    assert not got["parts_left"]
    plain = tokenize_in_parts(tmp_path / "plain", documents({}), beam_options, part_bytes)["records"]
    assert [r["sha256"][:16] for r in plain] == BEFORE


def test_part_bits_cover_a_shard_with_parts_of_the_given_size():
    from transforms.tokenize.tokenize import MAX_PART_BITS, part_bits

    assert part_bits(256 << 20, 16 << 20) == 4  # 16 parts
    assert part_bits(256 << 20, 17 << 20) == 4  # 16 parts (ceil 15.06 -> 16)
    assert part_bits(256 << 20, 15 << 20) == 5  # 18 parts -> 32
    assert part_bits(100, 100) == part_bits(100, 1000) == 0  # one part
    assert part_bits(101, 100) == 1
    assert part_bits(1 << 40, 1) == MAX_PART_BITS


def test_fingerprint_of_the_files_is_the_fingerprint_of_their_docs(tmp_path, beam_options):
    """The Arrow-native per-file fingerprint gives FingerprintDocs' line: repeats inside and
    outside max_repeats, rules, empty and missing text, a file written before the repeats
    columns existed, no files at all."""
    import json as _json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from transforms.doc import DOC_SCHEMA, doc_from_row, doc_to_row
    from transforms.tokenize.tokenize import FingerprintDocs, FingerprintFiles

    docs = [Doc(id=f"d{i}", url="", source="s", fetched_at="", text=("" if i % 7 == 0 else f"text number {i}"),
                repeats=(i % 5) * 9 or 1,
                repeat_rules=(("top", "code") if i % 3 == 0 else ())) for i in range(40)]
    new = tmp_path / "new.parquet"
    pq.write_table(pa.Table.from_pylist([doc_to_row(d) for d in docs[:30]], schema=DOC_SCHEMA), new)
    old = tmp_path / "old.parquet"  # no repeats / repeat_rules columns, one row without text
    pq.write_table(pa.table({"id": [d.id for d in docs[30:]], "text": [None] + [d.text for d in docs[31:]]}), old)
    files = [str(new), str(old)]
    rows = pq.read_table(new).to_pylist() + pq.read_table(old).to_pylist()
    expected = by_docs_line(rows, 20)
    assert _json.loads(expected[0])["documents"] == 40
    with TestPipeline(options=beam_options) as p:
        by_docs = (p | "Rows" >> beam.Create(rows) | beam.Map(doc_from_row) | FingerprintDocs(max_repeats=20))
        by_files = p | "Files" >> FingerprintFiles(files, max_repeats=20)
        none = p | "None" >> FingerprintFiles([], max_repeats=20)
        assert_that(by_files, equal_to(expected), label="files")
        assert_that(by_docs, equal_to(expected), label="docs")
        assert_that(none, equal_to([_json.dumps({"documents": 0, "sum": f"{0:032x}"})]), label="none")


def by_docs_line(rows: list, max_repeats: int) -> list:
    """The line the stage records, computed here one document at a time."""
    import json as _json

    from transforms.doc import doc_from_row
    from transforms.tokenize.tokenize import _HALF

    low = high = 0
    for row in rows:
        lo, hi = fingerprint_of(doc_from_row(row), max_repeats)
        low, high = (low + lo) & _HALF, (high + hi) & _HALF
    return [_json.dumps({"documents": len(rows), "sum": f"{(high << 63) | low:032x}"})]


def test_a_chunk_is_placed_as_its_documents_are_one_by_one():
    """What crosses the shuffle is one packed group per chunk, not one entry per copy:
    unpacked, the groups hold exactly the entries ``place_parts`` gives per document
    (keys, ids, copies, tokens, repeats, rules), so the parts and shards cannot change."""
    import numpy as np

    from transforms.tokenize.tokenize import chunk_bytes, encoded_docs, part_entries, place_chunk, place_parts

    lengths = [3, 1, 4, 2]
    tokens = np.arange(sum(lengths), dtype=np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    chunk = (["a", "b", "c", "d"], tokens, offsets, [1, 3, 1, 2], [(), ("top_quality",), (), ("label_code",)])
    assert [d[1].tolist() for d in encoded_docs(chunk)] == [[0, 1, 2], [3], [4, 5, 6, 7], [8, 9]]
    assert chunk_bytes(chunk) == (3 + 3 + 4 + 4) * 2  # every copy's tokens, 2 bytes each
    for shards, bits in [(1, 0), (3, 2), (5, 12)]:
        expected = defaultdict(list)
        for doc in encoded_docs(chunk):
            for group, entry in place_parts(SEED, doc, shards, bits):
                expected[group].append(entry)
        packed = list(place_chunk(SEED, chunk, shards, bits))
        assert len(packed) == len({g for g, _ in packed}) == len(expected)  # one element per group
        for group, part in packed:
            got = list(part_entries([part]))
            assert [(e[0], e[1], e[2], e[3].tolist(), e[4], e[5]) for e in got] == \
                [(e[0], e[1], e[2], e[3].tolist(), e[4], e[5]) for e in expected[group]]
            assert part[3].dtype == np.uint16
