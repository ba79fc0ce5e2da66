"""Does GRPO raise the SmolLM2 student's reward on a task within the RL protocol's 30 steps? (issue 40: the shipped
RL calibration's task gave a reward of 0.13%, so no level could cost τ; bench/smollm2_rl_tasks.py found copying a
word the only kind the student earns at temperature 1, 8%.)

One GRPO run of examples/smollm2_calibrate_rl.yaml's recipe (30 steps, 4 prompts × 8 samples, temperature 1,
`answer_in_reply`, cosine schedule; `--lr` overrides its 1e-5) on a copying task: "Repeat this word exactly: W.
Answer with only the word." over the pair's WORDS, three templates, the first 60 words trained on and the last 15
held out. The library's own `opd.train` with the HF engine on this machine's CPU, float32, no weight noise (a
baseline run). Reported: every step's mean training reward, and the held-out reward (15 prompts × 3 templates × 4
samples, temperature 1) before and after.

    python bench/grpo_learnability.py --lr 1e-5 --out bench/results/grpo_learnability_copy_lr1e-5.json

Needs the built pair (smollm2/, `admitcheck pair smollm2 smollm2 --device cpu --source <the wheel>`).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lr", type=float, default=None, help="the recipe's lr (default: the RL config's)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=135192)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from admitcheck import io
    from admitcheck.calibration import opd
    from admitcheck.calibration.grpo import Task
    from admitcheck.config import CalibrateConfig, RolloutConfig, SamplingConfig
    from admitcheck.pairs.answers import answer_in_reply, reply_text
    from admitcheck.pairs.load import PairTokens
    from admitcheck.pairs.smollm2 import COPY_TEMPLATES, WORDS, chat_prompt

    torch.set_num_threads(2)
    cfg = io.load_config(ROOT / "examples" / "smollm2_calibrate_rl.yaml", CalibrateConfig)
    train_cfg = cfg.train.model_copy(update={k: v for k, v in (("lr", a.lr), ("steps", a.steps)) if v is not None})
    student_dir = Path(cfg.pair.student)
    tok = io.load_tokenizer(student_dir)
    eos = int(tok.eos_token_id)
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else eos)
    tokens = PairTokens(tok, eos, pad, len(tok))
    words = list(dict.fromkeys(WORDS))
    train_words, held_out = words[:60], words[-15:]

    def rows(ws: list[str]) -> list[tuple[list[int], str]]:
        return [(tok(chat_prompt(tok, t.format(w=w)))["input_ids"], w) for w in ws for t in COPY_TEMPLATES]

    train_rows, eval_rows = rows(train_words), rows(held_out)
    task = Task({tuple(p): w for p, w in train_rows}, tokens)
    student = AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32).eval()
    rollout = RolloutConfig(engine="hf", dtype="float32", device="cpu", compile=False)
    from admitcheck.rollout.engines.hf import HFEngine

    engine = HFEngine(student, rollout, eos_token_id=eos, pad_token_id=pad)
    sampling = SamplingConfig(temperature=train_cfg.temperature)

    def held_out_reward(tag: str) -> float:
        engine.load_weights(student.state_dict(), noise_step=0)
        prompts = [p for p, _ in eval_rows for _ in range(4)]
        answers = [w for _, w in eval_rows for _ in range(4)]
        ro = engine.sample(prompts, sampling, 12345, train_cfg.max_new_tokens)
        hits = [
            answer_in_reply(w, reply_text(tok, eos, [int(t) for t, m in zip(ids, mask) if m]))
            for w, ids, mask in zip(answers, ro.token_ids.tolist(), ro.mask.tolist())
        ]
        print(f"held-out reward {tag}: {sum(hits)}/{len(hits)}", flush=True)
        return sum(hits) / len(hits)

    t0 = time.perf_counter()
    before = held_out_reward("before")
    engine.load_weights(student.state_dict(), noise_step=0)

    def on_step(k: int, _student) -> None:
        print(f"step {k}: {time.perf_counter() - t0:.0f} s", flush=True)

    result = opd.train(student, None, engine, [p for p, _ in train_rows], train_cfg, seed=a.seed, on_step=on_step,
                       task=task)  # fmt: skip
    after = held_out_reward("after")
    rewards = [s.reward_mean for s in result.steps]
    half = len(rewards) // 2
    doc = {
        "task": "copy a word (3 templates; 60 train words, 15 held out)",
        "recipe": {
            "lr": train_cfg.lr,
            "steps": train_cfg.steps,
            "batch_size": train_cfg.batch_size,
            "group_size": train_cfg.grpo.group_size,
            "temperature": train_cfg.temperature,
            "lr_schedule": train_cfg.lr_schedule,
        },
        "seed": a.seed,
        "train_reward_by_step": rewards,
        "train_reward_first_half": sum(rewards[:half]) / half,
        "train_reward_second_half": sum(rewards[half:]) / (len(rewards) - half),
        "held_out_reward_before": before,
        "held_out_reward_after": after,
        "held_out_samples": 4 * len(eval_rows),
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "command": " ".join(["python", *sys.argv]),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "train_reward_by_step"}, indent=2))


if __name__ == "__main__":
    main()
