"""Every stage graph builds under Dataflow, Flink and Spark options, and every DoFn pickles.

Nothing is executed: the graphs are built with the runners' options and serialised to the
runner API (what a runner receives); each DoFn is pickled with Beam's pickler as workers
would unpickle it. The shipped configs for those runners are checked for syntax and keys.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
import yaml
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.config import JobConfig, from_mapping
from pipelines.manifest import Manifest, StageCounts, write_manifest
from pipelines.stage_specs import plan_stage
from tests.conftest import shared
from tests.labelmodels import label_data, label_section  # noqa: F401  (fixture)

RUNNERS = {
    "dataflow": ["--runner=DataflowRunner", "--project=my-project-123", "--region=us-central1",
                 "--temp_location=gs://my-bucket/tmp", "--staging_location=gs://my-bucket/staging",
                 "--sdk_container_image=registry/tokenfactory:0.1.0", "--experiments=use_runner_v2"],
    "flink": ["--runner=FlinkRunner", "--flink_master=localhost:8081", "--environment_type=DOCKER",
              "--environment_config=registry/tokenfactory:0.1.0"],
    "spark": ["--runner=PortableRunner", "--job_endpoint=localhost:8099", "--environment_type=DOCKER",
              "--environment_config=registry/tokenfactory:0.1.0"],
}


def full_config(tmp_path, labeller: str) -> JobConfig:
    data = {
        "output": str(tmp_path / "out"),
        "inputs": [{"format": "warc", "path": str(shared("warc", "warcio_example.warc.gz"))},
                   {"format": "jsonl", "path": str(tmp_path / "x.jsonl")}],
        "crawl": {"seeds": ["http://127.0.0.1:9/"]},
        "clean": {"langid": {"model": str(shared("models", "lid.176.ftz"))}},
        "dedup": {"index": str(tmp_path / "index")},
        "label": label_section(labeller),
        "tokenize": {"vocab_size": 1000},
    }
    (tmp_path / "x.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    return from_mapping(JobConfig, data)


def fake_upstream(config: JobConfig) -> None:
    """Finished-stage manifests so later stages can be planned without running earlier ones."""
    for stage in ("crawl", "extract", "clean", "dedup_exact", "dedup_minhash", "label", "tokenizer"):
        write_manifest(config.output, Manifest(stage, "c", "f", "v", StageCounts(0, 0, 0, 0), [], [],
                                               "s", "e", "r"))


def pickled_dofns(pipeline: beam.Pipeline) -> int:
    count = 0

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node) -> None:
            nonlocal count
            transform = node.transform
            if isinstance(transform, beam.ParDo):
                restored = pickler.loads(pickler.dumps(transform.fn))
                assert type(restored) is type(transform.fn)
                count += 1

    pipeline.visit(Visitor())
    return count


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_every_stage_graph_builds_and_pickles(tmp_path, runner, label_data):
    config = full_config(tmp_path, label_data.model_dir)
    assert "label" in config.active_stages()
    fake_upstream(config)
    options = PipelineOptions(RUNNERS[runner])
    total = 0
    for stage in config.active_stages():
        plan = plan_stage(config, stage)
        pipeline = beam.Pipeline(options=options)
        if plan.runner is None:
            plan.build(pipeline)
        elif stage == "dedup_minhash":
            from pipelines.dedup_stage import NearDedupDriver
            from pipelines.stages import ReadDocs

            driver = NearDedupDriver(config.dedup, config.output, [], ReadDocs)
            for build in (driver._build_edges, driver._build_round(0), driver._build_final(1)):
                sub = beam.Pipeline(options=options)
                build(sub)
                sub.to_runner_api()
                total += pickled_dofns(sub)
            continue
        elif stage == "tokenize":
            from pipelines.stages import ReadDocs
            from pipelines.tokenize_stage import TokenizeDriver

            TokenizeDriver(config.tokenize, config.output, [], ReadDocs, "extract", "h")._build(pipeline)
        else:
            continue  # the tokenizer stage trains on the driver: no Beam graph
        proto = pipeline.to_runner_api()
        assert proto.components.transforms
        total += pickled_dofns(pipeline)
    assert total > 20


@pytest.mark.parametrize("name", ["dataflow.yaml", "flink.yaml", "spark.yaml"])
def test_runner_configs_parse(name):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs" / name
    config = from_mapping(JobConfig, yaml.safe_load(path.read_text()))
    assert config.output.startswith(("gs://", "s3://"))


def test_setup_file_stages_the_whole_project(tmp_path):
    """What ``--setup_file=./setup.py`` makes Beam stage: an sdist with every package."""
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)], cwd=root,
                   check=True, capture_output=True)
    (sdist,) = tmp_path.glob("tokenfactory-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    for module in ("pipelines/run.py", "transforms/dedup/minhash.py", "models/anomaly.py", "storage/loader.py"):
        assert any(n.endswith(module) for n in names), module
