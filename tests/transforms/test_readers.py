"""Readers on every real WARC/WET/ARC sample, damaged files, JSONL and Parquet."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.conftest import shared
from transforms.doc import Failure, RawRecord
from transforms.readers.files import FileRef, match_pattern
from transforms.readers.tabular import ReadTabular, TextFields, iter_jsonl, iter_parquet, record_from_mapping
from transforms.readers.warc import ReadWarc, WarcLimits, iter_warc
from transforms.routing import FAILED

# (file, document records, skipped records, failures)
WARC_FILES = [
    ("cc_whirlwind.warc.gz", 1, 3, 0),
    ("cc_whirlwind.warc.wet.gz", 1, 1, 0),
    ("cc_whirlwind.warc.wat.gz", 0, 2, 0),
    ("dolma_sample-0000.warc.gz", 24, 24, 0),
    ("resiliparse_warcfile.warc.gz", 16, 34, 0),
    ("warcio_example.warc.gz", 1, 5, 0),
    ("warcio_example-iana.org-chunked.warc", 1, 2, 0),
    ("warcio_example.arc.gz", 1, 1, 0),
    ("resiliparse_clipped.warc.gz", 0, 0, 1),
]


def read_all(data: bytes, name: str = "mem.warc.gz") -> list[object]:
    return list(iter_warc(io.BytesIO(data), name, WarcLimits(), "extract"))


def split(items: list[object]) -> tuple[list[RawRecord], list[str], list[Failure]]:
    return ([i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, str)],
            [i for i in items if isinstance(i, Failure)])


@pytest.mark.parametrize("name,docs,skipped,failures", WARC_FILES)
def test_every_shared_warc_file(name, docs, skipped, failures):
    path = shared("warc", name)
    records, skips, fails = split(read_all(path.read_bytes(), name))
    assert (len(records), len(skips), len(fails)) == (docs, skipped, failures)
    for record in records:
        assert record.url and record.source == name and record.offset >= 0


def test_record_fields_from_common_crawl():
    records, _, _ = split(read_all(shared("warc", "resiliparse_warcfile.warc.gz").read_bytes()))
    first = records[0]
    assert first.kind == "html" and first.http_status == 200 and first.content_type == "text/html"
    assert first.record_id.startswith("<urn:uuid:") and first.fetched_at.startswith("20")
    assert len({r.offset for r in records}) == len(records)


def test_wet_conversion_is_text_with_language():
    records, _, _ = split(read_all(shared("warc", "cc_whirlwind.warc.wet.gz").read_bytes()))
    assert records[0].kind == "text" and "Escopete" in records[0].text
    assert records[0].lang_hint == "spa"  # WARC-Identified-Content-Language: spa,...


def test_chunked_transfer_encoding_is_decoded():
    records, _, _ = split(read_all(shared("warc", "warcio_example-iana.org-chunked.warc").read_bytes()))
    assert records[0].payload.lstrip().lower().startswith(b"<!doctype html")


def test_truncated_file_names_file_and_offset_and_keeps_raw():
    data = shared("warc", "resiliparse_clipped.warc.gz").read_bytes()
    _, _, fails = split(read_all(data, "clipped.warc.gz"))
    assert fails[0].offset == 0 and "clipped.warc.gz" in fails[0].error
    assert "truncated" in fails[0].error and fails[0].raw == data


def test_truncated_tail_keeps_every_record_before_the_damage():
    data = shared("warc", "dolma_sample-0000.warc.gz").read_bytes()
    records, _, fails = split(read_all(data[:150_000]))
    assert len(records) == 20 and len(fails) == 1
    assert fails[0].offset == 148743 and fails[0].raw == data[148743:150_000]


def test_corrupt_middle_resyncs_and_reads_on():
    data = bytearray(shared("warc", "dolma_sample-0000.warc.gz").read_bytes())
    data[100_000:100_100] = b"x" * 100
    records, _, fails = split(read_all(bytes(data)))
    assert len(records) == 24  # every response survives: the damage hit a request record
    assert fails and all(96_000 < f.offset < 101_000 for f in fails)
    assert sum(len(f.raw) for f in fails) >= 100  # the damaged bytes are kept


def test_garbage_after_last_record():
    data = shared("warc", "dolma_sample-0000.warc.gz").read_bytes()
    records, _, fails = split(read_all(data + b"garbage" * 100))
    assert len(records) == 24 and len(fails) == 1 and fails[0].offset == len(data)


def test_empty_file_yields_nothing():
    assert read_all(b"") == []


def test_payload_limit_cuts_and_flags():
    data = shared("warc", "dolma_sample-0000.warc.gz").read_bytes()
    items = list(iter_warc(io.BytesIO(data), "x", WarcLimits(max_payload_bytes=1000), "extract"))
    records, _, fails = split(items)
    assert not fails and all(len(r.payload) <= 1000 for r in records)
    assert any(r.truncated for r in records)


def test_read_warc_transform_counts(beam_options):
    warc = shared("warc")
    refs = [FileRef(str(warc / n)) for n in
            ("resiliparse_warcfile.warc.gz", "resiliparse_clipped.warc.gz", "missing.warc.gz")]
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(refs) | ReadWarc("extract")
        assert_that(out.records | beam.combiners.Count.Globally(), equal_to([16]), label="records")
        assert_that(out[FAILED] | beam.Map(lambda f: f.error_type),
                    equal_to(["corrupt_record", "unreadable_file"]), label="failed")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    assert counters["records_in"] == 2 and counters["records_read"] == 16
    assert counters["skipped_request"] == 17 and counters["failed_unreadable_file"] == 1


# --- JSONL and Parquet -----------------------------------------------------------------

LINES = [
    {"id": "a", "text": "first document", "url": "http://x/a"},
    {"text": "no id here"},
    "not json {",
    ["a", "list"],
    {"id": "c", "text": None},
    {"id": "d", "text": 42},
    {"id": "e", "content": "wrong field"},
    {"id": "f", "text": "last \u00e9 document", "lang": "fr"},
]


def jsonl_bytes() -> bytes:
    out = []
    for line in LINES:
        out.append(line if isinstance(line, str) else json.dumps(line))
    return ("\n".join(out) + "\n\n").encode("utf-8") + b"\xff\xfe not utf8\n"


@pytest.mark.parametrize("suffix,compress", [
    ("", lambda b: b), (".gz", gzip.compress), (".zst", zstandard.compress), (".bz2", bz2.compress),
])
def test_jsonl_good_and_bad_lines(tmp_path, suffix, compress):
    path = tmp_path / f"docs.jsonl{suffix}"
    path.write_bytes(compress(jsonl_bytes()))
    items = list(iter_jsonl(str(path), TextFields(), "extract"))
    records = [i for i in items if isinstance(i, RawRecord)]
    fails = [i for i in items if isinstance(i, Failure)]
    assert [r.text for r in records] == ["first document", "no id here", "last \u00e9 document"]
    assert records[0].record_id == "a" and records[1].record_id == ""  # no id of its own
    assert records[0].doc_id == "" and len(records[1].doc_id) == 40  # ReadInputs names the first
    assert records[2].lang_hint == "fr"
    assert len(fails) == 6 and all(str(path) in f.error for f in fails)
    assert "line 3" in fails[0].error and fails[0].raw == b"not json {\n"
    assert all(f.error_type == "bad_record" for f in fails)


def test_jsonl_truncated_gzip_keeps_lines_before_damage(tmp_path):
    body = "".join(json.dumps({"id": str(i), "text": f"doc {i} " * 20}) + "\n" for i in range(2000))
    data = gzip.compress(body.encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    items = list(iter_jsonl(str(path), TextFields(), "extract"))
    records = [i for i in items if isinstance(i, RawRecord)]
    fails = [i for i in items if isinstance(i, Failure)]
    assert 0 < len(records) < 2000 and len(fails) == 1
    assert fails[0].error_type == "corrupt_file" and fails[0].offset > 0


def test_parquet_rows_and_bad_rows(tmp_path):
    table = pa.table({"doc_id": ["1", "2", "3"], "body": ["one", None, "three"],
                      "url": ["u1", "u2", "u3"]})
    path = tmp_path / "docs.parquet"
    pq.write_table(table, path, row_group_size=2)
    items = list(iter_parquet(str(path), TextFields(text="body", id="doc_id"), "extract"))
    records = [i for i in items if isinstance(i, RawRecord)]
    fails = [i for i in items if isinstance(i, Failure)]
    assert [(r.record_id, r.text, r.offset) for r in records] == [("1", "one", 0), ("3", "three", 2)]
    assert len(fails) == 1 and fails[0].offset == 1 and "row 1" in fails[0].error


def test_parquet_missing_column_and_corrupt_file(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"other": ["x"]}), good)
    fails = list(iter_parquet(str(good), TextFields(), "extract"))
    assert len(fails) == 1 and fails[0].error_type == "bad_schema" and "'text'" in fails[0].error
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all")
    fails = list(iter_parquet(str(bad), TextFields(), "extract"))
    assert len(fails) == 1 and fails[0].error_type == "corrupt_file"
    assert fails[0].raw == bad.read_bytes()


def test_read_tabular_transform(tmp_path, beam_options):
    for i in range(3):
        (tmp_path / f"part{i}.jsonl").write_text(
            "".join(json.dumps({"id": f"{i}-{j}", "text": f"t{j}"}) + "\n" for j in range(5)) + "oops\n")
    refs = match_pattern(str(tmp_path / "*.jsonl"))
    assert len(refs) == 3
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(refs) | ReadTabular("extract", "jsonl")
        assert_that(out.records | beam.Map(lambda r: r.record_id),
                    equal_to([f"{i}-{j}" for i in range(3) for j in range(5)]), label="records")
        assert_that(out[FAILED] | beam.combiners.Count.Globally(), equal_to([3]), label="failed")


def test_match_pattern_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        match_pattern(str(tmp_path / "nope.jsonl"))
    assert match_pattern(str(tmp_path / "*.nothing")) == []


@pytest.mark.parametrize("data", [b"hello world, this is not a warc\n" * 10, b"\x1f\x8b\x08garbage",
                                  b'{"json": "lines"}\n'])
def test_not_a_warc_is_one_clear_failure(data):
    items = read_all(data, "notes.txt")
    assert len(items) == 1 and isinstance(items[0], Failure)
    assert items[0].error_type == "not_warc" and "notes.txt" in items[0].error
    assert items[0].raw == data


def test_match_inputs_transform(tmp_path, beam_options):
    from transforms.readers.files import MatchInputs

    for name in ("a.jsonl", "b.jsonl", "c.txt"):
        (tmp_path / name).write_text("{}\n")
    with TestPipeline(options=beam_options) as p:
        refs = p | MatchInputs([str(tmp_path / "*.jsonl"), str(tmp_path / "c.txt")])
        assert_that(refs | beam.Map(lambda r: (os.path.basename(r.url), r.size)),
                    equal_to([("a.jsonl", 3), ("b.jsonl", 3), ("c.txt", 3)]))


def test_arc_record_ids_are_stable_and_location_free(tmp_path):
    """warcio gives ARC records a random id on every read: ours derive from the file name,
    offset, URL and date, so reruns and runners agree (and the id survives a move)."""
    data = shared("warc", "warcio_example.arc.gz").read_bytes()
    first, _, _ = split(read_all(data, "/data/a/warcio_example.arc.gz"))
    again, _, _ = split(read_all(data, "s3://bucket/b/warcio_example.arc.gz"))
    assert first[0].record_id == again[0].record_id
    assert first[0].record_id.startswith("<urn:uuid:")
    other, _, _ = split(read_all(data, "other.arc.gz"))
    assert other[0].record_id != first[0].record_id
    # WARC records keep their own WARC-Record-ID
    warc, _, _ = split(read_all(shared("warc", "warcio_example.warc.gz").read_bytes()))
    assert warc[0].record_id == split(read_all(shared("warc", "warcio_example.warc.gz").read_bytes()))[0][0].record_id


def _members(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, length, record type) of every gzip member of an intact WARC file."""
    from warcio.archiveiterator import ArchiveIterator

    out = []
    iterator = ArchiveIterator(io.BytesIO(data))
    for record in iterator:
        kind = record.rec_type
        record.content_stream().read()
        out.append((iterator.get_record_offset(), iterator.get_record_length(), kind))
    return out


@pytest.mark.parametrize("name", ["dolma_sample-0000.warc.gz", "resiliparse_warcfile.warc.gz"])
@pytest.mark.parametrize("seed", range(10))
def test_every_damaged_spot_loses_only_its_own_bytes(name, seed):
    """Bytes flipped in two or three records: every record whose bytes are intact is read,
    or (the record just before a damaged one, which gzip resync cannot always tell apart)
    kept whole in a failure; failures point inside the file and carry the damaged bytes."""
    import random

    clean = shared("warc", name).read_bytes()
    members = _members(clean)
    rng = random.Random(seed)
    hit = sorted(rng.sample(range(1, len(members) - 1), rng.choice((2, 3))))
    data = bytearray(clean)
    for i in hit:
        off, length, _ = members[i]
        pos = off + length // 2
        data[pos:pos + 8] = bytes(b ^ 0xFF for b in data[pos:pos + 8])
    records, _, fails = split(read_all(bytes(data), name))
    read_at = {r.offset for r in records}
    assert fails and all(0 <= f.offset < len(data) and f.raw for f in fails)
    spans = [(f.offset, f.offset + len(f.raw)) for f in fails]
    for i, (off, length, kind) in enumerate(members):
        if i in hit or kind not in ("response", "resource", "conversion"):
            continue
        kept_whole = any(a <= off and off + length <= b for a, b in spans)
        assert off in read_at or kept_whole, f"record at {off} lost (damage in members {hit})"
    for i in hit:  # the damaged bytes themselves are in failed/
        off, length, _ = members[i]
        assert any(a <= off + length // 2 < b for a, b in spans)


def _first_member_length(data: bytes) -> int:
    import zlib

    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    inflate.decompress(data)
    return len(data) - len(inflate.unused_data)


def _documents(records: list[RawRecord]) -> list[tuple]:
    return [(r.offset, r.record_id, r.url, r.payload, r.text) for r in records]


@pytest.mark.parametrize("name", ["dolma_sample-0000.warc.gz", "resiliparse_warcfile.warc.gz",
                                  "warcio_example.warc.gz", "cc_whirlwind.warc.gz", "warcio_example.arc.gz"])
def test_damaged_first_member_loses_only_its_own_bytes(name):
    """One flipped bit in the first gzip member (warcinfo, or an ARC's filedesc): every
    document after it is read as from the intact file; the member's bytes are one failure
    at offset 0 (or, for a flip in a gzip header field nobody checks, nothing fails).
    Before, 70 of 481 such positions made the whole file "not a WARC"."""
    import random

    clean = shared("warc", name).read_bytes()
    first = _first_member_length(clean)
    intact, skipped, _ = split(read_all(clean, name))
    rng = random.Random(name)
    positions = list(range(24)) + sorted(rng.sample(range(24, first), 24))  # gzip header, deflate start
    for pos in positions:
        data = bytearray(clean)
        data[pos] ^= 1 << rng.randrange(8)
        records, skips, fails = split(read_all(bytes(data), name))
        assert _documents(records) == _documents(intact), f"bit flipped at {pos}"
        if fails:
            assert [(f.error_type, f.offset, f.source) for f in fails] == [("corrupt_record", 0, name)], pos
            assert fails[0].raw == bytes(data[:first]) and name in fails[0].error
            assert skips == skipped[1:]
        else:
            assert skips == skipped


def _uncompressed(name: str) -> bytes:
    data = shared("warc", name).read_bytes()
    return gzip.decompress(data) if name.endswith(".gz") else data


def _blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(record offset, block start, block end) of every response record of an
    uncompressed WARC file (warcio's record length stops at the block's end)."""
    return [(off, data.index(b"\r\n\r\n", off) + 4, off + length)
            for off, length, kind in _members(data) if kind == "response"]


@pytest.mark.parametrize("name", ["dolma_sample-0000.warc.gz", "resiliparse_warcfile.warc.gz",
                                  "warcio_example-iana.org-chunked.warc"])
def test_damaged_uncompressed_record_fails_its_block_digest(name):
    """A flipped bit inside an uncompressed record's block (HTTP headers or payload; no
    gzip CRC to catch it): that record is a digest_mismatch failure with its raw bytes,
    every other document is read as from the intact file. Before, each was served as a
    document with damaged bytes."""
    import random

    clean = _uncompressed(name)
    intact = {r.offset: r for r in split(read_all(clean, "plain.warc"))[0]}
    blocks = _blocks(clean)
    rng = random.Random(name)
    for _ in range(8):
        off, block, end = rng.choice(blocks)
        pos = rng.randrange(block, end)
        data = bytearray(clean)
        data[pos] ^= 1 << rng.randrange(8)
        records, _, fails = split(read_all(bytes(data), "plain.warc"))
        assert [(f.error_type, f.offset) for f in fails] == [("digest_mismatch", off)], f"bit flipped at {pos}"
        assert fails[0].raw == bytes(data[off:end]) and "plain.warc" in fails[0].error
        assert _documents(records) == _documents([r for o, r in intact.items() if o != off])


@pytest.mark.parametrize("algorithm,encoding", [("sha1", "base16"), ("sha256", "base32"), ("sha256", "base16")])
def test_block_digest_forms_seen_in_the_wild_are_checked(algorithm, encoding):
    """The chunked response of warcio's sample with its WARC-Block-Digest rewritten as
    sha1 or sha256, base32 or hex: intact, it is read; one byte changed, it fails."""
    import base64
    import hashlib

    clean = _uncompressed("warcio_example-iana.org-chunked.warc")
    [(off, block, end)] = _blocks(clean)
    digest = hashlib.new(algorithm, clean[block:end]).digest()
    value = digest.hex() if encoding == "base16" else base64.b32encode(digest).decode()
    header = clean[off:block]
    start = header.index(b"WARC-Block-Digest: ")
    stop = header.index(b"\r\n", start)
    header = header[:start] + f"WARC-Block-Digest: {algorithm}:{value}".encode() + header[stop:]
    data = clean[:off] + header + clean[block:]
    records, _, fails = split(read_all(data, "plain.warc"))
    assert len(records) == 1 and not fails
    damaged = bytearray(data)
    damaged[len(clean[:off] + header) + 500] ^= 0x20
    records, _, fails = split(read_all(bytes(damaged), "plain.warc"))
    assert not records and [f.error_type for f in fails] == ["digest_mismatch"]


def _jsonl_lines(n: int) -> bytes:
    lines = []
    for i in range(n):
        obj = {"text": f"document {i} " + "word " * (i % 37)}
        if i % 3:
            obj["id"] = f"id{i}"
        lines.append(json.dumps(obj))
        if i % 11 == 0:
            lines.append("")  # blank lines are skipped
        if i == 40:
            lines.append("not json {")  # a bad line: one failure, wherever the cut falls
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("split_bytes", [1, 2, 7, 64, 100, 333, 4096, 10**9])
def test_jsonl_byte_ranges_read_every_line_once(tmp_path, split_bytes):
    """The records of a file read as byte ranges are those of the whole file: the same
    ids (no id field: from the byte offset), no line twice, none lost, whatever the cut."""
    from transforms.readers.files import split_ranges

    path = tmp_path / "docs.jsonl"
    path.write_bytes(_jsonl_lines(120))
    whole = list(iter_jsonl(str(path), TextFields(), "extract"))
    ref = FileRef(str(path), size=path.stat().st_size)
    parts = split_ranges(ref, split_bytes)
    assert len(parts) == max(1, -(-ref.size // split_bytes))
    assert parts[0].start == 0 and parts[-1].end in (-1, ref.size)
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))
    pieces = [item for part in parts for item in iter_jsonl(part.url, TextFields(), "extract", part.start, part.end)]
    key = lambda item: (type(item).__name__, item.offset)  # noqa: E731
    assert sorted(map(key, pieces)) == sorted(map(key, whole))
    assert ({r.record_id for r in pieces if isinstance(r, RawRecord)}
            == {r.record_id for r in whole if isinstance(r, RawRecord)})
    assert len([f for f in pieces if isinstance(f, Failure)]) == 1


def test_compressed_and_small_files_are_not_split(tmp_path):
    from transforms.readers.files import split_ranges

    assert split_ranges(FileRef("x.jsonl.gz", size=10**9), 1000) == [FileRef("x.jsonl.gz", size=10**9)]
    assert split_ranges(FileRef("x.jsonl.ZST", size=10**9), 1000) == [FileRef("x.jsonl.ZST", size=10**9)]
    assert split_ranges(FileRef("x.jsonl", size=1000), 1000) == [FileRef("x.jsonl", size=1000)]
    assert len(split_ranges(FileRef("x.jsonl", size=1001), 1000)) == 2
    with pytest.raises(ValueError, match="split_bytes"):
        split_ranges(FileRef("x.jsonl", size=10), 0)


def dolma_records(n: int = 6) -> list[dict]:
    """Dolma-format documents (id, text, source, added, created, metadata: {url, ...}) over
    real web sentences; the third lacks ``metadata.url``, the fifth has ``metadata: null``."""
    lines = shared("langid", "lingua_sentences", "en.txt").read_text(encoding="utf-8").splitlines()
    records = []
    for i in range(n):
        records.append({
            "id": f"cc-{i:04d}", "text": "\n".join(lines[5 * i:5 * i + 5]), "source": "common-crawl",
            "added": "2023-03-01T00:00:00Z", "created": f"2019-07-{10 + i}T12:00:00Z",
            "metadata": {"url": f"https://news.example.org/{i}", "language": "en", "warc_content_length": 1000 + i},
        })
    del records[2]["metadata"]["url"]
    records[4]["metadata"] = None
    return records


DOLMA_FIELDS = TextFields(url="metadata.url", fetched_at="created", lang="metadata.language")


def test_dolma_nested_fields_are_read_by_dotted_path_and_missing_ones_counted(tmp_path):
    """Dolma keeps the URL in ``metadata.url``: a dotted name reads it (issue 18, item 10),
    where ``url_field: metadata.url`` used to give every document an empty URL silently.
    A record without a field the config names is counted; the default names are not."""
    records = dolma_records()
    path = tmp_path / "dolma-0000.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    missing: list[str] = []
    items = list(iter_jsonl(str(path), DOLMA_FIELDS, "extract", on_missing=missing.append))
    assert all(isinstance(i, RawRecord) for i in items)
    assert [r.url for r in items] == ["https://news.example.org/0", "https://news.example.org/1", "",
                                      "https://news.example.org/3", "", "https://news.example.org/5"]
    assert [r.lang_hint for r in items] == ["en"] * 4 + [""] + ["en"]
    assert items[0].fetched_at == "2019-07-10T12:00:00Z" and items[0].record_id == "cc-0000"
    assert items[0].text == records[0]["text"]
    assert missing == ["url", "url", "lang"]  # records 2 and 4 (metadata null: its language too)
    flat: list[str] = []
    plain = list(iter_jsonl(str(path), TextFields(), "extract", on_missing=flat.append))
    assert [r.url for r in plain] == [""] * 6 and flat == []  # flat default names: as before


def test_a_nested_text_field_that_is_missing_fails_the_record_with_the_path(tmp_path):
    path = tmp_path / "nested.jsonl"
    path.write_text(json.dumps({"id": "a", "metadata": {"text": "inside"}}) + "\n"
                    + json.dumps({"id": "b", "metadata": {"title": "no text"}}) + "\n")
    items = list(iter_jsonl(str(path), TextFields(text="metadata.text"), "extract"))
    assert isinstance(items[0], RawRecord) and items[0].text == "inside"
    assert isinstance(items[1], Failure) and items[1].error_type == "bad_record"
    assert "line 2" in items[1].error and "field 'metadata.text' is missing or null" in items[1].error


def test_a_top_level_key_with_a_dot_wins_over_the_path():
    record = record_from_mapping({"text": "t", "metadata.url": "flat", "metadata": {"url": "nested"}},
                                 TextFields(url="metadata.url"), "f.jsonl", 0, "line 1")
    assert record.url == "flat"


def test_parquet_struct_columns_are_read_by_dotted_path(tmp_path):
    records = dolma_records()
    path = tmp_path / "dolma.parquet"
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=4)
    missing: list[str] = []
    items = list(iter_parquet(str(path), DOLMA_FIELDS, "extract", on_missing=missing.append))
    assert [r.url for r in items] == ["https://news.example.org/0", "https://news.example.org/1", "",
                                      "https://news.example.org/3", "", "https://news.example.org/5"]
    assert missing == ["url", "url", "lang"]
    fails = list(iter_parquet(str(path), TextFields(text="metadata.body"), "extract"))
    assert all(isinstance(f, Failure) and "'metadata.body' is missing" in f.error for f in fails) and len(fails) == 6
