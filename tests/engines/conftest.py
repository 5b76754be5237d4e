"""What the engine tests share, computed once per test session: the engine job and its
run on FnApiRunner, the crawl on FnApiRunner, the near-dedup job on FnApiRunner
(tests/engines/test_engines.py compares the embedded engines with them, test_clusters.py
the Spark cluster, test_flink_cluster.py the Flink cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.enginejob import EngineJob, crawl, crawl_view, run, write_engine_job


@pytest.fixture(scope="session")
def job(tmp_path_factory) -> EngineJob:
    return write_engine_job(tmp_path_factory.mktemp("enginejob"))


@pytest.fixture(scope="session")
def reference(job) -> str:
    """The whole chain on FnApiRunner: what every engine must reproduce."""
    out = str(job.root / "out-direct")
    code, table = run(["--config", job.config, "--output", out])
    assert code == 0, table
    manifest = json.loads(Path(out, "manifests", "dedup_minhash.json").read_text())
    assert manifest["extra"]["counters"]["cc_rounds"] >= 2
    assert manifest["counts"]["rejected_by_reason"]["near_duplicate"] >= 60  # chains + planted pairs
    return out


@pytest.fixture(scope="session")
def direct_crawl(tmp_path_factory) -> dict:
    view = crawl_view(*crawl(tmp_path_factory.mktemp("crawl"), "direct"))
    assert view["counts"]["crawl"]["failed_by_error"] == {"redirect_loop": 1, "timeout": 1}
    return view


@pytest.fixture(scope="session")
def dedup_reference(tmp_path_factory) -> tuple[str, str]:
    """(config, output) of the near-dedup job on FnApiRunner: what a run that lost a worker
    must still write."""
    from tests.interruptjob import STAGES, write_dedup_job

    root = tmp_path_factory.mktemp("lossjob")
    config = write_dedup_job(root)
    out = str(root / "out-direct")
    code, table = run(["--config", config, "--output", out, "--stages", STAGES])
    assert code == 0, table
    return config, out
