"""`crashscope simulate` (owned by the fault simulator): write a realistic failed job directory
plus truth.json, or (``--corpus DIR``) regenerate the checked-in fixture corpus."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def _check_out(out: Path, *, force: bool, error: type[Exception]) -> None:
    """OUT must be a new or empty directory we can write (``--force``: any directory), so two
    simulated jobs are never mixed in one directory."""
    import os

    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise error(f"cannot write {out}: it exists and is not a directory")
        if not force and any(out.iterdir()):
            raise error(f"{out} is not empty: choose a new directory, or pass --force to write into it anyway")
        if not os.access(out, os.W_OK | os.X_OK):
            raise error(f"cannot write {out}: permission denied")
        return
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise error(f"cannot write {out}: {parent} is not a directory" if parent.exists() else f"cannot write {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise error(f"cannot write {out}: permission denied in {parent}")


def register(app: typer.Typer) -> None:
    from crashscope.cli import EXIT_HELP

    @app.command("simulate", epilog=EXIT_HELP)
    def simulate_cmd(
        out: Path = typer.Argument(..., help="directory to write (created); with --corpus, the corpus root"),
        cause: str = typer.Option("fabric_timeout", "--cause", help="taxonomy label except 'unknown'; 'none' = healthy run"),
        nodes: int = typer.Option(2, "--nodes", min=1),
        gpus_per_node: int = typer.Option(2, "--gpus-per-node", min=1, max=8),
        seed: int = typer.Option(0, "--seed"),
        layout: Optional[str] = typer.Option(None, "--layout", help="slurm_out | per_rank | nccl_debug_file | per_node (default: by seed)"),
        confounder: Optional[List[str]] = typer.Option(None, "--confounder", help="plant this confounder (repeatable); default: drawn at --confounder-rate"),
        no_confounders: bool = typer.Option(False, "--no-confounders", help="plant none"),
        confounder_rate: float = typer.Option(0.3, "--confounder-rate", min=0.0, max=1.0),
        nccl_info_volume: int = typer.Option(32, "--nccl-info-volume", min=0, help="NCCL Channel INFO lines per rank (size knob)"),
        variant: Optional[str] = typer.Option(None, "--variant", help="cause-specific variant, e.g. 79 (gpu_hardware), host (oom)"),
        timezone: Optional[str] = typer.Option(None, "--timezone", help="node-local time zone, e.g. America/Chicago"),
        timeout_ms: Optional[int] = typer.Option(None, "--timeout-ms", help="PyTorch NCCL collective timeout"),
        corpus: bool = typer.Option(False, "--corpus", help="regenerate the fixture corpus into OUT (ignores the other options)"),
        force: bool = typer.Option(False, "--force", help="write into OUT even if it is not empty (files of an earlier job may remain)"),
    ) -> None:
        """Write a simulated multi-node training job's log directory and its truth.json.

        Example:
            crashscope simulate /tmp/job --cause gpu_hardware --nodes 4 --gpus-per-node 8 --seed 3
            crashscope simulate fixtures/jobs --corpus
        """
        from crashscope.cli.analyze_cmd import validate_tz
        from crashscope.errors import OutputError, UsageError
        from crashscope.simulate import CAUSES, simulate
        from crashscope.simulate.layout import LAYOUTS

        _check_out(out, force=force or corpus, error=OutputError)
        if corpus:
            from crashscope.simulate.corpus import generate_corpus, readme_text

            names = generate_corpus(out)
            typer.echo(f"wrote {len(names)} scenarios to {out}")
            if out.name == "jobs":  # fixtures/jobs -> fixtures/README.md lists the scenarios
                (out.parent / "README.md").write_text(readme_text(out), encoding="utf-8")
                typer.echo(f"wrote {out.parent / 'README.md'}")
            return
        if cause not in CAUSES:
            raise UsageError(f"--cause: choose one of {', '.join(CAUSES)}, got {cause!r}")
        if layout is not None and layout not in LAYOUTS:
            raise UsageError(f"--layout: choose one of {', '.join(LAYOUTS)}, got {layout!r}")
        validate_tz(timezone, "--timezone")
        chosen = [] if no_confounders else (confounder or None)
        existed = out.exists()
        try:
            truth = simulate(out, cause=cause, nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, layout=layout,
                             confounders=chosen, confounder_rate=confounder_rate, nccl_info_volume=nccl_info_volume,
                             variant=variant, timezone=timezone, timeout_ms=timeout_ms)
        except (KeyError, ValueError) as e:
            # The simulator rejects what it cannot plant: an unknown --variant (Xid code),
            # too few nodes for a cause, an unknown confounder. Leave no half-written job.
            if not existed:
                import shutil

                shutil.rmtree(out, ignore_errors=True)
            if isinstance(e, KeyError) and variant is not None:
                raise UsageError(f"--variant: {variant!r} is not a variant the simulator knows for {cause}") from None
            raise UsageError(str(e).strip("'\"")) from None
        except OSError as e:
            raise OutputError(f"cannot write {out}: {e.strerror or e}") from None
        typer.echo(f"{out}: job {truth['job']['id']} cause={truth['cause']} layout={truth['layout']} "
                   f"ranks={truth['job']['ranks']} evidence={len(truth['evidence'])}")
