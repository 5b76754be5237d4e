"""Checks before the first stage (issue 36, items 9 and 11): a runner Beam does not know
and an output this user cannot write end the run with exit 2 and one message, before
any stage runs and before the lease is taken."""

from __future__ import annotations

import ctypes
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.config_errors import ConfigError
from pipelines.preflight import PROBE_PREFIX, check_runner, probe_output
from pipelines.run import main
from tests.s3server import s3_endpoint, s3_env  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def job(tmp_path: Path, beam_args: str = '["--runner=FnApiRunner"]') -> str:
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document number {i} has some words."}) + "\n"
                            for i in range(20)))
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: \"{data}\"}}\n"
                      f"beam_args: {beam_args}\n")
    return str(config)


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv + ["--no-progress", "--no-report", "--log-level", "WARNING"], out=out), out.getvalue()


# ---------------------------------------------------------------- runner names (item 11)

def test_a_misspelt_runner_is_refused_even_when_every_stage_would_resume(tmp_path, capsys):
    """Before, ``--runner=SparkRunnr`` passed: every stage resumed (exit 0), or the first
    stage that ran failed with Beam's error (exit 1)."""
    config = job(tmp_path)
    assert run(["--config", config])[0] == 0
    capsys.readouterr()
    code, table = run(["--config", config, "--runner=SparkRunnr"])
    err = capsys.readouterr().err
    assert code == 2 and table == ""
    assert err.startswith("config error: --runner=SparkRunnr: not a runner Beam can start (ValueError: "
                          "Unexpected pipeline runner: SparkRunnr); the known names are ")
    assert "SparkRunner" in err and "--engine" in err and err.endswith("\nnothing ran\n")


def test_a_misspelt_runner_in_the_config_writes_nothing(tmp_path, capsys):
    config = job(tmp_path, '["--runner=FnApiRuner"]')
    assert run(["--config", config])[0] == 2
    assert "config error: --runner=FnApiRuner: not a runner" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # no stage, no lease, no probe


@pytest.mark.parametrize("name", ["FnApiRunner", "SparkRunner", "spark", "flinkrunner", "PrismRunner",
                                  "PortableRunner", "apache_beam.runners.portability.fn_api_runner.FnApiRunner"])
def test_runner_names_beam_knows_pass(name):
    check_runner(PipelineOptions([f"--runner={name}"]))


@pytest.mark.parametrize("name,message", [("Sparkrunr", "Unexpected pipeline runner"),
                                          ("os.path", "TypeError"),
                                          ("no_such_module.Runner", "ModuleNotFoundError"),
                                          ("apache_beam.runners.runner.PipelineState", "not a Beam PipelineRunner")])
def test_runner_names_beam_cannot_start_are_config_errors(name, message):
    with pytest.raises(ConfigError, match=rf"--runner={name}: .*{message}"):
        check_runner(PipelineOptions([f"--runner={name}"]))


# ---------------------------------------------------------------- outputs that cannot be written (item 9)

def _without_root_override() -> None:
    """In the child, before exec: root loses the capabilities that let it write through
    permission bits (as root, chmod alone stops nothing); other users need nothing."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


@pytest.mark.parametrize("below", ["", "new/out"])
def test_a_read_only_output_is_a_config_error_before_the_lease(tmp_path, below):
    """A real run of ``pipelines.run`` by a user who cannot write the output folder (or
    its parent, for an output still to be made). Before: a PermissionError traceback
    from the lease, exit 1."""
    config = job(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    output = str(locked / below) if below else str(locked)
    try:
        done = subprocess.run([sys.executable, "-m", "pipelines.run", "--config", config, "--output", output,
                               "--no-progress", "--no-report"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, preexec_fn=_without_root_override)
    finally:
        locked.chmod(0o755)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "apitools" not in line]  # Beam's import warning
    assert len(lines) == 2 and lines[1] == "nothing ran", done.stderr
    assert lines[0].startswith(f"config error: output: cannot write to {output!r} (PermissionError: "
                               f"[Errno 13] Permission denied: '{locked}"), lines[0]
    assert "Traceback" not in done.stderr and os.listdir(locked) == []


def test_a_bucket_that_refuses_is_a_config_error(tmp_path, s3_env, capsys):  # noqa: F811
    """An output in a bucket that does not exist (moto): before, the lease's put_object
    raised NoSuchBucket out of ``pipelines.run`` with a traceback."""
    s3 = [f"--s3_endpoint_url={s3_env}", "--s3_access_key_id=testing", "--s3_secret_access_key=testing",
          "--s3_region_name=us-east-1"]
    code, _ = run(["--config", job(tmp_path), "--output", "s3://no-such-bucket/job"] + s3)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("config error: output: cannot write to 's3://no-such-bucket/job' (S3ClientError: ")
    assert "NoSuchBucket" in err and err.endswith("\nnothing ran\n") and "Traceback" not in err
    assert len(err.splitlines()) == 2


def test_the_probe_leaves_nothing_behind(tmp_path, s3_env):  # noqa: F811
    import boto3
    from apache_beam.io.filesystems import FileSystems

    client = boto3.client("s3")
    client.create_bucket(Bucket="probed")
    FileSystems.set_options(PipelineOptions([f"--s3_endpoint_url={s3_env}", "--s3_access_key_id=testing",
                                             "--s3_secret_access_key=testing", "--s3_region_name=us-east-1"]))
    try:
        probe_output("s3://probed/job")
    finally:
        FileSystems.set_options(PipelineOptions([]))
    assert client.list_objects_v2(Bucket="probed").get("KeyCount") == 0
    config = job(tmp_path)
    assert run(["--config", config])[0] == 0
    left = [p for p in (tmp_path / "out").rglob("*") if p.name.startswith(PROBE_PREFIX)]
    assert left == [] and (tmp_path / "out" / "manifests" / "extract.json").exists()
