"""The runner hanging up a LOOPBACK harness's data channel (``pipelines.job_servers``):
Beam's data plane in this process reads from a real gRPC server on 127.0.0.1 that ends the
stream the way Beam's Java job server does when it releases an environment."""

from __future__ import annotations

import logging
import threading
from concurrent import futures

import grpc
import pytest
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker import data_plane

from pipelines.job_servers import quiet_released_environments


class _HangingUp(beam_fn_api_pb2_grpc.BeamFnDataServicer):
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code

    def Data(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        context.abort(self.code, "Multiplexer hanging up")


def _read_until_hung_up(code: grpc.StatusCode) -> None:
    """Beam's data channel reads from a server that ends the stream with ``code``; returns
    once its reader thread has ended (its exception hook run)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    beam_fn_api_pb2_grpc.add_BeamFnDataServicer_to_server(_HangingUp(code), server)
    port = server.add_insecure_port("127.0.0.1:0")
    started: list[threading.Thread] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread)
        real_start(thread)

    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(threading.Thread, "start", start)
                data_plane.GrpcClientDataChannel(beam_fn_api_pb2_grpc.BeamFnDataStub(channel))
            readers = [t for t in started if t.name == "read_grpc_client_inputs"]
            assert readers, "the data plane started no reader thread"
            for reader in readers:
                reader.join(timeout=60)
                assert not reader.is_alive()
    finally:
        server.stop(grace=None)


@pytest.fixture
def thread_errors(monkeypatch):
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    data_plane_logger = logging.getLogger("apache_beam.runners.worker.data_plane")
    monkeypatch.setattr(data_plane_logger, "filters", list(data_plane_logger.filters))
    quiet_released_environments()
    quiet_released_environments()  # once is enough: not wrapped twice
    return seen


def test_a_released_environment_logs_nothing_and_its_reader_dies_quietly(thread_errors, caplog):
    """Before: "ERROR ... Failed to read inputs in the data plane." with the traceback, then
    "Exception in thread read_grpc_client_inputs" with it again, on Flink and Spark runs
    that ended well and in the Ctrl-C test on Spark (CI, 2026-12-07)."""
    caplog.set_level(logging.WARNING)
    _read_until_hung_up(grpc.StatusCode.CANCELLED)
    assert thread_errors == []
    assert not [r for r in caplog.records if r.name.startswith("apache_beam")], caplog.text


def test_a_closed_socket_is_a_hang_up_too(thread_errors, caplog):
    """UNAVAILABLE ("Stream removed (Socket closed)"): the job server closing its sockets."""
    caplog.set_level(logging.WARNING)
    _read_until_hung_up(grpc.StatusCode.UNAVAILABLE)
    assert thread_errors == [] and "Failed to read inputs" not in caplog.text


def test_other_channel_errors_are_still_shown(thread_errors, caplog):
    caplog.set_level(logging.WARNING)
    _read_until_hung_up(grpc.StatusCode.INTERNAL)
    assert len(thread_errors) == 1 and thread_errors[0].code() == grpc.StatusCode.INTERNAL
    assert "Failed to read inputs in the data plane." in caplog.text


def test_the_hang_up_is_kept_at_debug(thread_errors, caplog):
    caplog.set_level(logging.DEBUG, logger="apache_beam.runners.worker.data_plane")
    _read_until_hung_up(grpc.StatusCode.CANCELLED)
    assert "Failed to read inputs in the data plane." in caplog.text


def test_a_hang_up_raised_outside_beams_harness_is_shown(thread_errors):
    class HungUp(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.CANCELLED

    def fail() -> None:
        raise HungUp()

    thread = threading.Thread(target=fail, name="read_grpc_client_inputs")
    thread.start()
    thread.join()
    assert len(thread_errors) == 1 and isinstance(thread_errors[0], HungUp)
