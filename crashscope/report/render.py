"""Views of a ``Report``: pure functions from the result object to text.

``RENDERERS`` maps a view name to its function; :func:`renderer_for` picks one from
``--format`` or an output file's suffix. Every value that can come from a log (messages,
file names, host names, and anything built from them) goes through
:mod:`crashscope.report.safe`; no view parses rich markup or lets a control character,
a line break or Markdown structure out of a value.
"""

from __future__ import annotations

import io
from typing import Any, Callable

from crashscope.hostlist import compress_ints
from crashscope.report.model import FIRST_FAILURE_KEYS, Report
from crashscope.report.safe import (
    escape_controls,
    json_dumps,
    json_text,
    md_code,
    md_fence,
    md_text,
)

UNKNOWN = "unknown"

# Default width of the terminal view when nothing better is known, and its bounds.
DEFAULT_WIDTH = 100
MIN_WIDTH = 40
MAX_WIDTH = 400
# Caps of the compact terminal view (``--full`` shows everything): the verdict stays on
# screen (about 40 lines on an 80-column terminal).
COMPACT = {"evidence": 4, "symptoms": 3, "co_occurring": 3, "actions": 3, "missing": 3, "warnings": 3, "excerpt": 0}
# The compact view's screen: past this many lines the caps below are tightened, least
# needed section first, until it fits (or nothing is left to tighten).
COMPACT_LINES = 45
TIGHTEN = (("actions", 2), ("co_occurring", 1), ("symptoms", 2), ("warnings", 2), ("missing", 2),
           ("evidence", 3), ("actions", 1), ("symptoms", 1), ("warnings", 1))
FULL_MESSAGE = 600
COMPACT_MESSAGE = 200


def render_json(report: Report, **_: Any) -> str:
    return json_text(json_dumps(report.to_dict())) + "\n"


# --- small helpers -------------------------------------------------------------------------


def _known(v: Any) -> bool:
    return v is not None and v != "" and v != "?"


FIELD_LIMIT = 300  # host names, file names, ids, rule names: cut here in every view


def _t(v: Any, limit: int | None = FIELD_LIMIT) -> str:
    return escape_controls(v, limit)


def _mdt(v: Any, limit: int | None = FIELD_LIMIT) -> str:
    return md_text(v, limit)


def _mdc(v: Any, limit: int | None = FIELD_LIMIT, *, table: bool = False) -> str:
    return md_code(v, limit, table=table)


def _time(v: Any, *, short: bool = False) -> str:
    """ISO stamps to the millisecond: ``2026-08-21T19:58:29.000Z``."""
    if not _known(v):
        return ""
    s = _t(v)
    if len(s) >= 23 and s[10:11] == "T" and s.endswith("Z"):
        s = s[:23] + "Z"
    return s


def _loc(file: Any, line: Any) -> str:
    if not _known(file):
        return ""
    return f"{_t(file)}:{line}" if isinstance(line, int) and not isinstance(line, bool) and line > 0 else _t(file)


def _gpu(g: Any) -> str:
    if not isinstance(g, dict):
        return ""
    parts = []
    if _known(g.get("node")):
        parts.append(_t(g["node"]))
    if g.get("index") is not None:
        parts.append(f"GPU {_t(g['index'])}")
    elif _known(g.get("pci")):
        parts.append(f"GPU {_t(g['pci'])}")
    return " ".join(parts)


def _where(node: Any, rank: Any, gpu_index: Any = None) -> str:
    parts = []
    if _known(node):
        parts.append(_t(node))
    if rank is not None:
        parts.append(f"rank {_t(rank)}")
    if gpu_index is not None:
        parts.append(f"GPU {_t(gpu_index)}")
    return " ".join(parts)


def _first_failure(report: Report) -> dict[str, Any] | None:
    """The first failure as the JSON has it (the views escape each value as they write it)."""
    ff = report.first_failure
    return ff.to_dict(FIRST_FAILURE_KEYS) if ff is not None else None


def _ranks(ranks: list[Any]) -> str:
    return compress_ints(ranks)


def _job_line(job: dict[str, Any]) -> str:
    parts = []
    jid = job.get("id")
    parts.append(f"Job {_t(jid)}" if _known(jid) else "Job (id unknown)")
    nodes = job.get("nodes") or []
    if nodes:
        parts.append(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}")
    ranks = job.get("ranks")
    if _known(ranks) and ranks:
        parts.append(f"{_t(ranks)} ranks")
    return " · ".join(parts)


def _culprit(imp: dict[str, Any]) -> str:
    nodes = [_t(n) for n in imp.get("nodes") or [] if _known(n)]
    ranks = _ranks(imp.get("ranks") or [])
    raw = [g for g in imp.get("gpus") or [] if isinstance(g, dict)]
    if len(nodes) == 1 and all(_t(g.get("node")) == nodes[0] for g in raw):
        raw = [{k: v for k, v in g.items() if k != "node"} for g in raw]  # "GPU 0" of that node
    gpus = [g for g in (_gpu(g) for g in raw) if g]
    parts = []
    if nodes:
        parts.append(("node " if len(nodes) == 1 else "nodes ") + ", ".join(nodes[:6]) + (f" (+{len(nodes) - 6})" if len(nodes) > 6 else ""))
    if ranks:
        parts.append(("rank " if "," not in ranks and "-" not in ranks else "ranks ") + ranks)
    if gpus:
        parts.append(", ".join(gpus[:4]) + (f" (+{len(gpus) - 4})" if len(gpus) > 4 else ""))
    return " · ".join(parts)


def _symptom_on(s: dict[str, Any]) -> str:
    n = s.get("n_ranks") or 0
    if n:
        return f"on {n} rank{'s' if n != 1 else ''}"
    hosts = s.get("hosts") or []
    if hosts:
        return f"on {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
    return ""


def _history_line(h: Any, esc: Callable[..., str]) -> str:
    """A fleet history entry (crashscope.fleet): "node017 GPU 3: third Xid 79 in 5 days: drain (jobs ...)"."""
    if not isinstance(h, dict):
        return esc(h)
    jobs = [esc(j.get("job"), 40) for j in h.get("jobs") or [] if isinstance(j, dict) and _known(j.get("job"))]
    more = f" (+{len(jobs) - 5})" if len(jobs) > 5 else ""
    return f"{esc(h.get('key'))}: {esc(h.get('advice'), 300)}" + (f" (earlier: jobs {', '.join(jobs[:5])}{more})" if jobs else "")


def _repro_lines(r: Any, esc: Callable[..., str]) -> list[str]:
    """`crashscope repro`'s verdict: the headline, then one line per run with its numbers."""
    if not isinstance(r, dict):
        return [esc(r)]
    imp_raw, plan_raw = r.get("implicated"), r.get("plan")
    imp: dict[str, Any] = imp_raw if isinstance(imp_raw, dict) else {}
    named = [esc(n) for n in imp.get("nodes") or []] or [f"rank {esc(x)}" for x in imp.get("ranks") or []]
    links = [f"{esc(lk['between'][0])}-{esc(lk['between'][1])}" for lk in r.get("links") or []
             if isinstance(lk, dict) and isinstance(lk.get("between"), list) and len(lk["between"]) == 2]
    plan: dict[str, Any] = plan_raw if isinstance(plan_raw, dict) else {}
    head = f"{esc(r.get('verdict'))}" + (f": {', '.join(named)}" if named else "") + (f"; link {', '.join(links)}" if links else "")
    head += f" ({esc(plan.get('op'))} {esc(plan.get('bytes'))} bytes, {esc(plan.get('backend'))}, {esc(r.get('time'))})" if plan else ""
    out = [head] + ([esc(r.get("reason"), 300)] if _known(r.get("reason")) else [])
    for run in (r.get("runs") or [])[:12]:
        if not isinstance(run, dict):
            continue
        bw = run.get("busbw")
        num = f"busbw {float(bw):.3g} GB/s, {float(run.get('time') or 0) * 1e3:.3g} ms" if isinstance(bw, (int, float)) else "no numbers"
        err = f": {esc(run.get('error'), 160)}" if _known(run.get("error")) else ""
        out.append(f"{esc(run.get('purpose'))} {esc(','.join(str(u) for u in run.get('units') or []), 80)}: {esc(run.get('status'))}, {num}{err}")
    return out


# --- terminal ------------------------------------------------------------------------------


def _layer_loc(row: dict[str, Any]) -> str:
    ev = row.get("evidence") or []
    first = ev[0] if ev and isinstance(ev[0], dict) else {}
    return _loc(first.get("file"), first.get("line"))


def clamp_width(width: int | None) -> int:
    """The terminal view's width: ``width`` if given, else the terminal's (``COLUMNS`` or the
    tty size, else :data:`DEFAULT_WIDTH`), bounded to ``MIN_WIDTH..MAX_WIDTH``."""
    if width is None:
        import shutil

        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, int(width)))


def render_terminal(report: Report, *, width: int | None = DEFAULT_WIDTH, color: bool = False, full: bool = False) -> str:
    """Plain text for a terminal (``color=True`` adds ANSI styles made here, never from data).

    The verdict (cause, confidence, culprit, first failure, summary) comes first; the
    sections after it are capped unless ``full``, and capped harder while the compact view
    runs past ``COMPACT_LINES``."""
    if full:
        return _terminal(report, width, color, full, {k: None for k in COMPACT})
    caps: dict[str, int | None] = dict(COMPACT)
    text = _terminal(report, width, color, full, caps)
    for name, cap in TIGHTEN:
        if text.count("\n") <= COMPACT_LINES:
            break
        if (caps[name] or 0) > cap:
            caps[name] = cap
            text = _terminal(report, width, color, full, caps)
    return text


def _terminal(report: Report, width: int | None, color: bool, full: bool, caps: dict[str, int | None]) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    w = clamp_width(width)
    buf = io.StringIO()
    con = Console(file=buf, width=w, color_system="standard" if color else None, force_terminal=color,
                  highlight=False, markup=False, emoji=False, legacy_windows=False, soft_wrap=False)
    msg_limit = FULL_MESSAGE if full else COMPACT_MESSAGE
    hidden: list[str] = []

    def line(*parts: tuple[str, str] | str, wrap: bool = False, indent: int = 0) -> None:
        t = Text()
        for p in parts:
            if isinstance(p, tuple):
                t.append(p[0], style=p[1])
            else:
                t.append(p)
        if wrap and indent:  # hanging indent for folded lines
            g = Table.grid(padding=0)
            g.add_column(width=indent, no_wrap=True)
            g.add_column(overflow="fold")
            g.add_row(Text(" " * indent), t)
            con.print(g)
            return
        con.print(Text(" " * indent) + t, crop=True, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")

    def bullet(text: str, indent: int = 2, mark: str = "- ") -> None:
        g = Table.grid(padding=0)
        g.add_column(width=indent + len(mark), no_wrap=True)
        g.add_column(overflow="fold")
        g.add_row(Text(" " * indent + mark), Text(text))
        con.print(g)

    def capped(name: str, items: list[Any]) -> list[Any]:
        cap = caps[name]
        if cap is not None and len(items) > cap:
            hidden.append(f"{len(items) - cap} {name.replace('_', '-')}")
            return items[:cap]
        return items

    cause = _t(report.cause) or UNKNOWN
    bad = cause not in ("none", UNKNOWN)
    head: list[tuple[str, str] | str] = [("crashscope: ", "bold"), (cause, "bold red" if bad else "bold"), f"  confidence {report.confidence:.2f}"]
    line(*head)
    if report.alternatives:
        alts = ", ".join(f"{_t(a.get('cause'))} {float(a.get('probability') or 0):.2f}" for a in report.alternatives[:3] if isinstance(a, dict))
        line(("alternatives: ", "dim"), (alts, "dim"), indent=2)
    line(_job_line(report.job or {}))
    culprit = _culprit(report.implicated.to_dict())
    if culprit:
        line(("Culprit: ", "bold"), culprit)
    elif bad:
        line(("Culprit: ", "bold"), UNKNOWN)
    ff = _first_failure(report)
    if ff:
        where = _where(ff.get("node"), ff.get("rank"))
        src = _t(ff.get("source")) if _known(ff.get("source")) else ""
        head2: list[Any] = [("First failure: ", "bold"), _time(ff.get("time")) or "time unknown"]
        if where:
            head2.append(f"  {where}")
        if src:
            head2.append((f"  ({src})", "dim"))
        line(*head2)
        if _known(ff.get("message")):
            line(_t(ff.get("message"), msg_limit), indent=2, wrap=full)
        loc = _loc(ff.get("file"), ff.get("line"))
        if loc:
            line(("at " + loc, "dim"), indent=2)
    if report.summary:
        con.print(Text(_t(report.summary, 2000)))
    if report.history:
        line(("Fleet history", "bold"), " (earlier jobs on the same culprit)")
        for h in report.history[: None if full else 3]:
            bullet(_history_line(h, _t))
        if not full and len(report.history) > 3:
            hidden.append(f"{len(report.history) - 3} fleet-history")
    if report.repro:
        rl = _repro_lines(report.repro, _t)
        line(("Reproduction: ", "bold"), rl[0], wrap=True)
        for text in rl[1:]:
            bullet(text)

    line("")
    if report.evidence:
        items = capped("evidence", list(report.evidence))
        line((f"Evidence ({len(report.evidence)})", "bold"))
        for e in items:
            where = _where(e.node, e.rank, e.gpu_index)
            line(f"  {_time(e.time) or 'time unknown'}  ", where + ("  " if where else ""), (_loc(e.file, e.line), "dim"))
            line((f"[{_t(e.role)}] ", "dim"), (_t(e.rule), "bold"), ": ", _t(e.message, msg_limit), indent=4, wrap=full)

    if report.symptoms:
        items = capped("symptoms", [s.to_dict() for s in report.symptoms])
        line((f"Collapsed symptoms ({len(report.symptoms)})", "bold"))
        for s in items:
            if not isinstance(s, dict):
                continue
            first: dict[str, Any] = s["first"] if isinstance(s.get("first"), dict) else {}
            on = _symptom_on(s)
            missing = _ranks(s.get("missing_ranks") or [])
            line(f"  {_t(s.get('count'))}x {_t(s.get('kind'))}" + (f" {on}" if on else ""),
                 f", not from ranks {missing}" if missing else "", "  ", (_loc(first.get("file"), first.get("line")), "dim"))
            line(_t(first.get("message"), msg_limit), indent=4, wrap=full)

    if report.timeline_excerpt:
        if caps["excerpt"] == 0:
            hidden.append("timeline excerpt")
        else:
            line(("Timeline around the first failure", "bold"))
            for ex in report.timeline_excerpt:
                where = _where(ex.node, ex.rank)
                line(f"  {_time(ex.time) or 'time unknown'}  {where + '  ' if where else ''}{_t(ex.kind)}: ",
                     _t(ex.message, msg_limit), wrap=full)

    if report.co_occurring:
        items = capped("co_occurring", [c.to_dict() for c in report.co_occurring])
        line(("Also seen in the correlation window", "bold"))
        for c in items:
            if not isinstance(c, dict):
                continue
            nodes = ", ".join(_t(n) for n in c.get("nodes") or [] if _known(n))
            loc = _loc(c.get("file"), c.get("line"))
            bullet(f"{_t(c.get('cause'))}: {_t(c.get('rule'))}" + (f" on {nodes}" if nodes else "") + (f" ({loc})" if loc else ""))
    rows = [r for r in report.layers if isinstance(r, dict)]
    if rows and full:
        line(("Layers", "bold"))
        g = Table.grid(padding=(0, 1))
        g.add_column(width=13, no_wrap=True)
        g.add_column(width=8, no_wrap=True)
        g.add_column(overflow="fold")
        for row in rows:
            status = _t(row.get("status"))
            loc = _layer_loc(row)
            reason_t = Text(_t(row.get("reason"), msg_limit))
            if loc:
                reason_t.append(f"  ({loc})", style="dim")
            if _known(row.get("settle")):
                reason_t.append("\nsettle: ", style="dim")
                reason_t.append(_t(row.get("settle"), 1000))
            g.add_row(Text("  " + _t(row.get("layer"), 11)), Text(status, style="bold red" if status == "failed" else "bold" if status == "suspect" else ""), reason_t)
        con.print(g)
    elif rows:  # one line of statuses, then the failed layer's reason
        t = Text.assemble(("Layers: ", "bold"))
        for i, row in enumerate(rows):
            status = _t(row.get("status"))
            t.append(("  " if i else "") + f"{_t(row.get('layer'), 12)} ")
            t.append(status, style="bold red" if status == "failed" else "bold" if status == "suspect" else "")
        con.print(t, overflow="fold")
        for row in rows:
            if row.get("status") == "failed":
                loc = _layer_loc(row)
                line(f"  {_t(row.get('layer'), 12)}: ", _t(row.get("reason"), msg_limit), (f"  ({loc})" if loc else "", "dim"))
        hidden.append("layer reasons")
    if report.actions:
        line(("Recommended actions", "bold"))
        for a in capped("actions", list(report.actions)):
            bullet(_t(a, 1000))
    if report.missing:
        line(("Missing data (lowers confidence)", "bold"))
        for m in capped("missing", list(report.missing)):
            bullet(_t(m, 1000))
    cov = report.coverage.to_dict() if report.coverage is not None else {}
    if cov:
        hosts = [h for h in (cov.get("hosts") or {}) if _known(h)]
        parts = [f"{cov.get('files', 0)} files ({cov.get('recognized', 0)} recognized, {cov.get('unrecognized', 0)} unrecognized, {cov.get('unreadable', 0)} unreadable)",
                 f"{cov.get('events', 0)} events"]
        if hosts:
            parts.append(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}")
        seen, expected = cov.get("ranks_seen") or 0, cov.get("ranks_expected")
        if expected:
            parts.append(f"ranks seen {seen}/{expected}")
        elif seen:
            parts.append(f"{seen} ranks seen")
        con.print(Text.assemble(("Coverage: ", "bold"), ", ".join(parts)))
    if report.warnings:
        line((f"Warnings ({len(report.warnings)})", "bold"))
        for wtext in capped("warnings", list(report.warnings)):
            bullet(_t(wtext, 1000))
    if hidden:
        line((f"Not shown: {', '.join(hidden)} (--full shows everything; --format json for all data)", "dim"), wrap=True)
    return "".join(ln.rstrip() + "\n" for ln in buf.getvalue().splitlines())


# --- Markdown ------------------------------------------------------------------------------


def render_markdown(report: Report, **_: Any) -> str:
    """For tickets: plain Markdown, evidence as file:line, no colors. Every value is escaped
    (:func:`md_text`) or a code span (:func:`md_code`), so log text never makes structure."""
    job = report.job or {}
    out = [f"# crashscope: {_mdc(report.cause) or UNKNOWN} (confidence {report.confidence:.2f})", "", _mdt(_job_line(job)) + "."]
    if report.summary:
        out += ["", _mdt(report.summary, 2000)]
    imp = report.implicated.to_dict()
    nodes = ", ".join(_mdt(n) for n in imp.get("nodes") or [] if _known(n))
    gpus = ", ".join(_mdt(_gpu(g)) for g in imp.get("gpus") or [] if _gpu(g))
    if nodes or imp.get("ranks") or gpus:
        out += ["", "| implicated | |", "|---|---|"]
        out += [f"| nodes | {nodes or '-'} |", f"| ranks | {_ranks(imp.get('ranks') or []) or '-'} |", f"| GPUs | {gpus or '-'} |"]
    if report.alternatives:
        out += ["", "Alternatives: " + ", ".join(f"{_mdc(a.get('cause'))} {float(a.get('probability') or 0):.2f}" for a in report.alternatives if isinstance(a, dict))]
    if report.history:
        out += ["", "## Fleet history", ""] + [f"- {_history_line(h, _mdt)}" for h in report.history]
    if report.repro:
        rl = _repro_lines(report.repro, _mdt)
        out += ["", "## Reproduction (crashscope repro)", "", rl[0], ""] + [f"- {x}" for x in rl[1:]]
    ff = _first_failure(report)
    if ff:
        where = _where(ff.get("node"), ff.get("rank"))
        src = f" ({_mdt(ff.get('source'))})" if _known(ff.get("source")) else ""
        out += ["", "## First failure", "", f"{_mdt(_time(ff.get('time')) or 'time unknown')}{' on ' + _mdt(where) if where else ''}{src}:", ""]
        out += md_fence(ff.get("message"), FULL_MESSAGE)
        loc = _loc(ff.get("file"), ff.get("line"))
        if loc:
            out.append(f"at {_mdc(loc)}")
    if report.evidence:
        out += ["", "## Evidence", "", "| time (UTC) | node | rank | rule | file:line | line |", "|---|---|---|---|---|---|"]
        for e in report.evidence[:25]:
            rank = "" if e.rank is None else _mdt(e.rank)
            out.append(f"| {_mdt(_time(e.time))} | {_mdt(e.node)} | {rank} | {_mdt(e.rule)} ({_mdt(e.role)}) | {_mdc(_loc(e.file, e.line), table=True)} | {_mdc(e.message, 160, table=True)} |")
    if report.symptoms:
        out += ["", "## Collapsed symptoms", ""]
        for s in [x.to_dict() for x in report.symptoms[:8]]:
            if not isinstance(s, dict):
                continue
            first: dict[str, Any] = s["first"] if isinstance(s.get("first"), dict) else {}
            on = _symptom_on(s)
            miss = _ranks(s.get("missing_ranks") or [])
            loc = _loc(first.get("file"), first.get("line"))
            out.append(f"- {_mdt(s.get('count'))}x {_mdt(s.get('kind'))}{' ' + on if on else ''}: {_mdc(first.get('message'), 120)}"
                       + (f" (first {_mdc(loc)})" if loc else "") + (f"; not reported by ranks {miss}" if miss else ""))
    if report.co_occurring:
        out += ["", "## Also seen in the correlation window", ""]
        for c in [x.to_dict() for x in report.co_occurring]:
            nodes = ", ".join(_mdt(n) for n in c.get("nodes") or [] if _known(n))
            loc = _loc(c.get("file"), c.get("line"))
            out.append(f"- {_mdc(c.get('cause'))}: {_mdt(c.get('rule'))}" + (f" on {nodes}" if nodes else "") + (f" ({_mdc(loc)})" if loc else ""))
    if report.layers:
        out += ["", "## Layers", "", "| layer | status | reason | evidence | to settle |", "|---|---|---|---|---|"]
        for row in report.layers:
            if isinstance(row, dict):
                loc = _layer_loc(row)
                out.append(f"| {_mdt(row.get('title') or row.get('layer'))} | {_mdt(row.get('status'))} | {_mdt(row.get('reason'), 400)} | "
                           f"{_mdc(loc, table=True) if loc else ''} | {_mdt(row.get('settle'), 400) if _known(row.get('settle')) else ''} |")
    if report.actions:
        out += ["", "## Recommended actions", ""] + [f"- {_mdt(a, 1000)}" for a in report.actions]
    if report.missing:
        out += ["", "## Missing data", ""] + [f"- {_mdt(m, 1000)}" for m in report.missing]
    if report.warnings:
        out += ["", f"## Warnings ({len(report.warnings)})", ""] + [f"- {_mdt(w, 1000)}" for w in report.warnings[:30]]
    return "\n".join(out) + "\n"


# --- registry ------------------------------------------------------------------------------

Renderer = Callable[..., str]


def render_html(report: Report, **kw: Any) -> str:
    from crashscope.report.html import render_html as html  # jinja2 loads only for this view

    return html(report, **kw)


RENDERERS: dict[str, Renderer] = {
    "terminal": render_terminal,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}
# Output file suffix -> view.
SUFFIXES: dict[str, str] = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".txt": "terminal", ".text": "terminal",
                            ".html": "html", ".htm": "html"}
RESERVED: dict[str, str] = {}  # suffixes of planned views, refused with a clear error


class UnknownView(ValueError):
    """No view for the requested name or output suffix."""


def renderer_for(name: str | None = None, output: str | None = None) -> tuple[str, Renderer]:
    """The view named ``name`` (``--format``), else the one the output file's suffix names,
    else the terminal view. Raises :class:`UnknownView` for an unknown name or a suffix of a
    view that does not exist yet (:data:`RESERVED`)."""
    if name is None and output is not None:
        import os

        suffix = os.path.splitext(str(output))[1].lower()
        if suffix in RESERVED:
            raise UnknownView(f"the {RESERVED[suffix]} view is not available yet; write .json, .md, .txt or .html, or pass --format")
        name = SUFFIXES.get(suffix, "terminal")
    name = name or "terminal"
    if name in RESERVED.values():
        raise UnknownView(f"the {name} view is not available yet; use one of {', '.join(RENDERERS)}")
    if name not in RENDERERS:
        raise UnknownView(f"unknown view {name!r}; use one of {', '.join(RENDERERS)}")
    return name, RENDERERS[name]
