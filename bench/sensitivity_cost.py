"""Cost of a sensitivity sweep over every unit of the toy student against one full screen (issue #6).

    python bench/sensitivity_cost.py                        # builds (or reuses) the toy pair in ./toy
    python bench/sensitivity_cost.py --toy-dir toy --threads 1

The sweep (`admitcheck.measurement.sensitivity`) measures the floor, the whole recipe and each unit (KV cache,
attention,
MLP of every layer) with ONE engine re-configured in place and one reference pass per unit. The denominator is all
of `screen()` for the whole recipe as one candidate (tokenizer, reference model, floor, measurement) at the same
probe settings, forced to use every probe (min_prompts = num_prompts), against a stand-in calibration. Same
process, same threads. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = {
    "engine": "hf",
    "dtype": "bfloat16",
    "weights": {"format": "fp8_e4m3", "granularity": "block", "block_size": 32},  # the toy is 64 wide
    "kv_cache": {"dtype": "fp8_e4m3"},
}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-dir", default="toy", help="toy pair dir (built when missing)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args(argv)

    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    from screen_cost import configs, stand_in_artifact

    from admitcheck.admission.screen import screen
    from admitcheck.config import SensitivityConfig
    from admitcheck.measurement.sensitivity import sensitivity
    from admitcheck.pairs.toy import build_toy_pair

    torch.set_num_threads(args.threads)
    build_toy_pair(args.toy_dir)
    tmp = Path(tempfile.mkdtemp(prefix="sensitivity_cost_"))
    screen_cfg, cal_cfg = configs(Path(args.toy_dir).resolve(), tmp)
    probe = screen_cfg.probe.model_copy(update={"min_prompts": screen_cfg.probe.num_prompts})
    raw = screen_cfg.model_dump() | {"probe": probe.model_dump(), "candidates": [{"name": "fp8", "rollout": RECIPE}]}
    one = type(screen_cfg).model_validate(raw)
    stand_in_artifact(tmp / "cal.yaml", one, cal_cfg, 1.0)

    t0 = time.perf_counter()
    v = screen(one).verdicts[0]
    t_screen = time.perf_counter() - t0
    sens_cfg = SensitivityConfig(
        pair=screen_cfg.pair,
        probe=probe.model_dump(exclude={"min_prompts"}),
        sampling=screen_cfg.sampling,
        reference=screen_cfg.reference,
        rollout=RECIPE,
    )
    t0 = time.perf_counter()
    rep = sensitivity(sens_cfg)
    t_sens = time.perf_counter() - t0
    passes = len(rep.units) + 2  # floor + whole recipe + units
    out = {
        "threads": args.threads,
        "probe": probe.model_dump(exclude={"prompts"}),
        "units": len(rep.units),
        "passes": passes,
        "seconds_screen_one": t_screen,
        "seconds_sensitivity": t_sens,
        "seconds_per_pass": rep.seconds_per_pass,
        "ratio_sensitivity_to_screen": t_sens / t_screen,
        "screen_k3": v.k3,
        "all_k3": rep.all_k3,
        "sum_ratio": rep.sum_ratio,
        "top_to_median": rep.top_to_median,
        "ranking": [(u.name, u.excess) for u in rep.units],
    }
    print(f"one full screen (whole recipe, {probe.num_prompts} probes): {t_screen:8.2f} s")
    print(f"sensitivity, {len(rep.units)} units ({passes} passes):      {t_sens:8.2f} s")
    print(f"  per pass: {rep.seconds_per_pass:.2f} s; ratio sweep / screen = {t_sens / t_screen:.2f}")
    print(f"  Σ unit excess / whole excess = {rep.sum_ratio:.2f}; top / median = {rep.top_to_median:.1f}")
    for u in rep.units:
        print(f"  {u.name:8s} {u.excess:.3e}  [{u.excess_interval[0]:.2e}, {u.excess_interval[1]:.2e}]")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
