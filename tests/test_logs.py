"""Logged log-probs: the JSONL/Parquet format, its round trip, and one clear ConfigError per kind of bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from admitcheck.errors import ConfigError
from admitcheck.logs import read_logs, write_logs
from admitcheck.metrics import mismatch_metrics


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _random_logs(seed=0, B=12, T=9):
    rng = np.random.default_rng(seed)
    mu = -rng.exponential(1.0, (B, T))  # (B, T) log μ
    pi = np.minimum(mu + rng.normal(0, 0.05, (B, T)), 0.0)  # (B, T) log π
    lengths = rng.integers(1, T + 1, B)
    mask = np.arange(T)[None, :] < lengths[:, None]  # (B, T) ragged
    return mu, pi, mask


def test_round_trip_gives_identical_metrics(tmp_path):
    mu, pi, mask = _random_logs()
    assert write_logs(tmp_path / "l.jsonl", mu, pi, mask) == 12
    logs = read_logs(tmp_path / "l.jsonl")
    assert logs.num_sequences == 12 and logs.num_tokens == int(mask.sum())
    a = mismatch_metrics(mu, pi, mask)
    b = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
    assert a.values == b.values and a.intervals == b.intervals


def test_mask_optional_and_extra_keys_ignored(tmp_path):
    p = _write(
        tmp_path / "l.jsonl",
        [
            {"rollout_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "prompt": "x", "step": 3},
            "",
            {"rollout_logprobs": [-0.2], "trainer_logprobs": [-0.2], "mask": [True]},
            {
                "rollout_logprobs": [-0.2, -9.0],
                "trainer_logprobs": [-0.3, 5.0],
                "mask": [1, 0],
            },  # masked-out: unchecked
        ],
    )
    logs = read_logs(p)
    assert logs.mask.tolist() == [[True, True], [True, False], [True, False]]
    assert logs.trainer_logprobs[2, 1] == 0.0  # values outside the mask read as 0


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"rollout_logprobs": [-1.0, -2.0], "trainer_logprobs": [-1.0]}, ["line 1", "2 values", "has 1"]),
        ({"rollout_logprobs": [-1.0, "x"], "trainer_logprobs": [-1.0, -1.0]}, ["rollout_logprobs[1]", "not a number"]),
        ({"rollout_logprobs": [-1.0, None], "trainer_logprobs": [-1.0, -1.0]}, ["not a number"]),
        ({"rollout_logprobs": [-1.0, True], "trainer_logprobs": [-1.0, -1.0]}, ["not a number"]),
        ({"rollout_logprobs": [-1.0], "trainer_logprobs": [0.5]}, ["trainer_logprobs[0]", "positive log-prob"]),
        ({"rollout_logprobs": [-1.0]}, ["missing 'trainer_logprobs'"]),
        ({"rollout_logprobs": -1.0, "trainer_logprobs": [-1.0]}, ["must be a list"]),
        ({"rollout_logprobs": [-1.0], "trainer_logprobs": [-1.0], "mask": [1, 1]}, ["mask must be a list of 1"]),
        ({"rollout_logprobs": [-1.0], "trainer_logprobs": [-1.0], "mask": [2]}, ["mask values"]),
        ([1, 2], ["expected an object"]),
    ],
)
def test_bad_rows(tmp_path, row, words):
    p = _write(tmp_path / "l.jsonl", [row])
    with pytest.raises(ConfigError) as exc:
        read_logs(p)
    assert exc.value.file == str(p) and exc.value.field == "logs.path"
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_positive_infinity_and_tiny_rounding(tmp_path):
    p = _write(tmp_path / "l.jsonl", ['{"rollout_logprobs": [-1.0], "trainer_logprobs": [Infinity]}'])
    with pytest.raises(ConfigError, match="positive log-prob"):
        read_logs(p)
    p = _write(tmp_path / "ok.jsonl", [{"rollout_logprobs": [5e-5], "trainer_logprobs": [-1e-3]}])
    assert read_logs(p).rollout_logprobs[0, 0] == 5e-5  # float rounding above 0 is tolerated


def test_nan_is_kept_for_the_verdict(tmp_path):
    p = _write(tmp_path / "l.jsonl", ['{"rollout_logprobs": [NaN, -1.0], "trainer_logprobs": [-1.0, -Infinity]}'])
    logs = read_logs(p)
    m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
    assert m.nonfinite == 2 and not m.is_finite
    assert math.isnan(logs.rollout_logprobs[0, 0])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["no sequences"]),
        ("\n\n", ["no sequences"]),
        ('{"rollout_logprobs": [-1\n', ["line 1", "not valid JSON"]),
        ('{"rollout_logprobs": [], "trainer_logprobs": []}\n', ["no masked-in tokens"]),
    ],
)
def test_empty_and_corrupt_files(tmp_path, text, words):
    p = tmp_path / "l.jsonl"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        read_logs(p)
    for w in words:
        assert w in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_logs(tmp_path / "nope.jsonl")


def test_parquet_same_as_jsonl(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    mu, pi, mask = _random_logs(seed=1)
    write_logs(tmp_path / "l.jsonl", mu, pi, mask)
    rows = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text().splitlines()]
    table = pa.table({k: [r[k] for r in rows] for k in ("rollout_logprobs", "trainer_logprobs", "mask")})
    pq.write_table(table, tmp_path / "l.parquet")
    a, b = read_logs(tmp_path / "l.jsonl"), read_logs(tmp_path / "l.parquet")
    assert np.array_equal(a.rollout_logprobs, b.rollout_logprobs) and np.array_equal(a.mask, b.mask)
    pq.write_table(pa.table({"rollout_logprobs": [[-1.0]]}), tmp_path / "bad.parquet")
    with pytest.raises(ConfigError, match="row 0: missing 'trainer_logprobs'"):
        read_logs(tmp_path / "bad.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ConfigError, match="not a readable Parquet file"):
        read_logs(tmp_path / "junk.parquet")
