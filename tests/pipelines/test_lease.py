"""One run per output: the lease on local paths (also raced by real processes), on S3
(moto, conditional writes) and through ``pipelines.run``."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.lease import (
    LEASE_NAME,
    Lease,
    LeaseHeld,
    LeaseLost,
    LocalStore,
    OutputLease,
    S3Store,
    store_for,
)
from tests.conftest import shared
from tests.s3server import s3_endpoint, s3_env  # noqa: F401  (fixtures)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_second_run_refused_then_free_after_release(tmp_path):
    path = str(tmp_path / LEASE_NAME)
    first = OutputLease(LocalStore(path), command="first job").acquire()
    with pytest.raises(LeaseHeld, match=rf"in use by run {first.lease.owner[:8]} \(pid {os.getpid()} .*'first job'"):
        OutputLease(LocalStore(path)).acquire()
    first.release()
    assert not os.path.exists(path)
    with OutputLease(LocalStore(path)):
        assert json.loads(Path(path).read_text())["pid"] == os.getpid()


def test_stale_lease_taken_over_and_the_old_owner_stops(tmp_path):
    path = str(tmp_path / LEASE_NAME)
    clock = Clock()
    old = OutputLease(LocalStore(path), ttl_s=60, clock=clock).acquire()
    old._stop.set()  # the old run hangs: no more heartbeats
    clock.now += 59
    with pytest.raises(LeaseHeld):  # 59 s < ttl: still live
        OutputLease(LocalStore(path), ttl_s=60, clock=clock).acquire()
    clock.now += 2  # 61 s without a heartbeat: stale
    new = OutputLease(LocalStore(path), ttl_s=60, clock=clock).acquire()
    assert json.loads(Path(path).read_text())["owner"] == new.lease.owner
    old.beat()  # the old run wakes up: its heartbeat finds the lease is not its own
    with pytest.raises(LeaseLost, match=new.lease.owner[:8]):
        old.check()
    old.release()  # must not delete the new owner's lease
    assert json.loads(Path(path).read_text())["owner"] == new.lease.owner
    new.check()
    new.release()
    assert not os.path.exists(path)


def test_damaged_lease_file_is_stale(tmp_path):
    path = tmp_path / LEASE_NAME
    path.write_bytes(b"\x00not json")
    with OutputLease(LocalStore(str(path))) as lease:
        assert json.loads(path.read_text())["owner"] == lease.lease.owner


def test_heartbeat_thread_refreshes_the_lease(tmp_path):
    path = tmp_path / LEASE_NAME
    with OutputLease(LocalStore(str(path)), ttl_s=0.4):
        first = json.loads(path.read_text())["heartbeat_at"]
        deadline = time.monotonic() + 30
        while json.loads(path.read_text())["heartbeat_at"] == first:
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)


@pytest.mark.parametrize("stale", [True, False])
def test_racing_processes_exactly_one_wins(tmp_path, stale):
    """Six real processes start at the same instant on a stale (or absent) lease."""
    from tests.leaseworker import take_over

    path = str(tmp_path / LEASE_NAME)
    if stale:
        dead = Lease(owner="dead", host="h", pid=1, command="killed", acquired_at=0, heartbeat_at=0, ttl_s=60)
        Path(path).write_bytes(dead.encode())
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start = time.time() + 2.0
    procs = [ctx.Process(target=take_over, args=(path, start, queue)) for _ in range(6)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    won = [r for r in results if r.startswith("won")]
    assert len(won) == 1 and results.count("refused") == 5, results
    assert json.loads(Path(path).read_text())["owner"] == won[0].split()[1]
    assert not [n for n in os.listdir(tmp_path) if n != LEASE_NAME]  # no leftovers


def test_s3_lease_with_conditional_writes(s3_env):
    import boto3

    boto3.client("s3").create_bucket(Bucket="leases")
    args = [f"--s3_endpoint_url={s3_env}", "--s3_access_key_id=testing", "--s3_secret_access_key=testing",
            "--s3_region_name=us-east-1"]
    store = store_for("s3://leases/job1", args)
    assert isinstance(store, S3Store) and store.key == f"job1/{LEASE_NAME}"
    clock = Clock()
    first = OutputLease(store, ttl_s=60, clock=clock).acquire()
    first._stop.set()
    with pytest.raises(LeaseHeld, match="in use"):
        OutputLease(store_for("s3://leases/job1", args), ttl_s=60, clock=clock).acquire()
    assert not store.create(b"x")  # If-None-Match: * refuses an existing object
    clock.now += 120
    second = OutputLease(store_for("s3://leases/job1/", args), ttl_s=60, clock=clock).acquire()
    first.beat()
    with pytest.raises(LeaseLost):
        first.check()
    assert not store.take_over(b"y", '"0123"')  # If-Match with a stale ETag is refused
    second.release()
    assert store.read() is None


def _config(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - format: warc
    path: {shared('warc')}/dolma_sample-0000.warc.gz
stages: [extract]
beam_args: ["--runner=FnApiRunner"]
""")
    return str(path)


HOLDER = """
import sys, time
from pipelines.lease import LocalStore, OutputLease
lease = OutputLease(LocalStore(sys.argv[1]), ttl_s=600, command="the other job").acquire()
print("held", flush=True)
sys.stdin.read()
lease.release()
"""


def test_pipelines_run_refuses_an_output_in_use_and_takes_a_stale_one(tmp_path, capsys):
    from pipelines.run import main

    config = _config(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out / LEASE_NAME)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["--config", config, "--log-level", "WARNING"], out=io.StringIO())
        err = capsys.readouterr().err
        assert code == 2 and "output in use" in err and "'the other job'" in err and "nothing ran" in err
        assert not (out / "manifests").exists()
    finally:
        holder.communicate("", timeout=60)
    # a run killed with -9 leaves its lease behind; after the TTL it is taken over
    dead = Lease(owner="killed", host="h", pid=1, command="kill -9", acquired_at=0, heartbeat_at=0, ttl_s=60)
    (out / LEASE_NAME).write_bytes(dead.encode())
    assert main(["--config", config, "--log-level", "WARNING"], out=io.StringIO()) == 0
    assert (out / "manifests" / "extract.json").exists() and not (out / LEASE_NAME).exists()
