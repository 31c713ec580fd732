"""`crashscope fleet`: the repeat offenders of the fleet history, and `crashscope fleet add`
to import existing reports. The history itself is :mod:`crashscope.fleet`."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from crashscope.errors import UsageError

DB_HELP = "The fleet history: a SQLite file or a postgresql:// URL (default: the config's fleet_url, else <reports_dir>/fleet.sqlite)."
CONFIG_HELP = "Configuration file (default: $CRASHSCOPE_CONFIG, else /etc/crashscope/config.toml)."


class ListFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


COLUMNS = ("cluster", "kind", "key", "label", "node", "jobs", "days", "first", "last", "causes", "xids", "job_ids", "advice")


def _url(db: str | None, config: Path | None) -> str:
    from crashscope.config import load_config
    from crashscope.fleet import fleet_url

    return fleet_url(load_config(config) if db in (None, "") else None, db)


def _csv_cell(v: Any) -> str:
    """Exact text for a drain script, but never a spreadsheet formula, never a line break."""
    from crashscope.report.safe import escape_controls

    if isinstance(v, dict):
        v = ";".join(f"{k}={n}" for k, n in v.items())
    elif isinstance(v, list):
        v = ";".join(str(x) for x in v)
    s = escape_controls(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@") else s


def offenders_text(rows: list[dict[str, Any]], fmt: str, width: int | None = None, *, title: str = "") -> str:
    import csv
    import io
    import json

    from crashscope.report.safe import escape_controls as esc
    from crashscope.report.safe import json_text

    if fmt == "json":
        return json_text(json.dumps(rows, indent=2, ensure_ascii=False)) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_csv_cell(r.get(c)) for c in COLUMNS])
        return buf.getvalue()
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from crashscope.report.render import clamp_width

    buf = io.StringIO()
    con = Console(file=buf, width=clamp_width(width), color_system=None, markup=False, highlight=False, emoji=False)
    if not rows:
        con.print(Text(f"no repeat offenders{title}"))
        return buf.getvalue()
    t = Table(title=Text(f"repeat offenders{title}"), expand=True)
    for c in ("kind", "culprit", "node", "jobs", "last", "causes", "xids", "advice"):
        t.add_column(c, overflow="fold")
    for r in rows:
        causes = ", ".join(f"{k} {n}" for k, n in (r.get("causes") or {}).items())
        cells = [r["kind"], r["label"], r.get("node") or "", str(r["jobs"]), (r.get("last") or "")[:19], causes,
                 ",".join(str(x) for x in r.get("xids") or []), r.get("advice") or ""]
        t.add_row(*(Text(esc(c, 300)) for c in cells))
    con.print(t)
    return buf.getvalue()


def _parse_until(until: str | None) -> Any:
    if until is None:
        return None
    from crashscope.fleet import _parse_time

    t = _parse_time(until)
    if t is None:
        raise UsageError(f"--until: not an ISO 8601 time: {until!r}")
    return t


def fleet_config(asked: bool) -> Any:
    """For ``analyze --fleet``: the config to record with, or None when not asked (neither
    ``--fleet`` nor a ``fleet_url`` in the config). A bad config fails only when asked."""
    from crashscope.config import load_config, load_config_or_defaults

    if asked:
        return load_config()
    cfg, _ = load_config_or_defaults()
    return cfg if cfg.fleet_url else None


def record_in_fleet(report: Any, config: Any, output: Path | None) -> None:
    """Record ``report`` (filling its history); a database that cannot be written is a
    warning in the report and on stderr, never a lost analysis."""
    from crashscope.fleet import FleetError, record
    from crashscope.report.safe import escape_controls

    path = str(output.resolve()) if output is not None and str(output) != "-" else ""
    try:
        record(report, config, report_path=path)
    except FleetError as e:
        msg = f"not recorded in the fleet history: {e}"
        print(f"crashscope: warning: {escape_controls(msg, 500)}", file=sys.stderr)
        report.warnings.append(msg)


def register(app: typer.Typer) -> None:
    from crashscope.cli.analyze_cmd import open_output
    from crashscope.fleet import CULPRIT_KINDS, DRAIN_DAYS, DRAIN_JOBS

    epilog = _exit_help()
    fleet_app = typer.Typer(no_args_is_help=False, add_completion=False, rich_markup_mode=None)

    @fleet_app.callback(invoke_without_command=True, epilog=epilog)
    def fleet(
        ctx: typer.Context,
        db: Optional[str] = typer.Option(None, "--db", metavar="URL|PATH", help=DB_HELP),
        config: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help=CONFIG_HELP),
        min_jobs: int = typer.Option(DRAIN_JOBS, "--min-jobs", min=1, metavar="N", help="Implicated in at least this many jobs."),
        days: float = typer.Option(float(DRAIN_DAYS), "--days", min=0.0, metavar="D", help="Jobs that ended in the last D days (before --until)."),
        kind: Optional[list[str]] = typer.Option(None, "--kind", metavar="KIND", help="Only node, gpu or link (repeatable; default all three)."),
        cause: Optional[list[str]] = typer.Option(None, "--cause", metavar="CAUSE", help="Count only jobs with these causes (repeatable; default: a node's infrastructure causes, a GPU's GPU causes, a link's fabric failures)."),
        all_causes: bool = typer.Option(False, "--all-causes", help="Count jobs of every cause (an OOM or a bug too)."),
        cluster: Optional[str] = typer.Option(None, "--cluster", metavar="NAME", help="Only this cluster's jobs."),
        until: Optional[str] = typer.Option(None, "--until", metavar="TIME", help="End of the window (ISO 8601; default now)."),
        format: ListFormat = typer.Option(ListFormat.table, "--format", "-f", metavar="FORMAT", help="table, json or csv (for a drain script)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to this file instead of standard output."),
        width: Optional[int] = typer.Option(None, "--width", min=40, max=400, metavar="COLUMNS", help="Table width."),
    ) -> None:
        """List repeat offenders: a node or GPU implicated in N jobs within D days, a link
        flapping across jobs.

        \b
        Example:
            crashscope fleet
            crashscope fleet --min-jobs 2 --days 14 --kind gpu
            crashscope fleet --format csv -o drain.csv
            crashscope fleet add /var/lib/crashscope/reports/*/report.json
        """
        if ctx.invoked_subcommand is not None:
            return
        from crashscope.fleet import FleetDB
        from crashscope.schema import CAUSES

        for k in kind or []:
            if k not in CULPRIT_KINDS:
                raise UsageError(f"--kind must be one of {', '.join(CULPRIT_KINDS)}, got {k!r}")
        for c in cause or []:
            if c not in CAUSES:
                raise UsageError(f"--cause: unknown cause {c!r}; known: {', '.join(CAUSES)}")
        if cause and all_causes:
            raise UsageError("--cause and --all-causes exclude each other")
        end = _parse_until(until)
        url = _url(db, config)
        out = open_output(output, [])
        try:
            with FleetDB(url, create=False) as fdb:
                rows = fdb.offenders(min_jobs=min_jobs, days=days, kinds=kind or CULPRIT_KINDS,
                                     causes=set(cause) if cause else None, all_causes=all_causes, cluster=cluster, until=end)
            title = f" (>= {min_jobs} jobs in {days:g} days)"
            text = offenders_text(rows, format.value, width, title=title)
            if out is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                out.write_text(text)
        finally:
            if out is not None:
                out.close()

    @fleet_app.command("add", epilog=epilog)
    def add(
        reports: list[Path] = typer.Argument(..., metavar="REPORT.json...", help="Report JSON files (crashscope analyze --format json, or an epilog's report.json)."),
        db: Optional[str] = typer.Option(None, "--db", metavar="URL|PATH", help=DB_HELP),
        config: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help=CONFIG_HELP),
    ) -> None:
        """Import existing reports into the fleet history (a job recorded again is replaced).

        \b
        Example:
            crashscope fleet add /var/lib/crashscope/reports/*/report.json
            crashscope fleet add report.json --db postgresql://crashscope@db01/fleet
        """
        from crashscope.fleet import FleetDB, end_time_of, load_report
        from crashscope.report.safe import escape_controls as esc

        url = _url(db, config)
        loaded = [(p, load_report(p)) for p in reports]  # every file checked before anything is written
        # Oldest first, so each report's history counts only the jobs before it.
        loaded.sort(key=lambda pr: end_time_of(pr[1]))
        with_history = 0
        with FleetDB(url) as fdb:
            for p, report in loaded:
                history = fdb.record(report, report_path=str(p.resolve()))
                with_history += bool(history)
                for h in history:
                    typer.echo(f"{esc(p, 200)}: {esc(h.get('key'), 200)}: {esc(h.get('advice'), 300)}")
        typer.echo(f"recorded {len(loaded)} report{'s' if len(loaded) != 1 else ''} ({with_history} with earlier jobs on the same culprit)", err=True)

    app.add_typer(fleet_app, name="fleet")


def _exit_help() -> str:
    from crashscope.cli import EXIT_HELP

    return EXIT_HELP
