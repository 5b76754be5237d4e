"""Past one machine's memory: the same job on every engine, 1M then 3M documents.

    .venv/bin/python -m benchmarks.bench_scale [--sizes 1000000 3000000]
        [--engines direct-mp flink spark prism direct] [--work DIR] [--timeout-h 4] [--work-cpu]

The corpus (JSONL, ~1 KB a document, ~1 GB per million) is made from real text:
documents of 6 to 14 sentences drawn (seeded) from the sentence pool of
``../shared/data`` (Leipzig web sentences of 20 languages, the McCormick news articles,
four Gutenberg books), one language per document; 22% of the documents are edited
copies of earlier ones (word substitutions, deletions, insertions, a swapped sentence
pair, a header or footer, as in bench_dedup_quality) and 3% exact copies.

The job: extract (JSONL) → dedup_exact → dedup_minhash → tokenize (the Mistral
sentencepiece model of ../shared/data; 256 MiB shards). Each engine runs it as
``python -m pipelines.run --engine NAME`` in a fresh process; measured: wall seconds,
CPU seconds of the whole process tree (the driver, job server JVM, Prism, SDK workers:
``wait4`` of the tree, cross-checked by sampling ``/proc``), and the peak memory of the
tree (the sum of every process's PSS, sampled each second: shared pages are not counted
twice), also per stage and process name (``peak_by_stage_mb``: where a tree grows; with
the largest single process of a name, ``largest_by_stage_mb``, and the most of them alive
at once, ``most_by_stage``: a sum that grows by overlap, not by one process). A size
runs only on the engines that finished the size before. Every engine's
outputs are compared with the first engine's (counts per stage, the tokens' index).
Results are appended to ``<work>/results.jsonl``. While a run goes on, the sampler
rewrites ``<work>/progress-ENGINE-N.json`` every 10 seconds (the stage running, the peaks
so far, per stage and process), so a run stopped midway (a timeout, the memory limit,
Ctrl-C, a killed benchmark) still leaves where its memory went; an interrupted run is
stopped, written to ``results.jsonl`` with ``"exit": "interrupted"``, and the benchmark
ends there (exit 130). ``kill`` (TERM) to the benchmark does the same.

Per stage: the CPU the tree gained while the stage ran (``cpu_by_stage_s``, from the
per-second samples: a process that starts and ends between two samples is missed, so the
sum can fall short of ``cpu_s``), what building its pipelines cost (``graph``, from its
manifest) and, with ``--work-cpu``, the pure work of the stage on the same documents in
this process (``benchmarks.scale_work``) and the share of the stage's CPU that is not that
work (``framework_share``).

``spark-cluster`` and ``flink-cluster`` (issue 40): the benchmark starts the cluster
(``python -m pipelines.engines cluster KIND up``, in ``<work>/clusters``; ``--cluster-arg``
passes sizes) before the run and stops it after. The tree measured is then the run's and
the cluster's: every process of the cluster's process groups (master, workers and the
executors they start, JobManager, TaskManagers, the pool and its SDK workers), their CPU
counted from the run's start, memory per process name (``java Master``, ``java
TaskManagerRunner``, ...). ``shuffled_bytes``: what the engine's tasks wrote for other
tasks to read, from the engine's own counters: Spark's event log (the ``spark`` engines:
shuffle bytes written, summed over tasks) and Flink's REST API (``flink-cluster``: the
``write-bytes`` of every job vertex, summed over the cluster's jobs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from benchmarks import SHARED_DATA
from benchmarks.bench_dedup_quality import edit
from pipelines.engines import child_pids

ROOT = Path(__file__).resolve().parents[1]
SHARED = SHARED_DATA
ENGINES = ("direct-mp", "flink", "spark", "prism", "direct", "spark-cluster", "flink-cluster")
CLUSTERS = {"spark-cluster": "spark", "flink-cluster": "flink"}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# --- the corpus ----------------------------------------------------------------------

def sentence_pools() -> list[list[str]]:
    """Pools of real sentences, one per language or source."""
    pools = []
    for path in sorted((SHARED / "langid" / "lingua_sentences").glob("*.txt")):
        pools.append([s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip()])
    news = [line.split(" ", 1)[1] for line in
            (SHARED / "neardup" / "mccormick_articles_1000.train").read_text(encoding="utf-8").splitlines()]
    books = [" ".join(p.read_text(encoding="utf-8").split()) for p in sorted((SHARED / "text").glob("*.txt"))]
    english = [s for text in news + books for s in SENTENCE_END.split(text) if 20 <= len(s) <= 400]
    pools.append(english)
    return pools


def make_corpus(path: Path, n: int, seed: int = 0) -> int:
    """Writes ``n`` documents; returns the bytes of text written."""
    rng = random.Random(seed)
    pools = sentence_pools()
    weights = [len(p) for p in pools]
    recent: list[str] = []
    total = 0
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for i in range(n):
            r = rng.random()
            if recent and r < 0.03:
                text = rng.choice(recent)  # an exact copy
            elif recent and r < 0.25:
                text = edit(rng.choice(recent), rng.uniform(0.0, 0.15), rng)  # a near copy
            else:
                pool = rng.choices(pools, weights)[0]
                text = " ".join(rng.choice(pool) for _ in range(rng.randint(6, 14)))
            if len(recent) < 5000:
                recent.append(text)
            else:
                recent[rng.randrange(5000)] = text
            total += len(text)
            fh.write(json.dumps({"id": f"d{i:08d}", "text": text, "url": f"https://site{i % 997}.example/{i}"},
                                ensure_ascii=False) + "\n")
    tmp.rename(path)
    return total


def corpus(work: Path, n: int) -> Path:
    path = work / f"corpus-{n}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        size = make_corpus(path, n)
        print(f"corpus: {n:,} documents, {size / 1e9:.2f} GB of text in {time.perf_counter() - t0:.0f} s",
              flush=True)
    return path


def job_config(work: Path, data: Path, output: Path) -> Path:
    config = work / f"job-{output.name}.yaml"
    config.write_text(f"""output: {output}
inputs:
  - {{format: jsonl, path: "{data}"}}
extract: {{min_chars: 1}}
dedup: {{}}
tokenize: {{model: "{SHARED / 'models' / 'mistral_tokenizer.model.v1.model'}", seed: 1}}
beam_args: ["--runner=FnApiRunner"]
""")
    return config


# --- measuring a process tree --------------------------------------------------------

def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = child_pids(todo.pop())
        found += kids
        todo += kids
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _name(pid: int) -> str:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return "?"
    exe = os.path.basename(cmd[0].decode(errors="replace"))
    if exe.startswith("python") and len(cmd) > 2 and cmd[1] in (b"-m", b"-c"):
        if b"pipelines.worker_pool" in cmd[2]:
            return "python pool"
        return "python " + ("driver" if b"pipelines.run" in cmd[2] else "worker")
    if exe == "java":
        return "java " + _java_main(cmd)
    return exe


def _java_main(cmd: list[bytes]) -> str:
    """A JVM's main class, short (``Master``, ``TaskManagerRunner``), or its jar's name."""
    i = 1
    while i < len(cmd):
        arg = cmd[i].decode(errors="replace")
        if arg == "-jar" and i + 1 < len(cmd):
            return os.path.basename(cmd[i + 1].decode(errors="replace"))
        if arg in ("-cp", "-classpath"):
            i += 2
            continue
        if arg and not arg.startswith("-"):
            return arg.rsplit(".", 1)[-1]
        i += 1
    return "?"


def _cpu_s(pid: int) -> float:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


STAGES = ("extract", "dedup_exact", "dedup_minhash", "tokenize")


def stage_running(output: Optional[Path]) -> str:
    """The first stage of the job without a manifest yet (manifests are written last)."""
    if output is None:
        return "?"
    return next((s for s in STAGES if not (output / "manifests" / f"{s}.json").exists()), "done")


class TreeSampler(threading.Thread):
    """Each second: the PSS sum of a process and its descendants (peak kept), and the CPU
    seconds each process was last seen with; with ``output``, also each process name's
    peak per stage (where a process tree grows is a stage question)."""

    def __init__(self, pid: int, limit_kb: int, output: Optional[Path] = None,
                 progress: Optional[Path] = None, interval_s: float = 1.0, snapshot_every: int = 10,
                 also: Optional[Callable[[], list[int]]] = None) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.cpu, self.limit_kb, self.over = pid, 0, {}, limit_kb, False
        # ``also``: more processes to measure (a cluster's), their CPU counted from now on
        self.also = also or (lambda: [])
        self.cpu.update({p: _cpu_s(p) for p in self.also()})
        self.cpu_by_stage: dict[str, float] = {}  # CPU seconds the tree gained while each stage ran
        self.at_peak: dict[str, int] = {}  # process name → PSS MB at the peak
        self.output, self.progress = output, progress
        self.by_stage: dict[str, dict[str, int]] = {}  # stage → process name → its peak PSS MB
        # stage → process name → the largest one process of that name, and the most of them
        # alive at once: a sum that grows because more processes overlap (workers exiting
        # while new ones start) is told apart from one process that grows
        self.largest_by_stage: dict[str, dict[str, int]] = {}
        self.most_by_stage: dict[str, dict[str, int]] = {}
        self.interval_s, self.snapshot_every, self.samples = interval_s, snapshot_every, 0
        self.started = time.monotonic()
        self.stop = threading.Event()

    def snapshot(self) -> dict[str, Any]:
        """The figures so far, as ``run_engine`` reports them at the end."""
        return {"elapsed_s": round(time.monotonic() - self.started, 1), "samples": self.samples,
                "stage": stage_running(self.output), "peak_pss_mb": round(self.peak_kb / 1024),
                "peak_by_process_mb": dict(self.at_peak),
                "peak_by_stage_mb": {k: dict(v) for k, v in self.by_stage.items()},
                "largest_by_stage_mb": {k: dict(v) for k, v in self.largest_by_stage.items()},
                "most_by_stage": {k: dict(v) for k, v in self.most_by_stage.items()},
                "cpu_s_sampled": round(sum(self.cpu.values()), 1)}

    def write_progress(self) -> None:
        """``progress`` replaced whole (a reader never sees half a file)."""
        if self.progress is None:
            return
        tmp = self.progress.with_name(self.progress.name + ".tmp")
        tmp.write_text(json.dumps(self.snapshot()) + "\n")
        os.replace(tmp, self.progress)

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.sample()
            if self.samples % self.snapshot_every == 0:
                self.write_progress()
        self.write_progress()

    def sample(self) -> None:
        """One look at the tree: its PSS and CPU seconds; past the limit, the tree is killed."""
        self.samples += 1
        pids = list(dict.fromkeys([self.pid] + _descendants(self.pid) + self.also()))
        sizes = {p: _pss_kb(p) for p in pids}
        named: dict[str, int] = {}
        largest: dict[str, int] = {}
        count: dict[str, int] = {}
        for p, kb in sizes.items():
            name = _name(p)
            named[name] = named.get(name, 0) + kb // 1024
            largest[name] = max(largest.get(name, 0), kb // 1024)
            count[name] = count.get(name, 0) + 1
        running = stage_running(self.output)
        stage = self.by_stage.setdefault(running, {})
        for name, mb in named.items():
            stage[name] = max(stage.get(name, 0), mb)
        one, most = self.largest_by_stage.setdefault(running, {}), self.most_by_stage.setdefault(running, {})
        for name in named:
            one[name] = max(one.get(name, 0), largest[name])
            most[name] = max(most.get(name, 0), count[name])
        if sum(sizes.values()) > self.peak_kb:
            self.peak_kb = sum(sizes.values())
            self.at_peak = {}
            for p, kb in sizes.items():
                name = _name(p)
                self.at_peak[name] = self.at_peak.get(name, 0) + kb // 1024
        gained = 0.0
        for p in pids:
            now = _cpu_s(p)
            gained += max(0.0, now - self.cpu.get(p, 0.0))
            self.cpu[p] = max(self.cpu.get(p, 0.0), now)
        self.cpu_by_stage[running] = self.cpu_by_stage.get(running, 0.0) + gained
        if sum(sizes.values()) > self.limit_kb and not self.over:
            self.over = True  # stop before the machine's OOM killer picks a victim
            try:
                os.killpg(self.pid, 9)
            except ProcessLookupError:
                pass


def run_engine(engine: str, config: Path, log: Path, timeout_s: float,
               extra: tuple[str, ...] = (), limit_gb: float = 20.0, output: Optional[Path] = None,
               progress: Optional[Path] = None, env: Optional[dict[str, str]] = None,
               also: Optional[Callable[[], list[int]]] = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pipelines.run", "--config", str(config), "--engine", engine,
           "--no-progress", "--no-report", "--log-level", "INFO"] + list(extra)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
        sampler = TreeSampler(proc.pid, int(limit_gb * 1024 * 1024), output, progress, also=also)
        sampler.start()
        deadline = time.monotonic() + timeout_s
        status, usage = None, None
        while status is None:
            try:
                pid, raw, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status, usage = os.waitstatus_to_exitcode(raw), ru
                elif time.monotonic() > deadline:
                    status, usage = "timeout", _stop_tree(proc.pid)
                else:
                    time.sleep(0.5)
            except KeyboardInterrupt:  # the figures so far are written, then the benchmark ends
                status, usage = "interrupted", _stop_tree(proc.pid)
        sampler.stop.set()
        sampler.join()
        if sampler.over:
            status = f"killed above {limit_gb:g} GB"
    proc.returncode = status if isinstance(status, int) else -9
    wall = time.perf_counter() - t0
    tree_cpu = usage.ru_utime + usage.ru_stime
    return {"engine": engine, "exit": status, "wall_s": round(wall, 1),
            "cpu_s": round(max(tree_cpu, sum(sampler.cpu.values())), 1),
            "cpu_s_wait4": round(tree_cpu, 1), "cpu_s_sampled": round(sum(sampler.cpu.values()), 1),
            "peak_pss_mb": round(sampler.peak_kb / 1024), "peak_by_process_mb": sampler.at_peak,
            "peak_by_stage_mb": sampler.by_stage, "largest_by_stage_mb": sampler.largest_by_stage,
            "most_by_stage": sampler.most_by_stage,
            "cpu_by_stage_s": {k: round(v, 1) for k, v in sampler.cpu_by_stage.items()}}


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_tree(pid: int) -> Any:
    """SIGKILL to the run's process group (it has a session of its own), then its usage."""
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass
    return os.wait4(pid, 0)[2]


# --- outputs ---------------------------------------------------------------------------

def output_summary(output: Path) -> dict[str, Any]:
    stages = {}
    for stage in STAGES:
        path = output / "manifests" / f"{stage}.json"
        if path.exists():
            manifest = json.loads(path.read_text())
            stages[stage] = {"counts": manifest["counts"], "seconds": manifest["extra"].get("seconds"),
                             "graph": manifest["extra"].get("graph"),
                             "counters": {k: v for k, v in manifest["extra"].get("counters", {}).items()
                                          if k in ("cc_rounds", "edges", "largest_star_group")}}
    index = sorted(output.glob("tokens/*/index.json"))
    tokens = {}
    if index:
        data = json.loads(index[-1].read_text())
        tokens = {"num_tokens": data["num_tokens"], "num_docs": data["num_docs"],
                  "shards": [s["sha256"] for s in data["shards"]]}
    return {"stages": stages, "tokens": tokens}


def framework_share(work: dict[str, dict[str, float]], stage_cpu: dict[str, float]) -> dict[str, float]:
    """Per stage, the share of its CPU in the engine run (the tree's, sampled while it ran)
    that is not the pure work of ``scale_work`` on the same documents."""
    return {s: round(1 - work[s]["cpu_s"] / stage_cpu[s], 3) for s in work if stage_cpu.get(s)}


def over_floor(stage_cpu: dict[str, float], floor_cpu: dict[str, float],
               work: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per stage, its CPU in the engine run over the floor's plus the pure work (item 1's
    bound: at most 1.2). The work includes reading and writing, which the floor also pays:
    the ratio is generous by that much."""
    return {s: round(stage_cpu[s] / (floor_cpu[s] + work[s]["cpu_s"]), 2)
            for s in work if stage_cpu.get(s) and floor_cpu.get(s)}


def run_floor(engine: str, config: Path, args: argparse.Namespace, n: int, output: Path,
              work: Optional[dict[str, dict[str, float]]], result: dict[str, Any]) -> None:
    """The same job with the pure functions as no-ops (``benchmarks.floor``): its CPU per
    stage goes into ``result`` as ``floor_*``."""
    from benchmarks.floor import floor_env

    shutil.rmtree(output, ignore_errors=True)
    floor = run_engine(engine, config, args.work / f"log-{engine}-{n}-floor.txt", args.timeout_h * 3600,
                       tuple(args.beam_args), args.max_memory_gb, output, None, floor_env())
    result["floor_exit"] = floor["exit"]
    result["floor_cpu_s"] = floor["cpu_s"]
    result["floor_wall_s"] = floor["wall_s"]
    result["floor_cpu_by_stage_s"] = floor["cpu_by_stage_s"]
    if floor["exit"] == 0:
        result["floor_counts"] = {k: v["counts"] for k, v in output_summary(output)["stages"].items()}
        if work is not None:
            result["over_floor_plus_work"] = over_floor(result["cpu_by_stage_s"], floor["cpu_by_stage_s"], work)


def same_output(a: dict[str, Any], b: dict[str, Any]) -> bool:
    counts = lambda s: {k: v["counts"] for k, v in s["stages"].items()}  # noqa: E731
    return counts(a) == counts(b) and a["tokens"] == b["tokens"]


# --- clusters (issue 40) ---------------------------------------------------------------

@contextlib.contextmanager
def engine_cluster(engine: str, work: Path, args: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """For a cluster engine, its cluster up in ``<work>/clusters`` while the block runs:
    ``env`` (for the run), ``also`` (the cluster's processes, for the sampler) and its
    ``state``; for any other engine, nothing to do."""
    kind = CLUSTERS.get(engine)
    if kind is None:
        yield {"env": None, "also": None, "state": None}
        return
    from pipelines import clusters

    env = {**os.environ, "TOKENFACTORY_CLUSTERS": str(work / "clusters")}
    cli = [sys.executable, "-m", "pipelines.engines", "cluster", kind]
    up = subprocess.run(cli + ["up", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if up.returncode != 0:
        raise RuntimeError(f"cluster {kind} up failed: {up.stderr[-2000:]}")
    state = clusters.read_state(work / "clusters" / kind) or {"processes": {}}
    heads = [int(p) for p in state["processes"].values()]
    try:
        yield {"env": env, "state": state,
               "also": lambda: sorted({m for h in heads for m in [h, *clusters.group_members(h), *_descendants(h)]})}
    finally:
        subprocess.run(cli + ["down"], cwd=ROOT, env=env, capture_output=True, text=True)


SPARK_EVENT_LOG = ("--job_server_jvm_properties=-Dspark.eventLog.enabled=true",
                   "--job_server_jvm_properties=-Dspark.eventLog.dir={dir}")


def spark_shuffled_bytes(folder: Path) -> int:
    """Shuffle bytes written by every task of the Spark event logs in ``folder``."""
    total = 0
    for log in folder.glob("*"):
        with log.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                metrics = json.loads(line).get("Task Metrics") or {}
                total += int((metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0))
    return total


def flink_shuffled_bytes(rest: str) -> int:
    """``write-bytes`` of every vertex of every job the Flink cluster at ``rest`` ran."""
    import urllib.request

    def get(path: str) -> dict[str, Any]:
        with urllib.request.urlopen(rest + path, timeout=30) as response:
            return json.loads(response.read().decode("utf-8"))

    return sum(int(v.get("metrics", {}).get("write-bytes", 0))
               for job in get("/jobs/overview").get("jobs", []) for v in get(f"/jobs/{job['jid']}").get("vertices", []))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench_scale")
    parser.add_argument("--timeout-h", type=float, default=4.0, help="per engine and size")
    parser.add_argument("--keep", action="store_true", help="keep each run's output")
    parser.add_argument("--max-memory-gb", type=float, default=20.0,
                        help="a run whose process tree passes this is stopped (default 20 of 24 GB)")
    parser.add_argument("--work-cpu", action="store_true",
                        help="also the stages' pure work on the same documents in this process "
                             "(benchmarks.scale_work) and each stage's framework share")
    parser.add_argument("--floor", action="store_true",
                        help="after each engine's run, the same job with every pure function a no-op "
                             "(benchmarks.floor): the engine's own floor per stage")
    parser.add_argument("--beam-arg", action="append", default=[], dest="beam_args",
                        help="a Beam option for every run, e.g. --beam-arg=--job_server_jvm_properties=-Xmx2g")
    parser.add_argument("--cluster-arg", action="append", default=[], dest="cluster_args",
                        help="an option of `cluster KIND up` for the cluster engines, e.g. --cluster-arg=--memory=2g")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    # the run has a session of its own (a Ctrl-C in the terminal would not reach it): an
    # interrupt or a TERM to the benchmark stops the run's tree and records how far it got
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    engines = list(args.engines)
    cores = os.cpu_count() or 1
    for n in args.sizes:
        data = corpus(args.work, n)
        work = None
        if args.work_cpu:
            from benchmarks.scale_work import work_cpu

            work = work_cpu(data)
            print(json.dumps({"docs": n, "work_cpu_s": work}), flush=True)
        first: Optional[dict[str, Any]] = None
        finished = []
        for engine in engines:
            output = args.work / f"out-{engine}-{n}"
            shutil.rmtree(output, ignore_errors=True)
            events = args.work / f"spark-events-{engine}-{n}"
            extra = list(args.beam_args)
            if engine.startswith("spark"):
                shutil.rmtree(events, ignore_errors=True)
                events.mkdir()
                extra += [a.format(dir=events) for a in SPARK_EVENT_LOG]
            with engine_cluster(engine, args.work, tuple(args.cluster_args)) as cluster:
                result = run_engine(engine, job_config(args.work, data, output), args.work / f"log-{engine}-{n}.txt",
                                    args.timeout_h * 3600, tuple(extra), args.max_memory_gb, output,
                                    args.work / f"progress-{engine}-{n}.json", env=cluster["env"],
                                    also=cluster["also"])
                if engine.startswith("spark"):
                    result["shuffled_bytes"] = spark_shuffled_bytes(events)
                elif engine == "flink-cluster":
                    result["shuffled_bytes"] = flink_shuffled_bytes(cluster["state"]["rest"])
                if cluster["state"]:
                    result["cluster"] = {"kind": cluster["state"]["kind"], "spec": cluster["state"]["spec"],
                                         "args": args.cluster_args}
            result["beam_args"] = args.beam_args
            result.update(docs=n, cores=cores, input_bytes=data.stat().st_size)
            if result["exit"] == 0:
                summary = output_summary(output)
                result["stages"] = {k: v["seconds"] for k, v in summary["stages"].items()}
                result["graph"] = {k: v["graph"] for k, v in summary["stages"].items()}
                if work is not None:
                    result["work_cpu_s"] = {k: v["cpu_s"] for k, v in work.items()}
                    result["framework_share"] = framework_share(work, result["cpu_by_stage_s"])
                result["dedup"] = summary["stages"].get("dedup_minhash", {}).get("counters")
                result["docs_per_cpu_s"] = round(n / result["cpu_s"], 1)
                result["docs_per_s_per_core_wall"] = round(n / result["wall_s"] / cores, 1)
                first = first or summary
                result["same_output_as_first"] = same_output(first, summary)
                finished.append(engine)
                if args.floor:
                    run_floor(engine, job_config(args.work, data, output), args, n, output, work, result)
            with (args.work / "results.jsonl").open("a") as fh:
                fh.write(json.dumps(result) + "\n")
            print(json.dumps(result), flush=True)
            if not args.keep:
                shutil.rmtree(output, ignore_errors=True)
            if result["exit"] == "interrupted":
                return 130
        engines = finished
        if not engines:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
