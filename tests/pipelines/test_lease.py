"""One run per output: the lease on local paths (also raced by real processes), on S3
(moto, conditional writes) and through ``pipelines.run``."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

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


def written_ago(path: str | Path, seconds: float) -> None:
    """Sets the file's mtime (the store's clock of a local lease) ``seconds`` back."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_stale_lease_taken_over_and_the_old_owner_stops(tmp_path):
    path = str(tmp_path / LEASE_NAME)
    clock = Clock()
    old = OutputLease(LocalStore(path), ttl_s=60, clock=clock).acquire()
    old._stop.set()  # the old run hangs: no more heartbeats
    written_ago(path, 59)
    with pytest.raises(LeaseHeld):  # 59 s < ttl: still live
        OutputLease(LocalStore(path), ttl_s=60, clock=clock).acquire()
    written_ago(path, 61)  # 61 s without a heartbeat: stale
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
        written_ago(path, 61)
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


def wait_until_older(store: S3Store, seconds: float) -> None:
    """Waits until the store's clock says its lease was written more than ``seconds`` ago."""
    deadline = time.monotonic() + 120
    while (store.read().age_s or 0.0) <= seconds:
        assert time.monotonic() < deadline, "the store's clock does not advance"
        time.sleep(0.2)


def test_s3_lease_with_conditional_writes(s3_env):
    import boto3

    boto3.client("s3").create_bucket(Bucket="leases")
    args = [f"--s3_endpoint_url={s3_env}", "--s3_access_key_id=testing", "--s3_secret_access_key=testing",
            "--s3_region_name=us-east-1"]
    store = store_for("s3://leases/job1", args)
    assert isinstance(store, S3Store) and store.key == f"job1/{LEASE_NAME}"
    first = OutputLease(store, ttl_s=3).acquire()
    first._stop.set()
    with pytest.raises(LeaseHeld, match="in use"):
        OutputLease(store_for("s3://leases/job1", args), ttl_s=60).acquire()
    assert not store.create(b"x")  # If-None-Match: * refuses an existing object
    wait_until_older(store, 3)  # the S3 server's clock: LastModified against Date
    second = OutputLease(store_for("s3://leases/job1/", args), ttl_s=60).acquire()
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


@contextlib.contextmanager
def held_by_another_process(out: Path) -> Iterator[None]:
    """While open, a live process (``HOLDER``) holds the lease of output folder ``out``."""
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out / LEASE_NAME)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("", timeout=60)


def test_pipelines_run_refuses_an_output_in_use_and_takes_a_stale_one(tmp_path, capsys):
    from pipelines.run import main

    config = _config(tmp_path)
    out = tmp_path / "out"
    with held_by_another_process(out):
        code = main(["--config", config, "--log-level", "WARNING"], out=io.StringIO())
        err = capsys.readouterr().err
        assert code == 2 and "output in use" in err and "'the other job'" in err and "nothing ran" in err
        assert not (out / "manifests").exists()
    # a run killed with -9 leaves its lease behind; after the TTL it is taken over
    dead = Lease(owner="killed", host="h", pid=1, command="kill -9", acquired_at=0, heartbeat_at=0, ttl_s=60)
    (out / LEASE_NAME).write_bytes(dead.encode())
    written_ago(out / LEASE_NAME, 61)
    assert main(["--config", config, "--log-level", "WARNING"], out=io.StringIO()) == 0
    assert (out / "manifests" / "extract.json").exists() and not (out / LEASE_NAME).exists()


def write_lease(path: Path, **fields: object) -> dict:
    """A lease file as another process wrote it (fields overridden), written just now."""
    now = time.time()
    raw = {"owner": "other0123456789", "host": "elsewhere", "pid": 4242, "command": "other job",
           "acquired_at": now, "heartbeat_at": now, "ttl_s": 60.0, **fields}
    path.write_text(json.dumps(raw))  # NaN and Infinity as Python's json writes them
    return raw


@pytest.mark.parametrize("fields", [
    {"heartbeat_at": float("nan")}, {"heartbeat_at": float("inf")}, {"heartbeat_at": float("-inf")},
    {"acquired_at": float("nan")}, {"ttl_s": float("nan")}, {"ttl_s": float("inf")}, {"ttl_s": 1e300},
    {"ttl_s": 0.0}, {"ttl_s": -5.0},
], ids=["heartbeat_nan", "heartbeat_inf", "heartbeat_-inf", "acquired_nan", "ttl_nan", "ttl_inf", "ttl_huge",
        "ttl_0", "ttl_negative"])
def test_impossible_heartbeats_are_stale_at_once(tmp_path, fields, caplog):
    path = tmp_path / LEASE_NAME
    write_lease(path, **fields)  # written this instant: only its impossible times make it stale
    with caplog.at_level("WARNING", logger="pipelines.lease"):
        lease = OutputLease(LocalStore(str(path))).acquire()
    try:
        assert json.loads(path.read_text())["owner"] == lease.lease.owner
        assert "took over the stale lease of run other012" in caplog.text and "impossible heartbeat" in caplog.text
    finally:
        lease.release()


def test_a_heartbeat_from_the_future_expires_by_the_files_clock(tmp_path):
    """An owner whose clock ran ten years ahead: live while its file is fresh, stale once
    the file was not rewritten for the TTL (before: never)."""
    path = tmp_path / LEASE_NAME
    write_lease(path, heartbeat_at=time.time() + 10 * 365 * 86400)
    with pytest.raises(LeaseHeld, match="in use by run other012"):
        OutputLease(LocalStore(str(path))).acquire()
    written_ago(path, 61)
    with OutputLease(LocalStore(str(path))) as lease:
        assert json.loads(path.read_text())["owner"] == lease.lease.owner


@pytest.mark.parametrize("skew_s", [-3600.0, 3600.0], ids=["owner_behind", "owner_ahead"])
def test_clock_skew_never_hands_over_a_live_lease(tmp_path, skew_s):
    """Owner and contender clocks an hour apart either way: the file's age decides."""
    path = str(tmp_path / LEASE_NAME)
    owner = OutputLease(LocalStore(path), ttl_s=60, clock=lambda: time.time() + skew_s).acquire()
    try:
        with pytest.raises(LeaseHeld, match=owner.lease.owner[:8]):
            OutputLease(LocalStore(path), ttl_s=60).acquire()
        owner.beat()
        owner.check()
    finally:
        owner.release()
    assert not os.path.exists(path)


def test_s3_staleness_is_judged_by_the_servers_clock(s3_env):
    """Owner or contender clocks far off do not matter on S3 either: the object's
    LastModified against the response's Date decides. The command's secrets stay out
    of the object."""
    import boto3

    boto3.client("s3").create_bucket(Bucket="skew")
    args = [f"--s3_endpoint_url={s3_env}", "--s3_region_name=us-east-1"]
    store = store_for("s3://skew/job", args)
    owner = OutputLease(store, ttl_s=60, clock=lambda: time.time() - 3600,
                        command="run --s3_secret_access_key=S3LeaseSecret-41d7 s3://AK:SK-9f2e@b/x").acquire()
    owner._stop.set()
    stored = store.read()[0]  # (data, version, ...)
    assert b"S3LeaseSecret-41d7" not in stored and b"SK-9f2e" not in stored and b"--s3_secret_access_key=***" in stored
    for reader_skew in (0.0, 7200.0):
        with pytest.raises(LeaseHeld, match=owner.lease.owner[:8]):
            OutputLease(store_for("s3://skew/job", args), ttl_s=60,
                        clock=lambda: time.time() + reader_skew).acquire()
    owner.release()
    dead = Lease(owner="future", host="h", pid=1, command="x", acquired_at=0, heartbeat_at=time.time() + 1e8,
                 ttl_s=2)
    assert store.create(dead.encode())
    with pytest.raises(LeaseHeld, match="in use by run future"):
        OutputLease(store, ttl_s=60).acquire()
    wait_until_older(store, 2)
    with OutputLease(store, ttl_s=60) as lease:
        assert Lease.decode(store.read()[0]).owner == lease.lease.owner
    assert store.read() is None


def test_break_lease_takes_a_live_lease_and_names_its_owner(tmp_path, caplog):
    path = str(tmp_path / LEASE_NAME)
    live = OutputLease(LocalStore(path), command="first job --api_key=BreakSecret-77").acquire()
    live._stop.set()
    with caplog.at_level("WARNING", logger="pipelines.lease"):
        breaker = OutputLease(LocalStore(path)).acquire(break_lease=True)
    assert f"broke the live lease of run {live.lease.owner[:8]} (pid {os.getpid()}" in caplog.text
    assert "'first job --api_key=***'" in caplog.text and "BreakSecret-77" not in caplog.text
    live.beat()
    with pytest.raises(LeaseLost, match=breaker.lease.owner[:8]):
        live.check()
    live.release()
    breaker.release()
    assert not os.path.exists(path)


def test_pipelines_run_break_lease(tmp_path, capsys):
    from pipelines.run import main

    config = _config(tmp_path)
    out = tmp_path / "out"
    with held_by_another_process(out):
        owner = json.loads((out / LEASE_NAME).read_text())["owner"]
        code = main(["--config", config, "--log-level", "WARNING", "--break-lease"], out=io.StringIO())
        err = capsys.readouterr().err
        assert code == 0 and (out / "manifests" / "extract.json").exists()
        assert f"the output: broke the live lease of run {owner[:8]}" in err and "'the other job'" in err


FSIZE_LIMITED_BEAT = """
import resource, signal, sys
from pipelines.lease import LocalStore, OutputLease
lease = OutputLease(LocalStore(sys.argv[1]), ttl_s=600, command="x" * 200).acquire()
lease._stop.set()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    lease.beat()
except OSError as exc:
    print("beat failed", exc.errno, flush=True)
"""


def test_a_failed_heartbeat_leaves_no_temporary_file(tmp_path):
    """A heartbeat whose write fails (a file size limit of 64 bytes stands for a full
    disk) removes its ``.tmp`` file; the lease it had stays as it was."""
    import errno

    path = tmp_path / LEASE_NAME
    done = subprocess.run([sys.executable, "-c", FSIZE_LIMITED_BEAT, str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.stdout.split() == ["beat", "failed", str(errno.EFBIG)], done.stderr
    assert os.listdir(tmp_path) == [LEASE_NAME]
    assert json.loads(path.read_text())["command"] == "x" * 200


def test_leftovers_of_killed_heartbeats_are_swept_after_the_ttl(tmp_path):
    path = tmp_path / LEASE_NAME
    old = [tmp_path / f"{LEASE_NAME}.{'a' * 32}.tmp", tmp_path / f"{LEASE_NAME}.{'b' * 32}.old"]
    fresh = tmp_path / f"{LEASE_NAME}.{'c' * 32}.tmp"  # a racing run's, this instant
    for leftover in old + [fresh]:
        leftover.write_bytes(b"{")
    for leftover in old:
        written_ago(leftover, 121)
    (tmp_path / "notes.tmp").write_bytes(b"the user's")
    written_ago(tmp_path / "notes.tmp", 121)
    with OutputLease(LocalStore(str(path)), ttl_s=120):
        assert sorted(os.listdir(tmp_path)) == sorted([LEASE_NAME, fresh.name, "notes.tmp"])
