"""The clean stage, documents/s per core, vs datatrove's filter chain on the same documents.

    .bench-venv/bin/python -m benchmarks.bench_clean      (make bench-env creates .bench-venv)

Documents: ~3 KB chunks of the books in ../shared/data/text plus ~3 KB documents made
of the Leipzig web sentences of 20 languages (../shared/data/langid). Ours: the whole
clean annotation and selection (PII redaction, fastText language ID, all Gopher / C4 /
FineWeb signals and rules, the anomaly detector (language model, two autoencoders), the fastText quality
classifier), in batches of 256 as the DoFn runs them; also the real stage graph
(Parquet in -> Clean -> Parquet out) on the documents x4 through Beam (FnApiRunner, one
worker), whole and minus the fixed start-up measured on 50 documents. Peer: datatrove's GopherRepetitionFilter ->
GopherQualityFilter -> C4QualityFilter(filter_no_terminal_punct=False) ->
FineWebQualityFilter, each document stopping at its first rejection, as in a datatrove
pipeline. CPU time of this one process, torch and fastText on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.anomalies import sized_documents
from models.anomaly import DetectorParams, train_detector
from models.fasttext_models import train_classifier
from transforms.clean.clean import AnomalyConfig, CleanConfig, LangIdConfig, Models, QualityConfig, annotate, select
from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, feature_matrix
from transforms.clean.signals import compute_signals
from transforms.doc import Doc

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def documents(size: int = 3000) -> list[str]:
    return sized_documents(DATA, size)


def build_models(texts: list[str], tmp: str) -> CleanConfig:
    """The production-size detector (its speed does not depend on training), trained for
    200 language-model steps on the benchmark documents themselves."""
    from models.fasttext_models import LanguageIdentifier
    from models.textlm import LMParams

    anomaly_dir = os.path.join(tmp, "anomaly")
    quality_path = os.path.join(tmp, "quality.bin")
    langs = [lang for lang, _ in LanguageIdentifier.load(str(DATA / "models" / "lid.176.ftz")).predict(texts)]
    x = feature_matrix([compute_signals(t) for t in texts])
    train_detector(texts, langs, x, texts, langs, x, FEATURE_NAMES, FEATURE_SET,
                   DetectorParams(lm=LMParams(steps=200))).save(anomaly_dir)
    half = len(texts) // 2
    train_classifier(texts[:half], texts[half:], quality_path)
    return CleanConfig(langid=LangIdConfig(model=str(DATA / "models" / "lid.176.ftz"), languages=()),
                       anomaly=AnomalyConfig(model=anomaly_dir),
                       quality=QualityConfig(model=quality_path, threshold=0.0))


def run_ours(docs: list[Doc], config: CleanConfig, models: Models) -> tuple[float, int]:
    kept = 0
    threshold = models.anomaly.threshold if models.anomaly else None
    t0 = time.process_time()
    for start in range(0, len(docs), config.batch_size):
        annotated, _ = annotate(docs[start:start + config.batch_size], models, config)
        kept += sum(select(d, config, threshold) is None for d in annotated)
    return time.process_time() - t0, kept


def run_beam(docs: list[Doc], config: CleanConfig, tmp: str) -> float:
    """Wall seconds of the real stage graph: Parquet docs in -> Clean -> Parquet out."""
    import apache_beam as beam
    import pyarrow as pa
    import pyarrow.parquet as pq
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.outputs import WriteStageOutputs
    from pipelines.stages import ReadDocs
    from transforms.clean.clean import Clean
    from transforms.doc import DOC_SCHEMA, doc_to_row

    path = os.path.join(tmp, f"docs-{len(docs)}.parquet")
    pq.write_table(pa.Table.from_pylist([doc_to_row(d) for d in docs], schema=DOC_SCHEMA), path)
    t0 = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        out = p | ReadDocs([path]) | Clean(config)
        out | WriteStageOutputs(os.path.join(tmp, f"out-{len(docs)}"), "clean")
    return time.perf_counter() - t0


def run_datatrove(texts: list[str]) -> tuple[float, int]:
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter,
                                            GopherQualityFilter, GopherRepetitionFilter)

    chain = [GopherRepetitionFilter(), GopherQualityFilter(),
             C4QualityFilter(filter_no_terminal_punct=False), FineWebQualityFilter()]
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    chain[1].filter(docs[0])  # loads spacy's tokenizer outside the timing
    kept = 0
    t0 = time.process_time()
    for doc in docs:
        ok = True
        for f in chain:
            result = f.filter(doc)
            if result is False or (isinstance(result, tuple) and not result[0]):
                ok = False
                break
        kept += ok
    return time.process_time() - t0, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-beam", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    texts = documents()
    docs = [Doc(id=str(i), url="", text=t, source="bench", fetched_at="") for i, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        config = build_models(texts, tmp)
        models = Models(config)
        run_ours(docs[:300], config, models)  # warm-up
        ours_s, ours_kept = min(run_ours(docs, config, models) for _ in range(3))
        beam_docs = docs * 4
        if args.skip_beam:
            beam_s = fixed_s = None
        else:
            fixed_s = run_beam(docs[:50], config, tmp)  # start-up, model loading, commit
            beam_s = run_beam(beam_docs, config, tmp)
    try:
        dt_s, dt_kept = run_datatrove(texts)
    except ImportError:
        sys.stdout.write("datatrove is not installed here: run with .bench-venv/bin/python\n")
        dt_s, dt_kept = float("nan"), 0
    n = len(docs)
    mean_chars = sum(map(len, texts)) / n
    sys.stdout.write(f"{n} documents, {mean_chars:.0f} characters on average\n")
    sys.stdout.write(f"ours: clean annotate+select   {n / ours_s:8.0f} docs/s per core (kept {ours_kept})\n")
    if beam_s is not None and fixed_s is not None:
        nb = len(beam_docs)
        sys.stdout.write(f"ours: stage in Beam, {nb} docs  {nb / beam_s:8.0f} docs/s wall (Parquet in/out, "
                         f"FnApiRunner, 1 worker; {fixed_s:.1f}s of it fixed start-up)\n")
        sys.stdout.write(f"ours: stage in Beam, steady    {nb / (beam_s - fixed_s):8.0f} docs/s "
                         f"(wall minus the 50-document run)\n")
    sys.stdout.write(f"datatrove 4-filter chain       {n / dt_s:8.0f} docs/s per core (kept {dt_kept})\n")
    sys.stdout.write(f"ratio ours / datatrove         {dt_s / ours_s:8.1f}x\n")
    sys.stdout.write(json.dumps({"docs": n, "ours_docs_per_s": n / ours_s,
                                 "beam_docs_per_s": None if beam_s is None else 4 * n / beam_s,
                                 "datatrove_docs_per_s": n / dt_s}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
