"""What a config asks of the model that no engine could give, read from config.json, tokenizer.json and the prompt
files alone (no weights, no torch): lengths past `max_position_embeddings`, a probe batch larger than the memory,
kept sets vLLM cannot return. `validate` and every command that loads models run it first.

    check_limits(measure_config, file="measure.yaml")      # ConfigError naming probe.max_new_tokens, ...
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from admitcheck import io
from admitcheck.errors import ConfigError

# Bytes per (sequence, position, vocabulary entry) a probe batch holds in float32 full rows: the engine's processed
# log-probs, the reference's, and the logits each is computed from.
FULL_ROW_BYTES = 4 * 4
MEMORY_SHARE = 0.9  # a probe batch estimated above this share of the machine's memory cannot run


def check_limits(config: Any, *, file: str | None = None) -> None:
    """What no engine could do with this config, from config.json, tokenizer.json and the prompt files (no
    weights): a ConfigError naming the field when the longest probe prompt plus `max_new_tokens` exceeds the
    student's `max_position_embeddings` (also `train.`/`eval.max_new_tokens` of a calibrate config), when one probe
    batch's full rows would not fit in this machine's memory, or when a vLLM rollout with top-p/top-k could not
    return the kept set (`engines.vllm.kept_set_problem`); when `probe.num_prompts` (`eval.num_prompts`) asks for more
    prompts than the file holds; when a calibrate config's `output` would overwrite one of the run's inputs (the
    config file, a prompt file, a file of the pair). Dirs that are not there are left to the input checks."""
    _check_prompt_counts(config, file)
    _check_output_is_not_an_input(config, file)
    student = Path(config.pair.student)
    cfg_path = student / "config.json"
    if not cfg_path.is_file():
        return
    try:
        model = io.read_json_as_is(cfg_path)
    except (OSError, ValueError):
        return  # unreadable: the pair check names it
    text = io.text_config(model)
    max_pos = text.get("max_position_embeddings")
    vocab = int(text.get("vocab_size") or 0)
    lengths = [("probe", config.probe.prompts, config.probe.max_new_tokens, config.probe.num_prompts)]
    if getattr(config, "train", None) is not None:
        lengths.append(("train", config.train.prompts, config.train.max_new_tokens, None))
    if getattr(config, "eval", None) is not None:
        lengths.append(("eval", config.eval.prompts, config.eval.max_new_tokens, config.eval.num_prompts))
    tokenizer = Path(config.pair.tokenizer or student)
    longest_probe = 1
    for section, prompts, new_tokens, limit in lengths:
        longest = _longest_prompt(tokenizer, prompts, limit)
        if section == "probe":
            longest_probe = longest
        if isinstance(max_pos, int) and longest + new_tokens > max_pos:
            how = "tokens" if (tokenizer / "tokenizer.json").is_file() else "tokens at least"
            raise ConfigError(
                f"the longest {section} prompt ({longest} {how}) + max_new_tokens {new_tokens} = "
                f"{longest + new_tokens} positions, but the model's max_position_embeddings is {max_pos} "
                f"({cfg_path}); set {section}.max_new_tokens to at most {max(max_pos - longest, 0)}",
                file=file,
                field=f"{section}.max_new_tokens",
            )
    _check_batch_memory(config, vocab, longest_probe, file)
    _check_vllm_kept_set(config, vocab, file)


def _longest_prompt(tokenizer_dir: Path, prompts: str, limit: int | None) -> int:
    """Tokens of the longest prompt (tokenizer.json, as the engines tokenize: special tokens included); 1 when the
    tokenizer or the prompts cannot be read here (a lower bound: the input checks name what is missing)."""
    try:
        rows = io.read_prompts(prompts, limit=limit)
    except ConfigError:
        return 1
    path = tokenizer_dir / "tokenizer.json"
    if not path.is_file():
        return 1
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        return max(len(e.ids) for e in tok.encode_batch([r["prompt"] for r in rows]))
    except Exception:  # no `tokenizers`, or a tokenizer.json it cannot read: transformers names it when loading
        return 1


def _check_prompt_counts(config: Any, file: str | None) -> None:
    """`probe.num_prompts` / `eval.num_prompts` above the prompt file's size: refused (it was silently capped)."""
    for section in ("probe", "eval"):
        part = getattr(config, section, None)
        if part is None or getattr(part, "num_prompts", None) is None:
            continue
        try:
            held = len(io.read_prompts(part.prompts, field=f"{section}.prompts"))
        except ConfigError:
            continue  # missing or unreadable: the input checks name it
        if part.num_prompts > held:
            raise ConfigError(
                f"asks for {part.num_prompts} prompts but {part.prompts} holds {held}; set {section}.num_prompts to "
                f"at most {held}, or give a larger prompt file",
                file=file,
                field=f"{section}.num_prompts",
            )


def _check_output_is_not_an_input(config: Any, file: str | None) -> None:
    """A calibrate config's `output` (the artifact, and its ledger and chart beside it) must not be a file the run
    reads: the config itself, a prompt file, or a file of the pair's model dirs. Checked before any run starts
    (the artifact is written at the end of the run, over the input)."""
    output = getattr(config, "output", None)
    if not output or getattr(config, "train", None) is None:
        return
    out = Path(output).resolve()
    written = {out, out.with_suffix(".ledger.jsonl"), out.with_suffix(".png")}
    inputs = {Path(file).resolve(): "the config file itself"} if file else {}
    for section in ("probe", "train", "eval"):
        inputs[Path(getattr(config, section).prompts).resolve()] = f"{section}.prompts"
    for side in ("student", "teacher", "tokenizer"):
        d = getattr(config.pair, side, None)
        if d and Path(d).is_dir():
            inputs |= {f.resolve(): f"a file of pair.{side}" for f in Path(d).iterdir() if f.is_file()}
    for path in sorted(written):
        if path in inputs:
            raise ConfigError(
                f"{output} would be overwritten by the calibration (its {path.name}), but it is {inputs[path]}: "
                "an input of this run; write the artifact elsewhere (e.g. output: calibrations/<pair>.yaml)",
                file=file,
                field="output",
            )


def physical_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _check_batch_memory(config: Any, vocab: int, longest_prompt: int, file: str | None) -> None:
    """A probe batch with full rows holds batch × (prompt + new tokens) × vocabulary float32 rows several times
    over (`FULL_ROW_BYTES`); on a CPU reference, more than `MEMORY_SHARE` of the RAM cannot run."""
    if not getattr(config, "full_logprobs", False) or not vocab or config.reference.device != "cpu":
        return
    total = physical_memory_bytes()
    if total is None:
        return
    positions = longest_prompt + config.probe.max_new_tokens
    need = config.probe.batch_size * positions * vocab * FULL_ROW_BYTES
    if need > MEMORY_SHARE * total:
        fit = max(int(MEMORY_SHARE * total // (positions * vocab * FULL_ROW_BYTES)), 0)
        raise ConfigError(
            f"one probe batch with full rows needs about {need / 2**30:.1f} GiB ({config.probe.batch_size} × "
            f"{positions} positions × {vocab} tokens × {FULL_ROW_BYTES} bytes), more than this machine's "
            f"{total / 2**30:.1f} GiB; set probe.batch_size to at most {fit}, or full_logprobs: false",
            file=file,
            field="probe.batch_size",
        )


def _check_vllm_kept_set(config: Any, vocab: int, file: str | None) -> None:
    sampling = getattr(config, "sampling", None)
    if sampling is None or not (sampling.top_p < 1 or sampling.top_k > 0):
        return
    rollouts = [("rollout", getattr(config, "rollout", None))]
    rollouts += [(f"candidates.{c.name}.rollout", c.rollout) for c in getattr(config, "candidates", None) or []]
    for fld, rollout in rollouts:
        if rollout is None or rollout.engine != "vllm":
            continue
        from admitcheck.rollout.engines.vllm import kept_set_problem

        problem = kept_set_problem(sampling, vocab)
        if problem:
            raise ConfigError(problem, file=file, field=f"{fld}.engine")
