"""Building a Beam graph without recomputing what cannot change (issue 37, item 4).

Beam 2.77 asks ``userstate.get_dofn_specs(dofn)`` for every ``ParDo`` it applies, again
when it validates and again when it translates the graph: each call runs
``inspect.signature`` on every method of the DoFn (~33), so a stage of 90 transforms made
~38,000 signature calls. ``PipelineOptions.view_as(cls)`` builds and runs a whole argparse
parser on every call (type-hint checks call it once per transform). Both answers are
fixed once their inputs are:

- a DoFn's state and timer specs depend only on its methods' signatures: its class and
  any bound method it holds as an attribute (``beam.Map(obj.method)``), so they are
  memoised on exactly that (the functions themselves are in the key: nothing is confused
  with a collected object's id); a DoFn whose specs raise is never memoised;
- a view of an options object is the same parse of the same flags backed by the same
  shared option dict, so it is kept per (options object, view class) for as long as the
  object lives and its flags and dict are the ones the view was made from.

``install()`` is called when ``pipelines`` is imported (the driver, and every SDK worker
that unpickles one of our DoFns); it is idempotent. Outputs cannot change: the memoised
values are the ones Beam computed (tests/pipelines/test_graph_memo.py).
"""

from __future__ import annotations

import types
import weakref
from typing import Any, Callable

from apache_beam.options import pipeline_options
from apache_beam.transforms import userstate

__all__ = ["dofn_specs_key", "install", "installed"]

_SPECS: dict[tuple[Any, ...], tuple[frozenset[Any], frozenset[Any]]] = {}
_VIEWS: "weakref.WeakKeyDictionary[Any, dict[type, Any]]" = weakref.WeakKeyDictionary()
_ORIGINAL: dict[str, Callable[..., Any]] = {}


def dofn_specs_key(dofn: Any) -> tuple[Any, ...]:
    """What a DoFn's state and timer specs depend on: its class and the functions of the
    bound methods held in its instance attributes (``get_dofn_specs`` inspects every
    attribute that is a bound method)."""
    held = tuple(sorted(((name, value.__func__) for name, value in vars(dofn).items()
                         if isinstance(value, types.MethodType)), key=lambda item: item[0]))
    return (type(dofn), held)


def _get_dofn_specs(dofn: Any) -> tuple[set[Any], set[Any]]:
    try:
        key = dofn_specs_key(dofn)
        hash(key)
    except TypeError:  # no __dict__, or an unhashable function wrapper: ask Beam each time
        return _ORIGINAL["get_dofn_specs"](dofn)
    cached = _SPECS.get(key)
    if cached is None:
        states, timers = _ORIGINAL["get_dofn_specs"](dofn)
        cached = _SPECS[key] = (frozenset(states), frozenset(timers))
    return set(cached[0]), set(cached[1])  # callers get their own sets, as from Beam


def _view_as(self: Any, cls: type) -> Any:
    try:
        views = _VIEWS.setdefault(self, {})
    except TypeError:  # not weak-referenceable: Beam's own path
        return _ORIGINAL["view_as"](self, cls)
    view = views.get(cls)
    if view is None or view._all_options is not self._all_options or view._flags is not self._flags:
        view = views[cls] = _ORIGINAL["view_as"](self, cls)
    return view


def install() -> None:
    """Memoise the DoFn specs and the option views (once per process)."""
    if _ORIGINAL:
        return
    _ORIGINAL["get_dofn_specs"] = userstate.get_dofn_specs
    _ORIGINAL["view_as"] = pipeline_options.PipelineOptions.view_as
    userstate.get_dofn_specs = _get_dofn_specs
    pipeline_options.PipelineOptions.view_as = _view_as  # type: ignore[method-assign]


def installed() -> bool:
    return bool(_ORIGINAL)
