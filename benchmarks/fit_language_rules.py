"""Fit the per-language quality rules (stop words, threshold maps) on the Leipzig sentences.

    .venv/bin/python -m benchmarks.fit_language_rules [--check]
    .venv/bin/python -m benchmarks.fit_language_rules --extra-sentences DIR   # more languages

Reads ``../shared/data/langid/lingua_sentences/<lang>.txt`` (one real web sentence per
line, 20 languages), fits on the even-numbered lines (the odd-numbered ones are held out
for ``benchmarks.bench_language_rules``) with the method of
``transforms/clean/language_rules.py`` and writes ``transforms/clean/language_rules.json``:
per language its segmenter, stop words, the (a, b) map of each fitted rule, the default
thresholds those maps give and the reference medians, with the provenance. ``--check``
fits again and fails when the committed file differs.

``--extra-sentences DIR`` also fits every language of DIR (files ``<iso639-1>.txt`` in the
same format: lingua-py's ``language-testdata/sentences``, of which ../shared/data holds 20)
that ../shared/data lacks and lid.176 can emit (``nb`` is fitted as lid.176's ``no``).
Those entries record their file's sha256 (``extra_sentences_sha256``). Without the option
the committed extra entries are kept as they are (the data is not here to fit them again),
so ``--check`` and the test check the shared languages and carry the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any, Optional

from benchmarks import SHARED_DATA
from transforms.clean import language_rules as lr
from transforms.clean.rules import RULES, QualityRules, threshold
from transforms.clean.segment import segmenter, segmenter_name
from transforms.clean.signals import STOP_WORDS, compute_signals
from transforms.doc import Signals

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = SHARED_DATA / "langid" / "lingua_sentences"
LID = SHARED_DATA / "models" / "lid.176.ftz"
SEED = 18
# lingua-py's file names that lid.176 labels otherwise (Norwegian Bokmål is its "no").
LID_ALIASES = {"nb": "no"}


def sentence_file(lang: str, directory: Path = SENTENCES) -> Path:
    """The file of a language (lid.176's code) in ``directory``, under its alias if there."""
    alias = next((k for k, v in LID_ALIASES.items() if v == lang and (directory / f"{k}.txt").exists()), lang)
    return directory / f"{alias}.txt"


def sentences(lang: str, half: str, directory: Path = SENTENCES) -> list[str]:
    """The language's sentences of one half: "fit" (even lines) or "held_out" (odd)."""
    lines = [s.strip() for s in sentence_file(lang, directory).read_text(encoding="utf-8").splitlines()]
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


def lid_labels() -> frozenset[str]:
    import fasttext

    return frozenset(label.removeprefix("__label__") for label in fasttext.load_model(str(LID)).get_labels())


def extra_languages(directory: Path) -> list[str]:
    """The languages of ``directory`` (lid.176's codes) that ../shared/data lacks and lid.176
    can emit; ``ValueError`` when the folder holds no sentence files."""
    files = sorted(directory.glob("*.txt"))
    if not files:
        raise ValueError(f"{directory}: no <language>.txt sentence files")
    shared, labels = set(languages()), lid_labels()
    codes = (LID_ALIASES.get(p.stem, p.stem) for p in files)
    return sorted(c for c in codes if c not in shared and c in labels)


def signals_of(lang: str, docs: list[str], stop_words: frozenset[str]) -> list[Signals]:
    name = segmenter_name(lang)
    segment = None if name == "whitespace" else segmenter(name)
    return [compute_signals(d, segment, stop_words) for d in docs]


def fit_one(lang: str, pool: list[str], coverage: float, en_signals: list[Signals]) -> dict[str, Any]:
    """One language's entry: stop words and the map of each fitted rule, from ``pool``."""
    defaults = QualityRules()
    seg = segmenter(segmenter_name(lang))
    words = [w for s in pool for w in seg(s)]
    stop_words = lr.fit_stop_words(words, coverage)
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
    return {"segmenter": segmenter_name(lang), "fit_sentences": len(pool),
            "stop_words": stop_words,
            "stop_word_coverage": round(lr.stop_word_coverage(words, stop_words), 4),
            "maps": maps, "default_thresholds": fitted,
            "reference_medians_en_vs_lang": medians}


def committed_extras() -> dict[str, Any]:
    """The committed entries fitted from ``--extra-sentences`` (kept when it is not given)."""
    if not lr.LANGUAGE_RULES_FILE.exists():
        return {}
    data = json.loads(lr.LANGUAGE_RULES_FILE.read_text(encoding="utf-8"))
    return {k: v for k, v in data["languages"].items() if "extra_sentences_sha256" in v}


def fit(extra: Optional[Path] = None) -> dict[str, Any]:
    langs = languages()
    english_words = [w for s in sentences("en", "fit") for w in s.split()]
    coverage = lr.stop_word_coverage(english_words, STOP_WORDS)
    en_signals = signals_of("en", documents("en", sentences("en", "fit"), lr.REFERENCE_DOCS, SEED), STOP_WORDS)
    out: dict[str, Any] = {lang: fit_one(lang, sentences(lang, "fit"), coverage, en_signals)
                           for lang in langs if lang != "en"}
    if extra is None:
        out.update(committed_extras())
    else:
        for lang in extra_languages(extra):
            entry = fit_one(lang, sentences(lang, "fit", extra), coverage, en_signals)
            entry["extra_sentences_sha256"] = hashlib.sha256(sentence_file(lang, extra).read_bytes()).hexdigest()
            out[lang] = entry
    return {
        "about": "Per-language quality rules fitted by benchmarks/fit_language_rules.py; method in "
                 "transforms/clean/language_rules.py. Derived only (word lists and numbers): from the "
                 "Leipzig web sentences in ../shared/data/langid/lingua_sentences (source: "
                 "github.com/pemistahl/lingua-py language-testdata/sentences, Apache-2.0), even-numbered "
                 "lines of each file; reference documents seeded with seed 18. Entries with "
                 "extra_sentences_sha256: the same files of lingua-py that ../shared/data lacks "
                 "(--extra-sentences; commit 754ce21 of 2026-03-09), the sha256 of the file fitted.",
        "english_stop_words": sorted(STOP_WORDS),
        "coverage_target": round(coverage, 4),
        "reference_docs": lr.REFERENCE_DOCS,
        "languages": out,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed file differs")
    parser.add_argument("--extra-sentences", type=Path, default=None, metavar="DIR",
                        help="also fit the languages of this lingua-py language-testdata/sentences folder")
    args = parser.parse_args(argv)
    if args.extra_sentences is not None and not args.extra_sentences.is_dir():
        parser.error(f"--extra-sentences {args.extra_sentences}: not a folder")
    text = json.dumps(fit(args.extra_sentences), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = lr.LANGUAGE_RULES_FILE.read_text(encoding="utf-8") == text
        print("language_rules.json is " + ("up to date" if same else "STALE: run the fit again"))
        return 0 if same else 1
    lr.LANGUAGE_RULES_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {lr.LANGUAGE_RULES_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
