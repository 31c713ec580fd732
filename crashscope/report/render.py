"""Views of a ``Report``: pure functions from the result object to text."""

from __future__ import annotations

import io
import json
from typing import Any

from crashscope.report.model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"


def _loc(item: dict[str, Any] | Any) -> str:
    f = item["file"] if isinstance(item, dict) else item.file
    ln = item["line"] if isinstance(item, dict) else item.line
    return f"{f}:{ln}" if ln else f


def render_terminal(report: Report, *, width: int = 100, color: bool = False) -> str:
    """Rich rendering; ``color=False`` gives plain text (goldens, pipes)."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color, highlight=False)
    job = report.job
    head = Text()
    head.append(f"{report.cause}", style="bold red" if report.cause not in ("none", "unknown") else "bold")
    head.append(f"  confidence {report.confidence:.2f}")
    if report.alternatives:
        alts = ", ".join(f"{a['cause']} {a['probability']:.2f}" for a in report.alternatives[:3])
        head.append(f"   (alternatives: {alts})", style="dim")
    head.append(f"\njob {job.get('id') or '?'}: {len(job.get('nodes') or [])} nodes, {job.get('ranks') or '?'} ranks")
    if report.summary:
        head.append(f"\n{report.summary}")
    con.print(Panel(head, title="crashscope verdict", expand=True))

    imp = report.implicated
    if imp["nodes"] or imp["ranks"] or imp["gpus"]:
        gpus = ", ".join(f"{g['node']} GPU {g['index']}" if g.get("index") is not None else f"{g['node']} {g.get('pci')}" for g in imp["gpus"])
        con.print(f"[bold]Implicated[/bold]  nodes: {', '.join(imp['nodes']) or '-'}   ranks: {_ranks(imp['ranks'])}   gpus: {gpus or '-'}")
    ff = report.first_failure
    if ff:
        con.print(f"[bold]First failure[/bold]  {ff.get('time') or '?'}  {ff.get('node') or '?'} rank {ff.get('rank') if ff.get('rank') is not None else '?'}  [{ff.get('source')}]")
        con.print(f"  {ff.get('message', '')[:300]}")
        if ff.get("file"):
            con.print(f"  at {_loc(ff)}", style="dim")

    if report.evidence:
        t = Table(title="Evidence", show_lines=False, expand=True)
        t.add_column("time (UTC)", no_wrap=True)
        t.add_column("where", no_wrap=True)
        t.add_column("rule / role")
        t.add_column("line", overflow="fold")
        for e in report.evidence[:15]:
            where = f"{e.node or '?'}" + (f" r{e.rank}" if e.rank is not None else "")
            t.add_row((e.time or "")[:23], where, f"{e.rule}\n({e.role})", f"{e.message[:200]}\n[dim]{e.file}:{e.line}[/dim]")
        con.print(t)

    if report.symptoms:
        t = Table(title="Collapsed symptoms", expand=True)
        t.add_column("count", justify="right")
        t.add_column("on")
        t.add_column("symptom", overflow="fold")
        t.add_column("not reported by", overflow="fold")
        for s in report.symptoms[:8]:
            t.add_row(str(s["count"]), f"{s['n_ranks']} ranks" if s["n_ranks"] else f"{len(s['hosts'])} hosts", f"{s['kind']}: {s['first']['message'][:120]}\n[dim]first: {s['first']['file']}:{s['first']['line']}[/dim]", _ranks(s.get("missing_ranks") or []))
        con.print(t)

    if report.timeline_excerpt:
        t = Table(title="Timeline around the first failure", expand=True)
        t.add_column("time (UTC)", no_wrap=True)
        t.add_column("where", no_wrap=True)
        t.add_column("kind")
        t.add_column("message", overflow="fold")
        for e in report.timeline_excerpt:
            where = f"{e.get('node') or '?'}" + (f" r{e['rank']}" if e.get("rank") is not None else "")
            t.add_row((e.get("time") or "")[:23], where, e["kind"], f"{e['message'][:160]}")
        con.print(t)

    if report.co_occurring:
        con.print("[bold]Also seen in the correlation window[/bold]")
        for c in report.co_occurring:
            con.print(f"  - {c['cause']}: {c['rule']} on {', '.join(c.get('nodes') or []) or '?'} ({c.get('file')}:{c.get('line')})")
    if report.actions:
        con.print("[bold]Recommended actions[/bold]")
        for a in report.actions:
            con.print(f"  - {a}")
    if report.missing:
        con.print("[bold]Missing data (lowers confidence)[/bold]")
        for m in report.missing:
            con.print(f"  - {m}")
    cov = report.coverage
    if cov:
        con.print(
            f"[bold]Coverage[/bold]  {cov.get('files', 0)} files ({cov.get('recognized', 0)} recognized, "
            f"{cov.get('unrecognized', 0)} unrecognized, {cov.get('unreadable', 0)} unreadable), "
            f"{cov.get('events', 0)} events, hosts {len(cov.get('hosts', {}))}, ranks seen {cov.get('ranks_seen', 0)}/{cov.get('ranks_expected') or '?'}"
        )
    if report.warnings:
        con.print(f"[bold]Warnings[/bold] ({len(report.warnings)})")
        for w in report.warnings[:12]:
            con.print(f"  - {w}", markup=False)
        if len(report.warnings) > 12:
            con.print(f"  ... {len(report.warnings) - 12} more (see --format json)")
    return buf.getvalue()


def _ranks(ranks: list[int]) -> str:
    from crashscope.timeline import _compress_ints

    return _compress_ints(ranks) if ranks else "-"


def render_markdown(report: Report) -> str:
    """For tickets: plain Markdown, evidence as file:line, no colors."""
    job = report.job
    out = [
        f"# crashscope: `{report.cause}` (confidence {report.confidence:.2f})",
        "",
        f"Job **{job.get('id') or '?'}**, {len(job.get('nodes') or [])} nodes, {job.get('ranks') or '?'} ranks.",
    ]
    if report.summary:
        out += ["", report.summary]
    imp = report.implicated
    out += [
        "",
        "| implicated | |",
        "|---|---|",
        f"| nodes | {', '.join(imp['nodes']) or '-'} |",
        f"| ranks | {_ranks(imp['ranks'])} |",
        "| GPUs | " + (", ".join(f"{g['node']}:{g.get('index')}" for g in imp["gpus"]) or "-") + " |",
    ]
    if report.alternatives:
        out += ["", "Alternatives: " + ", ".join(f"`{a['cause']}` {a['probability']:.2f}" for a in report.alternatives)]
    ff = report.first_failure
    if ff:
        out += ["", "## First failure", "", f"{ff.get('time')} on {ff.get('node')} rank {ff.get('rank')} ({ff.get('source')}):", "", "```", ff.get("message", ""), "```"]
        if ff.get("file"):
            out.append(f"at `{_loc(ff)}`")
    if report.evidence:
        out += ["", "## Evidence", "", "| time (UTC) | node | rank | rule | file:line | line |", "|---|---|---|---|---|---|"]
        for e in report.evidence[:25]:
            msg = e.message[:160].replace("|", "\\|")
            out.append(f"| {e.time or ''} | {e.node or ''} | {'' if e.rank is None else e.rank} | {e.rule} ({e.role}) | `{e.file}:{e.line}` | {msg} |")
    if report.symptoms:
        out += ["", "## Collapsed symptoms", ""]
        for s in report.symptoms[:8]:
            miss = f"; not reported by ranks {_ranks(s['missing_ranks'])}" if s.get("missing_ranks") else ""
            out.append(f"- {s['count']}x on {s['n_ranks']} ranks: {s['kind']} `{s['first']['message'][:120]}` (first `{s['first']['file']}:{s['first']['line']}`){miss}")
    if report.actions:
        out += ["", "## Recommended actions", ""] + [f"- {a}" for a in report.actions]
    if report.missing:
        out += ["", "## Missing data", ""] + [f"- {m}" for m in report.missing]
    if report.warnings:
        out += ["", f"## Warnings ({len(report.warnings)})", ""] + [f"- {w}" for w in report.warnings[:30]]
    return "\n".join(out) + "\n"
