"""Assemble the :class:`~crashscope.report.model.Report` from the three things the
pipeline produced: the ingest result (files, sources, bytes), the aligned timeline and the
verdict. Everything here is a fact read off those; nothing decides a cause."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

import polars as pl

from crashscope.engine.model import Finding
from crashscope.ingest import IngestResult
from crashscope.layers import apply_layers
from crashscope.report.events import event_row, iso_expr, iso_expr_ok, iso_ns, one_row_per_line
from crashscope.report.model import Activity, Coverage, EventRow, HostActivity, HostSummary, RankActivity, Report, SymptomGroup
from crashscope.schema import Kind
from crashscope.timeline import Timeline, attrs_of, iso, signature_expr
from crashscope.verdict import Verdict

log = logging.getLogger(__name__)

# The verdict's fields, copied onto the report as they are.
VERDICT_FIELDS = ("cause", "confidence", "alternatives", "implicated", "first_failure", "evidence", "actions",
                  "co_occurring", "summary", "timeline_excerpt", "classifier", "missing")
ANOMALY_LIMIT = 15
SYMPTOM_LIMIT = 20


def build_report(
    result: IngestResult,
    tl: Timeline,
    verdict: Verdict,
    findings: Iterable[Finding] = (),
    *,
    events: pl.DataFrame | None = None,
    root: Path | str | None = None,
    warnings: Iterable[str] = (),
    finding_warnings: Iterable[str] = (),
) -> Report:
    """The report of one analysis.

    ``events`` are this job's events (the timeline's, less other jobs' lines) that the
    layer check reads; ``root`` is where evidence lines are read back for their context
    (None: no context); ``warnings`` (deduplicated) come first, then ``finding_warnings``
    (rule and analysis failures) as they are."""
    ev = tl.events
    nodes = sorted(set(tl.hosts) | set(job_nodes(ev)))
    report = Report(job={"id": tl.job_id, "nodes": nodes, "ranks": tl.world_size})
    report.warnings = dedupe(warnings) + list(finding_warnings)
    report.sources = result.sources_summary()
    report.coverage = coverage(result, tl)
    # The timeline's groups as the report writes them (the same JSON as Timeline.SymptomGroup.to_json).
    report.symptoms = [s for s in (SymptomGroup.from_dict(g.to_json()) for g in tl.groups[:SYMPTOM_LIMIT]) if s is not None]
    report.anomalies = anomalies(ev)
    report.clock = {"skew_s": tl.skew_s, "start": iso(tl.start), "end": iso(tl.end), "quality": quality_counts(ev)}
    report.activity = activity(ev)
    for name in VERDICT_FIELDS:
        setattr(report, name, getattr(verdict, name))
    try:
        apply_layers(report, events if events is not None else ev, list(findings), tl.hosts)
    except Exception as exc:  # noqa: BLE001 - the layer check must not cost the verdict
        log.exception("layer check failed")
        report.warnings.append(f"layer check failed ({type(exc).__name__}: {exc})")
    if root is not None:
        evidence_context(Path(root), report)
    return report


def dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for w in items:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def job_nodes(ev: pl.DataFrame) -> list[str]:
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


def quality_counts(ev: pl.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(ev.group_by("time_quality").len().iter_rows(), key=lambda kv: str(kv[0]))}


def coverage(result: IngestResult, tl: Timeline) -> Coverage:
    kinds = Counter(f.kind for f in result.files)
    per_host: dict[str, HostSummary] = {}
    ev = tl.events
    if ev.height:
        by = ev.group_by("host").agg(
            pl.len().alias("events"),
            pl.col("source").unique().cast(pl.String).sort().alias("sources"),
            pl.col("rank").drop_nulls().n_unique().alias("ranks"),
            pl.col("time").min().alias("first"),
            pl.col("time").max().alias("last"),
        )
        for row in by.iter_rows(named=True):
            per_host[row["host"] or "?"] = HostSummary(
                events=row["events"],
                sources=list(row["sources"]),
                ranks=row["ranks"],
                first=row["first"].isoformat() if row["first"] else None,
                last=row["last"].isoformat() if row["last"] else None,
            )
    return Coverage(
        files=len(result.files),
        recognized=sum(v for k, v in kinds.items() if k not in ("unrecognized", "unreadable")),
        unrecognized=kinds.get("unrecognized", 0),
        unreadable=kinds.get("unreadable", 0),
        bytes=result.bytes_read,
        events=ev.height,
        hosts=dict(sorted(per_host.items())),
        ranks_seen=len(tl.ranks_seen),
        ranks_expected=tl.world_size,
    )


def missing_data(tl: Timeline) -> list[str]:
    """The data whose absence lowers confidence (``Report.missing``, given to the verdict)."""
    ev = tl.events
    nodes = sorted(set(tl.hosts) | set(job_nodes(ev)))
    out = []
    if ev.height == 0:
        return ["no recognizable log lines at all"]
    kernel_hosts = set(ev.select("source", "host").filter(pl.col("source") == "kernel")["host"].drop_nulls().unique().to_list())
    no_kernel = [n for n in nodes if n not in kernel_hosts]
    if no_kernel and len(no_kernel) < len(nodes):
        out.append(f"no kernel log (dmesg/journal) for {len(no_kernel)} node(s): {', '.join(no_kernel[:8])}{' ...' if len(no_kernel) > 8 else ''}")
    elif nodes and not kernel_hosts:
        out.append("no kernel logs (dmesg/journal) for any node: Xid, NIC and storage errors cannot be seen")
    if not ev.select(pl.col("source").is_in(["slurm", "sacct"]).any()).item():
        out.append("no Slurm records (job output banners, sacct, slurmctld): scheduler actions cannot be seen")
    if tl.world_size and len(tl.ranks_seen) < tl.world_size:
        out.append(f"events from {len(tl.ranks_seen)} of {tl.world_size} ranks")
    return out


def anomalies(ev: pl.DataFrame, limit: int = ANOMALY_LIMIT) -> list[EventRow]:
    """The earliest distinct warnings/errors: the first place to look."""
    bad = ev.filter(pl.col("severity").is_in(["warning", "error", "critical"]))
    if bad.height == 0:
        return []
    bad = bad.with_columns(signature_expr().alias("_sig")).sort(["time", "file", "line"], nulls_last=True)
    first = bad.group_by(["kind", "_sig"], maintain_order=True).agg(
        pl.all().first(), pl.len().alias("count"), pl.col("rank").n_unique().alias("n_ranks")
    )
    first = first.filter(one_row_per_line())
    return [event_row(r, count=r["count"]) for r in first.head(limit).iter_rows(named=True)]


# --- per rank / per host facts and evidence context (the HTML view) --------------------------

# What a rank's own process writes: its last such line is its last sign of life. Telemetry,
# inventory and kernel lines carry a rank through its GPU but go on after the rank died.
_RANK_SOURCES = ("nccl", "pytorch", "applog", "torchelastic", "catalog")
_NOT_ACTIVITY = (Kind.VERSION.value, Kind.GPU_INVENTORY.value, Kind.GPU_TELEMETRY.value, Kind.XID.value, Kind.SXID.value)
MAX_COMPONENTS = 40


def activity(ev: pl.DataFrame) -> Activity:
    """``Report.activity``: each rank's first and last line (time, kind, file:line) and each
    host's versions, GPU count, serious clock-slowdown reasons, Xids and time span."""
    if ev.height == 0:
        return Activity()
    from crashscope.sources.nvidia_smi import SERIOUS_REASONS

    kind, src = pl.col("kind"), pl.col("source")  # compared as enums: a cast of each column to text cost ~25 ms at 16,384 ranks
    # the few columns first: filtering whole rows copied every message and attrs text
    own = ev.select("rank", "time", "source", "kind", "host", "file", "line").filter(
        pl.col("rank").is_not_null() & pl.col("time").is_not_null() & src.is_in(_RANK_SOURCES) & ~kind.is_in(_NOT_ACTIVITY))
    ranks = []
    if own.height:
        last = own.sort(["time", "line"]).group_by("rank").agg(
            pl.col("host").drop_nulls().last(), pl.col("time").first().alias("first"), pl.col("time").last().alias("last"),
            kind.last().alias("kind"), pl.col("file").last(), pl.col("line").last()).sort("rank")
        if iso_expr_ok(last["first"]) and iso_expr_ok(last["last"]):  # the stamps as text in one pass
            last = last.with_columns(iso_expr("first"), iso_expr("last"))
            ranks = [RankActivity(rank=r, node=h, first=t0, time=t1, kind=k, file=f, line=ln)
                     for r, h, t0, t1, k, f, ln in last.select("rank", "host", "first", "last", "kind", "file", "line").iter_rows()]
        else:
            for r in last.iter_rows(named=True):
                ranks.append(RankActivity(rank=r["rank"], node=r["host"], first=iso_ns(r["first"]), time=iso_ns(r["last"]),
                                          kind=r["kind"], file=r["file"], line=r["line"]))
    # One pass per fact over the whole frame (a filter per host cost ~7 ms x 2,048 hosts).
    hosted = ev.select("host", "kind", "time", "attrs", "gpu", "gpu_index").filter(pl.col("host").is_not_null())
    versions = _host_versions(hosted.filter(kind == Kind.VERSION.value).select("host", "time", "attrs"))
    gpu_id = pl.coalesce(pl.col("gpu"), pl.col("gpu_index").cast(pl.String))
    gpus = dict(hosted.filter(kind.is_in([Kind.GPU_INVENTORY.value, Kind.GPU_TELEMETRY.value]))
                .group_by("host").agg(gpu_id.drop_nulls().n_unique()).iter_rows())
    throttle: dict[str, set[str]] = defaultdict(set)
    # Only rows whose text names a serious reason can add one (most telemetry lists only gpu_idle).
    quoted = [f'"{r}"' for r in SERIOUS_REASONS]
    serious = pl.col("attrs").str.contains_any(quoted)
    trows = hosted.filter(kind.is_in([Kind.GPU_THROTTLE.value, Kind.GPU_TELEMETRY.value]))
    # the text every serious reason ends with ('slowdown"'), a plain substring search, first:
    # the Aho-Corasick pass over every telemetry row cost ~0.15 s at 16,384 ranks
    tail = os.path.commonprefix([q[::-1] for q in quoted])[::-1] if quoted else ""
    if len(tail) >= 4:
        trows = trows.filter(pl.col("attrs").str.contains(tail, literal=True))
    trows = trows.filter(pl.col("attrs").str.contains('"reasons"', literal=True) & serious)
    # A host's telemetry repeats a few reason lists: each distinct list is decoded once.
    listed = pl.col("_r").str.starts_with("[").fill_null(False)
    trows = trows.select("host", "attrs", pl.col("attrs").str.json_path_match("$.reasons").alias("_r"))
    for host, r in trows.filter(listed).select("host", "_r").unique().iter_rows():
        throttle[host].update(x for x in json.loads(r) if x in SERIOUS_REASONS)
    for host, a in trows.filter(~listed).select("host", "attrs").iter_rows():
        throttle[host].update(r for r in attrs_of(a).get("reasons") or [] if r in SERIOUS_REASONS)
    xids: dict[str, set[int]] = defaultdict(set)
    for host, a in hosted.filter(kind == Kind.XID.value).select("host", "attrs").iter_rows():
        x = attrs_of(a).get("xid")
        if isinstance(x, int):
            xids[host].add(x)
    per_host = {h: (rs, lo, hi) for h, rs, lo, hi in own.filter(pl.col("host").is_not_null()).group_by("host").agg(
        pl.col("rank").unique().sort(), pl.col("time").min().alias("lo"), pl.col("time").max().alias("hi")).iter_rows()}
    hosts: dict[str, HostActivity] = {}
    for host in hosted["host"].unique().to_list():
        rs, lo, hi = per_host.get(host, ([], None, None))
        hosts[str(host)] = HostActivity(
            node=str(host),
            versions=dict(sorted(versions.get(host, {}).items())),
            gpus=int(gpus.get(host, 0)),
            throttle=sorted(throttle.get(host, ())),
            xids=sorted(xids.get(host, ())),
            ranks=[int(r) for r in rs],
            first=iso_ns(lo),
            last=iso_ns(hi),
        )
    return Activity(ranks=ranks, hosts=[hosts[h] for h in sorted(hosts)])


def _host_versions(vrows: pl.DataFrame) -> dict[str, dict[str, str]]:
    """Each host's component -> version from its version rows (host, time, attrs): in time
    order the last version of each component, and only the first :data:`MAX_COMPONENTS`
    components to appear. Hosts repeat the same few version records, so each distinct attrs
    text is decoded once and the rows are grouped in polars (what :func:`_host_versions_rows`
    gives one row at a time)."""
    dec: dict[str, list[str]] = {"attrs": [], "_c": [], "_v": []}
    for a in vrows["attrs"].drop_nulls().unique().to_list():
        d = attrs_of(a)
        if isinstance(d.get("component"), str) and isinstance(d.get("version"), str):
            dec["attrs"].append(a)
            dec["_c"].append(d["component"])
            dec["_v"].append(d["version"])
    if not dec["attrs"]:
        return {}
    rows = (vrows.sort(["host", "time"], nulls_last=True, maintain_order=True)
            .select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_i"), "host", "attrs")
            .join(pl.DataFrame(dec, schema={"attrs": pl.String, "_c": pl.String, "_v": pl.String}), on="attrs", how="inner")
            .group_by(["host", "_c"]).agg(pl.col("_i").min().alias("_first"), pl.col("_v").sort_by("_i").last())
            .filter(pl.col("_first").rank("ordinal").over("host") <= MAX_COMPONENTS))
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for host, comp, _, v in rows.iter_rows():
        out[host][comp] = v
    return out


def _host_versions_rows(vrows: pl.DataFrame) -> dict[str, dict[str, str]]:
    """The reference for :func:`_host_versions`: one row at a time."""
    versions: dict[str, dict[str, str]] = defaultdict(dict)
    for host, a in vrows.sort(["host", "time"], nulls_last=True, maintain_order=True).select("host", "attrs").iter_rows():
        d = attrs_of(a)
        seen = versions[host]
        if isinstance(d.get("component"), str) and isinstance(d.get("version"), str) and (d["component"] in seen or len(seen) < MAX_COMPONENTS):
            seen[d["component"]] = d["version"]
    return {h: v for h, v in versions.items() if v}


CONTEXT_LINES = 3  # each side of an evidence line
CONTEXT_FILES = 16  # files read back per report
CONTEXT_SCAN = 64 << 20  # bytes read per file before giving up on a deep line
CONTEXT_LINE_CHARS = 400


def evidence_context(root: Path, report: Report) -> None:
    """Fill ``EvidenceItem.context`` with the lines around each evidence line, read back
    through the bundle's safe open (no symlinks out, bounded, archives in place)."""
    from crashscope.bundle import Entry, FileRef, looks_binary, open_ref

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
                    if not read and looks_binary(block[:8192]):
                        break  # a pickle or SQLite trace: its "lines" are bytes, not context
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
    text = raw[: CONTEXT_LINE_CHARS * 4].decode("utf-8", "surrogateescape").rstrip("\r")
    if "\r" in text:  # a progress bar's redraws (tqdm): the text a terminal showed last
        text = next((seg for seg in reversed(text.split("\r")) if seg.strip()), "")
    return text[:CONTEXT_LINE_CHARS]
