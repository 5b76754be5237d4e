"""Quality signals of a text (pure functions, no Beam): Gopher, C4, FineWeb and statistics.

Definitions follow the sources, so thresholds from the papers apply unchanged:

* Gopher (Rae et al. 2021, Table A1; datatrove's ``GopherQualityFilter`` and
  ``GopherRepetitionFilter``): words are whitespace-separated tokens; duplicate line /
  paragraph fractions; the characters covered by the most frequent 2-, 3-, 4-gram; the
  characters in duplicated 5- to 10-grams (datatrove's skip-ahead definition).
* C4 (Raffel et al. 2020): lines C4 would drop (no terminal punctuation, < 3 words,
  "javascript", policy boilerplate), sentences in the kept lines, "lorem ipsum", "{".
* FineWeb (Penedo et al. 2024; datatrove's ``FineWebQualityFilter``): fraction of lines
  ending in punctuation, of lines under 30 characters, of characters in duplicated
  lines, and newlines per word.

Words: ``text.split()`` by default (English, and every language written with spaces);
``compute_signals`` takes another word function (``transforms/clean/segment.py``: jieba
for Chinese, newmm for Thai, characters for the other scripts without spaces) and the
language's stop words (``transforms/clean/language_rules.py``). With a segmenter, each
line is segmented on its own, the document's words are the lines' words in order, and a
C4 line's "3 words" are the segmenter's words.

The n-gram statistics run on 64-bit n-gram hashes built with numpy from word ids, which
makes them ~20x cheaper than joining strings for every position (benchmarks/).
"""

from __future__ import annotations

import re
from itertools import filterfalse
from typing import Callable, Optional, Sequence

import numpy as np

from transforms.doc import Signals

STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS = ("•", "-", "*", "·", "‣", "◦", "–")
# Also the full stops of Devanagari (danda, double danda), Arabic (question mark, Urdu full
# stop), Armenian, Ethiopic, Myanmar and Khmer (khan, bariyoosan), so their lines and
# sentences end as Latin ones do.
TERMINAL_PUNCT = (".", "!", "?", '"', "”", "'", "’", "…", "。", "！", "？", "।", "॥", "؟", "۔", "։", "።", "။",
                  "។", "៕")
C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
             "use cookies")
# A sentence ends with a run of these, then any closing quotes or brackets (`."`, `.)`,
# `.”`, `!»`), then whitespace or the end of the text.
_SENTENCE_PUNCT = ".!?。！？।॥؟۔։።။។៕"
SENTENCE_CLOSERS = "\"'”’»)]）」』"
# The full-width full stops of Chinese and Japanese end a sentence with or without a space
# after them (those languages put none between sentences), when text precedes them.
_FULL_WIDTH_PUNCT = "。！？"
SENTENCE_END = re.compile(f"[{re.escape(_SENTENCE_PUNCT)}]+[{re.escape(SENTENCE_CLOSERS)}]*(?=\\s|\\Z)"
                           f"|(?<=\\S)[{_FULL_WIDTH_PUNCT}]+[{re.escape(SENTENCE_CLOSERS)}]*(?![{_FULL_WIDTH_PUNCT}])")
_NO_LETTER_TOKEN = re.compile(r"(?<!\S)(?:[^\s\w]|[\d_])+(?!\S)")
_MOJIBAKE_HINTS = ("\u00c2", "\u00c3", "\u00e2", "\ufffd")
_URL = re.compile(r"https?://|www\.")
# UTF-8 read as Latin-1/cp1252: "Ã" or "Â" then a continuation byte's character
# (U+0080-U+00BF, or the cp1252 letters and punctuation at 0x80-0x9F), "â€", or U+FFFD.
_MOJIBAKE = re.compile("[\u00c2\u00c3][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e"
                       "\u0192\u02c6\u02dc\u2013-\u2122]|\u00e2\u20ac|\ufffd")
_PRIME = np.uint64(1_000_003)
TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)


def _duplicates(items: Sequence[str]) -> tuple[int, int]:
    """(duplicate elements, characters in them) — the first occurrence is not counted."""
    seen: set[str] = set()
    elements = chars = 0
    for item in items:
        if item in seen:
            elements += 1
            chars += len(item)
        else:
            seen.add(item)
    return elements, chars


def _ngram_hashes(ids: np.ndarray, n: int, previous: np.ndarray) -> np.ndarray:
    """Hashes of the n-grams, from the (n-1)-gram hashes: h_n[i] = h_{n-1}[i] * P + id[i+n-1]."""
    count = len(ids) - n + 1
    with np.errstate(over="ignore"):
        return previous[:count] * _PRIME + ids[n - 1:n - 1 + count]


def _top_ngram_chars(hashes: np.ndarray, lengths: np.ndarray) -> int:
    """Characters covered by the most frequent n-gram (count x its length with spaces);
    ties go to the n-gram seen first, as ``Counter.most_common`` does. Sort-based: 3x
    cheaper than ``np.unique`` on a few hundred hashes."""
    ordered = np.sort(hashes)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(starts, len(ordered)))
    best = int(counts.max())
    if best == 1:
        return int(lengths[0])
    tied = ordered[starts[counts == best]]
    index = min(int(np.flatnonzero(hashes == value)[0]) for value in tied)
    return int(lengths[index]) * best


def _dup_ngram_chars(hashes: np.ndarray, lengths: np.ndarray, n: int) -> int:
    """Characters in duplicated n-grams, skipping n words after each duplicate (datatrove)."""
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    repeats = order[1:][ordered[1:] == ordered[:-1]]  # positions repeating an earlier n-gram
    if len(repeats) == 0:
        return 0
    start = int(repeats.min())  # everything before it is a first occurrence
    values = hashes.tolist()
    seen = set(values[:start])
    chars, idx, total = 0, start, len(values)
    while idx < total:
        value = values[idx]
        if value in seen:
            chars += int(lengths[idx])
            idx += n
        else:
            seen.add(value)
            idx += 1
    return chars


def ngram_signals(words: Sequence[str], text_chars: int) -> dict[str, float]:
    """Gopher top-n-gram (2-4) and duplicate-n-gram (5-10) character fractions."""
    out = {f"top_{n}gram_char_frac": 0.0 for n in TOP_NGRAMS}
    out.update({f"dup_{n}gram_char_frac": 0.0 for n in DUP_NGRAMS})
    if len(words) < 2 or text_chars == 0:
        return out
    # Python's string hash as the word id: computed in C and cached on the str objects.
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
    word_len = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    cum = np.concatenate(([0], np.cumsum(word_len)))
    hashes = ids
    for n in range(2, max(DUP_NGRAMS) + 1):
        if len(words) < n:
            break
        hashes = _ngram_hashes(ids, n, hashes)
        joined = cum[n:] - cum[:-n]  # characters of "".join(ngram)
        if n in TOP_NGRAMS:
            out[f"top_{n}gram_char_frac"] = _top_ngram_chars(hashes, joined + (n - 1)) / text_chars
        else:
            chars = _dup_ngram_chars(hashes, joined, n)
            out[f"dup_{n}gram_char_frac"] = chars / text_chars
            if chars == 0:  # no repeated n-gram: no longer one repeats either
                break
    return out


def _c4_line_dropped(line: str, words: Optional[int] = None) -> bool:
    """C4 drops a line without terminal punctuation, of fewer than 3 words (``words``:
    the segmenter's count; None: whitespace words), or naming javascript or a policy."""
    stripped = line.strip()
    if not stripped.endswith(TERMINAL_PUNCT):
        return True
    if (len(stripped.split(None, 2)) if words is None else words) < 3:
        return True
    lower = stripped.lower()
    return "javascript" in lower or any(p in lower for p in C4_POLICY)


def _count_if(pattern: re.Pattern[str], text: str, hints: tuple[str, ...]) -> int:
    """Matches of ``pattern``, skipping the regex scan when no hint substring occurs."""
    return len(pattern.findall(text)) if any(h in text for h in hints) else 0


def count_sentences(text: str) -> int:
    """Runs of sentence punctuation, with the closing quotes and brackets after them
    (``SENTENCE_CLOSERS``), followed by whitespace or the end of the text (a Chinese or
    Japanese full stop also before the next character): a news article
    of 5 sentences ending in ``."``, ``.)`` and ``.”`` counted 4 without the closers and
    failed ``c4_sentences``."""
    return len(SENTENCE_END.findall(text))


def char_stats(text: str) -> dict[str, float]:
    """ASCII upper-case, digit and non-ASCII ratios and the character entropy (bits per
    character), vectorised over the code points."""
    if not text:
        return {"upper_ratio": 0.0, "digit_ratio": 0.0, "non_ascii_ratio": 0.0, "char_entropy": 0.0}
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    total = len(codes)
    low = codes < 256
    counts = np.bincount(codes[low], minlength=256)
    counts = counts[counts > 0]
    if not low.all():  # rarer code points: unique over the few of them
        counts = np.concatenate((counts, np.unique(codes[~low], return_counts=True)[1]))
    probs = counts / total
    return {
        "upper_ratio": float(np.count_nonzero((codes >= 65) & (codes <= 90))) / total,
        "digit_ratio": float(np.count_nonzero((codes >= 48) & (codes <= 57))) / total,
        "non_ascii_ratio": float(np.count_nonzero(codes > 127)) / total,
        "char_entropy": float(-(probs * np.log2(probs)).sum()),
    }


def compute_signals(text: str, segment: Optional[Callable[[str], list[str]]] = None,
                    stop_words: frozenset[str] = STOP_WORDS) -> Signals:
    """Every signal of ``text``; an empty text gives all zeros. ``segment``: the word
    function (None: whitespace, as the English sources); ``stop_words``: the lower-case
    stop words of the text's language (default: Gopher's English eight)."""
    chars = len(text)
    lines = [line for line in text.split("\n") if line.strip()]
    if segment is None or segment is str.split:
        words = text.split()
        line_words: Optional[list[int]] = None
    else:
        per_line = [segment(line) for line in lines]
        words = [word for line in per_line for word in line]
        line_words = [len(line) for line in per_line]
    n_words = len(words)
    n_lines = max(len(lines), 1)
    # re.split(r"\n{2,}") as str.split: 2x cheaper, same paragraphs.
    paragraphs = [p.strip("\n") for p in text.strip().split("\n\n") if p.strip("\n")]
    dup_lines, dup_line_chars = _duplicates(lines)
    dup_paras, dup_para_chars = _duplicates(paragraphs)
    stripped = [line.strip() for line in lines]
    lower = text.lower()
    kept_c4 = ([line for line in stripped if not _c4_line_dropped(line)] if line_words is None else
               [line for line, n in zip(stripped, line_words) if not _c4_line_dropped(line, n)])
    # Tokens that are not all letters (a minority) are scanned once for letter-free ones.
    mixed = " ".join(filterfalse(str.isalpha, words))
    alpha_words = n_words - len(_NO_LETTER_TOKEN.findall(mixed))
    ngrams = ngram_signals(words, chars)
    safe_chars = max(chars, 1)
    safe_words = max(n_words, 1)
    return Signals(
        chars=float(chars),
        words=float(n_words),
        lines=float(len(lines)),
        mean_word_length=sum(map(len, words)) / safe_words,
        symbol_word_ratio=(lower.count("#") + lower.count("...") + lower.count("…")) / safe_words,
        bullet_lines_ratio=sum(1 for s in stripped if s.startswith(BULLETS)) / n_lines,
        ellipsis_lines_ratio=sum(1 for s in stripped if s.endswith(("...", "…"))) / n_lines,
        alpha_words_ratio=alpha_words / safe_words,
        stop_words=float(sum(map(stop_words.__contains__, map(str.lower, words)))),
        dup_line_frac=dup_lines / n_lines,
        dup_para_frac=dup_paras / max(len(paragraphs), 1),
        dup_line_char_frac=dup_line_chars / safe_chars,
        dup_para_char_frac=dup_para_chars / safe_chars,
        **ngrams,
        c4_dropped_lines_frac=1.0 - len(kept_c4) / n_lines if lines else 0.0,
        c4_sentences=float(count_sentences("\n".join(kept_c4))),
        c4_lorem_ipsum=float("lorem ipsum" in lower),
        c4_curly_bracket=float("{" in text),
        fineweb_line_punct_ratio=sum(1 for s in stripped if s.endswith(TERMINAL_PUNCT)) / n_lines,
        fineweb_short_line_ratio=sum(1 for s in stripped if len(s) <= 30) / n_lines,
        fineweb_dup_line_char_ratio=dup_line_chars / safe_chars,
        fineweb_newline_word_ratio=text.count("\n") / safe_words,
        **char_stats(text),
        mojibake_ratio=_count_if(_MOJIBAKE, text, _MOJIBAKE_HINTS) / safe_words,
        url_ratio=_count_if(_URL, lower, ("http", "www.")) / safe_words,
        unique_word_ratio=len(set(words)) / safe_words,
    )
