# long module: every file-system touch of the package lives here by design (house rule: only io.py touches files)
"""The file-system edge: configs, prompt sets, models, tokenizers, atomic writes and fingerprints.

    cfg = load_config("examples/toy_measure.yaml", MeasureConfig)   # ConfigError names file and field
    prompts = read_prompts(cfg.probe.prompts)                        # [{"prompt": ..., "answer": ...}, ...]
    write_text_atomic("calibrations/toy.yaml", text)                 # never leaves a half-written file

Every user-causable failure here is a `ConfigError` naming the file and, where there is one, the field.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from admitcheck.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Keys that hold paths anywhere in a config; resolved against the config file's directory.
_PATH_KEYS = {
    "prompts",
    "weights_from",
    "calibration",
    "output",
    "path",
    "model_config_path",
    "calibrate_config",
    "screen_config",
    "checkpoint",
    "ledgers",  # plan configs: ledger files, a screen's JSON, a bench JSON
    "screen_result",
    "decide_from",  # calibrate configs: screens' JSON
    "bench",
}
_MODEL_KEYS = {"student", "teacher", "tokenizer"}  # may also be hub ids already in the local cache


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"malformed YAML: {where}{problem}", file=str(path)) from None


def _resolve_paths(data: Any, base: Path, key: str | None = None) -> Any:
    """Recursively make the path-valued keys absolute (relative to `base`); model ids are kept when not a path."""
    if isinstance(data, dict):
        return {k: _resolve_paths(v, base, k) for k, v in data.items()}
    if isinstance(data, list):
        return [_resolve_paths(v, base, key) for v in data]
    relative = isinstance(data, str) and data and not os.path.isabs(data)
    if relative and (key in _PATH_KEYS or (key in _MODEL_KEYS and (base / data).exists())):
        return str((base / data).resolve())
    if key in _MODEL_KEYS and isinstance(data, str) and is_hub_id(data):
        cached = cached_hub_snapshot(data)  # a cache hit becomes its snapshot dir; a miss stays an id until loaded
        return str(cached) if cached is not None else data
    return data


# ----------------------------------------------------------------------------------------------- hub ids

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?$")


def is_hub_id(ref: str) -> bool:
    """ "org/name" or "org/name@revision", the way the Hugging Face hub names models (not an existing path)."""
    return bool(_HUB_ID.match(ref)) and not Path(ref).exists() and ".." not in ref


def hf_cache_dir() -> Path:
    """The hub cache, read at call time: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def cached_hub_snapshot(ref: str) -> Path | None:
    """The local snapshot dir of hub id `ref` in the HF cache (no network), or None when it is not there."""
    repo, _, revision = ref.partition("@")
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo, revision=revision or None, cache_dir=hf_cache_dir(), local_files_only=True)
    except Exception:  # not cached (LocalEntryNotFoundError), or an unreadable cache entry
        return None
    return Path(path)


def resolve_model_ref(ref: str | Path, *, file: str | None = None, field: str = "pair.student") -> Path:
    """A model reference as a local dir: a path as given; a hub id through the local HF cache first, downloaded
    only when HF_HUB_OFFLINE is not set (config, tokenizer and weights files only); a ConfigError otherwise."""
    text = str(ref)
    if not is_hub_id(text):
        return Path(ref)
    cached = cached_hub_snapshot(text)
    if cached is not None:
        return cached
    if hub_offline():
        raise ConfigError(
            f"{text!r} is not a local dir and not in the Hugging Face cache ({hf_cache_dir()}); HF_HUB_OFFLINE is "
            "set, so it is not downloaded",
            file=file,
            field=field,
        )
    repo, _, revision = text.partition("@")
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
        path = snapshot_download(repo, revision=revision or None, cache_dir=hf_cache_dir(), allow_patterns=patterns)
    except Exception as exc:  # no network, no such repo, gated model
        raise ConfigError(
            f"{text!r} is not a local dir, not in the Hugging Face cache ({hf_cache_dir()}) and could not be "
            f"downloaded ({type(exc).__name__})",
            file=file,
            field=field,
        ) from None
    return Path(path)


def validation_error(exc: ValidationError, file: str) -> ConfigError:
    """The first pydantic error as one ConfigError naming the dotted field path."""
    errors = exc.errors()
    return schema_error(errors[0], file, more=len(errors) - 1)


def schema_error(err: Any, file: str, *, more: int = 0) -> ConfigError:
    """One pydantic error (an item of `ValidationError.errors()`) as a ConfigError naming the dotted field path;
    `more` > 0 adds "(and N more errors)"."""
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling; see the config reference in README.md)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return ConfigError(msg, file=file, field=loc)


def load_config(path: str | Path, model: type[M], overrides: dict | None = None) -> M:
    """Parse and validate a YAML config; relative paths become absolute against the file's directory."""
    path = Path(path)
    data = read_yaml(path)
    if overrides:
        data = {**data, **overrides} if isinstance(data, dict) else data
    return config_from_data(data, model, base=path.resolve().parent, file=str(path))


def config_from_data(data: Any, model: type[M], *, base: Path, file: str) -> M:
    """Validate an already-parsed config mapping (paths relative to `base`); errors name `file` and the field."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of sections at the top level", file=file)
    try:
        return model.model_validate(_resolve_paths(data, base))
    except ValidationError as exc:
        raise validation_error(exc, file) from None


def config_errors(data: Any, model: type[M], *, base: Path, file: str) -> tuple[M | None, list[ConfigError]]:
    """`config_from_data` that returns every schema error, each naming its field (the config is None when there
    is one), instead of raising the first."""
    if not isinstance(data, dict):
        return None, [ConfigError("expected a mapping of sections at the top level", file=file)]
    try:
        return model.model_validate(_resolve_paths(data, base)), []
    except ValidationError as exc:
        return None, [schema_error(err, file) for err in exc.errors()]


def read_prompts(path: str | Path, limit: int | None = None, *, field: str = "probe.prompts") -> list[dict]:
    """A JSONL prompt set: one object per line with a string "prompt" (and optional "answer")."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("prompts file not found", file=str(path), field=field)
    rows: list[dict] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"line {lineno}: not valid JSON ({exc.msg})", file=str(path), field=field) from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"]:
                raise ConfigError(
                    f'line {lineno}: expected an object with a non-empty string "prompt"', file=str(path), field=field
                )
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise ConfigError("prompts file holds no prompts", file=str(path), field=field)
    return rows


def relative_path(path: str | Path, base: Path) -> str:
    """`path` relative to the directory `base` (both resolved): how artifacts store the files they were made from."""
    return os.path.relpath(Path(path).resolve(), base.resolve())


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write via a temp file in the same dir and os.replace, so readers never see a partial file (UTF-8)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """`write_text_atomic` for bytes: temp file in the same dir, fsync, os.replace; the temp file goes on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one JSON line and fsync (a ledger entry survives a crash right after this returns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_json(path: str | Path) -> Any:
    """A JSON file; a ConfigError naming it when it is missing or malformed."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read JSON: {exc}", file=str(path)) from None


def read_text(path: str | Path) -> str:
    """A text file (UTF-8); a ConfigError naming it when it is missing or unreadable."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None


def read_json_as_is(path: str | Path) -> Any:
    """A JSON file, its errors raised as they come (OSError, ValueError) for a caller that names the field."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def append_text(path: str | Path, text: str) -> None:
    """Append to a file another process also appends to (GitHub's $GITHUB_STEP_SUMMARY collects every step's)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"line {lineno}: not valid JSON ({exc.msg})", file=str(path)) from None
    return out


# ---------------------------------------------------------------------------------------- built-in pair dirs


def pair_dir_paths(d: Path) -> dict[str, str]:
    """The files of a built-in pair dir (toy, smollm2): model dirs and prompt sets, as summary fields."""
    p = d / "prompts"
    return {
        "directory": str(d),
        "teacher_dir": str(d / "teacher"),
        "student_dir": str(d / "student"),
        "train_prompts": str(p / "train.jsonl"),
        "probe_prompts": str(p / "probe.jsonl"),
        "eval_prompts": str(p / "eval.jsonl"),
    }


class PairCacheMeta(BaseModel):
    """A built-in pair's cache stamp (`<dir>/<meta_name>`, written by its builder): the recipe hash it was built for
    and its build summary's fields; the rest of what a builder writes there is kept, not read."""

    model_config = ConfigDict(extra="allow", frozen=True)

    recipe_hash: str | None = None
    summary: dict[str, Any] = {}


def read_pair_cache(d: Path, meta_name: str, key: str, summary: Callable[..., T]) -> T | None:
    """The cached build summary of a built-in pair in `d` as `summary(**fields)` (with the paths of `d`, so a moved
    dir still hits), or None when `meta_name` is missing or unreadable, was made for another recipe hash `key`, a
    needed file is gone, or its fields are another version's (`summary` refuses them with a TypeError)."""
    try:
        meta = PairCacheMeta.model_validate_json((d / meta_name).read_text())
    except (OSError, ValueError):  # a pydantic ValidationError is a ValueError
        return None
    paths = pair_dir_paths(d)
    needed = [Path(paths[k]) for k in ("train_prompts", "probe_prompts", "eval_prompts")]
    for m in ("teacher_dir", "student_dir"):
        needed += [Path(paths[m]) / f for f in ("config.json", "model.safetensors", "tokenizer.json")]
    if meta.recipe_hash != key or not all(p.is_file() for p in needed):
        return None
    try:
        return summary(**{**meta.summary, **paths})
    except TypeError:  # a summary written by another version of the builder
        return None


# ----------------------------------------------------------------------------------------------- fingerprints


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- models


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json dict, the one rule every reader of config.json uses: for a
    multimodal wrapper (Qwen-VL, Gemma 3, Llava, …: a `text_config` dict and no `hidden_size` of its own) its
    `text_config`, the wrapper's keys filling what it lacks (a `tie_word_embeddings` kept at the top, …); else the
    config itself."""
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) and "hidden_size" not in cfg else cfg


def model_layout(path: str | Path, *, file: str | None = None, field: str = "pair.student") -> tuple[int, list[str]]:
    """(decoder layers, module names) of an HF model dir, from config.json and the safetensors headers: no torch,
    no weights read. Module names are the tensor names without their last part ("model.layers.0.mlp.up_proj");
    a tied lm_head is listed too. (0, []) parts when the dir does not say (no num_hidden_layers, no safetensors)."""
    path = Path(path)
    try:
        cfg = read_json(path / "config.json")
    except ConfigError:
        raise ConfigError(f"not a model dir (no readable config.json): {path}", file=file, field=field) from None
    text = text_config(cfg)
    layers = int(text.get("num_hidden_layers") or 0)
    names: set[str] = set()
    for f in sorted(path.glob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"unreadable safetensors header: {exc}", file=str(f), field=field) from None
        names |= {k.rpartition(".")[0] for k in header if k != "__metadata__"}
    if names and text.get("tie_word_embeddings"):
        names.add("lm_head")
    return layers, sorted(names)


def load_tokenizer(path: str | Path, *, file: str | None = None, field: str = "pair.tokenizer"):
    """AutoTokenizer from a local dir (offline); a ConfigError when it is not one."""
    from transformers import AutoTokenizer

    path = resolve_model_ref(path, file=file, field=field)
    if not path.is_dir():
        raise ConfigError(f"tokenizer dir not found: {path}", file=file, field=field)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a dir that is not a tokenizer
        raise ConfigError(f"not a tokenizer dir: {path} ({type(exc).__name__})", file=file, field=field) from None
    if tok.eos_token_id is None:
        raise ConfigError(f"tokenizer in {path} defines no eos_token", file=file, field=field)
    return tok


def load_causal_lm(
    path: str | Path,
    dtype: str = "float32",
    device: str = "cpu",
    *,
    file: str | None = None,
    field: str = "pair.student",
):
    """AutoModelForCausalLM from a local dir in `dtype` on `device`, in eval mode; a ConfigError when it is not one."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_ref(path, file=file, field=field)
    check_causal_lm(path, file=file, field=field)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bars in admitcheck's own output
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), local_files_only=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"cannot load model from {path}: {exc}".split("\n")[0], file=file, field=field) from None
    try:
        return model.to(device).eval()
    except (RuntimeError, AssertionError) as exc:  # e.g. "cuda" on a machine without CUDA
        raise ConfigError(
            f"cannot move the model to device {device!r}: {exc}".split("\n")[0], file=file, field=field
        ) from None


def check_causal_lm(path: str | Path, *, file: str | None = None, field: str = "pair.teacher") -> dict:
    """Check, without loading weights, that `path` is a causal-LM dir; returns its config.json as a dict."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    path = resolve_model_ref(path, file=file, field=field)
    if not (path / "config.json").is_file():
        raise ConfigError(f"not a model dir (no config.json): {path}", file=file, field=field)
    try:
        cfg = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise ConfigError(f"unreadable config.json in {path} ({exc})".split("\n")[0], file=file, field=field) from None
    archs = getattr(cfg, "architectures", None) or []
    # `architectures` names the head the weights were saved with (BertModel is an encoder even though a BERT
    # LM-head class exists); without it, fall back to whether the model type has a causal-LM class at all.
    causal = (
        any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs)
        if archs
        else cfg.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    )
    if not causal:
        raise ConfigError(f"not a causal LM (model_type {cfg.model_type!r}): {path}", file=file, field=field)
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ConfigError(f"model dir has no weights (*.safetensors): {path}", file=file, field=field)
    return cfg.to_dict()
