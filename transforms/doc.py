"""The one document record, and the records that travel beside it.

``Doc`` is the single schema every stage reads and writes: a frozen dataclass that
Beam encodes with ``RowCoder`` (registered where Beam is used: ``transforms.routing``,
so this module and the pure text functions import no Beam) and the matching pyarrow
schema used for the Parquet files under ``docs/``, ``rejected/`` and ``failed/``. Stages never add
free-form dict bags: a new column is a new typed field here.

``RawRecord`` is what readers and the crawler hand to extraction (HTML bytes or an
already-extracted text), ``Failure`` is what lands in ``failed/<stage>/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pyarrow as pa


@dataclass(frozen=True)
class Signals:
    """Quality signals computed by the clean stage (None until it runs).

    Definitions: ``transforms/clean/signals.py`` (Gopher, C4, FineWeb, statistics).
    """

    chars: float = 0.0
    words: float = 0.0
    lines: float = 0.0
    mean_word_length: float = 0.0
    symbol_word_ratio: float = 0.0
    bullet_lines_ratio: float = 0.0
    ellipsis_lines_ratio: float = 0.0
    alpha_words_ratio: float = 0.0
    stop_words: float = 0.0
    dup_line_frac: float = 0.0
    dup_para_frac: float = 0.0
    dup_line_char_frac: float = 0.0
    dup_para_char_frac: float = 0.0
    top_2gram_char_frac: float = 0.0
    top_3gram_char_frac: float = 0.0
    top_4gram_char_frac: float = 0.0
    dup_5gram_char_frac: float = 0.0
    dup_6gram_char_frac: float = 0.0
    dup_7gram_char_frac: float = 0.0
    dup_8gram_char_frac: float = 0.0
    dup_9gram_char_frac: float = 0.0
    dup_10gram_char_frac: float = 0.0
    c4_dropped_lines_frac: float = 0.0
    c4_sentences: float = 0.0
    c4_lorem_ipsum: float = 0.0
    c4_curly_bracket: float = 0.0
    fineweb_line_punct_ratio: float = 0.0
    fineweb_short_line_ratio: float = 0.0
    fineweb_dup_line_char_ratio: float = 0.0
    fineweb_newline_word_ratio: float = 0.0
    upper_ratio: float = 0.0
    digit_ratio: float = 0.0
    non_ascii_ratio: float = 0.0
    char_entropy: float = 0.0
    mojibake_ratio: float = 0.0
    url_ratio: float = 0.0
    unique_word_ratio: float = 0.0
    # Across sentences (``transforms/clean/coherence.py``), set by the clean stage when the
    # anomaly detector runs (0.0 otherwise): sentences sharing no content word with the two
    # before them, and sentences language ID puts in another language than the document.
    sentence_gap: float = 0.0
    sentence_other_lang: float = 0.0


@dataclass(frozen=True)
class AnomalyScores:
    """Each anomaly detector's score (``models/anomaly.py``), standardised on the corpus
    sample it was calibrated on (0 is that sample's median, 1 its interquartile range),
    and the language model's perplexity per token. The combined score that decides is
    ``Doc.anomaly_score``."""

    # None: the document's language had too few reference documents for a centre of its
    # own (models/anomaly.py): that detector did not score it
    perplexity: Optional[float] = 0.0  # the language model's NLL per byte, centred per language
    representation: Optional[float] = 0.0  # autoencoder over the language model's mean hidden state
    signals: Optional[float] = 0.0  # autoencoder over the quality signals, centred per language
    token_perplexity: float = 0.0  # exp(NLL per token) of the scored tokens (CCNet's figure)
    context: Optional[float] = 0.0  # the LM's NLL per byte minus the unigram NLL per byte, centred per language
    cohesion: Optional[float] = 0.0  # sentences sharing no content word with the two before, centred per language
    language_mix: Optional[float] = 0.0  # sentences in another language than the document, centred per language


@dataclass(frozen=True)
class Label:
    """One label on a document: from a model or from a human reviewer.

    ``name`` is the label set (``topic``...), ``score`` the model's calibrated confidence
    (1.0 for a human label), ``version`` the labeller version that made (or, for a human
    label, suggested) it; ``reviewer`` and ``reviewed_at`` are set on human labels.
    """

    name: str
    value: str
    score: float
    origin: str  # "model" | "human"
    version: str
    reviewer: str = ""
    reviewed_at: str = ""


@dataclass(frozen=True)
class Provenance:
    """Where a synthetic document came from: the augment stage's rephrasing of a parent
    document (``Doc.source`` is ``"synthetic"`` on such a document)."""

    parent_id: str
    parent_source: str  # the parent's ``source`` (its file or crawl)
    template: str  # the prompt template's name
    model: str  # the model the backend was asked for
    parameters: str  # the generation parameters as JSON, keys sorted (no API key, no endpoint)
    chunks: int = 1  # the parent was split into this many chunks, rephrased and rejoined


SYNTHETIC_SOURCE = "synthetic"


@dataclass(frozen=True)
class Doc:
    """A document. Fields after ``lang_hint`` are filled by later stages."""

    id: str
    url: str
    text: str
    source: str  # the file or crawl the document came from
    fetched_at: str  # ISO-8601 UTC, "" when unknown
    title: str = ""
    lang_hint: str = ""  # <html lang>, Content-Language or the input's own field
    lang: str = ""
    lang_score: float = 0.0  # the share of the text in ``lang`` x fastText's confidence
    lang2: str = ""  # the second language of a mixed text ("" when there is none)
    lang2_share: float = 0.0  # its share of the text (models.fasttext_models.LanguageMix)
    signals: Optional[Signals] = None
    anomaly_score: Optional[float] = None  # the combined detector score (anomaly_scores: each)
    quality_score: Optional[float] = None
    labels: Sequence[Label] = ()
    dup_cluster: str = ""
    token_count: int = 0
    truncated: bool = False  # the input was cut at the reader's size limit (max_payload_bytes)
    anomaly_scores: Optional[AnomalyScores] = None
    repeats: int = 1  # tokenize writes the document this many times (the augment stage's upsampling)
    repeat_rules: Sequence[str] = ()  # the upsampling rules that set ``repeats``
    provenance: Optional[Provenance] = None  # set on synthetic documents (``source`` "synthetic")
    # The input's own id of the record (a JSONL/Parquet id field, the WARC-Record-ID), kept
    # as given; "" when the input has none. ``id`` is the job's id (``document_id``).
    source_id: str = ""


@dataclass(frozen=True)
class RawRecord:
    """An input record before extraction: HTML bytes (``payload``) or plain ``text``.

    ``kind`` is "html" when ``payload`` holds an HTTP body to extract, "text" when the
    input already is text (WET conversion records, JSONL, Parquet). ``record_id`` is the
    input's own id of the record ("" when it has none); ``doc_id`` the document id a reader
    chose for a record without one ("": extraction derives it, see ``document_id``).
    """

    kind: str
    url: str
    source: str
    offset: int
    record_id: str = ""
    fetched_at: str = ""
    payload: bytes = b""
    text: str = ""
    content_type: str = ""
    http_status: int = 0
    charset: str = ""  # declared in the HTTP Content-Type header
    lang_hint: str = ""
    title: str = ""
    truncated: bool = False  # payload cut at the configured size limit
    doc_id: str = ""


@dataclass(frozen=True)
class Rejected:
    """A document a stage dropped, with a reason code and a human-readable detail."""

    doc: Doc
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class Failure:
    """A record that raised: the error, where it came from, and the raw input."""

    stage: str
    error_type: str
    error: str
    source: str
    offset: int
    raw: bytes
    raw_truncated: bool = False
    traceback: str = ""


ROW_TYPES = (Signals, AnomalyScores, Label, Provenance, Doc, RawRecord)  # Beam encodes them as rows (RowCoder)


SIGNALS_TYPE = pa.struct([(f.name, pa.float64()) for f in dataclasses.fields(Signals)])
ANOMALY_SCORES_TYPE = pa.struct([(f.name, pa.float64()) for f in dataclasses.fields(AnomalyScores)])
LABEL_TYPE = pa.struct(
    [
        ("name", pa.string()),
        ("value", pa.string()),
        ("score", pa.float64()),
        ("origin", pa.string()),
        ("version", pa.string()),
        ("reviewer", pa.string()),
        ("reviewed_at", pa.string()),
    ]
)
PROVENANCE_TYPE = pa.struct([
    ("parent_id", pa.string()),
    ("parent_source", pa.string()),
    ("template", pa.string()),
    ("model", pa.string()),
    ("parameters", pa.string()),
    ("chunks", pa.int64()),
])
DOC_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("text", pa.large_string()),
    pa.field("source", pa.string()),
    pa.field("fetched_at", pa.string()),
    pa.field("title", pa.string()),
    pa.field("lang_hint", pa.string()),
    pa.field("lang", pa.string()),
    pa.field("lang_score", pa.float64()),
    pa.field("lang2", pa.string()),
    pa.field("lang2_share", pa.float64()),
    pa.field("signals", SIGNALS_TYPE),
    pa.field("anomaly_score", pa.float64()),
    pa.field("quality_score", pa.float64()),
    pa.field("labels", pa.list_(LABEL_TYPE)),
    pa.field("dup_cluster", pa.string()),
    pa.field("token_count", pa.int64()),
    pa.field("truncated", pa.bool_()),
    pa.field("anomaly_scores", ANOMALY_SCORES_TYPE),
    pa.field("repeats", pa.int64()),
    pa.field("repeat_rules", pa.list_(pa.string())),
    pa.field("provenance", PROVENANCE_TYPE),
    pa.field("source_id", pa.string()),
]
DOC_SCHEMA = pa.schema(DOC_FIELDS)
REJECTED_SCHEMA = pa.schema(
    DOC_FIELDS + [pa.field("reason", pa.string()), pa.field("reason_detail", pa.string())]
)
FAILED_SCHEMA = pa.schema(
    [
        pa.field("stage", pa.string()),
        pa.field("error_type", pa.string()),
        pa.field("error", pa.string()),
        pa.field("source", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("raw", pa.large_binary()),
        pa.field("raw_truncated", pa.bool_()),
        pa.field("traceback", pa.string()),
    ]
)


def doc_to_row(doc: Doc) -> dict[str, Any]:
    """The Parquet row of ``doc`` (field order of ``DOC_SCHEMA``)."""
    signals = doc.signals
    return {
        "id": doc.id,
        "url": doc.url,
        "text": doc.text,
        "source": doc.source,
        "fetched_at": doc.fetched_at,
        "title": doc.title,
        "lang_hint": doc.lang_hint,
        "lang": doc.lang,
        "lang_score": doc.lang_score,
        "lang2": doc.lang2,
        "lang2_share": doc.lang2_share,
        "signals": dict(vars(signals)) if signals is not None else None,  # flat: no asdict recursion
        "anomaly_score": doc.anomaly_score,
        "quality_score": doc.quality_score,
        "labels": [dict(vars(label)) for label in doc.labels],
        "dup_cluster": doc.dup_cluster,
        "token_count": doc.token_count,
        "truncated": doc.truncated,
        "anomaly_scores": dict(vars(doc.anomaly_scores)) if doc.anomaly_scores is not None else None,
        "repeats": doc.repeats,
        "repeat_rules": list(doc.repeat_rules),
        "provenance": dict(vars(doc.provenance)) if doc.provenance is not None else None,
        "source_id": doc.source_id,
    }


def doc_from_row(row: dict[str, Any]) -> Doc:
    """The ``Doc`` of a Parquet row written by ``doc_to_row`` (extra columns ignored;
    columns added later, such as ``lang2``, ``anomaly_scores``, ``repeats`` and
    ``source_id``, may be missing)."""
    signals = row.get("signals")
    scores = row.get("anomaly_scores")
    provenance = row.get("provenance")
    repeats = row.get("repeats")
    return Doc(
        id=row["id"],
        url=row.get("url") or "",
        text=row.get("text") or "",
        source=row.get("source") or "",
        fetched_at=row.get("fetched_at") or "",
        title=row.get("title") or "",
        lang_hint=row.get("lang_hint") or "",
        lang=row.get("lang") or "",
        lang_score=row.get("lang_score") or 0.0,
        lang2=row.get("lang2") or "",
        lang2_share=row.get("lang2_share") or 0.0,
        signals=Signals(**signals) if signals else None,
        anomaly_score=row.get("anomaly_score"),
        quality_score=row.get("quality_score"),
        labels=tuple(Label(**{k: ("" if v is None else v) for k, v in label.items()})
                     for label in row.get("labels") or ()),
        dup_cluster=row.get("dup_cluster") or "",
        token_count=row.get("token_count") or 0,
        truncated=bool(row.get("truncated")),
        anomaly_scores=AnomalyScores(**scores) if scores else None,
        repeats=1 if repeats is None else int(repeats),
        repeat_rules=tuple(row.get("repeat_rules") or ()),
        provenance=Provenance(**provenance) if provenance else None,
        source_id=row.get("source_id") or "",
    )


def rejected_to_row(rejected: Rejected) -> dict[str, Any]:
    row = doc_to_row(rejected.doc)
    row["reason"] = rejected.reason
    row["reason_detail"] = rejected.detail
    return row


def failure_to_row(failure: Failure) -> dict[str, Any]:
    return dataclasses.asdict(failure)


def stable_id(*parts: object) -> str:
    """A deterministic id from the parts (sha1 hex, 40 chars)."""
    digest = hashlib.sha1()
    for part in parts:
        digest.update(str(part).encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


# How documents are identified (recorded with review tasks and reviews): 1, before ids were
# unique by construction, a record's own id was the document id; 2, ``document_id``.
ID_SCHEME = 2


def document_id(source: str, offset: int, source_id: str) -> str:
    """The id of the document read at ``offset`` of input ``source`` whose own id is
    ``source_id``: ``"<source_id>@<16 hex digits of sha1(source, offset)>"``. ``source``
    names the file as ``FileRef.id_source`` does (its path below its input folder), so
    moving the data keeps the ids.

    Unique in a job by construction: two inputs may both hold ids "0" to "99", or one
    input an id twice, and their documents still differ (a file is read once, and no two
    of its records start at one offset; 64 bits of hash keep equal own ids apart). The
    own id comes first, so the natural order of ids (dedup's ``smallest_id``) is still
    the order of the input's ids, and it stays readable; the input's id is also kept as
    it is in ``Doc.source_id``. Records without an id of their own keep the ids their
    readers gave them (``stable_id`` of the file and position), unique already."""
    return f"{source_id}@{stable_id(source, offset)[:16]}"
