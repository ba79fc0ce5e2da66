"""Config schemas: every shipped YAML parses; typos, wrong types and bad values name the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
import yaml

from admitcheck import io
from admitcheck.config import (
    BacktestConfig,
    CalibrateConfig,
    MeasureConfig,
    PlanConfig,
    RolloutConfig,
    ScreenConfig,
    WeightsRecipe,
    config_kind,
)
from admitcheck.config import schema_for as config_schema_for
from admitcheck.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = {"measure": MeasureConfig, "calibrate": CalibrateConfig, "screen": ScreenConfig}


def schema_for(path: Path):
    """The schema `validate` uses for a config: its `kind:`, else the kind its keys show."""
    return config_schema_for(config_kind(io.read_yaml(path))[0])


def shipped_configs() -> list[Path]:
    return sorted((ROOT / "examples").rglob("*.yaml"))  # recursive: a config in a subfolder is covered too


def test_examples_exist():
    assert len(shipped_configs()) >= 2


@pytest.mark.parametrize("path", shipped_configs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_parses(path: Path):
    cfg = io.load_config(path, schema_for(path))
    if isinstance(cfg, BacktestConfig):  # no pair of its own: the calibrate and screen configs it names have them
        assert Path(cfg.calibrate_config).is_absolute() and Path(cfg.calibrate_config).is_file()
        assert Path(cfg.screen_config).is_absolute() and Path(cfg.screen_config).is_file()
        return
    if isinstance(cfg, PlanConfig):  # no pair either: the calibration and ledgers it reads have it
        assert Path(cfg.calibration).is_absolute() and all(Path(p).is_absolute() for p in cfg.ledgers)
        return
    assert cfg.pair.student  # paths resolved against the file's directory
    assert Path(cfg.probe.prompts).is_absolute()


def _asks_vllm_cpu_for_an_fp8_cache_it_cannot_run(cfg) -> bool:
    """A screen config with a vLLM candidate on an FP8 KV cache, on a machine whose vLLM runs on a CPU without
    AVX-512 or AMX (vLLM-CPU cannot run the cache there; `validate` refuses it, exit 2)."""
    import importlib.util

    rollouts = [c.rollout for c in getattr(cfg, "candidates", None) or [] if getattr(c, "rollout", None)]
    vllm_rollouts = [r for r in rollouts if r.engine == "vllm"]
    if not vllm_rollouts or importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    from admitcheck.errors import ConfigError
    from admitcheck.rollout.engines.vllm import check_cpu_kv_cache

    try:
        for r in vllm_rollouts:
            check_cpu_kv_cache(r, bool(current_platform.is_cpu()))
    except ConfigError:
        return True
    return False


@pytest.mark.parametrize("path", shipped_configs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_validate_accepts_every_shipped_config_and_names_its_kind(path: Path):
    """The whole `validate` (files, layers, calibration) for every example whose files exist on this machine (the toy
    pair's; the Qwen3 and SmolLM2 pairs and the logs example need files a user builds first)."""
    from typer.testing import CliRunner

    from admitcheck.cli import app

    cfg = io.load_config(path, schema_for(path))
    if isinstance(cfg, BacktestConfig):  # its pair is its calibrate config's
        cfg = io.load_config(cfg.calibrate_config, CalibrateConfig)
    if isinstance(cfg, PlanConfig):  # reads no model: the calibration, its ledgers and JSON files
        files = [Path(cfg.calibration), *map(Path, cfg.ledgers)] + [
            Path(p) for p in (cfg.bench, cfg.screen_result) if p
        ]
    else:
        files = [Path(cfg.pair.student), Path(cfg.pair.teacher)] + (
            [Path(cfg.logs.path)] if getattr(cfg, "logs", None) else []
        )
    if not all(f.exists() for f in files):
        # what a fresh clone cannot validate must say which command builds (or fetches) what it needs
        header = [line for line in path.read_text().splitlines() if line.startswith("#")]
        needs = [line for line in header if line.startswith("# Needs:")]
        assert needs and any(w in needs[0] for w in ("admitcheck ", "huggingface-cli ")), (path, header)
        pytest.skip(f"needs files built first ({needs[0]}): {[str(f) for f in files if not f.exists()]}")
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    if _asks_vllm_cpu_for_an_fp8_cache_it_cannot_run(cfg):  # an AVX2-only CPU: refused by name (docs/vllm.md)
        assert result.exit_code == 2 and "kv_cache.dtype" in result.output and "AVX-512 or AMX" in result.output
        return
    assert result.exit_code == 0, result.output
    import json

    info = json.loads(result.stdout)
    assert info["kind"] == config_kind(io.read_yaml(path))[0] and info["kind_from"]


def test_config_kind_is_named_or_detected():
    assert config_kind({"kind": "sensitivity", "pair": {}}) == ("sensitivity", "named by kind:")
    assert config_kind({"candidates": []})[0] == "screen"
    assert config_kind({"calibrate_config": "c.yaml", "candidates": []})[0] == "backtest"
    assert config_kind({"train": {}})[0] == "calibrate"
    assert config_kind({"calibration": "c.yaml", "rollout": {}})[0] == "recipe"
    assert config_kind({"units": ["kv"]})[0] == "sensitivity"
    assert config_kind({"rollout": {}})[0] == "measure"
    assert config_kind({"calibration": "c.yaml", "candidates": []})[0] == "plan"  # no probe: not a screen
    with pytest.raises(ValueError):
        config_schema_for("nonsense")


def test_validate_refuses_an_unknown_kind(tmp_path):
    from typer.testing import CliRunner

    from admitcheck.cli import app
    from tests.test_cli import assert_user_error

    p = write(tmp_path, "kind: nonsense\n" + GOOD)
    assert_user_error(CliRunner().invoke(app, ["validate", str(p)]), "kind", "nonsense")
    p = write(tmp_path, GOOD)
    assert_user_error(CliRunner().invoke(app, ["validate", str(p), "--kind", "typo"]), "--kind", "typo")


def kv(fields: str) -> str:
    """GOOD with `rollout.kv_cache: {fields}`."""
    return GOOD.replace("dtype: bfloat16}", f"dtype: bfloat16, kv_cache: {{{fields}}}}}")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


GOOD = """
pair: {student: s, teacher: t}
probe: {prompts: p.jsonl, num_prompts: 4, max_new_tokens: 8}
rollout: {engine: hf, dtype: bfloat16}
"""


def test_good_config_resolves_paths(tmp_path):
    cfg = io.load_config(write(tmp_path, GOOD), MeasureConfig)
    assert cfg.probe.prompts == str((tmp_path / "p.jsonl").resolve())
    assert cfg.pair.student == "s"  # not a path that exists: kept as given (could be a cached hub id)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (GOOD.replace("max_new_tokens: 8", "max_new_tokens: 0"), "probe.max_new_tokens", "greater than 0"),
        (GOOD.replace("max_new_tokens: 8", "max_new_token: 8"), "probe.max_new_token", "unknown key"),
        (GOOD.replace("num_prompts: 4", "num_prompts: many"), "probe.num_prompts", "integer"),
        (GOOD.replace("engine: hf", "engine: sglang"), "rollout.engine", "'hf' or 'vllm'"),
        (GOOD.replace("pair: {student: s, teacher: t}", "pair: {student: s}"), "pair.teacher", "missing"),
        (GOOD + "rollout2: {}\n", "rollout2", "unknown key"),
        (GOOD + "sampling: {top_p: 1.5}\n", "sampling.top_p", "less than or equal to 1"),
        (
            kv("dtype: fp8_e4m3, attention_backend: flash_infer"),
            "rollout.kv_cache.attention_backend",
            "'flash_attn', 'triton_attn', 'flashinfer', 'cpu' or 'fresh_prefill'",
        ),
        (kv("dtype: fp8_e5m2"), "rollout.kv_cache", "attention_backend flash_attn reads fp8_e4m3 caches only"),
        (kv("scales: calibrated"), "rollout.kv_cache", "scales need an fp8 dtype"),
        (kv("dtype: fp8_e4m3, scales: per_head"), "rollout.kv_cache.scales", "'one' or 'calibrated'"),
        (kv("dtype: fp8_e4m3, percentile: 99"), "rollout.kv_cache", "apply to scales: calibrated only"),
        (
            kv("dtype: fp8_e4m3, scales: calibrated, percentile: 120"),
            "rollout.kv_cache.percentile",
            "less than or equal to 100",
        ),
        (
            kv("dtype: fp8_e4m3, scales: calibrated, margin: 0.9"),
            "rollout.kv_cache.margin",
            "greater than or equal to 1",
        ),
    ],
)
def test_bad_values_name_the_field(tmp_path, text, field, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        io.load_config(path, MeasureConfig)
    assert info.value.file == str(path)
    assert info.value.field == field
    assert words in info.value.message


def test_malformed_yaml_gives_line(tmp_path):
    path = write(tmp_path, "pair: {student: s\nprobe: [\n")
    with pytest.raises(ConfigError, match="malformed YAML: line"):
        io.load_config(path, MeasureConfig)


def test_missing_file():
    with pytest.raises(ConfigError, match="file not found"):
        io.load_config("/nonexistent/admitcheck.yaml", MeasureConfig)


def test_top_level_must_be_mapping(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        io.load_config(write(tmp_path, "- a\n- b\n"), MeasureConfig)


def test_cross_field_rules():
    with pytest.raises(ValueError, match="int8"):
        WeightsRecipe(format="int8", granularity="block")
    assert not RolloutConfig().is_perturbed
    assert RolloutConfig(noise={"relative_std": 0.1}).is_perturbed


def test_prompts_file_errors(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "1 2 ="}\n{"prompt": oops}\n')
    with pytest.raises(ConfigError, match="line 2: not valid JSON") as info:
        io.read_prompts(p)
    assert info.value.field == "probe.prompts"
    p.write_text('{"answer": "3"}\n')
    with pytest.raises(ConfigError, match='line 1: expected an object with a non-empty string "prompt"'):
        io.read_prompts(p)
    p.write_text("\n")
    with pytest.raises(ConfigError, match="no prompts"):
        io.read_prompts(p)
    with pytest.raises(ConfigError, match="not found"):
        io.read_prompts(tmp_path / "missing.jsonl")


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "a.yaml"
    io.write_text_atomic(target, "old\n")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        io.write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.yaml"]  # no temp file left behind


def test_unknown_keys_come_first_at_every_level(tmp_path):
    """A misspelt key is named (with its closest spelling) before any "missing" complaint, at the top level too."""
    from admitcheck.config import ScreenConfig
    from admitcheck.errors import ConfigError

    data = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    data["candidats"] = data.pop("candidates")  # required `candidates` now missing as well
    p = tmp_path / "typo.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        io.load_config(p, ScreenConfig)
    assert exc.value.field == "candidats" and "did you mean 'candidates'" in exc.value.message
    assert config_kind(data) == ("screen", "detected from its keys")  # not taken for a measure config
    data["candidates"] = data.pop("candidats")
    del data["pair"]  # missing, and a nested typo after it in field order: the typo still comes first
    data["probe"]["max_new_token"] = data["probe"].pop("max_new_tokens")
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        io.load_config(p, ScreenConfig)
    assert exc.value.field == "probe.max_new_token" and "max_new_tokens" in exc.value.message
    data["candidates"][0]["rollout"]["kv_cach"] = {}  # inside a list item
    data["probe"]["max_new_tokens"] = data["probe"].pop("max_new_token")
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        io.load_config(p, ScreenConfig)
    assert exc.value.field == "candidates.0.rollout.kv_cach"


def test_kind_detection_takes_the_best_fit():
    assert config_kind({"pair": {}, "probe": {}, "rollout": {}})[0] == "measure"
    assert config_kind({"pair": {}, "calibration": "c", "probe": {}, "candidats": []})[0] == "screen"
    assert config_kind({"pair": {}, "probe": {}, "trian": {}, "eval": {}})[0] == "calibrate"


def test_a_systematic_level_needs_a_noise_size():
    """`systematic: true` keeps one weight-noise draw for the run: meaningless on a rollout or staleness level."""
    from admitcheck.config import LevelConfig

    assert LevelConfig(name="sys", relative_std=0.02, systematic=True).systematic
    with pytest.raises(ValueError, match="systematic: true needs relative_std"):
        LevelConfig(name="sys", staleness=2, systematic=True)


def test_a_staleness_level_must_stay_below_the_runs_steps():
    """#39: a staleness level at or beyond train.steps has no weights that old in the run."""
    data = yaml.safe_load((ROOT / "examples" / "toy_calibrate_quick.yaml").read_text())  # train.steps: 100
    base = ROOT / "examples"
    ok = data | {"levels": data["levels"] | {"extra": [{"name": "s", "staleness": 99}]}}
    assert io.config_from_data(ok, CalibrateConfig, base=base, file="c.yaml").levels.extra[0].staleness == 99
    bad = data | {"levels": data["levels"] | {"extra": [{"name": "s", "staleness": 100}]}}
    with pytest.raises(ConfigError, match=r"levels\.extra\.s\.staleness 100 is at or beyond train\.steps 100"):
        io.config_from_data(bad, CalibrateConfig, base=base, file="c.yaml")


def test_gumbel_training_rollouts_need_the_hf_engine():
    """#36: Gumbel-max coupling lives in the HF engine's decode loop; a vLLM rollout engine would silently ignore it."""
    data = yaml.safe_load((ROOT / "examples" / "toy_calibrate_quick.yaml").read_text())
    base = ROOT / "examples"
    gumbel = data | {"train": data["train"] | {"sampling_coupling": "gumbel"}}
    assert io.config_from_data(gumbel, CalibrateConfig, base=base, file="c.yaml").train.sampling_coupling == "gumbel"
    bad = gumbel | {"rollout": (data.get("rollout") or {}) | {"engine": "vllm"}}
    with pytest.raises(ConfigError, match=r"train\.sampling_coupling gumbel needs rollout\.engine hf"):
        io.config_from_data(bad, CalibrateConfig, base=base, file="c.yaml")


def test_each_family_is_one_table_whose_keys_are_the_literal():
    """A KV backend and a config kind each have one record in one table (STYLE 11): the `Literal` of names is the
    table's keys, each kind's schema names its own kind, and `validate --kind`'s help lists every kind."""
    from typing import get_args

    from typer.testing import CliRunner

    from admitcheck.cli import app
    from admitcheck.config import KINDS, KV_BACKENDS, AttentionBackend, ConfigKind

    assert get_args(AttentionBackend) == tuple(KV_BACKENDS)
    assert all(name == b.name for name, b in KV_BACKENDS.items())
    assert get_args(ConfigKind) == tuple(KINDS)
    for name, schema in KINDS.items():
        assert get_args(schema.model_fields["kind"].annotation) == (Literal[name], type(None)), name
    help_text = " ".join(CliRunner().invoke(app, ["validate", "--help"], env={"COLUMNS": "300"}).output.split())
    assert all(k in help_text for k in KINDS), help_text
