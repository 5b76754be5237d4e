"""An SDK worker pool that starts a worker again when it dies: the sidecar of a Flink or
Spark worker for ``--environment_type=EXTERNAL``.

    python -m pipelines.worker_pool --service_port 50000 [--max_restarts 3]

Beam's ``apache_beam.runners.worker.worker_pool_main`` with one change. Beam's pool starts
a worker process when the runner asks (``StartWorker``) and forgets it until the runner
says stop. If that process dies before it has connected to the runner (killed, out of
memory), the runner waits for it forever: Beam's Flink runner logs "Still waiting for
startup of environment" every two minutes and the job never ends (measured with Beam
2.62's Flink 1.19 job server). Here a worker that exits with an error or a signal while
the runner still wants it is started again with the same request (same worker id and
endpoints), at most ``max_restarts`` times per worker, so it connects and the job goes
on. A worker that dies in the middle of a bundle fails that bundle: the runner fails the
job (which then resumes at its stage, see ``pipelines.run``), and the restarted process
is stopped with the job's environment.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, Optional, Sequence

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

from pipelines.memory import cap_malloc_arenas, worker_environment

_LOGGER = logging.getLogger(__name__)


class SupervisedWorkerPool(BeamFnExternalWorkerPoolServicer):
    """Beam's worker pool servicer that restarts workers that die while wanted, and that
    serves several runner processes at once.

    A worker is known by its id *and* the control endpoint it connects to. Beam's runner
    numbers its workers per JVM ("1-1", "2-1", ...): two Spark executors sharing a pool
    (a Spark standalone cluster on one machine, ``pipelines/clusters.py``) ask for the same
    ids. Beam's pool keeps one process per id: the second request replaced the first in
    its table, and the first executor's ``StopWorker`` then killed the second executor's
    worker, which waited for it for ever (measured: the label stage on 2 executors). Here
    each (id, endpoint) has its own process. ``StopWorker`` names an id only: with one
    process of that id, it is stopped; with several, the runner that asks has closed its
    worker's control stream before asking (Beam's ``RemoteEnvironment.close``), so its
    worker is the one that exits within ``stop_wait_s``; the others are left running."""

    max_restarts = 3
    stop_wait_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wanted: dict[tuple[str, str], beam_fn_api_pb2.StartWorkerRequest] = {}
        self._processes: dict[tuple[str, str], subprocess.Popen] = {}
        self._restarts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._stopping: set[str] = set()  # ids whose StopWorker is waiting for one of several to exit
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="worker-supervisor", daemon=True).start()

    def _start(self, key: tuple[str, str], request: beam_fn_api_pb2.StartWorkerRequest, context: Any) -> Any:
        response = super().StartWorker(request, context)
        process = self._worker_processes.pop(request.worker_id, None)  # Beam's table: one per id
        if process is not None:
            self._processes[key] = process
        return response

    def StartWorker(self, request: beam_fn_api_pb2.StartWorkerRequest, context: Any) -> Any:  # noqa: N802
        key = (request.worker_id, request.control_endpoint.url)
        with self._lock:
            self._wanted[key] = request
            return self._start(key, request, context)

    def StopWorker(self, request: beam_fn_api_pb2.StopWorkerRequest, context: Any) -> Any:  # noqa: N802
        with self._lock:
            keys = [k for k in self._processes if k[0] == request.worker_id]
            if len(keys) <= 1:
                for key in keys:
                    self._wanted.pop(key, None)
                    _stop(self._processes.pop(key))
                return beam_fn_api_pb2.StopWorkerResponse()
            self._stopping.add(request.worker_id)
        try:
            deadline = time.monotonic() + self.stop_wait_s
            while time.monotonic() < deadline:
                with self._lock:
                    ended = [k for k in keys if k in self._processes and self._processes[k].poll() is not None]
                    for key in ended:
                        self._wanted.pop(key, None)
                        _stop(self._processes.pop(key))
                if ended:
                    break
                time.sleep(0.1)
            else:
                _LOGGER.info("StopWorker %s: %d workers have that id and none ended within %.0f s; "
                             "left running (each ends with its runner)", request.worker_id, len(keys),
                             self.stop_wait_s)
        finally:
            with self._lock:
                self._stopping.discard(request.worker_id)
        return beam_fn_api_pb2.StopWorkerResponse()

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                for key, process in list(self._processes.items()):
                    code = process.poll()
                    if code is None or key[0] in self._stopping:
                        continue  # running, or a StopWorker is deciding whose it is
                    if code == 0 or key not in self._wanted:
                        _stop(self._processes.pop(key))  # finished cleanly or no longer wanted: reaped
                        continue
                    if self._restarts[key] >= self.max_restarts:
                        _LOGGER.error("SDK worker %s exited with %s; restarted %d times already, "
                                      "giving up", key[0], code, self._restarts[key])
                        self._wanted.pop(key)
                        _stop(self._processes.pop(key))
                        continue
                    self._restarts[key] += 1
                    _LOGGER.warning("SDK worker %s exited with %s while the runner wants it; "
                                    "starting it again (%d of %d)", key[0], code,
                                    self._restarts[key], self.max_restarts)
                    _stop(self._processes.pop(key))
                    self._start(key, self._wanted[key], None)


def _stop(process: subprocess.Popen, grace_s: float = 1.0) -> None:
    """Ends ``process`` (a second's grace, then SIGKILL) and reaps it."""
    if process.poll() is None:
        try:
            process.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    else:
        process.communicate()


def worker_path(executable: str, path: str) -> str:
    """``PATH`` with ``executable``'s directory first. Beam's pool starts each worker as
    ``python -c ...``, the first ``python`` on the ``PATH``: a pool started as
    ``.venv/bin/python -m pipelines.worker_pool`` outside the activated venv would start
    the system's Python, without Beam, and every worker would die at its first import."""
    first = os.path.dirname(os.path.abspath(executable))
    return os.pathsep.join([first] + [p for p in path.split(os.pathsep) if p and p != first])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.worker_pool", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service_port", type=int, required=True, help="port to listen on")
    parser.add_argument("--container_executable", default=None,
                        help="a Beam SDK container boot executable to start workers with")
    parser.add_argument("--max_restarts", type=int, default=3, help="restarts per worker (default 3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    SupervisedWorkerPool.max_restarts = args.max_restarts
    cap_malloc_arenas()
    worker_environment(os.environ)  # the SDK worker processes it starts (pipelines/memory.py)
    if os.access(os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "python"), os.X_OK):
        os.environ["PATH"] = worker_path(sys.executable, os.environ.get("PATH", ""))
    elif args.container_executable is None:
        _LOGGER.warning("no 'python' beside %s: workers start with the first python on the PATH, "
                        "which must have this project installed", sys.executable)
    address, server = SupervisedWorkerPool.start(use_process=True, port=args.service_port,
                                                 container_executable=args.container_executable)
    _LOGGER.info("SDK worker pool at %s (restarts per worker: %d)", address, args.max_restarts)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
