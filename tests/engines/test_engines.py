"""Every stage on real engines: Flink (embedded; LOOPBACK and an SDK worker pool), Spark
(local[2]) and Prism, each compared with FnApiRunner on the same input; a worker killed
on Flink; one giant near-duplicate component on Flink.

The engines' parts come from ``make engines`` (``.engines/``); when one is missing these
tests fail with what to install, they never skip. ``make test-engines`` runs them alone.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.dedup_stage import EDGE_SCHEMA, NearDedupDriver
from pipelines.engines import WorkerPool, engine_args, shared_job_server
from tests.enginejob import crawl, crawl_view, differences, run
from tests.interruptjob import STAGES, interrupt_run, write_dedup_job
from transforms.dedup.dedup import DedupConfig, MinHashConfig

pytestmark = [pytest.mark.engines, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


class Sampler:
    """Counts a worker pool's SDK worker processes while a job runs (the most at once)."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool, self.most, self._stop = pool, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.most = max(self.most, len(self.pool.workers()))

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# What an engine run that ended well must not print on the console (issue 38, item 4): the
# engine's own output is in <output>/logs/engine-*.log
ENGINE_NOISE = ("Traceback", " ERROR ", "Exception", "Unparseable argument", "not declared",
                "apitools", "WARNING root", "apache_beam", "SLF4J")


@pytest.mark.parametrize("engine", ["flink", "spark", "prism"])
def test_every_stage_equals_fnapi(job, reference, engine, capfd):
    """(Flink with an SDK worker pool: ``test_worker_killed_during_near_dedup_on_flink``.)"""
    out = str(job.root / f"out-{engine}")
    capfd.readouterr()
    code, table = run(["--config", job.config, "--output", out, "--engine", engine])
    assert code == 0, table
    console = capfd.readouterr()
    noise = [line for line in (console.out + console.err).splitlines() if any(n in line for n in ENGINE_NOISE)]
    assert noise == [], noise
    logs = glob.glob(f"{out}/logs/engine-*.log")
    if engine != "prism":  # the job server's start and stop, at least
        assert len(logs) == 1 and "Really starting service" in Path(logs[0]).read_text()
        assert f"engine log: {logs[0]} (" in table
    manifest = json.loads(Path(out, "manifests", "dedup_minhash.json").read_text())
    assert manifest["runner"] == ("PrismRunner" if engine == "prism" else
                                  "SparkRunner" if engine == "spark" else "FlinkRunner")
    assert manifest["extra"]["counters"]["cc_rounds"] >= 2  # at least two star rounds ran
    assert differences(reference, out) == []


def test_spark_with_sdk_workers_in_a_pool_equals_fnapi(job, reference):
    """`--sdk-workers pool`: pipelines.run starts a worker pool for the run, the SDK
    workers run in its processes (not in this one), and the output is FnApiRunner's."""
    out = str(job.root / "out-spark-pool")
    # one stage: the whole chain with a pool runs on Flink below (the worker-killed test); this is
    # the option's own path, kept short for CI's 30 minutes
    code, table = run(["--config", job.config, "--output", out, "--engine", "spark", "--sdk-workers", "pool",
                       "--stages", "extract"])
    assert code == 0, table
    assert differences(reference, out, stages=("extract",)) == []
    log = Path(glob.glob(f"{out}/logs/engine-*.log")[0])  # the pool writes into the run's engine log
    started = log.read_text().count("Starting worker with command")
    assert started >= 1, log.read_text()


@pytest.mark.parametrize("engine", ["flink", "spark", "prism"])
def test_crawl_stage_equals_fnapi(tmp_path, direct_crawl, engine):
    """The crawl stage against the local test site (robots, redirects, a loop, 404, a 500
    then 200, a timeout, an image, a huge page), then extract, on the engine and on
    FnApiRunner: the same fetch log, frontier, counts and extracted pages."""
    assert crawl_view(*crawl(tmp_path, engine)) == direct_crawl


def test_worker_killed_during_near_dedup_on_flink(job, reference, tmp_path):
    """The stages from dedup_minhash on, on Flink with a worker-pool sidecar
    (``--environment_type=EXTERNAL``: the SDK workers, two at once, run in the pool's
    processes), one of its SDK worker processes killed (SIGKILL) while dedup_minhash runs. The job recovers (the pool starts a worker
    that died before it connected again) or Flink fails the pipeline and the job exits 1
    naming the stage and the engine; it never hangs. Run again, the same command resumes
    at dedup_minhash. The outputs of every stage are exactly FnApiRunner's: nothing lost,
    nothing twice. (One test for the pool and the kill: CI's 30 minutes.)"""
    out = str(tmp_path / "out")
    # the first stages on FnApiRunner (the pool's own path from extract on: the Spark pool
    # test), the rest on Flink with the pool
    code, table = run(["--config", job.config, "--output", out, "--stages", "extract,clean,dedup_exact"])
    assert code == 0, table
    with WorkerPool(log=tmp_path / "pool.log") as pool, Sampler(pool) as sampler:
        args = engine_args("flink", worker_pool=pool.address)
        cmd = [sys.executable, "-m", "pipelines.run", "--config", job.config, "--output", out,
               "--stages", "dedup_minhash", "--no-progress", "--no-report", "--log-level", "WARNING"] + args
        with open(tmp_path / "stdout.txt", "w") as stdout, open(tmp_path / "stderr.txt", "w") as stderr:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=stderr)
            killed = None
            deadline = time.monotonic() + 480
            while proc.poll() is None and time.monotonic() < deadline:
                if killed is None and pool.workers() and Path(out, "work", "dedup_minhash").exists():
                    time.sleep(1.0)  # let it start working
                    workers = pool.workers()
                    if workers:
                        os.kill(workers[0], signal.SIGKILL)
                        killed = workers[0]
                time.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
                pytest.fail("the job hung after an SDK worker was killed")
        errors = (tmp_path / "stderr.txt").read_text()
        assert killed is not None, "no SDK worker was running during dedup_minhash"
        if proc.returncode != 0:  # failed: a clear message, dedup_minhash unfinished
            assert proc.returncode == 1, errors[-3000:]
            assert "stage dedup_minhash failed on FlinkRunner" in errors
            assert "the same command resumes from there" in errors
            assert not Path(out, "manifests", "dedup_minhash.json").exists()
            again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
            assert again.returncode == 0, again.stderr[-3000:]
            assert "dedup_minhash" in again.stdout and "ran in" in again.stdout
        code, table = run(["--config", job.config, "--output", out, "--stages", "label,tokenizer,tokenize"] + args)
        assert code == 0, table
    assert sampler.most >= 2, f"the worker pool ran {sampler.most} SDK workers at once"
    manifest = json.loads(Path(out, "manifests", "dedup_minhash.json").read_text())
    assert manifest["runner"] == "FlinkRunner" and manifest["extra"]["counters"]["cc_rounds"] >= 2
    assert differences(reference, out) == []


def test_giant_component_on_flink(tmp_path):
    """30,000 near-duplicates of one page (every copy linked to the same document, as the
    bucket step leaves them), ``hot_degree`` 3,000: one component, the smallest node its
    root, and no star group above ~1.1x ``hot_degree`` (unsplit, the root's group would
    hold all 30,000). (100,000 at the default 10,000 before: the same ratio, for CI's time.)"""
    members = 30_000
    driver = NearDedupDriver(DedupConfig(minhash=MinHashConfig(hot_degree=3_000, driver_max_edges=0)),
                             str(tmp_path), [], None)
    first = Path(driver._edges_dir(0))
    first.mkdir(parents=True)
    a = [f"1|copy{i:06d}" for i in range(1, members)]
    pq.write_table(pa.table({"a": a, "b": ["1|copy000000"] * len(a)}, schema=EDGE_SCHEMA),
                   first / "part-00000-of-00001.parquet")
    options = PipelineOptions(engine_args("flink"))
    with shared_job_server(options):
        rounds = driver.run_rounds(options, (len(a), 0))
    final = [r for f in glob.glob(f"{driver._edges_dir(rounds)}/*.parquet") for r in pq.read_table(f).to_pylist()]
    assert len(final) == members - 1 and {r["b"] for r in final} == {"1|copy000000"}
    assert {r["a"] for r in final} == set(a)
    assert 0 < driver.largest_group <= 3_300, driver.largest_group


def test_written_rows_stay_in_the_sdk_worker_on_flink(tmp_path, monkeypatch):
    """The stage outputs' writer fuses with the stage that makes the rows: on Flink (LOOPBACK,
    so the SDK worker is this process and its data channel can be counted) the SDK sends
    the runner only file names. Beam's WriteToParquet, whose write step takes a side input,
    sends every row (the control: the count sees a crossing when there is one). Rows that
    crossed made Flink deadlock at 3M documents (docs/BENCHMARKS.md)."""
    import apache_beam as beam
    import apache_beam.runners.worker.data_plane as data_plane

    from pipelines.outputs import WriteParquet

    sent = {"bytes": 0}
    original = data_plane._GrpcDataChannel._enqueue_to_send

    def counted(channel, elem):
        sent["bytes"] += channel._get_element_size_bytes(elem)
        return original(channel, elem)

    monkeypatch.setattr(data_plane._GrpcDataChannel, "_enqueue_to_send", counted)
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    rows_bytes = 20 * 1000 * 1000
    options = PipelineOptions(engine_args("flink") + ["--parallelism=1"])
    crossed = {}
    with shared_job_server(options):
        for writer in ("ours", "beam"):
            sent["bytes"] = 0
            with beam.Pipeline(options=options) as p:
                rows = (p | beam.Create(list(range(20))) | beam.Reshuffle()
                        | beam.FlatMap(lambda i: ({"id": i * 1000 + j, "text": "x" * 1000} for j in range(1000))))
                if writer == "ours":
                    rows | WriteParquet(str(tmp_path / writer), schema, lambda r: r)
                else:
                    rows | beam.io.WriteToParquet(str(tmp_path / writer / "part"), schema, file_name_suffix=".parquet")
            crossed[writer] = sent["bytes"]
            assert sum(pq.ParquetFile(f).metadata.num_rows for f in glob.glob(f"{tmp_path / writer}/*.parquet")) == 20_000
    assert crossed["beam"] >= rows_bytes, crossed
    assert crossed["ours"] < 100_000, crossed


@pytest.mark.parametrize("engine", ["spark", "prism"])
def test_ctrl_c_on_an_engine_ends_with_one_line_and_stops_the_job_server(tmp_path, engine):
    """Ctrl-C (SIGINT to the process group, the job server JVM or Prism included) while
    dedup_minhash runs: exit 130, one line with the stage and the command that resumes,
    no Python or Java traceback, no process of the run left (issue 36, item 13; before,
    on Spark: 162 lines and no resume hint; on Prism, Beam's own SIGINT handler stopped
    Prism first and the SDK harness logged 2 tracebacks)."""
    config = write_dedup_job(tmp_path)
    argv = ["--config", config, "--stages", STAGES, "--no-progress", "--no-report", "--log-level", "WARNING",
            "--engine", engine]
    ended = interrupt_run(argv, tmp_path / "out" / "work" / "dedup_minhash")
    assert ended.returncode == 130, ended.stderr[-3000:]
    after = ended.stderr.split("Waiting for grpc channel to be ready")[-1]  # Beam's start-up warnings before
    assert "Traceback" not in ended.stderr and "Exception" not in after and "\tat " not in ended.stderr, ended.stderr
    assert ended.stderr.splitlines()[-1].startswith(
        "interrupted in stage dedup_minhash: outputs of finished stages (extract, dedup_exact) are kept; "
        "resume with: "), ended.stderr[-3000:]
    assert ended.left == [], f"processes of the run still alive (the job server?): {ended.left}"
    assert not (tmp_path / "out" / "_lease.json").exists()
