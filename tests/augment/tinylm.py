"""A tiny causal LM trained for a few steps on the demo corpus, saved as a Hugging Face model
directory (GPT-2 architecture, a byte-level BPE tokenizer trained with `tokenizers`).

Its output is garbage: the tests exercise the serving and generation path, not the text.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
DEMO_JSONL = ROOT / "examples" / "data" / "dolma-sample.jsonl"
EOS = "<|endoftext|>"


def demo_texts() -> list[str]:
    """The demo corpus' documents (examples/data, in the repository)."""
    with DEMO_JSONL.open(encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle if line.strip()]


def train_tiny_lm(directory: Path, steps: int = 20, seed: int = 0) -> Path:
    """Trains a 2-layer GPT-2 (n_embd 64) for `steps` steps and saves model and tokenizer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a small loaded machine more threads are much slower here
    try:
        return _train(directory, steps, seed)
    finally:
        torch.set_num_threads(threads)


def _train(directory: Path, steps: int, seed: int) -> Path:
    texts = demo_texts()
    torch.manual_seed(seed)
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, bos_token=EOS,
                                        pad_token=EOS, padding_side="left")
    # A plain template so the server's /v1/chat/completions works too: the messages' text.
    tokenizer.chat_template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    config = GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=512, n_embd=64, n_layer=2,
                        n_head=2, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    ids = torch.tensor([tok for text in texts for tok in tokenizer(text + EOS)["input_ids"]])
    windows = ids[: (len(ids) // 64) * 64].view(-1, 64)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=windows, labels=windows).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
