"""admitcheck: mismatch budgets for on-policy distillation.

    import admitcheck
    from admitcheck.io import load_config
    from admitcheck.config import MeasureConfig
    report = admitcheck.measure(load_config("examples/toy_measure.yaml", MeasureConfig))

The public API is loaded lazily so `import admitcheck` (and `admitcheck --help`) does not import torch. Importing it
sets the numeric pins (`admitcheck.numerics`: the CPU code paths that give the same bits on every x86-64 CPU) before
torch runs a kernel.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from admitcheck import numerics

numerics.apply()

__version__ = "0.1.0"

_API = {
    "measure": ("admitcheck.measurement.measure", "measure"),
    "calibrate": ("admitcheck.calibration.calibrate", "calibrate"),
    "screen": ("admitcheck.admission.screen", "screen"),
    "load_calibration": ("admitcheck.calibration.artifact", "load_calibration"),
    "mismatch_metrics": ("admitcheck.measurement.metrics", "mismatch_metrics"),
    "sensitivity": ("admitcheck.measurement.sensitivity", "sensitivity"),
    "recipe": ("admitcheck.admission.recipe_search", "search_recipe"),
    "prefix_shift": ("admitcheck.measurement.prefix_shift", "prefix_shift"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'admitcheck' has no attribute {name!r}")
