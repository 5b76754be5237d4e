"""The streaming loader: deterministic order, no window lost or repeated, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from storage.cache import ShardCache
from storage.loader import Source, TokenDataset, TokenLoader, mix_schedule, window_permutation, windows_in
from storage.shards import decode_shard, encode_shard
from tests.s3server import s3_endpoint, s3_env  # noqa: F401 (fixtures)

EOS = 0


def make_dataset(root: Path, shards: int = 6, seed: int = 0) -> str:
    """A version whose token at every position is unique (position + 1), EOS between docs."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    entries, next_token = [], 1
    for s in range(shards):
        docs = []
        for _ in range(rng.integers(3, 8)):
            n = int(rng.integers(20, 120))
            doc = np.arange(next_token, next_token + n, dtype=np.uint32)
            next_token += n
            docs.append(np.append(doc, EOS).astype(np.uint32))
        data, d, t, sha = encode_shard(docs, np.dtype(np.uint32))
        name = f"shard-{s:05d}.tfs"
        (root / name).write_bytes(data)
        entries.append({"name": name, "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha})
    (root / "index.json").write_text(json.dumps({"version": "v1", "shards": entries}))
    return str(root / "index.json")


def windows(dataset: TokenDataset, workers: int = 0) -> list[tuple[int, ...]]:
    loader = TokenLoader(dataset, num_workers=workers)
    return [tuple(row.tolist()) for batch in loader for row in batch["tokens"]]


def test_a_relative_index_path_reads_the_shards_beside_it(tmp_path, monkeypatch):
    make_dataset(tmp_path / "v1", shards=2)
    monkeypatch.chdir(tmp_path / "v1")
    bare = windows(TokenDataset([Source("index.json")], seq_len=16, batch_size=2))
    monkeypatch.chdir(tmp_path)
    assert bare == windows(TokenDataset([Source("v1/index.json")], seq_len=16, batch_size=2)) and bare


def test_windows_and_schedule_helpers():
    assert windows_in(1, 8) == 0 and windows_in(9, 8) == 1 and windows_in(17, 8) == 2
    order = mix_schedule([6, 100], [2.0, 1.0])
    assert [s for s, _ in order[:6]] == [0, 1, 0, 0, 1, 0] and len(order) == 9  # 6 of stream 0 + 3


def test_order_is_a_pure_function_of_seed_and_epoch(tmp_path):
    index = make_dataset(tmp_path / "d")
    a = TokenDataset([Source(index)], seq_len=16, batch_size=4, seed=1)
    b = TokenDataset([Source(index)], seq_len=16, batch_size=4, seed=1)
    c = TokenDataset([Source(index)], seq_len=16, batch_size=4, seed=2)
    assert windows(a) == windows(b) != windows(c)
    a.set_epoch(1)
    assert windows(a) != windows(b)


def test_no_window_lost_or_repeated_across_ranks_and_workers(tmp_path):
    index = make_dataset(tmp_path / "d")
    single = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3)
    everything = windows(single)
    assert len(set(everything)) == len(everything)
    parts = []
    for rank in range(3):
        ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3, rank=rank, world_size=3)
        got = windows(ds, workers=2)
        assert len(got) == len(ds) * 2  # equal batches on every rank
        parts.append(got)
    assert len({len(p) for p in parts}) == 1
    flat = [w for p in parts for w in p]
    assert len(set(flat)) == len(flat) and set(flat) <= set(everything)
    assert len(everything) - len(flat) < 3 * 2 * 2  # only the remainder for equal ranks


def test_windows_are_contiguous_tokens_with_position_reset(tmp_path):
    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=32, batch_size=1, eos_id=EOS)
    batch = next(iter(ds))  # the dataset yields whole batches
    tokens, positions = batch["tokens"][0].numpy(), batch["position_ids"][0].numpy()
    assert len(tokens) == 33
    for i in range(1, 33):
        if tokens[i - 1] == EOS:
            assert positions[i] == 0
        else:
            assert positions[i] == positions[i - 1] + 1


@pytest.mark.parametrize("workers_before,workers_after", [(0, 0), (0, 2), (2, 1)])
def test_exact_resume_with_other_worker_counts(tmp_path, workers_before, workers_after):
    index = make_dataset(tmp_path / "d")
    full = windows(TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5))
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5)
    loader = TokenLoader(ds, num_workers=workers_before)
    seen = []
    for i, batch in enumerate(loader):
        seen += [tuple(r.tolist()) for r in batch["tokens"]]
        if i == 3:
            break
    state = loader.state_dict()
    assert state["batches"] == 4
    resumed_ds = TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5)
    resumed = TokenLoader(resumed_ds, num_workers=workers_after)
    resumed.load_state_dict(state)
    rest = [tuple(r.tolist()) for batch in resumed for r in batch["tokens"]]
    assert seen + rest == full


def test_a_resumed_loader_counts_on_from_the_batch_it_resumed_at(tmp_path):
    """Interrupted twice: the second state counts the first run's batches too, so the
    third run starts where the second stopped."""
    index = make_dataset(tmp_path / "d")
    full = windows(TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5))
    seen: list[tuple[int, ...]] = []
    state = {"epoch": 0, "batches": 0, "seed": 5}
    for stop in (2, 3):
        loader = TokenLoader(TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5))
        loader.load_state_dict(state)
        for i, batch in enumerate(loader):
            seen += [tuple(r.tolist()) for r in batch["tokens"]]
            if i == stop - 1:
                break
        state = loader.state_dict()
    assert state["batches"] == 5
    last = TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5)
    last.load_state_dict(state)
    assert seen + windows(last) == full


def reference_plan(ds: TokenDataset, epoch: int) -> list[tuple[int, int, int]]:
    """The plan spelled out: each stream's groups in order, each group's windows in its
    own permutation, streams mixed by the schedule, then every R-th sample for this rank."""
    per_stream = []
    for stream, groups in enumerate(ds.groups(epoch)):
        per_stream.append([(stream, g, int(w)) for g, group in enumerate(groups)
                           for w in window_permutation(windows_in(group.total, ds.seq_len), ds.seed, epoch, stream, g)])
    mixed = [per_stream[s][i] for s, i in mix_schedule([len(p) for p in per_stream], [s.weight for s in ds.sources])]
    return mixed[ds.rank::ds.world_size][:len(mixed) // ds.world_size]


def reference_batches(ds: TokenDataset, epoch: int) -> list[tuple[list[int], list[int]]]:
    """(tokens, positions) of every full batch's windows, read from the shard files: the
    window as a slice of its group's shards laid end to end; positions counted one token
    at a time, 0 after each EOS."""
    streams = {}
    for stream, groups in enumerate(ds.groups(epoch)):
        folder = Path(ds.sources[stream].index_url).parent
        streams[stream] = [np.concatenate([decode_shard((folder / n).read_bytes()).tokens for n in g.shards])
                           for g in groups]
    out = []
    plan = reference_plan(ds, epoch)
    for stream, g, w in plan[:len(plan) // ds.batch_size * ds.batch_size]:
        tokens = streams[stream][g][w * ds.seq_len:w * ds.seq_len + ds.seq_len + 1].tolist()
        positions, p = [], 0
        for t in tokens:
            positions.append(p)
            p = 0 if t == EOS else p + 1
        out.append((tokens, positions))
    return out


@pytest.mark.parametrize("buffer_shards,rank,world,workers", [(1, 0, 1, 0), (2, 1, 2, 0), (3, 0, 1, 2), (6, 2, 3, 0)])
def test_batches_are_exactly_the_planned_windows(tmp_path, buffer_shards, rank, world, workers):
    """Two mixed datasets, windows crossing shards within groups: every batch's tokens and
    position_ids equal a per-window reference read from the shard files, in plan order."""
    a = make_dataset(tmp_path / "a", shards=5, seed=1)
    b = make_dataset(tmp_path / "b", shards=4, seed=2)
    for epoch in (0, 1):
        ds = TokenDataset([Source(a, 2.0), Source(b, 1.0)], seq_len=16, batch_size=3, seed=7, rank=rank,
                          world_size=world, buffer_shards=buffer_shards, eos_id=EOS)
        ds.set_epoch(epoch)
        assert ds.plan(epoch) == reference_plan(ds, epoch)
        got = [(t.tolist(), p.tolist()) for batch in TokenLoader(ds, num_workers=workers)
               for t, p in zip(batch["tokens"], batch["position_ids"])]
        assert got == reference_batches(ds, epoch)
        assert len(got) == len(ds) * 3 > 0


def test_mixing_two_datasets_by_weight(tmp_path):
    a = make_dataset(tmp_path / "a", shards=6, seed=1)
    b = make_dataset(tmp_path / "b", shards=6, seed=2)
    ds = TokenDataset([Source(a, 3.0), Source(b, 1.0)], seq_len=16, batch_size=1)
    streams = [s for s, _, _ in ds.plan(0)]
    assert abs(streams.count(0) / len(streams) - 0.75) < 0.05


def test_cache_budget_lru_and_corruption(tmp_path, s3_env):
    import boto3
    import fsspec

    index = make_dataset(tmp_path / "d", shards=6)
    boto3.client("s3").create_bucket(Bucket="loader")
    fs = fsspec.filesystem("s3")
    fs.put(str(tmp_path / "d"), "s3://loader/v1", recursive=True)
    entries = json.loads(Path(index).read_text())["shards"]
    budget = sum(sorted(e["num_bytes"] for e in entries)[-2:])  # room for about two shards
    cache = ShardCache(hot_dir=str(tmp_path / "hot"), budget_bytes=budget)
    ds = TokenDataset([Source("s3://loader/v1/index.json")], seq_len=16, batch_size=2, cache=cache,
                      buffer_shards=1)
    remote = windows(ds)
    local = windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=1))
    assert remote == local
    assert cache.used_bytes() <= budget and cache.stats.evictions > 0
    assert cache.stats.misses >= 6
    bad = bytearray(fs.cat("s3://loader/v1/shard-00003.tfs"))
    bad[200] ^= 0xFF
    fs.pipe("s3://loader/v1/shard-00003.tfs", bytes(bad))
    from storage.shards import ShardError

    fresh = ShardCache(hot_dir=str(tmp_path / "hot2"))
    with pytest.raises(ShardError, match="shard-00003.tfs: checksum mismatch"):
        fresh.local_path("s3://loader/v1/index.json", "shard-00003.tfs")
    assert not list((tmp_path / "hot2").rglob("*.tfs*"))  # nothing partial left behind


def test_prefetch_fetches_every_later_shard_ahead_of_the_reader_on_s3(tmp_path, s3_env, monkeypatch):
    """Shards on a real S3 server (moto) with 50 ms added to every read, one shard per
    group, a consumer taking 100,000 tokens/s. What the prefetcher controls, from the
    cache's own counters (no wall clock): the reader fetches only the first shard itself;
    every later one was downloaded by the prefetch thread and was already checked, or in
    flight, when the reader asked for it; nothing is downloaded twice."""
    import threading
    import time

    import boto3
    import fsspec

    import storage.cache as cache_mod

    rng = np.random.default_rng(0)
    root = tmp_path / "big"
    root.mkdir()
    entries = []
    for s in range(5):
        docs = [rng.integers(1, 30000, size=int(rng.integers(500, 3000))).astype(np.uint16) for _ in range(60)]
        data, d, t, sha = encode_shard(docs, np.dtype(np.uint16))
        (root / f"s{s}.tfs").write_bytes(data)
        entries.append({"name": f"s{s}.tfs", "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha})
    (root / "index.json").write_text(json.dumps({"version": "vbig", "shards": entries}))
    boto3.client("s3").create_bucket(Bucket="latency")
    fsspec.filesystem("s3").put(str(root), "s3://latency/vbig", recursive=True)
    real_open = cache_mod.fsspec.open
    reads: list[tuple[str, str]] = []  # (what, which thread)

    def slow_open(url, *args, **kwargs):
        time.sleep(0.05)
        reads.append((str(url).rsplit("/", 1)[-1], threading.current_thread().name))
        return real_open(url, *args, **kwargs)

    monkeypatch.setattr(cache_mod.fsspec, "open", slow_open)
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    ds = TokenDataset([Source("s3://latency/vbig/index.json")], seq_len=2048, batch_size=8,  # 8 x 2049
                      cache=cache, buffer_shards=1, prefetch_depth=4)
    loader = TokenLoader(ds)
    first = [name for name in ds.groups(0)[0][0].shards]
    for batch in loader:
        time.sleep(batch["tokens"].numel() / 100_000)  # the trainer's step
    assert loader.stats.batches >= 10
    print(f"data-wait {loader.stats.data_wait_fraction:.4%}, first batch {loader.stats.first_batch_s:.3f}s, "
          f"{cache.stats}")
    assert (cache.stats.cold, cache.stats.ready + cache.stats.waited) == (1, 4), cache.stats
    assert cache.stats.misses == 5  # every shard downloaded once
    downloads = [(name, thread) for name, thread in reads if name.endswith(".tfs")]
    assert sorted(name for name, _ in downloads) == sorted(e["name"] for e in entries)
    assert [thread for name, thread in downloads if name not in first] == ["shard-prefetch"] * 4


def test_document_packing_never_crosses_a_document(tmp_path):
    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=32, batch_size=2, pack="document", pad_id=0, seed=4)
    batches = list(ds)
    assert batches and all(set(b) == {"tokens", "position_ids", "mask"} for b in batches)
    samples = [{k: b[k][i] for k in b} for b in batches for i in range(len(b["tokens"]))]
    covered = set()
    for s in samples:
        tokens, mask = s["tokens"].numpy(), s["mask"].numpy()
        real = tokens[mask]
        body = real[real != EOS]
        assert np.all(np.diff(body) == 1)  # consecutive ids: one document only
        assert EOS not in real[:-1]  # EOS can only close the window
        assert not mask[len(real):].any()
        covered.update(body.tolist())
    every = set()
    for shard in json.loads(Path(index).read_text())["shards"]:
        from storage.shards import decode_shard

        every.update(t for t in decode_shard((tmp_path / "d" / shard["name"]).read_bytes()).tokens.tolist() if t)
    assert covered == every  # every token of every document is in some window
    again = [b["tokens"].tolist() for b in TokenDataset([Source(index)], seq_len=32, batch_size=2,
                                                        pack="document", seed=4)]
    assert again == [b["tokens"].tolist() for b in batches]


def test_dataset_pickles_for_spawned_workers(tmp_path):
    import pickle

    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=9)
    clone = pickle.loads(pickle.dumps(ds))
    assert [b["tokens"].tolist() for b in clone] == [b["tokens"].tolist() for b in ds]
    loader = TokenLoader(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=9),
                         num_workers=2, multiprocessing_context="spawn")
    assert [tuple(r.tolist()) for b in loader for r in b["tokens"]] == windows(ds)


def test_shards_in_use_are_pinned_and_stale_partials_removed(tmp_path, s3_env):
    import boto3
    import fsspec

    make_dataset(tmp_path / "d")
    boto3.client("s3").create_bucket(Bucket="pins")
    fsspec.filesystem("s3").put(str(tmp_path / "d"), "s3://pins/v1", recursive=True)
    index = "s3://pins/v1/index.json"
    hot = tmp_path / "hot" / "_cache" / "v1-12345678"
    hot.mkdir(parents=True)
    (hot / "shard-00001.tfs.partial").write_bytes(b"half")  # no process holds its lock: stale
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    assert not (hot / "shard-00001.tfs.partial").exists()
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, cache=cache, buffer_shards=2,
                      prefetch_depth=0)
    it = iter(ds)
    next(it)
    assert any(cache._pins.values())  # the group being read is pinned
    list(it)
    assert not any(cache._pins.values())  # and released at the end of the epoch


def test_corrupt_shard_error_or_skip(tmp_path, s3_env):
    import boto3
    import fsspec

    from storage.shards import ShardError

    make_dataset(tmp_path / "d")
    boto3.client("s3").create_bucket(Bucket="corrupt")
    fs = fsspec.filesystem("s3")
    fs.put(str(tmp_path / "d"), "s3://corrupt/v1", recursive=True)
    bad = bytearray(fs.cat("s3://corrupt/v1/shard-00002.tfs"))
    bad[150] ^= 0xFF
    fs.pipe("s3://corrupt/v1/shard-00002.tfs", bytes(bad))
    index = "s3://corrupt/v1/index.json"
    strict = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=0,
                          cache=ShardCache(hot_dir=str(tmp_path / "h1")))
    with pytest.raises(ShardError, match="shard-00002.tfs"):
        list(strict)
    lenient = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=0,
                           cache=ShardCache(hot_dir=str(tmp_path / "h2")), on_corrupt="skip")
    got = [tuple(r.tolist()) for b in lenient for r in b["tokens"]]
    assert lenient.corrupt_shards == {"shard-00002.tfs"}
    # exactly the undamaged copy's windows, in order, less those of the damaged shard's group
    plan = lenient.plan(0)
    bad = next(g for g, group in enumerate(lenient.groups(0)[0]) if "shard-00002.tfs" in group.shards)
    intact = windows(TokenDataset([Source(str(tmp_path / "d" / "index.json"))], seq_len=16, batch_size=2,
                                  buffer_shards=1, prefetch_depth=0))
    want = [w for w, (_, group, _) in zip(intact, plan) if group != bad]
    assert 0 < len(got) < len(plan) and got == want


def test_the_loader_logs_its_counters_every_log_every_batches(tmp_path, caplog):
    """Every ``log_every`` batches one line with the loader's and the cache's counters."""
    import logging

    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=1)
    n = len(ds)
    loader = TokenLoader(ds, log_every=n // 2)
    with caplog.at_level(logging.INFO, logger="storage.loader"):
        batches = list(loader)
    lines = [r.getMessage() for r in caplog.records if r.name == "storage.loader"]
    assert len(batches) == n and len(lines) == n // (n // 2) and n % 2 == 0
    s, c = loader.stats, ds.cache.stats
    assert (s.batches, s.tokens) == (n, n * 2 * 17) and ds.bytes_per_token == 2
    assert lines[-1] == (f"loader: {n} batches, {n * 34} tokens, data-wait {100 * s.data_wait_fraction:.2f}%, "
                         f"first batch {s.first_batch_s:.3f}s, cache hit rate {c.hit_rate:.2f}, "
                         f"{c.bytes_fetched / 1e6:.1f} MB fetched for {n * 34 * 2 / 1e6:.1f} MB consumed")
    assert lines[0].startswith(f"loader: {n // 2} batches, {n // 2 * 34} tokens, ")


def test_a_state_of_another_seed_is_refused_and_one_without_a_seed_is_read(tmp_path):
    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=3, seed=5)
    assert TokenLoader(ds).state_dict() == {"epoch": 0, "batches": 0, "seed": 5}
    with pytest.raises(ValueError, match="^state is for seed 6, this dataset uses 5$"):
        ds.load_state_dict({"epoch": 0, "batches": 2, "seed": 6})
    ds.load_state_dict({"epoch": 1, "batches": 2})  # a state written before states had a seed
    assert (ds.epoch, ds.start_batch) == (1, 2)


def test_document_windows_start_every_seq_len_tokens_of_a_document(tmp_path):
    """Document packing, documents of 1 to 40 tokens: a document of L tokens gives
    ceil((L - 1) / seq_len) windows starting at 0, seq_len, 2 seq_len... of it (a
    1-token document none), with position_ids counting from the document's start and
    int64 tokens."""
    root = tmp_path / "d"
    root.mkdir()
    lengths = [1, 2, 8, 9, 10, 17, 40, 1, 3]
    next_token, docs = 1, []
    for n in lengths:
        docs.append(np.arange(next_token, next_token + n, dtype=np.uint32))
        next_token += n
    data, d, t, sha = encode_shard(docs, np.dtype(np.uint32))
    (root / "s.tfs").write_bytes(data)
    (root / "index.json").write_text(json.dumps({"version": "v1", "shards": [
        {"name": "s.tfs", "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha}]}))
    seq = 8
    ds = TokenDataset([Source(str(root / "index.json"))], seq_len=seq, batch_size=1, pack="document")
    starts = {int(doc[0]): len(doc) for doc in docs}
    got = []
    for batch in ds:
        assert batch["tokens"].dtype == torch.int64 and batch["position_ids"].dtype == torch.int64
        tokens, positions, mask = batch["tokens"][0], batch["position_ids"][0], batch["mask"][0]
        assert torch.equal(positions, positions[0] + torch.arange(seq + 1)) and int(positions[0]) % seq == 0
        first = int(tokens[0]) - int(positions[0])  # the document's first token id
        real = tokens[mask]
        assert torch.equal(real, torch.arange(int(tokens[0]), int(tokens[0]) + len(real)))
        assert int(real[-1]) < first + starts[first]  # inside the document
        got.append((first, int(positions[0])))
    want = sorted((int(doc[0]), s) for doc in docs for s in range(0, max(len(doc) - 1, 0), seq))
    assert sorted(got) == want and len(want) == sum(-(-(n - 1) // seq) for n in lengths)


def test_a_dropped_group_in_document_packing_and_pins_released(tmp_path, caplog):
    """Document packing over a shard whose document index is damaged: ``error`` raises
    naming it; ``skip`` drops exactly its group's windows, logs it, yields empty
    batches of the right shape where a batch had only its windows, and leaves no shard
    pinned at the end (a dropped group among those still held)."""
    import logging

    from storage.shards import ShardError
    from tests.storage.datasets import damage

    make_dataset(tmp_path / "d")
    index = str(tmp_path / "d" / "index.json")
    damage("truncated", tmp_path / "d" / "shard-00002.tfs", index)
    options = dict(seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=0, pack="document", seed=3)
    with pytest.raises(ShardError, match="shard-00002.tfs"):
        list(TokenDataset([Source(index)], cache=ShardCache(hot_dir=str(tmp_path / "h1")), **options))
    cache = ShardCache(hot_dir=str(tmp_path / "h2"))
    lenient = TokenDataset([Source(index)], cache=cache, on_corrupt="skip", **options)
    with caplog.at_level(logging.ERROR, logger="storage.loader"):
        batches = list(lenient)
    assert lenient.corrupt_shards == {"shard-00002.tfs"}
    (message,) = [r.getMessage() for r in caplog.records if r.name == "storage.loader"]
    assert message.startswith("skipping the windows of shards shard-00002.tfs: ") and "truncated" in message
    assert not any(cache._pins.values())
    shapes = {tuple(b["tokens"].shape) for b in batches}
    assert all(b["tokens"].dtype == torch.int64 and b["mask"].dtype == torch.bool for b in batches)
    assert shapes <= {(0, 17), (1, 17), (2, 17)}
    bad = next(g for g, group in enumerate(lenient.groups(0)[0]) if "shard-00002.tfs" in group.shards)
    assert lenient._doc_windows(lenient.groups(0)[0][bad]) == []


def test_concat_skip_releases_every_pin_and_batches_are_int64(tmp_path):
    from tests.storage.datasets import damage

    make_dataset(tmp_path / "d")
    index = str(tmp_path / "d" / "index.json")
    damage("payload byte", tmp_path / "d" / "shard-00001.tfs", index)
    cache = ShardCache(hot_dir=str(tmp_path / "h"))
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=0,
                      cache=cache, on_corrupt="skip", seed=1)
    groups = ds.groups(0)[0]
    assert "shard-00001.tfs" not in groups[-1].shards  # the dropped group is not the last one read
    batches = list(ds)
    assert batches and all(b["tokens"].dtype == torch.int64 for b in batches)
    assert ds.corrupt_shards == {"shard-00001.tfs"} and not any(cache._pins.values())


def test_the_prefetcher_is_handed_the_next_prefetch_depth_shards(tmp_path, monkeypatch):
    from storage.prefetch import Prefetcher

    index = make_dataset(tmp_path / "d", shards=6)
    handed: list[list[str]] = []
    monkeypatch.setattr(Prefetcher, "ahead", lambda self, names: handed.append(list(names)))
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, buffer_shards=1, prefetch_depth=3, seed=2)
    list(ds)
    order = [g.shards[0] for g in ds.groups(0)[0]]
    assert handed == [order[i + 1:i + 4] for i in range(len(order))]


def test_each_dataset_argument_is_checked_alone(tmp_path):
    index = make_dataset(tmp_path / "d")
    ok = dict(seq_len=1, batch_size=1, buffer_shards=1)
    assert TokenDataset([Source(index)], **ok).seq_len == 1
    for name in ok:
        with pytest.raises(ValueError, match="^seq_len, batch_size and buffer_shards must be > 0$"):
            TokenDataset([Source(index)], **{**ok, name: 0})
    with pytest.raises(ValueError, match="^pack must be concat or document, got 'x'$"):
        TokenDataset([Source(index)], seq_len=4, batch_size=1, pack="x")
    with pytest.raises(ValueError, match="^on_corrupt must be error or skip, got 'x'$"):
        TokenDataset([Source(index)], seq_len=4, batch_size=1, on_corrupt="x")
    for rank, world in ((3, 3), (-1, 3)):
        with pytest.raises(ValueError, match=f"^rank {rank} outside world size {world}$"):
            TokenDataset([Source(index)], seq_len=4, batch_size=1, rank=rank, world_size=world)
    lone = TokenDataset([Source(index)], seq_len=4, batch_size=1, rank=None, world_size=3)
    assert (lone.rank, lone.world_size) == (0, 1)  # both or neither: not distributed, one rank
    assert (lone.buffer_shards, lone.prefetch_depth) == (4, 4)  # the documented defaults


def test_bytes_per_token_follow_the_index_dtype(tmp_path):
    from tests.storage.datasets import make_version

    wide = make_version(tmp_path / "a", extra={"dtype": "uint32"})
    narrow = make_version(tmp_path / "b", extra={"dtype": "uint16"}, dtype=np.dtype(np.uint16))
    assert TokenDataset([Source(wide)], seq_len=4, batch_size=1).bytes_per_token == 4
    assert TokenDataset([Source(narrow)], seq_len=4, batch_size=1).bytes_per_token == 2
    assert TokenDataset([Source(narrow), Source(wide)], seq_len=4, batch_size=1).bytes_per_token == 4


def test_loader_options_pass_through_and_its_stats_add_up(tmp_path):
    """``log_every`` is the loader's, every other option the DataLoader's; the stats are
    consistent: the first batch apart, waits inside the time between requests."""
    import time

    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=1)
    assert TokenLoader(ds).log_every == 1000
    loader = TokenLoader(ds, num_workers=2, log_every=7)
    assert loader.num_workers == 2 and loader.log_every == 7
    t0 = time.perf_counter()
    n = sum(1 for _ in loader)
    elapsed = time.perf_counter() - t0
    s = loader.stats
    assert n == s.batches == len(ds) > 2 and s.tokens == n * 2 * 17
    assert 0 < s.first_batch_s < elapsed and 0 < s.total_s < elapsed
    assert 0 <= s.max_wait_s <= s.wait_s <= s.total_s and 0 <= s.data_wait_fraction <= 1


def test_every_rank_plans_the_same_number_of_samples(tmp_path):
    index = make_dataset(tmp_path / "d")
    everything = TokenDataset([Source(index)], seq_len=16, batch_size=1, seed=4).plan_rows(0)
    for world in (2, 3, 4, 5, 7):
        plans = [TokenDataset([Source(index)], seq_len=16, batch_size=1, seed=4, rank=r, world_size=world).plan_rows(0)
                 for r in range(world)]
        assert [len(p) for p in plans] == [len(everything) // world] * world, world
    assert any(len(everything) % world for world in (2, 3, 4, 5, 7))  # some remainder was dropped


def test_a_version_without_shards_plans_nothing(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    (root / "index.json").write_text(json.dumps({"version": "v1", "shards": []}))
    ds = TokenDataset([Source(str(root / "index.json"))], seq_len=16, batch_size=1)
    assert len(ds.plan_rows(0)) == 0 and len(ds) == 0 and list(ds) == []


def test_empty_document_batches_and_skip_messages(tmp_path, caplog):
    """A payload damaged (found when the group is read, after planning): in document
    packing the batches made only of its windows come out empty but shaped; the log
    names every shard of the dropped group and the damage."""
    import logging

    from tests.storage.datasets import damage

    make_dataset(tmp_path / "d")
    index = str(tmp_path / "d" / "index.json")
    damage("payload byte", tmp_path / "d" / "shard-00003.tfs", index)
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=1, buffer_shards=2, prefetch_depth=0,
                      pack="document", on_corrupt="skip", cache=ShardCache(hot_dir=str(tmp_path / "h")))
    with caplog.at_level(logging.ERROR, logger="storage.loader"):
        batches = list(ds)
    empty = [b for b in batches if len(b["tokens"]) == 0]
    assert empty and len(empty) < len(batches)
    for b in empty:
        assert set(b) == {"tokens", "position_ids", "mask"}
        assert [tuple(b[k].shape) for k in ("tokens", "position_ids", "mask")] == [(0, 17)] * 3
        assert (b["tokens"].dtype, b["position_ids"].dtype, b["mask"].dtype) == (torch.int64, torch.int64, torch.bool)
    group = next(g for g in ds.groups(0)[0] if "shard-00003.tfs" in g.shards)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "storage.loader"]
    assert message.startswith(f"skipping the windows of shards {', '.join(group.shards)}: shard-00003.tfs")
    assert "checksum mismatch" in message and len(group.shards) == 2


def test_a_loader_state_loaded_is_the_state_it_reports(tmp_path):
    index = make_dataset(tmp_path / "d")
    loader = TokenLoader(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=5))
    loader.load_state_dict({"epoch": 1, "batches": 2, "seed": 5})
    assert loader.state_dict() == {"epoch": 1, "batches": 2, "seed": 5}


def test_entering_a_group_unpins_only_its_own_streams_previous_group(tmp_path):
    """Two mixed streams read group after group, interleaved: entering a group of one
    stream releases that stream's previous group and never the other stream's current
    one (its shards stay pinned while it is being read)."""
    a = make_dataset(tmp_path / "a", shards=6, seed=1)
    b = make_dataset(tmp_path / "b", shards=6, seed=2)
    cache = ShardCache(hot_dir=str(tmp_path / "h"))
    ds = TokenDataset([Source(a, 1.0), Source(b, 1.0)], seq_len=16, batch_size=2, buffer_shards=2,
                      prefetch_depth=0, cache=cache, seed=3)
    entering: list[int] = []
    released: list[tuple[int, set[int]]] = []
    real_enter, real_release = ds._enter, ds._release

    def enter(key, *args):
        entering.append(key[0])
        try:
            return real_enter(key, *args)
        finally:
            entering.pop()

    def release(resolved, groups):
        if entering:
            released.append((entering[-1], {stream for stream, _ in resolved}))
        return real_release(resolved, groups)

    ds._enter, ds._release = enter, release
    plain = TokenDataset([Source(a, 1.0), Source(b, 1.0)], seq_len=16, batch_size=2, buffer_shards=2,
                         prefetch_depth=0, seed=3)
    assert [b["tokens"].tolist() for b in ds] == [b["tokens"].tolist() for b in plain]
    streams = [s for s, _, _ in ds.plan(0)]
    assert 0 < streams.count(0) < len(streams)  # really interleaved
    nonempty = [(s, r) for s, r in released if r]
    assert {s for s, _ in nonempty} == {0, 1}  # both streams moved on to later groups
    assert all(r == {s} for s, r in nonempty), nonempty
    assert not any(cache._pins.values())  # the epoch's end released the rest


def _with_xxh3(index: str, wrong: str | None = None) -> None:
    """Adds every shard's xxh3_128 to ``index`` (the shard named ``wrong`` gets a wrong one)."""
    import xxhash

    from storage.shards import HEADER_SIZE

    path = Path(index)
    data = json.loads(path.read_text())
    for entry in data["shards"]:
        body = (path.parent / entry["name"]).read_bytes()[HEADER_SIZE:]
        entry["xxh3_128"] = "0" * 32 if entry["name"] == wrong else xxhash.xxh3_128(body).hexdigest()
    path.write_text(json.dumps(data))


def test_the_loader_checks_the_fast_checksum_by_default_and_sha256_when_asked(tmp_path):
    """The default check compares a shard's xxh3_128 where index.json records one (a wrong
    one fails the shard although its sha256 is right); ``checksum="sha256"`` compares the
    sha256 only; the setting travels to spawned workers; anything else is refused."""
    import pickle

    from storage.shards import ShardError

    index = make_dataset(tmp_path / "d")
    expected = windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3))
    _with_xxh3(index)
    assert windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3)) == expected
    _with_xxh3(index, wrong="shard-00002.tfs")
    with pytest.raises(ShardError, match=r"shard-00002.tfs.*checksum mismatch \(xxh3_128;"):
        windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3))
    strong = ShardCache(hot_dir=str(tmp_path / "hot"), checksum="sha256")
    assert windows(TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=3, cache=strong)) == expected
    assert strong.stats.verified == 6
    assert pickle.loads(pickle.dumps(strong)).checksum == "sha256"
    with pytest.raises(ValueError, match="checksum must be one of"):
        ShardCache(hot_dir=str(tmp_path / "hot"), checksum="crc32")


def test_one_process_loader_skips_dataloaders_iterator_only_when_that_changes_nothing(tmp_path, monkeypatch):
    """With 0 workers, no pinning and the default conversion, TokenLoader iterates the
    dataset itself (same batches, same stats); a collate_fn of the user's, or workers,
    go through DataLoader's iterator as before."""
    from torch.utils.data import DataLoader

    index = make_dataset(tmp_path / "d")
    ds = TokenDataset([Source(index)], seq_len=16, batch_size=2, seed=4)
    through: list[int] = []
    original = DataLoader.__iter__
    monkeypatch.setattr(DataLoader, "__iter__", lambda self: through.append(1) or original(self))
    direct = TokenLoader(ds)
    batches = [b["tokens"].tolist() for b in direct]
    assert not through and direct.stats.batches == len(batches) == len(ds) and direct.batches == len(ds)
    assert batches == [b["tokens"].tolist() for b in ds]
    marked = TokenLoader(ds, collate_fn=lambda b: {**b, "seen": True})
    assert [b["tokens"].tolist() for b in marked if b["seen"]] == batches and through == [1]
    assert [b["tokens"].tolist() for b in TokenLoader(ds, num_workers=1)] == batches and through == [1, 1]


def test_an_index_with_a_malformed_xxh3_128_is_refused_naming_the_shard(tmp_path):
    from storage.index import IndexFileError, validate_index

    index = json.loads(Path(make_dataset(tmp_path / "d")).read_text())
    index["shards"][1]["xxh3_128"] = "Z" * 32
    with pytest.raises(IndexFileError, match=r"shards\[1\] \(shard-00001.tfs\): xxh3_128 must be 32 lowercase hex"):
        validate_index(index)
    index["shards"][1]["xxh3_128"] = "0" * 32
    validate_index(index)
