"""Issue 40, items 2 and 3: a Flink session cluster on this machine (a JobManager, two
TaskManagers of two slots, an SDK worker pool, each a process of its own on 127.0.0.1),
started and stopped by ``python -m pipelines.engines cluster flink up|down``, runs every
stage of the engine job, crawl included, with FnApiRunner's outputs; a TaskManager lost
during dedup_exact loses nothing; nothing of it is left running afterwards.

``make test-engines`` runs these alone (marked ``engines``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from pipelines import clusters, engines
from tests.enginejob import cluster_cli, cluster_up, crawl, crawl_view, differences, run

pytestmark = [pytest.mark.engines, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def flink_cluster(tmp_path_factory) -> Iterator[dict]:
    with cluster_up("flink", tmp_path_factory.mktemp("clusters")) as state:
        yield state


def _overview(state: dict) -> dict:
    return clusters.flink_overview(int(state["master_url"].rsplit(":", 1)[1]))


def _blob_bytes(folder: Path) -> int:
    """What the JobManager's and TaskManagers' blob stores hold (jobs' jars and graphs)."""
    return sum(f.stat().st_size for f in (folder / "tmp").glob("blobStore-*/**/*") if f.is_file())


def test_the_flink_cluster_is_separate_processes_on_localhost(flink_cluster):
    state = flink_cluster
    assert state["up"] and state["master_url"].startswith("127.0.0.1:")
    assert sorted(state["processes"]) == ["jobmanager", "sdk-worker-pool", "taskmanager-1", "taskmanager-2"]
    assert len(set(state["processes"].values())) == 4
    assert all(os.getpgid(pid) == pid for pid in state["processes"].values())
    assert state["jobmanager"]["taskmanagers"] == 2 and state["jobmanager"]["slots-total"] == 4
    # each TaskManager JVM sized by Flink's own rules from the cluster's flink-conf.yaml
    cmdline = Path(f"/proc/{state['processes']['taskmanager-1']}/cmdline").read_bytes().split(b"\0")
    assert any(a.startswith(b"-Xmx") for a in cmdline) and b"taskmanager.resource-id=taskmanager-1" in cmdline
    # and the JVM options Flink's scripts add on Java 17 (without them a task's error was lost)
    assert b"--add-opens=java.base/java.lang=ALL-UNNAMED" in cmdline
    conf = (Path(state["folder"]) / "conf" / "flink-conf.yaml").read_text()
    for line in ("classloader.resolve-order: parent-first", "restart-strategy.type: exponential-delay",
                 "taskmanager.numberOfTaskSlots: 2", "taskmanager.memory.network.min: 256m",
                 "cluster.uncaught-exception-handling: FAIL", "taskmanager.memory.managed.fraction: 0.25",
                 "taskmanager.memory.task.off-heap.size: 384m"):
        assert line in conf, line
    again = cluster_cli("flink", "up", env=state["env"])  # one cluster per folder
    assert again.returncode == 2 and "already up" in again.stderr


def test_every_stage_on_the_flink_cluster_equals_fnapi(flink_cluster, job, reference):
    out = str(job.root / "out-flink-cluster")
    folder = Path(flink_cluster["folder"])
    finished = _overview(flink_cluster)["jobs-finished"]
    code, table = run(["--config", job.config, "--output", out, "--engine", "flink-cluster"])
    assert code == 0, table
    assert differences(reference, out) == []
    manifest = json.loads(Path(out, "manifests", "dedup_minhash.json").read_text())
    assert manifest["runner"] == "FlinkRunner" and manifest["extra"]["counters"]["cc_rounds"] >= 2
    # every pipeline of the job was a job of this cluster's JobManager ...
    assert _overview(flink_cluster)["jobs-finished"] - finished >= 10
    # ... whose tasks ran in both TaskManagers, SDK workers in the cluster's pool
    for tm in ("taskmanager-1", "taskmanager-2"):
        assert "Received task" in (folder / "logs" / f"{tm}.log").read_text(), tm
    assert "Starting worker with command" in (folder / "logs" / "sdk-worker-pool.log").read_text()
    # the jobs shipped no jars (the job server's classpath is ~150 MB a job otherwise)
    assert _blob_bytes(folder) < 20 * 2**20


def test_the_crawl_stage_on_the_flink_cluster_equals_fnapi(flink_cluster, tmp_path, direct_crawl):
    assert crawl_view(*crawl(tmp_path, "flink-cluster")) == direct_crawl


def test_without_a_flink_cluster_the_engine_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_CLUSTERS", str(tmp_path / "none"))
    with pytest.raises(engines.EngineMissing, match=r"no flink cluster is up in .*none/flink: start one with "
                                                    r"`python -m pipelines.engines cluster flink up`"):
        engines.engine_args("flink-cluster")


def test_a_taskmanager_that_cannot_be_sized_stops_what_did(tmp_path):
    """A TaskManager too small for Flink's fixed memory parts: `up` fails with Flink's
    reason and the JobManager it started first is stopped."""
    folder = tmp_path / "flink"
    classpath = [str(engines.PARTS["flink"].require())]
    with pytest.raises(clusters.ClusterError, match=r"Flink's memory settings for the TM from .*flink-conf.yaml: "
                                                     r"BashJavaUtils exited 1: .*"):
        clusters.flink_up(folder, classpath, clusters.FlinkClusterSpec(taskmanager_memory="300m"))
    assert clusters.read_state(folder) is None
    assert _running_with(str(folder / "conf")) == []


def _running_with(arg: str) -> list[int]:
    """Processes whose command line holds ``arg``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if arg.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


# --- TaskManager loss (issue 40, item 3) ---------------------------------------------------

LOSS_STAGES = ("extract", "dedup_exact", "dedup_minhash")


def test_a_lost_taskmanager_during_exact_dedup_loses_nothing(tmp_path, dedup_reference):
    """SIGKILL to a TaskManager JVM while dedup_exact's job runs on it. Measured here
    (docs/RUNNING_AT_SCALE.md): the JobManager finds it unreachable, restarts the tasks it
    ran (and those reading from it) on the other TaskManager's slots, and the run ends
    well with the outputs of an uninterrupted run: one run, nothing resumed."""
    from tests.interruptjob import STAGES

    config, reference = dedup_reference
    with cluster_up("flink", tmp_path / "clusters") as state:
        out = tmp_path / "out"
        argv = [sys.executable, "-m", "pipelines.run", "--config", config, "--output", str(out), "--stages", STAGES,
                "--engine", "flink-cluster", "--no-progress", "--no-report"]
        proc = subprocess.Popen(argv, cwd=ROOT, env=state["env"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            # extract done (its manifest written), then dedup_exact's job running on the cluster
            deadline = time.monotonic() + 600
            while not ((out / "manifests" / "extract.json").exists() and _overview(state)["jobs-running"]):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
                time.sleep(0.1)
            time.sleep(2)
            os.killpg(state["processes"]["taskmanager-1"], signal.SIGKILL)
            console, _ = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, f"the run did not survive the lost TaskManager: {console[-3000:]}"
        assert differences(reference, str(out), stages=LOSS_STAGES) == []
        assert len(list((out / "logs").glob("engine-*.log"))) == 1  # one run: nothing was resumed
        log = (Path(state["folder"]) / "logs" / "jobmanager.log").read_text()
        assert "TaskManager with id taskmanager-1 is no longer reachable" in log
        assert "tasks will be restarted to recover the failed task" in log
        view = json.loads(cluster_cli("flink", "status", env=state["env"]).stdout)
        assert view["alive"]["taskmanager-1"] is False and view["jobmanager"]["taskmanagers"] == 1
