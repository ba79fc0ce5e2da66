"""admitcheck: mismatch budgets for on-policy distillation.

    import admitcheck
    from admitcheck.io import load_config
    from admitcheck.config import MeasureConfig
    report = admitcheck.measure(load_config("examples/toy_measure.yaml", MeasureConfig))

The public API is loaded lazily so `import admitcheck` (and `admitcheck --help`) does not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_API = {
    "measure": ("admitcheck.measure", "measure"),
    "calibrate": ("admitcheck.calibrate", "calibrate"),
    "screen": ("admitcheck.screen", "screen"),
    "load_calibration": ("admitcheck.artifact", "load_calibration"),
    "mismatch_metrics": ("admitcheck.metrics", "mismatch_metrics"),
    "sensitivity": ("admitcheck.sensitivity", "sensitivity"),
    "recipe": ("admitcheck.sensitivity", "recipe"),
    "prefix_shift": ("admitcheck.prefix_shift", "prefix_shift"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'admitcheck' has no attribute {name!r}")
