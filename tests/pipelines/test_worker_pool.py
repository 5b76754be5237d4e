"""The SDK worker pool (pipelines/worker_pool.py) serving two runner processes that use
the same worker ids (two Spark executors of a cluster on one machine, issue 40): each
(id, control endpoint) has its own process, a StopWorker stops the worker of the runner
that asked (the one whose worker ends), a dead worker still wanted is started again.

Workers here are a real process per request (the pool's ``container_executable`` path)
that ends cleanly when a file named after its control endpoint appears: what an SDK
harness does when its runner closes the control stream."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2

from pipelines.worker_pool import SupervisedWorkerPool


def _request(worker_id: str, control: str) -> beam_fn_api_pb2.StartWorkerRequest:
    return beam_fn_api_pb2.StartWorkerRequest(
        worker_id=worker_id, control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=control))


def _wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def pool(tmp_path: Path):
    worker = tmp_path / "worker.sh"
    # ends (0) when <tmp>/<control endpoint>.done exists, like a harness whose runner hung up
    worker.write_text(f"""#!/bin/sh
for a in "$@"; do case "$a" in --control_endpoint=*) ctrl="${{a#--control_endpoint=}}";; esac; done
echo started >> "{tmp_path}/$ctrl.starts"
while [ ! -e "{tmp_path}/$ctrl.done" ]; do sleep 0.05; done
""")
    worker.chmod(0o755)
    servicer = SupervisedWorkerPool(use_process=True, container_executable=str(worker))
    servicer.stop_wait_s = 5.0
    yield servicer, tmp_path
    for key in list(servicer._processes):
        (tmp_path / f"{key[1]}.done").touch()
    _wait_for(lambda: all(p.poll() is not None for p in servicer._processes.values()))


def test_two_runners_with_the_same_worker_id_each_keep_their_worker(pool):
    servicer, tmp = pool
    servicer.StartWorker(_request("1-1", "executor-a"), None)
    servicer.StartWorker(_request("1-1", "executor-b"), None)
    a, b = servicer._processes[("1-1", "executor-a")], servicer._processes[("1-1", "executor-b")]
    assert a.pid != b.pid and a.poll() is None and b.poll() is None
    # executor a releases its environment: its worker ends, then it asks to stop "1-1"
    (tmp / "executor-a.done").touch()
    servicer.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), None)
    assert ("1-1", "executor-a") not in servicer._processes and a.poll() == 0
    assert b.poll() is None and ("1-1", "executor-b") in servicer._wanted  # b's worker untouched
    # b's worker killed while wanted: started again for b, with b's endpoint
    os.kill(b.pid, signal.SIGKILL)
    _wait_for(lambda: servicer._processes.get(("1-1", "executor-b")) not in (None, b))
    assert (tmp / "executor-b.starts").read_text().count("started") == 2
    assert (tmp / "executor-a.starts").read_text().count("started") == 1  # a's stays stopped
    # the only "1-1" left: StopWorker stops it at once
    servicer.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), None)
    assert servicer._processes == {} and servicer._wanted == {}


def test_a_stop_that_matches_no_ending_worker_leaves_both_running(pool):
    servicer, tmp = pool
    servicer.stop_wait_s = 0.5
    servicer.StartWorker(_request("2-1", "executor-a"), None)
    servicer.StartWorker(_request("2-1", "executor-b"), None)
    servicer.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="2-1"), None)
    assert all(p.poll() is None for p in servicer._processes.values()) and len(servicer._processes) == 2
