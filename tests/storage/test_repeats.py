"""Upsampled documents: where their copies go (apart), validation, the per-rule counts."""

from __future__ import annotations

import pytest

from storage.repeats import (check_repeats, copy_bucket, copy_buckets, min_copy_distance, shard_repeat_stats,
                             upsampling_summary)


@pytest.mark.parametrize("shards", [1, 2, 3, 5, 8, 13, 64])
def test_copies_land_in_different_shards_as_far_apart_as_possible(shards):
    for repeats in range(1, shards + 1):
        for first in range(shards):
            buckets = copy_buckets(first, repeats, shards)
            assert buckets[0] == first  # copy 0 stays where the document goes without upsampling
            assert len(set(buckets)) == repeats, (first, repeats, shards)  # never two in one shard
            # floor(S / r) is the most r places on a circle of S can all be apart
            assert min_copy_distance(buckets, shards) == (shards // repeats if repeats > 1 else shards)


@pytest.mark.parametrize("shards,repeats", [(1, 3), (2, 3), (3, 7), (4, 16), (5, 11)])
def test_more_copies_than_shards_are_split_evenly(shards, repeats):
    for first in range(shards):
        per_shard = [0] * shards
        for bucket in copy_buckets(first, repeats, shards):
            per_shard[bucket] += 1
        assert set(per_shard) <= {repeats // shards, -(-repeats // shards)}, per_shard


def test_the_rule_is_the_documented_formula():
    assert copy_buckets(7, 3, 10) == [7, 0, 3]  # 7 + floor(k * 10 / 3) mod 10
    assert copy_buckets(0, 4, 4) == [0, 1, 2, 3] and copy_buckets(2, 2, 9) == [2, 6]
    assert copy_bucket(5, 0, 1, 6) == 5
    for bad in ((0, 3, 3, 4), (4, 0, 1, 4), (0, 0, 0, 4), (0, 0, 1, 0), (0, -1, 2, 4)):
        with pytest.raises(ValueError, match="out of range"):
            copy_bucket(*bad)


def test_min_copy_distance_counts_around_the_circle():
    assert min_copy_distance([0, 9], 10) == 1 and min_copy_distance([3, 3], 10) == 0
    assert min_copy_distance([2], 10) == 10 and min_copy_distance([0, 5], 10) == 5


@pytest.mark.parametrize("value,cap,problem", [
    (1, 16, None), (16, 16, None), (3, 3, None),
    (0, 16, "outside 1..16"), (-2, 16, "outside 1..16"), (17, 16, "outside 1..16"), (10**12, 16, "outside"),
    (True, 16, "integer"), (2.0, 16, "integer"), ("3", 16, "integer"), (None, 16, "integer"),
])
def test_check_repeats(value, cap, problem):
    got = check_repeats(value, cap)
    assert got is None if problem is None else problem in got


def test_shard_stats_count_each_document_once_under_each_of_its_rules():
    # (tokens, copy, repeats, rules): d1 x3 under two rules (its copy 1 here too), d2 x1, d3 x2 (copy 1 only)
    stats = shard_repeat_stats([(10, 0, 3, ("top", "label", "top")), (10, 1, 3, ()), (4, 0, 1, ()),
                                (7, 1, 2, ())])
    assert stats == {"repeat_docs": 2, "repeat_tokens": 17, "upsampled_docs": 1,
                     "rules": {"label": [1, 10, 30], "top": [1, 10, 30]}}


def test_upsampling_summary_adds_shards_in_any_order():
    a = {"num_docs": 4, "num_tokens": 31, **shard_repeat_stats([(10, 0, 3, ("top",)), (10, 1, 3, ()),
                                                               (4, 0, 1, ()), (7, 1, 2, ())])}
    b = {"num_docs": 3, "num_tokens": 24, **shard_repeat_stats([(10, 2, 3, ()), (7, 0, 2, ("top", "x")),
                                                               (7, 0, 1, ())])}
    summary = upsampling_summary([a, b])
    assert summary == upsampling_summary([b, a]) == {
        "documents": 4, "upsampled_docs": 2, "tokens_before": 28, "tokens_after": 55, "repeat_docs": 3,
        "repeat_tokens": 27, "rules": {"top": {"documents": 2, "tokens_before": 17, "tokens_after": 44},
                                       "x": {"documents": 1, "tokens_before": 7, "tokens_after": 14}}}
    # an index written before upsampling: its shards carry none of the fields
    assert upsampling_summary([{"num_docs": 5, "num_tokens": 50}]) == {
        "documents": 5, "upsampled_docs": 0, "tokens_before": 50, "tokens_after": 50, "repeat_docs": 0,
        "repeat_tokens": 0, "rules": {}}
