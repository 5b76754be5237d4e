"""Small real token versions for the storage tests, and the ways a shard gets damaged."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from storage.shards import HEADER_SIZE, encode_shard

EOS = 0


def shard_docs(rng: np.random.Generator, next_token: int) -> tuple[list[np.ndarray], int]:
    docs = []
    for _ in range(int(rng.integers(3, 8))):
        n = int(rng.integers(20, 120))
        docs.append(np.append(np.arange(next_token, next_token + n, dtype=np.uint32), EOS).astype(np.uint32))
        next_token += n
    return docs, next_token


def make_version(root: Path, shards: int = 6, seed: int = 0, version: str = "v1",
                 extra: Optional[dict] = None, dtype: np.dtype = np.dtype(np.uint32)) -> str:
    """A version whose token at every position is unique (position + 1), EOS between
    documents; returns the index.json path. ``extra`` goes into index.json."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries, next_token = [], 1
    for s in range(shards):
        docs, next_token = shard_docs(rng, next_token)
        data, d, t, sha = encode_shard([doc.astype(dtype) for doc in docs], dtype)
        name = f"shard-{s:05d}.tfs"
        (root / name).write_bytes(data)
        entries.append({"name": name, "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha})
    index = {"version": version, "shards": entries, **(extra or {})}
    (root / "index.json").write_text(json.dumps(index))
    return str(root / "index.json")


def rewrite_entry(index_path: str, name: str, **fields) -> None:
    index = json.loads(Path(index_path).read_text())
    for entry in index["shards"]:
        if entry["name"] == name:
            entry.update(fields)
    Path(index_path).write_text(json.dumps(index))


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Writes ``data`` into the file's own inode and puts its mtime back, as ``rsync
    --inplace -t`` or ``cp --preserve`` onto an existing file do: inode, size and mtime as
    before. Repeated until the ctime moves (the filesystem stamps it with a clock tick)."""
    before = os.stat(path)
    while True:
        with open(path, "r+b") as fh:
            fh.write(data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        if after.st_ctime_ns != before.st_ctime_ns:
            return


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _reencode(path: Path, index_path: str, change: Callable[[np.ndarray], np.ndarray], dtype: np.dtype,
              index_fields: dict) -> None:
    """A consistent shard (own checksum, listed in the index) whose content breaks a rule."""
    from storage.shards import decode_shard

    shard = decode_shard(path.read_bytes())
    docs = [change(shard.doc(i).astype(np.uint32)) for i in range(shard.num_docs)]
    data, d, t, sha = encode_shard([doc.astype(dtype) for doc in docs], dtype)
    path.write_bytes(data)
    rewrite_entry(index_path, path.name, num_docs=d, num_tokens=t, num_bytes=len(data), sha256=sha)
    index = json.loads(Path(index_path).read_text())
    index.update(index_fields)
    Path(index_path).write_text(json.dumps(index))


def damage(kind: str, path: Path, index_path: str) -> None:
    """Damages the shard at ``path`` in one of the ways of ``DAMAGE``."""
    size = path.stat().st_size
    if kind == "payload byte":
        _flip(path, HEADER_SIZE + 10)
    elif kind == "document index byte":
        _flip(path, size - 9)
    elif kind == "header doc count":
        data = bytearray(path.read_bytes())
        struct.pack_into("<Q", data, 16, struct.unpack_from("<Q", data, 16)[0] + 1)
        path.write_bytes(bytes(data))
    elif kind == "header reserved byte":
        _flip(path, 90)
    elif kind == "header checksum field":
        _flip(path, 50)
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[:-5])
    elif kind == "truncated header":
        path.write_bytes(path.read_bytes()[:50])
    elif kind == "missing":
        os.remove(path)
    elif kind == "another shard's bytes":
        other = sorted(p for p in path.parent.glob("*.tfs") if p != path)[0]
        path.write_bytes(other.read_bytes())
    elif kind == "token beyond vocabulary":
        top = int(json.loads(Path(index_path).read_text()).get("vocab_size", 0))
        _reencode(path, index_path, lambda d: np.append(d, top), np.dtype(np.uint32), {})
    elif kind == "dtype differs from index":
        _reencode(path, index_path, lambda d: d, np.dtype(np.uint16), {"dtype": "uint32"})
    else:
        raise ValueError(kind)


DAMAGE = ["payload byte", "document index byte", "header doc count", "header reserved byte",
          "header checksum field", "truncated", "truncated header", "missing", "another shard's bytes",
          "token beyond vocabulary", "dtype differs from index"]
