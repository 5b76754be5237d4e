"""``make run``: serve the Python docs with pydoc on 127.0.0.1, crawl, extract and clean them.

Starts ``python -m pydoc -n 127.0.0.1 -p PORT`` (stdin kept open: pydoc's server
quits on input), waits until it answers, runs ``configs/demo.yaml`` with ``${DEMO_SITE}``
replaced by the server's URL (crawl and extract, then ``models.anomaly train`` on the
extracted pages, then every stage again: crawl and extract resume from their manifests,
clean runs), prints the count table and the path of the run report
(``report/report.html``), and stops the server.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional, Sequence

from pipelines.run import main as run_main

_LOGGER = logging.getLogger(__name__)

PREFERRED_PORT = 8765


def free_port(preferred: int = PREFERRED_PORT) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


class PydocSite:
    """A pydoc documentation server on 127.0.0.1, as a context manager."""

    def __init__(self, port: int, startup_timeout_s: float = 60.0) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._timeout = startup_timeout_s
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def __enter__(self) -> "PydocSite":
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pydoc", "-n", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pydoc server exited with {self._proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/json.html", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"pydoc server on {self.url} did not answer in {self._timeout}s")

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None


def _run_demo(config_path: str, output: Optional[str], beam_args: list[str]) -> int:
    """crawl + extract, train the anomaly detector on the extracted pages, then clean."""
    from models.anomaly import main as anomaly_main

    base = ["--config", config_path] + (["--output", output] if output else [])
    code = run_main(base + ["--stages", "crawl,extract", "--no-report"] + beam_args)
    if code != 0:
        return code
    sys.stdout.write("\ntraining the anomaly detector on the extracted pages "
                     "(python -m models.anomaly train)\n")
    code = anomaly_main(["train", "--config", config_path, "--stage", "extract"])
    if code != 0:
        return code
    return run_main(base + beam_args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--output", default=None)
    args, rest = parser.parse_known_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        template = fh.read()
    with PydocSite(free_port()) as site:
        sys.stdout.write(f"demo site: pydoc serving the Python docs at {site.url}\n")
        with tempfile.TemporaryDirectory() as tmp:
            config_path = os.path.join(tmp, "demo.yaml")
            with open(config_path, "w", encoding="utf-8") as fh:
                fh.write(template.replace("${DEMO_SITE}", site.url))
            code = _run_demo(config_path, args.output, list(rest))
    sys.stdout.write("demo site stopped.\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
