"""core/jsonsafe: the one JSON-safe encoding of results, history rows and job files."""

import json
import math

import pytest
import torch

from workbench.core.jsonsafe import jsonable
from workbench.core.results import BurstResult


def test_non_finite_floats_are_unknown_never_zero():
    doc = jsonable({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": (1, 2)})
    assert doc == {"a": None, "b": [None, None, 1.5], "c": [1, 2]}
    json.dumps(doc, allow_nan=False)  # strict readers take it


def test_tensor_scalars_become_numbers_and_other_objects_are_refused_by_place():
    assert jsonable({"x": torch.tensor(2.5)}) == {"x": 2.5}
    with pytest.raises(TypeError, match=r"record\['x'\] is a object"):
        jsonable({"x": object()}, "record")
    with pytest.raises(TypeError, match="non-string key 1"):
        jsonable({1: 2})


def test_a_result_and_its_stored_row_use_the_same_encoding():
    r = BurstResult(workload="cnn", samples_per_s=math.nan, step_ms_p50=math.inf)
    doc = r.to_dict()
    assert doc["samples_per_s"] is None and doc["step_ms_p50"] is None
    assert doc == jsonable(doc)  # already safe: encoding again changes nothing
