"""The one-way pipeline as stage functions: :func:`load_timeline` (ingest + the aligned
timeline), :func:`find` (rule and cross-rank findings), then :func:`analyze` (both, the
verdict of :func:`crashscope.verdict.decide` and the report of
:func:`crashscope.report.build.build_report`). The CLI, the epilog, the evaluation and the
tests all call these."""

from __future__ import annotations

import logging
import time as _time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from crashscope import __version__
from crashscope.engine.model import Finding
from crashscope.ingest import Budget, IngestResult, ingest
from crashscope.report.model import Report
from crashscope.schema import TimeQuality
from crashscope.sources.base import ParseOptions
from crashscope.timeline import Timeline, build_timeline

log = logging.getLogger(__name__)

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


@dataclass
class Loaded:
    """What :func:`load_timeline` read: the ingest result, the aligned timeline, the zone
    local stamps were read in (None: UTC for lack of one) and the warnings of both stages
    (time zone, ingest, timeline; in that order)."""

    result: IngestResult
    timeline: Timeline
    zone: ZoneInfo | None
    warnings: list[str] = field(default_factory=list)
    ingest_s: float = 0.0
    timeline_s: float = 0.0


def load_timeline(
    root: Path | str,
    *,
    tz: str | None = None,
    expected_ranks: int | None = None,
    overrides: dict[str, str] | None = None,
    progress: Callable[[str, int], None] | None = None,
    budget: Budget | None = None,
) -> Loaded:
    """Read a job directory once and align it into a timeline. Never raises on bad input."""
    started = _time.perf_counter()
    warnings: list[str] = []
    zone = resolve_tz(tz)
    if tz and zone is None:
        warnings.append(f"unknown time zone {tz!r}; local stamps read as UTC")
    options = ParseOptions(tz=zone or ZoneInfo("UTC"), tz_known=zone is not None)
    # One reading: year-less stamps are dated in the job's year by the timeline.
    result = ingest(Path(root), options, progress=progress, overrides=overrides, budget=budget)
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
    return Loaded(result, timeline, zone, warnings, t_ingest - started, t_timeline - t_ingest)


def find(ev: pl.DataFrame, world_size: int | None, *, include_experimental: bool = False) -> tuple[list[Finding], list[str]]:
    """The rule findings and the cross-rank analyses' findings over ``ev`` (one job's
    events), with warnings for a stage that failed (a rule bug costs the rules, not the report)."""
    from crashscope.analyses import run_analyses
    from crashscope.engine.evaluate import evaluate

    warnings: list[str] = []
    try:
        findings = evaluate(ev, include_experimental=include_experimental, expected_ranks=world_size)
    except Exception as exc:  # noqa: BLE001 - a rule bug must not cost the report
        log.exception("rule evaluation failed")
        warnings.append(f"rule evaluation failed ({type(exc).__name__}: {exc}); verdict from the timeline only")
        findings = []
    found, analysis_warnings = run_analyses(ev, world_size)
    warnings.extend(analysis_warnings)
    return findings + found, warnings


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
    from crashscope.health import component_warnings
    from crashscope.report.build import build_report, missing_data
    from crashscope.verdict import _classifier, _this_job, decide

    started = _time.perf_counter()
    budget = Budget(budget_s, max_memory) if (budget_s is not None or max_memory is not None) else None
    root = Path(root)
    # No rules or no classifier weakens every verdict: the report says so, never silently.
    warnings: list[str] = component_warnings()
    t_load = _time.perf_counter()
    loaded = load_timeline(root, tz=tz, expected_ranks=expected_ranks, overrides=overrides, progress=progress, budget=budget)
    tl, result = loaded.timeline, loaded.result
    warnings.extend(loaded.warnings)
    t_timeline = _time.perf_counter()
    ev = _this_job(tl.events, tl.job_id)
    findings, finding_warnings = find(ev, tl.world_size, include_experimental=include_experimental)
    clf = _classifier(tl, findings) if use_classifier else None
    verdict = decide(findings, tl, classifier=clf, missing=missing_data(tl))
    report = build_report(result, tl, verdict, findings, events=ev, root=root, warnings=warnings, finding_warnings=finding_warnings)
    t_done = _time.perf_counter()
    report.analysis = {
        "crashscope": __version__,
        "root": str(root),
        "bytes": result.bytes_read,
        "files": len(result.files),
        "seconds": round(t_done - started, 3),
        "stage_seconds": {
            "ingest": round(t_load - started + loaded.ingest_s, 3),
            "timeline": round(loaded.timeline_s, 3),
            "attribution": round(t_done - t_timeline, 3),
        },
        "time_zone": (loaded.zone.key if loaded.zone else None),
    }
    return report, tl, result


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
