"""`crashscope simulate` (owned by the fault simulator)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
