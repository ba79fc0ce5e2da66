"""Shared fixtures. `toy_pair_dir`: the default toy pair (seed 0), built once per test session.

    def test_something(toy_pair_dir):                  # a pathlib.Path holding teacher/, student/, prompts/
        rows = io.read_prompts(toy_pair_dir / "prompts" / "probe.jsonl")

The build takes ~40-90 s on 2 CPU cores. Set ADMITCHECK_TOY_DIR=some/dir to build there instead of a temp dir, so
later sessions reuse it (the build is cached by recipe hash and rebuilt only when the recipe changes).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tiny models: one torch thread is as fast as two and gives the same numerics on every machine (golden numbers).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config) -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_pair_dir(tmp_path_factory) -> Path:
    from admitcheck.toy import build_toy_pair

    d = Path(os.environ["ADMITCHECK_TOY_DIR"]) if os.environ.get("ADMITCHECK_TOY_DIR") else None
    d = d or tmp_path_factory.mktemp("toy_pair")
    build_toy_pair(d, seed=0)
    return d
