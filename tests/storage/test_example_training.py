"""examples/train_tiny.py: loss falls on real tokens and a mid-epoch resume is exact."""

from __future__ import annotations

import json

import numpy as np
import sentencepiece as spm

from examples.train_tiny import run
from storage.shards import encode_shard
from tests.conftest import shared


def test_tiny_model_learns_and_resumes_exactly(tmp_path):
    sp = spm.SentencePieceProcessor(model_file=str(shared("models", "spm_test_model_botchan.model")))
    lines = [l for l in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    docs = [np.array(ids + [sp.eos_id()], dtype=np.uint16) for ids in sp.encode(lines[:3000])]
    entries = []
    for s in range(4):
        data, d, t, sha = encode_shard(docs[s::4], np.dtype(np.uint16))
        (tmp_path / f"s{s}.tfs").write_bytes(data)
        entries.append({"name": f"s{s}.tfs", "num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha})
    (tmp_path / "index.json").write_text(json.dumps({"version": "v", "vocab_size": sp.get_piece_size(),
                                                     "shards": entries}))
    result = run(str(tmp_path / "index.json"), steps=24, resume_at=12, seq_len=64, batch=8)
    assert result["resume_exact"] is True
    assert result["last_loss"] < result["first_loss"] - 1.0
