"""Train a tiny language model on token shards, on the CPU, with an exact resume.

    .venv/bin/python examples/train_tiny.py --index out/demo/tokens/<version>/index.json \
        [--steps 60] [--resume-at 30]

A 2-layer causal transformer (d=64) reads windows from ``storage.loader.TokenLoader``.
With ``--resume-at K`` it stops after K steps, saves model, optimiser and loader state,
restarts from that checkpoint in a fresh loader (with another number of workers) and
checks that the batches it gets are the ones an uninterrupted run gets next.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
from torch import nn

from storage.loader import Source, TokenDataset, TokenLoader


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int = 64, layers: int = 2, seq_len: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq_len, d)
        block = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        h = self.embed(x) + self.pos(torch.arange(n))
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        return self.head(self.blocks(h, mask=mask, is_causal=True))


def make_loader(index: str, seq_len: int, batch: int, workers: int) -> TokenLoader:
    dataset = TokenDataset([Source(index)], seq_len=seq_len, batch_size=batch, seed=0, prefetch_depth=0)
    return TokenLoader(dataset, num_workers=workers)


def step(model: nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    tokens = batch["tokens"]
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def run(index: str, steps: int, resume_at: int, seq_len: int = 128, batch: int = 8) -> dict[str, Any]:
    torch.manual_seed(0)
    vocab = int(json.load(open(index)).get("vocab_size", 0)) or 32000
    model = TinyLM(vocab, seq_len=seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = make_loader(index, seq_len, batch, workers=0)
    losses, checkpoint = [], None
    for i, b in enumerate(loader):
        if i >= steps:
            break
        losses.append(step(model, opt, b))
        if resume_at and i + 1 == resume_at:
            checkpoint = {"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict()}
            break
    result: dict[str, Any] = {"first_loss": losses[0], "losses": losses}
    if checkpoint is None:
        result["last_loss"] = losses[-1]
        return result
    # Uninterrupted reference: the batches that come after the checkpoint.
    reference = make_loader(index, seq_len, batch, workers=0)
    expected = [b["tokens"] for j, b in enumerate(reference) if resume_at <= j < resume_at + 5]
    resumed = make_loader(index, seq_len, batch, workers=2)
    resumed.load_state_dict(checkpoint["loader"])
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["opt"])
    got = []
    for j, b in enumerate(resumed):
        if j < 5:
            got.append(b["tokens"])
        if resume_at + j >= steps:
            break
        losses.append(step(model, opt, b))
    result["resume_exact"] = all(torch.equal(a, b) for a, b in zip(expected, got)) and len(got) == len(expected)
    result["last_loss"] = losses[-1]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--resume-at", type=int, default=30)
    args = parser.parse_args(argv)
    result = run(args.index, args.steps, args.resume_at)
    sys.stdout.write(f"loss {result['first_loss']:.3f} -> {result['last_loss']:.3f} over "
                     f"{len(result['losses'])} steps; resume exact: {result.get('resume_exact')}\n")
    return 0 if result["last_loss"] < result["first_loss"] and result.get("resume_exact", True) else 1


if __name__ == "__main__":
    sys.exit(main())
