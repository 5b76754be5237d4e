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
import sys
import threading
import time
from typing import Any, Optional, Sequence

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

from pipelines.memory import cap_malloc_arenas, worker_environment

_LOGGER = logging.getLogger(__name__)


class SupervisedWorkerPool(BeamFnExternalWorkerPoolServicer):
    """Beam's worker pool servicer that restarts workers that die while wanted."""

    max_restarts = 3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wanted: dict[str, beam_fn_api_pb2.StartWorkerRequest] = {}
        self._restarts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="worker-supervisor", daemon=True).start()

    def StartWorker(self, request: beam_fn_api_pb2.StartWorkerRequest, context: Any) -> Any:  # noqa: N802
        with self._lock:
            self._wanted[request.worker_id] = request
            return super().StartWorker(request, context)

    def StopWorker(self, request: beam_fn_api_pb2.StopWorkerRequest, context: Any) -> Any:  # noqa: N802
        with self._lock:
            self._wanted.pop(request.worker_id, None)
        return super().StopWorker(request, context)

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                for worker_id, process in list(self._worker_processes.items()):
                    code = process.poll()
                    if code in (None, 0) or worker_id not in self._wanted:
                        continue  # running, finished cleanly, or no longer wanted
                    if self._restarts[worker_id] >= self.max_restarts:
                        _LOGGER.error("SDK worker %s exited with %s; restarted %d times already, "
                                      "giving up", worker_id, code, self._restarts[worker_id])
                        self._wanted.pop(worker_id)
                        continue
                    self._restarts[worker_id] += 1
                    _LOGGER.warning("SDK worker %s exited with %s while the runner wants it; "
                                    "starting it again (%d of %d)", worker_id, code,
                                    self._restarts[worker_id], self.max_restarts)
                    super().StartWorker(self._wanted[worker_id], None)


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
