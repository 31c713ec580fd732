"""Docs kept honest: every kind documented, every command has help with an example,
the README's commands exist."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from crashscope.cli import app
from crashscope.schema import KINDS

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_every_kind_is_documented() -> None:
    text = (ROOT / "docs" / "schema.md").read_text()
    missing = [k for k in KINDS if f"`{k}`" not in text]
    assert not missing, f"kinds missing from docs/schema.md: {missing}"


def test_every_command_has_help_with_an_example() -> None:
    import typer.main

    cmd = typer.main.get_command(app)
    for name, sub in cmd.commands.items():  # type: ignore[attr-defined]
        res = runner.invoke(app, [name, "--help"])
        assert res.exit_code == 0, name
        if hasattr(sub, "commands"):  # a group (rules): its subcommands
            for sname in sub.commands:  # type: ignore[attr-defined]
                assert runner.invoke(app, [name, sname, "--help"]).exit_code == 0
            continue
        assert "Example" in (sub.help or ""), f"`crashscope {name}` help has no Example block"


def test_readme_commands_exist() -> None:
    text = (ROOT / "README.md").read_text()
    for name in ("analyze", "timeline", "sources", "simulate", "rules", "train"):
        assert f"crashscope {name}" in text
    assert "fixtures/jobs/sample_fabric_timeout" in text
    assert (ROOT / "fixtures" / "jobs" / "sample_fabric_timeout").is_dir()
