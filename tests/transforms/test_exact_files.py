"""Exact dedup over Parquet files (``ExactDedupFiles``): the same decisions and the same rows
as ``ExactDedup`` over ``Doc``s, keys that tell colliding texts apart, Arrow rows that are
the ``Doc`` round trip's, and unreadable files in ``failed/``."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline

from pipelines.outputs import WriteStageOutputs
from tests.transforms.test_dedup import HARD_TEXTS, book_docs
from transforms.dedup import exact_keys
from transforms.dedup.dedup import DedupConfig, ExactDedup
from transforms.dedup.exact_files import ExactDedupFiles
from transforms.dedup.exact_keys import KeyChunk, decide, normalized_texts
from transforms.dedup.exact_rows import conform
from transforms.dedup.minhash import code_point_flags, flags_of, normalize_for_dedup
from transforms.doc import DOC_SCHEMA, Doc, Label, Signals, doc_from_row, doc_to_row


def test_batched_normalised_texts_are_normalize_for_dedup(monkeypatch):
    rng = random.Random(3)
    alphabet = "aZ09 .,!\x00\t—“”’éÉİ\u212aΣσς東京Ⅰ😀ßł²ＡＢ！　  \n"
    noise = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(200)]
    texts = HARD_TEXTS + noise + book_docs(3) + ["", "   ", "a", " a ", "\x00\x00"]
    monkeypatch.setattr(exact_keys, "_BATCH_CHARS", 300)  # many batches, a long text alone
    assert normalized_texts(texts) == [normalize_for_dedup(t).encode("utf-8") for t in texts]


def test_flags_of_the_code_points_met_are_the_whole_table():
    table = code_point_flags()
    codes = np.array([c for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000], dtype=np.uint32)
    assert np.array_equal(flags_of(codes), table[codes])


def test_decide_keeps_the_first_node_of_each_key():
    keys = np.array([[1, 2, 3], [9, 9, 9], [1, 2, 3], [1, 2, 4], [1, 2, 3]], dtype=np.uint64)
    nodes = ["c", "a", "b", "a", "d"]
    rejected, kept_by = decide(keys, lambda i: nodes[i])
    assert sorted(zip(rejected.tolist(), kept_by.tolist())) == [(0, 2), (4, 2)]  # row 3: same key but for the check


# --- the Doc round trip, column by column ------------------------------------------------

def _full_doc(i: int) -> Doc:
    return Doc(id=f"x{i}", url=f"http://a.org/{i}", text=f"text {i}", source="s", fetched_at="t", lang="en",
               lang_score=0.5, signals=Signals(chars=3.0), quality_score=0.25,
               labels=(Label(name="topic", value="v", score=0.5, origin="model", version="1"),),
               repeat_rules=("r",), source_id=str(i))


def test_conform_passes_our_rows_and_gives_other_rows_the_doc_round_trip():
    ours = pa.Table.from_pylist([doc_to_row(_full_doc(i)) for i in range(3)], schema=DOC_SCHEMA)
    extra = ours.append_column("extra", pa.array([1, 2, 3]))
    assert conform(extra.to_batches()[0]).equals(ours)
    odd_rows = [{"id": "a", "url": None, "text": None, "lang_score": -0.0, "labels": None, "repeats": None},
                {"id": "b", "url": "u", "text": "t", "lang_score": 0.5, "truncated": None,
                 "labels": [{"name": "n", "value": None, "score": 1.0, "origin": "human", "version": "2"}]}]
    odd = pa.Table.from_pylist(odd_rows)  # columns missing, nulls, -0.0
    want = pa.Table.from_pylist([doc_to_row(doc_from_row(r)) for r in odd.to_pylist()], schema=DOC_SCHEMA)
    got = conform(odd.to_batches()[0])
    assert got.equals(want)
    assert math.copysign(1.0, got.column("lang_score")[0].as_py()) == 1.0
    negative = ours.set_column(DOC_SCHEMA.get_field_index("lang_score"), "lang_score",
                               pa.array([-0.0, 0.5, 0.5]))
    assert math.copysign(1.0, conform(negative.to_batches()[0]).column("lang_score")[0].as_py()) == 1.0


# --- the whole transform against ExactDedup -----------------------------------------------

def corpus(n: int = 400, seed: int = 5) -> list[Doc]:
    """Many duplicate groups (texts differing only in case, digits and punctuation),
    URL duplicates (case, fragments, default ports), URL-less documents and URLs that do
    not normalise, quality ties, missing and out-of-range scores, natural-order ids."""
    rng = random.Random(seed)
    words = book_docs(1)[0].split()
    bases = [" ".join(rng.sample(words, 12)) for _ in range(60)]
    urls = [f"http://site{k}.org/p{k}" for k in range(40)]
    docs = []
    for i in range(n):
        text = rng.choice(bases)
        text = rng.choice([text, text.upper(), text + " 1999!", text.replace(" ", "  ,"), f"unique {i} {text}"])
        url = rng.choice(["", "", "not a url", rng.choice(urls), rng.choice(urls).upper() + "#frag",
                          rng.choice(urls).replace(".org/", ".org:80/")])
        quality = rng.choice([None, 0.5, 0.5, 0.9, 1.5, -1.0, rng.random()])
        docs.append(Doc(id=f"{rng.choice('ab')}{rng.randrange(n * 3)}-{i}", url=url, text=text, source="t",
                        fetched_at="", quality_score=quality, lang_score=0.1 * (i % 3)))
    return docs


def _write_inputs(tmp_path: Path, docs: list[Doc], files: int) -> list[str]:
    paths = []
    for k in range(files):
        path = tmp_path / "in" / f"part-{k}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([doc_to_row(d) for d in docs[k::files]], schema=DOC_SCHEMA), path)
        paths.append(str(path))
    return paths


def _rows(directory: Path) -> list[dict]:
    rows = [r for f in sorted(directory.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted(rows, key=lambda r: r.get("id") or r["source"])


def _counters(result) -> dict[str, int]:
    return {c.key.metric.name: c.committed
            for c in result.metrics().query(MetricsFilter().with_namespace("dedup_exact"))["counters"]}


def _run(beam_options, build) -> dict[str, int]:
    p = TestPipeline(options=beam_options)
    build(p)
    result = p.run()
    result.wait_until_finish()
    return _counters(result)


@pytest.mark.parametrize("keep", ["smallest_id", "highest_quality"])
@pytest.mark.parametrize("exact_url,exact_text", [(True, True), (False, True), (True, False), (False, False)])
def test_files_path_writes_what_exact_dedup_writes(beam_options, tmp_path, monkeypatch, keep, exact_url, exact_text):
    import transforms.dedup.exact_files as exact_files

    monkeypatch.setattr(exact_files, "BATCH_ROWS", 37)  # several batches per file
    docs = corpus()
    config = DedupConfig(keep=keep, exact_url=exact_url, exact_text=exact_text)
    paths = _write_inputs(tmp_path, docs, 3)
    old = _run(beam_options, lambda p: (p | beam.Create(docs) | ExactDedup(config)
                                        | WriteStageOutputs(str(tmp_path / "old"), "dedup_exact")))
    new = _run(beam_options, lambda p: (p | ExactDedupFiles(paths, config, buckets=4)
                                        | WriteStageOutputs(str(tmp_path / "new"), "dedup_exact", tables=True)))
    for sub in ("docs", "rejected", "failed"):
        assert _rows(tmp_path / "new" / sub / "dedup_exact") == _rows(tmp_path / "old" / sub / "dedup_exact"), sub
    assert new == {k: v for k, v in old.items() if k != "chars_out"}
    rejected = _rows(tmp_path / "new" / "rejected" / "dedup_exact")
    assert new["records_in"] == len(docs) == new["records_out"] + len(rejected)
    if exact_url and exact_text:  # the corpus really has every kind of decision
        assert {r["reason"] for r in rejected} == {"duplicate_url", "duplicate_text"}
        assert len(rejected) > 100


def test_texts_whose_keys_collide_are_not_duplicates(beam_options, tmp_path, monkeypatch):
    """Every text gets the same 128-bit key: the BLAKE2b check still tells the texts apart,
    so only the real copy is rejected; with the check forced equal too, they would go."""
    docs = [Doc(id=f"d{i}", url="", text=t, source="t", fetched_at="")
            for i, t in enumerate(["first text", "second text", "third text", "First text!"])]
    paths = _write_inputs(tmp_path, docs, 2)
    monkeypatch.setattr(exact_keys, "key_digest", lambda data: b"\x07" * 16)

    def rejected(name: str) -> list[tuple[str, str]]:
        _run(beam_options, lambda p: (p | ExactDedupFiles(paths, DedupConfig(), buckets=2)
                                      | WriteStageOutputs(str(tmp_path / name), "dedup_exact", tables=True)))
        return [(r["id"], r["reason_detail"]) for r in _rows(tmp_path / name / "rejected" / "dedup_exact")]

    assert rejected("checked") == [("d3", "duplicate of d0")]
    monkeypatch.setattr(exact_keys, "check_digest", lambda data: b"\x01" * 8)
    assert len(rejected("unchecked")) == 3  # what the check prevents


def test_an_unreadable_file_is_a_failure_naming_it_and_counts_reconcile(beam_options, tmp_path):
    docs = [Doc(id=f"d{i}", url="", text="same" if i < 3 else f"text {'abc'[i - 3]}", source="t", fetched_at="")
            for i in range(6)]
    paths = _write_inputs(tmp_path, docs, 1)
    broken = tmp_path / "in" / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    paths += [str(broken), str(tmp_path / "in" / "missing.parquet")]
    counters = _run(beam_options, lambda p: (p | ExactDedupFiles(paths, DedupConfig(), buckets=3)
                                             | WriteStageOutputs(str(tmp_path / "out"), "dedup_exact", tables=True)))
    failed = _rows(tmp_path / "out" / "failed" / "dedup_exact")
    assert sorted(f["source"] for f in failed) == sorted(paths[1:])
    assert all(f["error"].startswith(f"{f['source']}: unreadable input: ") for f in failed)
    kept = _rows(tmp_path / "out" / "docs" / "dedup_exact")
    rejected = _rows(tmp_path / "out" / "rejected" / "dedup_exact")
    assert ([r["id"] for r in kept], [r["id"] for r in rejected]) == (["d0", "d3", "d4", "d5"], ["d1", "d2"])
    assert counters["records_in"] == 6 + 2 == len(kept) + len(rejected) + len(failed)
    assert counters["records_out"] == 4 and counters["rejected_duplicate_text"] == 2


def test_the_key_chunk_takes_rows_and_buckets_cover_every_row():
    keys = np.arange(30, dtype=np.uint64).reshape(10, 3)
    chunk = KeyChunk(files=np.zeros(10, np.uint32), rows=np.arange(10), ids=pa.array([str(i) for i in range(10)]),
                     text=keys)
    parts = dict(exact_keys.by_bucket(chunk, keys, 4))
    assert sorted(r for part in parts.values() for r in part.rows.tolist()) == list(range(10))
    assert all((part.text[:, 0] % 4 == b).all() for b, part in parts.items())
    assert dataclasses.replace(chunk).take(np.array([2, 5])).ids.tolist() == ["2", "5"]
