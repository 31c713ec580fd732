"""The HTML view: one self-contained page for a ticket attachment or a browser.

``render_html(report)`` fills ``templates/report.html.j2`` (jinja2, ``autoescape=True``,
``StrictUndefined``) and returns one file: CSS inline, the timeline an inline SVG whose
geometry is computed here from the Report (no script, no font, no image, nothing fetched).
A ``Content-Security-Policy`` meta tag (``default-src 'none'; style-src 'unsafe-inline';
img-src data:``) forbids every fetch and every script even if a value escaped its escaping.

Log text is data: every value reaches the page through jinja's ``finalize`` hook, which
runs :func:`crashscope.report.safe.escape_controls` on each string (controls, bidi and
zero-width characters shown as ``\\x1b``/``\\u202e``) and cuts it, and then through
autoescape (``< > & " '`` as entities, so text and quoted attributes alike stay inert).
Nothing is marked safe except what the templates themselves make. See ``docs/html.md``.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from crashscope.hostlist import compress_ints
from crashscope.report.model import FIRST_FAILURE_KEYS, Report
from crashscope.report.safe import escape_controls

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
FIELD = 300  # host names, file names, rules: cut here
MESSAGE = 600
LONG = 2000  # summary, actions, warnings
MAX_EVIDENCE = 40
MAX_WARNINGS = 60
MAX_HOST_ROWS = 2048
# The picture: one row per rank while the job is small, else one band per node plus the
# ranks that stand out (went quiet early or are implicated).
RANK_ROWS_UP_TO = 64
MAX_OUTLIERS = 48
# Versions shown as table columns first, in this order; any other component that differs
# between hosts is added after them.
KEY_COMPONENTS = ("driver", "cuda_driver", "cuda_runtime", "nccl", "torch", "ofed", "kernel")
NO_NODE = "(no node)"


# --- values ------------------------------------------------------------------------------


def _finalize(value: Any) -> Any:
    """Every ``{{ }}`` output: strings sanitized and cut (markup made by the templates is
    kept), ``None`` as empty, the rest as text."""
    from markupsafe import Markup

    if isinstance(value, Markup):
        return value
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return escape_controls(value, LONG)


def _cut(value: Any, limit: int = FIELD) -> str:
    return escape_controls(value, limit)


def _known(v: Any) -> bool:
    return v is not None and v != "" and v != "?"


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _when(v: Any) -> datetime | None:
    """An ISO stamp of the report (``...Z``, ``+00:00``, up to nanoseconds) as UTC."""
    if not isinstance(v, str) or not v or len(v) > 64:
        return None
    return _when_text(v)


@lru_cache(maxsize=1 << 16)
def _when_text(v: str) -> datetime | None:
    # a 16,384-rank report reads 123k stamps, 3.7k of them distinct (~0.3 s of the view)
    s = _FRACTION.sub(r"\1", v.strip()).replace("Z", "+00:00")
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _stamp(v: Any) -> str:
    t = _when(v)
    if t is None:
        return _cut(v) if _known(v) else ""
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _loc(file: Any, line: Any) -> str:
    if not _known(file):
        return ""
    return f"{_cut(file)}:{line}" if _int(line) and line > 0 else _cut(file)


def _ranks(ranks: Any) -> str:
    if isinstance(ranks, str):
        return _cut(ranks)
    return compress_ints(ranks or [])


def _gpu(g: Any, node: bool = True) -> str:
    if not isinstance(g, dict):
        return ""
    parts = [_cut(g["node"])] if node and _known(g.get("node")) else []
    if g.get("index") is not None:
        parts.append(f"GPU {_cut(g['index'])}")
    elif _known(g.get("pci")):
        parts.append(f"GPU {_cut(g['pci'])}")
    if _known(g.get("pci")) and g.get("index") is not None:
        parts.append(f"({_cut(g['pci'])})")
    return " ".join(parts)


def _where(node: Any, rank: Any, gpu_index: Any = None) -> str:
    parts = [_cut(node)] if _known(node) else []
    if _int(rank):
        parts.append(f"rank {rank}")
    if _int(gpu_index):
        parts.append(f"GPU {gpu_index}")
    return " ".join(parts)


# --- the sections ----------------------------------------------------------------------------


def _verdict(r: Report) -> dict[str, Any]:
    imp = r.implicated.to_dict()
    nodes = [_cut(n) for n in imp.get("nodes") or [] if _known(n)]
    gpus_raw = [g for g in imp.get("gpus") or [] if isinstance(g, dict)]
    one_node = len(nodes) == 1 and all(_cut(g.get("node")) in ("", nodes[0]) for g in gpus_raw)
    gpus = [s for s in (_gpu(g, node=not one_node) for g in gpus_raw) if s]
    cause = _cut(r.cause) or "unknown"
    ff = r.first_failure.to_dict(FIRST_FAILURE_KEYS) if r.first_failure is not None else None
    job = r.job or {}
    try:
        confidence = max(0.0, min(1.0, float(r.confidence)))
    except (TypeError, ValueError):
        confidence = 0.0
    return {
        "cause": cause,
        "bad": cause not in ("none", "unknown"),
        "confidence": confidence,
        "confidence_pct": round(confidence * 100),
        "alternatives": [{"cause": _cut(a.get("cause")), "p": float(a.get("probability") or 0)} for a in r.alternatives[:5] if isinstance(a, dict)],
        "nodes": nodes[:12], "more_nodes": max(0, len(nodes) - 12),
        "ranks": _ranks(imp.get("ranks") or []),
        "gpus": gpus[:8], "more_gpus": max(0, len(gpus) - 8),
        "summary": _cut(r.summary, LONG),
        "job_id": _cut(job.get("id")) if _known(job.get("id")) else "",
        "n_nodes": len(job.get("nodes") or []),
        "n_ranks": job.get("ranks") if _int(job.get("ranks")) else None,
        "first_failure": None if ff is None else {
            "time": _stamp(ff.get("time")), "where": _where(ff.get("node"), ff.get("rank")), "source": _cut(ff.get("source")) if _known(ff.get("source")) else "",
            "message": _cut(ff.get("message"), MESSAGE), "loc": _loc(ff.get("file"), ff.get("line")),
        },
        "fingerprint": r.fingerprint,
    }


def _evidence(r: Report) -> list[dict[str, Any]]:
    out = []
    for e in r.evidence[:MAX_EVIDENCE]:
        ctx = [{"line": c.get("line"), "text": _cut(c.get("text"), MESSAGE), "hit": c.get("line") == e.line}
               for c in (e.context or []) if isinstance(c, dict) and _int(c.get("line"))]
        out.append({"time": _stamp(e.time), "where": _where(e.node, e.rank, e.gpu_index), "rule": _cut(e.rule), "role": _cut(e.role),
                    "cause": _cut(e.cause), "source": _cut(e.source), "loc": _loc(e.file, e.line), "message": _cut(e.message, MESSAGE),
                    "context": ctx})
    return out


def _symptoms(r: Report) -> list[dict[str, Any]]:
    out = []
    for s in [x.to_dict() for x in r.symptoms]:
        if not isinstance(s, dict):
            continue
        first = s["first"] if isinstance(s.get("first"), dict) else {}
        n = s.get("n_ranks") if _int(s.get("n_ranks")) else 0
        hosts = [_cut(h) for h in s.get("hosts") or [] if _known(h)]
        out.append({"count": s.get("count") if _int(s.get("count")) else 0, "kind": _cut(s.get("kind")), "n_ranks": n,
                    "ranks": _ranks(s.get("ranks")), "hosts": hosts[:32], "more_hosts": max(0, len(hosts) - 32),
                    "missing": _ranks(s.get("missing_ranks") or []), "time": _stamp(first.get("time")),
                    "where": _where(first.get("node"), first.get("rank")), "loc": _loc(first.get("file"), first.get("line")),
                    "message": _cut(first.get("message"), MESSAGE)})
    return out


def _co_occurring(r: Report) -> list[dict[str, Any]]:
    return [{"cause": _cut(c.get("cause")), "rule": _cut(c.get("rule")), "nodes": ", ".join(_cut(n) for n in (c.get("nodes") or [])[:8] if _known(n)),
             "loc": _loc(c.get("file"), c.get("line")), "time": _stamp(c.get("time")), "message": _cut(c.get("message"), MESSAGE)}
            for c in (x.to_dict() for x in r.co_occurring)]


def _hosts(r: Report) -> dict[str, Any]:
    """The per-host table: one row per node; a cell whose value differs from most hosts'
    (a version, the GPU count) is marked odd, and so is a row with Xids, a slowdown, an
    early last activity or a place in the culprit."""
    cov_raw = r.coverage.to_dict()["hosts"] if r.coverage is not None else None
    act: dict[str, Any] = {h.node: h.to_dict() for h in (r.activity.hosts if r.activity is not None else []) if _known(h.node)}
    cov: dict[str, Any] = {str(k): v for k, v in cov_raw.items() if isinstance(v, dict)} if isinstance(cov_raw, dict) else {}
    names = [str(n) for n in (r.job or {}).get("nodes") or [] if _known(n)]
    # Not the coverage's keys: the string pass (redaction) maps values, not keys.
    names += [str(n) for n in act if _known(n) and str(n) not in names]
    names = sorted(set(names))[:MAX_HOST_ROWS]
    implicated = {str(n) for n in r.implicated.nodes or []}
    facts: dict[str, dict[str, Any]] = {n: a if isinstance(a := act.get(n), dict) else {} for n in names}
    versions: dict[str, dict[str, Any]] = {n: v if isinstance(v := f.get("versions"), dict) else {} for n, f in facts.items()}
    components = [c for c in KEY_COMPONENTS if any(c in v for v in versions.values())]

    def majority(values: list[Any], others: list[Any] | None = None) -> Any:
        """The usual value; on a tie, that of the hosts outside the culprit (two hosts, one
        implicated: the other one's value is the usual one)."""
        seen = [v for v in values if v is not None]
        if len(seen) < 2:
            return None
        (top, k), *rest = Counter(seen).most_common(2) + [(None, 0)]
        if k > rest[0][1]:
            return top
        if others is not None and len(set(o for o in others if o is not None)) == 1 and len(others) < len(values):
            return next(o for o in others if o is not None)
        return None

    for c in sorted({c for v in versions.values() for c in v} - set(components)):
        vals = [v.get(c) for v in versions.values() if c in v]
        if len(set(vals)) > 1 and len(components) < 14:
            components.append(c)
    bystanders = [n for n in names if n not in implicated]
    usual = {c: majority([versions[n].get(c) for n in names], [versions[n].get(c) for n in bystanders]) for c in components}
    usual_gpus = majority([facts[n].get("gpus") or None for n in names], [facts[n].get("gpus") or None for n in bystanders])
    lasts = {n: _when(f.get("last") or (cov.get(n) or {}).get("last")) for n, f in facts.items()}
    known_last = [t for t in lasts.values() if t is not None]
    median_last = statistics.median_low(known_last) if len(known_last) >= 3 else None
    rows = []
    for n in names:
        f, v = facts[n], versions[n]
        cells = [{"value": _cut(v.get(c), 80) if c in v else "", "odd": c in v and usual[c] is not None and v.get(c) != usual[c]} for c in components]
        gpus = f.get("gpus") if _int(f.get("gpus")) else None
        throttle = [_cut(x, 60) for x in f.get("throttle") or []][:8]
        xids = [str(x) for x in f.get("xids") or [] if _int(x)][:16]
        last = lasts[n]
        early = median_last is not None and last is not None and (median_last - last).total_seconds() > 5
        odd_cells = any(c["odd"] for c in cells) or (gpus is not None and usual_gpus is not None and gpus != usual_gpus)
        rows.append({"node": _cut(n), "ranks": _ranks(f.get("ranks") or []), "gpus": "" if gpus is None else str(gpus),
                     "gpus_odd": gpus is not None and usual_gpus is not None and gpus != usual_gpus,
                     "cells": cells, "throttle": ", ".join(throttle), "xids": ", ".join(xids), "last": _stamp(f.get("last") or (cov.get(n) or {}).get("last")),
                     "early": early, "culprit": n in implicated,
                     "odd": odd_cells or bool(throttle) or bool(xids) or early})
    return {"components": [_cut(c, 40) for c in components], "rows": rows}


def _generic(value: Any, depth: int = 0) -> Any:
    """A nested value of a section another feature fills (layers, repro, history) as
    display-safe text: dicts and lists kept, everything else cut."""
    if depth > 4:
        return _cut(value, 200)
    if isinstance(value, dict):
        return {_cut(k, 80): _generic(v, depth + 1) for k, v in list(value.items())[:40]}
    if isinstance(value, (list, tuple)):
        return [_generic(v, depth + 1) for v in list(value)[:50]]
    if isinstance(value, bool) or value is None:
        return "" if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return f"{value:.3g}"
    return _cut(value, MESSAGE)


def _layers(r: Report) -> list[dict[str, Any]]:
    out = []
    for layer in r.layers:
        if not isinstance(layer, dict):
            continue
        ev = [e for e in layer.get("evidence") or [] if isinstance(e, dict)]
        rest = {k: v for k, v in layer.items() if k not in ("layer", "status", "reason", "evidence", "settle")}
        out.append({"layer": _cut(layer.get("layer")), "status": _cut(layer.get("status"), 40), "reason": _cut(layer.get("reason"), LONG),
                    "settle": _generic(layer.get("settle")), "rest": _generic(rest),
                    "evidence": [{"loc": _loc(e.get("file"), e.get("line")), "message": _cut(e.get("message"), MESSAGE) if _known(e.get("message")) else ""}
                                 for e in ev[:12]]})
    return out


def _history(r: Report) -> dict[str, Any]:
    rows = [h for h in r.history if isinstance(h, dict)][:200]
    keys: list[str] = []
    for h in rows:
        keys += [k for k in h if k not in keys]
    keys = keys[:10]
    return {"columns": [_cut(k, 60) for k in keys], "rows": [[_generic(h.get(k)) for k in keys] for h in rows]}


def _coverage(r: Report) -> dict[str, Any]:
    cov = r.coverage.to_dict() if r.coverage is not None else {}
    return {k: cov.get(k) for k in ("files", "recognized", "unrecognized", "unreadable", "events", "ranks_seen", "ranks_expected") if _int(cov.get(k))}


# --- the picture -------------------------------------------------------------------------


def timeline_picture(r: Report, width: int = 1100, window: tuple[datetime, datetime] | None = None) -> dict[str, Any]:
    """Geometry of the timeline SVG: hosts (and ranks, or each node's band of ranks with its
    outliers) by time, skew-corrected as the timeline is; the first failure, the symptom wave,
    evidence and each rank's last activity marked. Returns plain numbers and sanitized
    strings for the ``timeline`` macro; ``None``-free."""
    ranks = [a.to_dict() for a in (r.activity.ranks if r.activity is not None else []) if _int(a.rank)]
    ff = r.first_failure.to_dict(FIRST_FAILURE_KEYS) if r.first_failure is not None else {}
    t_fail = _when(ff.get("time")) if ff else None
    sym_times = [t for s in r.symptoms for t in [_when(s.first.time)] if t]
    sym_times += [t for e in r.evidence if e.role == "symptom" for t in [_when(e.time)] if t]
    marks = [(e, _when(e.time)) for e in r.evidence]
    rank_first = [t for a in ranks for t in [_when(a.get("first"))] if t]
    rank_last = [t for a in ranks for t in [_when(a.get("last"))] if t]
    core = rank_first + rank_last
    if not core:
        core = [t for t in [t_fail, *sym_times, *(t for _, t in marks), *(_when(x.time) for x in r.timeline_excerpt)] if t]
    if not core:
        core = [t for t in (_when((r.clock or {}).get("start")), _when((r.clock or {}).get("end"))) if t]
    if not core:
        return {"empty": True, "width": width, "height": 40}
    t0, t1 = min(core), max(core)
    span = max((t1 - t0).total_seconds(), 1.0)
    # The first failure and the wave always show; an old line (an Xid of last week) does not
    # stretch the axis: it sits at the edge, marked as earlier.
    for t in [t_fail, *sym_times]:
        if t is not None and (t0 - t).total_seconds() < span and (t - t1).total_seconds() < span:
            t0, t1 = min(t0, t), max(t1, t)
    if window is not None:
        t0, t1 = window
    span = max((t1 - t0).total_seconds(), 1.0)
    left, right, top = 190, 24, 34
    plot = width - left - right

    def x(t: datetime | None) -> tuple[float, bool]:
        if t is None:
            return left, True
        s = (t - t0).total_seconds() / span
        return left + max(0.0, min(1.0, s)) * plot, s < -0.001 or s > 1.001

    # rows: hosts, then per rank (small job) or per host band + outliers (large job)
    hosts_of: dict[str, list[dict[str, Any]]] = {}
    for n in (r.job or {}).get("nodes") or []:
        if _known(n):
            hosts_of.setdefault(str(n), [])
    for a in ranks:
        hosts_of.setdefault(str(a.get("node")) if _known(a.get("node")) else NO_NODE, []).append(a)
    for e, _ in marks:
        if _known(e.node):
            hosts_of.setdefault(str(e.node), [])
    implicated_ranks = {x for x in r.implicated.ranks or [] if _int(x)}
    implicated_nodes = {str(x) for x in r.implicated.nodes or []}
    per_rank = len(ranks) <= RANK_ROWS_UP_TO
    median_last = statistics.median_low(rank_last) if rank_last else None
    # A rank stands out when its last line is well before most ranks' (robustly: by the
    # median absolute deviation of the last lines, at least 2 s).
    mad = statistics.median_low([abs((t - median_last).total_seconds()) for t in rank_last]) if median_last else 0.0
    quiet = max(2.0, 4 * mad)
    outliers = set()
    if not per_rank and median_last is not None:
        early = sorted((t, a["rank"]) for a in ranks for t in [_when(a.get("last"))] if t and (median_last - t).total_seconds() > quiet)
        outliers = {rk for _, rk in early[:MAX_OUTLIERS]} | implicated_ranks
    rows: list[dict[str, Any]] = []
    row_h = 14 if per_rank else 18
    y = top
    for host in sorted(hosts_of, key=lambda h: (h == NO_NODE, h)):
        members = sorted(hosts_of[host], key=lambda a: a["rank"])
        lasts = [t for a in members for t in [_when(a.get("last"))] if t]
        firsts = [t for a in members for t in [_when(a.get("first"))] if t]
        row: dict[str, Any] = {"kind": "host", "y": y, "label": _cut(host, 40), "culprit": host in implicated_nodes,
                               "ranks": _ranks([a["rank"] for a in members]), "n": len(members)}
        if lasts and firsts:
            lo, hi = x(min(lasts))[0], x(max(lasts))[0]
            row.update(bar_x=x(min(firsts))[0], bar_w=max(1.0, x(max(lasts))[0] - x(min(firsts))[0]),
                       band_x=lo, band_w=max(2.0, hi - lo), median_x=x(statistics.median_low(lasts))[0],
                       tip=f"{_cut(host, 80)}: ranks {_ranks([a['rank'] for a in members])}, last activity {_stamp(min(lasts).isoformat())} … {_stamp(max(lasts).isoformat())}")
        row["h"] = row_h
        rows.append(row)
        y += row_h + 4
        shown = members if per_rank else [a for a in members if a["rank"] in outliers]
        for a in shown:
            tf, tl = _when(a.get("first")), _when(a.get("last"))
            xf, xl = x(tf)[0], x(tl)[0]
            rows.append({"kind": "rank", "y": y, "label": f"rank {a['rank']}", "culprit": a["rank"] in implicated_ranks,
                         "outlier": not per_rank, "bar_x": xf, "bar_w": max(1.0, xl - xf), "last_x": xl, "has_last": tl is not None,
                         "h": 10, "tip": f"rank {a['rank']} on {_cut(host, 80)}: last line {_stamp(a.get('last'))} ({_cut(a.get('kind'), 40)}) at {_loc(a.get('file'), a.get('line'))}"})
            y += 14
    row_y = {row["label"]: row["y"] + row["h"] / 2 for row in rows if row["kind"] == "host"}
    rank_y = {row["label"]: row["y"] + row["h"] / 2 for row in rows if row["kind"] == "rank"}
    points = []
    for e, t in marks[:MAX_EVIDENCE]:
        if t is None:
            continue
        yy = rank_y.get(f"rank {e.rank}") if _int(e.rank) else None
        if yy is None:
            yy = row_y.get(_cut(e.node, 40)) if _known(e.node) else None
        if yy is None:
            yy = top - 8
        px, out = x(t)
        points.append({"x": px, "y": yy, "role": _cut(e.role, 20), "clamped": out,
                       "tip": f"{_stamp(e.time)} {_where(e.node, e.rank, e.gpu_index)} [{_cut(e.role, 20)}] {_cut(e.rule)}: {_cut(e.message, 200)} ({_loc(e.file, e.line)})"})
    height = y + 36
    ticks = []
    for i in range(6):
        tt = t0.timestamp() + span * i / 5
        ticks.append({"x": left + plot * i / 5, "label": datetime.fromtimestamp(tt, timezone.utc).strftime("%H:%M:%S" if span > 2 else "%H:%M:%S.%f")[:12]})
    wave = None
    if sym_times:
        ws, we = min(sym_times), max(sym_times + ([max(rank_last)] if rank_last else []))
        wx = x(ws)[0]
        wave = {"x": wx, "w": max(2.0, x(we)[0] - wx), "label": f"symptom wave from {_stamp(ws.isoformat())}"}
    fail = None
    if t_fail is not None:
        fx, out = x(t_fail)
        fail = {"x": fx, "clamped": out, "label": f"first failure {_stamp(ff.get('time'))} {_where(ff.get('node'), ff.get('rank'))}".strip()}
    return {"empty": False, "id": "zoom" if window else "overview", "width": width, "height": height, "left": left, "plot": plot, "top": top, "row_h": row_h, "rows": rows,
            "ticks": ticks, "points": points, "wave": wave, "fail": fail, "per_rank": per_rank, "date": t0.strftime("%Y-%m-%d"),
            "start": _stamp(t0.isoformat()), "end": _stamp(t1.isoformat()), "n_ranks": len(ranks), "n_outliers": len(outliers),
            "quiet_s": round(quiet, 1), "skew": {_cut(k, 40): v for k, v in ((r.clock or {}).get("skew_s") or {}).items() if isinstance(v, (int, float))}}


def crash_window(r: Report) -> tuple[datetime, datetime] | None:
    """The stretch from the first failure (or the first symptom) to the last rank's last
    line, padded, when it is under a quarter of the whole picture: drawn again on its own,
    since a crash takes seconds of a run of hours."""
    ff = r.first_failure.to_dict(FIRST_FAILURE_KEYS) if r.first_failure is not None else {}
    starts = [t for t in [_when(ff.get("time")) if ff else None] if t]
    starts += [t for s in r.symptoms for t in [_when(s.first.time)] if t]
    ranks = [a.to_dict() for a in (r.activity.ranks if r.activity is not None else [])]
    lasts = [t for a in ranks for t in [_when(a.get("last"))] if t]
    firsts = [t for a in ranks for t in [_when(a.get("first"))] if t]
    if not starts or not lasts or not firsts:
        return None
    w0, w1 = min(starts), max(lasts + starts)
    whole = (max(lasts) - min(firsts)).total_seconds()
    pad = max(1.0, 0.1 * (w1 - w0).total_seconds())
    if whole <= 0 or (w1 - w0).total_seconds() + 2 * pad > 0.25 * whole:
        return None
    # Some seconds before the first failure, so the ranks that went quiet before it show.
    before = min(max(pad, 10.0), 0.2 * whole)
    from datetime import timedelta

    return w0 - timedelta(seconds=before), w1 + timedelta(seconds=pad)


# --- rendering ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("crashscope.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = lambda v, d=1: f"{float(v):.{int(d)}f}"
    return env


def render_html(report: Report, **_: Any) -> str:
    """The report as one self-contained HTML page (see the module doc)."""
    import dataclasses

    from crashscope import __version__

    # A report read from a file may hold anything: the mappings the view walks are mappings
    # (the typed parts, implicated, coverage, activity, are typed by Report.from_dict).
    empty: dict[str, Any] = {k: {} for k in ("job", "clock", "analysis")
                             if not isinstance(getattr(report, k), dict)}
    r = dataclasses.replace(report, **empty)

    window = crash_window(r)
    zoom = timeline_picture(r, window=window) if window else None
    picture = timeline_picture(r)
    (zoom or picture)["legend"] = True
    picture.setdefault("legend", False)

    context = {
        "csp": CSP,
        "v": _verdict(r),
        "picture": picture,
        "zoom": zoom,
        "evidence": _evidence(r),
        "more_evidence": max(0, len(r.evidence) - MAX_EVIDENCE),
        "symptoms": _symptoms(r),
        "co_occurring": _co_occurring(r),
        "hosts": _hosts(r),
        "actions": [_cut(a, LONG) for a in r.actions],
        "missing": [_cut(m, LONG) for m in r.missing],
        "warnings": [_cut(w, LONG) for w in r.warnings[:MAX_WARNINGS]],
        "more_warnings": max(0, len(r.warnings) - MAX_WARNINGS),
        "coverage": _coverage(r),
        "layers": _layers(r),
        "repro": _generic(r.repro) if r.repro else None,
        "history": _history(r),
        "version": _cut((r.analysis or {}).get("crashscope") or __version__, 40),
        "clock": {"start": _stamp((r.clock or {}).get("start")), "end": _stamp((r.clock or {}).get("end"))},
    }
    return str(_environment().get_template("report.html.j2").render(**context))
