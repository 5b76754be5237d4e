"""Whole pipeline, documents/s per core: ours vs datatrove doing the same steps on the same WARC files.

    .bench-venv/bin/python -m benchmarks.bench_pipeline [--copies 20] [--rounds 2] [--skip-demo]
        [--variants same,cascade] [--stage-cpu]

(``make bench-env`` creates .bench-venv: datatrove 0.10.1, spaCy, this project.)

Two corpora, each fed to both sides as the same WARC files:

* ``warc``: the HTML-bearing WARC files of ../shared/data/warc (Common Crawl 2020-34 /
  2024-22 excerpts, dolma's wget crawl, warcio's example), ``--copies`` times, each copy
  its own set of files with fresh WARC-Record-IDs and URLs. Near-dedup then finds the
  copies as duplicates on both sides (1 of ``--copies`` kept): realistic for re-crawls,
  not for a Common Crawl dump. English >= 0.65 and all four rule families.
* ``demo``: the local pydoc site crawled once by our crawler (``pipelines.demo``'s site
  and ``configs/demo.yaml``'s crawl section), its WARC output; the demo's clean choice
  (English >= 0.5, Gopher repetition rules only) on both sides.

The steps, on both sides: WARC reading, HTML extraction, fastText language ID (lid.176.ftz,
English), Gopher repetition + Gopher quality + C4 (document rules only) + FineWeb rules,
MinHash near-dedup (5-word shingles, 14 bands x 8 rows), tokenization with the Mistral
tokenizer (sentencepiece on our side; its HF ``tokenizers`` conversion, same ids, on
datatrove's) into shuffled token files. Ours also runs exact URL dedup (see ``job_config``).

Variants (``--variants``), each an end-to-end pair of runs, so that framework cost and
algorithm choice are separate rows:

* ``same``: the same extractor on both sides, trafilatura with the same options (``fast``,
  no comments, no favour_precision, no deduplication; ours ``extract.method: trafilatura``,
  datatrove's ``Trafilatura(favour_precision=False, fast=True)``), and language ID over the
  whole text on both (ours ``langid.max_chars`` 10M, one window, as datatrove's
  ``LanguageFilter`` reads it): the frameworks' own cost.
* ``cascade``: ours' default extractor (``cascade``) against datatrove's trafilatura in the
  same fast mode, language ID as in ``same``: what the extraction algorithm buys.
* ``defaults``: each side's defaults (ours ``cascade`` with language ID over up to 8
  windows of 1,000 characters; datatrove's ``Trafilatura`` with favour_precision, whole-text
  language ID): the earlier figure.

(a) Per stage, in this process, the pure work of each side on the same inputs (one copy;
post-extraction rows: every document our extraction kept, same texts to both sides); CPU
time, median of ``--rounds + 1`` interleaved rounds.
(b) End to end: ``python -m pipelines.run`` (FnApiRunner, one worker; extract, clean,
dedup_exact, dedup_minhash, tokenize with the given model) vs datatrove's
LocalPipelineExecutor (tasks=1 / workers=1; 14 tasks for the bucket step) in a subprocess
each, interleaved, the median of ``--rounds`` (per side: the run of median CPU); on ``warc`` also on one copy, which gives the
fixed start-up and the marginal rate. Per core = CPU seconds (user + system) of the whole
process tree, from ``wait4``; docs in = WARC document records (the same number for both
sides).
(c) ``--stage-cpu``: where ours' CPU goes in the first variant on ``warc``: each stage
rerun alone in its own process (``--stages S --force --no-report``), CPU of its process
tree, beside a process that only imports and parses (``pipelines.run --help``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from benchmarks import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
WARC_FILES = ("cc_whirlwind.warc.gz", "dolma_sample-0000.warc.gz",
              "resiliparse_warcfile.warc.gz", "warcio_example.warc.gz")
LID_MODEL = DATA / "models" / "lid.176.ftz"
SPM_MODEL = DATA / "models" / "mistral_tokenizer.model.v1.model"
FAMILIES = ("gopher_repetition", "gopher_quality", "c4", "fineweb")


@dataclass(frozen=True)
class Steps:
    """The clean settings both sides use: language-score threshold and rule families."""

    lang_threshold: float = 0.65
    families: tuple[str, ...] = FAMILIES


FULL = Steps()
# configs/demo.yaml's choice: API reference pages are not prose (the full set keeps ~0 of them)
DEMO = Steps(lang_threshold=0.5, families=("gopher_repetition",))
LID_WHOLE_TEXT = 10_000_000  # langid.max_chars that reads a whole page, as datatrove's LanguageFilter


@dataclass(frozen=True)
class Variant:
    """What each side extracts with, and how much of a text ours' language ID reads."""

    name: str
    description: str
    ours_method: str  # extract.method
    ours_lid_whole_text: bool  # one window of LID_WHOLE_TEXT characters; False: the config's default
    dt_favour_precision: bool  # datatrove's Trafilatura(favour_precision=...)
    dt_fast: bool  # passed on to trafilatura.extract (our trafilatura method passes fast=True)
    extract_row: str  # the (a) rows of this variant's extraction and language ID
    lid_row: str

    def langid(self) -> dict[str, int]:
        return {"max_chars": LID_WHOLE_TEXT, "max_windows": 1} if self.ours_lid_whole_text else {}

    def dt_extractor(self) -> dict[str, Any]:
        return {"favour_precision": self.dt_favour_precision, "deduplicate": False, "timeout": 10,
                **({"fast": True} if self.dt_fast else {})}


EXTRACT_SAME = "extract HTML: trafilatura fast on both"
EXTRACT_CASCADE_FAST = "extract HTML: ours cascade / datatrove trafilatura fast"
EXTRACT_DEFAULTS = "extract HTML: ours cascade / datatrove trafilatura favour_precision"
LID_WHOLE = "language ID: whole text on both"
LID_DEFAULTS = "language ID: ours 8 x 1,000 chars / datatrove whole text"
VARIANTS = {v.name: v for v in (
    Variant("same", "same extractor (trafilatura fast, no comments) and whole-text language ID on both sides: "
                    "the frameworks' own cost", "trafilatura", True, False, True, EXTRACT_SAME, LID_WHOLE),
    Variant("cascade", "ours cascade vs datatrove's trafilatura fast, whole-text language ID on both: "
                       "the extraction algorithm's choice", "cascade", True, False, True, EXTRACT_CASCADE_FAST,
            LID_WHOLE),
    Variant("defaults", "each side's defaults: ours cascade, language ID over up to 8 x 1,000 characters; "
                        "datatrove trafilatura favour_precision, whole-text language ID", "cascade", False, True,
            False, EXTRACT_DEFAULTS, LID_DEFAULTS),
)}
_RECORD_ID = re.compile(rb"(WARC-Record-ID: <urn:uuid:)([0-9a-fA-F-]{36})")
_TARGET_URI = re.compile(rb"(WARC-Target-URI: <?)([^\s>]+)")


# --- inputs -------------------------------------------------------------------------

def _gzip_members(data: bytes):
    while data:
        d = zlib.decompressobj(31)
        yield d.decompress(data) + d.flush()
        data = d.unused_data


def _fresh_id(copy: int, original: bytes) -> bytes:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{copy}:{original.decode()}")).encode()


def _copy_url(copy: int, url: bytes) -> bytes:
    return url + (b"&" if b"?" in url else b"?") + b"copy=%d" % copy


def copy_warcs(sources: list[Path], dest: Path, copies: int) -> list[Path]:
    """``copies`` copies of every file, each record gzipped alone, with a WARC-Record-ID
    (a name-based UUID of copy and original id) and a target URL (``copy=K`` added to the
    query) unique to its copy: only the WARC header changes, so every Content-Length holds,
    and exact URL dedup does not see the copies; near-dedup does, on both sides."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(copies):
        for src in sources:
            members = []
            for raw in _gzip_members(src.read_bytes()):
                if raw.count(b"\r\nWARC-Record-ID:") > 1:
                    raise ValueError(f"{src}: several records in one gzip member; not supported")
                head, sep, block = raw.partition(b"\r\n\r\n")
                head = _RECORD_ID.sub(lambda m: m.group(1) + _fresh_id(k, m.group(2)), head)
                head = _TARGET_URI.sub(lambda m: m.group(1) + _copy_url(k, m.group(2)), head)
                raw = head + sep + block
                c = zlib.compressobj(6, zlib.DEFLATED, 31)
                members.append(c.compress(raw) + c.flush())
            path = dest / f"copy{k:03d}-{src.name}"
            path.write_bytes(b"".join(members))
            out.append(path)
    return out


def crawl_demo(dest: Path, work: Path) -> list[Path]:
    """Crawls the local pydoc site with configs/demo.yaml's crawl section; its WARC files."""
    from pipelines.demo import PydocSite, free_port

    template = (ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8")
    work.mkdir(parents=True, exist_ok=True)
    with PydocSite(free_port()) as site:
        config = work / "demo-crawl.yaml"
        config.write_text(template.replace("${DEMO_SITE}", site.url), encoding="utf-8")
        subprocess.run([sys.executable, "-m", "pipelines.run", "--config", str(config), "--stages", "crawl",
                        "--output", str(work / "demo-crawl"), "--no-progress", "--log-level", "WARNING"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    dest.mkdir(parents=True, exist_ok=True)
    files = []
    for src in sorted((work / "demo-crawl" / "crawl" / "warc").glob("*.warc.gz")):
        files.append(Path(shutil.copy(src, dest / src.name)))
    return files


def job_config(output: str, warc_glob: str, steps: Steps = FULL, variant: Variant = VARIANTS["same"],
               lid_model: str = str(LID_MODEL), tokenizer_model: str = str(SPM_MODEL)) -> dict[str, Any]:
    """Our job for the comparison: datatrove's steps and nothing else (no PII redaction,
    no anomaly or quality model, the given tokenizer: no training) plus exact URL dedup;
    the extractor and language-ID reach of ``variant``."""
    return {
        "output": output,
        "stages": ["extract", "clean", "dedup_exact", "dedup_minhash", "tokenize"],
        "inputs": [{"format": "warc", "path": warc_glob}],
        "extract": {"method": variant.ours_method, "timeout_s": 10, "min_chars": 1},
        "clean": {"langid": {"model": lid_model, "languages": ["en"], "threshold": steps.lang_threshold,
                             **variant.langid()},
                  "rules": {"families": list(steps.families)}, "rules_languages": ["en"], "redact_pii": False},
        # Exact dedup with both rules off fails to build (ExactDedup applies beam.Create to a
        # PCollection), and dedup_minhash reads dedup_exact's output: the URL rule (the
        # cheaper one) stays on, an extra step datatrove does not run.
        "dedup": {"exact_url": True, "exact_text": False},
        "tokenize": {"model": tokenizer_model},
        "beam_args": ["--runner=FnApiRunner"],
    }


def write_job_config(path: Path, config: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def hf_tokenizer_json(model: Path, out: Path) -> Path:
    """The sentencepiece model (BPE with byte fallback, as Mistral's) as an HF
    ``tokenizer.json``, built with ``tokenizers`` alone the way transformers 4's
    ``LlamaConverter`` (legacy, prefix space) builds it: the same file, and the same ids as
    sentencepiece (checked in ``check_same_ids``). Not transformers itself: 5.x (the one that
    installs beside datatrove's huggingface_hub >= 1.6) fails on this model in its converter,
    and sentencepiece's own protobuf module does not load with this protobuf runtime, so the
    pieces come from ``SentencePieceProcessor``."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    # LlamaConverter scores <unk>, <s>, </s> (ids 0-2) 0.0
    scores = {piece: 0.0 if i < 3 else sp.get_score(i) for i, piece in enumerate(pieces)}
    # transformers' generate_merges: every split of a piece into two pieces, highest merged
    # score first (then longer left, longer right; stable otherwise, splits by their ids)
    merges: list[tuple[str, str, float]] = []
    for piece, score in scores.items():
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    tokenizer = Tokenizer(BPE(vocab, [(left, right) for left, right, _ in merges], unk_token=pieces[sp.unk_id()],
                              fuse_unk=True, byte_fallback=True, dropout=None))
    # control pieces are special added tokens (sentencepiece's API does not tell user-defined
    # pieces apart, which LlamaConverter adds as plain added tokens: Mistral's model has none)
    tokenizer.add_tokens([AddedToken(pieces[i], normalized=False, special=True)
                          for i in range(len(pieces)) if sp.is_control(i)])
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(content=" ", left=1, right=0)])
    tokenizer.save(str(out))
    return out


def check_same_ids(texts: list[str], tokenizer_json: Path) -> int:
    """How many of ``texts`` the two tokenizers encode differently."""
    import sentencepiece as spm
    from tokenizers import Tokenizer

    ref = spm.SentencePieceProcessor(model_file=str(SPM_MODEL)).encode(texts)
    got = Tokenizer.from_file(str(tokenizer_json)).encode_batch(texts, add_special_tokens=False)
    return sum(r != g.ids for r, g in zip(ref, got))


# --- (a) per-stage pure work ---------------------------------------------------------

def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    result = fn()
    return time.process_time() - t0, result


def datatrove_filters(families: tuple[str, ...]) -> list[Any]:
    """datatrove's filters for our rule families (C4 without its line removal: ours
    measures it but does not rewrite the text)."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    make = {"gopher_repetition": GopherRepetitionFilter, "gopher_quality": GopherQualityFilter,
            "c4": lambda: C4QualityFilter(filter_no_terminal_punct=False), "fineweb": FineWebQualityFilter}
    return [make[f]() for f in families]


def _filter_chain(chain: list[Any], texts: list[str]) -> int:
    """Documents kept, each stopping at its first rejection as in a datatrove pipeline."""
    from datatrove.data import Document

    kept = 0
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        for f in chain:
            result = f.filter(doc)
            if result is False or (isinstance(result, tuple) and not result[0]):
                break
        else:
            kept += 1
    return kept


def stage_functions(files: list[Path], tmp: Path, tokenizer_json: Path,
                    steps: Steps) -> tuple[dict[str, tuple[Callable, Callable]], dict[str, int]]:
    """Per stage (ours, datatrove) zero-argument functions over the same inputs."""
    import io
    import struct

    import numpy as np
    import sentencepiece as spm
    from datatrove.data import Document
    from datatrove.pipeline.dedup.minhash import MinhashDedupSignature
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.readers.warc import process_record
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing
    from warcio.archiveiterator import ArchiveIterator

    from models.fasttext_models import LanguageIdentifier
    from transforms.clean.rules import QualityRules, first_failure
    from transforms.clean.signals import compute_signals
    from transforms.dedup.minhash import MinHasher, band_keys
    from transforms.doc import Doc, RawRecord
    from transforms.extract.extract import ExtractConfig, extract_record
    from transforms.readers.warc import WarcLimits, iter_warc

    blobs = [(str(f), f.read_bytes()) for f in files]

    def ours_read() -> list[RawRecord]:
        return [i for url, b in blobs for i in iter_warc(io.BytesIO(b), url, WarcLimits(), "extract")
                if isinstance(i, RawRecord)]

    def dt_read() -> list[dict]:
        return [d for _, b in blobs for r in ArchiveIterator(io.BytesIO(b)) if (d := process_record(r))]

    records, pages = ours_read(), dt_read()
    config = ExtractConfig(method="cascade", min_chars=1)
    texts = [d.text for d in (extract_record(r, config) for r in records) if isinstance(d, Doc)]
    trafilatura = Trafilatura(**VARIANTS["defaults"].dt_extractor())
    trafilatura_fast = Trafilatura(**VARIANTS["same"].dt_extractor())
    same_config = ExtractConfig(method="trafilatura", min_chars=1)

    lid = LanguageIdentifier.load(str(LID_MODEL), 1000, 8)  # the clean stage's default reach
    lid_whole = LanguageIdentifier.load(str(LID_MODEL), LID_WHOLE_TEXT, 1)
    language_filter = LanguageFilter(languages=["en"], language_threshold=steps.lang_threshold)
    language_filter.model.MODEL_URL = str(LID_MODEL)  # copied, not downloaded (PEERS.md)
    language_filter.filter(Document(text="warm up", id="0"))
    rules = QualityRules(families=steps.families)
    chain = datatrove_filters(steps.families)
    _filter_chain(chain, texts[:5])  # loads spaCy's tokenizer outside the timing
    hasher, sig = MinHasher(num_perm=112), MinhashDedupSignature(output_folder=str(tmp / "sig"))
    sp = spm.SentencePieceProcessor(model_file=str(SPM_MODEL), num_threads=1)
    hf = Tokenizer.from_file(str(tokenizer_json))
    hf.post_processor = TemplateProcessing(single="$A <EOS>", special_tokens=[("<EOS>", hf.token_to_id("</s>"))])
    batches = [texts[i:i + 256] for i in range(0, len(texts), 256)]

    def ours_tokenize() -> int:
        out = []
        for batch in batches:
            for ids in sp.encode(batch):
                ids.append(sp.eos_id())
                out.append(np.asarray(ids, dtype=np.uint16))
        return len(out)

    def dt_tokenize() -> int:
        return len([struct.pack(f"<{len(e.ids)}H", *e.ids) for e in hf.encode_batch(texts)])

    def dt_lid() -> list[bool]:
        return [language_filter.filter(Document(text=t, id=str(i))) for i, t in enumerate(texts)]

    functions = {
        "read WARC": (ours_read, dt_read),
        EXTRACT_SAME: (lambda: [extract_record(r, same_config) for r in records],
                       lambda: [trafilatura_fast.extract(p["text"]) for p in pages]),
        EXTRACT_CASCADE_FAST: (lambda: [extract_record(r, config) for r in records],
                               lambda: [trafilatura_fast.extract(p["text"]) for p in pages]),
        EXTRACT_DEFAULTS: (lambda: [extract_record(r, config) for r in records],
                           lambda: [trafilatura.extract(p["text"]) for p in pages]),
        LID_WHOLE: (lambda: [lid_whole.identify(b) for b in batches], dt_lid),
        LID_DEFAULTS: (lambda: [lid.identify(b) for b in batches], dt_lid),
        "quality rules": (lambda: [first_failure(compute_signals(t), rules) for t in texts],
                          lambda: _filter_chain(chain, texts)),
        "MinHash signatures": (lambda: [band_keys(s, 14, 8) for b in batches for s in hasher.signatures(b)],
                               lambda: [sig.get_signature(sh) for t in texts if (sh := sig.get_shingles(t)).size]),
        "tokenize": (ours_tokenize, dt_tokenize),
    }
    counts = {"records": len(records), "datatrove_pages": len(pages), "extracted": len(texts)}
    return functions, counts


def per_stage(files: list[Path], tmp: Path, tokenizer_json: Path, rounds: int, steps: Steps) -> dict[str, Any]:
    functions, counts = stage_functions(files, tmp, tokenizer_json, steps)
    seen: dict[str, list[list[float]]] = {name: [[], []] for name in functions}
    for _ in range(rounds):
        for name, fns in functions.items():
            for side, fn in enumerate(fns):
                seconds, _ = _cpu(fn)
                seen[name][side].append(seconds)
    return {"counts": counts, "seconds": {name: [_median(v[0]), _median(v[1])] for name, v in seen.items()}}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median CPU (the lower of the two middle ones for an even count: a run
    that happened, not an average of two)."""
    ordered = sorted(runs, key=lambda r: r["cpu"])
    return ordered[(len(ordered) - 1) // 2]


# --- (b) end to end ------------------------------------------------------------------

def run_tree(args: list[str]) -> dict[str, float]:
    """Wall and CPU seconds (user + system, the process and every descendant it reaped)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr_chunks: list[bytes] = []
    import threading

    reader = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()))  # type: ignore[union-attr]
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = b"".join(stderr_chunks).decode("utf-8", "replace")[-3000:]
        raise RuntimeError(f"{args[:4]} exited with {proc.returncode}:\n{tail}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime}


OURS_STAGES = ("extract", "clean", "dedup_exact", "dedup_minhash", "tokenize")


def _ours_command(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.run", "--config", str(config), "--force", "--no-progress",
            "--log-level", "WARNING", *extra]


def ours_end_to_end(input_dir: Path, work: Path, steps: Steps, variant: Variant) -> dict[str, Any]:
    output = work / "ours"
    if output.exists():
        shutil.rmtree(output)
    work.mkdir(parents=True, exist_ok=True)
    config = write_job_config(work / "ours.yaml",
                              job_config(str(output), str(input_dir / "*.warc.gz"), steps, variant))
    times = run_tree(_ours_command(config))
    stages = {}
    for stage in ("extract", "clean", "dedup_exact", "dedup_minhash", "tokenize"):
        m = json.loads((output / "manifests" / f"{stage}.json").read_text())
        c = m["counts"]
        stages[stage] = {"in": c["records_in"], "out": c["out"], "seconds": m["extra"]["seconds"]}
    index = next((output / "tokens").glob("*/index.json"))
    stages["tokenize"]["out"] = json.loads(index.read_text())["num_docs"]
    return {**times, "stages": stages, "config": str(config)}


def ours_stage_cpu(config: Path) -> dict[str, Any]:
    """CPU seconds of ours' process tree per stage, each stage rerun alone over the outputs
    of the run that wrote ``config`` (``--no-report``), and of a process that imports
    ``pipelines.run`` and parses its arguments only (``start-up``). Each stage's manifest
    gives what building its pipelines cost (``graph``: pipelines, transforms, build CPU);
    the reruns also time one translation of each pipeline to its runner-API proto
    (``TOKENFACTORY_MEASURE_TRANSLATION``), an extra call taken back out of the stage's CPU."""
    import yaml

    from pipelines.beam_runs import MEASURE_TRANSLATION

    output = Path(yaml.safe_load(config.read_text())["output"])
    out: dict[str, Any] = {"start-up": run_tree([sys.executable, "-m", "pipelines.run", "--help"])["cpu"]}
    os.environ[MEASURE_TRANSLATION] = "1"
    try:
        for stage in OURS_STAGES:
            cpu = run_tree(_ours_command(config, "--stages", stage, "--no-report"))["cpu"]
            graph = json.loads((output / "manifests" / f"{stage}.json").read_text())["extra"].get("graph", {})
            out[stage] = cpu - graph.get("translate_cpu_s", 0.0)
            out[f"graph {stage}"] = graph
    finally:
        del os.environ[MEASURE_TRANSLATION]
    out["whole run, --no-report"] = run_tree(_ours_command(config, "--no-report"))["cpu"]
    return out


def _total(value: Any) -> float:
    return float(value["total"] if isinstance(value, dict) else value or 0)


def datatrove_job(spec: dict[str, Any]) -> None:
    """Runs in its own process (``--datatrove-job``): the same steps as ours, datatrove's way."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.readers import JsonlReader, WarcReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    work = Path(spec["work"])
    cfg = MinhashConfig()  # 5-word shingles, 14 buckets x 8 hashes
    language_filter = LanguageFilter(languages=["en"], language_threshold=float(spec["lang_threshold"]))
    language_filter.model.MODEL_URL = spec["lid"]
    d = {k: str(work / k) for k in ("filtered", "sigs", "buckets", "remove", "tokens")}
    steps = [
        ("extract+clean", [WarcReader(spec["input"], glob_pattern="*.warc.gz"),
                           Trafilatura(**spec["extractor"]), language_filter,
                           *datatrove_filters(tuple(spec["families"])), JsonlWriter(d["filtered"])], 1),
        ("minhash signatures", [JsonlReader(d["filtered"]), MinhashDedupSignature(d["sigs"], config=cfg)], 1),
        ("minhash buckets", [MinhashDedupBuckets(d["sigs"], d["buckets"], config=cfg)], cfg.num_buckets),
        ("minhash cluster", [MinhashDedupCluster(d["buckets"], d["remove"], config=cfg)], 1),
        ("minhash filter+tokenize", [JsonlReader(d["filtered"]), MinhashDedupFilter(d["remove"]),
                                     DocumentTokenizer(d["tokens"], tokenizer_name_or_path=spec["tokenizer"],
                                                       eos_token="</s>")], 1),
    ]
    summary = []
    for i, (name, pipeline, tasks) in enumerate(steps):
        t0 = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                              logging_dir=str(work / "logs" / f"{i}")).run()
        stats = json.loads((work / "logs" / f"{i}" / "stats.json").read_text())
        summary.append({"name": name, "wall": time.perf_counter() - t0,
                        "steps": [{"name": s["name"], "time": _total(s["time_stats"]), "stats": s["stats"]}
                                  for s in stats]})
    (work / "summary.json").write_text(json.dumps(summary))


def datatrove_end_to_end(input_dir: Path, work: Path, tokenizer_json: Path, steps: Steps,
                         variant: Variant) -> dict[str, Any]:
    dt = work / "datatrove"
    if dt.exists():
        shutil.rmtree(dt)
    dt.mkdir(parents=True)
    spec = {"input": str(input_dir), "work": str(dt), "lid": str(LID_MODEL), "tokenizer": str(tokenizer_json),
            "lang_threshold": steps.lang_threshold, "families": list(steps.families),
            "extractor": variant.dt_extractor()}
    times = run_tree([sys.executable, "-m", "benchmarks.bench_pipeline", "--datatrove-job", json.dumps(spec)])
    return {**times, "executors": json.loads((dt / "summary.json").read_text())}


def _step(run: dict[str, Any], fragment: str) -> dict[str, Any]:
    """The first datatrove step whose name contains ``fragment`` (time and stats)."""
    for executor in run["executors"]:
        for step in executor["steps"]:
            if fragment.lower() in step["name"].lower():
                return step
    return {"time": 0.0, "stats": {}}


def _has_step(run: dict[str, Any], fragment: str) -> bool:
    return any(fragment.lower() in step["name"].lower() for e in run["executors"] for step in e["steps"])


def _n(stats: dict[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    return int(value["n"] if key == "tokens" else value["total"]) if isinstance(value, dict) else int(value)


def datatrove_stages(dt: dict[str, Any]) -> dict[str, tuple[float, int, int]]:
    """Per our stage name: (seconds datatrove's steps recorded, docs in, docs out)."""
    read, traf = _step(dt, "warc"), _step(dt, "trafilatura")
    names = ("language", "gopher rep", "gopher qual", "c4 qual", "fineweb")
    filters = [_step(dt, f) for f in names if _has_step(dt, f)]
    minhash = [_step(dt, f"minhash stage {k}") for k in (1, 2, 3, 4)]
    tok = _step(dt, "✍")
    return {
        "extract": (read["time"] + traf["time"], _n(read["stats"], "documents"), _n(traf["stats"], "forwarded")),
        "clean": (sum(f["time"] for f in filters), _n(filters[0]["stats"], "total"),
                  _n(filters[-1]["stats"], "forwarded")),
        "dedup_minhash": (sum(m["time"] for m in minhash), _n(minhash[3]["stats"], "total"),
                          _n(minhash[3]["stats"], "forwarded")),
        "tokenize": (tok["time"], _n(minhash[3]["stats"], "forwarded"), _n(tok["stats"], "tokens")),
    }


def _stage_docs(row: str, counts: dict[str, int]) -> int:
    """Documents an (a) row times: WARC records for reading and extraction, else texts."""
    return counts["records"] if row == "read WARC" or row.startswith("extract HTML") else counts["extracted"]


def pure_cpu(a: dict[str, Any], entering: dict[str, int]) -> float:
    """CPU seconds the (a) rates predict for one side: each stage's cost per document
    times the documents that entered that stage in its end-to-end run."""
    n = a["counts"]
    per_doc = {name: sec / _stage_docs(name, n) for name, sec in a["seconds"].items()}
    return (entering["extract"] * (per_doc["read WARC"] + per_doc[a["extract_row"]])
            + entering["clean"] * per_doc[a["lid_row"]]
            + entering["rules"] * per_doc["quality rules"]
            + entering["dedup_minhash"] * per_doc["MinHash signatures"]
            + entering["tokenize"] * per_doc["tokenize"])


# --- report --------------------------------------------------------------------------

def report_per_stage(corpus: str, result: dict[str, Any], steps: Steps) -> list[str]:
    n = result["counts"]
    lines = [f"\n[{corpus}] (a) per-stage pure work, CPU of one process, median of rounds "
             f"({n['records']} WARC document records, {n['datatrove_pages']} HTML pages read by datatrove, "
             f"{n['extracted']} documents extracted by ours: the rows below extraction use these texts on both sides; "
             f"language threshold {steps.lang_threshold}, rules: {', '.join(steps.families)})",
             "| stage | docs | ours docs/s per core | datatrove docs/s per core | ours / datatrove |",
             "|---|---|---|---|---|"]
    for name, (ours, dt) in result["seconds"].items():
        docs = _stage_docs(name, n)
        lines.append(f"| {name} | {docs} | {docs / ours:,.0f} | {docs / dt:,.0f} | {dt / ours:.1f} |")
    return lines


def report_end_to_end(corpus: str, variant: Variant, ours: dict[str, Any], dt: dict[str, Any],
                      a: dict[str, Any], small: Optional[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    s, docs_in = ours["stages"], ours["stages"]["extract"]["in"]
    lines = [f"\n[{corpus}] (b) end to end, variant {variant.name!r}: {variant.description}; "
             f"{docs_in} WARC document records in, median of rounds "
             "(per core: docs in / CPU seconds of the process tree)",
             "| | wall s | CPU s | cores used | docs/s per core |", "|---|---|---|---|---|"]
    for name, run in (("ours: pipelines.run (Beam FnApiRunner)", ours), ("datatrove LocalPipelineExecutor", dt)):
        lines.append(f"| {name} | {run['wall']:.1f} | {run['cpu']:.1f} | {run['cpu'] / run['wall']:.2f} | "
                     f"{docs_in / run['cpu']:.1f} |")
    lines.append(f"| **ours / datatrove** | {dt['wall'] / ours['wall']:.2f}x | {dt['cpu'] / ours['cpu']:.2f}x | | "
                 f"**{dt['cpu'] / ours['cpu']:.2f}x** |")
    if small is not None:
        so, sd = small
        d_docs = docs_in - so["stages"]["extract"]["in"]
        mo, md = (ours["cpu"] - so["cpu"]) / d_docs, (dt["cpu"] - sd["cpu"]) / d_docs
        lines.append(f"| marginal (this run minus the 1-copy run, {d_docs} docs): ours / datatrove | | "
                     f"{mo * d_docs:.1f} / {md * d_docs:.1f} | | {1 / mo:.1f} / {1 / md:.1f} = **{md / mo:.2f}x** |")
        lines.append(f"| fixed start-up (1-copy CPU minus its docs x marginal): ours / datatrove | | "
                     f"{so['cpu'] - mo * so['stages']['extract']['in']:.1f} / "
                     f"{sd['cpu'] - md * so['stages']['extract']['in']:.1f} | | |")
    dts = datatrove_stages(dt)
    lines += ["", "per stage, wall seconds as each side records them (ours: manifest; datatrove: its step "
              "timers, spaCy loading inside the first Gopher filter), documents in -> out:",
              "| stage | ours s | ours in -> out | datatrove s | datatrove in -> out |", "|---|---|---|---|---|"]
    for stage in ("extract", "clean", "dedup_exact", "dedup_minhash", "tokenize"):
        o = s[stage]
        if stage in dts:
            t, i, out = dts[stage]
            dt_cells = f"{t:.1f} | {i} -> {out}"
        else:
            dt_cells = "— | — (not a datatrove step)"
        lines.append(f"| {stage} | {o['seconds']:.1f} | {o['in']} -> {o['out']} | {dt_cells} |")
    stages = ("extract", "clean", "dedup_minhash", "tokenize")
    # ours computes every signal of every document it cleans; datatrove's rules see only
    # the documents its language filter kept
    rows = {"counts": a["counts"], "extract_row": variant.extract_row, "lid_row": variant.lid_row}
    ours_pure = pure_cpu({**rows, "seconds": {k: v[0] for k, v in a["seconds"].items()}},
                         {**{k: s[k]["in"] for k in stages}, "rules": s["clean"]["in"]})
    dt_pure = pure_cpu({**rows, "seconds": {k: v[1] for k, v in a["seconds"].items()}},
                       {**{k: dts[k][1] for k in stages}, "rules": _n(_step(dt, "gopher rep")["stats"], "total")})
    lines.append(f"harness (end-to-end CPU minus the (a) work for the documents each stage saw): ours "
                 f"{ours['cpu']:.1f} - {ours_pure:.1f} = {ours['cpu'] - ours_pure:.1f} s; datatrove "
                 f"{dt['cpu']:.1f} - {dt_pure:.1f} = {dt['cpu'] - dt_pure:.1f} s")
    return lines


def _median_pair(input_dir: Path, work: Path, tokenizer_json: Path, rounds: int,
                 steps: Steps, variant: Variant) -> tuple[dict[str, Any], dict[str, Any]]:
    """The median-CPU run of each side, of ``rounds`` interleaved end-to-end runs."""
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for _ in range(rounds):
        runs.append((ours_end_to_end(input_dir, work, steps, variant),
                     datatrove_end_to_end(input_dir, work, tokenizer_json, steps, variant)))
        sys.stderr.write(f"  {variant.name} {input_dir.name}: ours {runs[-1][0]['cpu']:.1f} CPU s, "
                         f"datatrove {runs[-1][1]['cpu']:.1f} CPU s\n")
    return median_run([r[0] for r in runs]), median_run([r[1] for r in runs])


def report_stage_cpu(corpus: str, variant: Variant, ours: dict[str, Any], cpu: dict[str, float]) -> list[str]:
    docs_in = ours["stages"]["extract"]["in"]
    start = cpu["start-up"]
    lines = [f"\n[{corpus}] (c) where ours' CPU goes, variant {variant.name!r}: each stage rerun alone in its "
             f"own process over the same inputs (CPU of its process tree; one run each); a process that only "
             f"imports pipelines.run and parses its arguments: {start:.1f} s",
             "| stage | docs in | CPU s | CPU s minus the import-only process | share of the sum | pipelines "
             "(transforms) | graph build CPU s | one translation CPU s | graph share of the stage |",
             "|---|---|---|---|---|---|---|---|---|"]
    total = sum(cpu[st] - start for st in OURS_STAGES)
    for st in OURS_STAGES:
        g = cpu.get(f"graph {st}", {})
        build, translate = g.get("build_cpu_s", 0.0), g.get("translate_cpu_s", 0.0)
        lines.append(f"| {st} | {ours['stages'][st]['in']} | {cpu[st]:.1f} | {cpu[st] - start:.1f} | "
                     f"{(cpu[st] - start) / total:.0%} | {g.get('pipelines', 0)} ({g.get('transforms', 0)}) | "
                     f"{build:.2f} | {translate:.2f} | {(build + translate) / cpu[st]:.0%} |")
    whole = cpu["whole run, --no-report"]
    lines.append(f"whole run in one process: {ours['cpu']:.1f} s (median end-to-end, with the report), "
                 f"{whole:.1f} s with --no-report; {docs_in / whole:.1f} docs/s per core without the report")
    return lines


def run_corpus(corpus: str, files: list[Path], input_dir: Path, work: Path, tokenizer_json: Path,
               rounds: int, steps: Steps, variants: list[Variant],
               stage_cpu: bool) -> tuple[list[str], dict[str, Any]]:
    first = [f for f in files if f.name.startswith("copy000-")]
    a = per_stage(first or files, work / f"{corpus}-a", tokenizer_json, rounds + 1, steps)
    lines = report_per_stage(corpus, a, steps)
    for line in lines:
        sys.stdout.write(line + "\n")
    one = None
    if first and len(first) < len(files):  # a 1-copy run gives the fixed start-up and the marginal rate
        one = work / f"{corpus}-one-copy"
        one.mkdir(parents=True, exist_ok=True)
        for f in first:
            shutil.copy(f, one / f.name)
    summary: dict[str, Any] = {"per_stage": a, "variants": {}}
    for variant in variants:
        small = None if one is None else _median_pair(one, work / f"{corpus}-{variant.name}-small", tokenizer_json,
                                                    rounds, steps, variant)
        ours, dt = _median_pair(input_dir, work / f"{corpus}-{variant.name}", tokenizer_json, rounds, steps, variant)
        part = report_end_to_end(corpus, variant, ours, dt, a, small)
        cpu = None
        if stage_cpu and variant is variants[0]:
            cpu = ours_stage_cpu(Path(ours["config"]))
            part += report_stage_cpu(corpus, variant, ours, cpu)
        for line in part:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        lines += part
        summary["variants"][variant.name] = {"docs_in": ours["stages"]["extract"]["in"], "ours": ours,
                                             "datatrove": dt, "small": small, "stage_cpu": cpu,
                                             "datatrove_stages": datatrove_stages(dt)}
    return lines, summary


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=20, help="copies of the WARC set (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="end-to-end rounds per side (default 2)")
    parser.add_argument("--skip-demo", action="store_true", help="only the WARC corpus (no pydoc crawl)")
    parser.add_argument("--variants", default="same,cascade",
                        help=f"comma-separated, of {', '.join(VARIANTS)} (default same,cascade)")
    parser.add_argument("--stage-cpu", action="store_true",
                        help="on warc, rerun each of ours' stages alone for the first variant: CPU per stage")
    parser.add_argument("--datatrove-job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        import datatrove.pipeline.filters  # noqa: F401
    except ImportError as e:
        sys.stderr.write(f"datatrove does not import here ({e}): run with .bench-venv/bin/python "
                         "(make bench-env)\n")
        return 2
    if args.datatrove_job:
        datatrove_job(json.loads(args.datatrove_job))
        return 0
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    variants = [VARIANTS[v] for v in args.variants.split(",")]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    lines: list[str] = []
    summaries: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_pipeline-") as tmp_name:
        tmp = Path(tmp_name)
        tokenizer_json = hf_tokenizer_json(SPM_MODEL, tmp / "tokenizer.json")
        corpora = [("warc", FULL, lambda d: copy_warcs([DATA / "warc" / n for n in WARC_FILES], d, args.copies))]
        if not args.skip_demo:
            corpora.append(("demo", DEMO, lambda d: crawl_demo(d, tmp)))
        for corpus, steps, make in corpora:
            input_dir = tmp / f"{corpus}-in"
            t0 = time.perf_counter()
            files = make(input_dir)
            sys.stderr.write(f"{corpus}: {len(files)} WARC files ready in {time.perf_counter() - t0:.1f}s\n")
            corpus_lines, summaries[corpus] = run_corpus(corpus, files, input_dir, tmp, tokenizer_json,
                                                         args.rounds, steps, variants,
                                                         args.stage_cpu and corpus == "warc")
            lines += corpus_lines
        sample = [t for t in (DATA / "text").glob("*.txt")][:1]
        texts = [p.read_text(encoding="utf-8")[i:i + 3000] for p in sample for i in range(0, 300000, 3000)]
        differ = check_same_ids(texts, tokenizer_json)
        sys.stdout.write(f"\ntokenizers: sentencepiece and the converted tokenizer.json disagree on "
                         f"{differ} of {len(texts)} documents\n")
    compact = {c: {v: {"docs_in": s["docs_in"], "ours_cpu": s["ours"]["cpu"], "ours_wall": s["ours"]["wall"],
                       "datatrove_cpu": s["datatrove"]["cpu"], "datatrove_wall": s["datatrove"]["wall"],
                       "ratio_per_core": s["datatrove"]["cpu"] / s["ours"]["cpu"],
                       "ours_stages": s["ours"]["stages"], "ours_stage_cpu": s["stage_cpu"]}
                   for v, s in summary["variants"].items()} for c, summary in summaries.items()}
    sys.stdout.write(json.dumps(compact) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
