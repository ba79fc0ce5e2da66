"""Shared fixtures. `toy_pair_dir`: the default toy pair (seed 0): the one shipped in the repository's toy/.

    def test_something(toy_pair_dir):                  # a pathlib.Path holding teacher/, student/, prompts/
        rows = io.read_prompts(toy_pair_dir / "prompts" / "probe.jsonl")

The shipped pair is what calibrations/toy.yaml was made from. Set ADMITCHECK_TOY_DIR=some/dir to use (or build,
~90 s on 2 CPU cores, cached by recipe hash) a pair elsewhere instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import admitcheck  # noqa: F401  the numeric pins (admitcheck.numerics), set before torch runs its first kernel

SHIPPED_TOY = Path(__file__).resolve().parent.parent / "toy"

# Tiny models: one torch thread is as fast as two and gives the same numerics on every machine (golden numbers).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config) -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_pair_dir(tmp_path_factory) -> Path:
    from admitcheck.pairs.toy import build_toy_pair

    d = Path(os.environ["ADMITCHECK_TOY_DIR"]) if os.environ.get("ADMITCHECK_TOY_DIR") else SHIPPED_TOY
    build_toy_pair(d, seed=0)  # a cache hit for the shipped pair: nothing is written
    return d


@pytest.fixture
def bench_module():
    """A loader of a bench/ script as a module (`bench_module("budget_coverage")`), bench/ on sys.path only while it
    is imported."""
    import importlib
    import sys

    bench = str(Path(__file__).resolve().parents[1] / "bench")

    def load(name: str):
        sys.path.insert(0, bench)
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(bench)

    return load
