"""core/errors: one input-error type; KnobError is the case that names a knob."""

import pickle

import pytest

from workbench.core.errors import InputError, KnobError
from workbench.core.knobs import Knobs


def test_a_named_refusal_says_what_was_refused_and_what_is_allowed():
    err = InputError.not_allowed("seconds", 0, "a number of seconds > 0")
    assert str(err) == "seconds=0 is not allowed: a number of seconds > 0"
    assert (err.name, err.value, err.allowed) == ("seconds", 0, "a number of seconds > 0")
    assert isinstance(err, ValueError) and not isinstance(err, KnobError)


def test_a_knob_error_is_an_input_error_that_names_the_knob():
    with pytest.raises(InputError) as caught:
        Knobs(batch_size=0)
    err = caught.value
    assert isinstance(err, KnobError) and err.knob == err.name == "batch_size"
    assert str(err).startswith("batch_size=0 is not allowed: ")


def test_a_knob_error_survives_a_trip_between_processes():
    err = pickle.loads(pickle.dumps(KnobError("num_workers", -1, "an integer >= 0")))
    assert (err.knob, err.value, str(err)) == (
        "num_workers", -1, "num_workers=-1 is not allowed: an integer >= 0",
    )  # fmt: skip
