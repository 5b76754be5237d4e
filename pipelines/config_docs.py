"""``docs/CONFIG.md``, generated from the config dataclasses: every key of every section,
its YAML type, its default and its meaning.

    python -m pipelines.config_docs            # prints it
    python -m pipelines.config_docs --write    # rewrites docs/CONFIG.md

The sections are ``JobConfig``'s fields, walked depth first; the stages come from the
stage table (``pipelines.stage_specs``). A key's meaning is its field's comment in the
class source: the comment lines right above the field, then the comment at the end of
its line. Classes generated from a table (the quality rules) carry their meanings in a
``field_docs`` mapping instead. A key without a meaning is an error
(``MissingMeaning``), so a new key cannot be added undocumented; ``tests/pipelines/
test_config_docs.py`` regenerates the file and fails when the checked-in one differs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

from pipelines.config import JobConfig
from pipelines.stage_specs import STAGE_SPECS

__all__ = ["CONFIG_MD", "Key", "MissingMeaning", "Section", "field_meanings", "main", "render", "sections"]

CONFIG_MD = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


class MissingMeaning(ValueError):
    """A config key whose field has no comment (and no ``field_docs`` entry)."""


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # in YAML terms: "string", "list of strings", "mapping (`read`)", ...
    default: str  # as written in YAML, in backticks; "required" when there is none
    meaning: str


@dataclass(frozen=True)
class Section:
    path: str  # "" for the top level, else e.g. "clean.langid", "inputs[]"
    doc: str  # the class docstring
    keys: tuple[Key, ...]


def field_meanings(cls: type) -> dict[str, str]:
    """Each field's comment in the class source (the lines above it, then the one at the
    end of its line), or the class's ``field_docs`` for a class generated from a table."""
    generated = getattr(cls, "field_docs", None)
    if generated is not None:
        return dict(generated)
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    meanings = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, line = [], node.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        trailing = [comments[node.end_lineno]] if node.end_lineno in comments else []
        meanings[node.target.id] = " ".join(above + trailing)
    return meanings


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in _args(tp)


def _inner(tp: Any) -> Any:
    return next(a for a in _args(tp) if a is not type(None)) if _is_optional(tp) else tp


def _type_text(tp: Any, path: str) -> str:
    """The YAML type of a field of type ``tp`` at ``path``."""
    suffix = " or null" if _is_optional(tp) else ""
    tp = _inner(tp)
    if dataclasses.is_dataclass(tp):
        return f"mapping (`{path}`)" + (", optional" if suffix else "")
    if typing.get_origin(tp) is tuple:
        item = _args(tp)[0]
        if dataclasses.is_dataclass(item):
            return f"list of mappings (`{path}[]`)"
        return f"list of {_SCALARS[item]}s"
    return _SCALARS[tp] + suffix


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if value == "" or not value.replace("_", "").replace("-", "").isalnum() else value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    return repr(value)


def _default_text(f: dataclasses.Field, tp: Any) -> str:
    """The default as a cell: YAML in backticks, a size in bytes also in MiB or GiB."""
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if dataclasses.is_dataclass(_inner(tp)):
        return "unset" if value is None else "its section's"
    text = f"`{_yaml_value(value)}`"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if f.name.endswith("bytes") and isinstance(value, int) and value >= size and value % size == 0:
            return f"{text} ({value // size} {unit})"
    return text


def _doc(cls: type) -> str:
    """The class docstring; "" for the signature ``dataclass`` writes when there is none."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    return "" if doc.startswith(f"{cls.__name__}(") else doc


def _child_types(tp: Any) -> Iterator[type]:
    tp = _inner(tp)
    if dataclasses.is_dataclass(tp):
        yield tp
    elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(_args(tp)[0]):
        yield _args(tp)[0]


def _section(cls: type, path: str) -> Iterator[Section]:
    """The section of ``cls`` at ``path``, then its subsections, depth first."""
    hints = typing.get_type_hints(cls)
    meanings = field_meanings(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init and f.compare]  # what YAML may set
    keys = []
    for f in fields:
        child = f"{path}.{f.name}" if path else f.name
        meaning = meanings.get(f.name, "")
        if not meaning:
            raise MissingMeaning(f"config key {child} ({cls.__module__}.{cls.__qualname__}.{f.name}) "
                                 "has no meaning: add a comment to the field")
        keys.append(Key(f.name, _type_text(hints[f.name], child), _default_text(f, hints[f.name]), meaning))
    yield Section(path, _doc(cls), tuple(keys))
    for f in fields:
        for child_cls in _child_types(hints[f.name]):
            list_item = typing.get_origin(_inner(hints[f.name])) is tuple
            child = (f"{path}.{f.name}" if path else f.name) + ("[]" if list_item else "")
            yield from _section(child_cls, child)


def sections(root: type = JobConfig) -> tuple[Section, ...]:
    """Every section of the job config, the top level first; ``MissingMeaning`` if a key
    has none."""
    return tuple(_section(root, ""))


def _cell(text: str) -> str:
    """One table cell: one line, ``rst`` literals as Markdown code, ``|`` escaped."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _stages_table() -> list[str]:
    lines = ["| stage | section | reads | what it does |", "|---|---|---|---|"]
    for spec in STAGE_SPECS:
        lines.append(f"| `{spec.name}` | `{spec.section}` | {_cell(spec.reads)} | {_cell(spec.does)} |")
    return lines


_INTRO = """\
# Job configuration reference

<!-- Generated by `python -m pipelines.config_docs --write` from the config dataclasses
     (pipelines/config.py and the stage configs it imports); do not edit by hand:
     tests/pipelines/test_config_docs.py fails when this file is stale. -->

A job is one YAML file: `python -m pipelines.run --config FILE`. Every key below is
checked before anything runs: an unknown key, a value of the wrong type or out of range,
an input pattern that matches no file and a missing model file each stop the job with
one error naming the file and the key. Relative paths are relative to the directory the
command runs in (the repository root). Examples: `configs/` (`jsonl.yaml`, `parquet.yaml`,
`warc.yaml` for the whole chain on real WARC files, `local.yaml`, `demo.yaml`, and the
cluster configs).

## Stages

In pipeline order. Without `stages:` (or `--stages`), a job runs every stage whose
section it sets (`extract` always has one); a stage that reads "earlier docs" reads the
documents of the nearest earlier document stage of the job.
"""


def render() -> str:
    """The text of docs/CONFIG.md."""
    out = [_INTRO, *_stages_table(), ""]
    for section in sections():
        title = f"`{section.path}`" if section.path else "Top level"
        out += [f"## {title}", ""]
        if section.doc:
            out += [section.doc.replace("``", "`"), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k.name}` | {k.type} | {k.default} | {_cell(k.meaning)} |" for k in section.keys]
        out.append("")
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.config_docs",
                                     description="Print (or --write) docs/CONFIG.md.")
    parser.add_argument("--write", action="store_true", help=f"rewrite {CONFIG_MD}")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        CONFIG_MD.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
