"""The clean stage, documents/s per core, vs datatrove's filter chain on the same documents.

    .bench-venv/bin/python -m benchmarks.bench_clean [--rounds 3] [--skip-beam]
    (make bench-env creates .bench-venv)

Documents: ~3 KB chunks of the books in ../shared/data/text plus ~3 KB documents made
of the Leipzig web sentences of 20 languages (../shared/data/langid).

The same work on both sides: ours' Gopher repetition, Gopher quality, C4 (document rules)
and FineWeb rules (``compute_signals`` + ``first_failure``, English rules, whitespace
words) vs datatrove's GopherRepetitionFilter -> GopherQualityFilter ->
C4QualityFilter(filter_no_terminal_punct=False) -> FineWebQualityFilter, each document
stopping at its first rejection as in a datatrove pipeline, twice: with datatrove's own
word tokenizer for English (spaCy) and with ours (``WhitespaceRegexWords``: words are
``str.split()``, sentences our ``count_sentences`` regex), passed as the filters'
``language`` (datatrove's ``load_word_tokenizer`` takes a ``WordTokenizer`` instance).
Documents kept per side and how many decisions agree are printed.

More work on our side, for context: the whole clean annotation and selection (PII
redaction, fastText language ID, all Gopher / C4 / FineWeb signals and rules, the
anomaly detector (language model, two autoencoders), the fastText quality classifier),
in batches of 256 as the DoFn runs them; and the real stage graph (Parquet in -> Clean
-> Parquet out) on the documents x4 through Beam (FnApiRunner, one worker), whole and
minus the fixed start-up measured on 50 documents (one run each, wall time).

Every timed row runs ``--rounds`` times, interleaved round by round, and reports its best
round (CPU time of this one process; torch and fastText on one thread).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks import SHARED_DATA
from benchmarks.anomalies import sized_documents
from models.anomaly import DetectorParams, train_detector
from models.fasttext_models import train_classifier
from transforms.clean.clean import AnomalyConfig, CleanConfig, LangIdConfig, Models, QualityConfig, annotate, select
from transforms.clean.coherence import cross_signals
from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, feature_matrix
from transforms.clean.rules import QualityRules, first_failure
from transforms.clean.signals import SENTENCE_END, compute_signals
from transforms.doc import Doc

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA


def documents(size: int = 3000) -> list[str]:
    return sized_documents(DATA, size)


def build_models(texts: list[str], tmp: str) -> CleanConfig:
    """The production-size detector (its speed does not depend on training), trained for
    200 language-model steps on the benchmark documents themselves."""
    from models.fasttext_models import LanguageIdentifier
    from models.textlm import LMParams

    anomaly_dir = os.path.join(tmp, "anomaly")
    quality_path = os.path.join(tmp, "quality.bin")
    lid = LanguageIdentifier.load(str(DATA / "models" / "lid.176.ftz"))
    langs = [lang for lang, _ in lid.predict(texts)]
    x = feature_matrix([compute_signals(t) for t in texts])
    cross = cross_signals(texts, langs, lid.predict)
    train_detector(texts, langs, x, texts, langs, x, FEATURE_NAMES, FEATURE_SET,
                   DetectorParams(lm=LMParams(steps=200)), reference_cross=cross, corpus_cross=cross).save(anomaly_dir)
    half = len(texts) // 2
    train_classifier(texts[:half], texts[half:], quality_path)
    return CleanConfig(langid=LangIdConfig(model=str(DATA / "models" / "lid.176.ftz"), languages=()),
                       anomaly=AnomalyConfig(model=anomaly_dir),
                       quality=QualityConfig(model=quality_path, threshold=0.0))


Decision = Optional[str]  # None: kept; else the reason code of the first rule broken


class WhitespaceRegexWords:
    """Our word and sentence split in datatrove's ``WordTokenizer`` interface: words are
    ``str.split()`` (as ``compute_signals``), sentences end where ``count_sentences``
    counts one (so a text has as many spans as ``count_sentences`` says)."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        spans, start = [], 0
        for match in SENTENCE_END.finditer(text):
            spans.append((start, match.end()))
            start = match.end()
        return spans

    def sent_tokenize(self, text: str) -> list[str]:
        return [text[a:b].strip() for a, b in self.span_tokenize(text)]


def datatrove_word_tokenizer() -> Any:
    """A datatrove ``WordTokenizer`` that splits as ours does."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    class OurSplit(WhitespaceRegexWords, WordTokenizer):
        def __init__(self) -> None:
            WordTokenizer.__init__(self, "en")

    return OurSplit()


def datatrove_chain(language: Any = "en") -> list[Any]:
    """datatrove's four filters; ``language``: a language code (its own tokenizer for it,
    spaCy for English) or a ``WordTokenizer``."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    return [GopherRepetitionFilter(language=language), GopherQualityFilter(language=language),
            C4QualityFilter(filter_no_terminal_punct=False, language=language),
            FineWebQualityFilter(language=language)]


def run_ours(docs: list[Doc], config: CleanConfig, models: Models) -> tuple[float, int]:
    kept = 0
    threshold = models.anomaly.threshold if models.anomaly else None
    t0 = time.process_time()
    for start in range(0, len(docs), config.batch_size):
        annotated, _ = annotate(docs[start:start + config.batch_size], models, config)
        kept += sum(select(d, config, threshold) is None for d in annotated)
    return time.process_time() - t0, kept


def run_ours_rules(texts: list[str], rules: QualityRules) -> tuple[float, list[Decision]]:
    """Ours doing datatrove's work: every signal of every document, then the four rule
    families in datatrove's order (English rules, whitespace words)."""
    t0 = time.process_time()
    decisions = []
    for text in texts:
        failed = first_failure(compute_signals(text), rules)
        decisions.append(failed[0] if failed else None)
    return time.process_time() - t0, decisions


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


def run_datatrove(texts: list[str], chain: list[Any]) -> tuple[float, list[Decision]]:
    """The chain over fresh documents (C4QualityFilter rewrites a kept document's text to
    its kept lines, as in a datatrove pipeline); each stops at its first rejection."""
    from datatrove.data import Document

    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    decisions: list[Decision] = []
    t0 = time.process_time()
    for doc in docs:
        decision = None
        for f in chain:
            result = f.filter(doc)
            if result is False or (isinstance(result, tuple) and not result[0]):
                decision = f"{f.name.strip()}: {result[1] if isinstance(result, tuple) else 'rejected'}"
                break
        decisions.append(decision)
    return time.process_time() - t0, decisions


def best_of(rounds: int, runs: dict[str, Callable[[], tuple[float, Any]]]) -> dict[str, tuple[float, Any]]:
    """Every run ``rounds`` times, interleaved round by round: (least seconds, its result)."""
    best: dict[str, tuple[float, Any]] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            seconds, result = run()
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, result)
    return best


def agreement(a: list[Decision], b: list[Decision]) -> dict[str, Any]:
    """Keep decisions of two sides on the same documents, and why they part."""
    both = sum(x is None and y is None for x, y in zip(a, b))
    only_a = Counter(y for x, y in zip(a, b) if x is None and y is not None)
    only_b = Counter(x for x, y in zip(a, b) if x is not None and y is None)
    return {"kept_a": sum(x is None for x in a), "kept_b": sum(y is None for y in b), "kept_both": both,
            "same": sum((x is None) == (y is None) for x, y in zip(a, b)),
            "only_a_kept_b_reason": only_a.most_common(4), "only_b_kept_a_reason": only_b.most_common(4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of every row, interleaved (best of)")
    parser.add_argument("--skip-beam", action="store_true")
    args = parser.parse_args(argv)
    try:
        import datatrove.pipeline.filters  # noqa: F401
    except ImportError as e:
        sys.stderr.write(f"datatrove does not import here ({e}): run with .bench-venv/bin/python "
                         "(make bench-env)\n")
        return 2
    torch.set_num_threads(1)
    texts = documents()
    docs = [Doc(id=str(i), url="", text=t, source="bench", fetched_at="") for i, t in enumerate(texts)]
    rules = QualityRules()  # the four families in datatrove's order, the sources' defaults
    spacy_chain, ours_chain = datatrove_chain("en"), datatrove_chain(datatrove_word_tokenizer())
    for chain in (spacy_chain, ours_chain):  # loads spaCy outside the timing
        run_datatrove(texts[:5], chain)
    with tempfile.TemporaryDirectory() as tmp:
        config = build_models(texts, tmp)
        models = Models(config)
        run_ours(docs[:300], config, models)  # warm-up
        run_ours_rules(texts[:300], rules)
        best = best_of(args.rounds, {
            "ours_rules": lambda: run_ours_rules(texts, rules),
            "dt_spacy": lambda: run_datatrove(texts, spacy_chain),
            "dt_ours_split": lambda: run_datatrove(texts, ours_chain),
            "ours_clean": lambda: run_ours(docs, config, models),
        })
        beam_docs = docs * 4
        if args.skip_beam:
            beam_s = fixed_s = None
        else:
            fixed_s = run_beam(docs[:50], config, tmp)  # start-up, model loading, commit
            beam_s = run_beam(beam_docs, config, tmp)
    n = len(docs)
    ours_s, ours_dec = best["ours_rules"]
    sp_s, sp_dec = best["dt_spacy"]
    ws_s, ws_dec = best["dt_ours_split"]
    clean_s, clean_kept = best["ours_clean"]
    kept = lambda d: sum(x is None for x in d)  # noqa: E731
    mean_chars = sum(map(len, texts)) / n
    out = sys.stdout.write
    out(f"{n} documents, {mean_chars:.0f} characters on average; best of {args.rounds} interleaved rounds, "
        f"CPU of one core\n")
    out("| row | docs/s per core | kept | x datatrove (same split) | x datatrove (spaCy) |\n|---|---|---|---|---|\n")
    out(f"| ours: 4 rule families (whitespace words, regex sentences) | {n / ours_s:,.0f} | {kept(ours_dec)} | "
        f"{ws_s / ours_s:.1f} | {sp_s / ours_s:.1f} |\n")
    out(f"| datatrove: 4 filters, our split (whitespace words, our sentence regex) | {n / ws_s:,.0f} | "
        f"{kept(ws_dec)} | 1.00 | {sp_s / ws_s:.2f} |\n")
    out(f"| datatrove: 4 filters, its own split (spaCy) | {n / sp_s:,.0f} | {kept(sp_dec)} | "
        f"{ws_s / sp_s:.2f} | 1.00 |\n")
    out(f"| ours: whole clean annotate+select (more work: PII, language ID, anomaly, quality model) | "
        f"{n / clean_s:,.0f} | {clean_kept} | {ws_s / clean_s:.1f} | {sp_s / clean_s:.1f} |\n")
    if beam_s is not None and fixed_s is not None:
        nb = len(beam_docs)
        out(f"ours: whole clean stage in Beam, {nb} docs: {nb / beam_s:,.0f} docs/s wall (Parquet in/out, "
            f"FnApiRunner, 1 worker, one run; {fixed_s:.1f}s of it fixed start-up); steady "
            f"{nb / (beam_s - fixed_s):,.0f} docs/s (wall minus the 50-document run)\n")
    same, spacy = agreement(ours_dec, ws_dec), agreement(ours_dec, sp_dec)
    for label, a in (("our split", same), ("spaCy", spacy)):
        out(f"decisions, ours vs datatrove with {label}: {a['same']} of {n} agree; kept by both {a['kept_both']}; "
            f"kept by ours only {a['kept_a'] - a['kept_both']} (datatrove's reasons {a['only_a_kept_b_reason']}); "
            f"kept by datatrove only {a['kept_b'] - a['kept_both']} (our reasons {a['only_b_kept_a_reason']})\n")
    out(json.dumps({"docs": n, "rounds": args.rounds, "ours_rules_docs_per_s": n / ours_s,
                    "datatrove_our_split_docs_per_s": n / ws_s, "datatrove_spacy_docs_per_s": n / sp_s,
                    "ours_clean_docs_per_s": n / clean_s,
                    "kept": {"ours_rules": kept(ours_dec), "datatrove_our_split": kept(ws_dec),
                             "datatrove_spacy": kept(sp_dec), "ours_clean": clean_kept},
                    "agree_our_split": same, "agree_spacy": spacy,
                    "beam_docs_per_s": None if beam_s is None else len(beam_docs) / beam_s}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
