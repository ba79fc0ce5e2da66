"""`levels.decide_from`: the candidates a calibration's rounds should decide, named by screens (issue 38).

Each entry of a calibrate config's `levels.decide_from` is either

- a screen's JSON output (`admitcheck screen CONFIG --json > screen.json`, a `.json` file): its verdicts' upper bounds
  (`mismatch_interval`'s upper end) are read, or
- a screen config (`.yaml`/`.yml`): `admitcheck calibrate` screens it once, before its first run, against the
  calibration that config names (an existing one: a first calibration of the pair, or this one's last artifact),
  and keeps the report beside the calibration's output as `<stem>.decide.<sha>.screen.json` (sha: the screen
  config's text). Every resume reads that kept report, so the rounds decide the same bounds however often the
  command is resumed; delete it to screen again (the config's text changed: a new sha, a new screen).

The bounds join `levels.decide` (order kept, repeats dropped, a bound of 0 dropped: a null candidate decides
nothing); `calibration.calibrate` takes the merged config (`screened_decide`) and refuses an unmerged one. Refused
with a ConfigError naming levels.decide_from.N before anything is screened, run or written: a file that is neither
a screen's output nor a screen config, a screen config that does not validate (`checks.validate`: its inputs and
calibration, no model loaded), and a screen (config or output) of another pair or another metric than this
calibration's. `plan_decide` is what `validate` shows: each source, its bounds where known (a screen config not yet
screened has none).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from admitcheck.admission.screen_report import screened_report, screened_upper_bounds
from admitcheck.calibration.calibrate import calibration_name, output_path
from admitcheck.config import CalibrateConfig, ScreenConfig
from admitcheck.errors import AdmitcheckError, ConfigError

# (screen config, its file) -> the screen's `--json` document (`report.to_json`): the command passes one
Screener = Callable[[ScreenConfig, str], str]


@dataclass(frozen=True)
class DecideSource:
    """One entry of `levels.decide_from`: where its bounds come from and, once known, the bounds."""

    field: str  # levels.decide_from.N
    path: str  # the entry (a screen's JSON output or a screen config)
    kind: str  # "report" | "config"
    kept: str | None  # a screen config's kept report (`<stem>.decide.<sha>.screen.json`); None for a report
    candidates: tuple[str, ...]  # the screen's candidates (a report's verdicts, a config's candidates)
    bounds: tuple[float, ...] | None  # None: a screen config not screened yet


def kept_report_path(config: CalibrateConfig, config_file: str | None, screen_config: str) -> Path:
    """Where a screen config's report is kept: beside the calibration's output, named by the config text's sha."""
    from admitcheck import io

    sha = hashlib.sha256(io.read_text(screen_config).encode()).hexdigest()[:12]
    out = output_path(config, config_file)
    return out.with_name(f"{out.stem}.decide.{sha}.screen.json")


def _checked_screen_config(config: CalibrateConfig, path: str, file: str, field: str) -> ScreenConfig:
    """The screen config at `path`, validated (no model loads) and of this calibration's pair and metric."""
    from admitcheck import io
    from admitcheck.admission.checks import validate
    from admitcheck.calibration.artifact import load_calibration

    try:
        screen_cfg = io.load_config(path, ScreenConfig)
        validate(screen_cfg, config_file=path)  # its inputs, engines and calibration (compatible with its pair)
        calibration = load_calibration(screen_cfg.calibration)
    except AdmitcheckError as exc:
        inner = f"{exc.field}: " if exc.field else ""
        raise ConfigError(f"{field}: the screen config {path} does not validate ({inner}{exc})", file=file,
                          field=field) from None  # fmt: skip
    pair = calibration_name(config)
    if calibration.name != pair:
        raise ConfigError(
            f"{path} screens against a calibration of pair {calibration.name!r}, this one is {pair!r}",
            file=file,
            field=field,
        )
    if calibration.metric != config.metric:
        raise ConfigError(
            f"{path} screens on {calibration.metric}, this calibration's metric is {config.metric}",
            file=file,
            field=field,
        )
    return screen_cfg


def _source(
    config: CalibrateConfig, config_file: str | None, i: int, path: str
) -> tuple[DecideSource, ScreenConfig | None]:
    field = f"levels.decide_from.{i}"
    file = config_file if config_file is not None else path
    suffix = Path(path).suffix.lower()
    pair, metric = calibration_name(config), config.metric
    if suffix == ".json":
        report, bounds = screened_report(path, metric, pair, config_file=config_file, field=field)
        return DecideSource(field, path, "report", None, tuple(v.name for v in report.verdicts), tuple(bounds)), None
    if suffix not in (".yaml", ".yml"):
        raise ConfigError(
            f"{path} is neither a screen's JSON output (.json) nor a screen config (.yaml, .yml)",
            file=file,
            field=field,
        )
    if not Path(path).is_file():
        raise ConfigError(f"no screen config at {path}", file=file, field=field)
    screen_cfg = _checked_screen_config(config, path, file, field)
    kept = kept_report_path(config, config_file, path)
    bounds = None
    if kept.is_file():
        bounds = tuple(screened_upper_bounds(kept, metric, pair, config_file=config_file, field=field))
    names = tuple(c.name for c in screen_cfg.candidates)
    return DecideSource(field, path, "config", str(kept), names, bounds), screen_cfg


def plan_decide(config: CalibrateConfig, config_file: str | None = None) -> list[DecideSource]:
    """Each `levels.decide_from` entry checked (see the module docstring), nothing screened: what `validate` shows."""
    return [_source(config, config_file, i, p)[0] for i, p in enumerate(config.levels.decide_from)]


def decide_bounds(config: CalibrateConfig, sources: list[DecideSource]) -> list[float]:
    """`levels.decide` followed by the sources' known bounds, order kept, repeats dropped."""
    return list(dict.fromkeys([*config.levels.decide, *(b for s in sources for b in s.bounds or ())]))


def screened_decide(
    config: CalibrateConfig, config_file: str | None = None, *, screener: Screener | None = None
) -> CalibrateConfig:
    """A calibrate config with `levels.decide` extended by the upper bounds of `levels.decide_from`'s screens and
    `decide_from` emptied: what `calibration.calibrate` takes (`admitcheck calibrate` calls it). A screen config not
    yet screened is screened by `screener` (`admitcheck calibrate` passes `screen.screen` and `report.to_json`)
    and its report kept (module docstring); every entry is checked before the first screen runs. Without a
    screener nothing is screened: a screen config without a kept report is then a ConfigError."""
    if not config.levels.decide_from:
        return config
    checked = [_source(config, config_file, i, p) for i, p in enumerate(config.levels.decide_from)]
    sources = []
    for src, screen_cfg in checked:
        if src.bounds is None:
            if screener is None:
                raise ConfigError(
                    f"{src.path} is a screen config not screened yet (no {src.kept}); `admitcheck calibrate` "
                    "screens it once (from Python: pass a screener)",
                    file=config_file,
                    field=src.field,
                )
            from admitcheck import io

            io.write_text_atomic(src.kept, screener(screen_cfg, src.path))
            found = screened_upper_bounds(src.kept, config.metric, calibration_name(config), config_file=config_file,
                                          field=src.field)  # fmt: skip
            src = DecideSource(src.field, src.path, src.kind, src.kept, src.candidates, tuple(found))
        sources.append(src)
    data = config.levels.model_dump() | {"decide": decide_bounds(config, sources), "decide_from": []}
    return config.model_copy(update={"levels": type(config.levels).model_validate(data)})  # validated again
