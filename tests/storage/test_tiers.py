"""Tiers: verified, atomic, resumable copies between a local folder and a real S3 (moto)."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import boto3
import fsspec
import numpy as np
import pytest

from pipelines.tiers import main
from storage.shards import encode_shard
from storage.tiers import (StorageConfig, TierError, copy_version, delete_version, gc, list_versions,
                           remove_stale_incomplete, verify_version, version_files)
from tests.s3server import s3_endpoint, s3_env  # noqa: F401 (fixtures)
from tests.storage.datasets import damage


def make_version(root: Path, version: str, shards: int = 4, seed: int = 0, index_version: int = 2) -> dict:
    """A version of index version 2 (documents tables, no tokenizer) or 3 (the tokenizer
    inside, checksums of every file, the vocabulary size)."""
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
        if index_version >= 3:
            entries[-1]["documents_sha256"] = hashlib.sha256(b"PAR1 stand-in %d" % i).hexdigest()
    index = {"version": version, "index_version": index_version, "dtype": "uint16", "shards": entries}
    if index_version >= 3:
        model = b"sentencepiece stand-in " + version.encode()
        (directory / "tokenizer.model").write_bytes(model)
        index["tokenizer"] = {"path": "elsewhere/tokenizer.model", "file": "tokenizer.model",
                              "sha256": hashlib.sha256(model).hexdigest(), "vocab_size": 30000, "eos_id": 2}
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
    shards = [{"name": f"shard-{i:05d}-of-00002.tfs", "sha256": f"{i:064x}", "num_docs": 1, "num_tokens": 1,
               "num_bytes": 114, "documents": f"documents/shard-{i:05d}-of-00002.parquet"} for i in range(2)]
    assert [(f.name, f.sha256) for f in version_files({"index_version": 2, "shards": shards})] == [
        ("shard-00000-of-00002.tfs", f"{0:064x}"), ("shard-00001-of-00002.tfs", f"{1:064x}"),
        ("documents/shard-00000-of-00002.parquet", None), ("documents/shard-00001-of-00002.parquet", None)]
    legacy = [{k: v for k, v in s.items() if k != "documents"} for s in shards]
    assert version_files({"index_version": 1, "shards": legacy})[-1].name == "documents/part-00000-of-00001.parquet"
    assert version_files({"shards": legacy})[-1].name == "documents/part-00000-of-00001.parquet"
    for bad in ("../../etc/passwd", "/abs/shard.tfs", "documents/../../x", "a//b", "", "./x"):
        with pytest.raises(TierError, match="outside its version"):
            version_files({"index_version": 2, "shards": [dict(shards[0], name=bad)]})
        with pytest.raises(TierError, match="outside its version"):
            version_files({"index_version": 2, "shards": [dict(shards[0], documents=bad)]})
    with pytest.raises(TierError, match="outside its version"):
        version_files({"index_version": 3, "shards": [], "tokenizer": {"file": "../../x.model", "sha256": "0" * 64}})


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


@pytest.mark.parametrize("kind", ["header reserved byte", "header doc count", "header checksum field",
                                  "document index byte", "truncated"])
def test_verify_reads_the_whole_shard_header_included(tmp_path, kind):
    make_version(tmp_path / "warm", "v1", index_version=3)
    storage = StorageConfig(warm=str(tmp_path / "warm"))
    assert verify_version(storage.warm, "v1", storage) == []
    shard = tmp_path / "warm" / "v1" / "shard-00002-of-00004.tfs"
    damage(kind, shard, str(tmp_path / "warm" / "v1" / "index.json"))
    problems = verify_version(storage.warm, "v1", storage)
    assert len(problems) == 1 and "shard-00002-of-00004.tfs" in problems[0], problems


def test_verify_reports_a_version_whose_index_is_gone_and_damaged_extra_files(tmp_path, capsys):
    for version in ("v1", "v2"):
        make_version(tmp_path / "out" / "tokens", version, shards=2, index_version=3)
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs: []\ncrawl:\n  seeds: [http://x]\n")
    assert main(["verify", "--config", str(config)]) == 0
    assert "every file of 2 version(s)" in capsys.readouterr().out
    (tmp_path / "out" / "tokens" / "v1" / "index.json").unlink()
    assert main(["verify", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "BAD " in out and "v1/index.json: missing (incomplete version)" in out and "verified" not in out
    assert main(["status", "--config", str(config)]) == 0
    assert "incomplete (no index.json): v1" in capsys.readouterr().out
    assert main(["verify", "--config", str(config), "--version", "v9"]) == 1
    assert "v9/index.json: missing (no such version)" in capsys.readouterr().out
    (tmp_path / "out" / "tokens" / "v2" / "tokenizer.model").write_bytes(b"another model")
    (tmp_path / "out" / "tokens" / "v2" / "documents" / "shard-00001-of-00002.parquet").write_bytes(b"PAR1 x")
    problems = verify_version(str(tmp_path / "out" / "tokens"), "v2", StorageConfig())
    assert sorted(p.rsplit("/", 1)[-1] for p in problems) == [
        "shard-00001-of-00002.parquet: checksum mismatch", "tokenizer.model: checksum mismatch"]


def test_verify_refuses_token_ids_outside_the_vocabulary(tmp_path):
    index = make_version(tmp_path / "warm", "v1", shards=2, index_version=3)
    index["tokenizer"]["vocab_size"] = 1000  # the shards hold ids up to 30,000
    (tmp_path / "warm" / "v1" / "index.json").write_text(json.dumps(index))
    problems = verify_version(str(tmp_path / "warm"), "v1", StorageConfig())
    assert len(problems) == 2 and all("outside the vocabulary of 1000 ids" in p for p in problems)


def test_promote_and_demote_carry_the_tokenizer_and_refuse_a_damaged_one(tmp_path, s3_env):
    make_version(tmp_path / "warm", "v1", index_version=3)
    storage = StorageConfig(warm=str(tmp_path / "warm"), cold=f"s3://{bucket()}/t")
    result = copy_version("v1", storage.warm, storage.cold, storage)
    assert result["sent"] == 9  # 4 shards, 4 documents tables, the tokenizer
    assert verify_version(storage.cold, "v1", storage) == []
    assert fsspec.filesystem("s3").cat(f"{storage.cold}/v1/tokenizer.model") == \
        (tmp_path / "warm" / "v1" / "tokenizer.model").read_bytes()
    copy_version("v1", storage.cold, str(tmp_path / "hot"), storage)
    assert (tmp_path / "hot" / "v1" / "tokenizer.model").read_bytes() == b"sentencepiece stand-in v1"
    (tmp_path / "warm" / "v1" / "tokenizer.model").write_bytes(b"retrained since")
    with pytest.raises(TierError, match="tokenizer.model"):
        copy_version("v1", storage.warm, str(tmp_path / "other"), storage)
    assert not (tmp_path / "other" / "v1" / "index.json").exists()


def test_older_index_versions_still_copy_and_verify(tmp_path):
    make_version(tmp_path / "warm", "v2", index_version=2)
    legacy = make_version(tmp_path / "warm", "v1", shards=2, index_version=2)
    for entry in legacy["shards"]:
        del entry["documents"]
    legacy["index_version"] = 1
    (tmp_path / "warm" / "v1" / "documents" / "part-00000-of-00001.parquet").write_bytes(b"PAR1 all")
    (tmp_path / "warm" / "v1" / "index.json").write_text(json.dumps(legacy))
    storage = StorageConfig(warm=str(tmp_path / "warm"))
    for version, files in (("v1", 3), ("v2", 8)):
        assert copy_version(version, storage.warm, str(tmp_path / "hot"), storage)["sent"] == files
        assert verify_version(str(tmp_path / "hot"), version, storage) == []


@pytest.mark.parametrize("missing", ["shard-00002-of-00004.tfs", "documents/shard-00001-of-00004.parquet",
                                     "tokenizer.model", "index.json"])
def test_a_listed_file_that_is_absent_is_an_index_error_naming_version_and_file(tmp_path, missing):
    """A legal name in index.json whose file is gone (or no index.json at all): before, a
    raw FileNotFoundError naming only a path; now an IndexFileError (and TierError) naming
    the version, the file and the tier, and no index.json at the destination."""
    from storage.index import IndexFileError

    make_version(tmp_path / "warm", "v1", index_version=3)
    os.remove(tmp_path / "warm" / "v1" / missing)
    storage = StorageConfig(warm=str(tmp_path / "warm"))
    with pytest.raises(IndexFileError) as error:
        copy_version("v1", storage.warm, str(tmp_path / "hot"), storage)
    assert isinstance(error.value, TierError)
    message = str(error.value)
    assert message.startswith("version v1: ") and missing in message and str(tmp_path / "warm") in message
    assert not (tmp_path / "hot" / "v1" / "index.json").exists()


def test_the_tiers_command_reports_a_missing_file_in_one_line(tmp_path, capsys):
    """``pipelines.tiers promote`` of a version whose listed shard is gone: exit 1 and the
    error naming version and file, not a traceback (before: an uncaught TierError)."""
    make_version(tmp_path / "out" / "tokens", "v1", shards=2, index_version=3)
    os.remove(tmp_path / "out" / "tokens" / "v1" / "shard-00001-of-00002.tfs")
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs: []\ncrawl:\n  seeds: [http://x]\n"
                      f"storage:\n  cold: {tmp_path / 'cold'}\n")
    assert main(["demote", "--config", str(config), "--version", "v1"]) == 1
    err = capsys.readouterr().err
    assert "demote failed: version v1: " in err and "shard-00001-of-00002.tfs" in err
    assert "Traceback" not in err and not (tmp_path / "cold" / "v1" / "index.json").exists()


@pytest.mark.parametrize("version", ["../../x", "..", "v1/../../x", "/etc"])
def test_hostile_version_names_are_refused_before_any_write(tmp_path, version):
    make_version(tmp_path / "warm", "v1")
    storage = StorageConfig(warm=str(tmp_path / "warm"))
    with pytest.raises(TierError, match="--version"):
        copy_version(version, storage.warm, str(tmp_path / "a" / "b" / "hot"), storage)
    with pytest.raises(TierError, match="--version"):
        delete_version(storage.warm, version, storage)
    assert not (tmp_path / "a").exists() and (tmp_path / "warm" / "v1" / "index.json").exists()


def test_stale_incomplete_versions_are_removed_after_the_safety_age(tmp_path):
    root = tmp_path / "tokens"
    make_version(root, "v1", shards=1)
    for name in ("v2", "v3"):
        (root / name).mkdir()
        (root / name / "shard-00000-of-00001.tfs").write_bytes(b"a killed run's shard")
    now = time.time()
    os.utime(root / "v2" / "shard-00000-of-00001.tfs", (now - 3601, now - 3601))
    os.utime(root / "v2", (now - 3601, now - 3601))
    storage = StorageConfig()
    assert remove_stale_incomplete(str(root), storage, min_age_s=3600, keep=["v3"], now=now + 3600) == ["v2"]
    assert remove_stale_incomplete(str(root), storage, min_age_s=3600, now=now) == []  # v3: written just now
    assert sorted(p.name for p in root.iterdir()) == ["v1", "v3"]


def test_tier_writes_are_refused_while_a_run_holds_the_output(tmp_path, capsys):
    """A run's tokenize stage removes the version folders without index.json it finds:
    promote, demote and gc into its tiers take the output's lease (exit 2, nothing
    written, the owner named) and go ahead once it is given back."""
    from tests.leaseworker import held_lease

    make_version(tmp_path / "cold", "v1", shards=3)
    make_version(tmp_path / "out" / "tokens", "v0", shards=1)
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs: []\ncrawl:\n  seeds: [http://x]\n"
                      f"storage:\n  cold: {tmp_path / 'cold'}\n  keep_warm_versions: 1\n")
    with held_lease(tmp_path / "out" / "_lease.json", "pipelines.run --config job.yaml") as owner:
        for command in (["promote", "--version", "v1"], ["demote", "--version", "v0"], ["gc"]):
            assert main([command[0], "--config", str(config), *command[1:]]) == 2
            err = capsys.readouterr().err
            assert f"{command[0]} refused: the output is in use by run {owner[:8]}" in err
            assert "'pipelines.run --config job.yaml'" in err and "--break-lease" in err
        assert sorted(os.listdir(tmp_path / "out" / "tokens")) == ["v0"]
        assert sorted(os.listdir(tmp_path / "cold")) == ["v1"]
    assert main(["promote", "--config", str(config), "--version", "v1"]) == 0
    assert verify_version(str(tmp_path / "out" / "tokens"), "v1", StorageConfig()) == []
    assert sorted(os.listdir(tmp_path / "out" / "tokens" / "v1")) == [
        "documents", "index.json", *(f"shard-{i:05d}-of-00003.tfs" for i in range(3))]  # no _writer.json left
    assert not (tmp_path / "out" / "_lease.json").exists()
