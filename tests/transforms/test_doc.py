"""The document record's Parquet rows: round trip, and files written before a column existed."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.stages import ReadDocs
import transforms.routing  # noqa: F401  (registers the RowCoders)
from transforms.doc import DOC_SCHEMA, Doc, Provenance, doc_from_row, doc_to_row

MIXED = Doc(id="a", url="http://x/a", text="Kopf und Text", source="s", fetched_at="", lang="de",
            lang_score=0.74, lang2="en", lang2_share=0.2)


def test_row_round_trip_keeps_the_second_language():
    row = doc_to_row(MIXED)
    assert list(row) == DOC_SCHEMA.names
    assert doc_from_row(row) == MIXED


def test_files_without_the_second_language_columns_still_read(tmp_path, beam_options):
    old_schema = pa.schema([f for f in DOC_SCHEMA if f.name not in ("lang2", "lang2_share")])
    row = {k: v for k, v in doc_to_row(MIXED).items() if k in old_schema.names}
    path = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), path)
    expected = Doc(id="a", url="http://x/a", text="Kopf und Text", source="s", fetched_at="", lang="de",
                   lang_score=0.74)
    with TestPipeline(options=beam_options) as p:
        assert_that(p | ReadDocs([str(path)]), equal_to([expected]))


SYNTHETIC = Doc(id="s1", url="", text="Rewritten.", source="synthetic", fetched_at="", repeats=3,
                repeat_rules=("top_quality", "label:topic=science"),
                provenance=Provenance(parent_id="a", parent_source="in.jsonl", template="wikipedia",
                                      model="tiny", parameters='{"max_tokens": 64}', chunks=2))


def test_augment_fields_round_trip_in_parquet_rows_and_beam_rows():
    row = doc_to_row(SYNTHETIC)
    assert list(row) == DOC_SCHEMA.names
    assert doc_from_row(row) == SYNTHETIC
    table = pa.Table.from_pylist([row], schema=DOC_SCHEMA)
    assert doc_from_row(table.to_pylist()[0]) == SYNTHETIC
    coder = beam.coders.registry.get_coder(Doc)
    assert coder.decode(coder.encode(SYNTHETIC)) == SYNTHETIC


def test_rows_written_before_the_augment_columns_read_as_one_repeat():
    row = {k: v for k, v in doc_to_row(MIXED).items() if k not in ("repeats", "repeat_rules", "provenance")}
    doc = doc_from_row(row)
    assert doc.repeats == 1 and doc.repeat_rules == () and doc.provenance is None
