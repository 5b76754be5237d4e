"""Tokenize end to end: train or take a tokenizer, shuffled shards, index.json, versions."""

from __future__ import annotations

import glob
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipelines.config import ConfigError, load_config
from pipelines.run import main
from storage.shards import ShardError, decode_shard
from tests.conftest import shared


def corpus(tmp_path: Path, n: int = 60) -> Path:
    lines = [line.strip() for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    paras = [" ".join(lines[i:i + 8]) for i in range(0, 8 * n, 8)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i:03d}", "text": p}) + "\n" for i, p in enumerate(paras)))
    return path


def job(tmp_path: Path, tokenize: str, out: str = "out") -> str:
    config = tmp_path / f"{out}.yaml"
    config.write_text(f"output: {tmp_path / out}\ninputs:\n  - format: jsonl\n    path: {corpus(tmp_path)}\n"
                      f"tokenize:\n{tokenize}beam_args: ['--runner=FnApiRunner']\n")
    return str(config)


def run(config: str) -> str:
    out = io.StringIO()
    assert main(["--config", config, "--log-level", "WARNING"], out=out) == 0, out.getvalue()
    return out.getvalue()


def load_version(out: Path) -> tuple[dict, Path]:
    index = sorted(glob.glob(f"{out}/tokens/*/index.json"))[-1]
    return json.loads(Path(index).read_text()), Path(index).parent


def test_given_tokenizer_round_trip_every_document_once(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n  target_shard_bytes: 4000\n"))
    index, directory = load_version(tmp_path / "out")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert index["tokenizer"]["sha256"] and index["dtype"] == "uint16" and index["num_shards"] > 3
    docs = {json.loads(line)["id"]: json.loads(line)["text"] for line in open(tmp_path / "docs.jsonl")}
    positions = pq.read_table(directory / "documents").to_pylist()
    seen = []
    for entry in index["shards"]:
        shard = decode_shard((directory / entry["name"]).read_bytes(), entry["name"])
        assert shard.num_docs == entry["num_docs"] and len(shard.tokens) == entry["num_tokens"]
        ids = [p["id"] for p in sorted(positions, key=lambda p: p["position"]) if p["shard"] == entry["name"]]
        # each shard's own documents table (written beside it by the worker) lists exactly its docs
        own = pq.read_table(directory / entry["documents"]).to_pylist()
        assert entry["documents"] == "documents/" + entry["name"].replace(".tfs", ".parquet")
        assert [p["id"] for p in own] == ids and [p["position"] for p in own] == list(range(len(ids)))
        for i, doc_id in enumerate(ids):
            tokens = shard.doc(i).tolist()
            assert tokens[-1] == sp.eos_id()
            assert sp.decode(tokens[:-1]) == sp.decode(sp.encode(docs[doc_id]))
            seen.append(doc_id)
    assert sorted(seen) == sorted(docs)  # every kept document, exactly once
    assert index["num_docs"] == len(docs) and index["lineage"]["input_stage"] == "extract"
    manifest = json.loads((tmp_path / "out" / "manifests" / "tokenize.json").read_text())
    assert manifest["extra"]["tokenizer_sha256"] == index["tokenizer"]["sha256"]
    assert manifest["extra"]["dataset_version"] == index["version"]


def test_shuffle_is_deterministic_for_a_seed(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    orders = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        run(job(tmp_path, f"  model: {model}\n  seed: {seed}\n  target_shard_bytes: 4000\n", name))
        _, directory = load_version(tmp_path / name)
        rows = pq.read_table(directory / "documents").to_pylist()
        orders.append([(r["shard"], r["position"], r["id"]) for r in rows])
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_trained_tokenizer_versions_and_resume(tmp_path):
    config = job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 1000000\n")
    table = run(config)
    assert "tokenizer" in table and Path(tmp_path / "out" / "tokenizer" / "tokenizer.model").exists()
    first, _ = load_version(tmp_path / "out")
    assert first["num_shards"] == 1
    assert "resumed" in run(config).split("tokenize ", 1)[1].splitlines()[0]
    run(job(tmp_path, "  vocab_size: 400\n  target_shard_bytes: 2000\n"))  # config change: new version
    versions = sorted(glob.glob(f"{tmp_path}/out/tokens/*/index.json"))
    assert len(versions) == 2 and json.loads(Path(versions[0]).read_text()) == first  # old one intact


def test_corrupted_shard_is_detected(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n"))
    index, directory = load_version(tmp_path / "out")
    path = directory / index["shards"][0]["name"]
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    with pytest.raises(ShardError, match=index["shards"][0]["name"]):
        decode_shard(bytes(data), index["shards"][0]["name"])


def test_missing_or_wrong_tokenizer_fails_before_running(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenize\.model: not a sentencepiece model"):
        load_config(job(tmp_path, f"  model: {tmp_path}/missing.model\n"))
    with pytest.raises(ConfigError, match=r"tokenize\.model: not a sentencepiece model"):
        load_config(job(tmp_path, f"  model: {shared('models', 'lid.176.ftz')}\n"))
    with pytest.raises(ConfigError, match="model_type"):
        load_config(job(tmp_path, "  model_type: wordpiece\n"))


def test_empty_corpus_gives_an_empty_version(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    config = tmp_path / "e.yaml"
    config.write_text(f"output: {tmp_path / 'e'}\ninputs:\n  - format: jsonl\n    path: {empty}\n"
                      f"tokenize:\n  model: {model}\nbeam_args: ['--runner=FnApiRunner']\n")
    run(str(config))
    index, _ = load_version(tmp_path / "e")
    assert index["num_docs"] == 0 and index["shards"] == []


def test_documents_longer_than_a_shard_are_never_split(tmp_path):
    model = shared("models", "spm_test_model_botchan.model")
    run(job(tmp_path, f"  model: {model}\n  target_shard_bytes: 64\n"))
    index, directory = load_version(tmp_path / "out")
    assert index["num_docs"] == 60 and all(s["num_bytes"] > 64 for s in index["shards"])
    total = 0
    for entry in index["shards"]:
        shard = decode_shard((directory / entry["name"]).read_bytes(), entry["name"])
        total += shard.num_docs
        assert all(shard.doc(i)[-1] == 2 for i in range(shard.num_docs))  # whole docs, EOS last
    assert total == 60


def test_identical_trainings_write_identical_tokenizer_bytes(tmp_path):
    """The trainer stored its (temporary) output path in the model: two identical
    trainings gave different bytes, so two runners could never agree on the sha256."""
    from pipelines.tokenize_stage import train_tokenizer
    from transforms.tokenize.tokenize import TokenizeConfig

    texts = [line for line in shared("text", "botchan.txt").read_text(encoding="utf-8").splitlines() if line]
    config = TokenizeConfig(vocab_size=500)
    a = train_tokenizer(config, texts, str(tmp_path / "a" / "tokenizer.model"))
    b = train_tokenizer(config, texts, str(tmp_path / "b" / "tokenizer.model"))
    assert a["sha256"] == b["sha256"]
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() == (tmp_path / "b" / "tokenizer.model").read_bytes()
    assert spm.SentencePieceProcessor(model_file=str(tmp_path / "a" / "tokenizer.model")).get_piece_size() == 500
