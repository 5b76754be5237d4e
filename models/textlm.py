"""A small causal language model over sentencepiece tokens: the perplexity detector.

Trained on reference-quality text, it scores a document by the mean negative
log-likelihood per token of its first ``score_tokens`` tokens (perplexity = exp of it), as
CCNet scores documents with a KenLM model (Wenzek et al. 2020), and gives the mean of its
last hidden state over those tokens, the input of the representation detector.

The tokenizer is a sentencepiece unigram model trained on the same reference text, with
byte fallback (every input has a meaning: CJK, emoji, mojibake, base64) and line breaks
kept as the ``<n>`` piece (menus and lists are lines). The network is a stack of gated,
dilated causal convolutions (WaveNet / ByteNet style): no attention, so scoring is a few
matrix products per token; dilations 1, 2, 4, 8, 16 with kernel 3 see the previous 63
tokens. The output is an adaptive softmax (Grave et al. 2017; pieces are ordered by
frequency): a full 4,096-way softmax cost 7x more CPU time than the whole rest of the
scoring (150 against 1,075 documents/s per core at 128 tokens, measured).

The detector reads the NLL per byte (the NLL of the scored tokens over the UTF-8 bytes
they cover), not per token: per token, digit strings and tables (many short, predictable
pieces) scored as the most normal text of the benchmark (AUROC 0.29 on tables, 0.99 per
byte).

The network also carries the reference's unigram distribution of its pieces (counts with
add-one smoothing, a buffer saved with the weights), and ``forward`` gives the unigram
NLL per byte of the same tokens beside the model's: the context detector reads the
difference, what the context added over the words' own frequencies. Shuffled words,
template text and placeholder text are made of ordinary pieces (a low unigram NLL) that
no context predicts; a perplexity alone ranks them as plain text because their pieces are
common (docs/BENCHMARKS.md, issue 14).
"""

from __future__ import annotations

import io
import logging
import random
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from models.files import ModelError
from models.progress import Steps, Working

_LOGGER = logging.getLogger(__name__)

__all__ = ["BOS_ID", "NEWLINE_PIECE", "OUTPUT_COLUMNS", "ConvLM", "LMParams", "TextLM", "build_net",
           "lm_from_state", "load_tokenizer", "piece_bytes", "train_lm", "train_tokenizer", "unigram_nll"]

NEWLINE_PIECE = "<n>"
BOS_ID = 1  # sentencepiece's default <s>
# ConvLM.forward's columns before the mean hidden state
OUTPUT_COLUMNS: tuple[str, ...] = ("nll_per_byte", "nll_per_token", "unigram_nll_per_byte")


@dataclass(frozen=True)
class LMParams:
    """Tokenizer and network sizes, the scored prefix and the training budget."""

    vocab_size: int = 4096
    dim: int = 64
    dilations: tuple[int, ...] = (1, 2, 4, 8, 16)
    kernel: int = 3
    max_tokens: int = 256  # training windows, in tokens
    # N: the first N tokens of a document are scored. 128, not 256: the same held-out
    # AUROC (0.957 against 0.959, docs/BENCHMARKS.md) at twice the documents per second.
    score_tokens: int = 128
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    start_share: float = 0.3  # training windows that start at a document's beginning

    def __post_init__(self) -> None:
        if self.vocab_size < 300:  # byte fallback alone takes 256 pieces
            raise ValueError(f"vocab_size must be >= 300, got {self.vocab_size}")
        if min(self.dim, self.kernel, self.max_tokens, self.score_tokens, self.steps, self.batch_size) <= 0 \
                or self.lr <= 0:
            raise ValueError("dim, kernel, max_tokens, score_tokens, steps, batch_size and lr must be > 0")
        if not self.dilations or min(self.dilations) <= 0:
            raise ValueError(f"dilations must be positive, got {self.dilations}")
        if not 0.0 <= self.start_share <= 1.0:
            raise ValueError(f"start_share must be in [0, 1], got {self.start_share}")

    @property
    def max_chars(self) -> int:
        """Characters tokenized per scored document: enough for ``score_tokens`` tokens."""
        return 8 * self.score_tokens


class _Block(nn.Module):
    def __init__(self, dim: int, dilation: int, kernel: int) -> None:
        super().__init__()
        self.pad = (kernel - 1) * dilation
        self.conv = nn.Conv1d(dim, 2 * dim, kernel, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.conv(nn.functional.pad(x, (self.pad, 0))).chunk(2, dim=1)
        return x + a * torch.sigmoid(b)


class ConvLM(nn.Module):
    """Gated dilated causal convolutions and an adaptive softmax. ``forward`` takes padded
    token ids ``[batch, 1 + score_tokens]`` (BOS first, ``pad_id`` after the end) and returns
    per document ``[NLL per byte, NLL per token (nats), unigram NLL per byte, mean hidden
    state (dim)]`` (``OUTPUT_COLUMNS`` before the hidden state): what RunInference and the
    CPU path both call. ``piece_bytes`` (a buffer) holds the UTF-8 length of every piece,
    ``unigram_nll`` (a buffer) each piece's NLL under the reference's unigram
    distribution (0 for padding)."""

    def __init__(self, vocab_size: int, dim: int, dilations: Sequence[int], kernel: int) -> None:
        super().__init__()
        self.pad_id = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, dim)
        self.blocks = nn.Sequential(*[_Block(dim, d, kernel) for d in dilations])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.AdaptiveLogSoftmaxWithLoss(dim, vocab_size, [vocab_size // 8, 3 * vocab_size // 8],
                                                 div_value=4.0)
        self.register_buffer("piece_bytes", torch.ones(vocab_size + 1))
        self.register_buffer("unigram_nll", torch.zeros(vocab_size + 1))

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """[batch, length, dim]: the state after each input token."""
        return self.norm(self.blocks(self.embed(ids).transpose(1, 2)).transpose(1, 2))

    def token_nll(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(NLL of each next token [batch, length-1] (0 at padding), its mask, hidden states);
        the softmax runs on the real tokens only."""
        inputs, targets = ids[:, :-1], ids[:, 1:]
        valid = targets != self.pad_id
        h = self.hidden(inputs)
        nll = torch.zeros(targets.shape, dtype=h.dtype, device=h.device)
        if bool(valid.any()):
            nll[valid] = -self.out(h[valid], targets[valid]).output
        return nll, valid.to(h.dtype), h

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        nll, mask, h = self.token_nll(ids)
        count = mask.sum(dim=1).clamp(min=1.0)
        covered = (self.piece_bytes[ids[:, 1:]] * mask).sum(dim=1).clamp(min=1.0)
        pooled = (h * mask.unsqueeze(-1)).sum(dim=1) / count.unsqueeze(-1)
        total = nll.sum(dim=1)
        unigram = (self.unigram_nll[ids[:, 1:]] * mask).sum(dim=1)
        return torch.cat([(total / covered).unsqueeze(1), (total / count).unsqueeze(1),
                          (unigram / covered).unsqueeze(1), pooled], dim=1)


def _lines(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                yield line.strip()


def train_tokenizer(texts: Sequence[str], vocab_size: int, seed: int = 0) -> bytes:
    """A sentencepiece unigram model (serialized proto) trained on the lines of ``texts``."""
    import sentencepiece as spm

    model = io.BytesIO()
    lines = list(_lines(texts))
    random.Random(seed).shuffle(lines)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
            model_type="unigram", character_coverage=0.9995, byte_fallback=True,
            user_defined_symbols=[NEWLINE_PIECE], input_sentence_size=1_000_000,
            max_sentence_length=16384, num_threads=1, minloglevel=2,
            hard_vocab_limit=False)
    except RuntimeError as exc:
        raise ValueError(f"cannot train a {vocab_size}-piece tokenizer on {len(lines)} lines: {exc}") from exc
    return model.getvalue()


def load_tokenizer(proto: bytes, where: str) -> Any:
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, TypeError) as exc:
        raise ModelError(f"{where}: not a sentencepiece model: {exc}") from exc


@dataclass
class TextLM:
    """A tokenizer, its language model and the sizes they were built with."""

    tokenizer: Any  # sentencepiece.SentencePieceProcessor
    tokenizer_proto: bytes
    net: ConvLM
    params: LMParams

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The first ``score_tokens`` token ids of each text."""
        cut = [t[:self.params.max_chars].replace("\n", f" {NEWLINE_PIECE} ") for t in texts]
        ids = self.tokenizer.encode(cut, num_threads=1)
        return [row[:self.params.score_tokens] for row in ids]

    def batch_tensor(self, texts: Sequence[str]) -> torch.Tensor:
        """[len(texts), 1 + score_tokens] ids: BOS, the tokens, ``pad_id`` to the end."""
        rows = self.token_ids(texts)
        out = torch.full((len(rows), 1 + self.params.score_tokens), self.net.pad_id, dtype=torch.long)
        out[:, 0] = BOS_ID
        for i, row in enumerate(rows):
            if row:
                out[i, 1:1 + len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def score(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """``[n, len(OUTPUT_COLUMNS) + dim]``: NLL per byte, NLL per token (nats), unigram
        NLL per byte, mean hidden state (the output of ``ConvLM.forward``); a text without
        any token gets zeros."""
        out = np.zeros((len(texts), len(OUTPUT_COLUMNS) + self.params.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                ids = self.batch_tensor(texts[start:start + batch_size])
                length = int((ids != self.net.pad_id).sum(dim=1).max())
                out[start:start + len(ids)] = self.net(ids[:, :max(length, 2)]).numpy()
        return out

    def meta(self) -> dict[str, Any]:
        params = asdict(self.params)
        params["dilations"] = list(self.params.dilations)
        return params


def piece_bytes(tokenizer: Any) -> torch.Tensor:
    """UTF-8 bytes of every piece (byte pieces 1, ``<n>`` 1, controls 0), then 0 for pad."""
    sizes = []
    for i in range(tokenizer.get_piece_size()):
        if tokenizer.is_byte(i):
            sizes.append(1.0)
        elif tokenizer.is_control(i) or tokenizer.is_unknown(i):
            sizes.append(0.0 if tokenizer.is_control(i) else 1.0)
        else:
            piece = tokenizer.id_to_piece(i)
            sizes.append(1.0 if piece == NEWLINE_PIECE else float(len(piece.replace("\u2581", " ").encode())))
    return torch.tensor(sizes + [0.0])


def unigram_nll(docs: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """Each piece's NLL (nats) under the unigram distribution of ``docs`` (token ids), with
    add-one smoothing so an unseen piece has a finite cost; 0 for the padding id."""
    counts = np.ones(vocab_size, dtype=np.float64)
    for doc in docs:
        counts += np.bincount(np.asarray(doc, dtype=np.int64), minlength=vocab_size)[:vocab_size]
    nll = -np.log(counts / counts.sum())
    return torch.tensor(np.append(nll, 0.0), dtype=torch.float32)


def build_net(params: LMParams, tokenizer: Any) -> ConvLM:
    net = ConvLM(tokenizer.get_piece_size(), params.dim, params.dilations, params.kernel)
    net.piece_bytes.copy_(piece_bytes(tokenizer))
    return net


def _windows(docs: list[list[int]], params: LMParams, rng: random.Random) -> list[list[int]]:
    n = params.max_tokens
    rows = []
    for _ in range(params.batch_size):
        doc = docs[rng.randrange(len(docs))]
        start = 0 if rng.random() < params.start_share or len(doc) <= n else rng.randrange(len(doc) - n)
        rows.append(doc[start:start + n])
    return rows


def train_lm(texts: Sequence[str], params: LMParams = LMParams(), seed: int = 0) -> TextLM:
    """Trains the tokenizer, then ``params.steps`` Adam steps (one-cycle schedule) on
    random ``max_tokens`` windows of ``texts``."""
    texts = [t for t in texts if t.strip()]
    if len(texts) < 10:
        raise ValueError(f"need at least 10 reference texts, got {len(texts)}")
    with Working(f"language model tokenizer ({params.vocab_size} pieces)"):
        proto = train_tokenizer(texts, params.vocab_size, seed)
    tokenizer = load_tokenizer(proto, "trained tokenizer")
    torch.manual_seed(seed)
    lm = TextLM(tokenizer=tokenizer, tokenizer_proto=proto, net=build_net(params, tokenizer), params=params)
    docs = [d for d in tokenizer.encode([t.replace("\n", f" {NEWLINE_PIECE} ") for t in texts]) if d]
    lm.net.unigram_nll.copy_(unigram_nll(docs, tokenizer.get_piece_size()))
    rng = random.Random(seed)
    optimiser = torch.optim.Adam(lm.net.parameters(), lr=params.lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, params.lr, total_steps=params.steps,
                                                   pct_start=0.1)
    lm.net.train()
    bar = Steps(params.steps, "language model")
    for step in range(params.steps):
        rows = _windows(docs, params, rng)
        ids = torch.full((len(rows), 1 + params.max_tokens), lm.net.pad_id, dtype=torch.long)
        ids[:, 0] = BOS_ID
        for i, row in enumerate(rows):
            ids[i, 1:1 + len(row)] = torch.tensor(row, dtype=torch.long)
        nll, mask, _ = lm.net.token_nll(ids)
        loss = nll.sum() / mask.sum().clamp(min=1.0)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        bar.update(loss=float(loss.detach()))  # nats per token
        if step == params.steps - 1:
            _LOGGER.info("language model step %d/%d: %.3f nats per token", step + 1, params.steps,
                         float(loss.detach()))
    bar.close()
    lm.net.eval()
    return lm


def lm_from_state(proto: bytes, state: dict[str, torch.Tensor], params: LMParams, where: str) -> TextLM:
    tokenizer = load_tokenizer(proto, where)
    net = build_net(params, tokenizer)
    try:
        net.load_state_dict(state)
    except (RuntimeError, KeyError) as exc:
        raise ModelError(f"{where}: language model weights do not fit its parameters: {exc}") from exc
    net.eval()
    return TextLM(tokenizer=tokenizer, tokenizer_proto=proto, net=net, params=params)
