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
CLUSTER_KINDS = ("spark",)
LOCALHOST = "127.0.0.1"
STATE = "state.json"


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
        for name in ("memory", "daemon_heap"):
            value = getattr(self, name)
            if not (value[:-1].isdigit() and value[-1] in "mg"):
                raise ValueError(f"{name} must be a size like 512m or 1g, got {value!r}")


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
    state = read_state(folder)
    if state and any(_alive(pid) for pid in state["processes"].values()):
        raise ClusterError(f"a spark cluster is already up in {folder} ({state['master_url']}); "
                           f"`python -m pipelines.engines cluster spark down` first")
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
        base = [java, f"-Xmx{spec.daemon_heap}", "-cp", os.pathsep.join(classpath)]
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
        pool_port = _free_port()
        pool = _spawn([sys.executable, "-m", "pipelines.worker_pool", f"--service_port={pool_port}"],
                      logs / "sdk-worker-pool.log", {**os.environ, "PYTHONPATH": str(ROOT)})
        started.append(pool)
        processes["sdk-worker-pool"] = pool.pid
        _wait("the SDK worker pool", lambda: _port_open(pool_port), {logs / "sdk-worker-pool.log": pool})
        state["pool"] = f"localhost:{pool_port}"
    except BaseException:
        for process in reversed(started):
            _stop(process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
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
    """Stops every process of the cluster in ``folder`` (workers before the master) and
    removes its state; the names of those that were running."""
    state = read_state(folder)
    if state is None:
        return []
    stopped = [name for name, pid in sorted(state["processes"].items(), key=lambda kv: kv[0] == "master")
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
    if alive.get("master"):
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
    workers = [alive[name] for name in alive if name.startswith("worker-")]
    # a cluster that lost workers still runs jobs on the others (as a real one does)
    if state is None or not alive.get("master") or not alive.get("sdk-worker-pool", True) or not any(workers):
        raise ClusterError(f"no {kind} cluster is up in {folder}: start one with "
                           f"`python -m pipelines.engines cluster {kind} up`")
    return state
