"""Engine parts without running an engine: options, a missing part, the launcher jar."""

from __future__ import annotations

import io
import zipfile

import pytest

from pipelines.engines import (ENGINES, LOCAL_PEAK_PER_INPUT_BYTE, POOL_FROM_BYTES, EngineMissing, available_memory_bytes,
                               engine_args, local_memory_refusal, sdk_workers_for, spark_partitions, write_launcher_jar)
from pipelines.run import main


def test_missing_part_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path / "empty"))
    for engine, tools in (("flink", "mvn"), ("spark", "mvn"), ("prism", "go")):
        with pytest.raises(EngineMissing, match=rf"{engine}/.* is missing; run `make engines`.*{tools}"):
            engine_args(engine)
    assert engine_args("direct") == ["--runner=FnApiRunner"]  # needs nothing
    config = tmp_path / "job.yaml"
    (tmp_path / "x.jsonl").write_text('{"text": "x"}\n')
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: {tmp_path / 'x.jsonl'}}}\n")
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["--config", str(config), "--engine", "flink"]) == 2
    assert "engine error: flink:" in err.getvalue() and "make engines" in err.getvalue()


# what `make engines` writes in each part's SOURCE here (the tested versions)
SOURCES = {
    "flink": "org.apache.beam.runners.flink.FlinkJobServerDriver from org.apache.beam:beam-runners-flink-1.19:2.62.0, "
             "org.slf4j:slf4j-simple:1.7.30 (launcher jar over lib/)",
    "spark": "org.apache.beam.runners.spark.SparkJobServerDriver from org.apache.beam:beam-runners-spark-3:2.62.0, "
             "org.apache.spark:spark-core_2.12:3.5.6 (launcher jar over lib/)",
    "prism": "github.com/apache/beam/sdks/v2/go/cmd/prism@v2.77.0 (built with go version go1.26.8 linux/amd64)",
}


def fake_parts(root, sources=SOURCES) -> None:
    for part, name in (("flink", "job-server.jar"), ("spark", "job-server.jar"), ("prism", "prism")):
        (root / part).mkdir(exist_ok=True)
        (root / part / name).write_bytes(b"x")
        if sources.get(part) is not None:
            (root / part / "SOURCE").write_text(sources[part] + "\n")


def test_the_fetched_parts_are_the_tested_versions():
    """Fails when `make engines` fetched other versions than the ones the tests ran (a new
    Beam SDK, a mirror serving newer runner modules): TESTED_VERSIONS and
    docs/RUNNING_AT_SCALE.md then need the new pair, after the engine tests pass with it."""
    from pipelines.engines import BEAM_VERSION, PARTS, TESTED_VERSIONS, part_beam_version

    assert BEAM_VERSION == "2.77.0"
    for part in PARTS:
        assert (BEAM_VERSION, part_beam_version(part)) in TESTED_VERSIONS[part], part
    assert {part: part_beam_version(part, None) for part in PARTS} == {"flink": "2.62.0", "spark": "2.62.0",
                                                                       "prism": "2.77.0"}


def test_an_untested_combination_is_refused_naming_both_unless_allowed(tmp_path, monkeypatch):
    from pipelines.engines import UNTESTED_ENV, part_beam_version

    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path))
    monkeypatch.delenv(UNTESTED_ENV, raising=False)
    shaded = "org.apache.beam:beam-runners-flink-1.19-job-server:2.77.0 (Beam's job server jar, Maven Central)"
    fake_parts(tmp_path, {**SOURCES, "flink": shaded, "spark": SOURCES["spark"].replace(":2.62.0", ":2.61.0"),
                          "prism": None})
    assert part_beam_version("flink") == "2.77.0" and part_beam_version("spark") == "2.61.0"
    assert part_beam_version("prism") == ""
    with pytest.raises(EngineMissing, match=r"spark: the Beam 2\.77\.0 SDK with a spark job server of Beam 2\.61\.0 "
                                            r"is not a combination the tests ran \(tested: SDK 2\.77\.0 with spark "
                                            r"2\.62\.0\).*TOKENFACTORY_UNTESTED_ENGINES=1"):
        engine_args("spark")
    with pytest.raises(EngineMissing, match=r"flink job server of Beam 2\.77\.0 is not a combination"):
        engine_args("flink")  # Beam's own shaded jar of the SDK's version: not what the tests ran
    with pytest.raises(EngineMissing, match=r"prism job server of Beam unknown version \(no SOURCE\)"):
        engine_args("prism")
    monkeypatch.setenv(UNTESTED_ENV, "1")
    assert "--runner=SparkRunner" in engine_args("spark") and "--runner=PrismRunner" in engine_args("prism")


def test_engine_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path))
    fake_parts(tmp_path)
    flink = engine_args("flink")
    assert "--flink_master=[local]" in flink and "--environment_type=LOOPBACK" in flink
    assert f"--flink_job_server_jar={tmp_path / 'flink' / 'job-server.jar'}" in flink
    external = engine_args("flink", worker_pool="localhost:50000")
    assert "--environment_type=EXTERNAL" in external and "--environment_config=localhost:50000" in external
    spark = engine_args("spark")
    assert "--spark_master_url=local[2]" in spark
    # datasets read twice are spilled, not recomputed (counters counted twice, CPU paid twice),
    # and a stage is 64 bundles, not one per core (the 2 GB heap ran out at 1M documents)
    assert "--storage_level=MEMORY_AND_DISK" in spark
    # a job's SDK environment outlives the gap between Spark's task waves (and Flink's
    # tasks): without it every wave started new workers (121 for 5,000 documents) ...
    assert "--environment_cache_millis=10000" in spark and "--environment_cache_millis=10000" in flink
    # ... but not a pool's: kept pool workers grew with a stage's data and the 1M run hung
    for pooled in (external, engine_args("spark", worker_pool="localhost:50000")):
        assert not any(a.startswith("--environment_cache") for a in pooled)
    assert not any(a.startswith("--environment_cache") for a in engine_args("prism") + engine_args("direct-mp"))
    assert "--job_server_jvm_properties=-Dspark.default.parallelism=64" in spark
    # partitions follow the input (~21 MB each, at least 4; 64 when the size is unknown):
    # 3M documents (4.08 GB) are 186, a small test input 4 (64 tasks a shuffle cost the
    # engine test 2.5x its CPU)
    assert spark_partitions(0) == 64 and spark_partitions(64 * 21 * 2**20) == 64
    assert spark_partitions(1) == 4 and spark_partitions(4 * 21 * 2**20) == 4
    assert spark_partitions(4 * 21 * 2**20 + 1) == 5
    assert "--job_server_jvm_properties=-Dspark.default.parallelism=4" in engine_args("spark", input_bytes=1000)
    assert spark_partitions(64 * 21 * 2**20 + 1) == 65 and spark_partitions(4_080_269_726) == 186
    assert "--job_server_jvm_properties=-Dspark.default.parallelism=186" in engine_args(
        "spark", input_bytes=4_080_269_726)
    # spilling writes the runner's multi-output records: Java serialization cannot
    assert "--job_server_jvm_properties=-Dspark.serializer=org.apache.spark.serializer.KryoSerializer" in spark
    assert f"--prism_location={tmp_path / 'prism' / 'prism'}" in engine_args("prism")
    # the job-state stream of a Prism job is bounded by job_server_timeout: a week, not 300 s
    assert "--job_server_timeout=604800" in engine_args("prism")
    assert "--direct_running_mode=multi_processing" in engine_args("direct-mp")
    with pytest.raises(ValueError, match="unknown engine 'storm'"):
        engine_args("storm")
    assert set(ENGINES) == {"direct", "direct-mp", "flink", "spark", "prism", "spark-cluster", "flink-cluster"}


def test_spark_cluster_options_come_from_the_cluster_that_is_up(tmp_path, monkeypatch):
    import json
    import os

    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path / "engines"))
    monkeypatch.setenv("TOKENFACTORY_CLUSTERS", str(tmp_path / "clusters"))
    (tmp_path / "engines").mkdir()
    fake_parts(tmp_path / "engines")
    folder = tmp_path / "clusters" / "spark"
    folder.mkdir(parents=True)
    state = {"kind": "spark", "master_url": "spark://127.0.0.1:7077", "master_ui": "http://127.0.0.1:8080",
             "spec": {"workers": 2, "cores": 1, "memory": "768m", "daemon_heap": "256m"},
             "processes": {"master": os.getpid(), "worker-1": os.getpid(), "worker-2": 2**22 + 7,
                           "sdk-worker-pool": os.getpid()}, "pool": "localhost:50123"}
    (folder / "state.json").write_text(json.dumps(state))
    args = engine_args("spark-cluster", input_bytes=1000)
    assert "--runner=SparkRunner" in args and "--spark_master_url=spark://127.0.0.1:7077" in args
    for prop in ("spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1", "spark.executor.memory=768m",
                 "beam.spark.test.reuseSparkContext=true", "spark.default.parallelism=4",
                 "spark.serializer=org.apache.spark.serializer.KryoSerializer"):
        assert f"--job_server_jvm_properties=-D{prop}" in args, prop
    assert "--environment_type=EXTERNAL" in args and "--environment_config=localhost:50123" in args
    assert "--environment_cache_millis=10000" in args  # SDK workers kept between task waves (2.5x faster)
    assert "--environment_config=localhost:9" in engine_args("spark-cluster", worker_pool="localhost:9")
    # worker-2 is gone (above) and jobs still run on worker-1; without the master, the pool
    # or any worker: not up, and the message says how to start one
    gone = 2**22 + 7  # above Linux's largest pid
    for lost in ({"master": gone}, {"sdk-worker-pool": gone}, {"worker-1": gone}):
        (folder / "state.json").write_text(json.dumps({**state, "processes": {**state["processes"], **lost}}))
        with pytest.raises(EngineMissing, match="no spark cluster is up in .*cluster spark up"):
            engine_args("spark-cluster")


def test_flink_cluster_options_come_from_the_cluster_that_is_up(tmp_path, monkeypatch):
    import json
    import os

    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path / "engines"))
    monkeypatch.setenv("TOKENFACTORY_CLUSTERS", str(tmp_path / "clusters"))
    (tmp_path / "engines").mkdir()
    fake_parts(tmp_path / "engines")
    folder = tmp_path / "clusters" / "flink"
    folder.mkdir(parents=True)
    state = {"kind": "flink", "master_url": "127.0.0.1:8081", "rest": "http://127.0.0.1:8081",
             "spec": {"taskmanagers": 3, "slots": 2}, "job_server": "/c/job-server/job-server.jar",
             "processes": {"jobmanager": os.getpid(), "taskmanager-1": 2**22 + 7, "taskmanager-2": os.getpid(),
                           "sdk-worker-pool": os.getpid()}, "pool": "localhost:50124"}
    (folder / "state.json").write_text(json.dumps(state))
    args = engine_args("flink-cluster")
    for arg in ("--runner=FlinkRunner", "--flink_master=127.0.0.1:8081", "--parallelism=6",
                "--flink_job_server_jar=/c/job-server/job-server.jar",
                "--pipeline_resources_detector_factory_class=tokenfactory.flink.ClusterClasspath",
                "--execution_mode_for_batch=BATCH_FORCED", "--environment_type=EXTERNAL",
                "--environment_config=localhost:50124", "--environment_cache_millis=10000"):
        assert arg in args, arg
    # the JobManager, the pool or every TaskManager gone: not up, and how to start one
    gone = 2**22 + 7
    for lost in ({"jobmanager": gone}, {"sdk-worker-pool": gone}, {"taskmanager-2": gone}):
        (folder / "state.json").write_text(json.dumps({**state, "processes": {**state["processes"], **lost}}))
        with pytest.raises(EngineMissing, match="no flink cluster is up in .*cluster flink up"):
            engine_args("flink-cluster")


def test_flink_cluster_config_and_sizes(tmp_path):
    from pipelines import clusters

    conf = clusters.flink_conf(tmp_path, clusters.FlinkClusterSpec(slots=3, restart_attempts=4), 6123, 8081)
    lines = dict(line.split(": ", 1) for line in conf.read_text().splitlines())
    assert lines["jobmanager.rpc.port"] == "6123" and lines["rest.port"] == "8081"
    assert lines["rest.bind-address"] == lines["taskmanager.host"] == "127.0.0.1"
    assert lines["taskmanager.numberOfTaskSlots"] == "3"
    assert lines["classloader.resolve-order"] == "parent-first"  # SDK workers kept between tasks
    assert lines["restart-strategy.type"] == "exponential-delay"
    assert lines["restart-strategy.exponential-delay.attempts-before-reset-backoff"] == "4"
    assert lines["taskmanager.memory.network.min"] == lines["taskmanager.memory.network.max"] == "256m"
    assert lines["cluster.uncaught-exception-handling"] == "FAIL"  # an OutOfMemoryError hung the job
    assert lines["taskmanager.memory.managed.fraction"] == "0.25"
    assert lines["io.tmp.dirs"] == str(tmp_path / "tmp")
    for bad in ({"taskmanagers": 0}, {"slots": 0}, {"taskmanager_memory": "1.5g"}, {"network_memory": "0m"},
                {"restart_attempts": -1}, {"managed_fraction": 1.0}):
        with pytest.raises(ValueError):
            clusters.FlinkClusterSpec(**bad)


def test_launcher_jar_with_entries(tmp_path):
    import zipfile

    from pipelines.engines import write_launcher_jar

    jar = tmp_path / "launch.jar"
    write_launcher_jar(jar, "a.Main", entries=["file:///x/job-server.jar", "ours.jar"])
    manifest = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF").decode().replace("\r\n ", "")
    assert "Class-Path: file:///x/job-server.jar ours.jar\r\n" in manifest


def test_launcher_jar_manifest_lists_every_jar(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    names = [f"some-rather-long-artifact-name-number-{i:03d}-1.2.3.jar" for i in range(40)]
    for name in names:
        (lib / name).write_bytes(b"")
    jar = tmp_path / "job-server.jar"
    write_launcher_jar(jar, "org.example.Main")
    raw = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF")
    lines = raw.split(b"\r\n")
    assert all(len(line) <= 72 for line in lines)  # the jar specification's line limit
    logical = raw.replace(b"\r\n ", b"").decode().split("\r\n")
    assert "Main-Class: org.example.Main" in logical
    class_path = next(l for l in logical if l.startswith("Class-Path: ")).split()[1:]
    assert class_path == [f"lib/{n}" for n in sorted(names)]


def test_worker_path_puts_the_pools_interpreter_first():
    from pipelines.worker_pool import worker_path

    assert worker_path("/v/bin/python", "/usr/bin:/v/bin:/bin") == "/v/bin:/usr/bin:/bin"
    assert worker_path("/v/bin/python", "") == "/v/bin"
    assert worker_path("/v/bin/python3.11", "/usr/bin::/bin") == "/v/bin:/usr/bin:/bin"


def test_a_pool_started_outside_its_venv_starts_workers_with_its_own_python(tmp_path):
    """Beam's pool runs `python -c ...` from the PATH: with a PATH without this venv
    (python -m pipelines.worker_pool run by its full path) the worker must still be this
    interpreter, alive and waiting for its runner, not a python without Beam dying at
    its first import."""
    import os
    import subprocess
    import sys
    import time

    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2
    from apache_beam.utils import subprocess_server

    from pipelines.engines import child_pids

    port, = subprocess_server.pick_port(None)
    log = tmp_path / "pool.log"
    with log.open("wb") as out:
        pool = subprocess.Popen([sys.executable, "-m", "pipelines.worker_pool", f"--service_port={port}"],
                                env=dict(os.environ, PATH="/usr/bin:/bin"), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        channel = grpc.insecure_channel(f"localhost:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
        silent = subprocess_server.pick_port(None)[0]  # nothing listens: the worker waits for it
        response = stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
            worker_id="w1", control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{silent}")))
        assert not response.error, response.error
        time.sleep(4)
        workers = child_pids(pool.pid)
        assert len(workers) == 1, log.read_text()
        assert "exited with" not in log.read_text()
        cmd = open(f"/proc/{workers[0]}/cmdline", "rb").read().split(b"\0")
        assert cmd[0] == b"python" and b"SdkHarness" in cmd[2]
        environ = dict(e.split(b"=", 1) for e in open(f"/proc/{workers[0]}/environ", "rb").read().split(b"\0") if b"=" in e)
        assert environ[b"PATH"].split(b":")[0] == os.path.dirname(sys.executable).encode()
        channel.close()
    finally:
        os.killpg(pool.pid, 9)
        pool.wait()


@pytest.mark.parametrize("engine", [None, "direct", "prism"])
def test_sdk_workers_pool_needs_flink_or_spark(tmp_path, monkeypatch, engine):
    config = tmp_path / "job.yaml"
    (tmp_path / "x.jsonl").write_text('{"text": "x"}\n')
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: {tmp_path / 'x.jsonl'}}}\n")
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    argv = ["--config", str(config), "--sdk-workers", "pool"] + (["--engine", engine] if engine else [])
    assert main(argv) == 2
    assert "--sdk-workers pool needs --engine flink or spark" in err.getvalue()
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize("engine", ["flink", "spark"])
def test_auto_sdk_workers_go_to_a_pool_from_512_mib_of_input_on_flink_and_spark(engine):
    assert POOL_FROM_BYTES == 512 * 1024 * 1024
    assert sdk_workers_for("auto", engine, POOL_FROM_BYTES - 1) == "loopback"
    assert sdk_workers_for("auto", engine, POOL_FROM_BYTES) == "pool"
    assert sdk_workers_for("auto", engine, 0) == "loopback"  # unknown size (a crawl)
    # the user's environment wins: no pool started beside it
    assert sdk_workers_for("auto", engine, 10 * POOL_FROM_BYTES, ["--environment_type=LOOPBACK"]) == "loopback"
    assert sdk_workers_for("auto", engine, 10 * POOL_FROM_BYTES, ["--runner=X", "--environment_type", "DOCKER"]) == "loopback"
    assert sdk_workers_for("auto", engine, 10 * POOL_FROM_BYTES, ["--environment_config=x"]) == "pool"


@pytest.mark.parametrize("engine", [None, "direct", "direct-mp", "prism"])
def test_auto_sdk_workers_stay_in_process_off_flink_and_spark(engine):
    assert sdk_workers_for("auto", engine, 10 * POOL_FROM_BYTES) == "loopback"


def test_a_local_runner_refuses_an_input_its_in_memory_shuffles_would_not_fit():
    assert LOCAL_PEAK_PER_INPUT_BYTE == {"direct": 10.0, "direct-mp": 8.0}  # measured (docs/BENCHMARKS.md)
    gib = 2**30
    assert local_memory_refusal("direct-mp", 2 * gib, 16 * gib) is None  # 16 GiB needed: fits exactly
    refusal = local_memory_refusal("direct-mp", 2 * gib + 1, 16 * gib)
    assert refusal.startswith("--engine direct-mp keeps every shuffle in memory: 2.0 GiB of input needs about "
                              "16.0 GiB (8x, measured) and 16.0 GiB is free") and "--engine spark" in refusal
    assert local_memory_refusal("direct", gib, 10 * gib) is None
    assert "10x" in local_memory_refusal("direct", gib + 1, 10 * gib)
    for engine in ("spark", "flink", "prism", None):  # they spill, or are not ours to size
        assert local_memory_refusal(engine, 100 * gib, gib) is None
    assert local_memory_refusal("direct", 0, gib) is None  # unknown size (a crawl)
    assert local_memory_refusal("direct", 100 * gib, 0) is None  # unknown memory
    assert available_memory_bytes() > 0  # /proc/meminfo on Linux


def test_a_refused_local_run_says_why_and_runs_nothing(tmp_path, monkeypatch):
    data = tmp_path / "huge.jsonl"
    with open(data, "wb") as fh:  # sparse: its size without the disk
        fh.truncate(available_memory_bytes() // 8 * 2)
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: {data}}}\n")
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["--config", str(config), "--engine", "direct-mp", "--stages", "extract"]) == 2
    assert "engine error: --engine direct-mp keeps every shuffle in memory" in err.getvalue()
    assert "--no-memory-check runs it anyway" in err.getvalue() and err.getvalue().endswith("nothing ran\n")
    assert not (tmp_path / "out").exists()


def test_no_memory_check_runs_what_the_check_would_refuse(tmp_path, monkeypatch):
    monkeypatch.setattr("pipelines.run.available_memory_bytes", lambda: 16)  # 16 bytes free
    (tmp_path / "x.jsonl").write_text('{"id": "a", "text": "Some text long enough to keep as a document."}\n')
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: {tmp_path / 'x.jsonl'}}}\n")
    argv = ["--config", str(config), "--engine", "direct", "--stages", "extract", "--no-report", "--no-progress"]
    assert main(argv) == 2 and not (tmp_path / "out").exists()
    assert main(argv + ["--no-memory-check"]) == 0
    assert (tmp_path / "out" / "manifests" / "extract.json").exists()


def test_an_explicit_sdk_workers_choice_stands():
    assert sdk_workers_for("loopback", "spark", 10 * POOL_FROM_BYTES) == "loopback"
    assert sdk_workers_for("pool", "spark", 0) == "pool"
    assert sdk_workers_for("pool", "flink", 0, ["--environment_type=LOOPBACK"]) == "pool"
    with pytest.raises(ValueError, match="'Pool': one of auto, loopback, pool"):
        sdk_workers_for("Pool", "spark", 0)

def recording_pool(events: list) -> type:
    """A stand-in for WorkerPool that records its start and stop in ``events``."""

    class RecordingPool:
        def __init__(self, log):
            self.address = "127.0.0.1:1"

        def __enter__(self):
            events.append("start")
            return self

        def __exit__(self, *exc):
            events.append("stop")

    return RecordingPool


def tiny_job(tmp_path) -> str:
    """A job config of one JSONL document; returns its path."""
    config = tmp_path / "job.yaml"
    (tmp_path / "x.jsonl").write_text('{"text": "x"}\n')
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: {tmp_path / 'x.jsonl'}}}\n")
    return str(config)


def test_auto_is_the_default_and_starts_no_pool_for_a_small_input(tmp_path, monkeypatch):
    """A small job with --engine spark and no --sdk-workers: the choice is made (auto),
    no pool is started, and a missing jar is still the engine's error."""
    started = []
    monkeypatch.setattr("pipelines.run.WorkerPool", lambda **kw: started.append(kw))
    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path / "no-engines"))
    config = tiny_job(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["--config", config, "--engine", "spark"]) == 2
    assert "engine error: spark:" in err.getvalue() and started == []


def test_auto_starts_a_pool_for_a_large_input(tmp_path, monkeypatch):
    """The same command when the configured input passes POOL_FROM_BYTES: the pool is
    started (and stopped: the engine error after it ends the run)."""
    events = []

    monkeypatch.setattr("pipelines.run.WorkerPool", recording_pool(events))
    monkeypatch.setattr("pipelines.stages.configured_input_bytes", lambda config: POOL_FROM_BYTES)
    monkeypatch.setenv("TOKENFACTORY_ENGINES", str(tmp_path / "no-engines"))
    config = tiny_job(tmp_path)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert main(["--config", config, "--engine", "flink"]) == 2
    assert events == ["start", "stop"]


def test_sigterm_stops_the_worker_pool_the_run_started(tmp_path, monkeypatch, capsys):
    """`kill` of a running pipelines.run: it exits 143 (128 + SIGTERM) with one line and
    the pool it started is stopped, not left running under init."""
    import os
    import signal

    events = []

    def killed_mid_run(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        events.append("ran on")  # never reached: the handler raises first

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setattr("pipelines.run.WorkerPool", recording_pool(events))
    monkeypatch.setattr("pipelines.run.engine_args", lambda *a, **k: [])
    monkeypatch.setattr("pipelines.run.run_job", killed_mid_run)
    config = tiny_job(tmp_path)
    try:
        code = main(["--config", config, "--engine", "spark", "--sdk-workers", "pool"])
        restored = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 143
    assert capsys.readouterr().err.splitlines()[-1].startswith("interrupted (SIGTERM) while no stage was running")
    assert events == ["start", "stop"]
    assert restored == signal.SIG_DFL  # the handler from before main is back
