"""Extraction quality and speed on the 90 scrapinghub pages, ours vs trafilatura (two peer rows).

    .venv/bin/python -m benchmarks.bench_extract [--rounds 3]

Every extractor gets the raw page bytes (decoding is part of the job) and runs in this
one process on one core, interleaved round by round, so machine noise hits all alike;
each extractor's rate is its best round (as ``timeit`` does: noise only adds time).
Token F1 is against the hand-made ``articleBody``; the mean F1 hides page-level losses,
so every extractor also gets its median page F1, the share of pages where it is worse
than each trafilatura peer by more than ``WORSE_BY`` and its worst page gap (default
peer's F1 minus its F1, with the page id).

Two peer rows, timed in the same interleaved rounds: trafilatura's default ``extract``
and its fast mode (``fast=True, include_comments=False``: the peer's fastest documented
configuration, and more accurate than its default on these pages); every speed is
printed against both. ``--quality-only`` skips the timing rounds. The row "cascade, isolated" is what
the extract stage runs by default (``isolation: process``): the same extraction in the
killable child process of ``transforms.extract.isolated``; its CPU time is this
process's plus the child's (read from /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import trafilatura

from benchmarks import SHARED_DATA
from benchmarks.scrapinghub import load_pages, precision_recall_f1
from transforms.extract.html import MAX_HTML_DEPTH, Method, extract_html
from transforms.extract.isolated import IsolatedExtractor

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = SHARED_DATA / "html" / "scrapinghub"


ISOLATED = "ours: cascade, isolated (stage default)"
PEER = "trafilatura.extract (default, peer)"
PEER_FAST = "trafilatura.extract (fast, no comments, peer)"
PEERS = (PEER, PEER_FAST)
WORSE_BY = 0.05  # a page counts as worse than the peer when its F1 is lower by more than this


def page_comparison(f1: list[float], peer_f1: list[float], page_ids: list[str]) -> dict[str, object]:
    """Median page F1, share of pages worse than the peer by > ``WORSE_BY``, worst gap."""
    gaps = [p - f for f, p in zip(f1, peer_f1)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return {"median_f1": statistics.median(f1),
            "share_worse": sum(1 for g in gaps if g > WORSE_BY) / len(gaps),
            "worst_gap": gaps[worst], "worst_page": page_ids[worst]}


def child_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def extractors(isolated: IsolatedExtractor) -> dict[str, Callable[[bytes], str]]:
    return {
        PEER: lambda raw: trafilatura.extract(raw) or "",
        PEER_FAST: lambda raw: trafilatura.extract(raw, fast=True, include_comments=False) or "",
        "ours: resiliparse": lambda raw: extract_html(raw, "", Method.RESILIPARSE).text,
        "ours: cascade": lambda raw: extract_html(raw, "", Method.CASCADE).text,
        ISOLATED: lambda raw: isolated.extract(raw, "", Method.CASCADE, MAX_HTML_DEPTH).text,
        "ours: trafilatura (fast, no comments)": lambda raw: extract_html(raw, "", Method.TRAFILATURA).text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quality-only", action="store_true", help="F1 figures only, no timing rounds")
    args = parser.parse_args(argv)
    pages = load_pages(Path(args.data))
    isolated = IsolatedExtractor(timeout_s=60.0)
    fns = extractors(isolated)
    seconds = {name: float("inf") for name in fns}
    quality: dict[str, tuple[float, float, float]] = {}
    page_f1: dict[str, list[float]] = {}
    for name, fn in fns.items():  # warm-up + quality
        scores = [precision_recall_f1(fn(raw), truth) for _, raw, truth in pages]
        quality[name] = tuple(statistics.mean(s[i] for s in scores) for i in range(3))  # type: ignore[assignment]
        page_f1[name] = [s[2] for s in scores]
    ids = [page_id for page_id, _, _ in pages]
    pages_vs_peer = {name: page_comparison(page_f1[name], page_f1[PEER], ids) for name in fns}
    worse_than_fast = {name: page_comparison(page_f1[name], page_f1[PEER_FAST], ids)["share_worse"]
                       for name in fns}
    for _ in range(0 if args.quality_only else args.rounds):
        for name, fn in fns.items():
            child = isolated.pid if name == ISOLATED else None
            t0 = time.process_time() + (child_cpu_s(child) if child else 0.0)
            for _, raw, _ in pages:
                fn(raw)
            t1 = time.process_time() + (child_cpu_s(child) if child else 0.0)
            seconds[name] = min(seconds[name], t1 - t0)
    isolated.close()
    nan = float("nan")
    peer_rates = {peer: nan if args.quality_only else len(pages) / seconds[peer] for peer in PEERS}
    results = []
    timing = "no timing" if args.quality_only else f"best of {args.rounds} interleaved rounds, CPU time of one core"
    sys.stdout.write(f"{len(pages)} pages, {timing}\n")
    sys.stdout.write(f"{'extractor':<46} {'F1':>6} {'prec':>6} {'rec':>6} {'median':>6} "
                     f"{'worse':>6} {'worseF':>6} {'worst':>6} {'pages/s':>8} {'x dflt':>7} {'x fast':>7}\n")
    for name in fns:
        rate = nan if args.quality_only else len(pages) / seconds[name]
        p, r, f1 = quality[name]
        cmp = pages_vs_peer[name]
        ratios = {peer: rate / peer_rates[peer] for peer in PEERS}
        sys.stdout.write(f"{name:<46} {f1:6.3f} {p:6.3f} {r:6.3f} {cmp['median_f1']:6.3f} "
                         f"{cmp['share_worse']:6.1%} {worse_than_fast[name]:6.1%} {cmp['worst_gap']:6.3f} "
                         f"{rate:8.1f} {ratios[PEER]:7.2f} {ratios[PEER_FAST]:7.2f}\n")
        results.append({"extractor": name, "f1": f1, "precision": p, "recall": r, "pages_per_s": rate,
                        "speed_ratio": ratios[PEER], "speed_ratio_fast": ratios[PEER_FAST],
                        "share_worse_than_fast": worse_than_fast[name], **cmp})
    sys.stdout.write(f"median: median page F1; worse / worseF: share of pages with F1 below the default / "
                     f"fast peer's by more than {WORSE_BY}; worst: the largest default-peer-minus-ours page "
                     f"gap; x dflt / x fast: speed against the default / fast peer\n")
    sys.stdout.write(json.dumps({"trafilatura": trafilatura.__version__, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
