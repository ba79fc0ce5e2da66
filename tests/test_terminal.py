"""admitcheck.terminal: what reaches the terminal (the CLI's exit codes and messages: tests/test_cli.py)."""

from __future__ import annotations


def test_a_warning_is_printed_as_text_not_markup() -> None:
    """A warning's brackets (intervals, `pip install 'admitcheck[ray]'`) are printed, not read as rich markup."""
    from admitcheck import terminal

    with terminal.err.capture() as cap:
        terminal.render_warning("drift [0.001, 0.002] within [bold]x[/bold]")
    assert "drift [0.001, 0.002] within [bold]x[/bold]" in cap.get()
