"""`python -m admitcheck ...` runs the CLI (the same as the `admitcheck` command)."""

from admitcheck.cli import app

app(prog_name="admitcheck")
