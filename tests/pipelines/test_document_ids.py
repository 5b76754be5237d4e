"""Document identity (issue 36, item 1): two inputs whose ids overlap, or one input with an
id twice, keep every distinct document; a document without a URL is never a URL
duplicate; the input's own id is kept as ``source_id`` and repeated ids are counted."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.manifest import read_manifest
from pipelines.run import main
from transforms.doc import Doc, RawRecord, document_id, stable_id
from transforms.extract.extract import record_doc_id
from transforms.readers.tabular import TextFields, iter_jsonl


_WORDS = ("river", "stone", "garden", "window", "lantern", "harbor", "meadow", "copper", "violet",
          "thunder", "pillow", "orchard", "canyon", "marble", "feather", "glacier")


def _texts(prefix: str, n: int) -> list[str]:
    """Texts that differ in their words (dedup's normalisation ignores digits)."""
    return [f"{prefix} document about the {_WORDS[i % 16]} and the {_WORDS[i // 16 % 16]} near "
            f"the {_WORDS[(i * 7) % 16]} says something of its own." for i in range(n)]


def _write_inputs(tmp_path: Path, fmt: str) -> list[Path]:
    """Two inputs holding ids "0" to "99" each, no URL field, every text distinct."""
    paths = []
    for name in ("a", "b"):
        rows = [{"id": str(i), "text": text} for i, text in enumerate(_texts(name, 100))]
        if fmt == "jsonl":
            path = tmp_path / f"{name}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            path = tmp_path / f"{name}.parquet"
            pq.write_table(pa.Table.from_pylist(rows), path)
        paths.append(path)
    return paths


def _config(tmp_path: Path, fmt: str, pattern: str) -> str:
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: {fmt}, path: "{pattern}"}}
stages: [extract, dedup_exact]
dedup: {{}}
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


def _docs(out: Path, stage: str) -> list[dict]:
    return [row for path in sorted((out / "docs" / stage).glob("*.parquet"))
            for row in pq.read_table(path).to_pylist()]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_overlapping_ids_of_two_inputs_keep_every_distinct_document(tmp_path, fmt):
    _write_inputs(tmp_path, fmt)
    table = io.StringIO()
    assert main(["--config", _config(tmp_path, fmt, str(tmp_path / f"*.{fmt}")), "--log-level", "ERROR",
                 "--no-report"], out=table) == 0
    counts = read_manifest(str(tmp_path / "out"), "dedup_exact").counts
    assert (counts.records_in, counts.out, counts.rejected) == (200, 200, 0)
    kept = _docs(tmp_path / "out", "dedup_exact")
    assert len({r["id"] for r in kept}) == 200  # unique by construction
    assert sorted(r["text"] for r in kept) == sorted(_texts("a", 100) + _texts("b", 100))
    # the input's own id is kept beside the job's id
    assert sorted(r["source_id"] for r in kept) == sorted([str(i) for i in range(100)] * 2)
    assert all(r["id"].startswith(r["source_id"] + "@") for r in kept)
    # ids are not repeated inside either input: nothing counted
    assert "duplicate_id" not in table.getvalue()


def test_ids_repeated_inside_one_input_are_counted_and_every_document_kept(tmp_path):
    rows = [{"id": str(i % 40), "text": text} for i, text in enumerate(_texts("c", 100))]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = io.StringIO()
    assert main(["--config", _config(tmp_path, "jsonl", str(tmp_path / "c.jsonl")), "--log-level", "ERROR",
                 "--no-report"], out=table) == 0
    counters = read_manifest(str(tmp_path / "out"), "extract").extra["counters"]
    assert counters["duplicate_id"] == 60  # 100 records, 40 distinct ids
    assert counters["duplicate_id_keys"] == 40
    assert "duplicate_id=60" in table.getvalue()
    counts = read_manifest(str(tmp_path / "out"), "dedup_exact").counts
    assert (counts.records_in, counts.out) == (100, 100)


def test_the_same_file_matched_by_two_patterns_is_read_once(tmp_path):
    _write_inputs(tmp_path, "jsonl")
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: jsonl, path: "{tmp_path / '*.jsonl'}"}}
  - {{format: jsonl, path: "{tmp_path / 'a.jsonl'}"}}
stages: [extract]
beam_args: ["--runner=FnApiRunner"]
""")
    assert main(["--config", str(config), "--log-level", "ERROR", "--no-report"], out=io.StringIO()) == 0
    manifest = read_manifest(str(tmp_path / "out"), "extract")
    assert (manifest.counts.records_in, manifest.counts.out) == (200, 200)
    assert "duplicate_id" not in manifest.extra["counters"]


def test_document_ids_from_the_readers(tmp_path):
    """A record with an id of its own is named by ``ReadInputs`` from its file's name
    below the input folder and its offset; one without keeps the reader's id, as before."""
    from transforms.readers.files import match_pattern
    from transforms.readers.inputs import _ReadInputFn
    from transforms.readers.warc import WarcLimits

    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "7", "text": "one"}\n{"id": "7", "text": "two"}\n{"text": "three"}\n')
    records = list(iter_jsonl(str(data), TextFields(), "extract"))
    assert [r.record_id for r in records] == ["7", "7", ""]
    assert [r.doc_id for r in records] == ["", "", stable_id(str(data), "byte 54")]  # id-less: as before
    reader = _ReadInputFn("extract", WarcLimits(), {})
    reader.setup()
    [ref] = match_pattern(str(tmp_path / "*.jsonl"))
    assert ref.id_source == "d.jsonl"
    named = [r for r in reader.process(("jsonl", ref)) if isinstance(r, RawRecord)]
    assert [r.doc_id for r in named] == [document_id("d.jsonl", 0, "7"), document_id("d.jsonl", 27, "7"),
                                         stable_id(str(data), "byte 54")]
    assert named[0].doc_id == "7@" + stable_id("d.jsonl", 0)[:16] != named[1].doc_id
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "7", "text": "one"}, {"id": "7", "text": "two"}]), path)
    [ref] = match_pattern(str(path))
    assert ref.id_source == "d.parquet"
    rows = [r for r in reader.process(("parquet", ref)) if isinstance(r, RawRecord)]
    assert [r.doc_id for r in rows] == [document_id("d.parquet", 0, "7"), document_id("d.parquet", 1, "7")]


def test_ids_survive_a_moved_input_folder_and_equal_names_stay_apart(tmp_path):
    """Ids come from a file's path below its pattern's folder: the same data in another
    folder gives the same ids; two patterns whose files share a name fall back to the URL."""
    for folder in ("one/2024", "two/2024", "other"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.jsonl").write_text('{"id": "1", "text": "the same words here"}\n')
    ids = {}
    for name, patterns in (("one", ["one/*/x.jsonl"]), ("two", ["two/*/x.jsonl"]),
                           ("both", ["one/2024/*.jsonl", "other/*.jsonl"])):
        inputs = "".join(f"  - {{format: jsonl, path: \"{tmp_path / p}\"}}\n" for p in patterns)
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"output: {tmp_path / name / 'out'}\ninputs:\n{inputs}stages: [extract]\n"
                          "beam_args: ['--runner=FnApiRunner']\n")
        assert main(["--config", str(config), "--log-level", "ERROR", "--no-report"], out=io.StringIO()) == 0
        ids[name] = sorted(r["id"] for r in _docs(tmp_path / name / "out", "extract"))
    assert ids["one"] == ids["two"] == [document_id("2024/x.jsonl", 0, "1")]
    assert len(set(ids["both"])) == 2 and ids["both"] == sorted(  # both "x.jsonl": named by their URLs
        document_id(str(tmp_path / p), 0, "1") for p in ("one/2024/x.jsonl", "other/x.jsonl"))


def test_the_id_of_a_warc_record_comes_from_its_file_offset_and_record_id():
    from transforms.doc import RawRecord

    record = RawRecord(kind="html", url="http://a/", source="s3://b/f.warc.gz", offset=123,
                       record_id="<urn:uuid:1>")
    assert record_doc_id(record) == "<urn:uuid:1>@" + stable_id("s3://b/f.warc.gz", 123)[:16]
    moved = RawRecord(kind="html", url="http://a/", source="s3://b/f.warc.gz", offset=124,
                      record_id="<urn:uuid:1>")
    assert record_doc_id(moved) != record_doc_id(record)
    bare = RawRecord(kind="html", url="http://a/", source="s3://b/f.warc.gz", offset=123)
    assert record_doc_id(bare) == stable_id("s3://b/f.warc.gz", 123, "http://a/")
    chosen = RawRecord(kind="text", url="", source="x", offset=1, record_id="9", doc_id="given")
    assert record_doc_id(chosen) == "given"


def test_old_outputs_without_source_id_are_read():
    from transforms.doc import doc_from_row, doc_to_row

    row = doc_to_row(Doc(id="x", url="", text="t", source="s", fetched_at=""))
    del row["source_id"]
    assert doc_from_row(row).source_id == ""


def test_seed_files_and_old_reviews_find_documents_by_a_unique_own_id(tmp_path, caplog):
    """``doc_texts`` (the labeller's seed rows and reviews name documents by id) matches
    the job's document id, else an own id that one document has; an own id two inputs
    share is ambiguous and left out, with a warning naming it."""
    import logging

    from pipelines.config import load_config
    from pipelines.review import doc_texts

    _write_inputs(tmp_path, "jsonl")
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "only-c", "text": "the one text of c"}) + "\n")
    config = _config(tmp_path, "jsonl", str(tmp_path / "*.jsonl"))
    assert main(["--config", config, "--stages", "extract", "--log-level", "ERROR", "--no-report"],
                out=io.StringIO()) == 0
    kept = _docs(tmp_path / "out", "extract")
    some = next(r for r in kept if r["source_id"] == "5")
    logging.getLogger().addHandler(caplog.handler)  # main's logging setup replaced the root's handlers
    caplog.set_level(logging.WARNING, logger="pipelines.review")
    found = doc_texts(load_config(config), ["only-c", "5", some["id"]])
    assert found == {"only-c": "the one text of c", some["id"]: some["text"]}
    assert "5" in caplog.text and "more than one input" in caplog.text


def test_earlier_runs_documents_never_merge_into_one_node():
    from pipelines.dedup_stage import earlier_run_key

    row = {"band_key": b"k", "node": "1x |7"}
    one = earlier_run_key(("/idx/run-1/part-0.parquet", row))
    two = earlier_run_key(("s3://b/idx/run-2/part-3.parquet", row))
    assert one == (b"k", "0x |run-1:7") and two == (b"k", "0x |run-2:7")
    assert earlier_run_key(("C:\\idx\\run-3\\part-0.parquet", row))[1] == "0x |run-3:7"


def test_the_crawls_warc_files_give_ids_that_do_not_name_the_output():
    """The crawl's WARC files live under the output; their documents' ids come from their
    name there (``crawl/warc/<file>``), so an output moved elsewhere keeps its ids."""
    from tests.conftest import shared
    from transforms.readers.files import FileRef, match_pattern
    from transforms.readers.inputs import _ReadInputFn
    from transforms.readers.warc import WarcLimits

    ref = match_pattern(str(shared("warc") / "dolma_sample-0000.warc.gz"))[0]
    reader = _ReadInputFn("extract", WarcLimits(), {})
    reader.setup()
    name = "crawl/warc/" + ref.url.rsplit("/", 1)[-1]
    named = [r for r in reader.process(("warc", FileRef(ref.url, ref.size, ref.version, id_source=name)))
             if isinstance(r, RawRecord)]
    plain = [r for r in reader.process(("warc", ref)) if isinstance(r, RawRecord)]
    unnamed = [r for r in reader.process(("warc", FileRef(ref.url, ref.size))) if isinstance(r, RawRecord)]
    assert len(named) == len(plain) == len(unnamed) > 5 and all(r.record_id for r in named)
    assert [r.doc_id for r in named] == [document_id(name, r.offset, r.record_id) for r in plain]
    assert ref.id_source == "dolma_sample-0000.warc.gz"  # below the pattern's folder
    assert [r.doc_id for r in plain] == [document_id(ref.id_source, r.offset, r.record_id) for r in plain]
    assert [r.doc_id for r in unnamed] == [document_id(ref.url, r.offset, r.record_id) for r in plain]


def test_repeated_ids_are_counted_across_the_ranges_of_a_split_file(tmp_path):
    """A JSONL file read in byte ranges by several workers: an id in two ranges is still
    counted once as a repeat (the ranges' hashes meet per file)."""
    import numpy as np

    from transforms.readers.inputs import repeated_ids

    assert repeated_ids([np.array([1, 2, 3], np.uint64), np.array([3, 3, 4, 1], np.uint64)]) == (3, 2)
    assert repeated_ids([np.array([5], np.uint64)]) == (0, 0) and repeated_ids([]) == (0, 0)
    rows = [{"id": str(i % 70), "text": text} for i, text in enumerate(_texts("s", 100))]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: \"{tmp_path / 's.jsonl'}\"}}\n"
                      "stages: [extract]\nread: {split_bytes: 1000}\nbeam_args: ['--runner=FnApiRunner']\n")
    assert main(["--config", str(config), "--log-level", "ERROR", "--no-report"], out=io.StringIO()) == 0
    manifest = read_manifest(str(tmp_path / "out"), "extract")
    assert (tmp_path / "s.jsonl").stat().st_size > 8 * 1000  # read in more than 8 ranges
    assert manifest.counts.out == 100 and manifest.extra["counters"]["duplicate_id"] == 30
    assert manifest.extra["counters"]["duplicate_id_keys"] == 30


def test_url_duplicates_that_differ_by_a_fragment_are_counted_as_such(tmp_path):
    """A book's chapters at book.html#ch1, #ch2, ... are one URL once the fragment is dropped:
    all but one are rejected as duplicate_url, and the table says how many had a fragment."""
    texts = _texts("f", 8)
    rows = ([{"id": f"ch{i}", "text": texts[i], "url": f"http://x.test/book.html#ch{i}"} for i in range(4)]
            + [{"id": "p1", "text": texts[4], "url": "http://x.test/page.html"},
               {"id": "p2", "text": texts[5], "url": "http://x.test/page.html"},  # a duplicate, no fragment
               {"id": "e1", "text": texts[6], "url": "http://x.test/end.html#"},
               {"id": "e2", "text": texts[7], "url": "http://x.test/end.html#"}])  # an empty fragment
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = Path(_config(tmp_path, "jsonl", str(tmp_path / "f.jsonl")))
    config.write_text(config.read_text().replace('path: "', 'url_field: url, path: "'))
    table = io.StringIO()
    assert main(["--config", str(config), "--log-level", "ERROR", "--no-report"], out=table) == 0
    manifest = read_manifest(str(tmp_path / "out"), "dedup_exact")
    assert manifest.counts.rejected_by_reason == {"duplicate_url": 5}
    assert manifest.extra["counters"]["duplicate_url_fragment"] == 3  # ch1..ch3 (ch0 is kept)
    assert "duplicate_url_fragment=3" in table.getvalue()


def test_only_url_duplicates_with_a_fragment_are_counted():
    from transforms.dedup.exact_files import fragment_duplicates

    table = pa.table({"reason": ["duplicate_url", "duplicate_url", "duplicate_text", "duplicate_url", "duplicate_url"],
                      "url": ["http://a/b#c", "http://a/b#", "http://a/b#c", None, "http://a/b"]})
    assert fragment_duplicates(table) == 1  # not an empty fragment, another reason, no URL or no '#'
    assert fragment_duplicates(table.drop(["url"])) == 0
