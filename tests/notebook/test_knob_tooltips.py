"""The panel's tooltips say what each knob may change in the loss (its numeric class)."""

from workbench.core.knobs import knob_specs
from workbench.core.numerics import numeric_class
from workbench.notebook.ui.controls import make_control


def test_every_control_s_tooltip_names_its_numeric_class():
    for spec in knob_specs():
        tip = make_control(spec, spec.default).tooltip
        assert spec.doc in tip and f"Numerics: {numeric_class(spec.name)}" in tip, spec.name
