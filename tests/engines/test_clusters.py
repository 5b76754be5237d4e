"""Issue 40, item 1: a Spark standalone cluster on this machine (a master, two workers,
executor JVMs they start, an SDK worker pool, all separate processes on 127.0.0.1),
started and stopped by ``python -m pipelines.engines cluster spark up|down``, runs every
stage of the engine job, crawl included, with FnApiRunner's outputs; nothing of it is
left running afterwards.

``make test-engines`` runs these alone (marked ``engines``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from pipelines import clusters, engines
from tests.enginejob import crawl, crawl_view, differences, run

pytestmark = [pytest.mark.engines, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def cluster_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.engines", "cluster", "spark", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def _left(pids: list[int]) -> list[int]:
    """Those of ``pids`` or of their process groups (executors) still running."""
    return sorted({p for pid in pids for p in [pid, *clusters.group_members(pid)] if clusters._alive(p)})


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[dict]:
    """A cluster in a folder of its own, for the module; down at its end, nothing left."""
    folder = tmp_path_factory.mktemp("clusters")
    env = {**os.environ, "TOKENFACTORY_CLUSTERS": str(folder)}
    before = os.environ.get("TOKENFACTORY_CLUSTERS")
    os.environ["TOKENFACTORY_CLUSTERS"] = str(folder)  # the engine's args read it in this process
    up = cluster_cli("up", env=env)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        state = json.loads(cluster_cli("status", env=env).stdout)
        yield {**state, "env": env}
    finally:
        state = clusters.read_state(folder / "spark") or {"processes": {}}
        pids = [int(p) for p in state["processes"].values()]
        down = cluster_cli("down", env=env)
        if before is None:
            os.environ.pop("TOKENFACTORY_CLUSTERS", None)
        else:
            os.environ["TOKENFACTORY_CLUSTERS"] = before
        assert down.returncode == 0, down.stderr
        assert _left(pids) == [], "cluster processes outlived `cluster spark down`"


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
    """A bad size reaches the worker JVM: it exits, `up` fails naming its log, and the
    master it started first is stopped."""
    part, classpath = engines.spark_classpath()
    folder = tmp_path / "spark"
    started = time.monotonic()
    with pytest.raises(clusters.ClusterError, match=r"Spark workers registering with the master: a process "
                                                     r"exited with \d+; its log: .*worker-1.log"):
        clusters.spark_up(folder, part, classpath, clusters.SparkClusterSpec(workers=1, memory="0m"))
    assert time.monotonic() - started < 80  # not the 90 s timeout: the exit is seen
    assert clusters.read_state(folder) is None
    assert clusters.SCALA_VERSION == engines.SCALA_VERSION
