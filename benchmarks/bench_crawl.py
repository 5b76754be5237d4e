"""Crawler pages/s against a local site, vs a bare ``requests`` loop over the same URLs.

    .venv/bin/python -m benchmarks.bench_crawl [--pages 500]

The site (served from another process on 127.0.0.1, so it does not share our GIL) has
``--pages`` HTML pages of about 6 KB, each linking to 20 others. Our crawler starts from
the home page with no politeness delay (robots.txt allows all) and discovers every page
by following links; the baseline fetches the known list of URLs with one
``requests.Session``. The ratio is the crawler's overhead: robots, URL normalisation,
link extraction, WARC writing and the fetch log.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from transforms.crawl.crawler import CrawlConfig, HostCrawl, Outcome
from transforms.crawl.fetcher import FetchPolicy, Hop, HostClient
from transforms.crawl.warcfile import RollingWarcWriter


def page(i: int, n: int) -> bytes:
    rng = random.Random(i)
    links = "".join(f'<a href="/p{rng.randrange(n)}.html">link {j}</a> ' for j in range(20))
    text = " ".join(rng.choice(["data", "pipeline", "token", "crawl", "shard", "model", "text"])
                    for _ in range(800))
    return (f"<html><head><title>Page {i}</title></head><body><nav>{links}</nav>"
            f"<p>{text}.</p><a href='/p{(i + 1) % n}.html'>next</a></body></html>").encode()


def serve(n: int, port_queue: "multiprocessing.Queue[int]") -> None:
    pages = {f"/p{i}.html": page(i, n) for i in range(n)}
    pages["/"] = pages["/p0.html"]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # one write per response: no Nagle / delayed-ACK stalls
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = pages.get(self.path)
            status = 200 if body is not None else 404
            body = body or b"not found"
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_queue.put(server.server_address[1])
    server.serve_forever()


def crawl(base: str, n: int, warc_dir: str) -> tuple[int, float]:
    config = CrawlConfig(policy=FetchPolicy(min_delay_s=0.0, timeout_s=10), max_pages_per_host=n + 10,
                         max_depth=1000)
    client = HostClient(config.policy)
    writer = RollingWarcWriter(warc_dir, "bench")
    t0 = time.perf_counter()
    kept = 0
    for event in HostCrawl(base, config, client).run([base + "/p0.html"]):
        if isinstance(event, Hop):
            writer.write(event)
        elif isinstance(event, Outcome) and event.kind == "kept":
            kept += 1
    writer.close()
    client.close()
    return kept, time.perf_counter() - t0


def bare(base: str, n: int) -> tuple[int, float]:
    session = requests.Session()
    t0 = time.perf_counter()
    for i in range(n):
        session.get(f"{base}/p{i}.html", timeout=10).content
    session.close()
    return n, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=500)
    args = parser.parse_args(argv)
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(args.pages, queue), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{queue.get(timeout=30)}"
    try:
        bare(base, 20)  # warm-up
        n_bare, t_bare = bare(base, args.pages)
        with tempfile.TemporaryDirectory() as tmp:
            n_crawl, t_crawl = crawl(base, args.pages, tmp)
    finally:
        server.terminate()
    rate_bare, rate_crawl = n_bare / t_bare, n_crawl / t_crawl
    sys.stdout.write(f"requests loop (ceiling): {n_bare} pages, {rate_bare:7.1f} pages/s\n")
    sys.stdout.write(f"ours: HostCrawl + WARC : {n_crawl} pages, {rate_crawl:7.1f} pages/s "
                     f"({rate_crawl / rate_bare:.2f}x the bare loop)\n")
    sys.stdout.write(json.dumps({"bare_pages_per_s": rate_bare, "crawl_pages_per_s": rate_crawl,
                                 "crawled": n_crawl}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
