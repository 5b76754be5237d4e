"""Ctrl-C in the middle of a real run: ``python -m pipelines.run`` in a process group of
its own, SIGINT to the whole group (what a terminal does) once a later stage has begun,
and every process of the run's tree recorded while it ran, to check none outlives it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.engines import child_pids
from tests.conftest import shared
from tests.enginejob import _edited_chains

ROOT = Path(__file__).resolve().parent.parent
STAGES = "extract,dedup_exact,dedup_minhash"


def write_dedup_job(root: Path) -> str:
    """A JSONL job of real text whose near-dedup takes several pipelines (seconds on
    FnApiRunner): the McCormick news articles and six chains of edited copies, the
    components in star rounds (``driver_max_edges: 0``): the driver path ends the stage
    within a second of its first output, too soon for the interrupt to land in it."""
    root.mkdir(parents=True, exist_ok=True)
    docs = _edited_chains()
    for line in shared("neardup", "mccormick_articles_1000.train").read_text(encoding="utf-8").splitlines():
        doc_id, text = line.strip().split(" ", 1)
        docs.append({"id": f"mc-{doc_id}", "text": text, "url": f"https://news.example/{doc_id}"})
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    config = root / "job.yaml"
    config.write_text(f"output: {root / 'out'}\ninputs:\n  - {{format: jsonl, path: \"{root / 'docs.jsonl'}\"}}\n"
                      "extract: {min_chars: 20}\ndedup:\n  minhash: {threshold: 0.5, driver_max_edges: 0}\n"
                      "beam_args: ['--runner=FnApiRunner']\n")
    return str(config)


def _start_time(pid: int) -> str:
    """The start time of process ``pid`` (with the pid, it names one process: pids are reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()
    return "" if fields[0] == "Z" else fields[19]


def _tree(pid: int) -> set[tuple[int, str]]:
    found = set()
    for child in child_pids(pid):
        found |= {(child, _start_time(child))} | _tree(child)
    return found


@dataclass(frozen=True)
class Interrupted:
    returncode: int
    stderr: str
    stdout: str
    left: list[int]  # processes of the run's tree still alive after it ended


def interrupt_run(argv: list[str], started: Path, timeout_s: float = 600) -> Interrupted:
    """Runs ``python -m pipelines.run`` with ``argv``, sends SIGINT to its process group
    once ``started`` exists (the stage to interrupt is running), waits for it to end."""
    cmd = [sys.executable, "-m", "pipelines.run", *argv]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen: set[tuple[int, str]] = set()
    deadline = time.monotonic() + timeout_s
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the run ended (or hung) before {started} appeared: {proc.returncode}\n{err[-3000:]}")
        seen |= _tree(proc.pid)
        time.sleep(0.02)
    seen |= _tree(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        # not ended 5 minutes after the Ctrl-C: the test fails, and its run's whole tree
        # goes with it (a run left behind held CPU for the tests after it)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid, start in seen:
            if start and _start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the run did not end within 300 s of the interrupt; killed\n{err[-3000:]}")
    left = [pid for pid, start in seen if start and _start_time(pid) == start]
    return Interrupted(proc.returncode, err, out, left)
