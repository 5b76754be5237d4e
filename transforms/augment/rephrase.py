"""Rephrasing requests and the checks on what a model returns (pure: no Beam, no network).

A ``Template`` is a prompt with placeholders (``{text}`` exactly once, optionally ``{lang}``
and ``{title}``); ``make_request`` renders it for one chunk of a document and computes the
cache key; a ``Backend`` turns requests into ``RephraseResult``s (same order); and
``check_generation`` decides whether a returned text is usable or a *rejected* generation
with a stable reason code. A failed call (HTTP error, timeout) is an ``error`` on the
result, never a rejection; a hostile output (empty, far too long, invalid UTF-8, the prompt
echoed back) is a rejection, never an error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Protocol, Sequence

PLACEHOLDERS = ("text", "lang", "title")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
KEY_VERSION = "rephrase-v1"  # bump when the key's inputs change: old cache entries stop matching


class RejectReason(str, Enum):
    """Why a generation is not kept (``rejected/augment/`` reason codes)."""

    EMPTY = "empty"
    INVALID_UTF8 = "invalid_utf8"
    TOO_LONG = "too_long"
    PROMPT_ECHO = "prompt_echo"


@dataclass(frozen=True)
class Template:
    """A prompt: ``{text}`` (the source chunk) exactly once; ``{lang}``, ``{title}`` optional.

    Literal braces are written doubled (``{{``, ``}}``) as in ``str.format``; any other brace,
    a positional or unknown field, an attribute, index, conversion or format spec is refused.
    """

    name: str
    prompt: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"template name {self.name!r}: expected 1-64 of [a-z0-9_-], starting with a letter or digit")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"template {self.name!r}: the prompt must be a non-empty string")
        fields = _fields(self.name, self.prompt)
        unknown = sorted({f for f in fields if f not in PLACEHOLDERS})
        if unknown:
            raise ValueError(f"template {self.name!r}: unknown placeholder(s) {unknown}; allowed: {list(PLACEHOLDERS)}")
        if fields.count("text") != 1:
            raise ValueError(f"template {self.name!r}: {{text}} must appear exactly once (found {fields.count('text')})")

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(sorted(set(_fields(self.name, self.prompt))))

    def render(self, text: str, lang: str = "", title: str = "") -> str:
        return self.prompt.format(text=text, lang=lang, title=title)

    def text_offset(self, lang: str = "", title: str = "") -> int:
        """Where ``{text}`` starts in the rendered prompt."""
        values = {"lang": lang, "title": title}
        offset = 0
        for literal, field, _, _ in string.Formatter().parse(self.prompt):
            offset += len(literal)
            if field == "text":
                break
            offset += len(values.get(field or "", ""))
        return offset


def _fields(name: str, prompt: str) -> list[str]:
    """The placeholder names in ``prompt``; ValueError naming the template on bad syntax."""
    try:
        parsed = list(string.Formatter().parse(prompt))
    except ValueError as error:
        raise ValueError(f"template {name!r}: stray brace in prompt ({error}); write literal braces as {{{{ and }}}}") from None
    fields: list[str] = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if spec or conversion:
            raise ValueError(f"template {name!r}: placeholder {{{field}}} must have no conversion or format spec")
        fields.append(field)
    return fields


BUILTIN_TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("wikipedia", "Rewrite the following text in {lang} as a passage of clear, encyclopedic, "
                              "Wikipedia-style prose. Keep every fact, add none, and write only the passage.\n\n"
                              "Text:\n{text}\n\nPassage:\n"),
        Template("qa", "Read the following text and write question-and-answer pairs in {lang} that cover "
                       "its facts, one pair per fact, as lines starting with 'Question:' and 'Answer:'. "
                       "Use only facts stated in the text.\n\nText:\n{text}\n\nQuestions and answers:\n"),
        Template("summary", "Summarise the following text in {lang} in a few sentences of plain prose. "
                            "Keep the main facts and add none.\n\nText:\n{text}\n\nSummary:\n"),
    )
}


@dataclass(frozen=True)
class GenerationParams:
    """Sampling parameters sent with every request; ``as_json()`` goes into provenance."""

    model: str
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip() or len(self.model) > 512:
            raise ValueError("generation model: expected a non-empty name of at most 512 characters")
        _check_int("max_tokens", self.max_tokens, 1, 1 << 20)
        _check_int("seed", self.seed, 0, (1 << 63) - 1)
        _check_float("temperature", self.temperature, 0.0, 2.0, low_open=False)
        _check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"generation {name}: expected an integer in [{low}, {high}], got {value!r}")


def _check_float(name: str, value: object, low: float, high: float, low_open: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise ValueError(f"generation {name}: expected a number in {bracket}{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class RephraseRequest:
    key: str  # the cache key (64 hex chars): see ``request_key``
    doc_id: str
    chunk: int
    template: str
    prompt: str
    source_chars: int
    params: GenerationParams
    source_offset: int = 0  # where the chunk's text starts in ``prompt``

    @property
    def source(self) -> str:
        """The chunk's text, cut from the prompt."""
        return self.prompt[self.source_offset:self.source_offset + self.source_chars]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def request_key(template: Template, params: GenerationParams, chunk_text: str, lang: str = "", title: str = "") -> str:
    """sha256 over (key version, template name, template prompt, params JSON, sha256 of the
    chunk, and the values of the template's other placeholders). ``lang``/``title`` count
    only when the template uses them: they change the prompt then, and only then."""
    extras = {name: value for name, value in (("lang", lang), ("title", title)) if name in template.placeholders}
    material = [KEY_VERSION, template.name, template.prompt, params.as_json(), _sha256(chunk_text), extras]
    return _sha256(json.dumps(material, sort_keys=True, ensure_ascii=True))


def make_request(doc_id: str, chunk: int, chunk_text: str, template: Template, params: GenerationParams,
                 lang: str = "", title: str = "") -> RephraseRequest:
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ValueError(f"chunk index: expected an integer >= 0, got {chunk!r}")
    return RephraseRequest(key=request_key(template, params, chunk_text, lang, title), doc_id=doc_id, chunk=chunk,
                           template=template.name, prompt=template.render(chunk_text, lang, title),
                           source_chars=len(chunk_text), params=params,
                           source_offset=template.text_offset(lang, title))


@dataclass(frozen=True)
class RephraseResult:
    """A backend's answer to one request: ``text`` (the raw generation, which may still be
    rejected by ``check_generation``) or ``error`` with its ``error_type`` (``http_500``,
    ``timeout``, ``connection``, ``bad_response``, ...) when the call failed. ``attempts``
    counts HTTP attempts (0 for a cache hit); ``seconds`` is the time the request spent in
    flight (all attempts, not the wait for a slot or the back-off sleeps)."""

    request: RephraseRequest
    text: str = ""
    error: str = ""
    error_type: str = ""
    attempts: int = 0
    cached: bool = False
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if bool(self.error) != bool(self.error_type):
            raise ValueError("a result has both error and error_type, or neither")
        if self.error and self.text:
            raise ValueError("a result has either a text or an error, not both")

    @property
    def ok(self) -> bool:
        return not self.error


class Backend(Protocol):
    def generate(self, requests: Sequence[RephraseRequest]) -> list[RephraseResult]:
        """One result per request, in order; a failing request gets ``error`` filled, the
        call itself does not raise for it (retries happen inside)."""
        ...


# --- checks on a generation -------------------------------------------------------------

ECHO_NGRAM = 8  # word n-grams compared with the prompt
ECHO_SHARE = 0.5  # an output whose n-grams are at least this share the prompt's is an echo
ECHO_MIN_WORDS = 3  # shorter outputs are not judged for echo (too few words to tell)
_WORD = re.compile(r"\w+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """Whether the word sequence ``needle`` occurs contiguously in ``haystack``."""
    return bool(needle) and f" {' '.join(needle)} " in f" {' '.join(haystack)} "


def is_prompt_echo(output: str, prompt: str, source: str = "") -> bool:
    """An echo, compared on casefolded ``\\w+`` words: (1) the output contains the whole
    source chunk (at least ``ECHO_NGRAM`` words) verbatim, or the whole prompt; or (2) at
    least ``ECHO_SHARE`` of the output's word n-grams (n = ``ECHO_NGRAM``, or the output's
    word count when shorter, and at least ``ECHO_MIN_WORDS`` words) occur in the prompt."""
    out, prompt_words = _words(output), _words(prompt)
    source_words = _words(source)
    if len(source_words) >= ECHO_NGRAM and _contains(out, source_words):
        return True
    if len(prompt_words) >= ECHO_NGRAM and _contains(out, prompt_words):
        return True
    n = min(ECHO_NGRAM, len(out))
    if n < ECHO_MIN_WORDS:
        return False
    grams = [tuple(out[i:i + n]) for i in range(len(out) - n + 1)]
    seen = _ngrams(prompt_words, n)
    return sum(g in seen for g in grams) >= ECHO_SHARE * len(grams)


def check_generation(request: RephraseRequest, raw: bytes | str, max_ratio: float = 4.0) -> tuple[str, str]:
    """``(text, reject_reason)``: the generation stripped of surrounding whitespace, and ""
    when it is usable, else a ``RejectReason`` value, tested in this order:

    * ``invalid_utf8``: bytes that are not UTF-8, a lone surrogate in a str (JSON ``\\ud800``
      or bytes carried by ``surrogateescape``), or U+FFFD (a server's replacement for bytes
      it could not decode) that the prompt does not contain; U+FFFD at the very end is a
      multi-byte character cut by ``max_tokens`` and is dropped, not rejected. The text
      returned is then made valid (undecodable bytes become U+FFFD) so it can be stored;
    * ``empty``: nothing but whitespace;
    * ``too_long``: more than ``max_ratio`` x the source chunk's characters;
    * ``prompt_echo``: ``is_prompt_echo`` against the request's prompt and source chunk.
    """
    if not (isinstance(max_ratio, (int, float)) and math.isfinite(max_ratio) and max_ratio > 0):
        raise ValueError(f"max_ratio: expected a positive number, got {max_ratio!r}")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace").strip(), RejectReason.INVALID_UTF8.value
    else:
        text = raw
    if _SURROGATE.search(text):
        valid = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return _SURROGATE.sub("\ufffd", valid).strip(), RejectReason.INVALID_UTF8.value
    text = text.strip().rstrip("\ufffd").strip()
    if "\ufffd" in text and "\ufffd" not in request.prompt:
        return text, RejectReason.INVALID_UTF8.value
    if not text:
        return text, RejectReason.EMPTY.value
    if len(text) > max_ratio * max(request.source_chars, 1):
        return text, RejectReason.TOO_LONG.value
    if is_prompt_echo(text, request.prompt, request.source):
        return text, RejectReason.PROMPT_ECHO.value
    return text, ""
