"""`crashscope analyze`, `crashscope timeline` and `crashscope sources`.

Every option is validated BEFORE the analysis (time zone, sources, filters, the output
file), so a typo costs a second, not the minutes of a large job; errors are
:class:`crashscope.errors.CrashscopeError` (one line, exit 2).
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from crashscope.errors import EXIT_NOTHING_READABLE, InputError, UsageError


class Format(str, Enum):
    terminal = "terminal"
    json = "json"
    markdown = "markdown"
    html = "html"


FORMAT_HELP = "Output view: terminal, json, markdown, html (default: from the -o suffix .json/.md/.txt/.html, else terminal)."
TZ_HELP = "Time zone of local-time stamps (e.g. America/Chicago). Default: the job's, else UTC."
RULES_HELP = "A site's own rules folder, loaded on top of the shipped rules (repeatable; also $CRASHSCOPE_RULES)."


def _exit_help() -> str:
    from crashscope.cli import EXIT_HELP

    return EXIT_HELP


# --- validation (before any analysis) ----------------------------------------------------


def validate_tz(name: str | None, option: str = "--tz/--timezone") -> str | None:
    """A zone both zoneinfo and polars accept (polars rejects e.g. ``Factory``,
    ``posixrules``, ``localtime``, ``right/UTC`` that zoneinfo loads)."""
    if name is None:
        return None
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except Exception:
        raise UsageError(f"{option}: unknown time zone {name!r} (use an IANA name such as UTC or America/Chicago)") from None
    try:
        import polars as pl

        pl.Series([0]).cast(pl.Datetime("ns", "UTC")).dt.convert_time_zone(name)
    except Exception:
        raise UsageError(f"{option}: time zone {name!r} is not usable for timestamps (use an IANA name such as UTC or America/Chicago)") from None
    return name


def parse_overrides(values: list[str] | None) -> dict[str, str]:
    """``--source NAME=GLOB`` values as ``{glob: name}``, every NAME a registered source."""
    out: dict[str, str] = {}
    if not values:
        return out
    from crashscope.sources import SOURCES

    names = [s.name for s in SOURCES]
    for v in values:
        name, sep, glob = v.partition("=")
        if not sep or not name or not glob:
            raise UsageError(f"--source takes NAME=GLOB, got {v!r}")
        if name not in names:
            raise UsageError(f"--source: unknown source {name!r}; known: {', '.join(names)}")
        out[glob] = name
    return out


def check_input(path: Path) -> None:
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file or directory")
    if not os.path.exists(path):
        raise InputError(f"{path}: broken symbolic link")


def configure_rules(dirs: list[Path] | None) -> None:
    """``--rules DIR`` (repeatable): check each is a folder, add them on top of the shipped set."""
    from crashscope.engine.load import set_extra_rule_dirs

    for d in dirs or []:
        if not d.is_dir():
            raise UsageError(f"--rules: {d} is not a folder")
    set_extra_rule_dirs(list(dirs or []))


def open_output(output: Path | None, never_inside: list[Path]) -> Any:
    """The prepared :class:`SafeOutput` for ``-o`` (``None`` or ``-``: standard output)."""
    if output is None or str(output) == "-":
        return None
    from crashscope.report.output import SafeOutput

    return SafeOutput(output, never_inside=never_inside)


def redacting_wanted(flag: bool | None, map_path: Path | None, never_inside: list[Path]) -> bool:
    """:func:`crashscope.redact.redaction_wanted`; without ``--redact-map`` its answer (the
    flag, else the config's ``redact``) without importing the redactor, whose patterns cost
    a run that does not redact 0.04 s."""
    if map_path is not None:
        from crashscope.redact import redaction_wanted

        return redaction_wanted(flag, map_path, never_inside)
    if flag is not None:
        return flag
    from crashscope.config import load_config_or_defaults

    return bool(load_config_or_defaults()[0].redact)


def health_warnings() -> list[str]:
    """Loud degradations: no or broken rules, a classifier that failed to load."""
    from crashscope.health import component_warnings

    return component_warnings()


def _warn(messages: list[str]) -> None:
    from crashscope.report.safe import escape_controls

    for m in messages:
        print(f"crashscope: warning: {escape_controls(m, 500)}", file=sys.stderr)


def _emit(text: str, out: Any) -> None:
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        out.write_text(text)


class _Progress:
    """A rich progress bar on a TTY for large directories; silent otherwise. File names are
    data: shown escaped, never as rich markup."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}", markup=False, style="dim"), BarColumn(),
                                      TextColumn("{task.completed:,.0f} B", markup=False), TransferSpeedColumn(), transient=True)
            self._progress.start()
            self._task = self._progress.add_task("reading logs", total=None)
        return self

    def __call__(self, file: str, nbytes: int) -> None:
        if self._progress is not None:
            from crashscope.report.safe import escape_controls

            self._progress.update(self._task, advance=nbytes, description=escape_controls(file[-50:]))

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def profile_text(report: Any, result: Any, slowest: int = 5) -> str:
    """Where the time went: the stages, then per source the files, bytes and parse seconds
    (summed over the worker processes, so they can exceed the ingest's wall time)."""
    import resource
    from collections import defaultdict

    from crashscope.report.safe import escape_controls

    stages = (report.analysis or {}).get("stage_seconds") or {}
    lines = ["profile: " + "  ".join(f"{k} {v:.2f} s" for k, v in stages.items()) + f"  (total {(report.analysis or {}).get('seconds', 0):.2f} s)"]
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for f in result.files:
        row = per[f.kind]
        row[0] += 1
        row[1] += f.bytes
        row[2] += f.seconds
        row[3] += getattr(f, "cpu_seconds", 0.0)
    # CPU seconds beside wall seconds: on a shared machine the wall time grows with the
    # load, the CPU time much less (MB/s is per CPU second)
    lines.append(f"  {'source':<16} {'files':>7} {'MB':>9} {'parse s':>8} {'CPU s':>8} {'ms/file':>8} {'MB/CPU s':>9}")
    for kind, (n, b, s, c) in sorted(per.items(), key=lambda kv: -kv[1][3]):
        rate = f"{b / 1e6 / c:9.1f}" if c > 0 else f"{'-':>9}"
        lines.append(f"  {escape_controls(kind, 16):<16} {int(n):>7} {b / 1e6:>9.1f} {s:>8.2f} {c:>8.2f} {c / max(n, 1) * 1e3:>8.2f} {rate}")
    top = sorted(result.files, key=lambda f: -f.seconds)[:slowest]
    if top:
        lines.append("  slowest files: " + ", ".join(f"{escape_controls(f.file, 80)} {f.seconds:.2f} s" for f in top))
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    lines.append(f"  CPU: this process {me.ru_utime + me.ru_stime:.2f} s, worker processes {kids.ru_utime + kids.ru_stime:.2f} s; "
                 f"peak RSS {me.ru_maxrss / 1024:.0f} MB (workers' {kids.ru_maxrss / 1024:.0f} MB)")
    return "\n".join(lines) + "\n"


def _stage(name: str) -> Any:
    """A stage function of :mod:`crashscope.pipeline` (looked up at call time)."""
    try:
        from crashscope import pipeline
    except ImportError as e:  # a source or stage module failed to import
        from crashscope.errors import EXIT_INTERNAL, CrashscopeError

        raise CrashscopeError(f"crashscope is broken: a module failed to import ({e}); reinstall it", exit_code=EXIT_INTERNAL) from None
    return getattr(pipeline, name)


def _run_analysis(directory: Path, **kw: Any) -> Any:
    return _stage("analyze")(directory, **kw)


def _nothing_readable(result: Any) -> bool:
    return not result.files or all(f.kind == "unreadable" for f in result.files)


def register(app: typer.Typer) -> None:
    epilog = _exit_help()

    @app.command(epilog=epilog)
    def analyze(
        directory: Path = typer.Argument(..., help="The failed job's log directory (or one file / tar archive).", show_default=False, metavar="DIRECTORY"),
        format: Optional[Format] = typer.Option(None, "--format", "-f", help=FORMAT_HELP, show_default=False, metavar="VIEW"),
        tz: Optional[str] = typer.Option(None, "--tz", "--timezone", help=TZ_HELP, metavar="ZONE"),
        ranks: Optional[int] = typer.Option(None, "--ranks", min=1, metavar="N", help="Expected world size, when the logs do not say."),
        source: Optional[list[str]] = typer.Option(None, "--source", metavar="NAME=GLOB", help="Force a source for files: NAME=GLOB (repeatable; `crashscope sources` lists the names)."),
        rules: Optional[list[Path]] = typer.Option(None, "--rules", help=RULES_HELP, metavar="DIR"),
        experimental: bool = typer.Option(False, "--experimental", help="Also run experimental rules (they never decide the verdict)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the report to this file (its suffix picks the view; never inside DIRECTORY). '-' is standard output."),
        fail_on_crash: bool = typer.Option(False, "--fail-on-crash", help="Exit 1 when a cause other than none is found."),
        width: Optional[int] = typer.Option(None, "--width", min=40, max=400, metavar="COLUMNS", help="Terminal view width (default: the terminal's, or $COLUMNS, else 100)."),
        full: bool = typer.Option(False, "--full", help="Terminal view: every section in full (default: the verdict plus capped sections)."),
        budget_s: Optional[float] = typer.Option(None, "--budget-s", min=0.0, metavar="SECONDS", help="Stop reading logs after this long; the report is partial and says what was skipped."),
        max_memory: Optional[str] = typer.Option(None, "--max-memory", metavar="SIZE", help="Stop reading logs once the process uses this much memory (RSS; e.g. 2G, 512M)."),
        fleet: bool = typer.Option(False, "--fleet", help="Record the report in the fleet history and show earlier jobs on its culprit (also when the config sets fleet_url; docs/fleet.md)."),
        redact: Optional[bool] = typer.Option(None, "--redact/--no-redact", help="Replace host names, IPs, users, e-mails, home paths and secrets by stable placeholders (host-3, ip-2, user-1, secret-4) in every view (default: the config's redact; docs/redaction.md)."),
        redact_map: Optional[Path] = typer.Option(None, "--redact-map", metavar="FILE", help="Write the placeholder -> original mapping to FILE (mode 0600, never inside DIRECTORY); implies --redact."),
        profile: bool = typer.Option(False, "--profile", help="Also print where the time went (stages, each source, the slowest files) on standard error."),
    ) -> None:
        """Attribute a failed job's crash to a cause, with evidence at file:line.

        \b
        Example:
            crashscope analyze /scratch/jobs/123456/logs
            crashscope analyze logs.tar.gz --format json > report.json
            crashscope analyze logs/ -o report.md
        """
        from crashscope.report.render import UnknownView, clamp_width, renderer_for

        check_input(directory)
        validate_tz(tz)
        overrides = parse_overrides(source)
        from crashscope.ingest import parse_size

        try:
            max_memory_b = parse_size(max_memory) if max_memory is not None else None
        except ValueError as e:
            raise UsageError(f"--max-memory: {e}") from None
        configure_rules(rules)
        try:
            view, render = renderer_for(format.value if format else None, str(output) if output is not None and str(output) != "-" else None)
        except UnknownView as e:
            raise UsageError(str(e)) from None
        from crashscope.cli.fleet_cmd import fleet_config, record_in_fleet

        fleet_cfg = fleet_config(fleet)
        redacting = redacting_wanted(redact, redact_map, [directory])
        out = open_output(output, [directory])
        try:
            with _Progress(view == "terminal" and out is None) as progress:
                report, _, result = _run_analysis(directory, tz=tz, expected_ranks=ranks, overrides=overrides, progress=progress, include_experimental=experimental, budget_s=budget_s, max_memory=max_memory_b)
            extra = health_warnings()
            if extra:
                _warn(extra)
                report.warnings.extend(w for w in extra if w not in report.warnings)
            if fleet_cfg is not None:
                record_in_fleet(report, fleet_cfg, output)
            if redacting:
                from crashscope.redact import redact_report

                report, redactor = redact_report(report)
                if redact_map is not None:
                    redactor.write_map(redact_map)
            if view == "terminal":
                color = out is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
                text = render(report, width=clamp_width(width), color=color, full=full)
            else:
                text = render(report)
            _emit(text, out)
        finally:
            if out is not None:
                out.close()
        if profile:
            print(profile_text(report, result), file=sys.stderr, end="")
        if _nothing_readable(result):
            raise typer.Exit(EXIT_NOTHING_READABLE)
        if fail_on_crash and report.cause != "none":
            raise typer.Exit(1)

    @app.command(epilog=epilog)
    def timeline(
        directory: Path = typer.Argument(..., help="The job's log directory.", show_default=False, metavar="DIRECTORY"),
        host: Optional[list[str]] = typer.Option(None, "--host", metavar="HOST", help="Only these hosts (repeatable)."),
        rank: Optional[list[int]] = typer.Option(None, "--rank", min=0, metavar="RANK", help="Only these global ranks (repeatable)."),
        kind: Optional[list[str]] = typer.Option(None, "--kind", metavar="KIND", help="Only these event kinds (repeatable)."),
        severity: Optional[str] = typer.Option(None, "--severity", metavar="LEVEL", help="Minimum severity: debug|info|warning|error|critical."),
        since: Optional[str] = typer.Option(None, "--since", metavar="TIME", help="Start of the window (ISO 8601; UTC unless it has a zone)."),
        until: Optional[str] = typer.Option(None, "--until", metavar="TIME", help="End of the window."),
        around: Optional[str] = typer.Option(None, "--around", metavar="TIME", help="Center of a window (ISO 8601)."),
        window: float = typer.Option(300.0, "--window", min=0.0, metavar="SECONDS", help="Half-width of --around in seconds."),
        tz: Optional[str] = typer.Option(None, "--tz", "--timezone", help=TZ_HELP, metavar="ZONE"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Export to .parquet, .csv or .jsonl instead of printing (never inside DIRECTORY)."),
        limit: int = typer.Option(200, "--limit", min=0, metavar="N", help="Rows to print (exports are not limited)."),
        width: Optional[int] = typer.Option(None, "--width", min=40, max=400, metavar="COLUMNS", help="Table width (default: the terminal's, or $COLUMNS, else 100)."),
    ) -> None:
        """Show or export the unified, clock-aligned timeline of every event.

        \b
        Example:
            crashscope timeline logs/ --severity error --around 2026-09-14T08:12:44Z --window 60
            crashscope timeline logs/ --kind xid --kind network_error -o events.parquet
        """
        from crashscope.schema import Kind
        from crashscope.sources.base import iso_to_ns
        from crashscope.timeline import SEVERITY_ORDER

        check_input(directory)
        validate_tz(tz)
        kinds = [k.value for k in Kind]
        for k in kind or []:
            if k not in kinds:
                raise UsageError(f"--kind: unknown event kind {k!r}; known: {', '.join(kinds)}")
        if severity is not None and severity not in SEVERITY_ORDER:
            raise UsageError(f"--severity must be one of {', '.join(SEVERITY_ORDER)}, got {severity!r}")
        stamps: dict[str, int] = {}
        for opt, text in (("--since", since), ("--until", until), ("--around", around)):
            if text is not None:
                ns, _ = iso_to_ns(text)
                if ns is None:
                    raise UsageError(f"{opt}: not an ISO 8601 time: {text!r}")
                stamps[opt] = ns
        export = None
        if output is not None:
            export = output.suffix.lower()
            if export not in (".parquet", ".csv", ".jsonl", ".ndjson"):
                raise UsageError(f"--output must end in .parquet, .csv or .jsonl, got {output.name!r}")
        out = open_output(output, [directory])
        try:
            import polars as pl

            # The timeline alone: no rules, analyses, verdict or report.
            tl = _stage("load_timeline")(directory, tz=tz).timeline
            ev = tl.events
            if host:
                known = set(ev["host"].drop_nulls().unique().to_list()) | set(tl.hosts)
                unknown = [h for h in host if h not in known]
                if unknown:
                    from crashscope.report.safe import escape_controls

                    shown = ", ".join(escape_controls(h, 60) for h in sorted(known)[:20]) or "none"
                    raise UsageError(f"--host: no host {escape_controls(unknown[0], 80)!r} in this job (hosts: {shown})")
                ev = ev.filter(pl.col("host").is_in(host))
            if rank:
                ev = ev.filter(pl.col("rank").is_in(rank))
            if kind:
                ev = ev.filter(pl.col("kind").cast(pl.String).is_in(kind))
            if severity:
                keep = [s for s, v in SEVERITY_ORDER.items() if v >= SEVERITY_ORDER[severity]]
                ev = ev.filter(pl.col("severity").cast(pl.String).is_in(keep))

            def at(ns: int) -> pl.Expr:
                return pl.lit(ns).cast(pl.Datetime("ns", "UTC"))

            if "--around" in stamps:
                ns, half = stamps["--around"], int(window * 1e9)
                ev = ev.filter(pl.col("time").is_between(at(ns - half), at(ns + half)))
            if "--since" in stamps:
                ev = ev.filter(pl.col("time") >= at(stamps["--since"]))
            if "--until" in stamps:
                ev = ev.filter(pl.col("time") <= at(stamps["--until"]))
            if out is not None:
                frame = ev
                if export == ".parquet":
                    out.write_with(frame.write_parquet)
                elif export == ".csv":
                    out.write_with(frame.write_csv)
                else:
                    out.write_with(frame.write_ndjson)
                typer.echo(f"wrote {ev.height} events to {output}", err=True)
                return
            sys.stdout.write(_timeline_table(ev, limit, width))
        finally:
            if out is not None:
                out.close()

    @app.command(epilog=epilog)
    def sources(
        directory: Optional[Path] = typer.Argument(None, help="If given: which files each source claimed, with what confidence.", show_default=False, metavar="[DIRECTORY]"),
        format: Optional[Format] = typer.Option(None, "--format", "-f", help=FORMAT_HELP, show_default=False, metavar="VIEW"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to this file (its suffix picks the view) instead of standard output."),
        width: Optional[int] = typer.Option(None, "--width", min=40, max=400, metavar="COLUMNS", help="Table width (default: the terminal's)."),
    ) -> None:
        """List the known input sources, or which source claimed each file of a directory.

        \b
        Example:
            crashscope sources
            crashscope sources /scratch/jobs/123456/logs --format json
            crashscope sources /scratch/jobs/123456/logs -o claims.md
        """
        from crashscope.report.render import UnknownView, renderer_for

        try:
            view, _ = renderer_for(format.value if format else None, str(output) if output is not None and str(output) != "-" else None)
        except UnknownView as e:
            raise UsageError(str(e)) from None
        if view == "html":
            raise UsageError("sources has no html view; use terminal, json or markdown")
        if directory is not None:
            check_input(directory)
        out = open_output(output, [directory] if directory is not None else [])
        try:
            _emit(_sources_text(directory, view, width), out)
        finally:
            if out is not None:
                out.close()


# --- views of the timeline and the source claims --------------------------------------------


def _console(width: int | None) -> Any:
    import io

    from rich.console import Console

    from crashscope.report.render import clamp_width

    buf = io.StringIO()
    return buf, Console(file=buf, width=clamp_width(width), color_system=None, markup=False, highlight=False, emoji=False)


def _timeline_table(ev: Any, limit: int, width: int | None) -> str:
    from rich.table import Table
    from rich.text import Text

    from crashscope.report.safe import escape_controls as esc

    buf, con = _console(width)
    t = Table(show_lines=False, expand=True)
    for c in ("time (UTC)", "quality", "host", "rank", "kind", "severity", "message", "file:line"):
        t.add_column(c, overflow="fold")
    for r in ev.head(limit).iter_rows(named=True):
        ts = r["time"].strftime("%Y-%m-%d %H:%M:%S.%f")[:23] if r["time"] else ""
        loc = f"{esc(r['file'])}:{r['line']}" if r["line"] else esc(r["file"])
        cells = [ts, esc(r["time_quality"]), esc(r["host"]), "" if r["rank"] is None else str(r["rank"]), esc(r["kind"]), esc(r["severity"]), esc(r["message"], 160), loc]
        t.add_row(*(Text(c) for c in cells))
    con.print(t)
    if ev.height > limit:
        con.print(Text(f"{ev.height - limit} more events (use --limit or --output)"))
    return buf.getvalue()


def _sources_text(directory: Path | None, view: str, width: int | None) -> str:
    import json
    from dataclasses import asdict

    from rich.table import Table
    from rich.text import Text

    from crashscope.report.safe import escape_controls as esc
    from crashscope.report.safe import json_text, md_code, md_text
    from crashscope.sources import SOURCES

    if directory is None:
        rows = [{"name": s.name, "description": s.description, "filename_hints": list(s.filename_hints)} for s in SOURCES]
        if view == "json":
            return json_text(json.dumps(rows, indent=2, ensure_ascii=False)) + "\n"
        if view == "markdown":
            lines = ["# crashscope sources", "", "| name | reads | name hints |", "|---|---|---|"]
            lines += [f"| {md_text(r['name'])} | {md_text(r['description'])} | {' '.join(md_code(h, table=True) for h in r['filename_hints'])} |" for r in rows]
            return "\n".join(lines) + "\n"
        buf, con = _console(width)
        t = Table(title="crashscope sources")
        for c in ("name", "reads", "name hints"):
            t.add_column(c)
        for r in rows:
            t.add_row(Text(esc(r["name"])), Text(esc(r["description"])), Text(esc(" ".join(r["filename_hints"]))))
        con.print(t)
        return buf.getvalue()
    from crashscope.ingest import ingest

    result = ingest(directory)
    if view == "json":
        return json_text(json.dumps({"files": [asdict(f) for f in result.files], "warnings": result.warnings}, indent=2, ensure_ascii=False)) + "\n"
    if view == "markdown":
        lines = [f"# Files under {md_code(str(directory))}", "", "| file | source | confidence | runner-up | events | lines | warnings | note |", "|---|---|---|---|---|---|---|---|"]
        for f in result.files:
            ru = f"{md_text(f.runner_up)} {f.runner_up_confidence:.2f}" if f.runner_up else ""
            lines.append(f"| {md_code(f.file, table=True)} | {md_text(f.kind)} | {f.confidence:.2f} | {ru} | {f.events} | {f.lines} | {f.warnings} | {md_text(f.note or '')} |")
        if result.warnings:
            lines += ["", f"## Warnings ({len(result.warnings)})", ""] + [f"- {md_text(w, 1000)}" for w in result.warnings[:100]]
        return "\n".join(lines) + "\n"
    buf, con = _console(width)
    t = Table(title=Text(f"files under {esc(str(directory))}"))
    for c in ("file", "source", "confidence", "runner-up", "events", "lines", "warnings", "note"):
        t.add_column(c, overflow="fold")
    for f in result.files:
        ru = f"{esc(f.runner_up)} {f.runner_up_confidence:.2f}" if f.runner_up else ""
        cells = [esc(f.file), esc(f.kind), f"{f.confidence:.2f}", ru, str(f.events), str(f.lines), str(f.warnings), esc(f.note or "")]
        t.add_row(*(Text(c) for c in cells))
    con.print(t)
    for w in result.warnings[:30]:
        con.print(Text("warning ") + Text(esc(w, 1000)))
    return buf.getvalue()
