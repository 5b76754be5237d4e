"""The loader's epoch accounting: windows, tokens and the repeat tokens among them, checked
against the windows the loader really serves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from storage.loader import Source, TokenDataset, TokenLoader
from storage.shards import encode_shard

SEQ = 16


def make_upsampled(root: Path, repeat_shares: list[float], seed: int = 0) -> tuple[str, list[tuple[int, int]]]:
    """A version of unique token ids (no EOS: each token names its shard) whose shard i
    records ``repeat_shares[i]`` of its tokens as repeats; returns the index path and each
    shard's (lowest, highest) token."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    entries, ranges, next_token = [], [], 1
    for s, share in enumerate(repeat_shares):
        docs = []
        for _ in range(int(rng.integers(3, 7))):
            n = int(rng.integers(20, 90))
            docs.append(np.arange(next_token, next_token + n, dtype=np.uint32))
            next_token += n
        data, d, t, sha = encode_shard(docs, np.dtype(np.uint32))
        name = f"shard-{s:05d}.tfs"
        (root / name).write_bytes(data)
        ranges.append((int(docs[0][0]), int(docs[-1][-1])))
        entries.append({"name": name, "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha,
                        "repeat_docs": round(d * share), "repeat_tokens": round(t * share)})
    index = {"version": "v1", "shards": entries, "repeat_docs": sum(e["repeat_docs"] for e in entries),
             "repeat_tokens": sum(e["repeat_tokens"] for e in entries)}
    (root / "index.json").write_text(json.dumps(index))
    return str(root / "index.json"), ranges


def share_of(token: int, ranges: list[tuple[int, int]], shares: list[float]) -> float:
    return next(shares[i] for i, (lo, hi) in enumerate(ranges) if lo <= token <= hi)


SHARES = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("buffer_shards", [1, 3])
def test_concat_epoch_repeat_tokens_are_the_served_windows_of_repeated_shards(tmp_path, buffer_shards):
    index, ranges = make_upsampled(tmp_path / "d", SHARES)
    ds = TokenDataset([Source(index)], seq_len=SEQ, batch_size=3, seed=7, buffer_shards=buffer_shards)
    served = [row.tolist() for batch in TokenLoader(ds) for row in batch["tokens"]]
    expected = sum(SEQ * share_of(w[0], ranges, SHARES) for w in served)
    got = ds.epoch_tokens()
    assert got.epoch == 0 and got.batches == len(ds) and got.samples == len(served) == len(ds) * 3
    assert got.tokens == SEQ * len(served) and got.repeat_tokens == expected > 0
    assert got.unique_tokens == got.tokens - expected and got.repeat_share == expected / got.tokens
    ds.set_epoch(1)  # another epoch, another order: the same windows in all, the same counts
    assert ds.epoch_tokens().epoch == 1 and ds.epoch_tokens(0) == got


def test_the_batches_a_resumed_state_consumed_are_counted(tmp_path):
    index, ranges = make_upsampled(tmp_path / "d", SHARES)
    ds = TokenDataset([Source(index)], seq_len=SEQ, batch_size=2, seed=1)
    loader, seen = TokenLoader(ds), []
    for i, batch in enumerate(loader):
        seen += [row.tolist() for row in batch["tokens"]]
        if i == 4:
            break
    state = loader.state_dict()
    consumed = TokenDataset([Source(index)], seq_len=SEQ, batch_size=2, seed=1).epoch_tokens(
        state["epoch"], state["batches"])
    assert consumed.batches == 5 and consumed.samples == len(seen) == 10
    assert consumed.repeat_tokens == sum(SEQ * share_of(w[0], ranges, SHARES) for w in seen)
    assert ds.epoch_tokens(batches=10 ** 6) == ds.epoch_tokens()  # no more than the epoch has
    assert ds.epoch_tokens(batches=0).tokens == 0
    for bad in (-1, True, 2.5, "3"):
        with pytest.raises(ValueError, match="batches must be an integer"):
            ds.epoch_tokens(batches=bad)


def test_document_packing_counts_the_real_tokens_of_each_window(tmp_path):
    index, ranges = make_upsampled(tmp_path / "d", SHARES)
    ds = TokenDataset([Source(index)], seq_len=SEQ, batch_size=2, seed=3, pack="document", pad_id=0)
    targets = repeats = 0.0
    for batch in ds:
        for tokens, mask in zip(batch["tokens"].tolist(), batch["mask"].tolist()):
            real = sum(mask) - 1  # the tokens trained on: every real one but the first
            targets += real
            repeats += real * share_of(tokens[0], ranges, SHARES)
    got = ds.epoch_tokens()
    assert got.tokens == targets and got.repeat_tokens == repeats > 0


def test_a_version_without_repeats_has_none_in_its_epochs(tmp_path):
    index, _ = make_upsampled(tmp_path / "d", [0.0] * 5)
    plain = json.loads(Path(index).read_text())
    for entry in plain["shards"]:  # an index written before upsampling: no repeat fields at all
        del entry["repeat_docs"], entry["repeat_tokens"]
    del plain["repeat_docs"], plain["repeat_tokens"]
    Path(index).write_text(json.dumps(plain))
    got = TokenDataset([Source(index)], seq_len=SEQ, batch_size=2).epoch_tokens()
    assert got.tokens > 0 and got.repeat_tokens == 0 and got.repeat_share == 0.0


def test_a_partial_share_is_estimated_per_window_and_mixing_counts_every_stream(tmp_path):
    half, ranges = make_upsampled(tmp_path / "a", [0.5, 0.25, 0.0], seed=1)
    none, _ = make_upsampled(tmp_path / "b", [0.0, 0.0, 0.0], seed=2)
    ds = TokenDataset([Source(half, 1.0), Source(none, 1.0)], seq_len=SEQ, batch_size=2, seed=5)
    shares = [e["repeat_tokens"] / e["num_tokens"] for e in json.loads(Path(half).read_text())["shards"]]
    served = [row.tolist() for batch in TokenLoader(ds) for row in batch["tokens"]]
    got = ds.epoch_tokens()
    # both versions number their tokens from 1: the plan (served in its order) tells the streams apart
    streams = ds.plan_rows(0)[:got.samples, 0].tolist()
    assert got.samples == len(served) and 0 in streams and 1 in streams
    expected = sum(SEQ * share_of(w[0], ranges, shares) for w, s in zip(served, streams) if s == 0)
    assert 0 < got.repeat_tokens < got.tokens and abs(got.repeat_tokens - expected) <= 0.5
