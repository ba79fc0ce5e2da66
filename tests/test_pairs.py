"""The registry of built-in pairs behind `admitcheck pair NAME DIR` (and the `toy-pair` alias)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from admitcheck.cli import app
from admitcheck.errors import ConfigError
from admitcheck.pairs import PAIRS, build_pair
from admitcheck.pairs.toy import build_toy_pair

runner = CliRunner()


def test_registry_names():
    assert set(PAIRS) >= {"toy", "smollm2"}


def test_toy_through_the_registry_is_the_toy_pair(toy_pair_dir):
    assert build_pair("toy", toy_pair_dir) == build_toy_pair(toy_pair_dir)  # a cache hit: nothing rebuilt


@pytest.mark.parametrize(
    "kwargs, match",
    [({"source": "x.gguf"}, "takes no --source"), ({"device": "cuda"}, "CPU only")],
)
def test_options_a_pair_does_not_take(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        build_pair("toy", tmp_path, **kwargs)


def test_cli_pair_and_alias(toy_pair_dir, tmp_path):
    res = runner.invoke(app, ["pair", "toy", str(toy_pair_dir), "--json"])
    assert res.exit_code == 0, res.output
    via_pair = json.loads(res.stdout)
    res = runner.invoke(app, ["toy-pair", str(toy_pair_dir), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == via_pair
    res = runner.invoke(app, ["pair", "nope", str(tmp_path)])
    assert res.exit_code == 2 and "unknown pair 'nope'" in res.output


def test_cli_smollm2_on_a_bad_source_is_exit_2(tmp_path):
    """A bad --source (or a missing gguf package) is a user error: exit 2, one panel, no traceback."""
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf")
    res = runner.invoke(app, ["pair", "smollm2", str(tmp_path / "p"), "--source", str(bad)])
    assert res.exit_code == 2
    assert ("pip install gguf" in res.output) or ("expected 98362432 bytes" in res.output)
    assert "Traceback" not in res.output
