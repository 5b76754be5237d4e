"""Document-level language ID on mixed documents: first 1,000 characters vs windows.

    .venv/bin/python -m benchmarks.bench_langid_mixed

Documents are built from the real Leipzig web sentences in
``../shared/data/langid/lingua_sentences`` (20 languages, one sentence a line, joined
with newlines), seeded so every run builds the same ones:

* ``header``: 1,000-1,500 characters of English sentences (a boilerplate header) followed
  by 3,000-8,000 characters of one other language: the main language is the other one,
  the second is English.
* ``long``: the same English header followed by 10,000-30,000 characters of one other
  language (longer than the windows cover: they sample it).
* ``half``: two different languages, each about half of 2,000-8,000 characters: the two
  languages are the main and the second one (either order).
* ``mix``: two different languages, the second one 10-50% of 2,000-8,000 characters: the
  share error is ``|lang2_share - the second language's share of the characters|`` (as
  for ``long``).
* ``pure``: 2,000-8,000 characters of one language: the main language must stay right, and
  a second language with a share of 0.25 or more is a false alarm.
* ``short``: one language, 200-1,000 characters: the windowed result must be identical.

``first1000`` is the single-window behaviour (``max_windows: 1``; its second language is
fastText's second label on those characters); each other row is ``max_windows`` windows of
``max_chars`` characters (``LanguageIdentifier.identify``). "kept" counts a right main
language with a score of at least 0.65 (the clean stage's default threshold). Speed is
documents per second over every built document, each setting in the same process, beside
the quality signals' (``compute_signals``, which the clean stage runs on the same
documents); then the real pages of three WARC files in ``../shared/data/warc`` (main text
by ``extract_html``) longer than 1,000 characters, each setting's language and score
against fastText's on the whole text (what FineWeb's 0.65 threshold was set on); the last
line is the default setting's speed as a ratio of ``first1000``'s.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from benchmarks import SHARED_DATA
from models.fasttext_models import LABEL_PREFIX, LanguageIdentifier, LanguageMix, clean_line
from transforms.clean.clean import LangIdConfig
from transforms.clean.signals import compute_signals

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
SETTINGS = ((1000, 2), (1000, 4), (1000, 8), (1000, 16), (500, 8), (500, 16))  # (max_chars, max_windows)
DEFAULT = (LangIdConfig.max_chars, LangIdConfig.max_windows)
PER_LANGUAGE = 20
WARCS = ("resiliparse_warcfile.warc.gz", "dolma_sample-0000.warc.gz", "cc_whirlwind.warc.gz")


@dataclass(frozen=True)
class Case:
    kind: str  # header | long | half | mix | pure | short
    text: str
    lang: str  # expected main language ("" for half: either of the two)
    lang2: str  # expected second language ("" for half, pure and short)
    pair: tuple[str, ...] = ()  # half: the two languages
    share2: float = 0.0  # header, long, mix: the second language's share of the characters


def load_sentences() -> dict[str, list[str]]:
    folder = DATA / "langid" / "lingua_sentences"
    return {path.stem: [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
            for path in sorted(folder.glob("*.txt"))}


def _run(rng: random.Random, sentences: list[str], min_chars: int) -> str:
    out: list[str] = []
    size = -1
    while size < min_chars:
        out.append(rng.choice(sentences))
        size += len(out[-1]) + 1
    return "\n".join(out)


def build_cases(sentences: dict[str, list[str]], per_language: int = PER_LANGUAGE, seed: int = 0) -> list[Case]:
    rng = random.Random(seed)
    langs = sorted(sentences)
    cases = []
    for lang in langs:
        for _ in range(per_language):
            if lang != "en":
                for kind, low, high in (("header", 3000, 8000), ("long", 10_000, 30_000)):
                    header = _run(rng, sentences["en"], rng.randint(1000, 1500))
                    body = _run(rng, sentences[lang], rng.randint(low, high))
                    text = header + "\n" + body
                    cases.append(Case(kind, text, lang, "en", share2=len(header) / len(text)))
            other = rng.choice([x for x in langs if x != lang])
            size = rng.randint(2000, 8000)
            text = _run(rng, sentences[lang], size // 2) + "\n" + _run(rng, sentences[other], size // 2)
            cases.append(Case("half", text, "", "", (lang, other)))
            other = rng.choice([x for x in langs if x != lang])
            size, share = rng.randint(2000, 8000), rng.uniform(0.1, 0.5)
            first = _run(rng, sentences[lang], int(size * (1 - share)))
            second = _run(rng, sentences[other], int(size * share))
            text = first + "\n" + second if rng.random() < 0.5 else second + "\n" + first
            cases.append(Case("mix", text, lang, other, share2=len(second) / len(text)))
            cases.append(Case("pure", _run(rng, sentences[lang], rng.randint(2000, 8000)), lang, ""))
            short = _run(rng, sentences[lang], rng.randint(200, 1000))[:1000]
            cases.append(Case("short", short, lang, ""))
    return cases


def warc_pages(min_chars: int = 1001) -> list[str]:
    """The main text of every HTML response of ``WARCS`` with at least ``min_chars``."""
    from warcio.archiveiterator import ArchiveIterator

    from transforms.extract.html import extract_html

    texts = []
    for name in WARCS:
        with open(DATA / "warc" / name, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "response":
                    try:
                        texts.append(extract_html(record.content_stream().read()).text)
                    except Exception:  # noqa: BLE001 (a page that does not parse is skipped)
                        continue
    return [t for t in texts if len(t) >= min_chars]


def against_whole(path: str, pages: list[str]) -> None:
    whole = LanguageIdentifier.load(path, max(map(len, pages)), 1).predict(pages)
    sys.stdout.write(f"{len(pages)} WARC pages over 1,000 characters, against the whole text:\n")
    for name, identify in (("first1000", first_chars(LanguageIdentifier.load(path, 1000))),
                           (f"{DEFAULT[1]}x{DEFAULT[0]}", LanguageIdentifier.load(path, *DEFAULT).identify)):
        mixes = identify(pages)
        error = sum(abs(m.score - w[1]) for m, w in zip(mixes, whole)) / len(pages)
        same = sum(m.lang == w[0] for m, w in zip(mixes, whole))
        sys.stdout.write(f"  {name:<10} same language {same}/{len(pages)}, mean |score - whole score| {error:.3f}\n")


def first_chars(model: LanguageIdentifier) -> Callable[[Sequence[str]], list[LanguageMix]]:
    """Today's single window, with fastText's second label and its probability as the
    second language (what the first characters alone can say about a second language)."""
    def identify(texts: Sequence[str]) -> list[LanguageMix]:
        labels, probs = model.model.predict([clean_line(t, model.max_chars) for t in texts], k=2)
        return [LanguageMix(lab[0][len(LABEL_PREFIX):], float(min(p[0], 1.0)),
                            lab[1][len(LABEL_PREFIX):] if len(lab) > 1 else "",
                            float(p[1]) if len(p) > 1 else 0.0)
                for lab, p in zip(labels, probs)]
    return identify


def score(cases: list[Case], mixes: list[LanguageMix]) -> dict[str, float]:
    def mean(values: list[float]) -> float:
        return sum(values) / max(len(values), 1)

    by_kind: dict[str, list[tuple[Case, LanguageMix]]] = {}
    for case, mix in zip(cases, mixes):
        by_kind.setdefault(case.kind, []).append((case, mix))
    header, long, half, mix, pure = (by_kind[k] for k in ("header", "long", "half", "mix", "pure"))
    return {
        "header_main": mean([m.lang == c.lang for c, m in header]),
        "header_2nd": mean([m.lang2 == c.lang2 for c, m in header]),
        "header_kept": mean([m.lang == c.lang and m.score >= 0.65 for c, m in header]),
        "long_main": mean([m.lang == c.lang for c, m in long]),
        "long_2nd": mean([m.lang2 == c.lang2 for c, m in long]),
        "long_share_err": mean([abs(m.lang2_share - c.share2) for c, m in long]),
        "half_both": mean([{m.lang, m.lang2} == set(c.pair) for c, m in half]),
        "half_share": mean([m.lang2_share for c, m in half]),
        "mix_both": mean([m.lang == c.lang and m.lang2 == c.lang2 for c, m in mix]),
        "mix_share_err": mean([abs(m.lang2_share - c.share2) for c, m in mix]),
        "pure_main": mean([m.lang == c.lang for c, m in pure]),
        "pure_2nd": mean([m.lang2_share >= 0.25 for c, m in pure]),
        "pure_kept": mean([m.lang == c.lang and m.score >= 0.65 for c, m in pure]),
    }


def timed(identify: Callable[[Sequence[str]], list[LanguageMix]], texts: list[str],
          batch: int = 256) -> tuple[list[LanguageMix], float]:
    t0 = time.perf_counter()
    out: list[LanguageMix] = []
    for i in range(0, len(texts), batch):  # the clean stage's batch size
        out.extend(identify(texts[i:i + batch]))
    return out, len(texts) / (time.perf_counter() - t0)


def main(argv: Sequence[str] = ()) -> int:
    cases = build_cases(load_sentences())
    texts = [c.text for c in cases]
    short = [i for i, c in enumerate(cases) if c.kind == "short"]
    path = str(DATA / "models" / "lid.176.ftz")
    base_mixes, base_rate = timed(first_chars(LanguageIdentifier.load(path, 1000)), texts)
    base_mixes, base_rate = timed(first_chars(LanguageIdentifier.load(path, 1000)), texts)  # warm
    single = [base_mixes[i].lang for i in short], [base_mixes[i].score for i in short]
    rows = [("first1000", score(cases, base_mixes), base_rate, True)]
    for chars, windows in SETTINGS:
        mixes, rate = timed(LanguageIdentifier.load(path, chars, windows).identify, texts)
        same = ([mixes[i].lang for i in short], [mixes[i].score for i in short]) == single
        rows.append((f"{windows}x{chars}", score(cases, mixes), rate, same))
    t0 = time.perf_counter()
    for text in texts:
        compute_signals(text)
    signals_rate = len(texts) / (time.perf_counter() - t0)
    keys = list(rows[0][1])
    kinds = ", ".join(f"{k} {sum(c.kind == k for c in cases)}" for k in dict.fromkeys(c.kind for c in cases))
    sys.stdout.write(f"{len(cases)} documents ({kinds})\n")
    sys.stdout.write(f"{'setting':<10}" + "".join(f"{k:>15}" for k in keys) + f"{'docs/s':>8} short_same\n")
    for name, result, rate, same in rows:
        sys.stdout.write(f"{name:<10}" + "".join(f"{result[k]:15.3f}" for k in keys) + f"{rate:8.0f} {same}\n")
    default_rate = next(rate for name, _, rate, _ in rows if name == f"{DEFAULT[1]}x{DEFAULT[0]}")
    sys.stdout.write(f"quality signals on the same documents: {signals_rate:.0f} docs/s\n")
    against_whole(path, warc_pages())
    sys.stdout.write(f"speed ratio {DEFAULT[1]}x{DEFAULT[0]} / first1000: {default_rate / base_rate:.2f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
