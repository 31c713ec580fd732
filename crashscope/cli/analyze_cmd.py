"""`crashscope analyze`, `timeline`, `sources`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
