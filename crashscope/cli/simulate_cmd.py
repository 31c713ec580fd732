"""`crashscope simulate` (owned by the fault simulator): write a realistic failed job directory
plus truth.json, or (``--corpus DIR``) regenerate the checked-in fixture corpus."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("simulate")
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
    ) -> None:
        """Write a simulated multi-node training job's log directory and its truth.json.

        Example:
            crashscope simulate /tmp/job --cause gpu_hardware --nodes 4 --gpus-per-node 8 --seed 3
            crashscope simulate fixtures/jobs --corpus
        """
        from crashscope.simulate import CAUSES, simulate
        from crashscope.simulate.layout import LAYOUTS

        if corpus:
            from crashscope.simulate.corpus import generate_corpus, readme_text

            names = generate_corpus(out)
            typer.echo(f"wrote {len(names)} scenarios to {out}")
            if out.name == "jobs":  # fixtures/jobs -> fixtures/README.md lists the scenarios
                (out.parent / "README.md").write_text(readme_text(out), encoding="utf-8")
                typer.echo(f"wrote {out.parent / 'README.md'}")
            return
        if cause not in CAUSES:
            raise typer.BadParameter(f"choose one of {', '.join(CAUSES)}", param_hint="--cause")
        if layout is not None and layout not in LAYOUTS:
            raise typer.BadParameter(f"choose one of {', '.join(LAYOUTS)}", param_hint="--layout")
        chosen = [] if no_confounders else (confounder or None)
        try:
            truth = simulate(out, cause=cause, nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, layout=layout,
                             confounders=chosen, confounder_rate=confounder_rate, nccl_info_volume=nccl_info_volume,
                             variant=variant, timezone=timezone, timeout_ms=timeout_ms)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from e
        typer.echo(f"{out}: job {truth['job']['id']} cause={truth['cause']} layout={truth['layout']} "
                   f"ranks={truth['job']['ranks']} evidence={len(truth['evidence'])}")
