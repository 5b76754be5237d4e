"""The quality rules per language: kept share and drop reasons, old (English-only) vs new.

    .venv/bin/python -m benchmarks.bench_language_rules [--extra-sentences DIR]

Documents: (1) per language of ``../shared/data/langid/lingua_sentences``, 200 documents
of 5-12 held-out Leipzig sentences (the odd-numbered lines; the fit in
``benchmarks.fit_language_rules`` used the even-numbered ones), labelled by their file;
(2) the pages of the WARC files in ``../shared/data/warc`` extracted as the extract
stage does (cascade, >= 200 characters), labelled by lid.176 (score >= 0.5).

Columns: ``old``: the rules as before this change (``rules_languages: [en]``: other
languages are not checked, so all kept); ``en-rules``: the English rules (whitespace
words, Gopher's stop words, English thresholds) on every language; ``new``: the
per-language rules (``transforms/clean/language_rules.py``), the clean stage's default.
Reasons: the top reasons of the new rules' drops. With ``--extra-sentences DIR`` (lingua-py's
``language-testdata/sentences``, as for ``benchmarks.fit_language_rules``), also the
held-out documents of the languages fitted from it: ``script`` = the rules they had before
their tables (their script's default other than their own table, stop-word rule off),
``own`` = their own table. Also the CPU cost of the signals per
document by segmenter, before and after, on the clean benchmark's documents
(``benchmarks.anomalies.sized_documents``: ~3 KB chunks of the books and Leipzig runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

from benchmarks import SHARED_DATA
from benchmarks.anomalies import sized_documents
from benchmarks.fit_language_rules import SEED, documents, extra_languages, languages, sentences
from models.fasttext_models import LanguageIdentifier
from transforms.clean.language_rules import document_rules, profile, script_profile, tables
from transforms.clean.rules import QualityRules, first_failure
from transforms.clean.signals import compute_signals
from transforms.doc import RawRecord
from transforms.extract.extract import ExtractConfig, extract_record
from transforms.readers.warc import WarcLimits, iter_warc

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
WARC = DATA / "warc"
LID = DATA / "models" / "lid.176.ftz"
HELD_OUT_DOCS = 200


def warc_documents(min_chars: int = 200) -> list[str]:
    """The texts of the HTML responses of every WARC file in ``../shared/data/warc``."""
    config = ExtractConfig(min_chars=min_chars)
    texts = []
    for path in sorted(WARC.glob("*.warc*")):
        if ".wat." in path.name:
            continue
        with open(path, "rb") as fh:
            for item in iter_warc(fh, str(path), WarcLimits(), "extract"):
                if isinstance(item, RawRecord):
                    out = extract_record(item, config)
                    if not isinstance(out, tuple):
                        texts.append(out.text)
    return texts


def verdicts(lang: str, text: str, rules: QualityRules) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """The reason (None: kept) under old, en-rules and new."""
    old_signals = compute_signals(text)
    en_rules = first_failure(old_signals, rules)
    old = en_rules if lang == "en" else None
    prof = profile(lang, text)
    new = first_failure(compute_signals(text, prof.segment(), prof.stop_words), document_rules(rules, prof))
    return tuple(None if v is None else v[0] for v in (old, en_rules, new))  # type: ignore[return-value]


def extra_verdicts(lang: str, text: str, rules: QualityRules) -> tuple[Optional[str], Optional[str]]:
    """The reason (None: kept) under the script default and under the language's own table."""
    out = []
    for prof in (script_profile(lang, text, without=lang), profile(lang, text)):
        out.append(first_failure(compute_signals(text, prof.segment(), prof.stop_words), document_rules(rules, prof)))
    return tuple(None if v is None else v[0] for v in out)  # type: ignore[return-value]


def extra_table(rows: dict[str, list[tuple[Optional[str], ...]]]) -> str:
    lines = [f"{'lang':<6}{'docs':>6}{'script':>8}{'own':>7}  top reasons of the own table's drops"]
    for lang, verdicts_ in sorted(rows.items()):
        n = len(verdicts_)
        kept = [sum(v[i] is None for v in verdicts_) / n for i in range(2)]
        reasons = Counter(v[1] for v in verdicts_ if v[1] is not None).most_common(3)
        lines.append(f"{lang:<6}{n:>6}{kept[0]:>8.2f}{kept[1]:>7.2f}  " + ", ".join(f"{r} {c}" for r, c in reasons))
    script_kept = [v[0] is None for vs in rows.values() for v in vs]
    own_kept = [v[1] is None for vs in rows.values() for v in vs]
    lines.append(f"{'all':<6}{len(own_kept):>6}{sum(script_kept) / len(script_kept):>8.2f}"
                 f"{sum(own_kept) / len(own_kept):>7.2f}")
    return "\n".join(lines)


def table(rows: dict[str, list[tuple[Optional[str], ...]]], fallback: dict[str, str]) -> str:
    lines = [f"{'lang':<6}{'docs':>6}{'old':>7}{'en-rules':>10}{'new':>7}  top reasons of the new rules' drops"]
    for lang in sorted(rows):
        got = rows[lang]
        n = len(got)
        kept = [sum(v[i] is None for v in got) / n for i in range(3)]
        reasons = Counter(v[2] for v in got if v[2] is not None).most_common(3)
        note = f" [{fallback[lang]}]" if fallback.get(lang) else ""
        lines.append(f"{lang:<6}{n:>6}{kept[0]:>7.2f}{kept[1]:>10.2f}{kept[2]:>7.2f}  "
                     + ", ".join(f"{r} {c}" for r, c in reasons) + note)
    return "\n".join(lines)


def speed(texts: list[str], langs: list[str]) -> str:
    """Signals per document (ms, CPU) before (whitespace, English stop words) and after
    (the language's profile), by segmenter, on the clean benchmark's documents."""
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for text, lang in zip(texts, langs):
        prof = profile(lang, text)
        prof.segment()  # load the segmenter outside the timing
        groups[prof.segmenter].append((text, lang))
    out, total = [], [0.0, 0.0, 0]
    for name, pairs in sorted(groups.items()):
        start = time.process_time()
        for text, _ in pairs:
            compute_signals(text)
        old = time.process_time() - start
        start = time.process_time()
        for text, lang in pairs:
            prof = profile(lang, text)
            compute_signals(text, prof.segment(), prof.stop_words)
        new = time.process_time() - start
        total = [total[0] + old, total[1] + new, total[2] + len(pairs)]
        out.append(f"{name:<11}{len(pairs):>6} docs  {1000 * old / len(pairs):7.3f} -> {1000 * new / len(pairs):7.3f} "
                   f"ms/doc ({new / old:.1f}x)")
    out.append(f"{'all':<11}{total[2]:>6} docs  {1000 * total[0] / total[2]:7.3f} -> {1000 * total[1] / total[2]:7.3f} "
               f"ms/doc ({total[1] / total[0]:.2f}x)")
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=HELD_OUT_DOCS, help="held-out documents per language")
    parser.add_argument("--extra-sentences", type=Path, default=None, metavar="DIR",
                        help="also the languages fitted from this lingua-py sentences folder")
    args = parser.parse_args(argv)
    rules = QualityRules()
    leipzig: dict[str, list[tuple[Optional[str], ...]]] = {}
    for lang in languages():
        docs = documents(lang, sentences(lang, "held_out"), args.docs, SEED + 1)
        leipzig[lang] = [verdicts(lang, d, rules) for d in docs]
    print(f"Leipzig held-out documents ({args.docs} per language, 5-12 sentences), kept share:")
    print(table(leipzig, {}))
    if args.extra_sentences is not None:
        extra: dict[str, list[tuple[Optional[str], ...]]] = {}
        for lang in extra_languages(args.extra_sentences):
            if lang not in tables():
                continue  # not fitted (the committed table predates the folder's file)
            docs = documents(lang, sentences(lang, "held_out", args.extra_sentences), args.docs, SEED + 1)
            extra[lang] = [extra_verdicts(lang, d, rules) for d in docs]
        print(f"\nHeld-out documents of the {len(extra)} languages fitted from {args.extra_sentences} "
              f"({args.docs} per language), kept share:")
        print(extra_table(extra))
    lid = LanguageIdentifier.load(str(LID))
    texts = warc_documents()
    mixes = lid.identify(texts)
    warc: dict[str, list[tuple[Optional[str], ...]]] = defaultdict(list)
    fallback = {}
    for text, mix in zip(texts, mixes):
        lang = mix.lang if mix.score >= 0.5 else "und"
        warc[lang].append(verdicts(lang, text, rules))
        fallback[lang] = profile(lang, text).fallback
    print(f"\nWARC pages of ../shared/data/warc ({len(texts)} extracted, >= 200 chars; language by lid.176, "
          "und: score < 0.5):")
    print(table(warc, fallback))
    bench_docs = sized_documents(DATA)
    bench_langs = [m.lang for m in lid.identify(bench_docs)]
    print(f"\nSignals, CPU ms per document, the clean benchmark's {len(bench_docs)} documents (~3 KB; "
          "language by lid.176), before -> after, by segmenter:")
    print(speed(bench_docs, bench_langs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
