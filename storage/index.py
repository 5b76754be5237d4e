"""``index.json`` of a token version: the names it may hold, the files it lists, its versions.

Every name read from an index becomes part of a path (``<tier>/<version>/<name>``, the hot
cache's ``<hot>/_cache/<version>-<url hash>/<name>``), so each one is checked against a fixed
pattern before use: a version is one path component, a shard is ``<stem>.tfs``, a documents
table is ``documents/<stem>.parquet``, the tokenizer is ``<stem>.model``; a stem starts with a
letter or digit and holds only letters, digits, ``.``, ``_`` and ``-``. So ``..``, ``/``,
``\\``, empty names and absolute paths never reach a filesystem call.

Index versions: 1 (one ``documents/part-00000-of-00001.parquet`` for the whole version),
2 (a documents table per shard, ``shards[].documents``), 3 (also the tokenizer inside the
version, ``tokenizer.file``, with its special ids, and a sha256 of every documents table).
Readers of every version are kept; writers write ``INDEX_VERSION``.

Upsampling (optional fields of version 3, 0 when absent): ``repeat_docs`` and
``repeat_tokens``, at the top and per shard, are the entries (and their tokens) that are
a document's copy 1 or later (``storage.repeats``); ``num_docs`` and ``num_tokens`` count
every entry. A per-shard value above the shard's own count, or a top-level value other
than the sum over the shards, is refused.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Optional

_LOGGER = logging.getLogger(__name__)

__all__ = ["DOCUMENTS_PATTERN", "DTYPES", "INDEX_VERSION", "IndexFileError", "LEGACY_DOCUMENTS",
           "MAX_TOKEN_ID", "READABLE_INDEX_VERSIONS", "SHARD_PATTERN", "TOKENIZER_PATTERN", "VERSION_PATTERN",
           "VersionFile", "check_documents_name", "check_shard_name", "check_tokenizer_name",
           "check_version_name", "index_version", "repeat_counts", "special_ids", "validate_index",
           "version_files", "vocab_size_of"]

INDEX_VERSION = 3
READABLE_INDEX_VERSIONS = (1, 2, 3)
LEGACY_DOCUMENTS = "documents/part-00000-of-00001.parquet"  # index version 1

_STEM = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SHARD_PATTERN = re.compile(_STEM + r"\.tfs")
DOCUMENTS_PATTERN = re.compile(r"documents/" + _STEM + r"\.parquet")
TOKENIZER_PATTERN = re.compile(_STEM + r"\.model")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_XXH3_128 = re.compile(r"[0-9a-f]{32}")
DTYPES = {"uint16": 2, "uint32": 4}
MAX_TOKEN_ID = (1 << 32) - 1  # uint32 ids


class IndexFileError(ValueError):
    """An index.json with a hostile name, a missing or mistyped field; the message names
    the index and the field."""


@dataclass(frozen=True)
class VersionFile:
    """A file of a version other than index.json. ``kind``: ``shard`` (``sha256`` is the
    checksum of every byte after the 96-byte header, as in the shard's header), ``file``
    (``sha256`` of the whole file) or ``unchecked`` (older indexes record no checksum)."""

    name: str
    sha256: Optional[str]
    kind: str
    num_bytes: Optional[int] = None


def _shown(value: Any) -> str:
    """``repr(value)``, cut: a hostile index can hold megabytes where a name belongs."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check(pattern: re.Pattern[str], name: Any, what: str, where: str) -> str:
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise IndexFileError(f"{where}: {what} {_shown(name)} is not a plain file name inside its version "
                             f"(outside its version or not of the form {pattern.pattern})")
    return name


def check_version_name(name: Any, where: str = "index.json") -> str:
    """A version name: one path component of letters, digits, ``.``, ``_``, ``-``."""
    return _check(VERSION_PATTERN, name, "version", where)


def check_shard_name(name: Any, where: str = "index.json") -> str:
    return _check(SHARD_PATTERN, name, "shard name", where)


def check_documents_name(name: Any, where: str = "index.json") -> str:
    return _check(DOCUMENTS_PATTERN, name, "documents table", where)


def check_tokenizer_name(name: Any, where: str = "index.json") -> str:
    return _check(TOKENIZER_PATTERN, name, "tokenizer file", where)


def _count(entry: dict[str, Any], key: str, where: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IndexFileError(f"{where}: {key} must be an integer >= 0, got {_shown(value)}")
    return value


def _sha(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise IndexFileError(f"{where}: {key} must be 64 lowercase hex digits, got {_shown(value)}")
    return value


def _xxh3(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _XXH3_128.fullmatch(value):
        raise IndexFileError(f"{where}: xxh3_128 must be 32 lowercase hex digits, got {_shown(value)}")
    return value


def index_version(index: dict[str, Any], where: str = "index.json") -> int:
    """The index's format version (1 when absent: version 1 wrote none); anything but one
    of ``READABLE_INDEX_VERSIONS`` as a JSON integer is an ``IndexFileError``."""
    value = index.get("index_version", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value not in READABLE_INDEX_VERSIONS:
        newer = isinstance(value, int) and not isinstance(value, bool) and value > INDEX_VERSION
        raise IndexFileError(f"{where}: index_version {_shown(value)} is not one of {READABLE_INDEX_VERSIONS} "
                             + ("(written by a newer tokenfactory: upgrade to read it)" if newer else
                                "(not a version any tokenfactory writes: the index is damaged; rerun tokenize "
                                "or restore the version from another tier)"))
    return value


def validate_index(index: Any, where: str = "index.json") -> dict[str, Any]:
    """``index`` itself when every name and field a reader uses is sound, else
    ``IndexFileError`` naming ``where`` and the field."""
    if not isinstance(index, dict) or not isinstance(index.get("shards"), list):
        raise IndexFileError(f"{where}: not a token index (no shards list)")
    index_version(index, where)
    if "version" in index:
        check_version_name(index["version"], where)
    dtype = index.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype not in DTYPES):
        raise IndexFileError(f"{where}: dtype must be one of {sorted(DTYPES)}, got {_shown(dtype)}")
    seen: set[str] = set()
    for i, entry in enumerate(index["shards"]):
        at = f"{where}: shards[{i}]"
        if not isinstance(entry, dict):
            raise IndexFileError(f"{at}: not an object")
        name = check_shard_name(entry.get("name"), at)
        if name in seen:
            raise IndexFileError(f"{at}: shard {name} is listed twice")
        seen.add(name)
        for key in ("num_docs", "num_tokens", "num_bytes"):
            _count(entry, key, f"{at} ({name})")
        _sha(entry.get("sha256"), "sha256", f"{at} ({name})")
        if entry.get("xxh3_128") is not None:
            _xxh3(entry["xxh3_128"], f"{at} ({name})")
        if "documents" in entry:
            check_documents_name(entry["documents"], at)
        if entry.get("documents_sha256") is not None:
            _sha(entry["documents_sha256"], "documents_sha256", f"{at} ({name})")
        for key, whole in (("repeat_docs", "num_docs"), ("repeat_tokens", "num_tokens")):
            if key in entry and _count(entry, key, f"{at} ({name})") > entry[whole]:
                raise IndexFileError(f"{at} ({name}): {key} {entry[key]} exceeds {whole} {entry[whole]}")
    _check_repeat_totals(index, where)
    _check_tokenizer(index.get("tokenizer"), where)
    vocab = vocab_size_of(index, where)
    if vocab is not None and not 0 < vocab <= MAX_TOKEN_ID + 1:
        raise IndexFileError(f"{where}: vocab_size {vocab} outside 1..{MAX_TOKEN_ID + 1}")
    return index


def _check_tokenizer(tokenizer: Any, where: str) -> None:
    """``tokenizer``: absent, or an object whose ``file`` (version 3) is a plain name with
    its sha256; a ``sha256`` without a file (version 2) is checked too, as readers compare
    it across datasets."""
    if tokenizer is None:
        return
    if not isinstance(tokenizer, dict):
        raise IndexFileError(f"{where}: tokenizer must be an object, got {_shown(tokenizer)}")
    if tokenizer.get("file") is not None:
        check_tokenizer_name(tokenizer["file"], f"{where}: tokenizer")
        _sha(tokenizer.get("sha256"), "tokenizer.sha256", where)
    elif tokenizer.get("sha256") is not None:
        _sha(tokenizer["sha256"], "tokenizer.sha256", where)


def _check_repeat_totals(index: dict[str, Any], where: str) -> None:
    """Top-level ``repeat_docs``/``repeat_tokens``: counts equal to the sum over the shards."""
    for key in ("repeat_docs", "repeat_tokens"):
        if key not in index:
            continue
        value = _count(index, key, where)
        total = sum(entry.get(key, 0) for entry in index["shards"])
        if value != total:
            raise IndexFileError(f"{where}: {key} {value} is not the sum over the shards ({total})")


def repeat_counts(entry: dict[str, Any]) -> tuple[int, int]:
    """(``repeat_docs``, ``repeat_tokens``) of a validated index or shard entry: 0 when an
    index written before upsampling has none."""
    return int(entry.get("repeat_docs", 0)), int(entry.get("repeat_tokens", 0))


def vocab_size_of(index: dict[str, Any], where: str = "index.json") -> Optional[int]:
    """The tokenizer's vocabulary size if the index records it (version 3: ``tokenizer``;
    version 2: top-level ``vocab_size``), else None; ``where`` names the index in errors."""
    tokenizer = index.get("tokenizer")
    value = tokenizer.get("vocab_size") if isinstance(tokenizer, dict) else None
    value = index.get("vocab_size") if value is None else value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise IndexFileError(f"{where}: vocab_size must be an integer, got {_shown(value)}")
    return value


def special_ids(index: dict[str, Any]) -> dict[str, Optional[int]]:
    """The tokenizer's ``eos_id``, ``bos_id``, ``pad_id``, ``unk_id`` (None when absent or
    not recorded: indexes before version 3 have none) and ``vocab_size``."""
    tokenizer = index.get("tokenizer") if isinstance(index.get("tokenizer"), dict) else {}
    out: dict[str, Optional[int]] = {}
    for key in ("eos_id", "bos_id", "pad_id", "unk_id"):
        value = tokenizer.get(key)
        out[key] = value if isinstance(value, int) and value >= 0 else None
    out["vocab_size"] = vocab_size_of(index)
    return out


def version_files(index: dict[str, Any], where: str = "index.json") -> list[VersionFile]:
    """Every file of the version but index.json, checked: shards, documents tables, the
    tokenizer (version 3). Version 1 lists one documents table for the whole version."""
    validate_index(index, where)
    files = [VersionFile(s["name"], s["sha256"], "shard", int(s["num_bytes"])) for s in index["shards"]]
    if index_version(index) < 2:
        files.append(VersionFile(LEGACY_DOCUMENTS, None, "unchecked"))
    else:
        files += [VersionFile(s["documents"], s.get("documents_sha256"),
                              "file" if s.get("documents_sha256") else "unchecked")
                  for s in index["shards"] if "documents" in s]
    tokenizer = index.get("tokenizer")
    if isinstance(tokenizer, dict) and tokenizer.get("file"):
        files.append(VersionFile(tokenizer["file"], tokenizer["sha256"], "file"))
    return files
