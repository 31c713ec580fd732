"""`crashscope analyze`, `crashscope timeline` and `crashscope sources`."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer


class Format(str, Enum):
    terminal = "terminal"
    json = "json"
    markdown = "markdown"


def _parse_overrides(values: list[str] | None) -> dict[str, str]:
    out = {}
    for v in values or []:
        if "=" not in v:
            raise typer.BadParameter(f"--source takes NAME=GLOB, got {v!r}")
        name, glob = v.split("=", 1)
        out[glob] = name
    return out


def _check_dir(path: Path) -> None:
    if not path.exists():
        typer.echo(f"crashscope: {path}: no such file or directory", err=True)
        raise typer.Exit(2)


class _Progress:
    """A rich progress bar on a TTY for large directories; silent otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._progress = None
        self._task = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

            self._progress = Progress(TextColumn("[dim]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f} B"), TransferSpeedColumn(), transient=True)
            self._progress.start()
            self._task = self._progress.add_task("reading logs", total=None)
        return self

    def __call__(self, file: str, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=nbytes, description=file[-50:])

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        if self._progress is not None:
            self._progress.stop()


def register(app: typer.Typer) -> None:
    @app.command()
    def analyze(
        directory: Path = typer.Argument(..., help="The failed job's log directory (or one file / tar archive)."),
        format: Format = typer.Option(Format.terminal, "--format", "-f", help="Output view."),
        tz: Optional[str] = typer.Option(None, "--tz", help="Time zone of local-time stamps (e.g. America/Chicago). Default: the job's, else UTC."),
        ranks: Optional[int] = typer.Option(None, "--ranks", help="Expected world size, when the logs do not say."),
        source: Optional[list[str]] = typer.Option(None, "--source", help="Force a source for files: NAME=GLOB (repeatable)."),
        experimental: bool = typer.Option(False, "--experimental", help="Also run experimental rules (they never decide the verdict)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report here instead of standard output (never inside DIRECTORY)."),
        fail_on_crash: bool = typer.Option(False, "--fail-on-crash", help="Exit 1 when a cause other than none is found."),
        width: int = typer.Option(110, "--width", help="Terminal report width."),
    ) -> None:
        """Attribute a failed job's crash to a cause, with evidence at file:line.

        Example:
            crashscope analyze /scratch/jobs/123456/logs
            crashscope analyze logs.tar.gz --format json > report.json
        """
        from crashscope.analyze import analyze as run
        from crashscope.report.render import render_json, render_markdown, render_terminal

        _check_dir(directory)
        _refuse_inside(output, directory)
        with _Progress(format == Format.terminal) as progress:
            report, _, result = run(directory, tz=tz, expected_ranks=ranks, overrides=_parse_overrides(source), progress=progress, include_experimental=experimental)
        if format == Format.json:
            text = render_json(report)
        elif format == Format.markdown:
            text = render_markdown(report)
        else:
            text = render_terminal(report, width=width, color=output is None and sys.stdout.isatty())
        _write(text, output)
        if not result.files or all(f.kind in ("unreadable",) for f in result.files):
            raise typer.Exit(3)
        if fail_on_crash and report.cause != "none":
            raise typer.Exit(1)

    @app.command()
    def timeline(
        directory: Path = typer.Argument(..., help="The job's log directory."),
        host: Optional[list[str]] = typer.Option(None, "--host", help="Only these hosts (repeatable)."),
        rank: Optional[list[int]] = typer.Option(None, "--rank", help="Only these global ranks (repeatable)."),
        kind: Optional[list[str]] = typer.Option(None, "--kind", help="Only these event kinds (repeatable)."),
        severity: Optional[str] = typer.Option(None, "--severity", help="Minimum severity: debug|info|warning|error|critical."),
        since: Optional[str] = typer.Option(None, "--since", help="Start of the window (ISO 8601; UTC unless it has a zone)."),
        until: Optional[str] = typer.Option(None, "--until", help="End of the window."),
        around: Optional[str] = typer.Option(None, "--around", help="Center of a window (ISO 8601)."),
        window: float = typer.Option(300.0, "--window", help="Half-width of --around in seconds."),
        tz: Optional[str] = typer.Option(None, "--tz", help="Time zone of local-time stamps."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Export to .parquet, .csv or .jsonl instead of printing."),
        limit: int = typer.Option(200, "--limit", help="Rows to print (exports are not limited)."),
    ) -> None:
        """Show or export the unified, clock-aligned timeline of every event.

        Example:
            crashscope timeline logs/ --severity error --around 2026-09-14T08:12:44Z --window 60
            crashscope timeline logs/ --kind xid --kind network_error -o events.parquet
        """
        import polars as pl

        from crashscope.analyze import analyze as run
        from crashscope.sources.base import iso_to_ns
        from crashscope.timeline import SEVERITY_ORDER

        _check_dir(directory)
        _refuse_inside(output, directory)
        report, tl, _ = run(directory, tz=tz, use_classifier=False)
        ev = tl.events
        if host:
            ev = ev.filter(pl.col("host").is_in(host))
        if rank:
            ev = ev.filter(pl.col("rank").is_in(rank))
        if kind:
            ev = ev.filter(pl.col("kind").cast(pl.String).is_in(kind))
        if severity:
            if severity not in SEVERITY_ORDER:
                raise typer.BadParameter(f"--severity must be one of {', '.join(SEVERITY_ORDER)}")
            keep = [s for s, v in SEVERITY_ORDER.items() if v >= SEVERITY_ORDER[severity]]
            ev = ev.filter(pl.col("severity").cast(pl.String).is_in(keep))

        def when(text: str) -> pl.Expr:
            ns, _ = iso_to_ns(text)
            if ns is None:
                raise typer.BadParameter(f"not an ISO 8601 time: {text!r}")
            return pl.lit(ns).cast(pl.Datetime("ns", "UTC"))

        if around:
            ns, _ = iso_to_ns(around)
            if ns is None:
                raise typer.BadParameter(f"not an ISO 8601 time: {around!r}")
            lo, hi = ns - int(window * 1e9), ns + int(window * 1e9)
            ev = ev.filter(pl.col("time").is_between(pl.lit(lo).cast(pl.Datetime("ns", "UTC")), pl.lit(hi).cast(pl.Datetime("ns", "UTC"))))
        if since:
            ev = ev.filter(pl.col("time") >= when(since))
        if until:
            ev = ev.filter(pl.col("time") <= when(until))
        if output is not None:
            suffix = output.suffix.lower()
            if suffix == ".parquet":
                ev.write_parquet(output)
            elif suffix == ".csv":
                ev.write_csv(output)
            elif suffix in (".jsonl", ".ndjson"):
                ev.write_ndjson(output)
            else:
                raise typer.BadParameter("--output must end in .parquet, .csv or .jsonl")
            typer.echo(f"wrote {ev.height} events to {output}", err=True)
            return
        from rich.console import Console
        from rich.table import Table

        t = Table(show_lines=False, expand=True)
        for c in ("time (UTC)", "q", "host", "rank", "kind", "sev", "message", "file:line"):
            t.add_column(c, overflow="fold")
        for r in ev.head(limit).iter_rows(named=True):
            ts = r["time"].strftime("%Y-%m-%d %H:%M:%S.%f")[:23] if r["time"] else "?"
            t.add_row(ts, str(r["time_quality"])[0], r["host"] or "", "" if r["rank"] is None else str(r["rank"]), str(r["kind"]), str(r["severity"]), (r["message"] or "")[:160], f"{r['file']}:{r['line']}")
        con = Console(width=160 if not sys.stdout.isatty() else None)
        con.print(t)
        if ev.height > limit:
            con.print(f"[dim]{ev.height - limit} more events (use --limit or --output)[/dim]")

    @app.command()
    def sources(
        directory: Optional[Path] = typer.Argument(None, help="If given: which files each source claimed, with what confidence."),
        format: Format = typer.Option(Format.terminal, "--format", "-f"),
    ) -> None:
        """List the known input sources, or which source claimed each file of a directory.

        Example:
            crashscope sources
            crashscope sources /scratch/jobs/123456/logs --format json
        """
        import json
        from dataclasses import asdict

        from rich.console import Console
        from rich.table import Table

        from crashscope.sources import SOURCES

        con = Console(width=140 if not sys.stdout.isatty() else None)
        if directory is None:
            if format == Format.json:
                typer.echo(json.dumps([{"name": s.name, "description": s.description, "filename_hints": list(s.filename_hints)} for s in SOURCES], indent=2))
                return
            t = Table(title="crashscope sources")
            t.add_column("name")
            t.add_column("reads")
            t.add_column("name hints")
            for s in SOURCES:
                t.add_row(s.name, s.description, " ".join(s.filename_hints))
            con.print(t)
            return
        _check_dir(directory)
        from crashscope.ingest import ingest

        result = ingest(directory)
        if format == Format.json:
            typer.echo(json.dumps({"files": [asdict(f) for f in result.files], "warnings": result.warnings}, indent=2))
            return
        t = Table(title=f"files under {directory}")
        for c in ("file", "source", "confidence", "runner-up", "events", "lines", "warnings", "note"):
            t.add_column(c, overflow="fold")
        for f in result.files:
            ru = f"{f.runner_up} {f.runner_up_confidence:.2f}" if f.runner_up else ""
            t.add_row(f.file, f.kind, f"{f.confidence:.2f}", ru, str(f.events), str(f.lines), str(f.warnings), f.note or "")
        con.print(t)
        for w in result.warnings[:30]:
            con.print(f"[yellow]warning[/yellow] {w}", markup=True, highlight=False)


def _refuse_inside(output: Path | None, directory: Path) -> None:
    """Never write into the directory being analysed (it is the user's evidence)."""
    if output is None:
        return
    import os

    out = os.path.realpath(output)
    src = os.path.realpath(directory)
    if os.path.isdir(src) and os.path.commonpath([out, src]) == src:
        typer.echo(f"crashscope: refusing to write {output} inside the analysed directory {directory}", err=True)
        raise typer.Exit(2)


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
