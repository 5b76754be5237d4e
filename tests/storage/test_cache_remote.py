"""The shard cache's remote path without a server: versions in fsspec's in-memory
filesystem (``memory://``: not local, so every shard is downloaded into the hot folder,
as from S3) and a filesystem that fails a set number of reads. Downloads, retries,
hits, bad cached copies, memory maps, document indexes, pins and pickling, each
decision checked at its edge (fast enough to run against every mutant of cache.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from storage.cache import CacheStats, ShardCache, _stamp
from storage.hotdir import CacheFullError
from storage.shards import HEADER_SIZE, ShardError, decode_shard
from tests.storage.datasets import make_version, rewrite_in_place

VOCAB = {"vocab_size": 100_000, "dtype": "uint32"}


class FlakyFS(MemoryFileSystem):
    """``memory://`` whose ``open`` for reading raises ``OSError`` while ``failures``
    is above 0 (a dropped connection), counting every open."""

    protocol = "flaky"
    root_marker = "/"
    failures = 0
    opens = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("flaky://"))

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            type(self).opens += 1
            if type(self).failures > 0:
                type(self).failures -= 1
                raise OSError("connection reset by peer")
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("flaky", FlakyFS, clobber=True)


@pytest.fixture
def remote(tmp_path, request):
    """A 6-shard version in memory: (index url, local copy's folder)."""
    make_version(tmp_path / "src", extra=VOCAB)
    name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    fs = fsspec.filesystem("memory")
    for f in sorted((tmp_path / "src").iterdir()):
        fs.pipe(f"/{name}/v1/{f.name}", f.read_bytes())
    yield f"memory://{name}/v1/index.json", tmp_path / "src"
    fs.rm(f"/{name}", recursive=True)


def cache_at(tmp_path: Path, **kw) -> ShardCache:
    return ShardCache(hot_dir=str(tmp_path / "hot"), backoff_s=0.001, **kw)


def test_a_remote_shard_is_downloaded_once_then_a_hit(tmp_path, remote):
    url, src = remote
    cache = cache_at(tmp_path)
    path = cache.local_path(url, "shard-00001.tfs")
    tag = hashlib.sha256(url.encode()).hexdigest()[:8]
    assert path == os.path.join(cache.hot.root, f"v1-{tag}", "shard-00001.tfs")
    assert Path(path).read_bytes() == (src / "shard-00001.tfs").read_bytes()
    size = (src / "shard-00001.tfs").stat().st_size
    s = cache.stats
    assert (s.misses, s.hits, s.bytes_fetched, s.verified, s.retries) == (1, 0, size, 1, 0)
    assert cache.local_path(url, "shard-00001.tfs") == path
    assert (s.misses, s.hits, s.verified) == (1, 1, 1)  # checked once per process
    assert s.hit_rate == 0.5 and CacheStats().hit_rate == 0.0
    # another process (a new cache on the same folder) finds the copy: a hit, checked once by it
    other = cache_at(tmp_path)
    assert other.local_path(url, "shard-00001.tfs") == path
    assert (other.stats.misses, other.stats.hits, other.stats.verified, other.stats.bytes_fetched) == (0, 1, 1, 0)
    assert cache.used_bytes() == size
    assert not [p for p in Path(cache.hot.root).rglob("*.partial*")]


def test_two_versions_of_one_name_never_share_a_folder(tmp_path, remote):
    url, src = remote
    cache = cache_at(tmp_path)
    other_url = url.replace("/v1/", "/v1-copy/")
    fs = fsspec.filesystem("memory")
    for f in sorted(src.iterdir()):
        fs.pipe(other_url.split("://", 1)[1].rsplit("/", 1)[0] + "/" + f.name, f.read_bytes())
    a, b = cache.path_of(url, "shard-00000.tfs"), cache.path_of(other_url, "shard-00000.tfs")
    assert a != b and os.path.dirname(a) != os.path.dirname(b)
    assert os.path.basename(os.path.dirname(a)).startswith("v1-")  # the index's version, then the tag
    assert cache.local_path(other_url, "shard-00000.tfs") == b
    assert not os.path.exists(a)  # path_of fetches nothing
    with pytest.raises(ShardError, match="not listed"):
        cache.path_of(url, "shard-00099.tfs")


@pytest.mark.parametrize("failures,retries,ok", [(0, 0, True), (2, 2, True), (3, 2, False), (1, 0, False)])
def test_downloads_retry_dropped_connections_up_to_the_limit(tmp_path, remote, failures, retries, ok):
    url, src = remote
    flaky = url.replace("memory://", "flaky://")
    cache = cache_at(tmp_path, retries=retries)
    cache.read_index(flaky)  # the index read is not what fails here
    FlakyFS.failures, FlakyFS.opens = failures, 0
    try:
        if ok:
            path = cache.local_path(flaky, "shard-00002.tfs")
            assert Path(path).read_bytes() == (src / "shard-00002.tfs").read_bytes()
            assert cache.stats.retries == failures and cache.stats.misses == 1
        else:
            with pytest.raises(OSError, match="connection reset"):
                cache.local_path(flaky, "shard-00002.tfs")
            assert cache.stats.retries == retries and cache.stats.misses == 0
            assert not [p for p in Path(cache.hot.root).rglob("*") if p.is_file() and p.name != ".lock"]
        assert FlakyFS.opens == min(failures, retries) + 1  # each attempt opens the shard once
    finally:
        FlakyFS.failures = 0


def test_a_missing_remote_shard_is_named_and_not_retried(tmp_path, remote):
    url, _ = remote
    fsspec.filesystem("memory").rm(url.split("://", 1)[1].rsplit("/", 1)[0] + "/shard-00003.tfs")
    cache = cache_at(tmp_path, retries=3)
    with pytest.raises(ShardError, match=r"shard-00003.tfs: missing at memory://.*listed in"):
        cache.local_path(url, "shard-00003.tfs")
    assert cache.stats.retries == 0
    with pytest.raises(ShardError, match="shard-00003.tfs: missing at"):
        cache.doc_index(url, "shard-00003.tfs")


def test_a_damaged_cached_copy_is_replaced_by_a_fresh_download(tmp_path, remote, caplog):
    url, src = remote
    path = cache_at(tmp_path).local_path(url, "shard-00000.tfs")
    data = bytearray(Path(path).read_bytes())
    data[HEADER_SIZE + 4] ^= 1
    Path(path).write_bytes(bytes(data))
    cache = cache_at(tmp_path)  # a process that has not checked it yet
    with caplog.at_level(logging.WARNING, logger="storage.cache"):
        assert cache.local_path(url, "shard-00000.tfs") == path
    assert Path(path).read_bytes() == (src / "shard-00000.tfs").read_bytes()
    assert (cache.stats.misses, cache.stats.hits) == (1, 0)
    warned = [r.getMessage().split(": ", 1) for r in caplog.records if r.name == "storage.cache"]
    assert [w[0] for w in warned] == ["removed a bad cached copy, downloading again"]
    assert warned[0][1].startswith("shard-00000.tfs")  # the damage, named by its shard


def test_a_damaged_remote_shard_is_never_written_to_the_hot_folder(tmp_path, remote):
    url, _ = remote
    fs = fsspec.filesystem("memory")
    remote_path = url.split("://", 1)[1].rsplit("/", 1)[0] + "/shard-00004.tfs"
    data = bytearray(fs.cat_file(remote_path))
    data[HEADER_SIZE + 4] ^= 1
    fs.pipe(remote_path, bytes(data))
    cache = cache_at(tmp_path, retries=2)
    with pytest.raises(ShardError, match="shard-00004.tfs"):
        cache.local_path(url, "shard-00004.tfs")
    assert cache.stats.retries == 0  # damage is not a dropped connection
    assert not [p for p in Path(cache.hot.root).rglob("*.tfs*")]
    # verify=False: the checksum pass is skipped, the header and size still checked
    lax = cache_at(tmp_path, verify=False)
    assert Path(lax.local_path(url, "shard-00004.tfs")).read_bytes() == bytes(data)


def test_tokens_are_a_read_only_map_kept_only_while_pinned(tmp_path, remote):
    url, src = remote
    cache = cache_at(tmp_path)
    shard = decode_shard((src / "shard-00005.tfs").read_bytes())
    tokens = cache.tokens(url, "shard-00005.tfs")
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.dtype("<u4") and not tokens.flags.writeable
    assert np.array_equal(tokens, shard.tokens)
    assert cache.tokens(url, "shard-00005.tfs") is not tokens  # not pinned: mapped anew
    path = cache.local_path(url, "shard-00005.tfs", pin=True)
    pinned = cache.tokens(url, "shard-00005.tfs")
    assert cache.tokens(url, "shard-00005.tfs") is pinned and cache._pins == {path: 1}
    cache.pin([path])
    cache.unpin([path])
    assert cache.tokens(url, "shard-00005.tfs") is pinned  # one pin left
    cache.unpin([path])
    assert cache._pins == {} and cache.tokens(url, "shard-00005.tfs") is not pinned


def test_local_pins_count_per_path(tmp_path, remote):
    _, src = remote
    cache = cache_at(tmp_path)
    index = str(src / "index.json")
    path = cache.local_path(index, "shard-00001.tfs", pin=True)
    assert path == str(src / "shard-00001.tfs") and cache._pins == {path: 1}
    assert (cache.stats.cold, cache.stats.ready) == (1, 0)  # checked by this request
    cache.local_path(index, "shard-00001.tfs", pin=True)
    assert cache._pins == {path: 2} and (cache.stats.cold, cache.stats.ready) == (1, 1)
    cache.unpin([path])
    pinned = cache.tokens(index, "shard-00001.tfs")
    cache.pin([path])
    assert cache._pins == {path: 2}
    cache.unpin([path])
    assert cache.tokens(index, "shard-00001.tfs") is pinned
    cache.unpin([path])
    cache.unpin([path])  # never below zero
    assert cache._pins == {} and cache._local_pins[path] == 0
    assert cache.tokens(index, "shard-00001.tfs") is not pinned
    with pytest.raises(ShardError, match="not in the hot cache"):
        cache.pin([os.path.join(cache.hot.root, "v1-x", "shard-00001.tfs")])


def test_an_empty_shard_has_no_tokens_to_map(tmp_path):
    from storage.shards import encode_shard

    data, d, t, sha = encode_shard([], np.dtype(np.uint16))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "e.tfs").write_bytes(data)
    (tmp_path / "d" / "index.json").write_text(
        '{"version": "v1", "dtype": "uint16", "shards": [{"name": "e.tfs", "num_docs": %d, "num_tokens": %d, '
        '"num_bytes": %d, "sha256": "%s"}]}' % (d, t, len(data), sha))
    tokens = cache_at(tmp_path).tokens(str(tmp_path / "d" / "index.json"), "e.tfs")
    assert tokens.shape == (0,) and tokens.dtype == np.dtype("<u2")
    data, d, t, sha = encode_shard([np.array([7], dtype=np.uint16)], np.dtype(np.uint16))  # one token: mapped
    (tmp_path / "d" / "e.tfs").write_bytes(data)
    (tmp_path / "d" / "index.json").write_text(
        '{"version": "v1", "dtype": "uint16", "shards": [{"name": "e.tfs", "num_docs": %d, "num_tokens": %d, '
        '"num_bytes": %d, "sha256": "%s"}]}' % (d, t, len(data), sha))
    assert cache_at(tmp_path).tokens(str(tmp_path / "d" / "index.json"), "e.tfs").tolist() == [7]


def test_the_document_index_is_read_by_range_and_checked(tmp_path, remote):
    url, src = remote
    cache = cache_at(tmp_path)
    shard = decode_shard((src / "shard-00002.tfs").read_bytes())
    got = cache.doc_index(url, "shard-00002.tfs")
    assert got.dtype == np.dtype("<u8") and np.array_equal(got, shard.index)
    assert got[0] == 0 and got[-1] == len(shard.tokens) and len(got) == shard.num_docs + 1
    assert cache.doc_index(url, "shard-00002.tfs") is got  # read once
    assert cache.stats.misses == 0 and not [p for p in Path(cache.hot.root).rglob("*.tfs")]  # nothing downloaded
    # a shard cut short inside its document index
    fs = fsspec.filesystem("memory")
    remote_path = url.split("://", 1)[1].rsplit("/", 1)[0] + "/shard-00003.tfs"
    whole = fs.cat_file(remote_path)
    fs.pipe(remote_path, whole[:-8])
    with pytest.raises(ShardError, match=r"document index truncated \(\d+ of \d+ bytes\)"):
        cache_at(tmp_path).doc_index(url, "shard-00003.tfs")


def test_the_cache_pickles_its_settings_and_indexes_only(tmp_path, remote):
    url, _ = remote
    cache = ShardCache(hot_dir=str(tmp_path / "hot"), budget_bytes=123_456, verify=False, retries=7,
                       backoff_s=0.5, full_wait_s=9.0)
    cache.local_path(url, "shard-00000.tfs", pin=True)
    clone = pickle.loads(pickle.dumps(cache))
    assert (clone.hot_dir, clone.budget_bytes, clone.verify, clone.retries, clone.backoff_s, clone.full_wait_s) \
        == (str(tmp_path / "hot"), 123_456, False, 7, 0.5, 9.0)
    assert clone._indexes == cache._indexes and clone._indexes is not cache._indexes
    assert clone.stats == CacheStats() and clone._pins == {} and clone._checked == {}
    assert clone.hot.budget_bytes == 123_456
    fsspec.filesystem("memory").rm(url.split("://", 1)[1])  # the clone does not read the index again
    assert clone.path_of(url, "shard-00000.tfs") == cache.path_of(url, "shard-00000.tfs")


def test_a_full_budget_waits_only_when_other_processes_could_free_it(tmp_path, remote, monkeypatch):
    import storage.cache as cache_module

    url, src = remote
    sizes = {f.name: f.stat().st_size for f in src.glob("*.tfs")}
    largest, other, third = sorted(sizes, key=lambda n: (-sizes[n], n))[:3]
    budget = sizes[largest] + sizes[other]
    cache = cache_at(tmp_path, budget_bytes=budget, full_wait_s=60.0)
    a = cache.local_path(url, largest, pin=True)
    assert cache._others_may_free(sizes[other])  # room left beside this process's pin
    assert cache._others_may_free(budget - sizes[largest]) and not cache._others_may_free(budget - sizes[largest] + 1)
    b = cache.local_path(url, other, pin=True)
    # both pinned by this process: no other process can free room, so no wait
    assert not cache._others_may_free(1)
    monkeypatch.setattr(cache_module.time, "sleep", lambda s: pytest.fail("waited for its own pins"))
    with pytest.raises(CacheFullError):  # at once, long before the deadline
        cache.local_path(url, third)
    cache.unpin([a])
    assert cache.local_path(url, third)  # the unpinned one is evicted for it
    assert cache.stats.evictions == 1 and not os.path.exists(a) and os.path.exists(b)


def test_reader_requests_are_counted_by_what_they_found(tmp_path, remote):
    url, _ = remote
    cache = cache_at(tmp_path)
    cache.local_path(url, "shard-00000.tfs", pin=True)  # fetched by the request itself
    assert (cache.stats.cold, cache.stats.ready, cache.stats.waited) == (1, 0, 0)
    cache.local_path(url, "shard-00001.tfs")  # the prefetcher's way: no pin, not a request
    cache.local_path(url, "shard-00001.tfs", pin=True)
    assert (cache.stats.cold, cache.stats.ready, cache.stats.waited) == (1, 1, 0)
    cache._count_request(waited=True, worked=False)
    cache._count_request(waited=True, worked=True)
    assert (cache.stats.cold, cache.stats.ready, cache.stats.waited) == (2, 1, 1)


def test_a_file_is_identified_by_inode_size_mtime_and_ctime(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    st = os.stat(path)
    assert _stamp(str(path)) == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert _stamp(str(path))[:3] == (st.st_ino, st.st_size, st.st_mtime_ns + 10**9)
    before = _stamp(str(path))
    rewrite_in_place(path, b"y")  # mtime put back: only the ctime tells
    after = _stamp(str(path))
    assert after[:3] == before[:3] and after[3] != before[3]


def test_a_cached_copy_changed_in_place_is_checked_again_and_fetched_anew(tmp_path, remote):
    """A hot copy whose bytes change under the same inode, size and mtime: before, the
    check (keyed on inode and size for hot files) was not redone and the changed tokens
    were served; now the copy is checked again, found damaged, removed and downloaded."""
    url, _ = remote
    cache = cache_at(tmp_path)
    path = cache.local_path(url, "shard-00002.tfs")
    good = np.array(cache.tokens(url, "shard-00002.tfs"))
    data = bytearray(Path(path).read_bytes())
    data[HEADER_SIZE + 4] ^= 0x01
    rewrite_in_place(Path(path), bytes(data))
    assert cache.local_path(url, "shard-00002.tfs") == path
    assert (cache.stats.verified, cache.stats.misses) == (2, 2)  # the copy failed its check: downloaded anew
    assert np.array_equal(cache.tokens(url, "shard-00002.tfs"), good)


def test_a_hit_marks_the_shard_used_beside_it_and_never_changes_the_shard(tmp_path, remote):
    """The LRU's last use is the mtime of ``<stem>.lru``: a hit leaves the shard's own
    inode alone (before, it set the shard's mtime, so its ctime could not tell a change),
    and eviction still takes the least recently used shard."""
    url, src = remote
    sizes = {f.name: f.stat().st_size for f in src.glob("*.tfs")}
    cache = cache_at(tmp_path, budget_bytes=sizes["shard-00000.tfs"]  # a and b, or a and c
                     + max(sizes["shard-00001.tfs"], sizes["shard-00002.tfs"]))
    a = cache.local_path(url, "shard-00000.tfs")
    b = cache.local_path(url, "shard-00001.tfs")
    os.utime(a, (1_000, 1_000))  # both long unused, a the longest
    os.utime(b, (2_000, 2_000))
    assert cache.local_path(url, "shard-00000.tfs") == a  # a hit on a
    assert os.stat(a).st_mtime_ns == 1_000 * 10**9 and os.path.exists(a[:-len(".tfs")] + ".lru")
    cache.local_path(url, "shard-00002.tfs")
    assert os.path.exists(a) and not os.path.exists(b) and not os.path.exists(b[:-len(".tfs")] + ".lru")


def _remote_version(tmp_path: Path, name: str, extra: dict, dtype=np.uint32) -> str:
    make_version(tmp_path / name, extra=extra, dtype=np.dtype(dtype))
    fs = fsspec.filesystem("memory")
    for f in sorted((tmp_path / name).iterdir()):
        fs.pipe(f"/{name}-{os.getpid()}/v/{f.name}", f.read_bytes())
    return f"memory://{name}-{os.getpid()}/v/index.json"


def test_a_download_is_checked_against_the_index_dtype_and_vocabulary(tmp_path):
    wrong_dtype = _remote_version(tmp_path, "dtype", {"dtype": "uint16", "vocab_size": 100_000})
    with pytest.raises(ShardError, match=r"memory://dtype-\d+/v/shard-00000.tfs"):
        cache_at(tmp_path).local_path(wrong_dtype, "shard-00000.tfs")
    with pytest.raises(ShardError, match=r"memory://dtype-\d+/v/shard-00000.tfs"):
        cache_at(tmp_path).doc_index(wrong_dtype, "shard-00000.tfs")
    small_vocab = _remote_version(tmp_path, "vocab", {"dtype": "uint32", "vocab_size": 50})
    with pytest.raises(ShardError, match="outside the vocabulary of 50"):
        cache_at(tmp_path).local_path(small_vocab, "shard-00000.tfs")
    # verify=False: no vocabulary pass (nor checksum), the header still checked
    assert cache_at(tmp_path, verify=False).local_path(small_vocab, "shard-00000.tfs")
    with pytest.raises(ShardError):
        cache_at(tmp_path, verify=False).local_path(wrong_dtype, "shard-00000.tfs")


def test_an_index_without_a_version_gets_the_folder_v(tmp_path):
    url = _remote_version(tmp_path, "noversion", VOCAB)
    fs = fsspec.filesystem("memory")
    index = json.loads(fs.cat_file(url.split("://", 1)[1]))
    del index["version"]
    fs.pipe(url.split("://", 1)[1], json.dumps(index).encode())
    cache = cache_at(tmp_path)
    tag = hashlib.sha256(url.encode()).hexdigest()[:8]
    assert cache.path_of(url, "shard-00000.tfs") == os.path.join(cache.hot.root, f"v-{tag}", "shard-00000.tfs")


def test_every_download_and_check_is_counted(tmp_path, remote):
    url, src = remote
    cache = cache_at(tmp_path)
    for name in ("shard-00000.tfs", "shard-00001.tfs"):
        cache.local_path(url, name)
    after_two = cache.stats.verify_s
    cache.local_path(url, "shard-00002.tfs")
    s = cache.stats
    sizes = sum((src / f"shard-0000{i}.tfs").stat().st_size for i in range(3))
    assert (s.misses, s.verified, s.bytes_fetched) == (3, 3, sizes)
    assert 0 < after_two < s.verify_s
    other = cache_at(tmp_path)
    for name in ("shard-00000.tfs", "shard-00001.tfs", "shard-00001.tfs"):
        other.local_path(url, name)
    assert (other.stats.hits, other.stats.misses, other.stats.verified) == (3, 0, 2)


def test_retries_back_off_exponentially_with_jitter_and_say_so(tmp_path, remote, monkeypatch, caplog):
    import storage.cache as cache_module

    url, _ = remote
    flaky = url.replace("memory://", "flaky://")
    waits: list[float] = []
    monkeypatch.setattr(cache_module.time, "sleep", waits.append)
    monkeypatch.setattr(cache_module.random, "random", lambda: 0.5)
    cache = ShardCache(hot_dir=str(tmp_path / "hot"), backoff_s=0.1, retries=3)
    cache.read_index(flaky)
    FlakyFS.failures = 3
    try:
        with caplog.at_level(logging.WARNING, logger="storage.cache"):
            cache.local_path(flaky, "shard-00001.tfs")
    finally:
        FlakyFS.failures = 0
    assert waits == pytest.approx([0.1 * 1.5, 0.2 * 1.5, 0.4 * 1.5])
    assert [r.getMessage() for r in caplog.records if r.name == "storage.cache"][0] \
        == f"fetching {flaky.rsplit('/', 1)[0]}/shard-00001.tfs failed (connection reset by peer), retry in 0.15s"


def test_a_full_budget_waits_for_another_process_to_unpin(tmp_path, remote, monkeypatch):
    """Another process (another cache on the folder) pins the only shard that fits: this
    one waits, polling every 0.05 s, and takes the room once it is unpinned."""
    import storage.cache as cache_module

    url, src = remote
    sizes = {f.name: f.stat().st_size for f in src.glob("*.tfs")}
    big, small = sorted(sizes, key=lambda n: (-sizes[n], n))[:2]
    holder = cache_at(tmp_path, budget_bytes=sizes[big])
    held = holder.local_path(url, big, pin=True)
    waiter = cache_at(tmp_path, budget_bytes=sizes[big], full_wait_s=60.0)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            holder.unpin([held])  # the other process is done with it

    monkeypatch.setattr(cache_module.time, "sleep", sleep)
    path = waiter.local_path(url, small)
    assert slept == [0.05, 0.05, 0.05] and Path(path).read_bytes() == (src / small).read_bytes()
    assert not os.path.exists(held) and waiter.stats.misses == 1


def test_a_shard_another_process_downloads_is_waited_for_and_used(tmp_path, remote):
    import threading

    url, src = remote
    first = cache_at(tmp_path)
    path = first.path_of(url, "shard-00003.tfs")
    reservation = first.hot.reserve(path, sizes := (src / "shard-00003.tfs").stat().st_size)
    assert reservation is not None and sizes > 0

    def finish() -> None:
        time.sleep(0.3)
        with open(reservation.partial, "r+b") as fh:
            fh.write((src / "shard-00003.tfs").read_bytes())
        first.hot.commit(reservation)

    writer = threading.Thread(target=finish)
    writer.start()
    second = cache_at(tmp_path)
    try:
        assert second.local_path(url, "shard-00003.tfs") == path
    finally:
        writer.join()
    assert (second.stats.misses, second.stats.hits, second.stats.verified) == (0, 1, 1)


def test_pins_of_a_fresh_local_path_start_at_one(tmp_path, remote):
    _, src = remote
    spaced = tmp_path / "a folder"
    spaced.mkdir()
    for f in src.iterdir():
        (spaced / f.name).write_bytes(f.read_bytes())
    cache = cache_at(tmp_path)
    index = str(spaced / "index.json")
    path = cache.path_of(index, "shard-00000.tfs")
    assert path == str(spaced / "shard-00000.tfs")  # a space in the path is kept
    cache.pin([path])
    assert cache._local_pins == {path: 1}
    cache.unpin([path])
    assert cache._pins == {}


def test_a_broken_document_index_is_named_by_its_source(tmp_path, remote):
    url, src = remote
    fs = fsspec.filesystem("memory")
    remote_path = url.split("://", 1)[1].rsplit("/", 1)[0] + "/shard-00001.tfs"
    data = bytearray(fs.cat_file(remote_path))
    data[-1] ^= 0x40  # the last boundary no longer equals num_tokens
    fs.pipe(remote_path, bytes(data))
    with pytest.raises(ShardError, match=r"memory://.*/shard-00001.tfs: document index does not run from 0"):
        cache_at(tmp_path).doc_index(url, "shard-00001.tfs")
    data = bytearray(fs.cat_file(remote_path))
    data[:4] = b"XXXX"
    fs.pipe(remote_path, bytes(data))
    with pytest.raises(ShardError, match=r"memory://.*/shard-00001.tfs: not a token shard"):
        cache_at(tmp_path).doc_index(url, "shard-00001.tfs")


@pytest.mark.parametrize("scheme", ["file://", "local://"])
def test_a_local_version_is_read_in_place_whatever_its_scheme(tmp_path, scheme):
    make_version(tmp_path / "a b" / "x:" / "y", extra=VOCAB)
    folder = f"{tmp_path}/a b/x://y"  # a space, and "://" inside the path itself
    url = f"{scheme}{folder}/index.json"
    cache = cache_at(tmp_path)
    assert cache.local_path(url, "shard-00001.tfs") == f"{folder}/shard-00001.tfs"
    assert cache.path_of(url, "shard-00002.tfs") == f"{folder}/shard-00002.tfs"
    assert cache.stats.misses == 0 and cache.stats.verified == 1
    assert not [p for p in Path(cache.hot.root).rglob("*") if p.name != ".lock"]  # nothing copied


def test_stale_partial_downloads_are_removed_and_said_once(tmp_path, caplog):
    folder = Path(cache_at(tmp_path).hot.root) / "v1-abcd1234"
    folder.mkdir(parents=True)
    (folder / "shard-00000.tfs.partial").write_bytes(b"half a shard of a killed process")
    with caplog.at_level(logging.INFO, logger="storage.cache"):
        cache = cache_at(tmp_path)
        cache_at(tmp_path)  # nothing left to remove: nothing said
    assert [r.getMessage() for r in caplog.records if r.name == "storage.cache"] \
        == [f"removed 1 stale partial downloads from {cache.hot.root}"]
    assert not (folder / "shard-00000.tfs.partial").exists()


def test_local_errors_name_the_shard_and_the_index(tmp_path):
    from storage.index import IndexFileError

    index = make_version(tmp_path / "v", extra=VOCAB)
    os.remove(tmp_path / "v" / "shard-00003.tfs")
    cache = cache_at(tmp_path)
    with pytest.raises(ShardError) as missing:
        cache.local_path(index, "shard-00003.tfs")
    assert str(missing.value) == f"shard-00003.tfs: missing ({tmp_path}/v/shard-00003.tfs, listed in {index})"
    with pytest.raises(IndexFileError) as bad_name:
        cache.local_path(index, "../shard-00001.tfs")
    assert str(bad_name.value).startswith(f"{index}: shard name '../shard-00001.tfs' is not a plain file name")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "index.json").write_text("{not json")
    with pytest.raises(IndexFileError) as not_json:
        cache.read_index(str(tmp_path / "w" / "index.json"))
    assert str(not_json.value).startswith(f"{tmp_path}/w/index.json: not JSON (")
    (tmp_path / "w" / "index.json").write_text('{"version": "v1"}')
    with pytest.raises(IndexFileError) as no_shards:
        cache.read_index(str(tmp_path / "w" / "index.json"))
    assert str(no_shards.value) == f"{tmp_path}/w/index.json: not a token index (no shards list)"


def test_checking_time_adds_up_over_checks_and_downloads(tmp_path, remote, monkeypatch):
    import storage.cache as cache_module
    import types

    url, src = remote
    clock = iter(range(1000, 2000, 1))  # each reading one second after the one before
    monkeypatch.setattr(cache_module, "time", types.SimpleNamespace(
        perf_counter=lambda: float(next(clock)), monotonic=time.monotonic, sleep=time.sleep))
    cache = cache_at(tmp_path)
    cache.local_path(str(src / "index.json"), "shard-00000.tfs")  # read in place: checked
    cache.local_path(str(src / "index.json"), "shard-00001.tfs")
    assert cache.stats.verify_s == 2.0
    cache.local_path(url, "shard-00002.tfs")  # downloaded: checked before it is written
    assert cache.stats.verify_s == 3.0 and cache.stats.verified == 3


@pytest.mark.parametrize("where", ["remote", "local"])
def test_a_request_that_waits_for_the_prefetcher_counts_as_waited(tmp_path, remote, monkeypatch, where):
    import threading

    url, src = remote
    index = url if where == "remote" else str(src / "index.json")
    cache = cache_at(tmp_path)
    work = "_fetch" if where == "remote" else "_check_file"
    real = getattr(cache, work)
    started, release, waiting = threading.Event(), threading.Event(), threading.Event()

    def slow(*args):
        started.set()
        assert release.wait(30)
        return real(*args)

    class Watched(threading.Event):
        def wait(self, timeout=None):
            waiting.set()
            return super().wait(timeout)

    monkeypatch.setattr(cache, work, slow)
    prefetch = threading.Thread(target=cache.local_path, args=(index, "shard-00000.tfs"))
    prefetch.start()
    assert started.wait(30)
    path = cache.path_of(index, "shard-00000.tfs")
    with cache._lock:
        cache._inflight[path] = Watched()
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(cache.local_path(index, "shard-00000.tfs", pin=True)))
    reader.start()
    assert waiting.wait(30)  # the reader waits for the prefetcher's work
    release.set()
    prefetch.join(30)
    reader.join(30)
    assert got == [path] and cache._pins == {path: 1}
    assert (cache.stats.cold, cache.stats.ready, cache.stats.waited) == (0, 0, 1)


def test_unpinning_a_path_never_pinned_is_a_no_op(tmp_path, remote):
    _, src = remote
    cache = cache_at(tmp_path)
    never = str(src / "shard-00004.tfs")
    cache.unpin([never])
    assert cache._local_pins == {never: 0} and cache._pins == {}


def test_without_verify_a_local_shard_is_not_checksummed_nor_checked_against_the_vocabulary(tmp_path):
    index = make_version(tmp_path / "v", extra={"vocab_size": 50, "dtype": "uint32"})  # tokens reach ~500
    with pytest.raises(ShardError, match="vocab"):
        cache_at(tmp_path).local_path(index, "shard-00000.tfs")
    data = bytearray((tmp_path / "v" / "shard-00001.tfs").read_bytes())
    data[HEADER_SIZE + 4] ^= 1
    (tmp_path / "v" / "shard-00001.tfs").write_bytes(bytes(data))
    with pytest.raises(ShardError, match="shard-00001.tfs"):
        cache_at(tmp_path).local_path(index, "shard-00001.tfs")
    lax = cache_at(tmp_path, verify=False)
    assert lax.local_path(index, "shard-00000.tfs") == str(tmp_path / "v" / "shard-00000.tfs")
    assert lax.local_path(index, "shard-00001.tfs") == str(tmp_path / "v" / "shard-00001.tfs")
