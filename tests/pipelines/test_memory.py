"""The malloc arena cap of the processes that host SDK workers (pipelines/memory.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.memory import ENV_VAR, MALLOC_ARENAS, cap_malloc_arenas, worker_environment

ROOT = Path(__file__).resolve().parents[2]

# Eight threads that each hold memory at once (as an SDK worker's bundle threads do): glibc
# gives each its own arena unless capped. Prints the arenas and the inherited variable.
THREADS = """
import json, os, sys, threading
from pipelines.memory import arena_count
{setup}
barrier = threading.Barrier(8)
def work():
    held = [bytearray(4096) for _ in range(64)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({{"arenas": arena_count(), "env": os.environ.get("MALLOC_ARENA_MAX")}}))
"""


def _run(setup: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    out = subprocess.run([sys.executable, "-c", THREADS.format(setup=setup)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_uncapped_threads_make_an_arena_each() -> None:
    # The reason for the cap, on this machine's glibc: without it 8 threads hold 9 arenas.
    assert _run("")["arenas"] > MALLOC_ARENAS + 4


def test_cap_bounds_the_arenas() -> None:
    assert _run("from pipelines.memory import cap_malloc_arenas; assert cap_malloc_arenas()")["arenas"] \
        <= MALLOC_ARENAS


def test_the_run_command_caps_itself_and_its_children(tmp_path: Path) -> None:
    # pipelines.run caps before anything starts, even a run that stops at a config error.
    setup = ("from pipelines.run import main\n"
             f"assert main(['--config', {str(tmp_path / 'missing.yaml')!r}]) == 2")
    result = _run(setup)
    assert result == {"arenas": result["arenas"], "env": str(MALLOC_ARENAS)}
    assert result["arenas"] <= MALLOC_ARENAS


def test_a_users_setting_wins() -> None:
    assert cap_malloc_arenas(environ={ENV_VAR: "4"}) is False
    assert worker_environment({ENV_VAR: "4"}) == {ENV_VAR: "4"}
    assert worker_environment({}) == {ENV_VAR: "2"}
    with pytest.raises(ValueError, match="at least 1"):
        cap_malloc_arenas(0)
