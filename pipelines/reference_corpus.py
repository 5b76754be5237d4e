"""The default reference corpus of the anomaly detector (``--reference default``): all the
real, human-written text of the shared data folder, in every language it has.

* ``langid/lingua_sentences/<lang>.txt``: 1,000 Leipzig web sentences in each of 20
  languages, as documents of 6-20 sentences in paragraphs of 1-4 (the shape of
  ``benchmarks/anomaly_web.py``'s);
* ``text/*.txt``: the books, ~3 KB chunks cut at blank lines, hard wraps joined (web text
  has one line per paragraph);
* ``html/scrapinghub/ground-truth.json``: the hand-annotated article bodies;
* ``neardup/mccormick_articles_1000.train``: news-wire articles, one per line.

Left out: the WARC pages (a few dozen, unvetted: menus and spam among them; the reference
is what the detector learns as *normal*). Every text goes through the extract stage's
``normalize_text`` (``pipelines.corpus.reference_texts`` does the same to ``--reference``
files), so a reference document and a corpus document of the same words score alike.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Sequence

from pipelines.corpus import text_chunks
from transforms.extract.html import normalize_text

__all__ = ["DEFAULT", "ReferenceDoc", "default_reference", "paragraphs", "sentence_documents", "shared_data_dir"]

DEFAULT = "default"  # the --reference value that selects this corpus
_SENTENCES = ("langid", "lingua_sentences")
_NEWS = ("neardup", "mccormick_articles_1000.train")
_ARTICLES = ("html", "scrapinghub", "ground-truth.json")


class ReferenceDoc(NamedTuple):
    """One reference document; ``source`` names its file family (``leipzig:<lang>``,
    ``book``, ``article``, ``news``)."""

    text: str
    source: str


def shared_data_dir() -> Optional[Path]:
    """``$TOKENFACTORY_SHARED_DATA``, else ``../shared/data`` beside the checkout; None when
    neither is a folder."""
    for candidate in (os.environ.get("TOKENFACTORY_SHARED_DATA"),
                      str(Path(__file__).resolve().parents[2] / "shared" / "data")):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def unwrap(text: str) -> str:
    """Joins hard-wrapped lines: one line per paragraph."""
    return re.sub(r"\s*\n\s*\n\s*", "\n", re.sub(r"(?<!\n)\n(?!\n)", " ", text)).strip()


def paragraphs(sentences: Sequence[str], rng: random.Random) -> str:
    """``sentences`` in order, in paragraphs (lines) of 1-4 sentences."""
    out, i = [], 0
    while i < len(sentences):
        k = rng.randint(1, 4)
        out.append(" ".join(sentences[i:i + k]))
        i += k
    return "\n".join(out)


def sentence_documents(sentences: list[str], rng: random.Random) -> Iterator[str]:
    """Documents of 6-20 consecutive sentences, in paragraphs of 1-4 sentences."""
    pos = 0
    while len(sentences) - pos >= 6:
        doc = sentences[pos:pos + rng.randint(6, 20)]
        pos += len(doc)
        yield paragraphs(doc, rng)


def _raw(data: Path, seed: int) -> Iterator[ReferenceDoc]:
    for path in sorted(data.joinpath(*_SENTENCES).glob("*.txt")):
        sentences = [s.strip() for s in path.read_text(encoding="utf-8", errors="replace").splitlines() if s.strip()]
        for text in sentence_documents(sentences, random.Random(f"{seed}:{path.stem}")):
            yield ReferenceDoc(text, f"leipzig:{path.stem}")
    for path in sorted(data.joinpath("text").glob("*.txt")):
        for chunk in text_chunks(path.read_text(encoding="utf-8", errors="replace")):
            yield ReferenceDoc(unwrap(chunk), "book")
    articles = data.joinpath(*_ARTICLES)
    if articles.is_file():
        truth = json.loads(articles.read_text(encoding="utf-8"))
        for page_id in sorted(truth):
            body = truth[page_id].get("articleBody") if isinstance(truth[page_id], dict) else None
            if isinstance(body, str):
                yield ReferenceDoc(body, "article")
    news = data.joinpath(*_NEWS)
    if news.is_file():
        for line in news.read_text(encoding="utf-8", errors="replace").splitlines():
            _, _, text = line.partition(" ")
            yield ReferenceDoc(text, "news")


def default_reference(data: Optional[Path] = None, seed: int = 0, min_chars: int = 100) -> list[ReferenceDoc]:
    """The default reference of ``data`` (``shared_data_dir()`` when None), normalised as
    extracted text is, documents under ``min_chars`` left out. ``FileNotFoundError`` when
    there is no such folder."""
    data = data or shared_data_dir()
    if data is None or not data.joinpath(*_SENTENCES).is_dir():
        raise FileNotFoundError(f"no shared data folder with {'/'.join(_SENTENCES)} (looked at "
                                f"{data or '$TOKENFACTORY_SHARED_DATA and ../shared/data'}): set "
                                f"TOKENFACTORY_SHARED_DATA or pass --reference FILE ...")
    docs = (ReferenceDoc(normalize_text(d.text), d.source) for d in _raw(data, seed))
    return [d for d in docs if len(d.text) >= min_chars]
