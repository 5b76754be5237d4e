"""The engines a job runs on, their parts, and one job server per job.

``python -m pipelines.run --engine NAME`` (or ``make run RUNNER=NAME``) adds the Beam
options of an engine; options given on the command line still win. Engines that run on
one machine:

========== ==========================================================================
direct     Beam's FnApiRunner in this process (the default; shuffles in memory)
direct-mp  FnApiRunner with ``--direct_running_mode=multi_processing``, 2 workers
flink      Beam's Flink runner on an embedded Flink (``--flink_master=[local]``)
spark      Beam's Spark runner on ``local[2]``
prism      Prism, Beam's Go runner
========== ==========================================================================

and two on a cluster of processes on this machine (``pipelines/clusters.py``), started
with ``python -m pipelines.engines cluster spark|flink up`` and stopped with ``... down``:

============= =======================================================================
spark-cluster Beam's Spark runner on a Spark standalone cluster (a master, 2 workers,
              executor JVMs), SDK workers in the cluster's worker pool
flink-cluster Beam's Flink runner on a Flink session cluster (a JobManager, 2
              TaskManagers of 2 slots), SDK workers in the cluster's worker pool
============= =======================================================================

The Flink and Spark job servers and the Prism binary are fetched into a cache
(``.engines/``, or ``$TOKENFACTORY_ENGINES``) by ``python -m pipelines.engines fetch``
(``make engines``): the job servers with Maven from Maven Central, Prism built with Go
from Beam's Go module of the installed Beam version. A job server is Beam's shaded
``beam-runners-<engine>-job-server`` jar of the installed Beam version when Maven can
resolve it; where it cannot (a mirror without it), the same driver class is run from
the runner's modules at the newest Beam release that resolves (``JAVA_FALLBACK``) with
a launcher jar whose manifest lists them. ``SOURCE`` in the part's folder says which.

A Flink or Spark job is several Beam pipelines (one per stage, several for near-dedup).
Beam's runners start a job server JVM for each pipeline; ``shared_job_server``
(``pipelines.job_servers``) starts one for the whole job instead and points every
pipeline at it (``--job_endpoint``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import clusters
from pipelines.config_errors import choice_of, did_you_mean
from pipelines.job_servers import child_pids, shared_job_server  # noqa: F401 (shared_job_server: re-exported)

_LOGGER = logging.getLogger(__name__)

BEAM_VERSION = beam.__version__
FLINK_VERSION = "1.19"
SPARK_VERSION = "3.5.6"  # Spark's own jars: Beam's Spark runner declares them "provided"
SCALA_VERSION = "2.12"
# The newest Beam release whose Flink 1.19 and Spark 3 runner modules (with every
# dependency) resolve from the Maven Central mirror of the development machines.
JAVA_FALLBACK = "2.62.0"
SLF4J_VERSION = "1.7.30"
PRISM_MODULE = "github.com/apache/beam/sdks/v2/go/cmd/prism"
PRISM_STATE_TIMEOUT_S = 7 * 24 * 3600  # see Engine.args

ROOT = Path(__file__).resolve().parent.parent


# The job server JVM's heap (with the embedded Flink or Spark in it). The JVM's default,
# a quarter of the machine's memory, let it grow to 4-6 GB at 100k documents; Flink keeps
# its sort buffers in managed (off-heap) memory and Spark spills, so a fixed heap keeps the
# engine's memory flat as documents grow. Another -Xmx given later wins.
JOB_SERVER_HEAP = "--job_server_jvm_properties=-Xmx2g"

# Spark on one machine, measured at 1M documents (docs/BENCHMARKS.md, bench_scale):
# - Beam's Spark runner makes one task per partition and runs a task's whole input as one
#   bundle; with Spark's default parallelism (the cores: 2) a 1.3 GB input is two bundles
#   and the 2 GB heap ran out in extract. 64 partitions keep a bundle ~1/64 of a stage;
#   Spark runs them in waves of `cores` tasks, so memory stays flat as the input grows.
# - A dataset read by two consumers (a stage's kept and rejected outputs, the tokenizer's
#   byte total and shard assignment) is cached at the runner's storage level, MEMORY_ONLY
#   by default: partitions that do not fit are silently recomputed, every counter of the
#   stage counted again (tokenize counted 1,806,920 documents for 903,460, extract's
#   check failed) and the stage's CPU paid twice. MEMORY_AND_DISK spills instead.
#   Spilling serializes with spark.serializer: Java serialization cannot write the
#   runner's multi-output records (RawUnionValue), Kryo can (Beam's own recommendation
#   for its Spark runner). Java 17 hid that error behind an IllegalAccessError of Spark's
#   SerializationDebugger: the export lets it report the real one.
# - The partitions grow with the input (one per SPARK_PARTITION_BYTES of it, at least
#   SPARK_PARTITIONS), so a task's bundle, and with it the heap a task needs, stays the same
#   size as documents grow: at 3M documents (4.1 GB of JSONL) 64 partitions ran the 2 GB
#   heap out in dedup_minhash (2026-12-02; the same run had passed the day before: at the
#   edge), 192 finished. 64 at 1M (1.4 GB) and 192 at 3M are both ~21 MB of input each.
#   Below 64 x 21 MB the partitions go down to SPARK_MIN_PARTITIONS: a small job's 64
#   tasks a shuffle were pure overhead (the engine test's whole chain, ~1 MB of input:
#   231 -> 104 CPU s of the process tree and the same outputs with 4, 2026-12-07).
# How long (ms) the job server keeps a job's SDK environment after its last task. Beam's
# default, 0, releases it when no task holds it, and Spark's local tasks (a stage is 64+
# partitions run 2 at a time) drop the count to 0 between waves: the next task starts the
# environment again, new SDK worker processes with a pool (121 started for an extract and
# a dedup_exact of 5,000 documents; 742 in 85 minutes of a 3M run), a new harness in the
# driver with LOOPBACK. Kept 10 s, the same 5,000 documents started 4 workers and ran in
# 58 s instead of 175 (Spark local[2], a pool; docs/BENCHMARKS.md). Flink's embedded
# runner reads the same option. Only for LOOPBACK workers: with a pool, the kept workers
# live through a whole stage and grow with its data (1M documents: 2.0 GB summed in
# dedup_exact), and the 1M run with the pool and the cache ran the Spark JVM's 2 GB heap
# out in dedup_minhash and hung; the same run without the cache finished (2026-12-03).
# A pool's job pays worker starts (one every ~7 s) for that; jobs that get a pool are the
# ones larger than memory. A user's own --environment_cache_millis wins either way.
ENVIRONMENT_CACHE = "--environment_cache_millis=10000"

SPARK_PARTITIONS = 64
SPARK_PARTITION_BYTES = 21 * 1024 * 1024
SPARK_MIN_PARTITIONS = 4
SPARK_TUNING = ("--job_server_jvm_properties=-Dspark.serializer=org.apache.spark.serializer.KryoSerializer",
                "--job_server_jvm_properties=--add-exports=java.base/sun.security.action=ALL-UNNAMED",
                "--storage_level=MEMORY_AND_DISK")


class FlinkJavaOptions(PipelineOptions):
    """Options of Beam's Java SDK and Flink runner that ``flink-cluster`` passes to its
    job server (as ``SparkJavaOptions``)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--pipeline_resources_detector_factory_class", default=None,
                            help="Java job servers: a PipelineResourcesDetector.Factory class (which jars "
                                 "a job ships to its cluster)")
        parser.add_argument("--execution_mode_for_batch", default=None,
                            help="Flink runner: PIPELINED (Flink's default for batch) or BATCH_FORCED "
                                 "(every shuffle written out before it is read)")


class SparkJavaOptions(PipelineOptions):
    """Options of Beam's Java Spark runner that we pass, declared here so that Python's
    option parser knows them: it warned "Unparseable argument: --storage_level=..." on
    every Spark run. The value reaches the job server as before (known options are all
    sent; the job server's own declaration of the same name is then skipped)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--storage_level", default=None,
                            help="Spark runner: the storage level of cached RDDs (e.g. MEMORY_AND_DISK)")


def spark_partitions(input_bytes: int) -> int:
    """Spark's partitions for a job reading ``input_bytes``: one per SPARK_PARTITION_BYTES,
    at least SPARK_MIN_PARTITIONS (two waves of local[2]'s tasks); SPARK_PARTITIONS when
    the size is unknown (0, e.g. a crawl)."""
    if input_bytes <= 0:
        return SPARK_PARTITIONS
    return max(SPARK_MIN_PARTITIONS, math.ceil(input_bytes / SPARK_PARTITION_BYTES))


# Where the Python SDK workers run when `pipelines.run --sdk-workers auto` (the default)
# and the engine is Flink or Spark. LOOPBACK workers live in the driver, and Beam 2.77
# keeps every pipeline's SdkHarness there after the pipeline ends (its run thread blocked
# closing the data channel; docs/BENCHMARKS.md): the driver grows with the job. Measured on
# Spark local[2] (bench_scale): at 150k documents (0.2 GB of JSONL) LOOPBACK and a pool
# peak alike on the Python side (0.61 vs 0.64 GB) and the pool's per-job worker start-up
# (a few seconds a pipeline) is pure cost; at 600k (0.8 GB) LOOPBACK peaked at 1.32 GB
# against the pool's 0.77. So inputs from 512 MiB run their workers in a pool.
POOL_FROM_BYTES = 512 * 1024 * 1024
SDK_WORKER_CHOICES = ("auto", "loopback", "pool")

# FnApiRunner keeps every shuffle in the driver's memory. Measured peaks of the whole tree
# for extract → dedup_exact → dedup_minhash → tokenize (docs/BENCHMARKS.md, "FnApiRunner
# multi_processing at 1M"): direct 685 MB for 68 MB of JSONL (50k documents), direct-mp
# 9.8 GB for 1.36 GB (1M). A local run whose input times this factor passes the memory
# the machine has free is refused before it starts, not killed by the OOM killer an hour in.
LOCAL_PEAK_PER_INPUT_BYTE = {"direct": 10.0, "direct-mp": 8.0}


def available_memory_bytes() -> int:
    """MemAvailable of /proc/meminfo (0: unknown, no check)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def local_memory_refusal(engine: Optional[str], input_bytes: int, available: int) -> Optional[str]:
    """Why ``engine`` cannot run a job reading ``input_bytes`` on a machine with
    ``available`` bytes free (None: it can, or either size is unknown)."""
    factor = LOCAL_PEAK_PER_INPUT_BYTE.get(engine or "")
    if factor is None or input_bytes <= 0 or available <= 0:
        return None
    needed = int(input_bytes * factor)
    if needed <= available:
        return None
    gib = lambda n: f"{n / 2**30:.1f} GiB"  # noqa: E731
    return (f"--engine {engine} keeps every shuffle in memory: {gib(input_bytes)} of input needs about "
            f"{gib(needed)} ({factor:g}x, measured) and {gib(available)} is free. Run it with --engine spark "
            "(spills to disk; docs/RUNNING_AT_SCALE.md), on a sample of the input, or on a larger machine; "
            "--no-memory-check runs it anyway")


def sdk_workers_for(choice: str, engine: Optional[str], input_bytes: int, beam_args: Sequence[str] = ()) -> str:
    """``loopback`` or ``pool``: where a run's SDK workers go. An explicit choice stands;
    ``auto`` picks the pool only on Flink or Spark, for inputs of ``POOL_FROM_BYTES`` or
    more, and not when the user set ``--environment_type`` (theirs wins over ours)."""
    if choice not in SDK_WORKER_CHOICES:
        raise ValueError(f"sdk workers {choice!r}: one of {', '.join(SDK_WORKER_CHOICES)}")
    if choice != "auto":
        return choice
    if engine not in ("flink", "spark") or any(a.startswith("--environment_type") for a in beam_args):
        return "loopback"
    return "pool" if input_bytes >= POOL_FROM_BYTES else "loopback"


class EngineMissing(RuntimeError):
    """A part an engine needs (a JDK, a job server jar, the Prism binary) is not there."""


def cache_dir() -> Path:
    return Path(os.environ.get("TOKENFACTORY_ENGINES", ROOT / ".engines"))


@dataclass(frozen=True)
class Part:
    """A fetched part of an engine: a job server jar or a binary."""

    name: str
    file: str  # relative to the part's folder
    tools: tuple[str, ...]  # what fetching it needs

    def path(self, cache: Optional[Path] = None) -> Path:
        return (cache or cache_dir()) / self.name / self.file

    def require(self, cache: Optional[Path] = None) -> Path:
        path = self.path(cache)
        if not path.exists():
            raise EngineMissing(
                f"{self.name}: {path} is missing; run `make engines` (or `python -m pipelines.engines "
                f"fetch {self.name}`), which needs {' and '.join(self.tools)} on the PATH")
        return path


PARTS = {
    "flink": Part("flink", "job-server.jar", ("java (JDK 11+)", "mvn")),
    "spark": Part("spark", "job-server.jar", ("java (JDK 11+)", "mvn")),
    "prism": Part("prism", "prism", ("go (1.22+)",)),
}


# The (installed Beam SDK, job server's Beam) versions `make test` runs each part with
# (docs/RUNNING_AT_SCALE.md, "Versions"): Maven serves Beam's Flink and Spark runner modules
# here up to 2.62.0, with the 2.77.0 SDK; Prism is built from the SDK's own version. Any
# other pair is refused before a job starts, naming both, unless UNTESTED_ENV is set.
TESTED_VERSIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "flink": (("2.77.0", JAVA_FALLBACK),),
    "spark": (("2.77.0", JAVA_FALLBACK),),
    "prism": (("2.77.0", "2.77.0"),),
}
UNTESTED_ENV = "TOKENFACTORY_UNTESTED_ENGINES"
_SOURCE_VERSION = re.compile(r"beam-runners-[\w.-]+?:(\d+\.\d+\.\d+)|/sdks/v2/go/cmd/prism@v(\d+\.\d+\.\d+)")


def part_beam_version(part: str, cache: Optional[Path] = None) -> str:
    """The Beam version of a fetched part, from its ``SOURCE``; "" when it does not say."""
    source = PARTS[part].path(cache).parent / "SOURCE"
    try:
        match = _SOURCE_VERSION.search(source.read_text())
    except OSError:
        return ""
    return (match.group(1) or match.group(2)) if match else ""


def version_refusal(part: str, sdk: str, server: str) -> Optional[str]:
    """Why ``part`` at Beam ``server`` with the Beam ``sdk`` SDK is refused (None: tested)."""
    tested = TESTED_VERSIONS.get(part, ())
    if (sdk, server) in tested:
        return None
    pairs = "; ".join(f"SDK {a} with {part} {b}" for a, b in tested)
    return (f"{part}: the Beam {sdk} SDK with a {part} job server of Beam {server or 'unknown version (no SOURCE)'} "
            f"is not a combination the tests ran (tested: {pairs}); `python -m pipelines.engines fetch {part} "
            f"--force` fetches the tested one, or set {UNTESTED_ENV}=1 to run this one anyway")


@dataclass(frozen=True)
class Engine:
    name: str
    description: str
    part: Optional[str] = None  # the fetched part it needs

    def args(self, cache: Optional[Path] = None, worker_pool: str = "", input_bytes: int = 0) -> list[str]:
        """Beam options for this engine. ``worker_pool``: an SDK worker pool's address
        (``host:port``): workers run there (``EXTERNAL``) instead of in this process.
        ``input_bytes``: the job's input size (Spark's partitions follow it)."""
        path = str(PARTS[self.part].require(cache)) if self.part else ""
        if self.part and not os.environ.get(UNTESTED_ENV):
            refusal = version_refusal(self.part, BEAM_VERSION, part_beam_version(self.part, cache))
            if refusal:
                raise EngineMissing(refusal)
        environment = (["--environment_type=EXTERNAL", f"--environment_config={worker_pool}",
                        "--sdk_worker_parallelism=2"] if worker_pool
                       else ["--environment_type=LOOPBACK"])
        keep_environment = [] if worker_pool else [ENVIRONMENT_CACHE]  # Flink and Spark
        if self.name == "direct":
            return ["--runner=FnApiRunner"]
        if self.name == "direct-mp":
            return ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                    "--direct_num_workers=2"]
        if self.name == "flink":
            return ["--runner=FlinkRunner", "--flink_master=[local]", f"--flink_version={FLINK_VERSION}",
                    f"--flink_job_server_jar={path}", "--parallelism=2", JOB_SERVER_HEAP] + keep_environment + environment
        if self.name == "spark":
            partitions = spark_partitions(input_bytes)
            return ["--runner=SparkRunner", "--spark_master_url=local[2]",
                    f"--spark_job_server_jar={path}", JOB_SERVER_HEAP,
                    f"--job_server_jvm_properties=-Dspark.default.parallelism={partitions}",
                    *SPARK_TUNING] + keep_environment + environment
        if self.name == "spark-cluster":
            return spark_cluster_args(path, worker_pool, input_bytes)
        if self.name == "flink-cluster":
            return flink_cluster_args(path, worker_pool)
        # Beam's portable runner puts job_server_timeout (300 s) on the job-state stream
        # when the preparation id is the job id, as on Prism: every stage longer than
        # 5 minutes failed with DEADLINE_EXCEEDED (1M documents). The other calls it
        # bounds are instant on a local Prism.
        return ["--runner=PrismRunner", f"--prism_location={path}",
                f"--job_server_timeout={PRISM_STATE_TIMEOUT_S}"] + environment


ENGINES = {e.name: e for e in (
    Engine("direct", "Beam's FnApiRunner in this process (shuffles in memory)"),
    Engine("direct-mp", "FnApiRunner, multi_processing with 2 workers"),
    Engine("flink", f"Beam's Flink runner, embedded Flink {FLINK_VERSION}", "flink"),
    Engine("spark", "Beam's Spark runner, Spark local[2]", "spark"),
    Engine("spark-cluster", "Beam's Spark runner on the Spark standalone cluster of "
           "`python -m pipelines.engines cluster spark up`", "spark"),
    Engine("flink-cluster", "Beam's Flink runner on the Flink session cluster of "
           "`python -m pipelines.engines cluster flink up`", "flink"),
    Engine("prism", "Prism, Beam's Go runner", "prism"),
)}


def engine_args(name: str, worker_pool: str = "", cache: Optional[Path] = None, input_bytes: int = 0) -> list[str]:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: one of {', '.join(ENGINES)}")
    return ENGINES[name].args(cache, worker_pool, input_bytes)


# Beam's Spark job server makes a SparkContext per pipeline, and on a cluster a context is
# an application with executor JVMs of its own: a job of 10+ pipelines started executors
# and their SDK workers 10+ times. With this property (Beam's SparkContextFactory; named
# for its tests, read from the job server's JVM) every pipeline of the job runs in one
# context: the engine job went from 10.5 to 5.3 minutes on the 2-worker cluster
# (dedup_minhash 306 -> 138 s) with the same outputs (2026-12-07).
SPARK_REUSE_CONTEXT = "beam.spark.test.reuseSparkContext"


def spark_cluster_args(jar: str, worker_pool: str = "", input_bytes: int = 0) -> list[str]:
    """The Beam options of a job on the Spark cluster that is up (``clusters.engine_state``):
    the job server drives ``spark://127.0.0.1:PORT`` with the ``spark`` engine's tuning,
    its driver bound to 127.0.0.1 (the cluster's executors connect back to it), executors
    as large as a worker's memory, one Spark application for all the job's pipelines
    (``SPARK_REUSE_CONTEXT``), and SDK workers in ``worker_pool`` or, by default, the
    cluster's own pool, kept between task waves (the engine job 5.3 -> 1.5 minutes,
    the same outputs)."""
    state = _cluster_state("spark")
    pool = worker_pool or state["pool"]
    return ["--runner=SparkRunner", f"--spark_master_url={state['master_url']}", f"--spark_job_server_jar={jar}",
            JOB_SERVER_HEAP, f"--job_server_jvm_properties=-Dspark.default.parallelism={spark_partitions(input_bytes)}",
            *SPARK_TUNING,
            f"--job_server_jvm_properties=-Dspark.driver.host={clusters.LOCALHOST}",
            f"--job_server_jvm_properties=-Dspark.driver.bindAddress={clusters.LOCALHOST}",
            f"--job_server_jvm_properties=-Dspark.executor.memory={state['spec']['memory']}",
            f"--job_server_jvm_properties=-D{SPARK_REUSE_CONTEXT}=true",
            "--environment_type=EXTERNAL", f"--environment_config={pool}", "--sdk_worker_parallelism=2",
            # the job's SDK workers kept between task waves (as LOOPBACK's on `spark`): without
            # it every wave of every pipeline asked the pool for new ones
            ENVIRONMENT_CACHE]


def _cluster_state(kind: str) -> dict[str, Any]:
    try:
        return clusters.engine_state(kind)
    except clusters.ClusterError as exc:
        raise EngineMissing(str(exc)) from exc


SHIP_NOTHING = "tokenfactory.flink.ClusterClasspath"  # pipelines/java/ClusterClasspath.java

# Every shuffle of a Flink batch job written out whole before its consumers read it (Beam's
# Flink runner defaults to PIPELINED: producers and consumers run at once, streaming to
# each other). With blocking shuffles a failed task reruns alone from its inputs on the
# slots left: a TaskManager SIGKILLed in dedup_exact, the job restarted the lost tasks on
# the other one and ended with the outputs of an uninterrupted run; PIPELINED needed all
# four slots again and failed after 5 minutes of waiting (2026-12-07). The engine job took
# the same time either way (97 s).
FLINK_BLOCKING_SHUFFLES = "--execution_mode_for_batch=BATCH_FORCED"


def flink_cluster_job_server(folder: Path, cache: Optional[Path] = None, javac: str = "javac") -> Path:
    """The Flink cluster's job server: a launcher jar of the Flink part and of
    ``ClusterClasspath`` (compiled here), with which a job ships no jars to the cluster.

    Beam's job server uploads its whole classpath with every pipeline it submits to a
    remote Flink (~150 MB; 13 of the 24 s of each near-dedup pipeline on the cluster, and
    150 MB more in the blob store of the JobManager and of each TaskManager). The
    cluster's TaskManagers have that classpath already and load from it first
    (``clusters.flink_conf``), so ``SHIP_NOTHING`` tells the job server to send none."""
    part = PARTS["flink"].require(cache)
    build = folder / "job-server"
    classes = build / "classes"
    source = ROOT / "pipelines" / "java" / "ClusterClasspath.java"
    done = subprocess.run([_need(javac, "flink"), "-d", str(classes), "-cp", str(part), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EngineMissing(f"flink-cluster: javac could not build {source}: {_last_error(done)}")
    import zipfile

    ours = build / "cluster-classpath.jar"
    with zipfile.ZipFile(ours, "w") as archive:
        for path in sorted(classes.rglob("*.class")):
            archive.write(path, path.relative_to(classes).as_posix())
    launcher = build / "job-server.jar"
    write_launcher_jar(launcher, JAVA_SERVERS["flink"].main_class, entries=[part.resolve().as_uri(), ours.name])
    return launcher


def flink_cluster_args(jar: str, worker_pool: str = "") -> list[str]:
    """The Beam options of a job on the Flink session cluster that is up: the job server
    submits to the JobManager's REST address, the job's parallelism is the cluster's task
    slots (every TaskManager gets a share of each stage), and SDK workers are in
    ``worker_pool`` or, by default, the cluster's own pool, kept between tasks."""
    state = _cluster_state("flink")
    spec = state["spec"]
    # the cluster's job server (flink_cluster_job_server): ships no jars with each job
    jar = state.get("job_server") or jar
    return ["--runner=FlinkRunner", f"--flink_master={state['master_url']}", f"--flink_version={FLINK_VERSION}",
            f"--flink_job_server_jar={jar}", f"--pipeline_resources_detector_factory_class={SHIP_NOTHING}",
            f"--parallelism={spec['taskmanagers'] * spec['slots']}", FLINK_BLOCKING_SHUFFLES,
            JOB_SERVER_HEAP, "--environment_type=EXTERNAL",
            f"--environment_config={worker_pool or state['pool']}", "--sdk_worker_parallelism=2",
            ENVIRONMENT_CACHE]


def spark_classpath(cache: Optional[Path] = None) -> tuple[Path, list[str]]:
    """(the Spark part's folder, the cluster daemons' classpath): its launcher jar, whose
    manifest lists ``lib/`` (spark-core with Spark's Master and Worker), and slf4j-simple
    where the Flink part has it (Spark's daemons log through slf4j; without a binding they
    log nothing)."""
    jar = PARTS["spark"].require(cache)
    if not (jar.parent / "lib").is_dir():
        raise EngineMissing(f"spark: {jar.parent / 'lib'} is missing (Beam's shaded job server jar has no "
                            "classpath of Spark's daemons to share); the cluster needs the runner's modules "
                            "(`python -m pipelines.engines fetch spark --force` where Maven cannot resolve the "
                            "shaded jar fetches them)")
    classpath = [str(jar)]
    simple = (cache or cache_dir()) / "flink" / "lib" / f"slf4j-simple-{SLF4J_VERSION}.jar"
    if simple.exists():
        classpath.append(str(simple))
    return jar.parent, classpath


# --- fetching the parts --------------------------------------------------------------

@dataclass(frozen=True)
class JavaServer:
    """Where a job server comes from: Beam's shaded jar, or the runner's modules."""

    shaded: str  # group:artifact of Beam's job server jar (version = the installed Beam's)
    modules: tuple[str, ...]  # group:artifact:version of the fallback's dependencies
    main_class: str


JAVA_SERVERS = {
    "flink": JavaServer(
        f"org.apache.beam:beam-runners-flink-{FLINK_VERSION}-job-server",
        (f"org.apache.beam:beam-runners-flink-{FLINK_VERSION}:{JAVA_FALLBACK}",
         f"org.slf4j:slf4j-simple:{SLF4J_VERSION}"),
        "org.apache.beam.runners.flink.FlinkJobServerDriver"),
    "spark": JavaServer(
        "org.apache.beam:beam-runners-spark-3-job-server",
        (f"org.apache.beam:beam-runners-spark-3:{JAVA_FALLBACK}",
         f"org.apache.spark:spark-core_{SCALA_VERSION}:{SPARK_VERSION}",
         f"org.apache.spark:spark-streaming_{SCALA_VERSION}:{SPARK_VERSION}"),
        "org.apache.beam.runners.spark.SparkJobServerDriver"),
}


def _run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    _LOGGER.info("running %s", " ".join(cmd))
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)


def _need(tool: str, part: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise EngineMissing(f"{part}: `{tool}` is not on the PATH; install it "
                            f"({', '.join(PARTS[part].tools)}) and run `make engines` again")
    return path


def _pom(modules: Sequence[str]) -> str:
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in (m.split(":") for m in modules))
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>tokenfactory</groupId><artifactId>job-server</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>\n")


def _manifest_line(line: str) -> bytes:
    """One manifest attribute, wrapped at 72 bytes as the jar specification requires."""
    data, out = line.encode(), []
    out.append(data[:72])
    data = data[72:]
    while data:
        out.append(b" " + data[:71])
        data = data[71:]
    return b"\r\n".join(out) + b"\r\n"


def write_launcher_jar(jar: Path, main_class: str, libdir: str = "lib", entries: Optional[list[str]] = None) -> None:
    """A jar holding only a manifest: ``Main-Class`` and a ``Class-Path`` of every jar in
    ``<jar's folder>/<libdir>`` (paths relative to the jar), or of ``entries`` (URLs,
    relative to the jar or absolute), so ``java -jar`` runs it."""
    import zipfile

    if entries is None:
        entries = [f"{libdir}/{p.name}" for p in sorted((jar.parent / libdir).glob("*.jar"))]
    manifest = (_manifest_line("Manifest-Version: 1.0") + _manifest_line(f"Main-Class: {main_class}")
                + _manifest_line("Class-Path: " + " ".join(entries)) + b"\r\n")
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", manifest)


def _fetch_java(part: str, target: Path) -> str:
    mvn = _need("mvn", part)
    _need("java", part)
    server = JAVA_SERVERS[part]
    shaded = f"{server.shaded}:{BEAM_VERSION}"
    done = _run([mvn, "-B", "-q", "dependency:copy", f"-Dartifact={shaded}",
                 f"-DoutputDirectory={target}", "-Dmdep.stripVersion=true"])
    copied = target / f"{server.shaded.split(':')[1]}.jar"
    if done.returncode == 0 and copied.exists():
        copied.rename(target / "job-server.jar")
        return f"{shaded} (Beam's job server jar, Maven Central)"
    _LOGGER.info("%s: Beam's prebuilt job server jar %s is not served here (Maven: %s). That is "
                 "expected; assembling the same job server from the runner's modules %s instead",
                 part, shaded, _last_error(done), ", ".join(server.modules))
    (target / "pom.xml").write_text(_pom(server.modules))
    done = _run([mvn, "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime",
                 "-DoutputDirectory=lib"], cwd=target)
    if done.returncode != 0:
        raise EngineMissing(f"{part}: Maven could not resolve {', '.join(server.modules)}: "
                            f"{_last_error(done)}")
    write_launcher_jar(target / "job-server.jar", server.main_class)
    return f"{server.main_class} from {', '.join(server.modules)} (launcher jar over lib/)"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _last_error(done: subprocess.CompletedProcess) -> str:
    """Maven's first error line, plain: no terminal colours, no ``[ERROR]`` tag."""
    text = _ANSI.sub("", done.stdout + done.stderr)
    lines = [l for l in text.splitlines() if "ERROR" in l] or text.splitlines() or ["no output"]
    return re.sub(r"^\s*\[ERROR\]\s*", "", lines[0]).strip()[:400]


def _fetch_prism(target: Path) -> str:
    go = _need("go", "prism")
    module = f"{PRISM_MODULE}@v{BEAM_VERSION}"
    env = dict(os.environ, GOBIN=str(target), CGO_ENABLED="0")
    done = _run([go, "install", module], env=env)
    if done.returncode != 0 or not (target / "prism").exists():
        raise EngineMissing(f"prism: `go install {module}` failed: {_last_error(done)}")
    return f"{module} (built with {subprocess.run([go, 'version'], capture_output=True, text=True).stdout.strip()})"


def fetch(part: str, cache: Optional[Path] = None, force: bool = False) -> Path:
    """Fetches (or builds) ``part`` into the cache, atomically; returns its path."""
    spec = PARTS[part]
    final = spec.path(cache)
    if final.exists() and not force:
        return final
    folder = final.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{part}-", dir=folder.parent))
    try:
        source = _fetch_prism(staging) if part == "prism" else _fetch_java(part, staging)
        (staging / "SOURCE").write_text(source + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    _LOGGER.info("%s: %s", part, source)
    return final


# --- running: an SDK worker pool (one job server per job: pipelines.job_servers) -------

class WorkerPool:
    """An SDK worker pool on 127.0.0.1 (``python -m pipelines.worker_pool``: Beam's
    ``worker_pool_main`` that also restarts a worker dying while wanted), the layout of a
    Flink task manager with a worker-pool sidecar: the runner asks it for SDK workers, and
    it starts each as a process of its own. Pass ``address`` to
    ``engine_args(..., worker_pool=)`` (``--environment_type=EXTERNAL``)."""

    def __init__(self, log: Optional[Path] = None) -> None:
        self.process: Optional[subprocess.Popen] = None
        self.address = ""
        self.log = log  # the pool's own log (restarts are logged there); None: discarded

    def __enter__(self) -> "WorkerPool":
        import socket

        from apache_beam.utils import subprocess_server

        port, = subprocess_server.pick_port(None)
        if self.log:
            self.log.parent.mkdir(parents=True, exist_ok=True)  # the run's logs/ folder, made at first use
        log = open(self.log, "ab") if self.log else subprocess.DEVNULL
        # the pool starts its workers with this interpreter (pipelines.worker_pool.worker_path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.worker_pool", f"--service_port={port}"],
            cwd=ROOT, start_new_session=True,
            stdout=log, stderr=subprocess.STDOUT)
        self.address = f"localhost:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SDK worker pool exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return self
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("SDK worker pool did not open its port within 60 s")

    def workers(self) -> list[int]:
        """Process ids of the SDK workers the pool is running now."""
        return child_pids(self.process.pid) if self.process is not None else []

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipelines.engines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="fetch or build engine parts into the cache")
    get.add_argument("parts", nargs="*", default=list(PARTS), help=f"of {', '.join(PARTS)} (default: all)")
    get.add_argument("--force", action="store_true", help="fetch again even if present")
    show = sub.add_parser("args", help="print the Beam options of an engine")
    show.add_argument("engine", type=choice_of("engine", ENGINES), metavar="{" + ",".join(ENGINES) + "}")
    show.add_argument("--worker-pool", default="", help="host:port of an SDK worker pool (EXTERNAL)")
    sub.add_parser("status", help="which parts are in the cache and where they came from")
    cluster = sub.add_parser("cluster", help="a Spark standalone or Flink session cluster on this machine "
                                             "(pipelines/clusters.py)")
    cluster.add_argument("kind", choices=clusters.CLUSTER_KINDS)
    cluster.add_argument("action", choices=("up", "down", "status"))
    spec = clusters.SparkClusterSpec()
    cluster.add_argument("--workers", type=int, default=spec.workers, help=f"spark: worker JVMs (default {spec.workers})")
    cluster.add_argument("--cores", type=int, default=spec.cores,
                         help=f"spark: task slots per worker (default {spec.cores})")
    cluster.add_argument("--memory", default=spec.memory,
                         help=f"spark: per worker, for its executors (default {spec.memory})")
    fspec = clusters.FlinkClusterSpec()
    cluster.add_argument("--taskmanagers", type=int, default=fspec.taskmanagers,
                         help=f"flink: TaskManager JVMs (default {fspec.taskmanagers})")
    cluster.add_argument("--slots", type=int, default=fspec.slots,
                         help=f"flink: task slots per TaskManager (default {fspec.slots})")
    cluster.add_argument("--taskmanager-memory", default=fspec.taskmanager_memory,
                         help=f"flink: each TaskManager's process size (default {fspec.taskmanager_memory})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "fetch":
            for part in args.parts:
                if part not in PARTS:
                    parser.error(f"unknown part {part!r}{did_you_mean(part, PARTS)}: one of {', '.join(PARTS)}")
                path = fetch(part, force=args.force)
                sys.stdout.write(f"{part}: {path} ({(path.parent / 'SOURCE').read_text().strip()})\n")
        elif args.command == "args":
            sys.stdout.write(" ".join(engine_args(args.engine, args.worker_pool)) + "\n")
        elif args.command == "cluster":
            return _cluster(args)
        else:
            for name, part in PARTS.items():
                path = part.path()
                source = path.parent / "SOURCE"
                state = source.read_text().strip() if path.exists() and source.exists() else "missing"
                if state != "missing":
                    refusal = version_refusal(name, BEAM_VERSION, part_beam_version(name))
                    state += "; untested with this SDK" if refusal else f"; tested with the Beam {BEAM_VERSION} SDK"
                sys.stdout.write(f"{name:6} {path}  {state}\n")
    except (EngineMissing, clusters.ClusterError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


def _cluster(args: Any) -> int:
    import json

    folder = clusters.cluster_dir(args.kind)
    if args.action == "up" and args.kind == "flink":
        spec = clusters.FlinkClusterSpec(args.taskmanagers, args.slots, args.taskmanager_memory)
        clusters.refuse_second("flink", folder)  # before building into its folder
        job_server = flink_cluster_job_server(folder)
        state = clusters.flink_up(folder, [str(PARTS["flink"].require())], spec, job_server=job_server)
        sys.stdout.write(f"flink cluster up: JobManager {state['rest']}, {spec.taskmanagers} TaskManagers of "
                         f"{spec.slots} slots, SDK worker pool {state['pool']}; logs in {folder / 'logs'}\n"
                         f"run a job on it: python -m pipelines.run --config CONFIG --engine flink-cluster\n")
    elif args.action == "up":
        part, classpath = spark_classpath()
        state = clusters.spark_up(folder, part, classpath,
                                  clusters.SparkClusterSpec(args.workers, args.cores, args.memory))
        sys.stdout.write(f"spark cluster up: master {state['master_url']} (web UI {state['master_ui']}), "
                         f"{args.workers} workers, SDK worker pool {state['pool']}; logs in {folder / 'logs'}\n"
                         f"run a job on it: python -m pipelines.run --config CONFIG --engine spark-cluster\n")
    elif args.action == "down":
        stopped = clusters.down(folder)
        sys.stdout.write(f"stopped: {', '.join(stopped)}\n" if stopped else f"no cluster was up in {folder}\n")
    else:
        sys.stdout.write(json.dumps(clusters.status(folder), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
