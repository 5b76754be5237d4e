"""Reading a YAML config with bounded cost: file size, node count after aliases, depth.

YAML aliases share one node many times: a few hundred bytes of nested aliases
("billion laughs") stand for billions of values, and anything that walks or prints
the value (type checks, an error message quoting it) runs for minutes and gigabytes.
A job config is a few hundred nodes, so the limits here are far above any real one:

* ``MAX_CONFIG_BYTES``: the file's size;
* ``MAX_NODES``: nodes after alias expansion (an alias counts as every node it stands for);
* ``MAX_DEPTH``: nesting, aliases expanded (deeper values would exhaust the recursion
  of the loader and of the type checks).

``SafeLoader`` semantics otherwise (no Python objects); recursive aliases are refused,
and so is a key given twice in one mapping: PyYAML keeps the last value silently (a
second ``output: /etc`` further down a config made a job write into ``/etc``). Keys a
merge (``<<: *defaults``) brings in may still be overridden, as YAML intends. A text
that YAML's reader refuses (a NUL or another control character) is a ``ValueError``
with the line and column, like every other problem of the file.
"""

from __future__ import annotations

import logging
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pipelines.config_errors import ConfigError

_LOGGER = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: long lists (seeds) belong in their own files
MAX_NODES = 100_000
MAX_DEPTH = 64

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlLimitError(yaml.YAMLError):
    """The document is over one of the limits (or has a recursive alias)."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping holds the same key twice."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class BoundedSafeLoader(yaml.SafeLoader):
    """``SafeLoader`` that counts nodes as if aliases were expanded and stops at the limits."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._expanded = 0
        self._depth = 0
        self._open_anchors: set[str] = set()
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth)

    def _measure(self, node: Node) -> tuple[int, int]:
        """(nodes, depth) of ``node`` with its shared children counted every time."""
        key = id(node)
        if key not in self._measured:
            sizes = [self._measure(child) for child in _children(node)]
            self._measured[key] = (1 + sum(s[0] for s in sizes),
                                   1 + max((s[1] for s in sizes), default=0))
        return self._measured[key]

    def _count(self, nodes: int, depth: int, mark: Any) -> None:
        self._expanded += nodes
        if self._expanded > MAX_NODES:
            raise YamlLimitError(f"more than {MAX_NODES:,} values once aliases are expanded "
                                 f"(at {_where(mark)}); a list that long belongs in its own file")
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"nested more than {MAX_DEPTH} levels deep "
                                 f"(aliases counted expanded) at {_where(mark)}")

    def compose_node(self, parent: Any, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise YamlLimitError(f"recursive alias *{event.anchor} at {_where(event.start_mark)}")
            node = super().compose_node(parent, index)  # raises on an undefined alias
            nodes, depth = self._measure(node)
            self._count(nodes, self._depth + depth, event.start_mark)
            return node
        self._depth += 1
        self._count(1, self._depth, event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(anchor)

    def compose_mapping_node(self, anchor: Any) -> Node:
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # merges may override; a list or mapping key fails later anyway
            key = (key_node.tag, self.construct_object(key_node))
            if key in seen:
                raise DuplicateKeyError(
                    f"duplicate key {key_node.value!r} at {_where(seen[key])} and again at "
                    f"{_where(key_node.start_mark)}: YAML would silently keep only the last "
                    "value; remove one of them")
            seen[key] = key_node.start_mark
        return node


def load_yaml(data: bytes, source: str) -> Any:
    """The value of the YAML document ``data``; ``ValueError`` naming ``source`` and the
    problem (over a limit, not UTF-8, not YAML)."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{source}: config file is over the limit of {MAX_CONFIG_BYTES:,} "
                         "bytes (long lists belong in their own files, e.g. crawl.seeds_file)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: not UTF-8 text: {exc}") from None
    try:
        loader = BoundedSafeLoader(text)  # its reader refuses NUL and control characters here
    except yaml.reader.ReaderError as exc:
        raise ValueError(f"{source}: not valid YAML: {_reader_problem(exc, text)}") from None
    try:
        return loader.get_single_data()
    except YamlLimitError as exc:
        raise ValueError(f"{source}: YAML over the limits: {exc}") from None
    except DuplicateKeyError as exc:
        raise ValueError(f"{source}: {exc}") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer over 4,300 digits
        raise ValueError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:  # not reachable within MAX_DEPTH; kept as a last line
        raise ValueError(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _reader_problem(exc: yaml.reader.ReaderError, text: str) -> str:
    """YAML's reader error as the character and its line and column (it gives a position)."""
    before = text[:exc.position]
    line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
    char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return (f"character #x{char:04x} at line {line}, column {column} is not allowed in YAML "
            "(a NUL or control character: the file is binary or damaged)")


def read_yaml_file(path: str) -> Any:
    """The YAML value of the file ``path``; ``ConfigError`` naming it otherwise."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        return load_yaml(raw, path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
