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
        # two processes of one name: the sum, the largest one (the child), and how many
        _wait_for(lambda: json.loads(progress.read_text())["most_by_stage"]["dedup_exact"]["python worker"] == 2)
        snap = json.loads(progress.read_text())
        largest = snap["largest_by_stage_mb"]["dedup_exact"]["python worker"]
        assert 60 <= largest < snap["peak_by_stage_mb"]["dedup_exact"]["python worker"]
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


def test_a_term_to_the_benchmark_stops_the_run_and_records_it_as_interrupted(tmp_path: Path, monkeypatch) -> None:
    import signal
    import threading
    from types import SimpleNamespace

    import benchmarks.bench_scale as bench

    script = tmp_path / "engine"  # stands for `python -m pipelines.run ...`: a tree that runs on
    script.write_text("#!/bin/sh\nsleep 60 &\nwait\n")
    script.chmod(0o755)
    monkeypatch.setattr(bench, "sys", SimpleNamespace(executable=str(script)))
    before = signal.signal(signal.SIGTERM, bench._interrupt)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        result = bench.run_engine("prism", tmp_path / "job.yaml", tmp_path / "log.txt", 60.0,
                                  progress=tmp_path / "progress.json")
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, before)
    assert result["exit"] == "interrupted" and result["wall_s"] < 30
    assert json.loads((tmp_path / "progress.json").read_text())["samples"] >= 0  # written on the way out


def test_an_interrupted_run_ends_the_benchmark_with_130_and_its_record(tmp_path: Path, monkeypatch) -> None:
    import benchmarks.bench_scale as bench

    runs: list[str] = []

    def interrupted(engine, *args, **kwargs):
        runs.append(engine)
        return {"engine": engine, "exit": "interrupted"}

    monkeypatch.setattr(bench, "corpus", lambda work, n: (work / "docs.jsonl", (work / "docs.jsonl").write_text(""))[0])
    monkeypatch.setattr(bench, "run_engine", interrupted)
    import signal

    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:  # main installs its own (an interrupt or a TERM stops the run)
        assert bench.main(["--sizes", "10", "20", "--engines", "prism", "flink", "--work", str(tmp_path)]) == 130
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert runs == ["prism"]  # nothing runs after it
    [line] = (tmp_path / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["exit"] == "interrupted" and json.loads(line)["docs"] == 10


def test_the_tree_cpu_goes_to_the_stage_running_and_the_framework_share_from_it(tmp_path: Path) -> None:
    """A tree that burns CPU while dedup_exact runs: the sampler adds what the tree gained
    to that stage; the share is 1 - work / stage CPU for the stages measured both ways."""
    from benchmarks.bench_scale import framework_share

    out = tmp_path / "out"
    (out / "manifests").mkdir(parents=True)
    (out / "manifests" / "extract.json").write_text("{}")
    proc = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.6: pass\ntime.sleep(60)\n"], start_new_session=True)
    sampler = TreeSampler(proc.pid, 10 << 30, out, None, interval_s=0.05)
    try:
        sampler.start()
        _wait_for(lambda: sampler.cpu_by_stage.get("dedup_exact", 0) >= 0.5)
    finally:
        sampler.stop.set()
        sampler.join()
        _stop_tree(proc.pid)
    assert set(sampler.cpu_by_stage) == {"dedup_exact"}
    work = {"extract": {"cpu_s": 1.0}, "dedup_exact": {"cpu_s": 3.0}, "tokenize": {"cpu_s": 1.0}}
    assert framework_share(work, {"extract": 4.0, "dedup_exact": 3.0, "tokenize": 0.0}) == \
        {"extract": 0.75, "dedup_exact": 0.0}


def test_a_floor_run_has_every_pure_function_a_no_op_of_the_same_shape_in_each_process(tmp_path: Path) -> None:
    """``floor_env`` reaches a fresh interpreter (as the SDK workers are): the stages' pure
    functions are the no-ops, returning what the real ones return in shape and type, and
    exact copies still share a key."""
    from benchmarks.bench_scale import over_floor
    from benchmarks.floor import floor_env

    probe = (
        "import json, sentencepiece as spm\n"
        "from transforms.dedup import exact_files, minhash\n"
        "from transforms.extract import extract\n"
        "from transforms.dedup.dedup import MinHashConfig\n"
        "keys = exact_files.text_keys(['a  b', 'a  b', 'c'])\n"
        "has, urls = exact_files.url_keys(['https://x/', None, ''])\n"
        "sig = MinHashConfig().hasher().signatures(['one two three four five six', 'x'])\n"
        "print(json.dumps({'normalize': extract.normalize_text('a\\u00a0 b '), 'keys': keys.shape,"
        " 'dtype': str(keys.dtype), 'same': bool((keys[0] == keys[1]).all()), 'differ': bool((keys[0] != keys[2]).any()),"
        " 'has': has.tolist(), 'urls': urls.shape, 'sig': [sig.shape, str(sig.dtype)],"
        " 'encode': spm.SentencePieceProcessor.encode(None, ['x' * 70, 'y']),"
        " 'one': spm.SentencePieceProcessor.encode(None, 'x' * 7)}))\n")
    ROOT = Path(__file__).resolve().parents[1]
    on = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=floor_env(), capture_output=True,
                        text=True, timeout=120)
    assert on.returncode == 0, on.stderr[-2000:]
    got = json.loads(on.stdout)
    assert got["normalize"] == "a\u00a0 b "  # the text as read: no normalisation
    assert got["keys"] == [3, 3] and got["dtype"] == "uint64" and got["same"] and got["differ"]
    assert got["has"] == [True, False, False] and got["urls"] == [1, 3]
    assert got["sig"] == [[2, 112], "uint32"]
    assert got["encode"] == [[5] * 20, []] and got["one"] == [5, 5]
    off = subprocess.run([sys.executable, "-c", "from transforms.extract import extract\n"
                          "print(extract.normalize_text('a\\u00a0 b '))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert off.stdout == "a  b\n"  # without the floor's environment, the real function
    assert over_floor({"dedup_exact": 6.0, "tokenize": 5.0}, {"dedup_exact": 2.0, "tokenize": 0.0},
                      {"dedup_exact": {"cpu_s": 3.0}, "tokenize": {"cpu_s": 1.0}}) == {"dedup_exact": 1.2}
