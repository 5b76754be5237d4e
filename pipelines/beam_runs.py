"""Running one Beam pipeline and reading its metrics: the shape every stage driver shares."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners.runner import PipelineResult

from pipelines import interrupts

__all__ = ["GraphCost", "counter_totals", "graph_cost", "largest_value", "run_pipeline"]

# Set (to anything) by benchmarks.bench_pipeline --stage-cpu: each pipeline is also turned
# into its runner-API proto once more, timed, to show what translating it costs (Beam does
# that at least once per run, in the runner; the extra call is outside the run).
MEASURE_TRANSLATION = "TOKENFACTORY_MEASURE_TRANSLATION"


@dataclass
class GraphCost:
    """What building a stage's pipelines cost the driver (recorded in its manifest)."""

    pipelines: int = 0
    transforms: int = 0  # every applied transform, composites included
    build_cpu_s: float = 0.0  # this process's CPU in the stages' build functions
    translate_cpu_s: Optional[float] = None  # one to_runner_api per pipeline, when measured

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["build_cpu_s"] = round(self.build_cpu_s, 4)
        if self.translate_cpu_s is None:
            del out["translate_cpu_s"]
        else:
            out["translate_cpu_s"] = round(self.translate_cpu_s, 4)
        return out


_COST = GraphCost()


def graph_cost(reset: bool = False) -> GraphCost:
    """The pipelines built since the last reset (``pipelines.job.run_stage`` resets it per stage)."""
    global _COST
    if reset:
        _COST = GraphCost()
    return _COST


class _Counter(PipelineVisitor):
    def __init__(self) -> None:
        self.count = 0

    def visit_transform(self, transform_node: Any) -> None:
        self.count += 1

    def enter_composite_transform(self, transform_node: Any) -> None:
        self.count += 1


def run_pipeline(options: PipelineOptions, build: Callable[[beam.Pipeline], None]) -> PipelineResult:
    """Builds a pipeline with ``build``, runs it and waits until it finishes; the cost of
    building it is added to ``graph_cost()``."""
    t0 = time.process_time()
    pipeline = beam.Pipeline(options=options)
    build(pipeline)
    cost = graph_cost()
    cost.build_cpu_s += time.process_time() - t0
    cost.pipelines += 1
    counter = _Counter()
    pipeline.visit(counter)
    cost.transforms += counter.count
    if os.environ.get(MEASURE_TRANSLATION):
        t1 = time.process_time()
        pipeline.to_runner_api()
        cost.translate_cpu_s = (cost.translate_cpu_s or 0.0) + time.process_time() - t1
    result = pipeline.run()
    result.wait_until_finish()
    interrupts.raise_if_received()  # a signal whose exit was swallowed still ends the run here
    return result


def _value(metric: Any) -> Any:
    """The committed value where the runner reports one, else the attempted one."""
    return metric.committed if metric.committed is not None else metric.attempted


def counter_totals(result: PipelineResult, namespace: str, name: Optional[str] = None) -> dict[str, int]:
    """The totals of a namespace's counters (of one counter, given ``name``) by name; a
    counter that was never incremented is absent."""
    metrics_filter = MetricsFilter().with_namespace(namespace)
    if name is not None:
        metrics_filter = metrics_filter.with_name(name)
    totals: dict[str, int] = {}
    for counter in result.metrics().query(metrics_filter)["counters"]:
        key = counter.key.metric.name
        totals[key] = totals.get(key, 0) + int(_value(counter) or 0)
    return totals


def largest_value(result: PipelineResult, name: str) -> int:
    """The largest value a distribution metric saw (0 when the runner reports none)."""
    values = [_value(d) for d in result.metrics().query(MetricsFilter().with_name(name))["distributions"]]
    return max((int(v.max) for v in values if v is not None and v.count), default=0)
