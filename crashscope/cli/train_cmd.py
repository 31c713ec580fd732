"""`crashscope train`: retrain the cause classifier from labeled job directories."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        dirs: Optional[list[Path]] = typer.Argument(None, help="Directories holding labeled jobs (crashscope-label.json or truth.json), searched recursively."),
        out: Path = typer.Option(Path("classifier.json"), "--out", "-o", help="Where to write the model JSON (crashscope/data/classifier.json replaces the shipped one)."),
        seed: int = typer.Option(0, "--seed", help="Shifts every simulator seed and the calibration split; same seed, same model."),
        simulate: int = typer.Option(40, "--simulate", help="Simulated training jobs per cause (0: only DIRS)."),
        test: int = typer.Option(0, "--test", help="Also score on N simulated jobs per cause from a disjoint seed range."),
        jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Worker processes (default: CPUs, at most 8)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    ) -> None:
        """Retrain the cause classifier on simulated and site-labeled jobs, reproducibly.

        Each job runs through the real pipeline (sources, timeline, rules); its features train a calibrated logistic regression stored as parameters in JSON. Simulated jobs are generated in a temporary directory and deleted.

        Example:
            crashscope train --out crashscope/data/classifier.json --test 20
            crashscope train /site/incidents --simulate 12 --out site-classifier.json
        """
        from crashscope.classify.train import TrainingError, train as run_train, write_model

        for d in dirs or []:
            if not d.is_dir():
                typer.echo(f"crashscope: {d}: not a directory", err=True)
                raise typer.Exit(2)
        if simulate < 0 or test < 0:
            typer.echo("crashscope: --simulate and --test take a count >= 0", err=True)
            raise typer.Exit(2)
        done = [0]

        def progress(origin: str) -> None:
            done[0] += 1
            if not quiet:
                print(f"[{done[0]}] {origin}", file=sys.stderr, flush=True)

        try:
            result = run_train(dirs or [], simulate_per_cause=simulate, test_per_cause=test, seed=seed, jobs=jobs, progress=progress)
        except TrainingError as e:
            typer.echo(f"crashscope: {e}", err=True)
            raise typer.Exit(2) from None
        path = write_model(result.model, out)
        m = result.model
        counts = ", ".join(f"{k}={v}" for k, v in result.train_counts.items())
        typer.echo(f"wrote {path}: model {m.model_version}, {len(m.classes)} classes, {len(m.features)} features, temperature {m.temperature:.3f}")
        typer.echo(f"trained on {sum(result.train_counts.values())} jobs ({counts})")
        for f in result.failures:
            typer.echo(f"skipped: {f}", err=True)
        if result.test:
            t = result.test
            typer.echo(f"test: top-1 accuracy {t['accuracy']:.3f} on {t['n']} simulated jobs (seeds {t['seeds'][0]}..{t['seeds'][1]} per cause), NLL {t['nll']}")
            by = ", ".join(f"{k} {v['accuracy']:.3f} (n={v['n']})" for k, v in t.get("accuracy_by_data", {}).items())
            if by:
                typer.echo(f"  by data: {by}")
            for cause, row in t["confusion"].items():
                wrong = ", ".join(f"{p}:{n}" for p, n in row.items() if p != cause)
                typer.echo(f"  {cause:15s} recall {t['recall'][cause]:.2f}" + (f"  (confused with {wrong})" if wrong else ""))
