"""The memoised DoFn specs and option views give Beam's own answers (pipelines/graph_memo.py)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import BagStateSpec

import pipelines  # noqa: F401 - installs the memo
from pipelines import graph_memo

BAG = BagStateSpec("seen", VarIntCoder())


class Stateful(beam.DoFn):
    def process(self, element, seen=beam.DoFn.StateParam(BAG)):
        yield element


class Plain(beam.DoFn):
    def process(self, element):
        yield element


class Holder:
    def stateful(self, element, seen=beam.DoFn.StateParam(BAG)):
        return element

    def plain(self, element):
        return element


class Holds(beam.DoFn):
    """A DoFn that keeps a bound method as an attribute, as beam.Map(obj.method) does."""

    def __init__(self, method):
        self.method = method

    def process(self, element):
        yield self.method(element)


class Duplicate(beam.DoFn):
    def process(self, element, a=beam.DoFn.StateParam(BAG), b=beam.DoFn.StateParam(BAG)):
        yield element


def test_installed_when_pipelines_is_imported() -> None:
    assert graph_memo.installed()
    assert userstate.get_dofn_specs is not graph_memo._ORIGINAL["get_dofn_specs"]


@pytest.mark.parametrize("dofn", [Stateful(), Plain(), Holds(Holder().stateful), Holds(Holder().plain)])
def test_specs_are_beams(dofn: beam.DoFn) -> None:
    want = graph_memo._ORIGINAL["get_dofn_specs"](dofn)
    assert userstate.get_dofn_specs(dofn) == want
    assert userstate.get_dofn_specs(dofn) == want  # from the memo
    assert userstate.is_stateful_dofn(dofn) == bool(want[0] or want[1])


def test_a_held_bound_method_is_part_of_the_key() -> None:
    # the same DoFn class is stateful or not by the method it holds
    assert userstate.is_stateful_dofn(Holds(Holder().plain)) is False
    assert userstate.is_stateful_dofn(Holds(Holder().stateful)) is True
    assert userstate.is_stateful_dofn(Holds(Holder().plain)) is False
    assert graph_memo.dofn_specs_key(Holds(Holder().plain)) != graph_memo.dofn_specs_key(Holds(Holder().stateful))
    assert graph_memo.dofn_specs_key(Holds(Holder().plain)) == graph_memo.dofn_specs_key(Holds(Holder().plain))


def test_callers_get_their_own_sets() -> None:
    states, _ = userstate.get_dofn_specs(Stateful())
    states.clear()
    assert userstate.get_dofn_specs(Stateful())[0] == {BAG}


def test_an_invalid_dofn_raises_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="duplicate"):
            userstate.get_dofn_specs(Duplicate())


def test_a_view_is_kept_and_shares_the_options() -> None:
    options = PipelineOptions(["--runner=FnApiRunner", "--pipeline_type_check"])
    view = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is view
    assert view.runner == "FnApiRunner"
    view.runner = "SparkRunner"  # a write through one view is seen through every view
    assert options.view_as(StandardOptions).runner == "SparkRunner"
    assert options.view_as(TypeOptions).pipeline_type_check is True
    other = PipelineOptions(["--runner=PrismRunner"])
    assert other.view_as(StandardOptions) is not view
    assert other.view_as(StandardOptions).runner == "PrismRunner"


def test_a_view_is_rebuilt_when_the_options_dict_is_replaced() -> None:
    options = PipelineOptions(["--runner=FnApiRunner"])
    view = options.view_as(StandardOptions)
    options._all_options = dict(options._all_options, runner="PrismRunner")
    fresh = options.view_as(StandardOptions)
    assert fresh is not view and fresh.runner == "PrismRunner"


def test_a_pipeline_built_with_the_memo_translates_as_without(monkeypatch: pytest.MonkeyPatch) -> None:
    def build() -> bytes:
        p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
        (p | beam.Create([("a", 1)]) | "S" >> beam.ParDo(Stateful()) | "P" >> beam.ParDo(Plain())
         | beam.Map(Holder().plain))
        proto = p.to_runner_api()
        out = []
        for t in proto.components.transforms.values():
            states: list[str] = []
            if t.spec.urn == "beam:transform:pardo:v1":
                states = sorted(beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).state_specs)
            out.append((t.unique_name, t.spec.urn, states))
        return sorted(out)

    with_memo = build()
    monkeypatch.setattr(userstate, "get_dofn_specs", graph_memo._ORIGINAL["get_dofn_specs"])
    monkeypatch.setattr(PipelineOptions, "view_as", graph_memo._ORIGINAL["view_as"])
    assert build() == with_memo
    assert ("S", "beam:transform:pardo:v1", ["seen"]) in with_memo
    assert ("P", "beam:transform:pardo:v1", []) in with_memo
