"""Tiers: verified, atomic, resumable copies between a local folder and a real S3 (moto)."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import boto3
import fsspec
import numpy as np
import pytest

from storage.shards import encode_shard
from storage.tiers import (StorageConfig, TierError, copy_version, delete_version, gc, list_versions,
                           main, verify_version, version_files)
from tests.s3server import s3_endpoint, s3_env  # noqa: F401 (fixtures)


def make_version(root: Path, version: str, shards: int = 4, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    directory = root / version
    (directory / "documents").mkdir(parents=True)
    entries = []
    for i in range(shards):
        docs = [rng.integers(0, 30000, size=rng.integers(50, 3000)).astype(np.uint16) for _ in range(20)]
        data, n_docs, n_tokens, sha = encode_shard(docs, np.dtype(np.uint16))
        name = f"shard-{i:05d}-of-{shards:05d}.tfs"
        (directory / name).write_bytes(data)
        documents = f"documents/shard-{i:05d}-of-{shards:05d}.parquet"
        (directory / documents).write_bytes(b"PAR1 stand-in %d" % i)
        entries.append({"name": name, "num_docs": n_docs, "num_tokens": n_tokens, "num_bytes": len(data),
                        "sha256": sha, "tier": "warm", "documents": documents})
    index = {"version": version, "index_version": 2, "shards": entries}
    (directory / "index.json").write_text(json.dumps(index))
    return index


def bucket() -> str:
    name = f"cold-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def test_demote_to_s3_with_storage_class_and_sse_then_promote(tmp_path, s3_env):
    make_version(tmp_path / "warm", "v1")
    storage = StorageConfig(warm=str(tmp_path / "warm"), cold=f"s3://{bucket()}/tokens",
                            hot=str(tmp_path / "hot"), s3_storage_class="STANDARD_IA", s3_sse="AES256")
    result = copy_version("v1", storage.warm, storage.cold, storage)
    assert result["sent"] == 8 and result["skipped"] == 0  # 4 shards + their 4 documents tables
    assert verify_version(storage.cold, "v1", storage) == []
    s3 = boto3.client("s3")
    key = storage.cold[len("s3://"):].split("/", 1)
    head = s3.head_object(Bucket=key[0], Key=f"{key[1]}/v1/shard-00000-of-00004.tfs")
    assert head.get("StorageClass") == "STANDARD_IA" and head.get("ServerSideEncryption") == "AES256"
    promoted = copy_version("v1", storage.cold, storage.hot, storage)
    assert promoted["sent"] == 8
    assert (tmp_path / "hot" / "v1" / "shard-00003-of-00004.tfs").read_bytes() == \
        (tmp_path / "warm" / "v1" / "shard-00003-of-00004.tfs").read_bytes()


def test_resumed_copy_sends_only_what_is_missing(tmp_path, s3_env):
    make_version(tmp_path / "warm", "v1")
    storage = StorageConfig(warm=str(tmp_path / "warm"), cold=f"s3://{bucket()}/t")
    fs = fsspec.filesystem("s3")
    for name in ("shard-00000-of-00004.tfs", "shard-00001-of-00004.tfs"):  # "killed" after two shards
        fs.put(str(tmp_path / "warm" / "v1" / name), f"{storage.cold}/v1/{name}")
    assert list_versions(storage.cold, storage) == []  # no index.json yet: invisible
    result = copy_version("v1", storage.warm, storage.cold, storage)
    assert (result["sent"], result["skipped"]) == (6, 2)
    assert list_versions(storage.cold, storage) == ["v1"]


def test_version_files_per_shard_documents_legacy_and_hostile_names():
    shards = [{"name": f"shard-{i:05d}-of-00002.tfs", "sha256": f"s{i}",
               "documents": f"documents/shard-{i:05d}-of-00002.parquet"} for i in range(2)]
    assert version_files({"index_version": 2, "shards": shards}) == [
        ("shard-00000-of-00002.tfs", "s0"), ("shard-00001-of-00002.tfs", "s1"),
        ("documents/shard-00000-of-00002.parquet", None), ("documents/shard-00001-of-00002.parquet", None)]
    legacy = [{k: v for k, v in s.items() if k != "documents"} for s in shards]
    assert version_files({"index_version": 1, "shards": legacy})[-1] == ("documents/part-00000-of-00001.parquet", None)
    assert version_files({"shards": legacy})[-1] == ("documents/part-00000-of-00001.parquet", None)
    for bad in ("../../etc/passwd", "/abs/shard.tfs", "documents/../../x", "a//b", "", "./x"):
        with pytest.raises(TierError, match="outside its version"):
            version_files({"index_version": 2, "shards": [{"name": bad, "sha256": "s"}]})
        with pytest.raises(TierError, match="outside its version"):
            version_files({"index_version": 2, "shards": [dict(shards[0], documents=bad)]})


def test_corruption_detected_in_source_and_destination(tmp_path, s3_env):
    make_version(tmp_path / "warm", "v1")
    storage = StorageConfig(warm=str(tmp_path / "warm"), cold=f"s3://{bucket()}/t")
    copy_version("v1", storage.warm, storage.cold, storage)
    fs = fsspec.filesystem("s3")
    path = f"{storage.cold}/v1/shard-00002-of-00004.tfs"
    data = bytearray(fs.cat(path))
    data[500] ^= 0x01
    fs.pipe(path, bytes(data))
    problems = verify_version(storage.cold, "v1", storage)
    assert len(problems) == 1 and "shard-00002-of-00004.tfs: checksum mismatch" in problems[0]
    shard = tmp_path / "warm" / "v1" / "shard-00001-of-00004.tfs"
    raw = bytearray(shard.read_bytes())
    raw[300] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(TierError, match="shard-00001-of-00004.tfs"):
        copy_version("v1", storage.warm, str(tmp_path / "hot"), storage)
    assert not list((tmp_path / "hot" / "v1").glob("shard-00001*"))  # nothing partial left visible


def test_gc_archives_old_versions_and_cli(tmp_path, s3_env, capsys):
    for i, version in enumerate(("v1", "v2", "v3")):
        make_version(tmp_path / "out" / "tokens", version, shards=2, seed=i)
    cold = f"s3://{bucket()}/archive"
    storage = StorageConfig(cold=cold, keep_warm_versions=2)
    moved = gc(str(tmp_path / "out"), storage)
    assert [m["version"] for m in moved] == ["v1"]
    assert list_versions(str(tmp_path / "out" / "tokens"), storage) == ["v2", "v3"]
    assert list_versions(cold, storage) == ["v1"]
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs: []\ncrawl:\n  seeds: [http://x]\n"
                      f"storage:\n  cold: {cold}\n")
    assert main(["status", "--config", str(config)]) == 0
    assert "v2, v3" in capsys.readouterr().out
    assert main(["verify", "--config", str(config), "--tier", "cold"]) == 0
    assert main(["promote", "--config", str(config), "--version", "v1"]) == 0
    assert list_versions(str(tmp_path / "out" / "tokens"), storage) == ["v1", "v2", "v3"]


def test_storage_config_validates_and_has_no_credentials():
    with pytest.raises(ValueError, match="s3_sse"):
        StorageConfig(s3_sse="rot13")
    with pytest.raises(ValueError, match="aws:kms"):
        StorageConfig(s3_sse_kms_key_id="k")
    assert not any("key" in f or "secret" in f for f in StorageConfig.__dataclass_fields__
                   if f != "s3_sse_kms_key_id")
