"""Job configuration: YAML → frozen, typed, validated dataclasses.

Everything is checked before a pipeline starts: an unknown key, a value of the wrong
type, a value out of range, an input pattern that matches no file and a missing seeds
file each raise one ``ConfigError`` that names the file and the key, e.g.
``configs/demo.yaml: crawl.min_delay_s: expected a number, got 'fast'``.

Relative paths are resolved against the working directory (run jobs from the project
root, as ``make run`` does). The YAML is read with bounded cost (``pipelines.config_yaml``),
inputs that the job's own outputs would overwrite or delete are refused
(``pipelines.config_paths``), and every message has URL credentials masked and quotes
a bounded part of a value (``pipelines.config_errors``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from transforms.augment.config import AugmentConfig
from transforms.clean.clean import CleanConfig
from transforms.crawl.crawler import CrawlConfig
from transforms.dedup.dedup import DedupConfig
from storage.tiers import StorageConfig
from transforms.tokenize.tokenize import TokenizeConfig
from transforms.crawl.fetcher import FetchPolicy
from transforms.extract.extract import ExtractConfig
from transforms.label.label import LabelConfig
from transforms.readers.tabular import TextFields
from pipelines.config_errors import ConfigError, did_you_mean, quote
from pipelines.config_inputs import check_input_fields
from pipelines.config_paths import check_job_paths, check_no_credentials, expand_output
from pipelines.config_yaml import read_yaml_file
from pipelines.stage_specs import check_stages, default_stages, known_stages

_LOGGER = logging.getLogger(__name__)

INPUT_FORMATS = ("warc", "wet", "arc", "jsonl", "parquet")
INT_RANGE = (-(1 << 63), (1 << 63) - 1)  # integer keys end up in Parquet, Beam coders, numpy


@dataclass(frozen=True)
class InputConfig:
    """One input: a path, URL or glob (local, https://, s3://) and its format.

    The ``*_field`` keys name JSONL / Parquet fields; a name with dots reads nested objects
    (Dolma's ``metadata.url``) or Parquet struct columns. A record that lacks (or holds
    null in) an optional field whose name the config sets, not left at its default, is
    counted as ``missing_<field>`` (e.g. ``missing_url``) in the run's table."""

    format: str  # warc | wet | arc | jsonl | parquet
    path: str  # a file, a glob (``data/*.jsonl.gz``) or a URL; compression from the name
    # JSONL / Parquet: the field holding the text; a dotted path reads a nested field
    # (``metadata.text``); a record without it goes to failed/extract/ (bad_record)
    text_field: str = "text"
    # JSONL / Parquet: the document id (dotted paths too); without one a record's id is a
    # hash of its file and position
    id_field: str = "id"
    url_field: str = "url"  # JSONL / Parquet: the URL (Dolma: ``metadata.url``)
    fetched_at_field: str = "fetched_at"  # JSONL / Parquet: the fetch or creation time (Dolma: ``created``)
    lang_field: str = "lang"  # JSONL / Parquet: a language given by the source (kept as a hint)

    def __post_init__(self) -> None:
        if self.format not in INPUT_FORMATS:
            raise ValueError(f"format must be one of {list(INPUT_FORMATS)}, got {self.format!r}")
        if not self.path.strip():
            raise ValueError("path must not be empty")

    def fields(self) -> TextFields:
        return TextFields(text=self.text_field, id=self.id_field, url=self.url_field,
                          fetched_at=self.fetched_at_field, lang=self.lang_field)


@dataclass(frozen=True)
class CrawlSection:
    """The ``crawl:`` section (flat in YAML; see ``CrawlConfig`` and ``FetchPolicy``)."""

    seeds: tuple[str, ...] = ()  # start URLs
    seeds_file: str = ""  # a file of start URLs, one a line (with or instead of ``seeds``)
    user_agent: str = FetchPolicy.user_agent  # sent with every request and matched against robots.txt
    min_delay_s: float = FetchPolicy.min_delay_s  # seconds between two requests to one host
    timeout_s: float = FetchPolicy.timeout_s  # per request
    max_retries: int = FetchPolicy.max_retries  # retries of a failed request (timeouts, 429, 5xx)
    backoff_s: float = FetchPolicy.backoff_s  # first retry delay, doubled at each retry (with jitter)
    max_backoff_s: float = FetchPolicy.max_backoff_s  # cap of the retry delay (and of a Retry-After)
    max_bytes: int = FetchPolicy.max_bytes  # a body is cut at this size
    allowed_content_types: tuple[str, ...] = FetchPolicy.allowed_content_types  # bodies of other types are not downloaded
    max_redirects: int = CrawlConfig.max_redirects  # per URL
    max_pages_per_host: int = CrawlConfig.max_pages_per_host  # crawl budget per host
    max_depth: int = CrawlConfig.max_depth  # links followed from a seed (seeds are depth 0)
    respect_robots: bool = CrawlConfig.respect_robots  # obey robots.txt
    allow_patterns: tuple[str, ...] = ()  # regular expressions on the full URL: only matching URLs are crawled
    deny_patterns: tuple[str, ...] = ()  # regular expressions on the full URL: matching URLs are skipped
    warc_max_bytes: int = CrawlConfig.warc_max_bytes  # a WARC file is closed and a new one begun at this size

    def __post_init__(self) -> None:
        if not self.seeds and not self.seeds_file:
            raise ValueError("needs seeds or seeds_file")
        self.to_crawl_config()  # validates the values

    def policy(self) -> FetchPolicy:
        return FetchPolicy(
            user_agent=self.user_agent, timeout_s=self.timeout_s, min_delay_s=self.min_delay_s,
            max_retries=self.max_retries, backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s, max_bytes=self.max_bytes,
            allowed_content_types=self.allowed_content_types,
        )

    def to_crawl_config(self, seeds: tuple[str, ...] = ()) -> CrawlConfig:
        return CrawlConfig(
            seeds=seeds or self.seeds, policy=self.policy(), max_redirects=self.max_redirects,
            max_pages_per_host=self.max_pages_per_host, max_depth=self.max_depth,
            respect_robots=self.respect_robots, allow_patterns=self.allow_patterns,
            deny_patterns=self.deny_patterns, warc_max_bytes=self.warc_max_bytes,
        )


@dataclass(frozen=True)
class ReadSection:
    """Reader limits."""

    max_payload_bytes: int = 10 * 1024 * 1024  # a longer WARC payload is cut there (the doc is flagged truncated)
    max_failed_raw_bytes: int = 16 * 1024 * 1024  # raw input kept with a failed/ record, at most
    # uncompressed JSONL files larger than this are read as byte ranges of this size
    split_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_payload_bytes <= 0 or self.max_failed_raw_bytes <= 0 or self.split_bytes <= 0:
            raise ValueError("sizes must be > 0")


@dataclass(frozen=True)
class JobConfig:
    """A whole job. ``beam_args`` are default pipeline options (the command line wins)."""

    output: str  # where everything goes: a local folder or a URL (s3://, gs://, ...)
    stages: tuple[str, ...] = ()  # the stages to run (table above); empty: every stage whose section is set
    inputs: tuple[InputConfig, ...] = ()  # files to read (needed unless there is a crawl section)
    crawl: Optional[CrawlSection] = None  # crawl seeds; the pages fetched feed extract
    read: ReadSection = ReadSection()  # reader limits
    extract: ExtractConfig = ExtractConfig()  # HTML to text (records of JSONL and Parquet are text already)
    clean: Optional[CleanConfig] = None  # language ID, quality rules and models, PII redaction
    dedup: Optional[DedupConfig] = None  # exact and near-duplicate removal (``dedup: {}`` for the defaults)
    label: Optional[LabelConfig] = None  # model labels and the human review queue
    augment: Optional[AugmentConfig] = None  # upsampling and language-model rephrasing (``source: synthetic``)
    tokenize: Optional[TokenizeConfig] = None  # tokenizer and token shards
    storage: Optional[StorageConfig] = None  # storage tiers of the token shards (``python -m pipelines.tiers``)
    beam_args: tuple[str, ...] = ()  # Beam pipeline options, e.g. ``--runner=FnApiRunner``; the command line wins
    source_file: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.output.strip():
            raise ValueError("output must not be empty")
        check_stages(self)
        if not self.inputs and self.crawl is None:
            raise ValueError("needs inputs: or a crawl: section")
        if self.augment is not None and self.augment.rephrase is not None and self.clean is None:
            raise ValueError("augment.rephrase needs a clean: section: every generated document passes "
                             "the clean stage's checks before it is kept")

    def active_stages(self) -> tuple[str, ...]:
        """The stages to run, in pipeline order."""
        if self.stages:
            return tuple(s for s in known_stages() if s in self.stages)
        return default_stages(self)

    def section_hash(self, *names: str) -> str:
        """sha256 of the named sections: a stage's part of the resume fingerprint."""
        payload = {name: _plain(getattr(self, name)) for name in names}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.compare}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _type_name(tp: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(value: Any, tp: Any, key: str) -> Any:
    """``value`` as type ``tp``, or ``ConfigError`` naming ``key``."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _convert(value, args[0], key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {quote(value)}")
        item_type = typing.get_args(tp)[0]
        return tuple(_convert(v, item_type, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, key)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {quote(value)}")
        return number
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise ConfigError(f"{key}: expected an integer within 64 bits, got {quote(value)}")
        return value
    if tp in (bool, str) and isinstance(value, tp):
        return value
    hint = ""
    if tp is str and isinstance(value, bool):  # YAML 1.1: no, yes, on, off, n, y are booleans
        hint = " (YAML reads no/yes/on/off as true or false: quote the value, e.g. 'no' for Norwegian)"
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {quote(value)}{hint}")


def from_mapping(cls: type, data: Any, key: str = "") -> Any:
    """A ``cls`` dataclass from a YAML mapping, checking keys, types and values."""
    where = key or "top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {quote(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.compare}
    unknown = sorted(set(data) - set(fields), key=str)  # YAML keys may be numbers or null
    if unknown:
        name = unknown[0] if isinstance(unknown[0], str) else quote(unknown[0])
        raise ConfigError(f"{key + '.' if key else ''}{name}: unknown key{did_you_mean(unknown[0], fields)} "
                          f"(allowed in {where}: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _convert(value, hints[name], f"{key}.{name}" if key else name)
    missing = [n for n, f in fields.items() if n not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{key + '.' if key else ''}{missing[0]}: required key is missing")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: {exc}") from exc


def load_config(path: str, output: Optional[str] = None,
                stages: Optional[tuple[str, ...]] = None, check_models: bool = True) -> JobConfig:
    """The validated ``JobConfig`` of a YAML file, with command-line overrides."""
    data = read_yaml_file(path)
    data = dict(data or {}) if isinstance(data, dict) or data is None else data
    if isinstance(data, dict):
        if output:
            data["output"] = output
        if stages:
            data["stages"] = list(stages)
    try:
        config = from_mapping(JobConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    config = dataclasses.replace(config, source_file=path, output=expand_output(config.output))
    check_no_credentials(config)
    check_files(config)
    if check_models:
        check_model_files(config)
    return config


def check_model_files(config: JobConfig) -> None:
    """Loads every configured model once: a missing or corrupt file fails here, naming
    the key, before any pipeline starts."""
    from models.fasttext_models import LanguageIdentifier, TextClassifier
    from models.files import ModelError
    from transforms.clean.detect import load_detector

    tokenize = config.tokenize
    if tokenize is not None and tokenize.model and "tokenize" in config.active_stages():
        try:
            import sentencepiece as spm

            from models.files import local_copy

            spm.SentencePieceProcessor(model_file=local_copy(tokenize.model))
        except (ModelError, OSError, RuntimeError) as exc:
            raise ConfigError(f"{config.source_file}: tokenize.model: not a sentencepiece model: "
                              f"{tokenize.model}: {exc}") from None
    label = config.label
    if label is not None and "label" in config.active_stages():
        from models.labeller import Labeller

        for i, spec in enumerate(label.sets):
            try:
                Labeller.load(spec.model, spec.version, spec.name, spec.values)
            except ModelError as exc:
                raise ConfigError(f"{config.source_file}: label.sets[{i}].model: {exc}") from None
    clean = config.clean
    if clean is None or "clean" not in config.active_stages():
        return
    loaders = [("clean.langid.model", clean.langid.model, LanguageIdentifier.load)]
    if clean.anomaly.model:
        loaders.append(("clean.anomaly.model", clean.anomaly.model,
                        lambda p: load_detector(clean.anomaly)))
    if clean.quality.model:
        loaders.append(("clean.quality.model", clean.quality.model,
                        lambda p: TextClassifier.load(p, clean.quality.positive_label)))
    for key, path, load in loaders:
        try:
            model = load(path)
        except ModelError as exc:
            raise ConfigError(f"{config.source_file}: {key}: {exc}") from None
        if key == "clean.langid.model":
            _check_languages(config, model.labels)


def _check_languages(config: JobConfig, labels: frozenset[str]) -> None:
    """Every configured language must be one the language-ID model can emit: any other
    code would silently reject (or never rule-check) every document."""
    clean = config.clean
    for key, codes in (("clean.langid.languages", clean.langid.languages),
                       ("clean.rules_languages", clean.rules_languages)):
        unknown = [code for code in codes if code not in labels]
        if unknown:
            raise ConfigError(f"{config.source_file}: {key}: {', '.join(map(repr, unknown))} "
                              f"{'is' if len(unknown) == 1 else 'are'} not among the {len(labels)} languages "
                              f"{clean.langid.model} can emit ({', '.join(sorted(labels)[:12])}, ...; "
                              f"Norwegian Bokmål is 'no')")


def check_files(config: JobConfig) -> None:
    """The output and the inputs (``pipelines.config_paths.check_job_paths``), then the
    field names of JSONL and Parquet inputs (``pipelines.config_inputs``)."""
    check_input_fields(config, check_job_paths(config))


def configure_filesystems(config: JobConfig, cli_args: tuple[str, ...] | list[str] = ()) -> None:
    """Beam's filesystems take their settings (``--s3_endpoint_url``, credentials, region,
    ``--hdfs_host``...) from pipeline options; the driver reads and writes the output
    (manifests, review queues, the report) before and between pipelines, so the job's
    options are installed for it too. The command line wins over ``beam_args``."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(config.beam_args) + list(cli_args)))


def load_config_or_report(path: str) -> Optional[JobConfig]:
    """For the model commands: the config without loading models, or None after printing
    the error (they train the models the config points at)."""
    import sys

    try:
        config = load_config(path, check_models=False)
    except ConfigError as exc:
        sys.stderr.write(f"config error: {exc}\n")
        return None
    configure_filesystems(config)
    return config
