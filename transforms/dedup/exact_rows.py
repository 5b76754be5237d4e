"""Document rows as Arrow (no Beam): what the exact dedup stage writes, without ``Doc``.

``conform`` gives a batch of a ``docs/`` file exactly the rows that
``doc_to_row(doc_from_row(row))`` would (the ``Doc`` round trip of the other stages):
batches our writers wrote already are such rows and pass as they are (columns in
``DOC_SCHEMA`` order, extra columns dropped); anything else (a missing column, a null
where ``doc_from_row`` fills a default, -0.0 where it gives 0.0) takes the round trip.
``split_rows`` cuts a conformed batch into kept rows and rejected rows with their reason.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import pyarrow as pa

from transforms.doc import DOC_SCHEMA, REJECTED_SCHEMA, doc_from_row, doc_to_row

_LOGGER = logging.getLogger(__name__)

# Columns ``doc_from_row`` reads with ``or <default>`` / a default for None: a null there
# (or -0.0 in a float, ``-0.0 or 0.0`` being 0.0) is not passed through as it is.
_COALESCED = ("url", "text", "source", "fetched_at", "title", "lang_hint", "lang", "lang_score", "lang2",
              "lang2_share", "labels", "dup_cluster", "token_count", "truncated", "repeats",
              "repeat_rules", "source_id")
_FLOATS = ("lang_score", "lang2_share")


def _passes_as_is(batch: pa.RecordBatch) -> bool:
    schema = batch.schema
    for field in DOC_SCHEMA:
        index = schema.get_field_index(field.name)
        if index < 0 or schema.field(index).type != field.type:
            return False
        column = batch.column(index)
        if field.name == "id" or field.name in _COALESCED:
            if column.null_count:
                return False
    for name in _FLOATS:
        values = batch.column(name).to_numpy(zero_copy_only=False)
        if np.signbit(values[values == 0]).any():
            return False
    labels = batch.column("labels").flatten()  # the label structs: None fields become ""
    return not any(labels.field(i).null_count for i in range(labels.type.num_fields))


def conform(batch: pa.RecordBatch) -> pa.Table:
    """The ``DOC_SCHEMA`` table of ``batch``'s rows as the ``Doc`` round trip writes them."""
    if _passes_as_is(batch):
        return pa.Table.from_arrays([batch.column(f.name) for f in DOC_SCHEMA], schema=DOC_SCHEMA)
    _LOGGER.debug("a batch of %d rows takes the Doc round trip", batch.num_rows)
    return pa.Table.from_pylist([doc_to_row(doc_from_row(row)) for row in batch.to_pylist()], schema=DOC_SCHEMA)


def split_rows(table: pa.Table, rejected: np.ndarray, reasons: Sequence[str],
               details: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """(kept rows, rejected rows with ``reason`` and ``reason_detail``) of a conformed
    ``table``; ``rejected`` are row positions in it, ``reasons``/``details`` theirs."""
    mask = np.ones(table.num_rows, dtype=bool)
    mask[rejected] = False
    kept = table.filter(pa.array(mask)) if len(rejected) else table
    dropped = table.take(pa.array(rejected, type=pa.int64()))
    dropped = pa.Table.from_arrays(
        dropped.columns + [pa.array(reasons, type=pa.string()), pa.array(details, type=pa.string())],
        schema=REJECTED_SCHEMA)
    return kept, dropped
