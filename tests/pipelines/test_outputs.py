"""The Parquet writer of every stage's outputs: one file per bundle, renamed into place by
one finalize step; no side input (so the rows never cross to a portable runner: that part
is tested on Flink in tests/engines)."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines import outputs
from pipelines.outputs import WriteParquet, _WriteBundleFiles, finalize_parts, part_name

SCHEMA = pa.schema([("id", pa.string()), ("n", pa.int64())])


def _row(i: int) -> dict:
    return {"id": f"d{i}", "n": i}


def _names_exist(paths: list[str]) -> None:
    """The transform's output: the names of the parts it wrote (checked in the pipeline)."""
    assert paths and all(p.startswith("part-") for p in paths), paths


def _write(directory: Path, items: list[int], expected=None) -> None:
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        files = (p | beam.Create(items, reshuffle=False) | "Write" >> WriteParquet(str(directory), SCHEMA, _row))
        assert_that(files | beam.Map(lambda f: Path(f).name), equal_to(expected) if expected else _names_exist)


def _rows(directory: Path) -> list[dict]:
    return [r for f in sorted(directory.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_every_row_once_in_named_parts_and_no_temporary_folder_left(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    _write(out, list(range(2500)))
    names = sorted(p.name for p in out.iterdir())
    assert all(n.startswith("part-") and n.endswith(f"-of-{len(names):05d}.parquet") for n in names)
    assert sorted(_rows(out), key=lambda r: r["n"]) == [_row(i) for i in range(2500)]
    meta = pq.ParquetFile(out / names[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_schema(out / names[0]).equals(SCHEMA)


def test_bundles_each_write_a_file_and_parts_number_them(tmp_path: Path) -> None:
    out = tmp_path / "multi"
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        (p | beam.Create(list(range(300))) | beam.Reshuffle()
         | beam.Map(lambda i: i) | "Write" >> WriteParquet(str(out), SCHEMA, _row))
    parts = sorted(out.glob("*.parquet"))
    assert [p.name for p in parts] == [Path(part_name(str(out), i, len(parts))).name for i in range(len(parts))]
    assert sorted(r["n"] for r in _rows(out)) == list(range(300))


def test_no_rows_still_writes_one_empty_part_with_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "rejected"
    _write(out, [], expected=["part-00000-of-00001.parquet"])
    table = pq.read_table(out / "part-00000-of-00001.parquet")
    assert table.num_rows == 0 and table.schema.equals(SCHEMA)
    assert [p.name for p in out.iterdir()] == ["part-00000-of-00001.parquet"]


def test_row_groups_follow_the_byte_budget(tmp_path: Path, monkeypatch) -> None:
    writer = _WriteBundleFiles(str(tmp_path / ".temp"), SCHEMA, _row, row_group_bytes=1, batch_rows=10)
    writer.start_bundle()
    for i in range(35):
        writer.process(i)
    (value,) = list(writer.finish_bundle())
    meta = pq.ParquetFile(value.value).metadata
    # a batch of 10 rows is over the 1-byte budget: a row group each, the last of 5 rows
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [10, 10, 10, 5]
    assert Path(value.value).name.startswith(".")  # hidden: never counted as an output
    big = _WriteBundleFiles(str(tmp_path / ".temp2"), SCHEMA, _row, row_group_bytes=1 << 30, batch_rows=10)
    big.start_bundle()
    for i in range(35):
        big.process(i)
    (value,) = list(big.finish_bundle())
    assert pq.ParquetFile(value.value).metadata.num_row_groups == 1


def test_an_empty_bundle_writes_nothing(tmp_path: Path) -> None:
    writer = _WriteBundleFiles(str(tmp_path / ".temp"), SCHEMA, _row)
    writer.start_bundle()
    assert list(writer.finish_bundle()) == []
    assert not (tmp_path / ".temp").exists()


def _temp_files(temp: Path, count: int) -> list[str]:
    temp.mkdir(parents=True)
    paths = []
    for i in range(count):
        path = temp / f".{i:02d}.parquet"
        pq.write_table(pa.Table.from_pylist([_row(i)], schema=SCHEMA), path)
        paths.append(str(path))
    return paths


def test_finalize_renames_in_sorted_order_removes_leftovers_and_can_run_again(tmp_path: Path) -> None:
    out, temp = tmp_path / "docs", tmp_path / "docs" / ".temp-x"
    paths = _temp_files(temp, 3)
    (temp / ".failed-attempt.parquet").write_bytes(b"partial")  # a retried bundle's leftover
    finals = finalize_parts(str(out), str(temp), SCHEMA, reversed(paths))
    assert [Path(f).name for f in finals] == [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    assert [pq.read_table(f).to_pylist() for f in finals] == [[_row(0)], [_row(1)], [_row(2)]]
    assert not temp.exists()
    # the finalize step retried after it renamed everything: the same parts, no error
    assert finalize_parts(str(out), str(temp), SCHEMA, paths) == finals
    assert sorted(p.name for p in out.iterdir()) == [Path(f).name for f in finals]


def test_finalize_fails_loudly_when_a_committed_file_is_gone(tmp_path: Path) -> None:
    out, temp = tmp_path / "docs", tmp_path / "docs" / ".temp-y"
    paths = _temp_files(temp, 2)
    Path(paths[1]).unlink()
    with pytest.raises(IOError, match=r"\.01\.parquet: a committed bundle's file is missing and .*part-00001-of-00002"):
        finalize_parts(str(out), str(temp), SCHEMA, paths)


def test_the_write_takes_no_side_input() -> None:
    """A side input ends the fused stage on the portable job servers: the rows would cross
    to the runner (the reason this writer exists)."""
    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    _ = p | beam.Create([1]) | "Write" >> WriteParquet("/tmp/unused", SCHEMA, _row)
    proto = p.to_runner_api()
    with_side = [t.unique_name for t in proto.components.transforms.values()
                 if t.spec.urn == "beam:transform:pardo:v1" and
                 beam.portability.api.beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).side_inputs]
    assert with_side == []
    assert outputs.ROW_GROUP_BYTES == 8 << 20


def test_tables_cannot_be_split_by_language():
    """Arrow tables (the exact-dedup path) carry no per-document language to route by."""
    from pipelines.outputs import WriteStageOutputs

    with pytest.raises(ValueError, match="per-language folders need Doc elements"):
        WriteStageOutputs("out", "dedup_exact", languages=("en",), tables=True)
