"""The one-way pipeline: ingest -> timeline -> attribution -> Report."""

from __future__ import annotations

import json
import time as _time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from crashscope import __version__
from crashscope.ingest import Budget, IngestResult, ingest
from crashscope.report.model import Report
from crashscope.schema import Kind, TimeQuality
from crashscope.sources.base import ParseOptions
from crashscope.timeline import Timeline, attrs_of, build_timeline, iso

EXCERPT_BEFORE = 8
EXCERPT_AFTER = 12


_TZ_OK: dict[str, bool] = {}


def resolve_tz(name: str | None) -> ZoneInfo | None:
    """A zone both zoneinfo and polars accept, else None (``Factory``, ``posixrules``,
    ``localtime``, ``right/UTC`` are zoneinfo files polars rejects). Cached per name."""
    if not name or len(name) > 255:
        return None
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
    ok = _TZ_OK.get(name)
    if ok is None:
        try:
            pl.Series([0], dtype=pl.Datetime("ns")).dt.replace_time_zone(name).dt.convert_time_zone("UTC")
            ok = True
        except Exception:  # noqa: BLE001 - polars raises ComputeError/InvalidOperationError/...
            ok = False
        _TZ_OK[name] = ok
    return zone if ok else None


def analyze(
    root: Path | str,
    *,
    tz: str | None = None,
    expected_ranks: int | None = None,
    overrides: dict[str, str] | None = None,
    progress: Callable[[str, int], None] | None = None,
    include_experimental: bool = False,
    use_classifier: bool = True,
    budget_s: float | None = None,
    max_memory: int | None = None,
) -> tuple[Report, Timeline, IngestResult]:
    """Analyze a job directory. Never raises on bad input; problems go to ``warnings``.

    ``budget_s`` (seconds) and ``max_memory`` (bytes of RSS) bound the ingest: once spent,
    the rest is not read and the report says which files were skipped or cut.
    """
    started = _time.perf_counter()
    budget = Budget(budget_s, max_memory) if (budget_s is not None or max_memory is not None) else None
    root = Path(root)
    from crashscope.health import component_warnings

    # No rules or no classifier weakens every verdict: the report says so, never silently.
    warnings: list[str] = component_warnings()
    zone = resolve_tz(tz)
    if tz and zone is None:
        warnings.append(f"unknown time zone {tz!r}; local stamps read as UTC")
    options = ParseOptions(tz=zone or ZoneInfo("UTC"), tz_known=zone is not None)
    # One reading: year-less stamps are dated in the job's year by the timeline.
    result = ingest(root, options, progress=progress, overrides=overrides, budget=budget)
    if zone is None:
        job_tz = _job_timezone(result.events)
        if job_tz is not None:
            result.events = _relocalize(result.events, job_tz)
            warnings.append(f"local time stamps read in the job's time zone {job_tz.key} (from its collected node info)")
        elif result.events.filter(pl.col("time_quality") == TimeQuality.ESTIMATED.value).height:
            warnings.append("no time zone given or found (--tz); stamps without a zone were read as UTC")
    t_ingest = _time.perf_counter()
    timeline = build_timeline(result, expected_ranks=expected_ranks)
    t_timeline = _time.perf_counter()
    warnings.extend(result.warnings)
    warnings.extend(timeline.warnings)
    report = _base_report(result, timeline, warnings)
    try:
        from crashscope.attribution import attribute
    except ImportError:  # attribution not installed in this build
        attribute = None  # type: ignore[assignment]
    if attribute is not None:
        attribute(report, timeline, include_experimental=include_experimental, use_classifier=use_classifier)
    evidence_context(root, report)
    t_done = _time.perf_counter()
    report.analysis = {
        "crashscope": __version__,
        "root": str(root),
        "bytes": result.bytes_read,
        "files": len(result.files),
        "seconds": round(t_done - started, 3),
        "stage_seconds": {
            "ingest": round(t_ingest - started, 3),
            "timeline": round(t_timeline - t_ingest, 3),
            "attribution": round(t_done - t_timeline, 3),
        },
        "time_zone": (zone.key if zone else None),
    }
    return report, timeline, result


def _job_timezone(ev: pl.DataFrame) -> ZoneInfo | None:
    """The nodes' zone, from collected node info (timedatectl, the collector JSON)."""
    tz = ev.filter(pl.col("attrs").str.contains('"timezone"', literal=True)).select(
        pl.coalesce(
            pl.when(pl.col("attrs").str.json_path_match("$.component") == "timezone").then(pl.col("attrs").str.json_path_match("$.version")),
            pl.col("attrs").str.json_path_match("$.timezone"),
        )
    )
    zones = tz.to_series().drop_nulls().to_list()
    for name, _ in Counter(zones).most_common():
        z = resolve_tz(name)
        if z is not None:
            return z
    return None


def _relocalize(ev: pl.DataFrame, zone: ZoneInfo) -> pl.DataFrame:
    """Stamps read as UTC for lack of a zone are local times of ``zone``: convert them."""
    est = pl.col("time_quality") == TimeQuality.ESTIMATED.value
    local = (
        pl.col("time")
        .dt.replace_time_zone(None)
        .dt.replace_time_zone(zone.key, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
    )
    return ev.with_columns(
        pl.when(est & pl.col("time").is_not_null()).then(local).otherwise(pl.col("time")).alias("time"),
        pl.when(est & pl.col("time").is_not_null()).then(pl.lit(TimeQuality.EXACT.value)).otherwise(pl.col("time_quality").cast(pl.String)).cast(ev.schema["time_quality"]).alias("time_quality"),
    )


def _base_report(result: IngestResult, tl: Timeline, warnings: list[str]) -> Report:
    ev = tl.events
    nodes = sorted(set(tl.hosts) | set(_job_nodes(ev)))
    report = Report(job={"id": tl.job_id, "nodes": nodes, "ranks": tl.world_size})
    report.warnings = _dedupe(warnings)
    report.sources = result.sources_summary()
    report.coverage = _coverage(result, tl)
    report.symptoms = [g.to_json() for g in tl.groups[:20]]
    report.anomalies = _anomalies(ev)
    report.clock = {"skew_s": tl.skew_s, "start": iso(tl.start), "end": iso(tl.end), "quality": _quality_counts(ev)}
    report.missing = _missing_data(result, tl, nodes)
    report.activity = activity(ev)
    return report


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for w in items:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _job_nodes(ev: pl.DataFrame) -> list[str]:
    """Allocation nodes from Slurm records (so a node that left no logs is still listed)."""
    st = ev.filter(pl.col("kind") == Kind.JOB_STATE.value)
    nodes: set[str] = set()
    for a in st["attrs"].drop_nulls().to_list():
        try:
            v = json.loads(a).get("nodes")
        except (ValueError, AttributeError):
            continue
        if isinstance(v, list):
            nodes.update(str(x) for x in v if isinstance(x, str) and len(v) <= 10_000)
    return sorted(nodes)


def _quality_counts(ev: pl.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(ev.group_by("time_quality").len().iter_rows(), key=lambda kv: str(kv[0]))}


def _coverage(result: IngestResult, tl: Timeline) -> dict[str, Any]:
    kinds = Counter(f.kind for f in result.files)
    per_host: dict[str, dict[str, Any]] = defaultdict(lambda: {"events": 0, "sources": [], "ranks": 0})
    ev = tl.events
    if ev.height:
        by = ev.group_by("host").agg(
            pl.len().alias("events"),
            pl.col("source").cast(pl.String).unique().sort().alias("sources"),
            pl.col("rank").drop_nulls().n_unique().alias("ranks"),
            pl.col("time").min().alias("first"),
            pl.col("time").max().alias("last"),
        )
        for row in by.iter_rows(named=True):
            per_host[row["host"] or "?"] = {
                "events": row["events"],
                "sources": list(row["sources"]),
                "ranks": row["ranks"],
                "first": row["first"].isoformat() if row["first"] else None,
                "last": row["last"].isoformat() if row["last"] else None,
            }
    return {
        "files": len(result.files),
        "recognized": sum(v for k, v in kinds.items() if k not in ("unrecognized", "unreadable")),
        "unrecognized": kinds.get("unrecognized", 0),
        "unreadable": kinds.get("unreadable", 0),
        "bytes": result.bytes_read,
        "events": ev.height,
        "hosts": dict(sorted(per_host.items())),
        "ranks_seen": len(tl.ranks_seen),
        "ranks_expected": tl.world_size,
    }


def _missing_data(result: IngestResult, tl: Timeline, nodes: list[str]) -> list[str]:
    ev = tl.events
    out = []
    if ev.height == 0:
        return ["no recognizable log lines at all"]
    kernel_hosts = set(ev.filter(pl.col("source") == "kernel")["host"].drop_nulls().unique().to_list())
    no_kernel = [n for n in nodes if n not in kernel_hosts]
    if no_kernel and len(no_kernel) < len(nodes):
        out.append(f"no kernel log (dmesg/journal) for {len(no_kernel)} node(s): {', '.join(no_kernel[:8])}{' ...' if len(no_kernel) > 8 else ''}")
    elif nodes and not kernel_hosts:
        out.append("no kernel logs (dmesg/journal) for any node: Xid, NIC and storage errors cannot be seen")
    if not ev.filter(pl.col("source").is_in(["slurm", "sacct"])).height:
        out.append("no Slurm records (job output banners, sacct, slurmctld): scheduler actions cannot be seen")
    if tl.world_size and len(tl.ranks_seen) < tl.world_size:
        out.append(f"events from {len(tl.ranks_seen)} of {tl.world_size} ranks")
    return out


def _anomalies(ev: pl.DataFrame, limit: int = 15) -> list[dict[str, Any]]:
    """The earliest distinct warnings/errors: the first place to look."""
    from crashscope.timeline import signature_expr

    bad = ev.filter(pl.col("severity").cast(pl.String).is_in(["warning", "error", "critical"]))
    if bad.height == 0:
        return []
    bad = bad.with_columns(signature_expr().alias("_sig")).sort(["time", "file", "line"], nulls_last=True)
    first = bad.group_by(["kind", "_sig"], maintain_order=True).agg(
        pl.all().first(), pl.len().alias("count"), pl.col("rank").n_unique().alias("n_ranks")
    )
    return [event_json(r) | {"count": r["count"]} for r in first.head(limit).iter_rows(named=True)]


def event_json(r: dict[str, Any]) -> dict[str, Any]:
    t = r.get("time")
    return {
        "time": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t is not None else None,
        "time_quality": str(r.get("time_quality")),
        "node": r.get("host"),
        "rank": r.get("rank"),
        "gpu": r.get("gpu"),
        "source": str(r.get("source")),
        "kind": str(r.get("kind")),
        "severity": str(r.get("severity")),
        "message": r.get("message") or "",
        "file": r.get("file"),
        "line": r.get("line"),
    }


def excerpt_around(ev: pl.DataFrame, t_ns: int | None, limit_before: int = EXCERPT_BEFORE, limit_after: int = EXCERPT_AFTER) -> list[dict[str, Any]]:
    """Non-info events just before and after ``t_ns`` (the first failure)."""
    if t_ns is None or ev.height == 0:
        return []
    ev = ev.filter(pl.col("time").is_not_null() & (pl.col("severity").cast(pl.String) != "info"))
    t = pl.lit(t_ns).cast(pl.Datetime("ns", "UTC"))
    before = ev.filter(pl.col("time") < t).tail(limit_before)
    after = ev.filter(pl.col("time") >= t).head(limit_after)
    return [event_json(r) for r in pl.concat([before, after]).iter_rows(named=True)]


# --- per rank / per host facts and evidence context (the HTML view) --------------------------

# What a rank's own process writes: its last such line is its last sign of life. Telemetry,
# inventory and kernel lines carry a rank through its GPU but go on after the rank died.
_RANK_SOURCES = ("nccl", "pytorch", "applog", "torchelastic", "catalog")
_NOT_ACTIVITY = (Kind.VERSION.value, Kind.GPU_INVENTORY.value, Kind.GPU_TELEMETRY.value, Kind.XID.value, Kind.SXID.value)
MAX_COMPONENTS = 40


def activity(ev: pl.DataFrame) -> dict[str, Any]:
    """``Report.activity``: each rank's first and last line (time, kind, file:line) and each
    host's versions, GPU count, serious clock-slowdown reasons, Xids and time span."""
    if ev.height == 0:
        return {"ranks": [], "hosts": []}
    from crashscope.sources.nvidia_smi import SERIOUS_REASONS

    kind, src = pl.col("kind").cast(pl.String), pl.col("source").cast(pl.String)
    own = ev.filter(pl.col("rank").is_not_null() & pl.col("time").is_not_null() & src.is_in(_RANK_SOURCES) & ~kind.is_in(_NOT_ACTIVITY))
    ranks = []
    if own.height:
        last = own.sort(["time", "line"]).group_by("rank").agg(
            pl.col("host").drop_nulls().last(), pl.col("time").first().alias("first"), pl.col("time").last().alias("last"),
            kind.last().alias("kind"), pl.col("file").last(), pl.col("line").last()).sort("rank")
        for r in last.iter_rows(named=True):
            ranks.append({"rank": r["rank"], "node": r["host"], "first": iso_ns(r["first"]), "last": iso_ns(r["last"]),
                          "kind": r["kind"], "file": r["file"], "line": r["line"]})
    hosts: dict[str, dict[str, Any]] = {}
    for (host,), g in ev.filter(pl.col("host").is_not_null()).group_by(["host"], maintain_order=True):
        versions: dict[str, str] = {}
        for a in g.filter(kind == Kind.VERSION.value).sort("time", nulls_last=True)["attrs"].drop_nulls().to_list():
            d = attrs_of(a)
            if isinstance(d.get("component"), str) and isinstance(d.get("version"), str) and (d["component"] in versions or len(versions) < MAX_COMPONENTS):
                versions[d["component"]] = d["version"]
        gpus = g.filter(kind.is_in([Kind.GPU_INVENTORY.value, Kind.GPU_TELEMETRY.value]))
        throttle: set[str] = set()
        for a in g.filter(kind.is_in([Kind.GPU_THROTTLE.value, Kind.GPU_TELEMETRY.value]))["attrs"].drop_nulls().to_list():
            throttle.update(r for r in attrs_of(a).get("reasons") or [] if r in SERIOUS_REASONS)
        xids = sorted({x for x in (attrs_of(a).get("xid") for a in g.filter(kind == Kind.XID.value)["attrs"].drop_nulls().to_list())
                       if isinstance(x, int)})
        rk = own.filter(pl.col("host") == host)
        hosts[str(host)] = {
            "versions": dict(sorted(versions.items())),
            "gpus": int(gpus.select(pl.coalesce(pl.col("gpu"), pl.col("gpu_index").cast(pl.String))).to_series().drop_nulls().n_unique()),
            "throttle": sorted(throttle),
            "xids": xids,
            "ranks": sorted(int(r) for r in rk["rank"].unique().to_list()),
            "first": iso_ns(rk["time"].min()) if rk.height else None,
            "last": iso_ns(rk["time"].max()) if rk.height else None,
        }
    # A list, not a mapping by name: host names are values, so the string pass (redaction) maps them.
    return {"ranks": ranks, "hosts": [{"node": h} | hosts[h] for h in sorted(hosts)]}


def iso_ns(t: Any) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t is not None else None


CONTEXT_LINES = 3  # each side of an evidence line
CONTEXT_FILES = 16  # files read back per report
CONTEXT_SCAN = 64 << 20  # bytes read per file before giving up on a deep line
CONTEXT_LINE_CHARS = 400


def evidence_context(root: Path, report: Report) -> None:
    """Fill ``EvidenceItem.context`` with the lines around each evidence line, read back
    through the bundle's safe open (no symlinks out, bounded, archives in place)."""
    import os

    from crashscope.bundle import Entry, FileRef, open_ref

    wanted: dict[str, set[int]] = defaultdict(set)
    for e in report.evidence:
        if e.file and isinstance(e.line, int) and e.line > 0 and (e.file in wanted or len(wanted) < CONTEXT_FILES):
            wanted[e.file].add(e.line)
    if not wanted:
        return
    root_real = os.path.realpath(root)
    found: dict[tuple[str, int], str] = {}
    for rel in {f.split("!", 1)[0] for f in wanted}:
        path = root_real if os.path.isfile(root_real) else os.path.join(root_real, rel)
        if os.path.isfile(root_real) and os.path.basename(root_real) != rel:
            continue
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        parent = os.path.dirname(root_real) if os.path.isfile(root_real) else root_real
        for entry in open_ref(FileRef(path, rel, size, parent)):
            if not isinstance(entry, Entry) or entry.path not in wanted:
                continue
            keep = {n for ln in wanted[entry.path] for n in range(max(1, ln - CONTEXT_LINES), ln + CONTEXT_LINES + 1)}
            top, n, read, tail = max(keep), 0, 0, b""
            try:
                while n < top and read < CONTEXT_SCAN:
                    block = entry.stream.read(1 << 20)
                    if not block:
                        if tail:
                            n += 1
                            if n in keep:
                                found[(entry.path, n)] = _context_text(tail)
                        break
                    read += len(block)
                    *lines, tail = (tail[: CONTEXT_LINE_CHARS * 4] + block).split(b"\n")
                    for raw in lines:
                        n += 1
                        if n in keep:
                            found[(entry.path, n)] = _context_text(raw)
            except (OSError, ValueError, EOFError):
                continue
    for e in report.evidence:
        if isinstance(e.line, int) and (e.file, e.line) in found:
            e.context = [{"line": n, "text": found[(e.file, n)]} for n in range(max(1, e.line - CONTEXT_LINES), e.line + CONTEXT_LINES + 1)
                         if (e.file, n) in found]


def _context_text(raw: bytes) -> str:
    return raw[: CONTEXT_LINE_CHARS * 4].decode("utf-8", "surrogateescape").rstrip("\r")[:CONTEXT_LINE_CHARS]
