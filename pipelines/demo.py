"""``make run``: serve the Python docs with pydoc on 127.0.0.1, crawl, extract and clean them.

Starts ``python -m pydoc -n 127.0.0.1 -p PORT`` (stdin kept open: pydoc's server
quits on input), waits until it answers, runs ``configs/demo.yaml`` with ``${DEMO_SITE}``
replaced by the server's URL (crawl and extract, then ``pipelines.anomaly train`` on the
extracted pages and ``pipelines.labeller train`` on a seed set, then every stage again:
crawl and extract resume from their manifests, the rest runs), prints the count table,
the review queue and the path of the run report (``report/report.html``), and stops
the server.

The demo's label set ``area`` is the section of the Python Library Reference a page's
module belongs to (a categorisation made by people, outside this project); a quarter
of the extracted pages, chosen by a hash of their id, label the seed set.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Optional, Sequence

from pipelines.run import main as run_main

_LOGGER = logging.getLogger(__name__)

PREFERRED_PORT = 8765

# Top-level module -> its section of the Python Library Reference, grouped in four.
AREAS = {
    "text_data": "string re textwrap codecs struct datetime calendar collections heapq bisect array "
                 "weakref types copy pprint reprlib enum numbers math decimal fractions random "
                 "itertools functools operator builtins",
    "files_os": "pathlib posixpath genericpath stat tempfile glob fnmatch shutil sqlite3 dbm zlib gzip "
                "csv configparser hashlib hmac secrets os io time argparse logging errno locale "
                "gettext threading concurrent queue",
    "internet": "asyncio socket ssl select selectors signal email json mimetypes base64 binascii quopri "
                "html xml urllib http wsgiref xmlrpc uuid",
    "runtime_dev": "typing unittest warnings dataclasses contextlib abc traceback inspect ast keyword "
                   "token tokenize importlib",
}
MODULE_AREA = {module: area for area, modules in AREAS.items() for module in modules.split()}


# The demo's language model is trained at a size that fits its minute: 120 steps of 16
# windows of 128 tokens (245,760 tokens) instead of the default 1,500 x 32 x 256
# (12.3M): the detector is real, trained on the pages the demo just crawled, and weaker
# than one trained at the default size on a real reference corpus. Measured (2026-12-07,
# idle 2-core VM): 300 x 32 x 256 took 35 s of the demo's CPU. tests/pipelines/test_demo.py
# fails when these settings grow past DEMO_LM_TOKEN_BUDGET.
DEMO_LM_STEPS, DEMO_LM_BATCH, DEMO_LM_WINDOW = 120, 16, 128
DEMO_LM_TOKEN_BUDGET = 250_000  # windows x tokens x steps


def demo_lm_args() -> list[str]:
    """The ``pipelines.anomaly train`` options of the demo's language model."""
    return ["--steps", str(DEMO_LM_STEPS), "--batch-size", str(DEMO_LM_BATCH), "--window", str(DEMO_LM_WINDOW)]


def area_of(url: str) -> str:
    """The Library Reference area of a pydoc page URL, '' when unknown."""
    name = url.rsplit("/", 1)[-1].removesuffix(".html").split(".")[0]
    return MODULE_AREA.get(name, "")


def write_area_seed(config_path: str, path: str, fraction: float = 0.25) -> int:
    """The seed set: ``{"id", "label"}`` for a hash-chosen ``fraction`` of the extracted pages."""
    import hashlib
    import json

    from pipelines.config import load_config
    from pipelines.corpus import iter_docs, stage_doc_files

    config = load_config(config_path, stages=("extract",), check_models=False)
    rows = []
    for doc in iter_docs(stage_doc_files(config, "extract")):
        area = area_of(doc.url)
        if area and hashlib.sha1(doc.id.encode()).digest()[0] < 256 * fraction:
            rows.append({"id": doc.id, "label": area})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


def free_port(preferred: int = PREFERRED_PORT) -> int:
    """``preferred`` if it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            # as pydoc's server binds (allow_reuse_address): the last run's closed connections
            # in TIME_WAIT do not make the port look busy (a rerun then got another port, so
            # its crawl and everything after it ran again instead of resuming)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
    from pipelines.anomaly import main as anomaly_main

    base = ["--config", config_path] + (["--output", output] if output else [])
    code = run_main(base + ["--stages", "crawl,extract", "--no-report"] + beam_args)
    if code != 0:
        return code
    sys.stdout.write("\ntraining the anomaly detector on the extracted pages "
                     "(python -m pipelines.anomaly train)\n")
    code = anomaly_main(["train", "--config", config_path, "--stage", "extract"] + demo_lm_args())
    if code != 0:
        return code
    from pipelines.labeller import main as labeller_main

    seed = os.path.join(output or "out/demo", "models", "area-seed.jsonl")
    n = write_area_seed(config_path, seed)
    from pipelines.config import load_config

    label = load_config(config_path, check_models=False).label
    labeller_dir = label.sets[0].model if label is not None else ""
    if os.path.exists(os.path.join(labeller_dir, "CURRENT")):
        sys.stdout.write(f"\npage-area labeller already trained ({labeller_dir}); "
                         "retrain with python -m pipelines.labeller retrain\n")
    else:
        sys.stdout.write(f"\ntraining the page-area labeller on {n} seed pages "
                         "(python -m pipelines.labeller train)\n")
        # a quarter of ~250 pages is too few to calibrate (models.labeller.MIN_CALIBRATION_EXAMPLES):
        # the demo's labeller is a cold-start seed model, asked for explicitly
        code = labeller_main(["train", "--config", config_path, "--set", "area", "--seed", seed,
                              "--allow-uncalibrated"])
        if code != 0:
            return code
    return run_main(base + beam_args)  # its last lines name the review queue and its command


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--output", default=None)
    args, rest = parser.parse_known_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        template = fh.read()
    if args.output:  # the output and the models the demo trains under it (the config says out/demo)
        template = template.replace("out/demo", args.output.rstrip("/"))
    output = (args.output or "out/demo").rstrip("/")
    with PydocSite(free_port()) as site:
        sys.stdout.write(f"demo site: pydoc serving the Python docs at {site.url}\n")
        # the config as run, kept beside the outputs (the run report names it): the same
        # job again is `make run`, which serves the site this config crawls
        os.makedirs(output, exist_ok=True)
        config_path = os.path.join(output, "demo.yaml")
        with open(config_path, "w", encoding="utf-8") as fh:
            fh.write(f"# {args.config} as python -m pipelines.demo ran it, with the demo site at {site.url}.\n"
                     "# Run it again with `make run` (python -m pipelines.demo), which starts that site.\n"
                     + template.replace("${DEMO_SITE}", site.url))
        code = _run_demo(config_path, args.output, list(rest))
    sys.stdout.write("demo site stopped.\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
