"""One config of the toy re-make as bench/toy_remake.sh runs it: a copy in $RUN whose paths are absolute and whose
outputs (and the artifacts it reads that the re-make writes) are in $RUN. Prints "KIND STEM" (STEM: its output's
stem, which names its ledger; empty for a screen config).

    python bench/toy_remake/prepare.py bench/toy_remake/toy_backtest.yaml reports/toy_remake/toy_backtest.config.yaml

A calibrate config: pair, prompts and output. A screen config: pair, prompts, and `calibration` → the re-made one in
$RUN. A backtest config: `calibrate_config` / `screen_config` → their prepared copies in $RUN (NAME.config.yaml), and
output. MAX_RUNS (env) caps a calibration's runs (e.g. 18: only the grid); the ledger does not record the cap.
"""

from __future__ import annotations

import os
import pathlib
import sys

import yaml


def prepare(src: pathlib.Path, dst: pathlib.Path) -> tuple[str, str]:
    run = dst.parent
    c = yaml.safe_load(src.read_text())

    def absolute(p: str) -> str:
        return str((src.parent / p).resolve())

    def in_run(p: str) -> str:  # an artifact the re-make writes: its copy in $RUN
        return str(run / pathlib.Path(p).name)

    def as_prepared(p: str) -> str:  # another config of the re-make, as prepared in $RUN
        return str(run / (pathlib.Path(p).stem + ".config.yaml"))

    kind = c.get("kind") or ("backtest" if "calibrate_config" in c else "screen" if "calibration" in c else "calibrate")
    if "pair" in c:
        c["pair"]["student"], c["pair"]["teacher"] = absolute(c["pair"]["student"]), absolute(c["pair"]["teacher"])
    for part in ("probe", "train", "eval"):
        if isinstance(c.get(part), dict) and "prompts" in c[part]:
            c[part]["prompts"] = absolute(c[part]["prompts"])
    if kind == "screen":
        c["calibration"] = in_run(c["calibration"])  # the re-made calibration, not the shipped one
    if kind == "backtest":
        c["calibrate_config"] = as_prepared(c["calibrate_config"])
        c["screen_config"] = as_prepared(c["screen_config"])
    if "output" in c:
        c["output"] = in_run(c["output"])
    if kind == "calibrate" and os.environ.get("MAX_RUNS"):
        c["levels"]["max_runs"] = int(os.environ["MAX_RUNS"])
    dst.write_text(yaml.safe_dump(c, sort_keys=False, allow_unicode=True))
    return kind, pathlib.Path(c["output"]).stem if "output" in c else ""


if __name__ == "__main__":
    kind, stem = prepare(pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve())
    print(kind, stem)
