"""The shard cache: names from an index never leave the hot folder, every shard is checked
against index.json (local ones too), any damage is named or skipped, and several real
processes share one hot folder and byte budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

from storage.cache import ShardCache
from storage.hotdir import HotDir
from storage.index import IndexFileError
from storage.loader import Source, TokenDataset, TokenLoader
from storage.shards import ShardError
from tests.s3server import s3_endpoint, s3_env  # noqa: F401 (fixtures)
from tests.storage.datasets import DAMAGE, damage, make_version, rewrite_in_place

ROOT = Path(__file__).resolve().parents[2]
VOCAB = {"vocab_size": 100_000, "dtype": "uint32"}


def windows(dataset: TokenDataset) -> list[tuple[int, ...]]:
    return [tuple(row.tolist()) for batch in TokenLoader(dataset) for row in batch["tokens"]]


def bucket(name: str) -> str:
    import boto3

    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize("field,value", [("version", "../../.."), ("version", "../x"),
                                         ("shard", "../../x.tfs"), ("shard", "/tmp/x.tfs")])
def test_hostile_names_in_a_remote_index_write_nothing_outside_the_hot_folder(tmp_path, s3_env, field, value):
    index = json.loads(Path(make_version(tmp_path / "src", shards=2)).read_text())
    if field == "version":
        index["version"] = value
    else:
        index["shards"][0]["name"] = value
    fs = fsspec.filesystem("s3")
    name = bucket(f"hostile-{abs(hash((field, value))) % 10**8}")
    fs.put(str(tmp_path / "src"), f"s3://{name}/v1", recursive=True)
    fs.pipe(f"s3://{name}/v1/index.json", json.dumps(index).encode())
    (tmp_path / "a" / "b").mkdir(parents=True)
    cache = ShardCache(hot_dir=str(tmp_path / "a" / "b" / "hot"))
    with pytest.raises(IndexFileError, match="outside its version"):
        TokenDataset([Source(f"s3://{name}/v1/index.json")], seq_len=16, batch_size=2, cache=cache)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "src" not in p.parts]
    assert all(str(p).startswith(str(tmp_path / "a" / "b" / "hot")) and not p.name.endswith(".tfs")
               for p in written), written


def damaged_dataset(tmp_path: Path, kind: str) -> tuple[str, str, str]:
    """(clean index, the same version with shard 2 damaged, the damaged shard's name)."""
    clean = make_version(tmp_path / "clean", extra=VOCAB)
    bad = make_version(tmp_path / "bad", extra=VOCAB)
    damage(kind, tmp_path / "bad" / "shard-00002.tfs", bad)
    return clean, bad, "shard-00002.tfs"


@pytest.mark.parametrize("kind", DAMAGE)
def test_every_kind_of_damage_to_a_local_shard_raises_naming_it(tmp_path, kind):
    _, bad, name = damaged_dataset(tmp_path, kind)
    ds = TokenDataset([Source(bad)], seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=0,
                      cache=ShardCache(hot_dir=str(tmp_path / "hot")))
    with pytest.raises(ShardError, match=name):
        list(ds)


@pytest.mark.parametrize("pack", ["concat", "document"])
@pytest.mark.parametrize("kind", DAMAGE)
def test_on_corrupt_skip_skips_every_kind_of_damage(tmp_path, kind, pack):
    clean, bad, name = damaged_dataset(tmp_path, kind)
    options = dict(seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=2, pack=pack, seed=7)
    reference = set(windows(TokenDataset([Source(clean)], **options)))
    lenient = TokenDataset([Source(bad)], on_corrupt="skip", cache=ShardCache(hot_dir=str(tmp_path / "hot")),
                           **options)
    got = windows(lenient)
    assert lenient.corrupt_shards == {name}
    assert got and set(got) < reference  # only real windows, and fewer: the damaged shard's are gone
    assert len(got) == len(set(got))


def test_local_shards_are_checked_once_per_process_and_again_when_replaced(tmp_path):
    index = make_version(tmp_path / "d", extra=VOCAB)
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=2, cache=cache)
    first = windows(ds)
    ds.set_epoch(1)
    windows(ds)
    assert cache.stats.verified == 6  # two epochs, six shards, each checked once
    path = tmp_path / "d" / "shard-00004.tfs"
    tmp = path.with_suffix(".new")
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)  # the same bytes under a new inode
    ds.set_epoch(0)
    assert windows(ds) == first and cache.stats.verified == 7


def test_a_local_shard_changed_in_place_with_its_mtime_put_back_is_checked_again(tmp_path):
    """Same inode, size and mtime, other bytes (``rsync --inplace -t``): before, the check
    (keyed on inode, size, mtime) was not redone and the changed token was served."""
    from storage.shards import HEADER_SIZE

    index = make_version(tmp_path / "d", extra=VOCAB)
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=2, cache=cache)
    first = windows(ds)
    assert cache.stats.verified == 6
    path = tmp_path / "d" / "shard-00004.tfs"
    good = path.read_bytes()
    bad = bytearray(good)
    bad[HEADER_SIZE + 10] ^= 0x01
    rewrite_in_place(path, bytes(bad))
    with pytest.raises(ShardError, match="shard-00004.tfs.*checksum mismatch"):
        windows(ds)
    rewrite_in_place(path, good)  # put back: checked again, served again
    assert windows(ds) == first and cache.stats.verified == 7


def test_a_remote_shard_with_a_damaged_header_is_refused(tmp_path, s3_env):
    index = make_version(tmp_path / "src", extra=VOCAB)
    damage("header reserved byte", tmp_path / "src" / "shard-00001.tfs", index)
    name = bucket("damaged-header")
    fsspec.filesystem("s3").put(str(tmp_path / "src"), f"s3://{name}/v1", recursive=True)
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    with pytest.raises(ShardError, match="shard-00001.tfs.*reserved"):
        cache.local_path(f"s3://{name}/v1/index.json", "shard-00001.tfs")
    assert not [p for p in (tmp_path / "hot").rglob("*") if p.is_file() and p.name != ".lock"]


def run_readers(args: list[list[str]]) -> list[dict]:
    procs, outs = [], []
    for i, extra in enumerate(args):
        out = Path(extra[2]).parent / f"reader-{i}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.storage.hotreader", *extra[:2], str(out),
                                       *extra[3:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    results = []
    for proc, out in zip(procs, outs):
        log = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, log[-3000:]
        results.append(json.loads(out.read_text()))
    return results


def test_processes_sharing_one_hot_folder_and_budget(tmp_path, s3_env):
    """Three loader processes, one hot folder, a budget of 8 of the 16 shards: no crash,
    exactly the windows of the local copy in each, the budget never exceeded (sampled
    every few ms), nothing partial left."""
    index = make_version(tmp_path / "src", shards=16, extra=VOCAB)
    entries = json.loads(Path(index).read_text())["shards"]
    budget = 8 * max(e["num_bytes"] for e in entries)
    name = bucket("shared-hot")
    fsspec.filesystem("s3").put(str(tmp_path / "src"), f"s3://{name}/v1", recursive=True)
    expected = [list(w) for w in windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=0,
                                                      buffer_shards=1))]
    hot = tmp_path / "hot"
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            used = 0
            for p in hot.rglob("*.tfs*"):
                try:
                    used += p.stat().st_size
                except FileNotFoundError:
                    pass
            peak[0] = max(peak[0], used)
            time.sleep(0.003)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = run_readers([[f"s3://{name}/v1/index.json", str(hot), str(tmp_path / "x"), "--budget",
                                str(budget)] for _ in range(3)])
    finally:
        stop.set()
        watcher.join()
    assert all(r["windows"] == expected for r in results)
    assert 0 < peak[0] <= budget, (peak[0], budget)
    assert sum(r["evictions"] for r in results) > 0 and sum(r["misses"] for r in results) >= 16
    assert not list(hot.rglob("*.partial*"))
    assert ShardCache(hot_dir=str(hot), budget_bytes=budget).used_bytes() <= budget


def test_processes_asking_for_one_shard_at_once_download_it_once(tmp_path, s3_env):
    make_version(tmp_path / "src", shards=2, extra=VOCAB)
    name = bucket("one-download")
    fsspec.filesystem("s3").put(str(tmp_path / "src"), f"s3://{name}/v1", recursive=True)
    start = str(time.time() + 8)  # after every interpreter has imported torch
    results = run_readers([[f"s3://{name}/v1/index.json", str(tmp_path / "hot"), str(tmp_path / "x"),
                            "--shard", "shard-00001.tfs", "--start-at", start] for _ in range(3)])
    assert sum(r["misses"] for r in results) == 1 and sum(r["hits"] for r in results) == 2
    assert all(r["verified"] == 1 for r in results)  # each process checks the shard it uses


def test_a_newcomer_removes_only_partials_no_living_process_writes(tmp_path):
    hot = HotDir(str(tmp_path / "hot"))
    living = hot.reserve(os.path.join(hot.root, "v-1", "a.tfs"), 1000)
    assert living is not None
    stale = Path(hot.root, "v-1", "b.tfs.partial")
    stale.write_bytes(b"half a shard of a killed process")
    subprocess.run([sys.executable, "-c", "import sys; from storage.cache import ShardCache; "
                    "ShardCache(hot_dir=sys.argv[1])", str(tmp_path / "hot")], cwd=ROOT, check=True)
    assert Path(living.partial).exists() and not stale.exists()
    hot.abort(living)
    assert not Path(living.partial).exists()


def test_the_vocabulary_check_is_exact_at_the_boundary(tmp_path):
    """An id equal to vocab_size - 1 is served, vocab_size is refused (uint16 and uint32)."""
    import numpy as np

    from storage.shards import encode_shard
    from storage.verify import verify_shard

    for dtype, vocab in ((np.uint16, 1000), (np.uint16, 1 << 16), (np.uint32, 70_000)):
        for top, ok in ((vocab - 1, True), (vocab, False)):
            if top >= 1 << (8 * np.dtype(dtype).itemsize):
                continue
            data, d, t, sha = encode_shard([np.array([1, top, 2], dtype=dtype)], np.dtype(dtype))
            entry = {"num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha}
            path = tmp_path / "s.tfs"
            path.write_bytes(data)
            with open(path, "rb") as fh:
                if ok:
                    verify_shard(fh, entry, "s.tfs", np.dtype(dtype).name, vocab)
                else:
                    with pytest.raises(ShardError, match=f"token id {top} is outside the vocabulary of {vocab}"):
                        verify_shard(fh, entry, "s.tfs", np.dtype(dtype).name, vocab)


@pytest.mark.parametrize("index_fields", [
    {},  # index version 1: no vocabulary recorded, nothing to check ids against
    {"index_version": 2, "vocab_size": 50},  # version 2: top-level vocab_size
    {"index_version": 3, "tokenizer": {"file": "tokenizer.model", "sha256": "0" * 64, "vocab_size": 50,
                                       "eos_id": 0}},
])
def test_every_index_version_is_read_and_its_vocabulary_enforced(tmp_path, index_fields):
    index = make_version(tmp_path / "d", extra=index_fields)
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, cache=ShardCache(hot_dir=str(tmp_path / "hot")))
    if not index_fields:
        assert windows(ds)
        return
    with pytest.raises(ShardError, match="outside the vocabulary of 50 ids"):
        windows(ds)


def test_sources_of_two_tokenizers_are_not_mixed(tmp_path):
    def tokenizer(sha: str) -> dict:
        return {"index_version": 3, "tokenizer": {"file": "tokenizer.model", "sha256": sha, "vocab_size": 100_000}}

    a = make_version(tmp_path / "a", extra=tokenizer("a" * 64))
    b = make_version(tmp_path / "b", extra=tokenizer("b" * 64), seed=1)
    same = make_version(tmp_path / "c", extra=tokenizer("a" * 64), seed=2)
    with pytest.raises(ValueError, match="different tokenizers"):
        TokenDataset([Source(a), Source(b)], seq_len=16, batch_size=2)
    assert len(TokenDataset([Source(a), Source(same)], seq_len=16, batch_size=2).plan(0)) > 0
