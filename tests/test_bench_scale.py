"""The scale benchmark's process-tree sampler: peaks per stage and process, the progress
file a stopped run leaves, and the memory limit that stops a tree (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_scale import TreeSampler, _stop_tree, stage_running

# a parent that starts a child holding ~60 MB, both then sleep (the tree a job makes)
TREE = ("import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import time; b = bytearray(60 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(60)'])\n"
        "time.sleep(60)\n")


def _start_tree() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)


def _wait_for(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the sampler never got there"
        time.sleep(0.05)


def test_stage_running_is_the_first_stage_without_a_manifest(tmp_path: Path) -> None:
    assert stage_running(None) == "?"
    assert stage_running(tmp_path) == "extract"
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "extract.json").write_text("{}")
    assert stage_running(tmp_path) == "dedup_exact"
    for stage in ("dedup_exact", "dedup_minhash", "tokenize"):
        (tmp_path / "manifests" / f"{stage}.json").write_text("{}")
    assert stage_running(tmp_path) == "done"


def test_a_running_tree_leaves_a_progress_file_with_its_peaks_per_stage(tmp_path: Path) -> None:
    out, progress = tmp_path / "out", tmp_path / "progress.json"
    (out / "manifests").mkdir(parents=True)
    (out / "manifests" / "extract.json").write_text("{}")
    proc = _start_tree()
    sampler = TreeSampler(proc.pid, 10 << 20, out, progress, interval_s=0.05, snapshot_every=3)
    try:
        sampler.start()
        # the child's 60 MB are counted (the tree, not only the process started)
        _wait_for(lambda: progress.exists() and json.loads(progress.read_text())["peak_pss_mb"] >= 60)
        first = json.loads(progress.read_text())
        assert first["stage"] == "dedup_exact" and first["samples"] % 3 == 0
        assert first["peak_by_stage_mb"]["dedup_exact"]["python worker"] >= 60
        # the next stage: its peaks are kept apart from the first one's
        (out / "manifests" / "dedup_exact.json").write_text("{}")
        _wait_for(lambda: "dedup_minhash" in json.loads(progress.read_text())["peak_by_stage_mb"])
        assert not sampler.over
    finally:
        usage = _stop_tree(proc.pid)
        sampler.stop.set()
        sampler.join()
    assert usage.ru_maxrss > 0
    last = json.loads(progress.read_text())  # written once more when the sampler stops
    assert last["samples"] == sampler.samples and set(last["peak_by_stage_mb"]) == {"dedup_exact", "dedup_minhash"}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_tree_past_the_memory_limit_is_killed_whole(tmp_path: Path) -> None:
    proc = _start_tree()
    sampler = TreeSampler(proc.pid, 40 * 1024, interval_s=0.05)  # 40 MB: under the child's 60
    sampler.start()
    try:
        _wait_for(lambda: sampler.over)
        _, raw = os.waitpid(proc.pid, 0)
        assert os.waitstatus_to_exitcode(raw) == -9
    finally:
        sampler.stop.set()
        sampler.join()
        try:
            os.killpg(proc.pid, 9)  # the group is gone when the sampler did its job
        except ProcessLookupError:
            pass
    assert sampler.peak_kb > 40 * 1024
