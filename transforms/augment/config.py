"""The ``augment:`` section: which documents are augmented, and how.

Two augmentations, as production pretraining pipelines use them:

* **upsampling** (DCLM, Nemotron-CC): ``upsample`` rules give a document a repeat count
  from its scores and labels (the top quality decile x3, a label value x2); tokenize
  writes it that many times, placed apart by the shuffle. The text is not copied.
* **rephrasing** ("rephrasing the web"): a language model rewrites selected documents
  with prompt templates (Wikipedia-style prose, question-answer pairs, a summary); each
  output is a new ``source: synthetic`` document with its provenance, checked like the
  clean stage checks a crawled page before it is kept.

Pure: no Beam, no network. Every value is checked here, so a bad section is a
``ConfigError`` naming the key before any pipeline starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

__all__ = ["AugmentConfig", "check_api_key_env", "check_endpoint", "RephraseConfig", "Selection", "TemplateSpec", "UpsampleRule", "BACKENDS"]

BACKENDS = ("openai", "runinference")
APIS = ("completions", "chat")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_LABEL = re.compile(r"^[A-Za-z0-9_]+=[^\s=]+$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def check_endpoint(endpoint: object) -> str:
    """An http(s) base URL with a host and no credentials, query or fragment; no trailing /
    (the config and the backend apply this one rule)."""
    parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("endpoint: expected an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("endpoint: no credentials, query or fragment (put the key in api_key_env)")
    return endpoint.rstrip("/")  # type: ignore[union-attr]


def check_api_key_env(name: object) -> str:
    """The variable's *name*; the message never repeats a value that might be a key."""
    if name == "":
        return ""
    if not isinstance(name, str) or not _ENV.match(name):
        raise ValueError("api_key_env: expected the name of an environment variable (letters, digits, _)")
    return name


def _fraction(name: str, value: Optional[float], low_open: bool = True) -> None:
    if value is None:
        return
    if not (0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be in {'(0, 1]' if low_open else '[0, 1]'}, got {value}")


@dataclass(frozen=True)
class Selection:
    """Which documents: every condition set must hold (unset conditions always hold).

    ``top_quality_fraction`` is relative to this run's documents (their quality score
    quantile, as the clean stage's ``quality.top_fraction``); ``labels`` are
    ``set=value`` pairs of which any one must be on the document (a model label at least
    ``min_label_score`` confident, or a human label); ``sample_rate`` keeps a seeded hash
    sample of the documents that pass the rest (the same documents on every run)."""

    min_quality: Optional[float] = None  # quality_score at least this (documents without one fail it)
    top_quality_fraction: Optional[float] = None  # within the top fraction of this run's quality scores
    max_anomaly: Optional[float] = None  # anomaly_score at most this (documents without one pass)
    labels: tuple[str, ...] = ()  # "set=value": any of them on the document
    min_label_score: float = 0.0  # a model label counts when at least this confident
    languages: tuple[str, ...] = ()  # the document's language is one of these
    sample_rate: float = 1.0  # a seeded hash sample of what passes the rest
    seed: int = 0  # of the sample

    def __post_init__(self) -> None:
        for name in ("min_quality", "max_anomaly"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number")
        _fraction("top_quality_fraction", self.top_quality_fraction)
        _fraction("sample_rate", self.sample_rate, low_open=False)
        _fraction("min_label_score", self.min_label_score, low_open=False)
        bad = [label for label in self.labels if not _LABEL.match(label)]
        if bad:
            raise ValueError(f"labels must be 'set=value' pairs, got {bad[0]!r}")
        if any(not code.strip() for code in self.languages):
            raise ValueError("languages must not hold an empty code")

    @property
    def needs_quantile(self) -> bool:
        return self.top_quality_fraction is not None and self.top_quality_fraction < 1.0


@dataclass(frozen=True)
class UpsampleRule:
    """Documents matching ``when`` are written ``repeat`` times by tokenize. A document
    matching several rules takes the largest repeat, and every matching rule's name is
    recorded on it (``Doc.repeat_rules``)."""

    name: str  # recorded on the documents it matches (``repeat_rules``) and in the tokenize manifest
    repeat: int  # how many times a matching document is written (2 or more)
    when: Selection = field(default_factory=Selection)  # the documents it matches

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"upsample rule name must be letters, digits, _ . - (up to 64), got {self.name!r}")
        if self.repeat < 2:
            raise ValueError(f"upsample rule {self.name!r}: repeat must be at least 2, got {self.repeat}")


@dataclass(frozen=True)
class TemplateSpec:
    """A prompt template: a built-in by name (``wikipedia``, ``qa``, ``summary``) when
    ``prompt`` is empty, or your own prompt with ``{text}`` (and optionally ``{lang}``,
    ``{title}``)."""

    name: str  # a built-in (wikipedia, qa, summary) or your own template's name (in provenance)
    prompt: str = ""  # your own prompt, with {text} (and optionally {lang}, {title}); "" = the built-in

    def __post_init__(self) -> None:
        self.template()  # validates the name and the prompt's placeholders

    def template(self) -> Any:
        """The ``transforms.augment.rephrase.Template`` (a built-in by name when ``prompt`` is empty)."""
        from transforms.augment.rephrase import BUILTIN_TEMPLATES, Template

        if self.prompt:
            return Template(self.name, self.prompt)
        if self.name not in BUILTIN_TEMPLATES:
            raise ValueError(f"template {self.name!r} has no prompt and is not a built-in "
                             f"({', '.join(sorted(BUILTIN_TEMPLATES))})")
        return BUILTIN_TEMPLATES[self.name]


@dataclass(frozen=True)
class RephraseConfig:
    """The language-model rewriting of selected documents."""

    backend: str = "openai"  # openai (an OpenAI-compatible server: vLLM, TGI, llama.cpp) | runinference (in-process)
    endpoint: str = ""  # openai: the server's base URL, e.g. http://vllm:8000 (no credentials in it)
    api: str = "completions"  # openai: /v1/completions or /v1/chat/completions ("chat")
    api_key_env: str = ""  # openai: the environment variable holding the API key (the key is never in the config)
    model: str = ""  # openai: the served model's name; runinference: a local Hugging Face model directory
    templates: tuple[TemplateSpec, ...] = (TemplateSpec("wikipedia"),)  # every selected document, once per template
    select: Selection = field(default_factory=Selection)  # which documents are rephrased
    max_tokens: int = 512  # per generated chunk
    temperature: float = 0.7  # sampling temperature sent to the model
    top_p: float = 0.95  # nucleus sampling sent to the model
    seed: int = 0  # sampling seed sent to the model
    concurrency: int = 16  # requests in flight per worker
    timeout_s: float = 120.0  # per request
    retries: int = 5  # of a request that timed out or got a 429 / 5xx (Retry-After honoured)
    backoff_s: float = 1.0  # first retry delay (exponential, full jitter)
    max_backoff_s: float = 60.0  # cap of a retry delay and of a Retry-After
    batch_size: int = 64  # requests handed to the backend at once
    chunk_chars: int = 4000  # longer documents are split (paragraphs, lines, sentences) and rejoined
    max_output_ratio: float = 4.0  # a chunk's output longer than this x its source is rejected (too_long)
    min_length_ratio: float = 0.1  # a generation shorter than this x its parent is rejected (length_ratio)
    max_length_ratio: float = 3.0  # a generation longer than this x its parent is rejected (length_ratio)
    cache_dir: str = ""  # responses by (template, model, parameters, source hash); "" = <output>/cache/augment

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        if self.api not in APIS:
            raise ValueError(f"api must be one of {list(APIS)}, got {self.api!r}")
        if not self.model.strip():
            raise ValueError("model must be set (the served model's name, or a local model directory)")
        if self.backend == "openai":
            check_endpoint(self.endpoint)
        check_api_key_env(self.api_key_env)
        if not self.templates:
            raise ValueError("templates must name at least one template")
        names = [t.name for t in self.templates]
        if len(set(names)) != len(names):
            raise ValueError(f"template names must be unique, got {names}")
        for name in ("max_tokens", "concurrency", "batch_size", "chunk_chars"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if not 0.0 <= self.temperature <= 5.0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError("temperature must be in [0, 5] and top_p in (0, 1]")
        for name in ("timeout_s", "backoff_s", "max_backoff_s", "max_output_ratio", "max_length_ratio"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not 0.0 <= self.min_length_ratio < self.max_length_ratio:
            raise ValueError("min_length_ratio must be >= 0 and below max_length_ratio")


@dataclass(frozen=True)
class AugmentConfig:
    """The ``augment:`` section (after ``label``, before ``tokenizer``)."""

    select: Selection = field(default_factory=Selection)  # documents eligible for any augmentation
    upsample: tuple[UpsampleRule, ...] = ()  # repeat counts from scores and labels
    max_repeats: int = 16  # a document's repeat count at most (the largest matching rule's, capped)
    rephrase: Optional[RephraseConfig] = None  # language-model rewriting (unset: none)

    def __post_init__(self) -> None:
        names = [rule.name for rule in self.upsample]
        if len(set(names)) != len(names):
            raise ValueError(f"upsample rule names must be unique, got {names}")
        if self.max_repeats < 1:
            raise ValueError("max_repeats must be >= 1")
        over = [rule.name for rule in self.upsample if rule.repeat > self.max_repeats]
        if over:
            raise ValueError(f"upsample rule {over[0]!r} repeats more than max_repeats ({self.max_repeats})")
        if not self.upsample and self.rephrase is None:
            raise ValueError("augment needs upsample rules or a rephrase section")
