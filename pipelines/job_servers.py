"""One job server per job: the Flink and Spark job server JVM, or Prism, started once for
all the Beam pipelines of a job (one per stage, several for near-dedup) and stopped at
its end, each ignoring a terminal's Ctrl-C, which the run handles (``pipelines.interrupts``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.utils import subprocess_server

from pipelines import engine_log
from pipelines.interrupts import ignored_by_children

_LOGGER = logging.getLogger(__name__)


class _JavaErrorsOnly(logging.Filter):
    """The job server's output, which Beam logs line by line at INFO: every line while a
    run's engine log is open (it alone receives them), else only its errors (raised to
    WARNING) unless this logger is set to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if engine_log.active() is not None or logging.getLogger("tokenfactory.jobserver").isEnabledFor(logging.DEBUG):
            return True  # every line, to the run's engine log (pipelines/engine_log.py)
        text = record.getMessage()
        if " ERROR " in text or "Exception" in text:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        return False


# How a runner ends an SDK harness's gRPC streams when it is done with them: CANCELLED
# (Beam's Java "Multiplexer hanging up") when the job server releases a job's environment
# (``--environment_cache_millis`` after the last task, the job's end, the run's stop),
# UNAVAILABLE ("Stream removed (Socket closed)") when it closes the sockets under them.
_HANG_UPS = ("CANCELLED", "UNAVAILABLE")


def _runner_hung_up(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the runner closing an SDK harness's stream (``_HANG_UPS``): not a
    failure of its own; a bundle the close broke fails the job through the job service,
    which the run reports."""
    import grpc

    code = getattr(exc, "code", None)
    return isinstance(exc, grpc.RpcError) and callable(code) and getattr(code(), "name", "") in _HANG_UPS


class _ReleasedEnvironmentLog(logging.Filter):
    """Beam's data plane logs that hang-up as an ERROR with its traceback ("Failed to read
    inputs in the data plane."): shown at DEBUG only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and _runner_hung_up(record.exc_info[1]):
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _in_beam_harness(tb: Any) -> bool:
    while tb is not None:
        if "apache_beam/runners/worker/" in tb.tb_frame.f_code.co_filename.replace(os.sep, "/"):
            return True
        tb = tb.tb_next
    return False


def _quiet_hung_up_reader(args: Any, previous: Any = threading.excepthook) -> None:
    """...and the harness's threads then die with the same exception, printed by Python
    (its reader ``read_grpc_client_inputs``, ``read_state``, ``run_worker_*`` re-raising it
    when it closes the channel). Only exceptions raised in Beam's worker code are held back."""
    if not (_runner_hung_up(args.exc_value) and _in_beam_harness(args.exc_traceback)):
        previous(args)


def quiet_released_environments() -> None:
    """Keeps the runner's hang-up of a LOOPBACK harness (in this process) out of the run's
    output. Seen on Flink and Spark runs that ended well, and on a Ctrl-C where it came
    before the run had the signal: 2 tracebacks, an ERROR and "Exception in thread". For
    the whole process once called (the threads may die after the job server stopped); it
    hides nothing else: other exceptions, codes, threads and loggers are untouched."""
    data_plane = logging.getLogger("apache_beam.runners.worker.data_plane")
    if not any(isinstance(f, _ReleasedEnvironmentLog) for f in data_plane.filters):
        data_plane.addFilter(_ReleasedEnvironmentLog())
    hook = threading.excepthook
    if not (isinstance(hook, functools.partial) and hook.func is _quiet_hung_up_reader):
        threading.excepthook = functools.partial(_quiet_hung_up_reader, previous=hook)


class _JobServerProcess(subprocess_server.SubprocessServer):
    """Beam's subprocess server whose job server JVM ignores a terminal's Ctrl-C, which
    reaches the whole process group: the JVM stopped on its own, and this process's SDK
    harness sometimes logged the broken data channel's traceback before the run had
    the signal (``pipelines.interrupts``). The run stops it on its way out: SIGTERM (the
    JVM's shutdown hooks run, Spark removes its temporary folders), since Beam's stop
    sends SIGINT five times a second apart, then SIGKILL."""

    STOP_S = 30.0

    def start_process(self):  # type: ignore[no-untyped-def]
        with ignored_by_children():
            self._started = super().start_process()
        return self._started

    def stop_process(self) -> None:
        process = getattr(self, "_started", (None,))[0]
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=self.STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
        super().stop_process()


@contextlib.contextmanager
def _prism_for_the_job(options: beam.options.pipeline_options.PipelineOptions) -> Iterator[None]:
    """Starts Beam's Prism for the job and stops it at the end. Beam keeps one Prism per
    process (``PrismRunner.shared_handle``), started by the first pipeline with a SIGINT
    handler of its own that stops Prism before the run's handler gets the signal, and
    Prism stopped on a terminal's Ctrl-C too: either way this process's SDK harness
    logged the broken channel's tracebacks first. Started here, Prism ignores Ctrl-C
    (``ignored_by_children``; one lost while it starts, about a second) and the run's
    handler is put back; the pipelines of the job use this Prism."""
    from apache_beam.runners.portability.prism_runner import PrismRunner

    server = PrismRunner().default_job_server(options)
    with ignored_by_children():  # puts the handler before it (the run's) back on exit
        server.start()
    try:
        yield
    finally:
        _terminate_children("prism")  # Beam's stop sends SIGINT, now ignored, for 5 s
        server.stop()


def _terminate_children(name: str, timeout_s: float = 10.0) -> None:
    """SIGTERM to this process's children whose program is named ``name``; waits until
    they exited (a zombie, for their ``Popen`` to reap) or ``timeout_s`` passed."""
    targets = []
    for pid in child_pids(os.getpid()):
        with contextlib.suppress(OSError):
            if os.path.basename(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()) == name:
                os.kill(pid, signal.SIGTERM)
                targets.append(pid)
    deadline = time.monotonic() + timeout_s
    while targets and time.monotonic() < deadline:
        targets = [pid for pid in targets if pid in child_pids(os.getpid())]  # zombies are not listed
        time.sleep(0.05)


@contextlib.contextmanager
def shared_job_server(options: beam.options.pipeline_options.PipelineOptions) -> Iterator[None]:
    """While open, every pipeline built with ``options`` goes to one job server.

    Only for Flink and Spark runs that would start a local job server jar themselves
    (no ``--job_endpoint``, no uber-jar submission); Prism runs get ``_prism_for_the_job``;
    anything else is left as it is. The server, its artifact folder and the embedded
    cluster go away on exit.
    """
    from apache_beam.options.pipeline_options import (
        FlinkRunnerOptions, JobServerOptions, PortableOptions, SparkRunnerOptions, StandardOptions)
    from apache_beam.portability.api import beam_job_api_pb2_grpc
    from apache_beam.utils import subprocess_server

    runner = str(options.view_as(StandardOptions).runner or "")
    portable = options.view_as(PortableOptions)
    if runner in ("FlinkRunner", "SparkRunner", "PrismRunner", "PortableRunner"):
        quiet_released_environments()
    server = None
    if not portable.job_endpoint and runner in ("FlinkRunner", "SparkRunner"):
        if runner == "FlinkRunner" and not options.view_as(FlinkRunnerOptions).flink_submit_uber_jar:
            from apache_beam.runners.portability.flink_runner import FlinkJarJobServer

            server, extra_jvm = FlinkJarJobServer(options), []
        elif runner == "SparkRunner" and not options.view_as(SparkRunnerOptions).spark_submit_uber_jar:
            from apache_beam.runners.portability.spark_runner import (
                SPARK_JAR_JOB_SERVER_JVM_ARGS, SparkJarJobServer)

            server, extra_jvm = SparkJarJobServer(options), list(SPARK_JAR_JOB_SERVER_JVM_ARGS)
    if server is None:
        with _prism_for_the_job(options) if runner == "PrismRunner" and not portable.job_endpoint \
                else contextlib.nullcontext():
            yield
        return
    job_options = options.view_as(JobServerOptions)
    jar = server.local_jar(server.path_to_jar(), job_options.jar_cache_dir)
    artifacts = tempfile.mkdtemp(prefix="tokenfactory-artifacts-")
    port, = subprocess_server.pick_port(None)
    jvm = list(job_options.job_server_jvm_properties or []) + extra_jvm
    cmd = ([job_options.job_server_java_launcher] + jvm + ["-jar", jar]
           + [str(a) for a in server.java_arguments(port, 0, 0, artifacts)])
    logger = logging.getLogger("tokenfactory.jobserver")
    if not logger.filters:
        logger.addFilter(_JavaErrorsOnly())
    process = _JobServerProcess(beam_job_api_pb2_grpc.JobServiceStub, cmd, port=port, logger=logger)
    _LOGGER.info("%s: one job server for the whole job at localhost:%d", runner, port)
    process.start()
    portable.job_endpoint = f"localhost:{port}"
    try:
        yield
    finally:
        portable.job_endpoint = None
        process.stop()
        shutil.rmtree(artifacts, ignore_errors=True)


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(entry))
    return children
