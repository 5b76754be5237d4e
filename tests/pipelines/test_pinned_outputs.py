"""The pinned outputs (issue 37, item 2): kept ids, rejected reasons and details per
stage, near-duplicate edges and the token shards with their index.json, as a digest
that a speed change must leave as it is (``tests/pinned.py`` says how to rewrite it when a
change is meant to alter outputs)."""

from __future__ import annotations

import json

from tests.pinned import GOLDEN, run_and_digest


def test_the_outputs_of_the_fixed_corpus_are_the_pinned_ones(tmp_path):
    found = run_and_digest(tmp_path / "somewhere" / "else")
    expected = json.loads(GOLDEN.read_text())
    differing = sorted(part for part in set(found) | set(expected) if found.get(part) != expected.get(part))
    assert not differing, (f"outputs changed in {differing}: {json.dumps({p: found.get(p) for p in differing})}; "
                           "if the change is meant to alter outputs: .venv/bin/python -m tests.pinned --write")
