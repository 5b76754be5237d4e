"""The loader's vectorised plan helpers against straightforward per-row references:
``position_ids`` (positions restart after every EOS) and ``window_locations`` (where each
window of a concat-packed plan starts, across shard boundaries, streams and groups)."""

from __future__ import annotations

import numpy as np
import pytest

from storage.plan import Group, position_ids, window_locations, windows_in

EOS = 0


def positions_reference(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """One row at a time, one token at a time: 0 at the row start, 0 after each EOS."""
    out = np.zeros(tokens.shape, dtype=np.int64)
    for r, row in enumerate(tokens.tolist()):
        position = 0
        for i, token in enumerate(row):
            out[r, i] = position
            position = 0 if token == eos_id else position + 1
    return out


def locations_reference(plan: np.ndarray, groups: list[list[Group]], seq_len: int) -> np.ndarray:
    """For each (stream, group, window): the group's number over all streams, the shard
    holding the window's first token (``-1 - shard`` if the window runs past that shard's
    end) and the token in that shard where it starts."""
    numbers = {}
    for stream, stream_groups in enumerate(groups):
        for g in range(len(stream_groups)):
            numbers[(stream, g)] = len(numbers)
    rows = []
    for stream, g, window in plan.tolist():
        group = groups[stream][g]
        start = window * seq_len
        offset = 0
        for shard, tokens in enumerate(group.tokens):
            if start < offset + tokens:  # the first shard whose end lies past the start
                break
            offset += tokens
        crosses = start + seq_len + 1 > offset + group.tokens[shard]
        rows.append((numbers[(stream, g)], -1 - shard if crosses else shard, start - offset))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def window_tokens(groups: list[list[Group]], streams: list[list[np.ndarray]], locations: np.ndarray,
                  seq_len: int) -> list[list[int]]:
    """The tokens a location row names (shard arrays of each group, read on across shards)."""
    flat = [(stream, g) for stream, stream_groups in enumerate(groups) for g in range(len(stream_groups))]
    out = []
    for number, shard, lo in locations.tolist():
        stream, g = flat[number]
        arrays = [streams[stream][name] for name in groups[stream][g].shards]
        i = shard if shard >= 0 else -1 - shard
        got: list[int] = []
        while len(got) < seq_len + 1:
            got += arrays[i][lo:lo + seq_len + 1 - len(got)].tolist()
            i, lo = i + 1, 0
        out.append(got)
    return out


# --- position_ids -----------------------------------------------------------------------------
@pytest.mark.parametrize("eos_rate", [0.0, 0.01, 0.2, 0.7, 1.0])
@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (3, 1), (8, 33), (5, 257)])
def test_position_ids_match_a_per_row_loop_on_random_tokens(eos_rate, shape):
    rng = np.random.default_rng([int(eos_rate * 100), *shape])
    tokens = rng.integers(1, 50, size=shape).astype(np.int64)
    tokens[rng.random(shape) < eos_rate] = EOS
    got = position_ids(tokens, EOS)
    assert got.dtype == np.int64 and got.shape == shape
    np.testing.assert_array_equal(got, positions_reference(tokens, EOS))


@pytest.mark.parametrize("rows,case", [
    ([[5, 6, 7, 8]], "no EOS"),
    ([[5, 6, 7, 0], [5, 6, 7, 8]], "EOS closing a row: the next row still starts at 0"),
    ([[0, 5, 6, 7], [8, 9, 1, 2]], "EOS opening a row"),
    ([[5, 0, 0, 0, 6, 7]], "consecutive EOS"),
    ([[0, 0, 0, 0], [0, 0, 0, 0]], "only EOS"),
    ([[5, 6, 0], [0, 7, 0], [8, 0, 9]], "EOS at both ends and across rows"),
    ([[5, 6, 7, 8], [1, 2, 3, 4], [9, 9, 9, 0]], "EOS only in the last token of the batch"),
])
def test_position_ids_edge_rows(rows, case):
    tokens = np.array(rows, dtype=np.int64)
    np.testing.assert_array_equal(position_ids(tokens, EOS), positions_reference(tokens, EOS), err_msg=case)


def test_position_ids_values_spelled_out():
    tokens = np.array([[3, 0, 4, 5, 0, 0, 6], [7, 8, 9, 0, 1, 2, 3]], dtype=np.int64)
    assert position_ids(tokens, EOS).tolist() == [[0, 1, 0, 1, 2, 0, 0], [0, 1, 2, 3, 0, 1, 2]]
    assert position_ids(tokens, 9).tolist() == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 3]]  # another id


def test_position_ids_of_an_empty_batch_and_of_a_uint16_batch():
    assert position_ids(np.zeros((0, 5), dtype=np.int64), EOS).shape == (0, 5)
    small = np.array([[1, 0, 2], [0, 3, 4]], dtype=np.uint16)
    np.testing.assert_array_equal(position_ids(small, EOS), positions_reference(small, EOS))


# --- window_locations -------------------------------------------------------------------------
def make_groups(rng: np.random.Generator, token_counts: list[list[list[int]]]) -> tuple[
        list[list[Group]], list[dict[str, np.ndarray]]]:
    """Groups of shards with the given token counts per (stream, group, shard); every
    token is unique over all streams, so a window's tokens say where it came from."""
    groups, streams, next_token = [], [], 1
    for stream, stream_groups in enumerate(token_counts):
        arrays: dict[str, np.ndarray] = {}
        out = []
        for g, counts in enumerate(stream_groups):
            names = []
            for s, count in enumerate(counts):
                name = f"s{stream}-g{g}-shard{s}"
                arrays[name] = np.arange(next_token, next_token + count, dtype=np.int64)
                next_token += count
                names.append(name)
            out.append(Group(stream, tuple(names), tuple(counts)))
        groups.append(out)
        streams.append(arrays)
    return groups, streams


def full_plan(groups: list[list[Group]], seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """Every window of every group, streams interleaved in a random order."""
    rows = [(stream, g, w) for stream, stream_groups in enumerate(groups) for g, group in enumerate(stream_groups)
            for w in range(windows_in(group.total, seq_len))]
    rows = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return rows[rng.permutation(len(rows))]


def expected_tokens(groups: list[list[Group]], streams: list[dict[str, np.ndarray]], plan: np.ndarray,
                    seq_len: int) -> list[list[int]]:
    """The window as a slice of the group's shards laid end to end."""
    out = []
    for stream, g, w in plan.tolist():
        whole = np.concatenate([streams[stream][name] for name in groups[stream][g].shards])
        out.append(whole[w * seq_len:w * seq_len + seq_len + 1].tolist())
    return out


@pytest.mark.parametrize("seq_len", [4, 8])
def test_window_locations_at_and_across_shard_boundaries(seq_len):
    """Shards whose lengths are multiples of seq_len, of seq_len + 1, shorter than a
    window and empty: windows starting exactly on a boundary, ending exactly on one, and
    running over one or several shards."""
    rng = np.random.default_rng(seq_len)
    counts = [[[seq_len * 3, seq_len * 2 + 1, 3, seq_len + 1],  # stream 0, group 0
               [1, 2, 1, seq_len * 4]],  # windows over several short shards
              [[seq_len * 5], [0, seq_len * 2, 0, seq_len + 3]]]  # stream 1: one shard; empty shards
    groups, streams = make_groups(rng, counts)
    plan = full_plan(groups, seq_len, rng)
    got = window_locations(plan, groups, seq_len)
    assert got.dtype == np.int64 and got.shape == plan.shape
    np.testing.assert_array_equal(got, locations_reference(plan, groups, seq_len))
    assert window_tokens(groups, streams, got, seq_len) == expected_tokens(groups, streams, plan, seq_len)
    assert (got[:, 1] < 0).any() and (got[:, 1] > 0).any() and (got[:, 2] == 0).any()  # every case occurs


@pytest.mark.parametrize("seed", range(6))
def test_window_locations_match_the_reference_on_random_layouts(seed):
    rng = np.random.default_rng(seed)
    seq_len = int(rng.integers(2, 12))
    counts = [[[int(rng.integers(0, 40)) for _ in range(int(rng.integers(1, 5)))]
               for _ in range(int(rng.integers(1, 5)))] for _ in range(int(rng.integers(1, 4)))]
    groups, streams = make_groups(rng, counts)
    plan = full_plan(groups, seq_len, rng)
    got = window_locations(plan, groups, seq_len)
    np.testing.assert_array_equal(got, locations_reference(plan, groups, seq_len))
    assert window_tokens(groups, streams, got, seq_len) == expected_tokens(groups, streams, plan, seq_len)


def test_window_locations_group_numbers_count_over_streams():
    groups, _ = make_groups(np.random.default_rng(0), [[[10], [10], [10]], [[10], [10]]])
    plan = np.array([[1, 1, 0], [0, 2, 1], [1, 0, 2], [0, 0, 0]], dtype=np.int64)
    assert window_locations(plan, groups, 3).tolist() == [[4, 0, 0], [2, 0, 3], [3, 0, 6], [0, 0, 0]]


def test_window_locations_of_an_empty_plan():
    groups, _ = make_groups(np.random.default_rng(0), [[[10]]])
    assert window_locations(np.zeros((0, 3), dtype=np.int64), groups, 4).shape == (0, 3)
