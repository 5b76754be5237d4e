"""Splitting a long document into chunks that fit a model's context, and rejoining.

A chunk ends at the last paragraph break that keeps it within ``max_chars``, else the
last line break, else the last sentence end, else the last space, else it is cut hard.
The chunks concatenate back to the text (``"".join(split_chunks(t, n)) == t``), so no
part of a document is lost or rewritten twice. Generated chunks are rejoined with a
blank line between them.
"""

from __future__ import annotations

import re

__all__ = ["split_chunks", "join_chunks"]

_SENTENCE_END = re.compile(r"[.!?。！？](?:[\"'”’)\]]*)\s")


def _break_at(window: str) -> int:
    """Where to end a chunk inside ``window`` (the text's next ``max_chars`` + 1): the
    index after the best break, or 0 when there is none."""
    for sep in ("\n\n", "\n"):
        at = window.rfind(sep)
        if at > 0:
            return at + len(sep)
    ends = list(_SENTENCE_END.finditer(window))
    if ends and ends[-1].end() > 0:
        return ends[-1].end()
    at = window.rfind(" ")
    return at + 1 if at > 0 else 0


def split_chunks(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at the best break."""
    if max_chars <= 0:
        raise ValueError("max_chars must be > 0")
    chunks, start = [], 0
    while len(text) - start > max_chars:
        window = text[start:start + max_chars]
        cut = _break_at(window) or max_chars
        chunks.append(text[start:start + cut])
        start += cut
    if start < len(text) or not chunks:
        chunks.append(text[start:])
    return chunks


def join_chunks(outputs: list[str]) -> str:
    """The generated chunks, in order, as one text (a blank line between them)."""
    return "\n\n".join(part.strip() for part in outputs if part.strip())
