"""Every YAML the repository ships under calibrations/, examples/ and bench/ (found recursively, so a file in a
subfolder is covered too) loads with the loader its users call: a calibration artifact with `load_calibration`, a
backtest report as the readers read it (`kind: backtest`, the calibration it names), a config (examples/, bench/)
with `io.load_config` and the schema of its kind. The schemas' round trip (written back byte for byte) is tested
beside the artifact; here, that each file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from admitcheck import io
from admitcheck.calibration.artifact import load_calibration
from admitcheck.config import config_kind, schema_for

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("calibrations", "examples", "bench")  # bench: the configs its scripts run (toy_remake, ttq)


def shipped_yaml() -> list[Path]:
    return sorted(p for d in FOLDERS for p in (ROOT / d).rglob("*") if p.suffix in (".yaml", ".yml"))


def test_every_folder_ships_yaml_and_the_rl_calibration_is_among_them():
    found = shipped_yaml()
    assert {p.relative_to(ROOT).parts[0] for p in found} == set(FOLDERS)
    assert ROOT / "calibrations" / "toy_rl.yaml" in found  # issue 26: no test parsed it


@pytest.mark.parametrize("path", shipped_yaml(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_yaml_loads(path: Path):
    data = io.read_yaml(path)
    assert isinstance(data, dict), path
    if path.relative_to(ROOT).parts[0] in ("examples", "bench"):
        cfg = io.load_config(path, schema_for(config_kind(data)[0]))
        assert type(cfg).__name__.endswith("Config")
    elif data.get("kind") == "backtest":  # a backtest report: the artifact it backtested sits beside it
        assert data["schema_version"] == 1 and data["candidates"]
        load_calibration(path.parent / data["calibration"]["path"])
    else:
        load_calibration(path)  # a CalibrationError names the file and the field it cannot read
