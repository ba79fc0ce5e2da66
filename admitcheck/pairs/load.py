"""Loading a pair for measurement: its shared tokenizer, tokenized prompt sets, checks that load no weights, and the
pair of one command loaded once (`LoadedPair`).

tokens = load_pair_tokenizer(config.pair, file=config_file)      # PairTokens: tokenizer, eos, pad, vocab size
ids = tokenize_prompts(tokens, io.read_prompts(config.probe.prompts))
pair = LoadedPair(config.pair, file=config_file)                   # nothing read yet
pair.tokens, pair.student("bfloat16", "cuda"), pair.teacher()     # each read on first use, then shared
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from admitcheck import io
from admitcheck.config import PairConfig
from admitcheck.errors import ConfigError


@dataclass(frozen=True)
class PairTokens:
    """The pair's tokenizer facts the engines need."""

    tokenizer: Any
    eos_token_id: int
    pad_token_id: int
    vocab_size: int


def load_pair_tokenizer(pair: PairConfig, *, file: str | None = None, check_teacher: bool = True) -> PairTokens:
    """The student's tokenizer; a ConfigError when the teacher's tokenizer is not the same vocabulary."""
    tok_dir = pair.tokenizer or pair.student
    field_name = "pair.tokenizer" if pair.tokenizer else "pair.student"
    tok = io.load_tokenizer(tok_dir, file=file, field=field_name)
    if check_teacher:
        teacher_tok = io.load_tokenizer(pair.teacher, file=file, field="pair.teacher")
        if teacher_tok.get_vocab() != tok.get_vocab():
            raise ConfigError(
                f"student and teacher tokenizers differ ({len(tok)} vs {len(teacher_tok)} tokens or different ids); "
                "OPD needs one shared vocabulary",
                file=file,
                field="pair.teacher",
            )
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return PairTokens(tok, int(tok.eos_token_id), int(pad), len(tok))


def check_devices(config, *, file: str | None = None) -> None:
    """A CUDA device asked for on a machine without one is a config error, named by its field."""
    fields = [("reference.device", config.reference.device)]
    rollout = getattr(config, "rollout", None)
    if rollout is not None and rollout.engine == "hf":
        fields.append(("rollout.device", rollout.device))
    for name, device in fields:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asked for, but no CUDA GPU is available here", file=file, field=name)
        if not (device == "cpu" or device.startswith("cuda") or device == "mps"):
            raise ConfigError(f"unknown device {device!r} (use cpu, cuda or cuda:N)", file=file, field=name)


def tokenize_prompts(tokens: PairTokens, prompts: list[dict], *, file: str | None = None) -> list[list[int]]:
    out = []
    for i, row in enumerate(prompts):
        ids = tokens.tokenizer(row["prompt"])["input_ids"]
        if not ids:
            raise ConfigError(f"prompt {i} tokenizes to nothing", file=file, field="probe.prompts")
        out.append(list(ids))
    return out


def check_pair(pair: PairConfig, *, file: str | None = None) -> PairTokens:
    """Validate a pair without loading weights: both dirs are causal LMs with weights, tokenizers agree."""
    io.check_causal_lm(pair.student, file=file, field="pair.student")
    io.check_causal_lm(pair.teacher, file=file, field="pair.teacher")
    return load_pair_tokenizer(pair, file=file)


class LoadedPair:
    """The pair of one command (a screen: its compatibility check, reference, stale candidates and diagnostics),
    each part read once on first use and then shared: the tokenizer facts (the teacher's vocabulary checked) and the
    student and teacher per (dtype, device). No consumer changes a model's weights in place (engines and the
    trainer work on copies), so sharing gives the numbers separate loads gave."""

    def __init__(self, pair: PairConfig, *, file: str | None = None) -> None:
        self.config, self.file = pair, file
        self._tokens: PairTokens | None = None
        self._models: dict[tuple[str, str, str], torch.nn.Module] = {}

    @property
    def tokens(self) -> PairTokens:
        if self._tokens is None:
            self._tokens = load_pair_tokenizer(self.config, file=self.file)
        return self._tokens

    def with_student(self, student: str) -> LoadedPair:
        """The same pair with `student` (a checkpoint of it: `screen`'s `checkpoint`) as its student dir: the
        tokenizer kept (the pair's, read once and shared), the teacher loaded again on use."""
        moved = self.config.model_copy(
            update={"student": student, "tokenizer": self.config.tokenizer or self.config.student}
        )
        out = LoadedPair(moved, file=self.file)
        out._tokens = self._tokens
        return out

    def student(self, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
        """The student in `dtype` on `device` (`io.load_causal_lm`: eval mode), loaded once per (dtype, device)."""
        return self._model("student", dtype, device)

    def teacher(self, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
        """The teacher in `dtype` on `device`, loaded once per (dtype, device)."""
        return self._model("teacher", dtype, device)

    def release(self, role: str, dtype: str, device: str) -> None:
        """Forget a loaded model (its memory goes once no one else holds it); a later use loads it again."""
        self._models.pop((role, dtype, device), None)

    def _model(self, role: str, dtype: str, device: str) -> torch.nn.Module:
        if (role, dtype, device) not in self._models:
            path = self.config.student if role == "student" else self.config.teacher
            model = io.load_causal_lm(path, dtype, device, file=self.file, field=f"pair.{role}")
            self._models[role, dtype, device] = model
        return self._models[role, dtype, device]
