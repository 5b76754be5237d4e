"""Running one Beam pipeline and reading its metrics: the shape every stage driver shares."""

from __future__ import annotations

from typing import Any, Callable, Optional

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult

__all__ = ["counter_totals", "largest_value", "run_pipeline"]


def run_pipeline(options: PipelineOptions, build: Callable[[beam.Pipeline], None]) -> PipelineResult:
    """Builds a pipeline with ``build``, runs it and waits until it finishes."""
    pipeline = beam.Pipeline(options=options)
    build(pipeline)
    result = pipeline.run()
    result.wait_until_finish()
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
