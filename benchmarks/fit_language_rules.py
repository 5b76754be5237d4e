"""Fit the per-language quality rules (stop words, threshold maps) on the Leipzig sentences.

    .venv/bin/python -m benchmarks.fit_language_rules [--check]

Reads ``../shared/data/langid/lingua_sentences/<lang>.txt`` (one real web sentence per
line, 20 languages), fits on the even-numbered lines (the odd-numbered ones are held out
for ``benchmarks.bench_language_rules``) with the method of
``transforms/clean/language_rules.py`` and writes ``transforms/clean/language_rules.json``:
per language its segmenter, stop words, the (a, b) map of each fitted rule, the default
thresholds those maps give and the reference medians, with the provenance. ``--check``
fits again and fails when the committed file differs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any, Optional

from transforms.clean import language_rules as lr
from transforms.clean.rules import RULES, QualityRules, threshold
from transforms.clean.segment import segmenter, segmenter_name
from transforms.clean.signals import STOP_WORDS, compute_signals
from transforms.doc import Signals

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT.parent / "shared" / "data" / "langid" / "lingua_sentences"
SEED = 18


def sentences(lang: str, half: str) -> list[str]:
    """The language's sentences of one half: "fit" (even lines) or "held_out" (odd)."""
    lines = [s.strip() for s in (SENTENCES / f"{lang}.txt").read_text(encoding="utf-8").splitlines()]
    lines = [s for s in lines if s]
    return lines[0::2] if half == "fit" else lines[1::2]


def documents(lang: str, pool: list[str], count: int, seed: int) -> list[str]:
    """``count`` documents of 5-12 sentences drawn from ``pool`` (each document without
    repeats), 1-3 sentences per line; sentences joined by a space, or by nothing where
    the language is written without spaces."""
    rng = random.Random(f"{seed}:{lang}")
    joiner = "" if segmenter_name(lang) in ("jieba", "chars") else " "
    docs = []
    for _ in range(count):
        picked = rng.sample(pool, min(rng.randint(5, 12), len(pool)))
        lines, i = [], 0
        while i < len(picked):
            step = rng.randint(1, 3)
            lines.append(joiner.join(picked[i:i + step]))
            i += step
        docs.append("\n".join(lines))
    return docs


def languages() -> list[str]:
    return sorted(p.stem for p in SENTENCES.glob("*.txt"))


def signals_of(lang: str, docs: list[str], stop_words: frozenset[str]) -> list[Signals]:
    name = segmenter_name(lang)
    segment = None if name == "whitespace" else segmenter(name)
    return [compute_signals(d, segment, stop_words) for d in docs]


def fit() -> dict[str, Any]:
    langs = languages()
    english_words = [w for s in sentences("en", "fit") for w in s.split()]
    coverage = lr.stop_word_coverage(english_words, STOP_WORDS)
    en_signals = signals_of("en", documents("en", sentences("en", "fit"), lr.REFERENCE_DOCS, SEED), STOP_WORDS)
    defaults = QualityRules()
    out: dict[str, Any] = {}
    for lang in langs:
        if lang == "en":
            continue
        pool = sentences(lang, "fit")
        seg = segmenter(segmenter_name(lang))
        stop_words = lr.fit_stop_words([w for s in pool for w in seg(s)], coverage)
        lang_signals = signals_of(lang, documents(lang, pool, lr.REFERENCE_DOCS, SEED), frozenset(stop_words))
        maps: dict[str, list[float]] = {}
        fitted: dict[str, Optional[float]] = {}
        medians: dict[str, list[float]] = {}
        for key in lr.FITTED_RULES:
            rule = lr.rule_of(key, RULES)
            english = [getattr(s, rule.signal) for s in en_signals]
            language = [getattr(s, rule.signal) for s in lang_signals]
            a, b = lr.fit_map(english, language, rule.direction.value)
            maps[key] = [a, b]
            fitted[key] = lr.mapped(threshold(defaults, rule), (a, b))  # type: ignore[assignment]
            medians[rule.signal] = [round(float(sorted(english)[len(english) // 2]), 4),
                                    round(float(sorted(language)[len(language) // 2]), 4)]
        out[lang] = {"segmenter": segmenter_name(lang), "fit_sentences": len(pool),
                     "stop_words": stop_words,
                     "stop_word_coverage": round(lr.stop_word_coverage(
                         [w for s in pool for w in seg(s)], stop_words), 4),
                     "maps": maps, "default_thresholds": fitted,
                     "reference_medians_en_vs_lang": medians}
    return {
        "about": "Per-language quality rules fitted by benchmarks/fit_language_rules.py; method in "
                 "transforms/clean/language_rules.py. Derived only (word lists and numbers): from the "
                 "Leipzig web sentences in ../shared/data/langid/lingua_sentences (source: "
                 "github.com/pemistahl/lingua-py language-testdata/sentences, Apache-2.0), even-numbered "
                 "lines of each file; reference documents seeded with seed 18.",
        "english_stop_words": sorted(STOP_WORDS),
        "coverage_target": round(coverage, 4),
        "reference_docs": lr.REFERENCE_DOCS,
        "languages": out,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed file differs")
    args = parser.parse_args(argv)
    text = json.dumps(fit(), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = lr.LANGUAGE_RULES_FILE.read_text(encoding="utf-8") == text
        print("language_rules.json is " + ("up to date" if same else "STALE: run the fit again"))
        return 0 if same else 1
    lr.LANGUAGE_RULES_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {lr.LANGUAGE_RULES_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
