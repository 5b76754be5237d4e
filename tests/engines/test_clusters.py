"""Issue 40, item 1: a Spark standalone cluster on this machine (a master, two workers,
executor JVMs they start, an SDK worker pool, all separate processes on 127.0.0.1),
started and stopped by ``python -m pipelines.engines cluster spark up|down``, runs every
stage of the engine job, crawl included, with FnApiRunner's outputs; nothing of it is
left running afterwards.

``make test-engines`` runs these alone (marked ``engines``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from pipelines import clusters, engines
from tests.enginejob import cluster_cli as _cli
from tests.enginejob import cluster_up, crawl, crawl_view, differences, left_running, run

pytestmark = [pytest.mark.engines, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def cluster_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return _cli("spark", *args, env=env)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[dict]:
    """A cluster in a folder of its own, for the module; down at its end, nothing left."""
    with cluster_up("spark", tmp_path_factory.mktemp("clusters")) as state:
        yield state


def test_the_cluster_is_separate_processes_on_localhost(spark_cluster):
    state = spark_cluster
    assert state["up"] and state["master"]["status"] == "ALIVE" and state["master"]["aliveworkers"] == 2
    assert state["master_url"].startswith("spark://127.0.0.1:")
    assert sorted(state["processes"]) == ["master", "sdk-worker-pool", "worker-1", "worker-2"]
    assert len(set(state["processes"].values())) == 4  # four processes, each its own session
    assert all(os.getpgid(pid) == pid for pid in state["processes"].values())
    again = cluster_cli("up", env=state["env"])  # one cluster per folder
    assert again.returncode == 2 and "already up" in again.stderr


def test_every_stage_on_the_cluster_equals_fnapi(spark_cluster, job, reference):
    out = str(job.root / "out-spark-cluster")
    ui = int(spark_cluster["master_ui"].rsplit(":", 1)[1])
    before = {a["id"] for a in clusters.master_json(ui)["completedapps"]}
    code, table = run(["--config", job.config, "--output", out, "--engine", "spark-cluster"])
    assert code == 0, table
    assert differences(reference, out) == []
    manifest = json.loads(Path(out, "manifests", "dedup_minhash.json").read_text())
    assert manifest["runner"] == "SparkRunner" and manifest["extra"]["counters"]["cc_rounds"] >= 2
    folder = Path(spark_cluster["folder"])
    # the job's pipelines were one application of this master (one SparkContext for the
    # job), with an executor JVM on each worker
    apps = [a for a in clusters.master_json(ui)["completedapps"] if a["id"] not in before]
    assert len(apps) == 1 and apps[0]["name"].startswith("BeamApp"), apps
    app = apps[0]["id"]
    for worker in ("worker-1", "worker-2"):
        executors = list((folder / worker / "work" / app).iterdir())
        assert executors and all((e / "stderr").exists() for e in executors)
    # the SDK workers ran in the cluster's pool, not in this process
    assert "Starting worker with command" in (folder / "logs" / "sdk-worker-pool.log").read_text()


def test_the_crawl_stage_on_the_cluster_equals_fnapi(spark_cluster, tmp_path, direct_crawl):
    assert crawl_view(*crawl(tmp_path, "spark-cluster")) == direct_crawl


def test_without_a_cluster_the_engine_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_CLUSTERS", str(tmp_path / "none"))
    with pytest.raises(engines.EngineMissing, match=r"no spark cluster is up in .*none/spark: start one with "
                                                    r"`python -m pipelines.engines cluster spark up`"):
        engines.engine_args("spark-cluster")
    down = cluster_cli("down", env={**os.environ, "TOKENFACTORY_CLUSTERS": str(tmp_path / "none")})
    assert down.returncode == 0 and "no cluster was up" in down.stdout


def test_a_worker_that_does_not_start_stops_what_did(tmp_path):
    """A worker JVM that exits at start (a `java` that runs every class but the worker):
    `up` fails naming its log, and the master it started first is stopped. A size of
    nothing is refused before anything starts."""
    part, classpath = engines.spark_classpath()
    folder = tmp_path / "spark"
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\ncase "$*" in *deploy.worker.Worker*) echo "no worker here" >&2; exit 3;; esac\n'
                    f'exec {shutil.which("java")} "$@"\n')
    java.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(clusters.ClusterError, match=r"Spark workers registering with the master: a process "
                                                     r"exited with 3; its log: .*worker-1.log"):
        clusters.spark_up(folder, part, classpath, clusters.SparkClusterSpec(workers=1), java=str(java))
    assert time.monotonic() - started < 80  # not the 90 s timeout: the exit is seen
    assert clusters.read_state(folder) is None
    assert "no worker here" in (folder / "logs" / "worker-1.log").read_text()
    assert _running_in(folder) == []  # the master is gone
    with pytest.raises(ValueError, match="memory must be a size like 512m or 1g, got '0m'"):
        clusters.SparkClusterSpec(memory="0m")
    assert clusters.SCALA_VERSION == engines.SCALA_VERSION


def _running_in(folder: Path) -> list[int]:
    """Processes whose working directory is in ``folder`` (a cluster's daemons run in its logs/)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)).is_relative_to(folder):
                found.append(int(cwd.parent.name))
        except OSError:
            continue
    return found


# --- worker loss (issue 40, item 3) ------------------------------------------------------

LOSS_STAGES = ("extract", "dedup_exact", "dedup_minhash")


def _executors(worker_pid: int) -> list[int]:
    """The executor JVMs a worker started (its process group, but for itself)."""
    return [p for p in clusters.group_members(worker_pid)
            if p != worker_pid and "CoarseGrainedExecutorBackend" in Path(f"/proc/{p}/cmdline").read_text()]


def _lose_during_near_dedup(config: str, out: Path, env: dict[str, str], lose) -> tuple[int, str]:
    """Runs the dedup job on the cluster of ``env``; once dedup_minhash has begun (its work
    folder exists and an executor runs), calls ``lose()``; (exit code, console)."""
    from tests.interruptjob import STAGES

    argv = [sys.executable, "-m", "pipelines.run", "--config", config, "--output", str(out), "--stages", STAGES,
            "--engine", "spark-cluster", "--no-progress", "--no-report"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not (out / "work" / "dedup_minhash").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    time.sleep(3)  # into the stage's first Spark job
    lose()
    console, _ = proc.communicate(timeout=900)
    return proc.returncode, console


def _own_cluster(tmp_path: Path) -> tuple[dict[str, str], dict]:
    env = {**os.environ, "TOKENFACTORY_CLUSTERS": str(tmp_path / "clusters")}
    up = cluster_cli("up", env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    return env, json.loads(cluster_cli("status", env=env).stdout)


@pytest.mark.parametrize("lost", ["worker", "executor"])
def test_a_lost_spark_worker_or_executor_during_near_dedup_loses_nothing(tmp_path, dedup_reference, lost):
    """SIGKILL to a worker JVM with its executors (a node gone), or to one executor,
    while dedup_minhash runs. Measured here (docs/RUNNING_AT_SCALE.md): Spark reschedules
    the lost tasks (a lost worker's executor is reported to the job's driver and its tasks
    run on the other worker; a killed executor is replaced on its worker) and the run ends
    well, with the outputs of an uninterrupted run."""
    config, reference = dedup_reference
    env, state = _own_cluster(tmp_path)
    worker = state["processes"]["worker-1"]
    try:
        def lose() -> None:
            executors = _executors(worker)
            assert executors, "no executor on worker-1 to lose"
            if lost == "worker":
                os.killpg(worker, signal.SIGKILL)
            else:
                os.kill(executors[0], signal.SIGKILL)

        out = tmp_path / "out"
        code, console = _lose_during_near_dedup(config, out, env, lose)
        assert code == 0, f"the run did not survive the lost {lost}: {console[-3000:]}"
        assert differences(reference, str(out), stages=LOSS_STAGES) == []
        assert len(list((out / "logs").glob("engine-*.log"))) == 1  # one run: nothing was resumed
        master_log = (Path(state["folder"]) / "logs" / "master.log").read_text()
        if lost == "worker":  # the master drops it and tells the driver; its tasks ran on worker-2
            assert "Telling app of lost executor" in master_log
        else:  # replaced on the same worker: a third executor for the job
            assert re.search(r"Removing executor app-\S+ because it is EXITED", master_log)
            assert len(re.findall(r"Launching executor app-\S+ on worker", master_log)) == 3
        view = json.loads(cluster_cli("status", env=env).stdout)
        assert view["alive"]["worker-1"] is (lost == "executor") and view["master"]["aliveworkers"] == (
            1 if lost == "worker" else 2)
    finally:
        pids = list(state["processes"].values())
        assert cluster_cli("down", env=env).returncode == 0
        assert left_running(pids) == []
