"""Logged log-probs: the JSONL/Parquet format, its round trip, and one clear ConfigError per kind of bad input."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from admitcheck.errors import ConfigError
from admitcheck.measurement.logs import COLUMNS, fake_truncation_k3, read_logs, write_logs
from admitcheck.measurement.metrics import mismatch_metrics


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


# ------------------------------------------------------------------------------------- pipelines' own formats


def _ragged(seed=0, B=10, T=30, sd=0.05):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, T + 1, B)
    mu = [(-rng.exponential(1.0, n)).tolist() for n in lengths]
    pi = [np.minimum(np.array(m) + rng.normal(0, sd, len(m)), 0.0).tolist() for m in mu]
    return mu, pi


def _expect(logs, mu, pi, masks):
    """The logs read as these per-sequence (rollout, trainer, mask) lists: same metrics as admitcheck's format."""
    T = max(len(m) for m in masks)
    pad = lambda rows: np.array([np.pad(np.asarray(r, dtype=float), (0, T - len(r))) for r in rows])  # noqa: E731
    m = pad(masks) > 0
    a = mismatch_metrics(np.where(m, pad(mu), 0), np.where(m, pad(pi), 0), m).values
    b = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask).values
    assert a == b


def test_prime_rl_token_export(tmp_path):
    """One line per sequence as TokenExporter writes it: prompt tokens under loss_mask false, null for non-finite,
    component weights as lists of null when absent, many other columns."""
    mu, pi = _ragged(1)
    rows, masks = [], []
    for b, (m, p) in enumerate(zip(mu, pi, strict=True)):
        prompt = 4
        loss = [False] * prompt + [True] * len(m)
        rl = [None] * len(loss) if b % 2 else [0.0] * prompt + [1.0] * (len(m) - 1) + [0.0]  # last: a ce token
        row = {
            "schema_version": 1, "step": 3, "rank": 0, "micro_step": 0, "micro_sequence_idx": b,
            "token_ids": list(range(len(loss))), "loss_mask": loss, "advantages": [0.1] * len(loss),
            "inference_logprobs": [0.0] * prompt + m, "trainer_logprobs": [-2.3] * prompt + p,
            "entropy": [1.0] * len(loss), "mismatch_kl": [None] * len(loss), "rl_weights": rl,
            "ce_weights": [None] * len(loss), "ref_kl_weights": [None] * len(loss), "env_name": "math",
        }  # fmt: skip
        rows.append(row)
        masks.append([x and (r is None or r != 0) for x, r in zip(loss, rl, strict=True)])
    p = _write(tmp_path / "rank_0.jsonl", rows)
    logs = read_logs(p)
    assert logs.format == "prime-rl" and logs.warnings == ()
    _expect(logs, [r["inference_logprobs"] for r in rows], [r["trainer_logprobs"] for r in rows], masks)
    # prime-rl writes inf/nan as null: inside the mask it is a non-finite log-prob (counted), outside it is ignored
    rows[0]["trainer_logprobs"][5] = None
    rows[0]["trainer_logprobs"][0] = None
    logs = read_logs(_write(tmp_path / "nan.jsonl", rows))
    assert mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask).nonfinite == 1


def test_prime_rl_loss_channels_count_only_rl_tokens(tmp_path):
    """The current TokenExporter (no rl_weights stream): loss_mask is the union of every loss channel and `losses`
    holds {channel: {"advantage", "mask"}} per token; SFT/CE tokens (and prompt tokens) must not count."""
    mu, pi = _ragged(3)
    rows, masks = [], []
    for b, (m, p) in enumerate(zip(mu, pi, strict=True)):
        prompt, n = 3, len(m)
        ce = n // 2 if b % 2 else 0  # odd rows: the first half of the response is an SFT (CE) target, not RL
        rl_mask = [False] * prompt + [False] * ce + [True] * (n - ce)
        ce_mask = [False] * prompt + [True] * ce + [False] * (n - ce)
        losses = [
            {**({"rl": {"advantage": 0.5, "mask": r}} if not c else {}), **({"ce": {"advantage": 1.0, "mask": c}}
                                                                               if c else {})}
            for r, c in zip(rl_mask, ce_mask, strict=True)
        ]  # fmt: skip
        loss = [a or c for a, c in zip(rl_mask, ce_mask, strict=True)]
        rows.append({
            "schema_version": 1, "step": 7, "export_step": 7, "rank": 0, "micro_step": 0, "micro_sequence_idx": b,
            "token_ids": list(range(prompt + n)), "position_ids": list(range(prompt + n)), "loss_mask": loss,
            "advantages": [0.5] * (prompt + n), "losses": losses, "rewards": [None] * (prompt + n),
            "inference_logprobs": [0.0] * prompt + m, "trainer_logprobs": [-1.0] * prompt + p,
            "entropy": [1.0] * (prompt + n), "mismatch_kl": [None] * (prompt + n),
        })  # fmt: skip
        masks.append(rl_mask)
    logs = read_logs(_write(tmp_path / "rank_0.jsonl", rows))
    assert logs.format == "prime-rl" and logs.steps == (7,)
    _expect(logs, [r["inference_logprobs"] for r in rows], [r["trainer_logprobs"] for r in rows], masks)
    assert logs.num_tokens == sum(map(sum, masks)) < sum(sum(r["loss_mask"]) for r in rows)  # the CE tokens are out
    rows[0]["losses"] = rows[0]["losses"][:-1]
    with pytest.raises(ConfigError, match="losses has"):
        read_logs(_write(tmp_path / "bad.jsonl", rows))


def test_logged_quantity_against_the_budget_protocol(tmp_path):
    from admitcheck.measurement.logs import StoredProtocol, logged_quantity, protocol_differences

    mu, pi = _ragged(4, T=30)
    rows = [{"rollout_logprobs": m, "trainer_logprobs": p, "top_p": 0.9} for m, p in zip(mu, pi, strict=True)]
    q = logged_quantity(read_logs(_write(tmp_path / "a.jsonl", rows)))
    assert q.sequences == 10 and q.tokens == sum(map(len, mu)) and q.steps == []
    assert q.tokens_per_sequence_max == max(map(len, mu)) and q.sampling == {"top_p": 0.9}
    protocol = StoredProtocol(x="start", max_new_tokens=64, top_p=1.0, top_k=0)
    diffs = protocol_differences(q, protocol)
    assert len(diffs) == 1 and "top_p 0.9" in diffs[0]
    short = dataclasses.replace(protocol, max_new_tokens=4, top_p=0.9)
    assert [d for d in protocol_differences(q, short) if "max_new_tokens 4" in d]
    stored_top_p = dataclasses.replace(protocol, top_p=0.9, top_k=None)
    assert [d for d in protocol_differences(q, stored_top_p, step=12) if "step 12" in d]
    with pytest.raises(ConfigError, match=r"logs\.step is 12 but the rows are from step"):
        protocol_differences(dataclasses.replace(q, steps=[3]), protocol, step=12)


def test_verl_dump_and_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    mu, pi = _ragged(2)
    T = max(len(m) for m in mu)  # verl rows are padded to the batch's response length
    rows = [
        {
            "rollout_log_probs": m + [0.0] * (T - len(m)),
            "old_log_probs": p + [-7.0] * (T - len(m)),
            "response_mask": [1] * len(m) + [0] * (T - len(m)),
        }
        for m, p in zip(mu, pi, strict=True)
    ]
    logs = read_logs(_write(tmp_path / "verl.jsonl", rows))
    assert logs.format == "verl"
    _expect(logs, mu, pi, [[1] * len(m) for m in mu])
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), tmp_path / "verl.parquet")
    b = read_logs(tmp_path / "verl.parquet")
    assert b.format == "verl" and np.array_equal(b.trainer_logprobs, logs.trainer_logprobs)


def test_trl_tool_mask_and_processes(tmp_path):
    mu, pi = _ragged(3)
    rows, masks = [], []
    for b, (m, p) in enumerate(zip(mu, pi, strict=True)):
        tool = [1] * len(m)
        if b % 3 == 0 and len(m) > 6:
            for j in range(2, 5):  # a tool result: TRL gives it rollout log-prob 0.0 and tool_mask 0
                m[j], tool[j] = 0.0, 0
        row = {"sampling_per_token_logps": m, "old_per_token_logps": p, "completion_mask": [1] * len(m)}
        rows.append(row | {"tool_mask": tool, "process_index": b % 2})
        masks.append(tool)
    logs = read_logs(_write(tmp_path / "trl.jsonl", rows))
    assert logs.format == "trl" and logs.warnings == () and logs.groups.tolist() == [b % 2 for b in range(10)]
    _expect(logs, mu, pi, masks)
    bare = [{k: r[k] for k in ("sampling_per_token_logps", "old_per_token_logps", "completion_mask")} for r in rows]
    logs = read_logs(_write(tmp_path / "trl_no_tool_mask.jsonl", bare))
    assert len(logs.warnings) == 1 and "tool_mask" in logs.warnings[0] and "exactly 0.0" in logs.warnings[0]


def test_nemo_rl_train_data(tmp_path):
    """train_data_stepN.jsonl: every value a batch of one ([[...]]), padded, position 0 dropped like [:, 1:]."""
    mu, pi = _ragged(4)
    T = max(len(m) for m in mu) + 3
    rows, masks = [], []
    for b, (m, p) in enumerate(zip(mu, pi, strict=True)):
        prompt = 3  # token_loss_mask is 0 on the prompt; log-probs there are 0
        tok = [0] * prompt + [1] * len(m) + [0] * (T - prompt - len(m))
        gen = [0.0] * prompt + m + [0.0] * (T - prompt - len(m))
        prev = [0.0] * prompt + p + [0.0] * (T - prompt - len(m))
        keep = 0 if b == 4 else 1  # dynamic sampling dropped this sample
        rows.append(
            {
                "content": ["..."], "rewards": [1.0], "input_lengths": [prompt + len(m)], "token_ids": [[1] * T],
                "token_loss_mask": [tok], "sample_loss_mask": [keep], "advantages": [[0.0] * T],
                "generation_logprobs": [gen], "prev_logprobs": [prev], "idx": b,
            }
        )  # fmt: skip
        masks.append([x * keep for x in tok[1:]])
    logs = read_logs(_write(tmp_path / "train_data_step1.jsonl", rows))
    assert logs.format == "nemo-rl"
    _expect(logs, [r["generation_logprobs"][0][1:] for r in rows], [r["prev_logprobs"][0][1:] for r in rows], masks)


def test_format_named_detected_or_refused(tmp_path):
    mu, pi = _ragged(5)
    p = _write(
        tmp_path / "l.jsonl", [{"rollout_log_probs": m, "old_log_probs": q} for m, q in zip(mu, pi, strict=True)]
    )
    with pytest.raises(ConfigError, match="missing 'response_mask'"):
        read_logs(p)
    with pytest.raises(ConfigError, match="missing 'rollout_logprobs'"):
        read_logs(p, format="admitcheck")
    with pytest.raises(ConfigError, match="unknown logs format 'openrlhf'"):
        read_logs(p, format="openrlhf")
    both = _write(tmp_path / "both.jsonl", [{"rollout_logprobs": [-1.0], "trainer_logprobs": [-1.1]} | {
        "inference_logprobs": [-1.0], "loss_mask": [True]}])  # fmt: skip
    with pytest.raises(ConfigError, match=r"several formats \(admitcheck, prime-rl\): name one with --format"):
        read_logs(both)
    assert read_logs(both, format="prime-rl").format == "prime-rl"
    with pytest.raises(ConfigError, match="cannot tell the logs format"):
        read_logs(_write(tmp_path / "x.jsonl", [{"logprobs": [-1.0]}]))


@pytest.mark.parametrize("fmt", ["verl", "admitcheck"])
def test_identical_log_probs_are_refused_naming_verl_bypass_mode(tmp_path, fmt):
    mu, _ = _ragged(6)
    keys = {"verl": ("rollout_log_probs", "old_log_probs"), "admitcheck": COLUMNS}[fmt]
    extra = {"verl": lambda m: {"response_mask": [1] * len(m)}, "admitcheck": lambda m: {}}[fmt]
    p = _write(tmp_path / "l.jsonl", [{keys[0]: m, keys[1]: list(m)} | extra(m) for m in mu])
    with pytest.raises(ConfigError) as exc:
        read_logs(p)
    assert "identical on all" in str(exc.value) and "bypass_mode" in str(exc.value)
    mu[0][0] -= 1e-9  # one token recomputed differently is a (tiny) measurement, not a copy
    rows = [{keys[0]: m, keys[1]: list(q)} | extra(m) for m, q in zip(mu, _ragged(6)[0], strict=True)]
    assert read_logs(_write(tmp_path / "ok.jsonl", rows)).num_tokens == sum(len(m) for m in mu)


def _top_p_logs(seed=0, B=40, T=40, V=50, top_p=0.9, noise=0.01):
    """vLLM processed log-probs under top-p (renormalised over the kept set) and a trainer that applies temperature
    only (TRL): returns (mu, pi, mask, true fake k3 = mean over tokens of Z − 1 − log Z)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2.0, (B, T, V))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))  # (B, T, V)
    order = np.argsort(-logp, axis=-1)
    sorted_p = np.take_along_axis(np.exp(logp), order, -1)
    keep_sorted = np.cumsum(sorted_p, -1) - sorted_p < top_p  # vLLM: keep while the mass before a token < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    Z = np.where(keep, np.exp(logp), 0.0).sum(-1)  # (B, T) kept mass
    probs = np.where(keep, np.exp(logp), 0.0) / Z[..., None]
    y = np.array([[rng.choice(V, p=probs[b, t]) for t in range(T)] for b in range(B)])
    lp_y = np.take_along_axis(logp, y[..., None], -1)[..., 0]  # (B, T) log p(y)
    mu = lp_y - np.log(Z)  # processed: renormalised over the kept set
    pi = np.minimum(lp_y + rng.normal(0, noise, (B, T)), 0.0)  # temperature only, plus numeric noise
    mask = np.ones((B, T), dtype=bool)
    return mu, pi, mask, float(np.mean(Z - 1 - np.log(Z)))


def test_top_p_fake_mismatch_warning_and_its_size(tmp_path):
    mu, pi, mask, true_fake = _top_p_logs()
    est = fake_truncation_k3(mu, pi, mask)
    # bias: the noise's own k3 on tokens where the kept set bites (≈ σ²/2 = 5e-5) against a fake part of ≈ 4.7e-3
    # (1%), plus the mirror's sampling error (±k3 ~ 5e-5 per token, averaged over 1600 tokens): 5% covers both
    assert est.fake_k3 == pytest.approx(true_fake, rel=0.05)
    write_logs(tmp_path / "l.jsonl", mu, pi, mask)
    logs = read_logs(tmp_path / "l.jsonl")
    assert len(logs.warnings) == 1 and "top-p/top-k" in logs.warnings[0] and f"{est.fake_k3:.3g}" in logs.warnings[0]
    # TRL logs that declare top_p warn even before the signature is clear
    rows = [{"sampling_per_token_logps": [-0.5, -0.1], "old_per_token_logps": [-0.4, -0.2], "completion_mask": [1, 1],
             "top_p": 0.95}]  # fmt: skip
    assert "top_p=0.95" in read_logs(_write(tmp_path / "trl.jsonl", rows)).warnings[0]


def test_symmetric_noise_gives_no_warning(tmp_path):
    mu, pi, mask = _random_logs(seed=9, B=40, T=40)
    write_logs(tmp_path / "l.jsonl", mu, pi, mask)
    logs = read_logs(tmp_path / "l.jsonl")
    assert logs.warnings == ()
    assert fake_truncation_k3(mu, pi, mask).share_negative < 0.7


# -------------------------------------------------------------------------------------------------------- CLI


def _cli(*args):
    from typer.testing import CliRunner

    from admitcheck.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _prime_rl_file(path, seed=10):
    mu, pi = _ragged(seed, B=12)
    rows = [
        {"inference_logprobs": m, "trainer_logprobs": p, "loss_mask": [True] * len(m), "rank": 0}
        for m, p in zip(mu, pi, strict=True)
    ]
    return _write(path, rows)


@pytest.mark.parametrize("framework", ["verl", "prime-rl", "nemo-rl", "slime", "trl"])
def test_cli_measure_from_logs_with_each_dashboard(tmp_path, framework):
    from admitcheck.measurement.dashboards import ROWS

    p = _prime_rl_file(tmp_path / "rank_0.jsonl")
    r = _cli("measure", "--from-logs", p, "--dashboard", framework, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["format"] == "prime-rl" and doc["dashboard"]["framework"] == framework
    assert [row["key"] for row in doc["dashboard"]["rows"]] == [k for k, *_ in ROWS[framework]]
    k3 = doc["metrics"]["values"]["k3"]
    for row in doc["dashboard"]["rows"]:
        if row["budget"] == "same":  # verl, prime-rl, nemo-rl: their k3 key is admitcheck's k3
            assert row["value"] == pytest.approx(k3, rel=1e-11)
    r = _cli("measure", "--from-logs", p, "--format", "prime-rl", "--dashboard", framework)
    assert r.exit_code == 0 and f"{framework} dashboard (tokens)" in r.stdout  # keys: checked in the JSON above


def test_cli_user_errors_and_warnings(tmp_path):
    from tests.test_cli import assert_user_error

    same = _write(tmp_path / "verl.jsonl", [{"rollout_log_probs": [-1.0, -0.5], "old_log_probs": [-1.0, -0.5],
                                             "response_mask": [1, 1]}])  # fmt: skip
    assert_user_error(_cli("measure", "--from-logs", same), "--from-logs", "identical on all 2 tokens", "bypass_mode")
    p = _prime_rl_file(tmp_path / "p.jsonl")
    assert_user_error(_cli("measure", "--from-logs", p, "--dashboard", "openrlhf"), "--dashboard", "unknown framework")
    assert_user_error(_cli("measure", "--from-logs", p, "--format", "x"), "--format", "unknown logs format 'x'")
    assert_user_error(_cli("measure", "--from-logs", p, "--format", "verl"), "missing 'rollout_log_probs'")
    assert_user_error(_cli("measure"), "CONFIG", "--from-logs FILE")
    mu, pi, mask, _ = _top_p_logs(B=10, T=10)
    write_logs(tmp_path / "topp.jsonl", mu, pi, mask)
    r = _cli("measure", "--from-logs", tmp_path / "topp.jsonl")
    assert r.exit_code == 0 and "warning" in r.output and "top-p/top-k" in r.output


@pytest.mark.slow
def test_cli_screen_from_logs_with_dashboard(tmp_path, toy_pair_dir):
    from tests.test_screen import BF16, write_artifact, write_config

    cal = write_artifact(tmp_path / "cal.yaml", toy_pair_dir, budget=0.05)
    cfg = write_config(tmp_path / "s.yaml", toy_pair_dir, cal, [BF16])
    p = _prime_rl_file(tmp_path / "rank_0.jsonl")
    r = _cli("screen", cfg, "--from-logs", p, "--dashboard", "prime-rl", "--json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    v = doc["verdicts"][0]
    row = doc["dashboard"][v["name"]]["rows"][0]
    assert row["key"] == "mismatch_kl/all/mean" and row["value"] == pytest.approx(v["metrics"]["k3"], rel=1e-11)
    r = _cli("screen", cfg, "--from-logs", p, "--dashboard", "nemo-rl")
    assert r.exit_code in (0, 1) and "train/gen_kl_error" in r.stdout and "0.05" in r.stdout  # the budget column
    r = _cli("screen", cfg, "--from-logs", p, "--format", "prime-rl", "--json")  # the detected format: fine
    assert r.exit_code in (0, 1) and json.loads(r.stdout)["verdicts"][0]["metrics"]["k3"] == v["metrics"]["k3"]
    both = _write(tmp_path / "both.jsonl", [{"rollout_logprobs": [-1.0], "trainer_logprobs": [-1.1],
                                             "inference_logprobs": [-1.0], "loss_mask": [True]}])  # fmt: skip
    from tests.test_cli import assert_user_error

    assert_user_error(_cli("screen", cfg, "--from-logs", both), "several formats", "--format")
    r = _cli("screen", cfg, "--from-logs", both, "--format", "prime-rl", "--json")  # named: read as prime-rl
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["verdicts"][0]["metrics"]["k3"] == pytest.approx(math.exp(-0.1) - 1 + 0.1)
    r = _cli("screen", cfg, "--dashboard", "verl", "--json")  # engine-sampled tokens: the verdict's token means
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    v = doc["verdicts"][0]
    d = doc["dashboard"][v["name"]]
    assert d["source"] == "token means" and d["rows"][0]["key"] == "rollout_corr/k3_kl"
    assert d["rows"][0]["value"] == pytest.approx(v["metrics"]["k3"], rel=1e-7)


@pytest.mark.slow
def test_cli_measure_engine_with_dashboard(tmp_path, toy_pair_dir):
    from tests.test_cli import measure_config

    r = _cli("measure", measure_config(tmp_path, toy_pair_dir), "--dashboard", "verl", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    d, k3 = doc["dashboard"], doc["candidate"]["metrics"]["values"]["k3"]
    assert d["source"] == "per-sequence sums" and d["rows"][0]["value"] == pytest.approx(k3, rel=1e-7)


def test_a_log_format_is_one_record_in_one_table():
    """The `Literal` of format names is FORMATS' keys, and a screen config's `logs.format` names the same (+ auto)."""
    from typing import get_args

    from admitcheck.config import LogsSource
    from admitcheck.measurement.logs import FORMATS, LogFormat

    assert get_args(LogFormat) == tuple(FORMATS)
    assert get_args(LogsSource.model_fields["format"].annotation) == ("auto", *FORMATS)
