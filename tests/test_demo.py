"""admitcheck.demo: the embedded default end to end prints the table README ships."""

from __future__ import annotations

import pytest

from tests.test_cli import ROOT


@pytest.mark.slow
def test_readme_table_is_what_the_demo_prints(tmp_path, toy_pair_dir):
    from admitcheck.demo import EXIT_RULE, README_TABLE, readme_table, run_demo

    readme = (ROOT / "README.md").read_text()
    start, end = (readme.index(m) for m in README_TABLE)
    shipped = readme[start + len(README_TABLE[0]) : end].strip()
    result = run_demo(toy_pair_dir, tmp_path / "reports")
    assert readme_table(result) == shipped
    assert result.screen.exit_code == 1 and "exits 0" in EXIT_RULE  # the rule README states beside the table
    assert "exits 0" in readme[end : end + 600]
