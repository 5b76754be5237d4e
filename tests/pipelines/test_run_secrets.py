"""No secret given to a run is written anywhere: a real job (extract, clean, augment with an
API key, tokenize) run as a command with secrets in its environment, on its command line
and in its config; a second run refused while the first holds the lease; the first killed
with -9; a third that breaks the dead run's lease and finishes. Every byte they wrote (the
lease, manifests, report, logs, caches, failed/, temporary files) is searched."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.augment.servers import ScriptedServer, completion
from tests.conftest import ROOT, shared

SECRETS = {
    "TF_SCAN_API_KEY": "EnvApiKey-3c1f9a7e52d4",  # the environment: the augment backend's api_key_env
    "AWS_SECRET_ACCESS_KEY": "EnvAwsKey-8d2e6b1c07a3",  # the environment: boto3 would read it
    "--s3_session_token=": "CliEquals-5a9d3f0b14e8",  # the command line, --name=value
    "--s3_access_key_id ": "CliSpaced-7e4c2a9d61f0",  # the command line, --name value
    "--hf_token=": "CliUnknown-2f8b6e3a95c7",  # an option Beam does not know (it logs it)
    "beam_args": "CfgSecret-9b1d7c4e28f6",  # the config
}

HOLD_AFTER_LEASE = """
import runpy, sys
from pipelines import lease
acquire = lease.OutputLease.acquire
def paused(self, *args, **kwargs):
    held = acquire(self, *args, **kwargs)
    print("leased", flush=True)
    sys.stdin.readline()
    return held
lease.OutputLease.acquire = paused
runpy.run_module("pipelines.run", run_name="__main__", alter_sys=True)
"""


def encodings(secret: str) -> list[bytes]:
    """The secret's bytes and the part of its base64 that is the same at every alignment."""
    raw = secret.encode()
    forms = [raw]
    for pad in range(3):
        text = base64.b64encode(b"\0" * pad + raw)
        forms.append(text[4 if pad else 0:-4])
    return forms


def job_config(tmp_path: Path, endpoint: str) -> Path:
    en = shared("langid", "lingua_sentences", "en.txt").read_text(encoding="utf-8").splitlines()
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "text": " ".join(en[8 * i:8 * i + 8])}) + "\n"
                            for i in range(6)) + "{broken\n")
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
stages: [extract, clean, augment, tokenize]
inputs:
  - {{format: jsonl, path: "{docs}"}}
extract: {{max_error_ratio: 0.5}}
clean:
  langid: {{model: "{shared('models', 'lid.176.ftz')}", languages: [en], threshold: 0.5}}
  rules: {{families: [gopher_repetition]}}
augment:
  rephrase:
    endpoint: "{endpoint}"
    model: tiny
    api_key_env: TF_SCAN_API_KEY
    templates: [{{name: wikipedia}}]
tokenize:
  model: "{shared('models', 'spm_test_model_botchan.model')}"
beam_args: ["--runner=FnApiRunner", "--s3_secret_access_key={SECRETS['beam_args']}"]
""")
    return config


def command_line(config: Path) -> list[str]:
    return ["--config", str(config), "--no-progress", f"--s3_session_token={SECRETS['--s3_session_token=']}",
            "--s3_access_key_id", SECRETS["--s3_access_key_id "], f"--hf_token={SECRETS['--hf_token=']}"]


def test_no_secret_in_any_byte_a_run_writes(tmp_path):
    pool = shared("langid", "lingua_sentences", "en.txt").read_text(encoding="utf-8").splitlines()[600:]
    server = ScriptedServer()
    server.start()
    server.reset(lambda body, headers: completion(" ".join(pool[len(body["prompt"]) % 50:][:8])))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), TOKENFACTORY_MODEL_CACHE=str(tmp_path / "model-cache"),
               TF_SCAN_API_KEY=SECRETS["TF_SCAN_API_KEY"], AWS_SECRET_ACCESS_KEY=SECRETS["AWS_SECRET_ACCESS_KEY"])
    args = command_line(job_config(tmp_path, server.base_url))
    logs: dict[str, str] = {}
    first = subprocess.Popen([sys.executable, "-c", HOLD_AFTER_LEASE, *args], cwd=ROOT, env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert first.stdout.readline().strip() == "leased"
        lease = json.loads((tmp_path / "out" / "_lease.json").read_text())
        assert "--s3_session_token=*** --s3_access_key_id *** --hf_token=***" in lease["command"], lease
        refused = subprocess.run([sys.executable, "-m", "pipelines.run", *args], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
        logs.update(refused_out=refused.stdout, refused_err=refused.stderr)
        assert refused.returncode == 2 and "output in use" in refused.stderr and lease["owner"][:8] in refused.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        logs.update(zip(("killed_out", "killed_err"), first.communicate(timeout=60)))
    try:
        broke = subprocess.run([sys.executable, "-m", "pipelines.run", *args, "--break-lease"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    logs.update(broke_out=broke.stdout, broke_err=broke.stderr)
    assert broke.returncode == 0, broke.stderr[-3000:]
    assert f"broke the live lease of run {lease['owner'][:8]}" in broke.stderr
    assert all(h.get("Authorization") == f"Bearer {SECRETS['TF_SCAN_API_KEY']}" for _, _, h in server.requests)
    written = {str(p): p.read_bytes() for root in ("out", "tmp", "model-cache") for p in (tmp_path / root).rglob("*")
               if p.is_file()}
    written.update({name: text.encode() for name, text in logs.items()})
    assert any("report.json" in name for name in written) and any("/failed/extract/" in name for name in written)
    for where, secret in SECRETS.items():
        for form in encodings(secret):
            leaks = [name for name, data in written.items() if form in data]
            assert not leaks, f"the secret given as {where} is in {leaks}"
