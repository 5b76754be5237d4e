"""House style: every PTransform of transforms/ and pipelines/ says what its expand takes and returns
(``beam.PCollection[Doc]``, not a bare ``beam.PCollection``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import apache_beam as beam

import pipelines
import transforms


def _ptransforms() -> list[type]:
    found = []
    infos = [*pkgutil.walk_packages(transforms.__path__, "transforms."),
             *pkgutil.walk_packages(pipelines.__path__, "pipelines.")]
    for info in infos:
        module = importlib.import_module(info.name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, beam.PTransform) and cls.__module__ == info.name]
    return found


def test_every_expand_names_its_element_types():
    classes = _ptransforms()
    assert {"Clean", "ExactDedup", "ExtractText", "LabelDocs", "TokenizeToShards", "ReadDocs",
            "WriteParquet", "WriteStageOutputs"} <= {c.__name__ for c in classes}
    bare = []
    for cls in classes:
        signature = inspect.signature(cls.expand)
        (param,) = [p for name, p in signature.parameters.items() if name != "self"]
        for where, hint in (("input", param.annotation), ("output", signature.return_annotation)):
            untyped = hint is inspect.Signature.empty or ("PCollection" in str(hint) and "PCollection[" not in str(hint))
            if untyped:
                bare.append(f"{cls.__module__}.{cls.__name__} {where}: {hint}")
    assert not bare
