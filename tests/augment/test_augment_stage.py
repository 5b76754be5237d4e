"""The augment stage end to end in a job (extract → clean → augment → tokenize) against
real OpenAI-compatible servers on 127.0.0.1: a scripted one whose answers cover every
outcome of a generation, and ``transformers serve`` with the tiny trained model; and the
in-process RunInference backend with that model."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.run import main
from tests.augment.servers import completion
from tests.conftest import shared
from transforms.augment.chunks import split_chunks

SECRET = "sk-tokenfactory-test-4f1d9a"
N_DOCS = 8


def _sentences(lang: str) -> list[str]:
    return shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()


def _write_corpus(tmp_path: Path) -> dict[str, str]:
    """d0..d7: eight English documents of eight Leipzig sentences each."""
    en = _sentences("en")
    texts = {f"d{i}": " ".join(en[8 * i:8 * i + 8]) for i in range(N_DOCS)}
    (tmp_path / "docs.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": v, "url": f"http://example.org/{k}"}) + "\n" for k, v in texts.items()))
    return texts


def _job(tmp_path: Path, rephrase: str, stages: str = "[extract, clean, augment, tokenize]") -> str:
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
stages: {stages}
inputs:
  - {{format: jsonl, path: "{tmp_path / 'docs.jsonl'}"}}
extract: {{max_error_ratio: 0.5}}  # d4's failed generations stay below it
clean:
  langid: {{model: "{shared('models', 'lid.176.ftz')}", languages: [en], threshold: 0.5}}
  rules: {{families: [gopher_repetition]}}
augment:
  upsample:
    - {{name: first_doc, repeat: 2, when: {{sample_rate: 1.0, languages: [en]}}}}
  max_repeats: 4
  rephrase:
{rephrase}
tokenize:
  model: "{shared('models', 'spm_test_model_botchan.model')}"
  target_shard_bytes: 4096
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


def _doc_of(prompt: str, texts: dict[str, str]) -> str:
    return next(k for k, v in texts.items() if v[:60] in prompt)


def _rewrite(prompt: str, pool: list[str]) -> str:
    start = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % (len(pool) - 8)
    return " ".join(pool[start:start + 8])


def _responder(texts: dict[str, str]):
    """By document: d0, d1 rewritten (kept), d2 the prompt echoed, d3 empty, d4 a server
    error every time, d5 a copy of d7 (near duplicate), d6 German (language), d7 a few
    characters (length ratio)."""
    pool, de = _sentences("en")[600:], _sentences("de")

    def respond(body, headers):
        prompt = body["prompt"]
        doc = _doc_of(prompt, texts)
        if doc in ("d0", "d1"):
            return completion(_rewrite(prompt, pool))
        if doc == "d2":
            return completion(prompt)
        if doc == "d3":
            return completion("")
        if doc == "d4":
            return 503, {}, b'{"error": "overloaded"}'
        if doc == "d5":
            return completion(texts["d7"])
        if doc == "d6":
            return completion(" ".join(de[:8]))
        return completion("Short one.")

    return respond


def _rephrase_section(base_url: str, model: str = "tiny") -> str:
    return f"""    endpoint: "{base_url}"
    model: "{model}"
    api_key_env: TF_TEST_API_KEY
    templates: [{{name: wikipedia}}, {{name: notes, prompt: "Rewrite as short notes.\\n\\n{{text}}\\n\\nNotes:"}}]
    retries: 1
    backoff_s: 0.01
    max_backoff_s: 0.05
    timeout_s: 20"""


def _run(config: str, *extra: str) -> str:
    out = io.StringIO()
    main(["--config", config, "--log-level", "INFO", "--no-progress", *extra], out=out)
    return out.getvalue()


def test_every_generation_is_kept_rejected_or_failed_with_provenance(tmp_path, scripted_server, monkeypatch, caplog):
    texts = _write_corpus(tmp_path)
    monkeypatch.setenv("TF_TEST_API_KEY", SECRET)
    scripted_server.reset(_responder(texts))
    config = _job(tmp_path, _rephrase_section(scripted_server.base_url))
    with caplog.at_level(logging.INFO):
        printed = _run(config)
    row = next(line for line in printed.splitlines() if line.startswith("augment"))
    # in: 8 originals + 8 x 2 templates; out: 8 + d0, d1 x 2; rejected 10; failed: d4 x 2
    assert row.split()[:6] == ["augment", "24", "12", "10", "2", "in=out+r+f"], printed
    out = tmp_path / "out"
    docs = pq.read_table(out / "docs" / "augment").to_pylist()
    synthetic = [d for d in docs if d["source"] == "synthetic"]
    def own(doc_id: str) -> str:  # the corpus's own id of a document id "<own id>@<hash>"
        return doc_id.rsplit("@", 1)[0]

    assert sorted((own(d["provenance"]["parent_id"]), d["provenance"]["template"]) for d in synthetic) == [
        ("d0", "notes"), ("d0", "wikipedia"), ("d1", "notes"), ("d1", "wikipedia")]
    for d in synthetic:
        prov = d["provenance"]
        assert prov["model"] == "tiny" and prov["parent_source"].endswith("docs.jsonl") and prov["chunks"] == 1
        assert json.loads(prov["parameters"]) == {"max_tokens": 512, "model": "tiny", "seed": 0,
                                                  "temperature": 0.7, "top_p": 0.95}
        assert d["lang"] == "en" and d["text"] and d["text"] not in texts.values()
    originals = [d for d in docs if d["source"] != "synthetic"]
    assert sorted(d["source_id"] for d in originals) == sorted(texts)
    assert all(d["repeats"] == 2 and d["repeat_rules"] == ["first_doc"] for d in originals)
    rejected = pq.read_table(out / "rejected" / "augment").to_pylist()
    reasons = sorted((own(d["provenance"]["parent_id"]), d["reason"]) for d in rejected)
    assert reasons == sorted([(p, r) for p, r in (("d2", "prompt_echo"), ("d3", "empty"), ("d5", "near_duplicate"),
                                                    ("d6", "language"), ("d7", "length_ratio")) for _ in (0, 1)])
    assert all("d7" in d["reason_detail"] for d in rejected if d["reason"] == "near_duplicate")
    failed = pq.read_table(out / "failed" / "augment").to_pylist()
    assert len(failed) == 2 and all(f["error_type"] == "http_503" for f in failed)
    requests = [json.loads(f["raw"]) for f in failed]
    assert all(texts["d4"][:60] in r[0]["prompt"] for r in requests)
    # the key went to the server, and nowhere else
    assert all(h.get("Authorization") == f"Bearer {SECRET}" for _, _, h in scripted_server.requests)
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in caplog.text and SECRET not in printed
    # tokenize: originals twice (upsampled), the kept generations once; tokens per template
    manifest = json.loads((out / "manifests" / "tokenize.json").read_text())
    counters = manifest["extra"]["counters"]
    assert {k for k in counters if k.startswith("tokens_")} >= {"tokens_original", "tokens_template_wikipedia",
                                                                "tokens_template_notes"}
    assert manifest["counts"]["records_in"] == 12
    index = json.loads(next((out / "tokens").glob("v*/index.json")).read_text())
    assert index["num_docs"] == 12 + 8 and index["repeat_docs"] == 8
    report = json.loads((out / "report" / "report.json").read_text())["augment"]
    groups = {r["group"]: r for r in report["rows"]}
    assert groups["original"]["documents"] == 8 and groups["wikipedia"]["documents"] == 2
    assert groups["notes"]["rejected"] == {"empty": 1, "language": 1, "length_ratio": 1, "near_duplicate": 1,
                                           "prompt_echo": 1}
    assert groups["wikipedia"]["tokens"] == counters["tokens_template_wikipedia"] > 0

    # a rerun costs nothing: every answered request comes from the cache; only d4's calls,
    # which failed, are sent again
    sent = len(scripted_server.requests)
    assert sent == 14 + 2 * 2  # 14 answered once, d4's two generations tried twice each (retries: 1)
    printed = _run(config, "--force")
    assert next(line for line in printed.splitlines() if line.startswith("augment")).split()[:6] == [
        "augment", "24", "12", "10", "2", "in=out+r+f"]
    again = scripted_server.requests[sent:]
    assert len(again) == 4 and all(texts["d4"][:60] in body["prompt"] for _, body, _ in again)
    assert pq.read_table(out / "docs" / "augment").num_rows == 12


def test_served_model_and_runinference_backends_run_the_stage(tmp_path, served_lm, lm_server, tiny_lm_dir):
    """The real paths: a tiny model's output is garbage, so most generations are
    rejected; what is tested is that every one is accounted for, chunked and cached."""
    _write_corpus(tmp_path)
    section = _rephrase_section(served_lm.base_url, served_lm.model_name).replace(
        "    api_key_env: TF_TEST_API_KEY\n", "") + "\n    max_tokens: 24\n    chunk_chars: 300"
    config = _job(tmp_path, section, stages="[extract, clean, augment]")
    before = lm_server.requests_received()
    printed = _run(config)
    row = next(line for line in printed.splitlines() if line.startswith("augment")).split()
    assert row[5] == "in=out+r+f" and row[1] == "24" and row[4] == "0", printed
    chunks = sum(len(split_chunks(t, 300)) for t in _doc_texts(tmp_path))
    assert lm_server.requests_received() - before == 2 * chunks
    rows = (pq.read_table(tmp_path / "out" / "rejected" / "augment").to_pylist()
            if (tmp_path / "out" / "rejected" / "augment").exists() else [])
    assert all(r["provenance"]["chunks"] >= 2 for r in rows if r["reason"] != "empty")
    # the in-process backend on the same model (RunInference), its own cache
    section = (f'    backend: runinference\n    model: "{tiny_lm_dir}"\n    templates: [{{name: summary}}]\n'
               f'    max_tokens: 16\n    chunk_chars: 600\n    cache_dir: "{tmp_path / "rcache"}"')
    config = _job(tmp_path, section, stages="[augment]")
    printed = _run(config)
    row = next(line for line in printed.splitlines() if line.startswith("augment")).split()
    assert row[1] == "16" and row[5] == "in=out+r+f" and row[4] == "0", printed
    assert any((tmp_path / "rcache").rglob("*.txt"))


def _doc_texts(tmp_path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in (tmp_path / "docs.jsonl").read_text().splitlines()]


ECHO_KEY = "sk-Q7vX2mP9kL4wR8tZ3nB6yH1cJ5dF0gS"  # random-looking: no 6 characters of it occur by chance


def _key_fragments_under(out: Path, secret: str, size: int = 6) -> list[str]:
    """Files under ``out`` holding any ``size``-character piece of ``secret``: raw bytes,
    and every Parquet file's rows decoded (a compressed page could hide a copy)."""
    pieces = {secret[i:i + size] for i in range(len(secret) - size + 1)}
    found = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        texts = [path.read_bytes().decode("latin-1")]
        if path.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False))
        found += [f"{path}: {piece}" for piece in pieces for text in texts if piece in text]
    return found


def _echoing_responder(texts: dict[str, str]):
    """By document: d0, d1 a rewrite carrying the Authorization header (verbatim; broken
    across lines); d2 a 400 whose long body puts the key across the error text's cut;
    d3 a 503 that breaks it across lines; d4 a 422 whose JSON body escapes that newline;
    d5-d7 a plain rewrite."""
    pool = _sentences("en")[600:]

    def respond(body, headers):
        prompt, auth = body["prompt"], headers["Authorization"]
        doc = _doc_of(prompt, texts)
        if doc == "d0":
            return completion(f"{_rewrite(prompt, pool)} Authorization: {auth}")
        if doc == "d1":
            return completion(f"{_rewrite(prompt, pool)} {auth[:14]}\n{auth[14:30]}\r\n {auth[30:]}")
        if doc == "d2":
            return 400, {}, ("e" * 185 + auth + " is not a key we know").encode()
        if doc == "d3":
            return 503, {}, f"upstream said:\ninvalid key {auth[:20]}\n{auth[20:]}\nretry later".encode()
        if doc == "d4":
            return 422, {}, json.dumps({"error": f"bad {auth[:16]}\n{auth[16:]}"}).encode()
        return completion(_rewrite(prompt, pool))

    return respond


def test_a_server_echoing_the_api_key_leaves_no_piece_of_it_in_the_output(tmp_path, scripted_server, monkeypatch,
                                                                           caplog):
    """Issue 36, item 3: the key a server echoes in an answer is cut out before the answer
    is cached (``<output>/cache/augment``) or becomes a document; in error bodies it is cut
    out of the whole body before the body is cut to its first 200 characters."""
    texts = _write_corpus(tmp_path)
    monkeypatch.setenv("TF_TEST_API_KEY", ECHO_KEY)
    scripted_server.reset(_echoing_responder(texts))
    config = _job(tmp_path, _rephrase_section(scripted_server.base_url), stages="[extract, clean, augment]")
    with caplog.at_level(logging.DEBUG):
        printed = _run(config)
    row = next(line for line in printed.splitlines() if line.startswith("augment")).split()
    assert row[1] == "24" and row[4] == "6" and row[5] == "in=out+r+f", printed
    out = tmp_path / "out"
    assert {h.get("Authorization") for _, _, h in scripted_server.requests} == {f"Bearer {ECHO_KEY}"}
    cached = [p.read_text() for p in (out / "cache" / "augment").rglob("*.txt")]
    assert len(cached) == 10 and sum("[redacted]" in text for text in cached) == 4
    failed = pq.read_table(out / "failed" / "augment").to_pylist()
    assert sorted(f["error_type"] for f in failed) == ["http_400"] * 2 + ["http_422"] * 2 + ["http_503"] * 2
    assert all("[redac" in f["error"] for f in failed)
    assert _key_fragments_under(out, ECHO_KEY) == []
    logged = caplog.text + printed
    assert not [i for i in range(len(ECHO_KEY) - 5) if ECHO_KEY[i:i + 6] in logged]


def test_json_nested_too_deeply_is_a_failed_generation_and_the_stage_completes(tmp_path, scripted_server):
    """Issue 36, item 14: 100,000 '[' from the server made json raise RecursionError out of
    the backend and stopped the stage; now each such request is a ``failed/augment/``
    record and every other generation is kept or rejected as usual."""
    texts = _write_corpus(tmp_path)
    pool = _sentences("en")[600:]
    scripted_server.reset(lambda body, headers: (200, {}, b"[" * 100_000) if _doc_of(body["prompt"], texts) == "d0"
                          else completion(_rewrite(body["prompt"], pool)))
    section = _rephrase_section(scripted_server.base_url).replace("    api_key_env: TF_TEST_API_KEY\n", "")
    printed = _run(_job(tmp_path, section, stages="[extract, clean, augment]"))
    row = next(line for line in printed.splitlines() if line.startswith("augment")).split()
    assert row[1] == "24" and row[4] == "2" and row[5] == "in=out+r+f", printed
    failed = pq.read_table(tmp_path / "out" / "failed" / "augment").to_pylist()
    assert [f["error_type"] for f in failed] == ["bad_response"] * 2
    assert all("nested too deeply" in f["error"] and texts["d0"][:60] in json.loads(f["raw"])[0]["prompt"]
               for f in failed)
