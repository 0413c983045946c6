"""Saved configs: the tuned knobs written for production, and read back there.

``from workbench.config import load_config`` is the production side's one import (docs,
examples/train.py); it stays light: the engine's training step, not the tuner or the notebook.
"""

from workbench.config.saved import ConfigWarning, load_config, load_knobs, save_config
from workbench.config.tuned_config import TunedConfig

__all__ = ["ConfigWarning", "TunedConfig", "load_config", "load_knobs", "save_config"]
