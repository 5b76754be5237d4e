"""Engine clusters on this machine, as separate processes talking over 127.0.0.1 (issue 40).

``python -m pipelines.engines cluster spark up|down|status`` starts, stops and shows a
Spark standalone cluster: a master and ``workers`` workers (each a JVM of its own, with its
cores and memory for executors), whose executors are JVMs the workers start, and an SDK
worker pool (``pipelines.worker_pool``) beside them. ``--engine spark-cluster`` runs a job
on it: the Beam Spark job server (one per job, ``pipelines.job_servers``) is the Spark
driver, submitting to ``spark://127.0.0.1:PORT``; the executors ask the pool for SDK
workers (``--environment_type=EXTERNAL``). On a real cluster each node runs its own pool
beside its worker at the same ``localhost`` address; here every "node" is 127.0.0.1, so
one pool serves the executors of both workers.

Everything of a cluster is under one folder (``cluster_dir``: ``.clusters/<kind>`` or
``$TOKENFACTORY_CLUSTERS/<kind>``): ``state.json`` (addresses, process ids, sizes), the
daemons' logs in ``logs/``, each worker's ``work/`` (its executors' stdout and stderr per
application). Every process starts in a session of its own, so ``down`` stops a worker
with the executors it started, and the cluster outlives the command that started it.

The JVMs run from the Spark job server's fetched classpath (``make engines``:
spark-core 3.5.6 and Beam's Spark runner, ``.engines/spark``), which holds Spark's
``deploy.master.Master`` and ``deploy.worker.Worker``. A worker builds its executors'
command from ``SPARK_HOME/jars``: ``spark_home`` makes one in the cluster folder whose
``jars/`` links to that classpath (Beam's runner included, so executors can run its
functions), and ``SPARK_SCALA_VERSION`` saves Spark's launcher from looking for a source
build. Logs go through slf4j-simple (fetched with the Flink part; without it the daemons
log nothing).

``cluster flink up|down|status`` does the same for a Flink session cluster: a JobManager
(``StandaloneSessionClusterEntrypoint``, REST on 127.0.0.1) and ``taskmanagers``
TaskManagers (``TaskManagerRunner``, ``slots`` task slots each), JVMs from the Flink job
server's fetched classpath (flink-runtime 1.19 and Beam's Flink runner, so a TaskManager
can run the runner's operators), configured by a ``conf/flink-conf.yaml`` written into the
cluster folder. Each JVM's memory flags and its resource options are what Flink's own
start scripts give it: Flink's ``BashJavaUtils`` derives them from that file (a
TaskManager started without them refuses: ``taskmanager.cpu.cores`` is not set).
``--engine flink-cluster`` runs a job on it: the Beam Flink job server submits to the
JobManager's REST address; the TaskManagers ask the cluster's pool for SDK workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
SCALA_VERSION = "2.12"  # pipelines.engines.SCALA_VERSION (a test holds them equal)
CLUSTER_KINDS = ("spark", "flink")
# the process a cluster cannot run without, and the prefix of its workers' names
HEADS = {"spark": "master", "flink": "jobmanager"}
WORKERS = {"spark": "worker-", "flink": "taskmanager-"}
LOCALHOST = "127.0.0.1"
STATE = "state.json"
# What Flink's start scripts give every JVM on Java 17 (Flink 1.19's default
# env.java.opts.all): without --add-opens java.lang, a failing task's error could not be
# enriched (Field.setAccessible in ExceptionUtils.updateDetailMessage) and the cleanup
# that followed ended the TaskManager ("FATAL - exception in resource cleanup of task")
FLINK_JAVA_OPTS = tuple(
    [f"--add-exports={m}=ALL-UNNAMED" for m in (
        "java.base/sun.net.util", "java.rmi/sun.rmi.registry", "jdk.compiler/com.sun.tools.javac.api",
        "jdk.compiler/com.sun.tools.javac.file", "jdk.compiler/com.sun.tools.javac.parser",
        "jdk.compiler/com.sun.tools.javac.tree", "jdk.compiler/com.sun.tools.javac.util",
        "java.security.jgss/sun.security.krb5")]
    + [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.text", "java.time",
        "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.util.concurrent.locks")])
# the daemons' log lines with their time (slf4j-simple prints none by default)
LOG_TIMES = ("-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS")


class ClusterError(RuntimeError):
    """A cluster that cannot start, or that a command needs and is not up."""


@dataclass(frozen=True)
class SparkClusterSpec:
    """The size of a Spark standalone cluster on this machine."""

    workers: int = 2
    cores: int = 1  # task slots of each worker
    memory: str = "1g"  # what each worker gives its executors (an executor's heap: spark.executor.memory)
    daemon_heap: str = "256m"  # the master's and each worker's own JVM heap

    def __post_init__(self) -> None:
        if self.workers < 1 or self.cores < 1:
            raise ValueError(f"workers and cores must be >= 1, got {self.workers} and {self.cores}")
        _size("memory", self.memory)
        _size("daemon_heap", self.daemon_heap)


def _size(name: str, value: str) -> None:
    if not (value[:-1].isdigit() and int(value[:-1]) > 0 and value[-1] in "mg"):
        raise ValueError(f"{name} must be a size like 512m or 1g, got {value!r}")


@dataclass(frozen=True)
class FlinkClusterSpec:
    """The size of a Flink session cluster on this machine. The memories are Flink's
    ``*.memory.process.size``: everything the JVM may use (heap, managed memory for
    sorts, network buffers for shuffles, metaspace), split by Flink's own rules."""

    taskmanagers: int = 2
    slots: int = 2  # task slots of each TaskManager
    taskmanager_memory: str = "2g"
    jobmanager_memory: str = "768m"
    network_memory: str = "256m"  # of each TaskManager's, for shuffle buffers (flink_conf)
    managed_fraction: float = 0.25  # of the rest, for sorts (GroupReduce); the task heap gets what is left
    off_heap_memory: str = "384m"  # direct memory for tasks: Beam's gRPC data plane to the SDK workers
    restart_attempts: int = 10  # restarts of failed tasks per job (a lost TaskManager: one per task it ran)

    def __post_init__(self) -> None:
        if self.restart_attempts < 0:
            raise ValueError(f"restart_attempts must be >= 0, got {self.restart_attempts}")
        if self.taskmanagers < 1 or self.slots < 1:
            raise ValueError(f"taskmanagers and slots must be >= 1, got {self.taskmanagers} and {self.slots}")
        _size("taskmanager_memory", self.taskmanager_memory)
        _size("jobmanager_memory", self.jobmanager_memory)
        _size("network_memory", self.network_memory)
        _size("off_heap_memory", self.off_heap_memory)
        if not 0 < self.managed_fraction < 1:
            raise ValueError(f"managed_fraction must be between 0 and 1, got {self.managed_fraction}")


def cluster_dir(kind: str) -> Path:
    if kind not in CLUSTER_KINDS:
        raise ValueError(f"unknown cluster {kind!r}: one of {', '.join(CLUSTER_KINDS)}")
    return Path(os.environ.get("TOKENFACTORY_CLUSTERS", ROOT / ".clusters")) / kind


def read_state(folder: Path) -> Optional[dict[str, Any]]:
    try:
        state = json.loads((folder / STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{folder / STATE}: unreadable ({exc}); `cluster ... down` removes it") from exc
    if not isinstance(state, dict) or not isinstance(state.get("processes"), dict):
        raise ClusterError(f"{folder / STATE}: not a cluster state; `cluster ... down` removes it")
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is not alive
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def _wait(what: str, ready: Any, watched: dict[Path, subprocess.Popen], timeout: float = 90.0) -> None:
    """Until ``ready()``; a ``ClusterError`` naming the log of a ``watched`` process that
    exits meanwhile, or all their logs after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log, process in watched.items():
            if process.poll() is not None:
                raise ClusterError(f"{what}: a process exited with {process.returncode}; its log: {log}")
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        time.sleep(0.3)
    raise ClusterError(f"{what}: not ready within {timeout:.0f} s; logs: {', '.join(map(str, watched))}")


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOCALHOST, port), 1):
        return True
    return False


def master_json(ui_port: int) -> dict[str, Any]:
    """The master's own view (its web UI's /json): workers, applications."""
    with urllib.request.urlopen(f"http://{LOCALHOST}:{ui_port}/json/", timeout=5) as response:
        return json.loads(response.read().decode("utf-8"))


def spark_home(folder: Path, part: Path) -> Path:
    """A SPARK_HOME for the workers' executor commands: ``jars/`` linking the part's jars."""
    home = folder / "spark-home"
    jars = home / "jars"
    jars.mkdir(parents=True, exist_ok=True)
    for jar in sorted((part / "lib").glob("*.jar")):
        link = jars / jar.name
        if not link.exists():
            link.symlink_to(jar)
    return home


def _spawn(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=log.parent, start_new_session=True)


def spark_up(folder: Path, part: Path, classpath: list[str], spec: SparkClusterSpec = SparkClusterSpec(),
             java: str = "java") -> dict[str, Any]:
    """Starts the cluster (module docstring) from the Spark part's folder ``part`` (its
    ``lib/``) and the daemons' ``classpath``, and writes its state; a ``ClusterError`` when
    one is already up in ``folder`` or a process does not start (what started is stopped)."""
    refuse_second("spark", folder)
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    env = {**os.environ, "SPARK_LOCAL_IP": LOCALHOST, "SPARK_SCALA_VERSION": SCALA_VERSION,
           "SPARK_HOME": str(spark_home(folder, part))}
    master_port, ui_port = _free_port(), _free_port()
    processes: dict[str, int] = {}
    started: list[subprocess.Popen] = []
    state = {"kind": "spark", "master_url": f"spark://{LOCALHOST}:{master_port}",
             "master_ui": f"http://{LOCALHOST}:{ui_port}", "spec": asdict(spec), "processes": processes,
             "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "pool": ""}
    try:
        base = [java, f"-Xmx{spec.daemon_heap}", *LOG_TIMES, "-cp", os.pathsep.join(classpath)]
        master = _spawn(base + ["org.apache.spark.deploy.master.Master", "--host", LOCALHOST,
                                "--port", str(master_port), "--webui-port", str(ui_port)], logs / "master.log", env)
        started.append(master)
        processes["master"] = master.pid
        _wait("the Spark master", lambda: _port_open(ui_port) and _port_open(master_port),
              {logs / "master.log": master})
        watched = {logs / "master.log": master}
        for i in range(1, spec.workers + 1):
            work = folder / f"worker-{i}" / "work"
            work.mkdir(parents=True, exist_ok=True)
            worker = _spawn(base + ["org.apache.spark.deploy.worker.Worker", "--host", LOCALHOST,
                                    "--cores", str(spec.cores), "--memory", spec.memory,
                                    "--webui-port", str(_free_port()), "--work-dir", str(work),
                                    state["master_url"]], logs / f"worker-{i}.log", env)
            started.append(worker)
            processes[f"worker-{i}"] = worker.pid
            watched[logs / f"worker-{i}.log"] = worker
        _wait(f"{spec.workers} Spark workers registering with the master",
              lambda: master_json(ui_port).get("aliveworkers", 0) >= spec.workers, watched)
        state["pool"] = _start_pool(logs, started, processes)
    except BaseException:
        _stop_started(started)
        raise
    (folder / STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    return state


def _start_pool(logs: Path, started: list[subprocess.Popen], processes: dict[str, int]) -> str:
    """Starts the cluster's SDK worker pool; its address for ``--environment_config``."""
    pool_port = _free_port()
    pool = _spawn([sys.executable, "-m", "pipelines.worker_pool", f"--service_port={pool_port}"],
                  logs / "sdk-worker-pool.log", {**os.environ, "PYTHONPATH": str(ROOT)})
    started.append(pool)
    processes["sdk-worker-pool"] = pool.pid
    _wait("the SDK worker pool", lambda: _port_open(pool_port), {logs / "sdk-worker-pool.log": pool})
    return f"localhost:{pool_port}"


def _stop_started(started: list[subprocess.Popen]) -> None:
    for process in reversed(started):
        _stop(process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def refuse_second(kind: str, folder: Path) -> None:
    state = read_state(folder)
    if state and any(_alive(pid) for pid in state["processes"].values()):
        raise ClusterError(f"a {kind} cluster is already up in {folder} ({state['master_url']}); "
                           f"`python -m pipelines.engines cluster {kind} down` first")


def flink_conf(folder: Path, spec: FlinkClusterSpec, rpc_port: int, rest_port: int) -> Path:
    """Writes the cluster's ``conf/flink-conf.yaml``: every address 127.0.0.1, fixed ports
    for the JobManager, the sizes of ``spec``, scratch space inside ``folder``."""
    conf = folder / "conf"
    tmp = folder / "tmp"
    conf.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    options = {
        "jobmanager.rpc.address": LOCALHOST, "jobmanager.rpc.port": rpc_port, "jobmanager.bind-host": LOCALHOST,
        "rest.address": LOCALHOST, "rest.bind-address": LOCALHOST, "rest.port": rest_port,
        "taskmanager.host": LOCALHOST, "taskmanager.bind-host": LOCALHOST,
        "taskmanager.numberOfTaskSlots": spec.slots,
        "taskmanager.memory.process.size": spec.taskmanager_memory,
        "jobmanager.memory.process.size": spec.jobmanager_memory,
        # network buffers for shuffles: Beam's batch jobs run one task per operator chain
        # and slot, each wanting its own buffers (Flink's default, a tenth of 1.5 GB, failed
        # the engine job's extract: "Insufficient number of network buffers: required 512,
        # but only 381 available"; 256m per TaskManager ran it)
        "taskmanager.memory.network.min": spec.network_memory,
        "taskmanager.memory.network.max": spec.network_memory,
        # the task heap holds what Beam's runner receives from the SDK workers (gRPC
        # buffers): with Flink's split of 1.5 GB (managed 40%, network 320m) each slot had
        # 38 MB of heap, and near-dedup of 200k documents threw OutOfMemoryError in a gRPC
        # thread; the task then waited for ever (below). 2 GB with a quarter managed: ~680 MB
        "taskmanager.memory.managed.fraction": spec.managed_fraction,
        # Beam's gRPC channels to the SDK workers (netty) buffer in direct memory, which
        # Flink caps at its framework and task off-heap sizes plus the network's; with no
        # task off-heap, near-dedup of 200k documents failed "OutOfMemoryError: Direct
        # buffer memory" (once the JVM flags above let the error through)
        "taskmanager.memory.task.off-heap.size": spec.off_heap_memory,
        # an error no task catches (OutOfMemoryError in a gRPC thread) ends the TaskManager,
        # whose loss the JobManager then handles (restart, or a failed job naming it);
        # Flink's default only logs it, and the task waiting for that thread hung the job
        "cluster.uncaught-exception-handling": "FAIL",
        # classes from the TaskManager's own classpath first, the job's jars after: Beam's
        # Flink runner keeps a job's SDK workers between tasks only when its class is
        # Flink's own loader's (FlinkExecutableStageContextFactory); from the job's
        # loader (child-first, Flink's default), every task started and closed its own
        # (173 SDK workers for the engine job, 7.5 minutes). Beam's classes alone
        # parent-first split Beam from its dependencies (joda-time: ClassCastException)
        "classloader.resolve-order": "parent-first",
        # a task that fails (a TaskManager lost) runs again, with what it reads, on the
        # slots left; Flink's default without checkpoints fails the job at once. Failures
        # within one backoff count as one attempt (Flink 1.19's exponential delay): a lost
        # TaskManager fails every task that ran on it or reads from it, which used up 10
        # fixed-delay attempts within a second
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": "1 s",
        "restart-strategy.exponential-delay.max-backoff": "10 s",
        "restart-strategy.exponential-delay.attempts-before-reset-backoff": spec.restart_attempts,
        # a job's tasks spread over the TaskManagers, not packed into the first one's slots
        "cluster.evenly-spread-out-slots": "true",
        "io.tmp.dirs": str(tmp), "web.tmpdir": str(tmp), "blob.storage.directory": str(tmp),
        # every job ships the job server's classpath (Beam detects it: ~150 MB) to the blob
        # server and each TaskManager: their caches of finished jobs go after a minute, not an hour
        "blob.service.cleanup.interval": 60,
    }
    path = conf / "flink-conf.yaml"
    path.write_text("".join(f"{key}: {value}\n" for key, value in options.items()), encoding="utf-8")
    return path


def flink_jvm_params(java: str, classpath: list[str], conf: Path, role: str) -> tuple[list[str], list[str]]:
    """(JVM flags, ``-D`` options) for a JobManager or TaskManager (``role``: ``JM`` or
    ``TM``) from Flink's ``BashJavaUtils``, as Flink's start scripts get them."""
    done = subprocess.run([java, "-cp", os.pathsep.join(classpath), "org.apache.flink.runtime.util.bash.BashJavaUtils",
                           f"GET_{role}_RESOURCE_PARAMS", "--configDir", str(conf)],
                          capture_output=True, text=True, timeout=120)
    marker = "BASH_JAVA_UTILS_EXEC_RESULT:"
    lines = [line[len(marker):] for line in done.stdout.splitlines() if line.startswith(marker)]
    if done.returncode != 0 or len(lines) != 2:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise ClusterError(f"Flink's memory settings for the {role} from {conf / 'flink-conf.yaml'}: "
                           f"BashJavaUtils exited {done.returncode}: {' | '.join(tail)}")
    return lines[0].split(), lines[1].split()


def flink_overview(rest_port: int) -> dict[str, Any]:
    """The JobManager's own view (REST /overview): TaskManagers, slots, jobs."""
    with urllib.request.urlopen(f"http://{LOCALHOST}:{rest_port}/overview", timeout=5) as response:
        return json.loads(response.read().decode("utf-8"))


def flink_up(folder: Path, classpath: list[str], spec: FlinkClusterSpec = FlinkClusterSpec(),
             java: str = "java", job_server: Optional[Path] = None) -> dict[str, Any]:
    """Starts the Flink session cluster (module docstring) from the Flink part's
    ``classpath`` and writes its state (with ``job_server``, the jar jobs on it use);
    a ``ClusterError`` when one is already up in ``folder`` or a process does not start
    (what started is stopped)."""
    refuse_second("flink", folder)
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    rpc_port, rest_port = _free_port(), _free_port()
    conf = flink_conf(folder, spec, rpc_port, rest_port).parent
    env = dict(os.environ)
    processes: dict[str, int] = {}
    started: list[subprocess.Popen] = []
    state = {"kind": "flink", "master_url": f"{LOCALHOST}:{rest_port}", "rest": f"http://{LOCALHOST}:{rest_port}",
             "spec": asdict(spec), "processes": processes, "pool": "", "job_server": str(job_server or ""),
             "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        cp = [*FLINK_JAVA_OPTS, *LOG_TIMES, "-cp", os.pathsep.join(classpath)]
        jvm, dyn = flink_jvm_params(java, classpath, conf, "JM")
        manager = _spawn([java, *jvm, *cp, "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint",
                          "--configDir", str(conf), *dyn], logs / "jobmanager.log", env)
        started.append(manager)
        processes["jobmanager"] = manager.pid
        watched = {logs / "jobmanager.log": manager}
        _wait("the Flink JobManager", lambda: "flink-version" in flink_overview(rest_port), watched)
        jvm, dyn = flink_jvm_params(java, classpath, conf, "TM")
        for i in range(1, spec.taskmanagers + 1):
            name = f"taskmanager-{i}"
            tm = _spawn([java, *jvm, *cp, "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
                         "--configDir", str(conf), *dyn, "-D", f"taskmanager.resource-id={name}"],
                        logs / f"{name}.log", env)
            started.append(tm)
            processes[name] = tm.pid
            watched[logs / f"{name}.log"] = tm
        _wait(f"{spec.taskmanagers} Flink TaskManagers registering with the JobManager",
              lambda: flink_overview(rest_port).get("taskmanagers", 0) >= spec.taskmanagers, watched)
        state["pool"] = _start_pool(logs, started, processes)
    except BaseException:
        _stop_started(started)
        raise
    (folder / STATE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    return state


def _stop(pid: int, grace: float = 15.0) -> bool:
    """SIGTERM to ``pid``'s process group (a worker and its executors), SIGKILL after
    ``grace`` seconds; whether anything was running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaps it when this process started it
        if not _alive(pid) and not _group_alive(pid):
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (a worker and the executors it started)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().split(")")[-1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(stat.parent.name))
    return members


def down(folder: Path) -> list[str]:
    """Stops every process of the cluster in ``folder`` (workers before the master or
    JobManager) and removes its state; the names of those that were running."""
    state = read_state(folder)
    if state is None:
        return []
    head = HEADS.get(str(state.get("kind")), "master")
    stopped = [name for name, pid in sorted(state["processes"].items(), key=lambda kv: kv[0] == head)
               if _stop(int(pid))]
    (folder / STATE).unlink()
    return stopped


def status(folder: Path) -> dict[str, Any]:
    """The state with each process alive or not and, when the master answers, its view."""
    state = read_state(folder)
    if state is None:
        return {"up": False, "folder": str(folder)}
    alive = {name: _alive(int(pid)) for name, pid in state["processes"].items()}
    out = {**state, "up": all(alive.values()), "alive": alive, "folder": str(folder)}
    if state.get("kind") == "flink" and alive.get("jobmanager"):
        with contextlib.suppress(OSError, ValueError):
            view = flink_overview(int(state["master_url"].rsplit(":", 1)[1]))
            out["jobmanager"] = {k: view.get(k) for k in ("taskmanagers", "slots-total", "slots-available",
                                                          "jobs-running", "jobs-finished", "jobs-failed")}
    elif alive.get("master"):
        with contextlib.suppress(OSError, ValueError):
            view = master_json(int(state["master_ui"].rsplit(":", 1)[1]))
            out["master"] = {k: view.get(k) for k in ("status", "aliveworkers", "cores", "coresused", "memory")}
            out["master"]["applications"] = len(view.get("activeapps", [])) + len(view.get("completedapps", []))
    return out


def engine_state(kind: str) -> dict[str, Any]:
    """The state of the cluster an engine runs on; a ``ClusterError`` saying how to start
    it when none is up."""
    folder = cluster_dir(kind)
    state = read_state(folder)
    alive = {name: _alive(int(pid)) for name, pid in (state or {}).get("processes", {}).items()}
    workers = [alive[name] for name in alive if name.startswith(WORKERS[kind])]
    # a cluster that lost workers still runs jobs on the others (as a real one does)
    if state is None or not alive.get(HEADS[kind]) or not alive.get("sdk-worker-pool", True) or not any(workers):
        raise ClusterError(f"no {kind} cluster is up in {folder}: start one with "
                           f"`python -m pipelines.engines cluster {kind} up`")
    return state
