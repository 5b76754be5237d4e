"""Client overhead of the rephrasing HTTP client (``OpenAIBackend``) vs the server's own time.

    .venv/bin/python -m benchmarks.bench_rephrase_client [--requests 1024] [--in-flight 64] \
        [--server-ms 250] [--response-chars 2000] [--rounds 3]

The server is an aiohttp OpenAI-compatible ``/v1/completions`` endpoint on 127.0.0.1 in its
own process: each request sleeps ``--server-ms`` (a model's generation time stands in) and
answers a ``--response-chars`` generation whose first word is the time the handler itself
took (``t=<seconds>``). ``OpenAIBackend`` sends ``--requests`` requests with
``concurrency = --in-flight``, once without the response cache and once with it (a local
temporary directory: one file written per response, as in production). Figures, the best
of ``--rounds``:

* per request: overhead = the client's in-flight time (``RephraseResult.seconds``) minus
  the server's own time, as a share of the client's time;
* per run: wall time vs the ideal ``ceil(requests / in_flight) * server time``; overhead
  share = (wall - ideal) / wall, which also counts building requests, waiting for a slot,
  parsing, the cache and the results;
* the client's CPU time per request (this process), and as a share of the request's time:
  the part of the overhead that is the client's own work. On a loaded machine the rest of
  the per-request overhead is mostly waiting for a core (the load average is printed).

Goal: overhead under 5 % at 64 requests in flight. Unlike a real vLLM server: responses come
from one process with a fixed sleep instead of continuous batching on a GPU (a real server's
per-request times are seconds and vary, which lowers the share), bodies carry no usage or
logprobs, and the loopback has no network round trip (a real network adds latency that is
neither the client's nor the model's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import shlex
import statistics
import sys
import tempfile
import time
from typing import Any

from aiohttp import web

from transforms.augment.openai_backend import OpenAIBackend
from transforms.augment.rephrase import BUILTIN_TEMPLATES, GenerationParams, make_request
from transforms.augment.response_cache import ResponseCache


def _serve(port_queue: Any, server_s: float, response_chars: int) -> None:
    filler = ("lorem ipsum dolor sit amet " * (response_chars // 27 + 1))[:response_chars]

    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        await request.json()
        await asyncio.sleep(server_s)
        text = f"t={time.perf_counter() - started:.6f} {filler}"
        body = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
        response = web.json_response(body)
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port_queue.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def _requests(n: int, round_: int) -> list:
    params = GenerationParams(model="bench", max_tokens=512)
    source = "The tomatoes finally ripened in the second week of July after a cold spring. " * 20
    return [make_request(f"doc-{round_}-{i}", 0, f"{source} ({round_}, {i})", BUILTIN_TEMPLATES["wikipedia"], params, "en")
            for i in range(n)]


def measure(url: str, n: int, in_flight: int, server_s: float, cache_dir: str | None, round_: int) -> dict[str, float]:
    cache = ResponseCache(cache_dir) if cache_dir else None
    client = OpenAIBackend(url, concurrency=in_flight, timeout_s=60, retries=0, cache=cache)
    batch = _requests(n, round_)
    cpu, wall = time.process_time(), time.perf_counter()
    results = client.generate(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, e.g. {failed[0]}")
    server = [float(r.text.split(" ", 1)[0][2:]) for r in results]
    client_s = [r.seconds for r in results]
    overhead = [c - s for c, s in zip(client_s, server)]
    ideal = math.ceil(n / in_flight) * server_s
    return {"wall_s": wall, "ideal_s": ideal, "run_overhead_share": (wall - ideal) / wall,
            "mean_client_ms": 1000 * statistics.fmean(client_s), "mean_server_ms": 1000 * statistics.fmean(server),
            "mean_overhead_ms": 1000 * statistics.fmean(overhead),
            "p99_overhead_ms": 1000 * sorted(overhead)[int(0.99 * (n - 1))],
            "request_overhead_share": statistics.fmean(overhead) / statistics.fmean(client_s),
            "client_cpu_ms_per_request": 1000 * cpu / n, "client_cpu_share": cpu / n / statistics.fmean(client_s)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1024)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--server-ms", type=float, default=250.0)
    parser.add_argument("--response-chars", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server_s = args.server_ms / 1000
    process = context.Process(target=_serve, args=(ports, server_s, args.response_chars), daemon=True)
    process.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=60)}"
        rows: dict[str, dict[str, float]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-rephrase-cache-") as tmp:
            for round_ in range(args.rounds):
                for name, cache_dir in (("no cache", None), ("with cache", tmp)):
                    row = measure(url, args.requests, args.in_flight, server_s, cache_dir, round_)
                    best = rows.get(name)
                    if best is None or row["wall_s"] < best["wall_s"]:
                        rows[name] = row
    finally:
        process.terminate()
        process.join(timeout=10)
    command = "python -m benchmarks.bench_rephrase_client " + shlex.join(sys.argv[1:] if argv is None else argv)
    print(f"$ {command.strip()}")
    print(f"{args.requests} requests, {args.in_flight} in flight, server {args.server_ms:g} ms each, "
          f"{args.response_chars}-char generations; best of {args.rounds} rounds by wall time; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'':12} {'wall s':>7} {'ideal s':>7} {'run ovh':>8} {'client ms':>9} {'server ms':>9} "
          f"{'ovh ms':>7} {'p99 ovh':>7} {'req ovh':>8} {'cpu ms/req':>10} {'cpu share':>9}")
    for name, r in rows.items():
        print(f"{name:12} {r['wall_s']:7.2f} {r['ideal_s']:7.2f} {r['run_overhead_share']:8.1%} "
              f"{r['mean_client_ms']:9.1f} {r['mean_server_ms']:9.1f} {r['mean_overhead_ms']:7.2f} "
              f"{r['p99_overhead_ms']:7.2f} {r['request_overhead_share']:8.1%} {r['client_cpu_ms_per_request']:10.2f} "
              f"{r['client_cpu_share']:9.2%}")
    print(json.dumps({"command": command.strip(), "rows": rows}, sort_keys=True))
    goal = all(r["request_overhead_share"] < 0.05 and r["run_overhead_share"] < 0.05 for r in rows.values())
    print(f"goal (< 5% overhead at {args.in_flight} in flight): {'met' if goal else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
