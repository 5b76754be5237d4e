"""The field names of a JSONL file's first record or a Parquet file's schema, and the
configured field names they lack: checked before a job runs.

A misspelt ``text_field`` used to be found only by the extract stage, every record of
the file failing one by one (142 of 187 in the red team's run) after the stage ran. The
first record of a file shows it at once. Names follow the readers' rules
(``transforms.readers.tabular.field_value``): a top-level key of exactly that name, else
a dotted path through nested objects (Parquet: struct columns).

Only the first non-blank line of a JSONL file is read (at most ``MAX_FIRST_LINE_BYTES``;
compressed files through the same decompression as the reader). A first line that is
not a JSON object, and a file that cannot be opened or decompressed, give no names
(``None``): the reader reports them as failed records, with the file and the offset.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.readers.files import open_decompressed, storage_options_for
from transforms.readers.tabular import TextFields

_LOGGER = logging.getLogger(__name__)

MAX_FIRST_LINE_BYTES = 16 * 1024 * 1024  # a longer first line is not checked
MAX_BLANK_LINES = 1000  # blank lines skipped before the first record
MAX_DEPTH = 8  # nested names listed below a top-level key


@dataclass(frozen=True)
class FieldNames:
    """The fields a file's records have: ``top`` the top-level names, ``paths`` those and
    the dotted paths below them; ``where`` says where they were read."""

    where: str
    top: tuple[str, ...]
    paths: frozenset[str]


def _paths(obj: dict[str, Any], prefix: str = "", depth: int = 0) -> Iterator[str]:
    """Every key of ``obj`` and, below it, the dotted paths of nested objects."""
    for key, value in obj.items():
        yield prefix + str(key)
        if isinstance(value, dict) and depth < MAX_DEPTH:
            yield from _paths(value, f"{prefix}{key}.", depth + 1)


def _struct_paths(fields: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """Every column of a schema and, below a struct column, the dotted paths of its fields."""
    for item in fields:
        yield prefix + item.name
        if pa.types.is_struct(item.type) and depth < MAX_DEPTH:
            yield from _struct_paths(list(item.type), f"{prefix}{item.name}.", depth + 1)


def jsonl_first_record(url: str) -> Optional[tuple[int, dict[str, Any]]]:
    """(line number, object) of the first non-blank line of a JSONL file; None when that
    line is not a JSON object, is over the size limit, or the file cannot be read."""
    try:
        with open_decompressed(url) as fh:
            for number in range(1, MAX_BLANK_LINES + 1):
                line = fh.readline(MAX_FIRST_LINE_BYTES + 1)
                if not line or len(line) > MAX_FIRST_LINE_BYTES:
                    return None
                if line.strip():
                    obj = json.loads(line)
                    return (number, obj) if isinstance(obj, dict) else None
    except Exception as exc:  # damaged compression, invalid JSON, a network error
        _LOGGER.debug("first record of %s not read: %s", url, exc)
    return None


def field_names(url: str, fmt: str) -> Optional[FieldNames]:
    """The fields of a file's records, from the first record of a JSONL file or a
    Parquet file's schema; None when they cannot be known (see the module's docstring)."""
    if fmt == "jsonl":
        first = jsonl_first_record(url)
        if first is None:
            return None
        line, obj = first
        return FieldNames(f"the first record of {url} (line {line})", tuple(map(str, obj)),
                          frozenset(_paths(obj)))
    try:
        with fsspec.open(url, "rb", **storage_options_for(url)) as fh:
            schema = pq.ParquetFile(fh).schema_arrow
    except Exception as exc:  # not Parquet, unreadable: the reader fails the file
        _LOGGER.debug("schema of %s not read: %s", url, exc)
        return None
    return FieldNames(f"the schema of {url}", tuple(schema.names), frozenset(_struct_paths(schema)))


def checked_roles(fields: TextFields) -> dict[str, str]:
    """role → field name of the fields a file must have: the text always, the id and URL
    when the config names them (not left at their default names, which a source may lack)."""
    named = fields.expected()
    return {"text": fields.text, **{role: named[role] for role in ("id", "url") if role in named}}


def missing_fields(fields: TextFields, names: FieldNames) -> dict[str, str]:
    """role → configured name of each checked field (``checked_roles``) ``names`` lacks."""
    return {role: name for role, name in checked_roles(fields).items() if name not in names.paths}


def _listed(items: list[str], limit: int) -> str:
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def describe_names(names: FieldNames, wanted: str, limit: int = 40) -> str:
    """The top-level names, and for a dotted ``wanted`` the names one level below its
    longest present prefix (``meta: meta.source, meta.created``); at most ``limit`` each."""
    text = _listed(list(names.top), limit) or "none"
    parts = wanted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in names.paths:
            below = sorted(n for n in names.paths
                           if n.startswith(prefix + ".") and "." not in n[len(prefix) + 1:])
            return text + f"; {prefix}: {_listed(below, limit) if below else 'not an object'}"
    return text
