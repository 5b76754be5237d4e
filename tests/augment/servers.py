"""Real HTTP servers on 127.0.0.1 for the augment tests, started and stopped here.

* ``LMServer``: ``transformers serve`` (transformers[serving], from PyPI) serving a local model
  directory through its OpenAI-compatible API on the CPU. It counts the requests it received
  from its own log line ``[Request received]``. ``stop()`` kills it (SIGKILL: requests in
  flight get a reset connection) and ``start()`` starts it again on the same port.
* ``ScriptedServer``: an aiohttp server answering ``/v1/completions`` and
  ``/v1/chat/completions`` with whatever the test's ``responder`` returns (status, headers,
  raw body bytes), recording every request it got; for error scripts and hostile bodies.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from aiohttp import web


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedModel(NamedTuple):
    base_url: str
    model_name: str  # what requests send as "model": transformers serve names it by its path
    model_dir: Path


class LMServer:
    def __init__(self, model_dir: Path, log_path: Path, port: int | None = None) -> None:
        self.model_dir, self.log_path = model_dir, log_path
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def served(self) -> ServedModel:
        return ServedModel(self.base_url, str(self.model_dir), self.model_dir)

    def start(self, timeout_s: float = 90.0) -> None:
        exe = Path(sys.executable).with_name("transformers")
        command = [str(exe), "serve", str(self.model_dir), "--host", "127.0.0.1", "--port", str(self.port),
                   "--device", "cpu", "--log-level", "warning", "--format", "quiet"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
               "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.base_url}/health", timeout=2).close()
                return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"transformers serve did not start; log: {self.log_path}")
                time.sleep(0.2)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=30)
            self._proc = None

    def requests_received(self) -> int:
        """Completion requests the server logged (across restarts: the log is appended)."""
        return self.log_path.read_text(errors="replace").count("[Request received]")


Response = tuple[int, dict[str, str], bytes]


def completion(text: str) -> Response:
    return 200, {"Content-Type": "application/json"}, json.dumps({"choices": [{"index": 0, "text": text}]}).encode()


@dataclass
class ScriptedServer:
    """``responder(body, headers) -> (status, headers, raw body)``; ``requests`` records
    (path, JSON body, request headers) of every request; ``max_in_flight`` the peak."""

    responder: Callable[[dict[str, Any], dict[str, str]], Response] = lambda body, headers: completion("ok")
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    delay_s: float = 0.0
    max_in_flight: int = 0
    base_url: str = ""
    _in_flight: int = 0
    _epoch: int = 0  # a reset starts a new one: handlers left over from a previous test do not count

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        headers = dict(request.headers)
        epoch = self._epoch
        self.requests.append((request.path, body, headers))
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            status, extra, raw = self.responder(body, headers)
        finally:
            if epoch == self._epoch:
                self._in_flight -= 1
        return web.Response(status=status, body=raw, headers=extra)

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None)
        port = free_port()
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        self._loop, self._runner = loop, runner
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def reset(self, responder: Callable[[dict[str, Any], dict[str, str]], Response] | None = None,
              delay_s: float = 0.0) -> None:
        self._epoch += 1
        self.requests = []
        self.max_in_flight = self._in_flight = 0
        self.delay_s = delay_s
        self.responder = responder or (lambda body, headers: completion("ok"))
