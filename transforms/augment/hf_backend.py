"""The in-process backend: a Hugging Face causal LM behind Beam's RunInference.

``CausalLMHandler`` is a ``ModelHandler[RephraseRequest, Generation, LoadedLM]``: it loads
``AutoModelForCausalLM`` and ``AutoTokenizer`` from a model directory (a local path, or an
fsspec URL copied to a local temporary directory first) on the GPU when one is present,
else the CPU, once per worker process. A batch is split by sampling parameters, sorted by
prompt length and cut into sub-batches of at most ``max_batch_tokens`` padded tokens (left
padding, so every row's generation starts at the same position); the seed of the
parameters is set before each sub-batch, so a run is reproducible for the same batches.
A prompt that does not fit the model's context with ``max_tokens`` to generate is not
generated: its ``Generation`` carries an error, as does a sub-batch that raised.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Optional, Sequence

import fsspec
from fsspec.implementations.local import LocalFileSystem
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from transforms.augment.rephrase import GenerationParams, RephraseRequest

_LOGGER = logging.getLogger(__name__)


class Generation(NamedTuple):
    text: str = ""
    error: str = ""
    error_type: str = ""
    seconds: float = 0.0


@dataclass
class LoadedLM:
    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    context: int  # the model's maximum positions


def local_model_dir(model_dir: str) -> str:
    """``model_dir`` itself when local, else a local copy of the remote directory."""
    fs, root = fsspec.core.url_to_fs(model_dir)
    if isinstance(fs, LocalFileSystem):
        if not os.path.isdir(root):
            raise ValueError(f"model directory not found: {model_dir}")
        return root
    target = tempfile.mkdtemp(prefix="tokenfactory-lm-")
    fs.get(root.rstrip("/") + "/", target, recursive=True)
    return target


class CausalLMHandler(ModelHandler[RephraseRequest, Generation, LoadedLM]):
    def __init__(self, model_dir: str, max_batch_size: int = 16, max_batch_tokens: int = 8192,
                 device: str = "auto") -> None:
        if not isinstance(model_dir, str) or not model_dir:
            raise ValueError("model_dir: expected a path or URL of a Hugging Face model directory")
        if not 1 <= max_batch_size <= 4096 or not 1 <= max_batch_tokens <= 1 << 24:
            raise ValueError("max_batch_size / max_batch_tokens out of range")
        if device not in ("auto", "cpu") and not device.startswith("cuda"):
            raise ValueError(f"device: expected auto, cpu or cuda[:N], got {device!r}")
        super().__init__(min_batch_size=1, max_batch_size=max_batch_size)
        self.model_dir, self.max_batch_tokens, self.device = model_dir, max_batch_tokens, device

    def load_model(self) -> LoadedLM:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = local_model_dir(self.model_dir)
        device = self.device if self.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        context = int(getattr(model.config, "max_position_embeddings", 0)
                      or getattr(model.config, "n_positions", 0) or tokenizer.model_max_length)
        _LOGGER.info("loaded causal LM from %s on %s (context %d)", self.model_dir, device, context)
        return LoadedLM(model, tokenizer, context)

    def get_metrics_namespace(self) -> str:
        return "augment_runinference"

    def run_inference(self, batch: Sequence[RephraseRequest], model: LoadedLM,
                      inference_args: Optional[dict[str, Any]] = None) -> Iterable[PredictionResult]:
        lengths = [len(ids) for ids in model.tokenizer([r.prompt for r in batch])["input_ids"]]
        out: dict[int, Generation] = {}
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(batch):
            if lengths[i] + request.params.max_tokens > model.context:
                out[i] = Generation(error=f"prompt of {lengths[i]} tokens + max_tokens {request.params.max_tokens} "
                                          f"exceeds the model's context of {model.context}", error_type="too_long_prompt")
            else:
                groups.setdefault(request.params.as_json(), []).append(i)
        for indices in groups.values():
            indices.sort(key=lambda i: lengths[i])
            for sub in _sub_batches(indices, lengths, batch[indices[0]].params.max_tokens, self.max_batch_tokens):
                out.update(_generate(model, [batch[i] for i in sub], sub))
        return [PredictionResult(request, out[i]) for i, request in enumerate(batch)]


def _sub_batches(indices: list[int], lengths: list[int], new_tokens: int, budget: int) -> list[list[int]]:
    """Consecutive runs of the length-sorted ``indices`` whose padded size (rows x longest
    prompt + new tokens) stays within ``budget``; a single row always makes a sub-batch."""
    subs: list[list[int]] = []
    current: list[int] = []
    for i in indices:
        if current and (len(current) + 1) * (lengths[i] + new_tokens) > budget:
            subs.append(current)
            current = []
        current.append(i)
    if current:
        subs.append(current)
    return subs


def _generate(model: LoadedLM, requests: list[RephraseRequest], indices: list[int]) -> dict[int, Generation]:
    import torch

    params: GenerationParams = requests[0].params
    started = time.perf_counter()
    try:
        inputs = model.tokenizer([r.prompt for r in requests], return_tensors="pt", padding=True).to(model.model.device)
        torch.manual_seed(params.seed)
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample, "max_new_tokens": params.max_tokens,
                                  "pad_token_id": model.tokenizer.pad_token_id}
        if sample:
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
        with torch.no_grad():
            output = model.model.generate(**inputs, **kwargs)
        new = output[:, inputs["input_ids"].shape[1]:]
        texts = model.tokenizer.batch_decode(new, skip_special_tokens=True)
    except Exception as error:  # one sub-batch's failure is its rows' error, not the bundle's
        _LOGGER.warning("generation failed for %d prompts: %s", len(requests), type(error).__name__)
        message = f"{type(error).__name__}: {error}"[:500]
        return {i: Generation(error=message, error_type="generation_error") for i in indices}
    seconds = (time.perf_counter() - started) / len(requests)
    return {i: Generation(text=text, seconds=seconds) for i, text in zip(indices, texts)}
