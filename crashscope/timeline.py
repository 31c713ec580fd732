"""From raw ingested events to one clock-aligned, identity-resolved timeline.

Steps, in order (each is a pure function of the frame):

1. identity: (host, pid) -> global rank from NCCL communicator init; (host, local rank)
   -> global rank from torchrun summaries; rank -> node from the job node its own log
   header names; under torchrun, a launcher line's ``srun -l`` task -> its node; (host,
   rank) <-> GPU PCI id, so a kernel Xid on ``0000:3b:00.0`` lands on the rank that drove
   that GPU.
2. kernel clocks: boot-relative dmesg stamps -> UTC with a per-host boot epoch taken
   from journald JSON pairs, ``/proc/stat`` btime or syslog lines carrying both clocks.
3. clock skew: events that happen at one instant everywhere (the watchdog timeout of one
   SeqNum on every rank, a Slurm cancel of one step on every node, every node's torchrun
   agent starting, and receiving the step's signal) give each host's offset from the job
   median (the median over its anchors); offsets above ``SKEW_THRESHOLD_S`` backed by at
   least two agreeing observations are corrected (``aligned``), weaker ones only reported.
4. interpolation: events without a time take the previous (else next) stamped event's time
   in the same file (``estimated``).
5. symptom groups: the same event on many ranks collapses into one group with its count,
   earliest member and the ranks that did NOT report it.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from statistics import median
from typing import Any, cast

import polars as pl

from crashscope.patterns import compile_pattern
from crashscope.hostlist import compress_ints
from crashscope.ingest import IngestResult
from crashscope.schema import EVENT_SCHEMA, Kind, TimeQuality, conform_events, world_size

SKEW_THRESHOLD_S = 2.0
SKEW_MIN_HOSTS = 3  # an anchor seen on fewer hosts cannot tell which clock is off
SKEW_MIN_OBS = 2  # observations of a host's offset (anchors x its ranks) before it is corrected
SKEW_MAX_SPREAD = 1.0  # seconds: a host's anchors must agree this well
GROUP_MIN_MEMBERS = 2
SEVERITY_ORDER = {"debug": 0, "info": 1, "warning": 2, "error": 3, "critical": 4}

# Kinds whose many copies are consequences of one failure elsewhere.
SYMPTOM_KINDS = {
    Kind.COLLECTIVE_TIMEOUT.value,
    Kind.WATCHDOG_ERROR.value,
    Kind.HEARTBEAT_TIMEOUT.value,
    Kind.NETWORK_ERROR.value,
    Kind.NCCL_ERROR.value,
    Kind.PROCESS_EXIT.value,
    Kind.SIGNAL.value,
    Kind.ROOT_CAUSE_REPORT.value,
    Kind.JOB_CANCEL.value,
    Kind.EXCEPTION.value,
    Kind.XID.value,
}


@dataclass
class SymptomGroup:
    kind: str
    signature: str
    count: int
    ranks: list[int]
    hosts: list[str]
    first_time: int | None
    first_file: str
    first_line: int | None
    first_host: str | None
    first_rank: int | None
    first_message: str
    missing_ranks: list[int] = field(default_factory=list)  # expected ranks that did not report it
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "signature": self.signature,
            "count": self.count,
            "ranks": compress_ints(self.ranks),
            "n_ranks": len(self.ranks),
            "hosts": self.hosts,
            "first": {
                "time": iso(self.first_time),
                "node": self.first_host,
                "rank": self.first_rank,
                "file": self.first_file,
                "line": self.first_line,
                "message": self.first_message,
            },
            "missing_ranks": self.missing_ranks,
        }


@dataclass
class Timeline:
    events: pl.DataFrame  # EVENT_SCHEMA, sorted by time (nulls last), then file/line
    job_id: str | None
    hosts: list[str]
    world_size: int | None  # expected number of ranks
    ranks_seen: list[int]
    skew_s: dict[str, float]  # host -> estimated clock offset (seconds, positive = ahead)
    groups: list[SymptomGroup]
    warnings: list[str]
    start: int | None = None
    end: int | None = None


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    from datetime import datetime, timezone

    sec, rem = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{rem // 1000:06d}Z"


def build_timeline(result: IngestResult, *, expected_ranks: int | None = None) -> Timeline:
    warnings: list[str] = []
    ev = result.events
    if ev.height == 0:
        return Timeline(ev, None, [], expected_ranks, [], {}, [], ["no events were found in any file"])
    ev = conform_events(ev)
    if ev.n_chunks() > 1:
        ev = ev.rechunk()  # the ingest's batches and shards: ~0.1 s that saves ~1.6 s of passes over 2,049 chunks at 16,384 ranks
    ev = _drop_catalog_twins(ev)
    ev = date_year_less(ev, warnings)
    ev = ev.with_row_index("_id")
    ev = _hosts_from_paths(ev)
    ev = _fold_host_case(ev)
    ev = _resolve_ranks(ev)
    ev = _resolve_gpus(ev)
    ev = _kernel_clock(ev, warnings)
    ev, skew = _clock_skew(ev, warnings)
    ev = _same_line_times(ev)
    ev = _borrow_times(ev)  # a stamped twin of the same exception beats a neighbour's time
    ev = _interpolate(ev)
    ev = _peer_hosts(ev)
    ev = ev.sort(["time", "file", "line"], nulls_last=True, maintain_order=True).drop("_id")
    ev = ev.select([pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()])

    world = expected_ranks or world_size(ev)
    ranks_seen = sorted(int(r) for r in ev["rank"].drop_nulls().unique().to_list())
    if world and ranks_seen:
        missing = sorted(set(range(world)) - set(ranks_seen))
        if missing:
            warnings.append(
                f"no events from {len(missing)} of {world} ranks ({compress_ints(missing)}): their logs may be missing"
            )
    groups = collapse_symptoms(ev, world)
    hosts = sorted(h for h in ev["host"].drop_nulls().unique().to_list())
    job_ids = [j for j in ev["job_id"].drop_nulls().to_list()]
    job_id = Counter(job_ids).most_common(1)[0][0] if job_ids else None
    times = ev["time"].drop_nulls()
    start = _ns(times.min()) if times.len() else None
    end = _ns(times.max()) if times.len() else None
    return Timeline(ev, job_id, hosts, world, ranks_seen, skew, groups, warnings, start, end)


def _ns(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, int):
        return v
    from datetime import datetime, timezone

    if isinstance(v, datetime):
        from crashscope.sources.base import epoch_ns

        return epoch_ns(v if v.tzinfo else v.replace(tzinfo=timezone.utc))
    return int(v)


def _attr(col: str, key: str, dtype: pl.DataType | type[pl.DataType] = pl.String) -> pl.Expr:
    return pl.col(col).str.json_path_match(f"$.{key}").cast(dtype, strict=False)


def _fill_nulls(ev: pl.DataFrame, table: pl.DataFrame, on: str | list[str], fills: dict[str, str], *, override: bool = False) -> pl.DataFrame:
    """What ``ev.join(table, on=on, how="left")`` then ``coalesce(target, value)`` for each
    ``target: value`` of ``fills`` gives (``coalesce(value, target)`` with ``override``), with
    the frame's rows in place: when the table holds one row per key (a lookup), only the
    rows that have every key (and, without ``override``, a null target) are looked up, and
    the values put in place by row position (a join of the whole frame cost ~0.1-0.2 s per
    lookup at 16,384 ranks); a table with repeated keys, a join that adds rows, is joined
    whole as before."""
    keys = [on] if isinstance(on, str) else list(on)
    if table.height == 0:
        return ev
    if table.select(pl.struct(keys).is_duplicated().any()).item():
        ev = ev.join(table, on=keys, how="left")
        return ev.with_columns((pl.coalesce(v, t) if override else pl.coalesce(t, v)).alias(t) for t, v in fills.items()).drop(list(fills.values()))
    targets = [t for t in fills if t not in keys]
    need = pl.all_horizontal([pl.col(k).is_not_null() for k in keys])
    if not override:
        need = need & pl.any_horizontal([pl.col(t).is_null() for t in fills])
    rows = ev.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), *keys, *targets).filter(need)
    if rows.height == 0:
        return ev
    got = rows.join(table.select(*keys, *fills.values()), on=keys, how="inner")
    cols = []
    for t, v in fills.items():
        g = got.filter(pl.col(v).is_not_null() if override else pl.col(t).is_null() & pl.col(v).is_not_null())
        if g.height:
            cols.append(ev[t].scatter(g["_p"], g[v].cast(ev.schema[t])))
    return ev.with_columns(cols) if cols else ev


def job_year_month(ev: pl.DataFrame) -> tuple[int | None, int | None]:
    """The year and month the job ran: the median of the stamps that carry a year (in a
    known zone or not: the zone does not move the year), so one stray old line (an Xid from
    last December) does not move it."""
    exact = ev.filter(
        pl.col("time_quality").is_in([TimeQuality.EXACT.value, TimeQuality.ESTIMATED.value])
        & pl.col("time").is_not_null()
        & (pl.col("source") != "versions")
        & ~pl.col("year_assumed").fill_null(False)
    )
    if exact.height == 0:
        return None, None
    t = exact["time"].sort()[exact.height // 2]
    return t.year, t.month


def date_year_less(ev: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Date the year-less stamps (syslog, c10/glog, torchrun), which sources read in the
    current year, in the job's year instead: the one within six months of the job's month,
    so a job across New Year gets December stamps in one year and January ones in the next.
    Without any stamp that carries a year they stay in the current year, marked estimated."""
    assumed = pl.col("year_assumed").fill_null(False) & pl.col("time").is_not_null()
    if not ev.select(assumed.any()).item():
        return ev
    year, month = job_year_month(ev)
    if year is None or month is None:
        warnings.append("no line of the job says its year: year-less stamps (syslog, c10, torchrun) were dated this year")
        return ev.with_columns(
            pl.when(assumed & (pl.col("time_quality") == TimeQuality.EXACT.value))
            .then(pl.lit(TimeQuality.ESTIMATED.value))
            .otherwise(pl.col("time_quality").cast(pl.String))
            .cast(ev.schema["time_quality"])
            .alias("time_quality")
        )
    m = pl.col("time").dt.month().cast(pl.Int32)
    target = pl.lit(year, pl.Int32) - (m - month > 6).cast(pl.Int32) + (month - m > 6).cast(pl.Int32)
    delta = target - pl.col("time").dt.year().cast(pl.Int32)
    return ev.with_columns(
        pl.when(assumed & (delta != 0))
        .then(pl.col("time").dt.offset_by(pl.format("{}y", delta)))
        .otherwise(pl.col("time"))
        .alias("time")
    )


def _generic_reading() -> pl.Expr:
    """A source's event that reads its line only generically, without the line's meaning:
    any source's ``log_error`` (a logging line at error level: slurmstepd's ``error: ...``),
    the NCCL source's WARN of a net plugin it does not parse (``NET/OFI ...``: error_type
    ``other``) or its fallback reading of a WARN it has no parser for (an nccl_error with
    neither an error_type nor a failed system call)."""
    etype = pl.col("attrs").str.json_path_match("$.error_type")
    nccl = pl.col("source") == "nccl"
    fallback_warn = (nccl & (pl.col("kind") == Kind.NCCL_ERROR.value) & etype.is_null()
                     & pl.col("attrs").str.json_path_match("$.call").is_null())
    return ((pl.col("kind") == Kind.LOG_ERROR.value) | (nccl & etype.eq("other")) | fallback_warn).fill_null(False)


def _drop_catalog_twins(ev: pl.DataFrame) -> pl.DataFrame:
    """The catalog reads known error texts in every line; where a source that knows the
    line's format read the same thing (same file, line and kind), its event is the one kept.

    The same thing: a catalog reading of role symptom or context gives way to any other
    source's event on its line (else to one with its text elsewhere: an NCCL WARN echoed as
    a PyTorch exception's "Last error:"). A cause-role reading gives way to an event that the
    stable cause rules read as that same cause (``engine.evaluate.cause_readings``: one fact,
    one event) and to a typed reading that the rules read as no cause (the source knows the
    line, and what it means is the rules' call: torchelastic's ``exitcode: -11`` of a
    worker); it stays beside it as another reading of the line where the readings
    disagree: the source read the line only generically (``_generic_reading``: a net
    plugin's ``NET/OFI`` WARN, a slurmstepd ``error:`` line holding enroot's ``failed to
    execute``), or the rules read it as another cause."""
    cat = pl.col("source") == "catalog"
    idx = ev.with_row_index("_ct")
    c = idx.filter(cat).select("_ct", "file", "line", "kind", "message", "attrs")
    if not c.height:
        return ev
    # Only the catalog's rows are looked up (two joins of the whole frame cost ~3 s at
    # 16,384 ranks); the frame keeps its order.
    # (and of the others only those of the catalog rows' files: a row of another file cannot be
    # a twin, and the semi join of all 687k rows cost ~0.1 s at 16,384 ranks)
    c = c.with_columns(
        pl.col("attrs").str.json_path_match("$.role").alias("_role"),
        pl.col("attrs").str.json_path_match("$.cause").alias("_cause"),
        pl.col("message").str.strip_chars().alias("_m"),
    ).drop("attrs")
    is_cause = (pl.col("_role").eq("cause") & pl.col("_cause").is_not_null()).fill_null(False)
    plain, causal = c.filter(~is_cause), c.filter(is_cause)
    others = ~cat & pl.col("line").is_not_null() & pl.col("file").is_in(c["file"].drop_nulls().unique().implode())
    on_line = ["file", "line", "kind"]
    drop = [plain.join(ev.filter(others).select(on_line), on=on_line, how="semi")["_ct"]]
    # The same text echoed elsewhere (an NCCL WARN repeated as "Last error:" inside a
    # PyTorch exception in another file) is the same fact: the source's own event stays.
    said = ev.filter(~cat & pl.col("kind").is_in(c["kind"].unique().implode())).with_columns(pl.col("message").str.strip_chars().alias("_m"))
    plain_rest = plain.filter(~pl.col("_ct").is_in(drop[0].implode()))
    drop.append(plain_rest.join(said.select("kind", "_m"), on=["kind", "_m"], how="semi")["_ct"])
    if causal.height:
        # The other sources' events a cause reading could give way to: on its line, else its
        # text elsewhere; whether each is generic, and the causes the rules read it as.
        cands = pl.concat([
            ev.filter(others).join(causal.select(on_line), on=on_line, how="semi"),
            said.join(causal.select("kind", "_m"), on=["kind", "_m"], how="semi").drop("_m"),
        ])
        from crashscope.engine.evaluate import cause_readings

        reads = cause_readings(cands).group_by("row").agg(pl.col("cause").alias("_reads"))
        info = cands.with_row_index("row").select(
            "row", *on_line, pl.col("message").str.strip_chars().alias("_m"), _generic_reading().alias("_generic"),
        ).join(reads, on="row", how="left").drop("row")
        same = pl.col("_reads").list.contains(pl.col("_cause")).fill_null(False)
        other_cause = (pl.col("_reads").list.len() > 0).fill_null(False) & ~same
        decide = [(pl.col("_same").any() | ~pl.col("_keep").any()).alias("_drop")]

        def gives_way(rows: pl.DataFrame, on: list[str]) -> pl.DataFrame:
            pairs = rows.select("_ct", "_cause", *on).join(info.select(*on, "_generic", "_reads"), on=on)
            return pairs.with_columns(same.alias("_same"), (pl.col("_generic") | other_cause).alias("_keep")).group_by("_ct").agg(decide)

        on_its_line = gives_way(causal.drop("_m"), on_line)
        echoed = gives_way(causal.filter(~pl.col("_ct").is_in(on_its_line["_ct"].implode())), ["kind", "_m"])
        for d in (on_its_line, echoed):
            drop.append(d.filter(pl.col("_drop"))["_ct"])
    gone = pl.concat(drop)
    if not gone.len():
        return ev
    return idx.filter(~pl.col("_ct").is_in(gone.implode())).drop("_ct")


# Names every machine calls itself: they tell no node apart (torchrun's summary prints
# `host : localhost` when the rendezvous ran on the loopback).
NAMELESS_HOSTS = ("localhost", "localhost.localdomain", "127.0.0.1", "::1", "ip6-localhost")


def _hosts_from_paths(ev: pl.DataFrame) -> pl.DataFrame:
    """Events without a host take a known host named in their file's path (``nccl.node003.123.log``)."""
    ev = ev.with_columns(pl.when(pl.col("host").is_in(NAMELESS_HOSTS)).then(None).otherwise(pl.col("host")).alias("host"))
    known = [h for h in ev["host"].drop_nulls().unique().to_list() if len(h) >= 3]
    if not known or ev["host"].null_count() == 0:
        return ev
    files = ev.select("host", "file").filter(pl.col("host").is_null())["file"].drop_nulls().unique()
    # Only hosts whose name is in some path can match (one Aho-Corasick pass over the paths:
    # compiling all 2,048 names of a 16,384-rank job into the alternation cost ~0.3 s).
    known = files.str.extract_many(known, overlapping=True).explode().drop_nulls().unique().to_list() if files.len() else []
    if not known:
        return ev
    import regex

    rx = compile_pattern(r"(?<![A-Za-z0-9])(" + "|".join(regex.escape(h) for h in sorted(known, key=len, reverse=True)) + r")(?![0-9])")
    mapping = {}
    for f in files.to_list():
        m = None
        for m in rx.finditer(f):
            pass
        if m:
            mapping[f] = m.group(1)
    if not mapping:
        return ev
    fill = pl.col("file").replace_strict(mapping, default=None, return_dtype=pl.String)
    return ev.with_columns(pl.coalesce(pl.col("host"), fill).alias("host"))


# Messages that say which rank they are about, when no prefix did: DDP's reducer
# ("Parameters which did not receive grad for rank 3", torch/csrc/distributed/c10d/reducer.cpp),
# DDP's parameter check ("DDP expects same model across all ranks, but Rank 3 has 2247
# params", torch/distributed/utils.py), NCCL init ("Duplicate GPU detected : rank 6 and rank 0
# both on CUDA device", src/init.cc: the rank that found the clash comes first).
SUBJECT_RANK = (
    r"(?:did not receive grad for rank|DDP expects same model across all ranks, but Rank|Duplicate GPU detected : rank) (\d{1,7})\b"
)


def _subject_ranks(ev: pl.DataFrame) -> pl.DataFrame:
    named = pl.col("message").str.extract(SUBJECT_RANK, 1).cast(ev.schema["rank"], strict=False)
    return ev.with_columns(pl.when(pl.col("rank").is_null()).then(named).otherwise(pl.col("rank")).alias("rank"))


def _resolve_ranks(ev: pl.DataFrame) -> pl.DataFrame:
    ev = _subject_ranks(ev)
    # (host, pid) -> rank in the largest communicator that process joined (the world).
    init = ev.filter((pl.col("kind") == Kind.COMM_INIT.value) & pl.col("pid").is_not_null() & pl.col("host").is_not_null())
    if init.height:
        init = init.with_columns(_attr("attrs", "rank", pl.Int32).alias("_r"), _attr("attrs", "nranks", pl.Int32).alias("_n"))
        init = init.filter(pl.col("_r").is_not_null())
        if init.height:
            best = (
                init.sort("_n", descending=True, nulls_last=True)
                .group_by(["host", "pid"], maintain_order=True)
                .first()
                .select("host", "pid", pl.col("_r").alias("_pid_rank"), pl.col("gpu").alias("_pid_gpu"))
            )
            ev = _fill_nulls(ev, best, ["host", "pid"], {"rank": "_pid_rank", "gpu": "_pid_gpu"})
    # srun --label task ids (attrs.srun_task) are SLURM_PROCID: the global rank when srun
    # starts one task per rank; a node's launcher when it starts one per node (torchrun),
    # whose task then names the node (_launcher_task_hosts), not a rank.
    if ev["attrs"].str.contains('"srun_task"', literal=True).any() and tasks_are_ranks(ev):
        task = _attr("attrs", "srun_task", pl.Int32)
        ev = ev.with_columns(pl.when(pl.col("rank").is_null()).then(task).otherwise(pl.col("rank")).alias("rank"))
    ev = _exception_twins(ev)
    # (host, local_rank) -> rank from any event that states both (torchrun summaries).
    both = ev.select("host", "local_rank", "rank").filter(pl.col("rank").is_not_null() & pl.col("local_rank").is_not_null() & pl.col("host").is_not_null())
    if both.height:
        lr = both.group_by(["host", "local_rank"]).agg(pl.col("rank").mode().first().alias("_lr_rank"))
        ev = _fill_nulls(ev, lr, ["host", "local_rank"], {"rank": "_lr_rank"})
    # (host, pid) -> rank from any event stating both (c10 lines behind an NCCL pid).
    pr = ev.select("host", "pid", "rank").filter(pl.col("rank").is_not_null() & pl.col("pid").is_not_null() & pl.col("host").is_not_null())
    if pr.height:
        m = pr.group_by(["host", "pid"]).agg(pl.col("rank").mode().first().alias("_pr"))
        ev = _fill_nulls(ev, m, ["host", "pid"], {"rank": "_pr"})
    # srun's record of the task that made the step fail, read once for both placements below
    first_failed, as_rank = _first_failed_tasks(ev), tasks_are_ranks(ev)
    ev = _failed_task_exceptions(ev, first_failed, as_rank)
    ev = _root_cause_task_hosts(ev, _task_error_exits(ev), as_rank)
    ev = _own_line_hosts(ev)
    ev = _slurm_task_hosts(ev)
    ev = _launcher_task_hosts(ev)
    ev = _task_file_hosts(ev)
    ev = _own_line_pids(ev)
    ev = _pid_only_ranks(ev)
    # rank -> host, for lines that name a rank but not a host (c10 "[rank3]:" lines).
    rh = ev.select("rank", "host", "source").filter(pl.col("rank").is_not_null() & pl.col("host").is_not_null() & (pl.col("source") != "sacct"))
    if rh.height and ev["host"].null_count():
        m = rh.group_by("rank").agg(pl.col("host").mode().sort().first().alias("_rh"))
        ev = _fill_nulls(ev, m, "rank", {"host": "_rh"})
    ev = _faulthandler_workers(_agent_line_hosts(ev))
    return _hosts_by_elimination(_hosts_by_layout(ev)).sort("_id")


def _faulthandler_workers(ev: pl.DataFrame) -> pl.DataFrame:
    """Python's faulthandler (``Fatal Python error: Segmentation fault``, cpython
    Python/faulthandler.c ``faulthandler_fatal_error``) is a dying worker's last words, and
    torchrun's agent reports the same death as ``failed (exitcode: -11) local_rank: 1 (pid: N)``
    (torch/distributed/elastic/multiprocessing/api.py). A faulthandler line behind torchrun's
    ``[default1]:`` tag with no rank of its own is the worker of that local rank whose death by
    the same signal an agent reported, when exactly one rank did."""
    sig = _attr("attrs", "signal")
    fh = ev.filter((pl.col("kind") == Kind.PROCESS_EXIT.value) & pl.col("rank").is_null() & pl.col("local_rank").is_not_null()
                   & pl.col("message").str.starts_with("Fatal Python error: ") & sig.is_not_null())
    if fh.height == 0:
        return ev
    died = (ev.filter((pl.col("kind") == Kind.PROCESS_EXIT.value) & pl.col("rank").is_not_null() & pl.col("local_rank").is_not_null()
                      & pl.col("attrs").str.contains('"agent_pid"', literal=True))
            .select("local_rank", sig.alias("_sig"), "rank", "host").unique())
    one = (died.group_by(["local_rank", "_sig"]).agg(pl.col("rank").first().alias("_fr"), pl.col("host").first().alias("_fh"), pl.len().alias("_n"))
           .filter(pl.col("_n") == 1).drop("_n"))
    if one.height == 0:
        return ev
    ev = ev.with_columns(pl.when(pl.col("message").str.starts_with("Fatal Python error: ")).then(sig).alias("_sig"))
    return _fill_nulls(ev, one, ["local_rank", "_sig"], {"rank": "_fr", "host": "_fh"}).drop("_sig")


def _agent_line_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """torchrun's agent stamps its own lines with its pid (glog ``E1203 14:00:08.321000 24525
    .../api.py:1002] failed (exitcode: -11) local_rank: 1 (pid: 24910) ...``) and there is one
    agent a node: a line of an agent whose other lines in the same file are tied to one node
    (a worker it signalled that the summary names) is on that node, and a worker exit it reports
    by local rank is that node's rank of that local rank. Recorded: segv_rank1_fifth_torchrun,
    where the first attempt's segfaulted worker appears only in its agent's exit line (the restart's
    summary names the second attempt's workers)."""
    if not ev["attrs"].str.contains('"agent_pid"', literal=True).any():
        return ev
    ap = _attr("attrs", "agent_pid", pl.Int64)
    tagged = ev.select("file", ap.alias("_ap"), "host").filter(pl.col("_ap").is_not_null() & pl.col("file").is_not_null())
    known = (tagged.filter(pl.col("host").is_not_null()).group_by(["file", "_ap"])
             .agg(pl.col("host").unique().alias("_hs")).filter(pl.col("_hs").list.len() == 1)
             .select("file", "_ap", pl.col("_hs").list.first().alias("_ah")))
    if known.height == 0:
        return ev
    # only the agent's reports of its workers' exits, which name them by local rank
    exit_ap = pl.when((pl.col("kind") == Kind.PROCESS_EXIT.value) & pl.col("rank").is_null() & pl.col("local_rank").is_not_null()).then(ap)
    both = ev.select("host", "local_rank", "rank").filter(pl.col("rank").is_not_null() & pl.col("local_rank").is_not_null() & pl.col("host").is_not_null())
    if both.height == 0:
        return ev
    lr = (both.group_by(["host", "local_rank"]).agg(pl.col("rank").unique().alias("_rs")).filter(pl.col("_rs").list.len() == 1)
          .select("host", "local_rank", pl.col("_rs").list.first().alias("_lr_rank")))
    hosts = ev.select("host", exit_ap.alias("_ap"), "file", "local_rank", pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"))
    rows = hosts.filter(pl.col("_ap").is_not_null()).drop("host").join(known, on=["file", "_ap"], how="inner").rename({"_ah": "host"})
    rows = rows.join(lr, on=["host", "local_rank"], how="inner")
    if rows.height == 0:
        return ev
    return ev.with_columns(ev["host"].scatter(rows["_p"], rows["host"]),
                           ev["rank"].scatter(rows["_p"], rows["_lr_rank"].cast(ev.schema["rank"])))


# How far from srun's record of the task's exit an unlabelled traceback of that task may be:
# srun writes the record once the task is gone, after the output it drained; the traceback's
# last lines can arrive after it (interleaved stderr, recorded with Slurm 22.05).
TASK_EXIT_LINES_BEFORE, TASK_EXIT_LINES_AFTER = 200, 20


def _first_failed_tasks(ev: pl.DataFrame) -> dict[str, tuple[int, str, int, int]]:
    """File -> (line, node, task, line of the srun record before it) of the one task whose
    error exit srun recorded first, when one task is that task: the only task that exited
    with an error code or died of a signal other than the stop signals (``task 3: Segmentation
    fault``), or, where srun
    then signalled the step (``--kill-on-bad-exit``: ``_step_signal: Terminating
    StepId=...``), the only one recorded before that signal (the tasks after it were stopped
    by srun)."""
    slurm = ev.filter((pl.col("source") == "slurm") & pl.col("file").is_not_null()
                      & pl.col("kind").is_in([Kind.PROCESS_EXIT.value, Kind.JOB_STEP.value]))
    out: dict[str, tuple[int, str, int, int]] = {}
    for f, rows in slurm.sort("line").group_by("file"):
        failed, term, prev = [], None, 0
        for line, kind, a in rows.select("line", "kind", "attrs").iter_rows():
            d = attrs_of(a)
            if kind == Kind.JOB_STEP.value:
                if d.get("action") == "terminate" and term is None:
                    term = line
                continue
            # SIGTERM/SIGINT are how srun, Slurm and launchers stop a task: a consequence
            died = (isinstance(d.get("exitcode"), int) and d["exitcode"] != 0
                    or bool(d.get("signal")) and d.get("signal") not in ("SIGTERM", "SIGINT"))
            if died and (term is None or line < term):
                failed.append((line, d.get("hosts") or [], d.get("tasks") or [], prev))
            prev = line
        if len(failed) != 1:
            continue
        line, hosts, tasks, before = failed[0]
        if len(hosts) == 1 and len(tasks) == 1 and isinstance(hosts[0], str) and isinstance(tasks[0], int):
            out[str(f[0])] = (line, hosts[0], tasks[0], before)
    return out


def _task_error_exits(ev: pl.DataFrame) -> dict[str, list[tuple[int, str, int, int]]]:
    """File -> [(line, node, task, line of the srun record before it)] of every task whose
    error exit (a non-zero exit code, a signal other than SIGTERM/SIGINT) srun recorded there,
    one node and one task to the record, in the file's order."""
    slurm = ev.filter((pl.col("source") == "slurm") & pl.col("file").is_not_null()
                      & (pl.col("kind") == Kind.PROCESS_EXIT.value))
    out: dict[str, list[tuple[int, str, int, int]]] = {}
    for f, rows in slurm.sort("line").group_by("file"):
        prev = 0
        for line, a in rows.select("line", "attrs").iter_rows():
            d = attrs_of(a)
            died = (isinstance(d.get("exitcode"), int) and d["exitcode"] != 0
                    or bool(d.get("signal")) and d.get("signal") not in ("SIGTERM", "SIGINT"))
            hosts, tasks = d.get("hosts") or [], d.get("tasks") or []
            if died and len(hosts) == 1 and len(tasks) == 1 and isinstance(hosts[0], str) and isinstance(tasks[0], int):
                out.setdefault(str(f[0]), []).append((line, hosts[0], tasks[0], prev))
            prev = line
    return out


def _failed_task_exceptions(ev: pl.DataFrame, first: dict[str, tuple[int, str, int, int]], as_rank: bool) -> pl.DataFrame:
    """An unlabelled Python traceback in srun's output (no ``srun -l``, no ``[rankN]:``) is the
    task's whose error exit made the step fail (``_first_failed_tasks``: ``srun: error: n2:
    task 1: Exited with exit code 1``; Python exits 1 on an uncaught exception, the others
    were signalled): its node, and its rank when tasks are ranks."""
    if not first:
        return ev
    # no launcher tag at all: a torchrun worker's "[default3]:" line may be another node's.
    # Python's faulthandler ("Fatal Python error: Segmentation fault", then the thread's
    # stack) is a dying process's last words too, where a task is a rank (under torchrun the
    # agent's summary names the rank that died and its pid).
    dying = pl.col("kind") == Kind.EXCEPTION.value
    if as_rank:
        dying = dying | pl.col("message").str.starts_with("Fatal Python error: ")
    unlabelled = (dying & pl.col("rank").is_null() & pl.col("host").is_null()
                  & pl.col("local_rank").is_null() & ~pl.col("attrs").str.contains('"srun_task"', literal=True))
    if not ev.select(unlabelled.any()).item():
        return ev
    fills = [(f, line - TASK_EXIT_LINES_BEFORE, line + TASK_EXIT_LINES_AFTER, host, task if as_rank else None)
             for f, (line, host, task, _) in first.items()]
    for file, lo, hi, host, rank in fills:
        hit = unlabelled & (pl.col("file") == file) & pl.col("line").is_between(lo, hi)
        ev = ev.with_columns(pl.when(hit).then(pl.lit(host)).otherwise(pl.col("host")).alias("host"),
                             pl.when(hit).then(pl.lit(rank, dtype=ev.schema["rank"])).otherwise(pl.col("rank")).alias("rank"))
    return ev


def _root_cause_task_hosts(ev: pl.DataFrame, exits: dict[str, list[tuple[int, str, int, int]]], as_rank: bool) -> pl.DataFrame:
    """Under torchrun started by srun (one elastic agent per node), an agent whose worker
    failed prints the ChildFailedError summary and exits 1, and srun records that task's
    exit right after draining its output; the summary's own host is the container's or
    ``localhost`` more often than not. So the root cause entry (``Root Cause (first observed
    failure)``) printed before srun's record of a task's error exit, and after srun's record
    before it, is that task's node's when it is the only one there: its rank ran there. That
    holds for each agent's record, the first or a later one (without ``--kill-on-bad-exit`` each
    agent exits 1 after its own summary). Two agents whose workers both failed print their
    summaries in either order before srun records either exit (recorded:
    iptables_rank1_nodebug_torchrun), so two say nothing. Nor does a summary followed, before the
    record, by another agent's own dying traceback: torchrun's ``main`` is wrapped in ``@record``
    (torch/distributed/run.py), so an agent that fails itself (``RendezvousClosedError`` while it
    restarts its workers after the other agent gave up) prints that exception, not a summary, and
    exits 1; the output srun drained last before the record is the recorded agent's (recorded:
    exception_rank3_fifth_torchrun, --max-restarts=1)."""
    if not exits or as_rank or not under_torchrun(ev):
        return ev
    roots = ev.filter((pl.col("kind") == Kind.ROOT_CAUSE_REPORT.value) & pl.col("rank").is_not_null()
                      & (_attr("attrs", "root") == "true"))
    if roots.height == 0 or roots["host"].null_count() == 0:
        return ev
    etype = _attr("attrs", "type")
    agent_died = ev.filter((pl.col("kind") == Kind.EXCEPTION.value) & pl.col("rank").is_null()
                           & etype.str.starts_with("torch.distributed.elastic.").fill_null(False)
                           & ~etype.str.ends_with(".ChildFailedError").fill_null(False))
    ranks: dict[int, str] = {}
    for f, records in exits.items():
        for line, host, _, before in records:
            near = roots.filter((pl.col("file") == f) & pl.col("line").is_between(max(before + 1, line - TASK_EXIT_LINES_BEFORE), line))
            if near["rank"].n_unique() != 1:
                continue
            if agent_died.filter((pl.col("file") == f) & pl.col("line").is_between(int(cast(int, near["line"].max())) + 1, line)).height:
                continue
            ranks.setdefault(int(near["rank"][0]), host)
    if not ranks:
        return ev
    m = pl.DataFrame({"rank": list(ranks), "_rch": list(ranks.values())}, schema={"rank": ev.schema["rank"], "_rch": pl.String})
    return _fill_nulls(ev, m, "rank", {"host": "_rch"})


# A node named in a rank's own log header: a bracketed field (``[n2]``, python logging
# ``%(hostname)s`` in brackets) or a ``node=``/``host=``/``hostname=`` field.
OWN_HOST_MIN_SHARE = 0.5


def _own_line_pids(ev: pl.DataFrame) -> pl.DataFrame:
    """Rank -> pid from the rank's own log: the applog source gives a rank's activity the one
    pid its lines state (``started pid=7621 ...``); when no other rank states that pid it is
    the rank's process, so a kernel OOM kill of that pid, which says no rank and often no
    node, lands on the rank (``_pid_only_ranks``)."""
    act = ev.filter((pl.col("source") == "applog") & (pl.col("kind") == Kind.ACTIVITY.value) & pl.col("rank").is_not_null()
                    & pl.col("attrs").str.contains('"pid"', literal=True))
    if act.height == 0:
        return ev
    named = act.select("rank", _attr("attrs", "pid", pl.Int64).alias("_p")).filter(pl.col("_p").is_not_null()).unique()
    one = named.group_by("rank").agg(pl.col("_p").first(), pl.len().alias("_n")).filter(pl.col("_n") == 1)
    once = named.group_by("_p").agg(pl.len().alias("_m")).filter(pl.col("_m") == 1)
    m = one.join(once, on="_p", how="semi").select(pl.col("rank").cast(ev.schema["rank"]), pl.col("_p").cast(ev.schema["pid"]).alias("_op"))
    if m.height == 0:
        return ev
    ev = ev.join(m, on="rank", how="left")
    fill = (pl.col("source") == "applog") & pl.col("pid").is_null()
    return ev.with_columns(pl.when(fill).then(pl.col("_op")).otherwise(pl.col("pid")).alias("pid")).drop("_op").sort("_id")


def _job_nodes(ev: pl.DataFrame) -> list[str]:
    """The job's nodes as Slurm lists them (the longest NodeList any record gives)."""
    nodes: list[str] = []
    for a in ev.filter(pl.col("kind") == Kind.JOB_STATE.value)["attrs"].drop_nulls().to_list():
        v = attrs_of(a).get("nodes")
        if isinstance(v, list) and len(v) > len(nodes) and all(isinstance(x, str) for x in v):
            nodes = v
    return nodes


def _fill_applog_hosts(ev: pl.DataFrame, rank_host: pl.DataFrame) -> pl.DataFrame:
    """The application-log events without a host get their rank's node (``rank_host``: rank, _h)."""
    ev = ev.join(rank_host.with_columns(pl.col("rank").cast(ev.schema["rank"])), on="rank", how="left")
    fill = (pl.col("source") == "applog") & pl.col("host").is_null()
    return ev.with_columns(pl.when(fill).then(pl.col("_h")).otherwise(pl.col("host")).alias("host")).drop("_h")


def _identity_hosts(ev: pl.DataFrame, nodes: list[str]) -> pl.DataFrame:
    """Rank -> node from the rank's own statement of it (applog's ``identity``: ``[rank 2] hostname=n2
    local_rank=0``), when every such line of the rank names the same node of the job's NodeList."""
    ids = ev.filter((pl.col("kind") == Kind.IDENTITY.value) & pl.col("rank").is_not_null())
    if ids.height == 0:
        return ev
    named = ids.select("rank", _attr("attrs", "host", pl.String).alias("_ih"))
    per = named.group_by("rank").agg(pl.col("_ih").n_unique().alias("_k"), pl.col("_ih").first())
    per = per.filter((pl.col("_k") == 1) & pl.col("_ih").is_in(nodes))
    if per.height == 0:
        return ev
    return _fill_applog_hosts(ev, per.select("rank", pl.col("_ih").alias("_h")))


def _own_line_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """Rank -> node from the rank's own log lines: an application log whose every line
    names the rank and, in its header, one of the job's nodes (``[rank 1/4] [n1] train -
    ...``, ``node=n1``). Under torchrun the srun task ids are node indices and the agent's
    summary says ``localhost``, so this is often the only line that ties a rank to its node.
    Only a node of the job's NodeList counts (``host=vm`` is the machine, not the Slurm
    node), only when it is the one node named by at least half of that rank's lines."""
    nodes = [n for n in _job_nodes(ev) if 1 <= len(n) <= 64 and n not in NAMELESS_HOSTS]
    if not nodes or len(nodes) > 4096:
        return ev
    ev = _identity_hosts(ev, nodes)
    todo = ev.filter((pl.col("source") == "applog") & pl.col("rank").is_not_null() & pl.col("host").is_null())
    if todo.height == 0:
        return ev
    import regex

    alt = "|".join(regex.escape(n) for n in sorted(nodes, key=len, reverse=True))
    rx = r"(?:\[(" + alt + r")\]|\b(?:node|host|hostname|nodename)[=:] ?(" + alt + r")(?:[\s,;\])]|$))"
    named = todo.select(
        "rank",
        pl.coalesce(pl.col("message").str.slice(0, 240).str.extract(rx, 1), pl.col("message").str.slice(0, 240).str.extract(rx, 2)).alias("_n"),
    )
    per = named.group_by("rank").agg(
        pl.len().alias("_lines"), pl.col("_n").drop_nulls().n_unique().alias("_k"), pl.col("_n").drop_nulls().mode().first().alias("_oh"),
        pl.col("_n").drop_nulls().len().alias("_hits"),
    )
    per = per.filter((pl.col("_k") == 1) & (pl.col("_hits") >= OWN_HOST_MIN_SHARE * pl.col("_lines")))
    if per.height == 0:
        return ev
    return _fill_applog_hosts(ev, per.select("rank", pl.col("_oh").alias("_h")))


def _fold_host_case(ev: pl.DataFrame) -> pl.DataFrame:
    """One spelling per host: host names are case-insensitive (RFC 4343), and one job's files
    spell the same node differently (srun's ``error: Orion-01-01: task 4`` beside the step
    banner's ``orion-01-01``). The lower-case spelling wins where a file has it (the DNS
    canonical form), else the most frequent one."""
    counts = ev["host"].drop_nulls().value_counts()
    if counts.height < 2:
        return ev
    by_fold: dict[str, list[tuple[str, int]]] = {}
    for h, n in counts.iter_rows():
        by_fold.setdefault(h.lower(), []).append((h, n))
    mapping = {}
    for low, spellings in by_fold.items():
        if len(spellings) < 2:
            continue
        names = {h for h, _ in spellings}
        keep = low if low in names else max(spellings, key=lambda s: (s[1], s[0]))[0]
        mapping.update({h: keep for h in names if h != keep})
    if not mapping:
        return ev
    return ev.with_columns(pl.col("host").replace(mapping))


def _hosts_by_elimination(ev: pl.DataFrame) -> pl.DataFrame:
    """A rank with no host, when the job's nodes run equal numbers of ranks and only one
    node is short of ranks, is on that node (the stopped rank that wrote nothing naming
    its node, while every other rank's node is known)."""
    world = world_size(ev)
    if not world or ev["host"].null_count() == 0:
        return ev
    rh = ev.select("rank", "host", "source").filter(pl.col("rank").is_not_null() & pl.col("host").is_not_null() & (pl.col("source") != "sacct"))
    # Nothing to infer when every rank of the world has a host (the usual case: one pass on
    # the rank column instead of a mode per rank over every hosted row, ~0.1 s at 16,384 ranks).
    if world <= 1_000_000 and rh.select(pl.col("rank").filter((pl.col("rank") >= 0) & (pl.col("rank") < world)).n_unique()).item() == world:
        return ev
    host_of = dict(rh.group_by("rank").agg(pl.col("host").mode().sort().first()).iter_rows())
    nodes: list[str] = []
    for a in ev.filter(pl.col("kind") == Kind.JOB_STATE.value)["attrs"].drop_nulls().to_list():
        v = attrs_of(a).get("nodes")
        if isinstance(v, list) and len(v) > len(nodes) and all(isinstance(x, str) for x in v):
            nodes = v
    nodes = nodes or sorted(set(host_of.values()))
    if len(nodes) < 2 or world % len(nodes) or world > 1_000_000:
        return ev
    per = world // len(nodes)
    node_set = set(nodes)
    count = Counter(h for h in host_of.values() if h in node_set)
    if any(c > per for c in count.values()) or set(host_of.values()) - node_set:
        return ev  # not an even layout on these nodes: nothing to infer
    short = [h for h in nodes if count.get(h, 0) < per]
    unknown = [r for r in range(world) if r not in host_of]
    if len(short) != 1 or not unknown or len(unknown) != per - count.get(short[0], 0):
        return ev
    m = pl.DataFrame({"rank": unknown, "_eh": [short[0]] * len(unknown)}, schema={"rank": ev.schema["rank"], "_eh": pl.String})
    return _fill_nulls(ev, m, "rank", {"host": "_eh"})


def _hosts_by_layout(ev: pl.DataFrame) -> pl.DataFrame:
    """Rank -> node from the step's task layout, for ranks no line ties to a node (a run that
    completed: no ``srun: error: <node>: task N`` line; a training script that prints no host).

    Under srun with one task per rank (SLURM_PROCID is the rank), a step of T = world tasks on
    nodes N in block distribution (srun's default: consecutive task ids share a node,
    ``slurm_step_layout.c``) with T/|N| tasks per node puts rank r on N[r // per]. The layout is
    what Slurm recorded: sacct's step ``tasks``/``task.distribution`` (``--json``) or
    ``NTasks``/``Layout``, ``scontrol show job``'s NumTasks and ``NtasksPerN``. A cyclic, plane
    or arbitrary layout, two steps that disagree, or a rank whose node is known elsewhere is
    on another node than the layout says, and nothing is inferred."""
    if ev["host"].null_count() == 0 or ev.filter(pl.col("rank").is_not_null() & pl.col("host").is_null()).height == 0:
        return ev
    world = world_size(ev)
    if not world or world > 1_000_000 or under_torchrun(ev):
        return ev
    layouts: set[tuple[tuple[str, ...], int]] = set()
    for a in ev.filter(pl.col("kind") == Kind.JOB_STATE.value)["attrs"].drop_nulls().to_list()[:10_000]:
        d = attrs_of(a)
        nodes, tasks = d.get("nodes"), d.get("ntasks")
        if not (isinstance(nodes, list) and len(nodes) >= 2 and tasks == world and all(isinstance(x, str) for x in nodes)):
            continue
        dist = str(d.get("distribution") or "").lower()
        if dist and not dist.startswith("block"):
            return ev
        per = d.get("tasks_per_node")
        if per is None and world % len(nodes) == 0:
            per = world // len(nodes)
        if isinstance(per, int) and per * len(nodes) == world:
            layouts.add((tuple(nodes), per))
    if len(layouts) != 1:
        return ev
    ((nodes, per),) = layouts
    known = ev.filter(pl.col("rank").is_not_null() & pl.col("host").is_not_null() & (pl.col("source") != "sacct"))
    for r, h in known.group_by("rank").agg(pl.col("host").mode().sort().first()).iter_rows():
        if not (0 <= r < world) or nodes[r // per] != h:
            return ev
    m = pl.DataFrame({"rank": list(range(world)), "_lh": [nodes[r // per] for r in range(world)]},
                     schema={"rank": ev.schema["rank"], "_lh": pl.String})
    return _fill_nulls(ev, m, "rank", {"host": "_lh"})


TWIN_KEY_CHARS = 120


def _exception_twins(ev: pl.DataFrame) -> pl.DataFrame:
    """The same exception text in a rank's log (rank known) and in a worker's error file
    on a node (host and local rank known, from torchelastic's per-node error.json) ties
    that rank to that node. Only texts seen on exactly one rank and one host count."""
    # The error file keeps the whole text, the log line may be cut or carry more: the head decides.
    exc = ev.filter(pl.col("kind") == Kind.EXCEPTION.value).with_columns(pl.col("message").str.slice(0, TWIN_KEY_CHARS))
    if exc.height == 0:
        return ev
    ranked = exc.filter(pl.col("rank").is_not_null()).group_by("message").agg(pl.col("rank").unique().alias("_rs"))
    hosted = exc.filter(pl.col("rank").is_null() & pl.col("host").is_not_null()).group_by("message").agg(
        pl.col("host").unique().alias("_hs"), pl.col("local_rank").drop_nulls().unique().alias("_ls")
    )
    twins = ranked.join(hosted, on="message").filter((pl.col("_rs").list.len() == 1) & (pl.col("_hs").list.len() == 1))
    if twins.height == 0:
        return ev
    pairs = twins.select(
        pl.col("_rs").list.first().alias("_tr"), pl.col("_hs").list.first().alias("_th"),
        pl.when(pl.col("_ls").list.len() == 1).then(pl.col("_ls").list.first()).alias("_tl"),
    ).unique(subset=["_tr"], keep="first")
    # rank -> host for the rank's own lines
    ev = _fill_nulls(ev, pairs.select(pl.col("_tr").alias("rank"), "_th"), "rank", {"host": "_th"})
    # (host, local rank) -> rank for the error files' lines
    hl = pairs.filter(pl.col("_tl").is_not_null()).select(pl.col("_th").alias("host"), pl.col("_tl").alias("local_rank"), "_tr")
    hl = hl.with_columns(pl.col("local_rank").cast(ev.schema["local_rank"]), pl.col("_tr").cast(ev.schema["rank"]))
    return _fill_nulls(ev, hl, ["host", "local_rank"], {"rank": "_tr"})


def _pid_only_ranks(ev: pl.DataFrame) -> pl.DataFrame:
    """A pid with no host (a kernel OOM kill in a dmesg that did not say its node) is the
    rank that some other line gave that pid to (torchrun's `exitcode: -9 (pid: N)` summary),
    when exactly one rank ever had it."""
    todo = ev.filter(pl.col("rank").is_null() & pl.col("pid").is_not_null())
    if todo.height == 0:
        return ev
    known = ev.filter(pl.col("rank").is_not_null() & pl.col("pid").is_not_null()).group_by("pid").agg(
        pl.col("rank").unique().alias("_rs"), pl.col("host").drop_nulls().unique().alias("_hs")
    )
    one = known.filter(pl.col("_rs").list.len() == 1).select("pid", pl.col("_rs").list.first().alias("_pr"), pl.col("_hs"))
    if one.height == 0:
        return ev
    ev = ev.join(one, on="pid", how="left")
    ok = pl.col("rank").is_null() & pl.col("_pr").is_not_null() & (pl.col("host").is_null() | pl.col("_hs").list.contains(pl.col("host")).fill_null(False) | (pl.col("_hs").list.len() == 0))
    return ev.with_columns(pl.when(ok).then(pl.col("_pr")).otherwise(pl.col("rank")).alias("rank")).drop("_pr", "_hs")


def under_torchrun(ev: pl.DataFrame) -> bool:
    """Did torchrun (an elastic agent per node) start the ranks? Then srun's task ids are
    node indices, not ranks. Its traces: local ranks, error files, the agent's own lines."""
    return bool(
        ev.filter(
            pl.col("local_rank").is_not_null()
            | (pl.col("source") == "torchelastic")
            | (pl.col("kind") == Kind.ROOT_CAUSE_REPORT.value)
            | pl.col("attrs").str.contains('"agent_pid"', literal=True)
            | pl.col("message").str.contains("torch/distributed/elastic/", literal=True)
        ).height
    )


def _slurm_seen(ev: pl.DataFrame) -> bool:
    """Did Slurm run this job, as far as the files show (its own lines, sacct, a job record,
    SLURM_* in an environment dump)? Only then is a leading ``N: `` srun's task label (ctest
    and other tools number their lines the same way)."""
    return bool(ev.filter(pl.col("source").cast(pl.String).is_in(["slurm", "sacct"]) | (pl.col("kind") == Kind.JOB_STATE.value)
                          | ((pl.col("source") == "envdump") & pl.col("attrs").str.contains("SLURM_", literal=True))).height)


def tasks_are_ranks(ev: pl.DataFrame) -> bool:
    """Is an srun task id (SLURM_PROCID) the global rank? Yes when srun started one task per
    rank (and Slurm ran the job: ``_slurm_seen``); no under torchrun (one elastic agent per node starts the node's ranks), and no when
    the step that Slurm recorded had fewer tasks than NCCL's world has ranks (one launcher
    per node of any kind)."""
    if under_torchrun(ev) or not _slurm_seen(ev):
        return False
    init = ev.filter(pl.col("kind") == Kind.COMM_INIT.value)
    nranks = init.select(_attr("attrs", "nranks", pl.Int64).max()).item() if init.height else None
    if not nranks:
        return True
    tasks = [attrs_of(a).get("ntasks") for a in ev.filter(pl.col("kind") == Kind.JOB_STATE.value)["attrs"].drop_nulls().to_list()[:10_000]]
    counts = [t for t in tasks if isinstance(t, int) and t > 0]
    return not counts or max(counts) >= nranks


def slurm_task_hosts(ev: pl.DataFrame) -> dict[int, str]:
    """Rank -> node as srun's task exit records say (``srun: error: n2: tasks 2-3: Exited ...``);
    empty unless a task id is the global rank (``tasks_are_ranks``: under torchrun a task is a
    node's agent, not a rank)."""
    if not tasks_are_ranks(ev):
        return {}
    return _srun_exit_task_hosts(ev)


def _srun_exit_task_hosts(ev: pl.DataFrame, one_task_only: bool = False) -> dict[int, str]:
    """srun task id -> node as srun's task exit records name them (``srun: error: n2: tasks
    2-3: Exited ...``); a record naming several nodes says nothing per task. ``one_task_only``
    keeps only records of a single task."""
    exits = ev.filter((pl.col("kind") == Kind.PROCESS_EXIT.value) & (pl.col("source") == "slurm") & pl.col("attrs").str.contains('"tasks"', literal=True))
    pairs: dict[int, str] = {}
    for a in exits["attrs"].to_list():
        d = attrs_of(a)
        hosts, tasks = d.get("hosts") or [], d.get("tasks") or []
        if len(hosts) != 1 or not isinstance(hosts[0], str) or (one_task_only and len(tasks) != 1):
            continue
        for t in tasks[:100_000]:
            if isinstance(t, int):
                pairs.setdefault(t, hosts[0])
    return pairs


def _slurm_task_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """Rank -> node from what Slurm says about its tasks: ``srun: error: n2: tasks 2-3:
    Exited ...`` names the node of those tasks. Under srun with one task per rank a task id
    is the global rank; under torchrun (ranks with local ranks) it is the node index, so
    the mapping is used only when tasks are ranks (``tasks_are_ranks``)."""
    pairs = slurm_task_hosts(ev)
    if not pairs:
        return ev
    m = pl.DataFrame({"rank": list(pairs), "_sh": list(pairs.values())}, schema={"rank": ev.schema["rank"], "_sh": pl.String})
    return _fill_nulls(ev, m, "rank", {"host": "_sh"})


def _launcher_task_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """Under torchrun started by srun (one task per node), a line's ``srun -l`` task label
    (a launcher's, or a rank's that torchrun printed unprefixed) is its node: the node that ``srun: error: <node>: task <n>`` names for task n, else
    the n-th node of the job's NodeList when there are as many tasks as nodes (srun numbers
    the tasks of a one-task-per-node step in NodeList order)."""
    if not ev["attrs"].str.contains('"srun_task"', literal=True).any() or tasks_are_ranks(ev):
        return ev
    task = _attr("attrs", "srun_task", pl.Int64)
    todo = ev.filter(pl.col("host").is_null() & pl.col("attrs").str.contains('"srun_task"', literal=True))
    if todo.height == 0:
        return ev
    said = _srun_exit_task_hosts(ev, one_task_only=True)
    nodes = _job_nodes(ev)
    seen = ev.filter(pl.col("attrs").str.contains('"srun_task"', literal=True)).select(task.alias("t"))["t"].drop_nulls()
    layout: dict[int, str] = {}
    if nodes and seen.len() and int(seen.max()) + 1 <= len(nodes) == seen.n_unique() and int(seen.min()) >= 0:  # type: ignore[arg-type,operator]
        layout = dict(enumerate(nodes))
        if any(layout.get(t) != h for t, h in said.items()):
            layout = {}  # the layout guess contradicts what srun said: trust only srun
    pairs = {**layout, **said}
    if not pairs:
        return ev
    m = pl.DataFrame({"_task": list(pairs), "_th": list(pairs.values())}, schema={"_task": pl.Int64, "_th": pl.String})
    ev = ev.with_columns(task.alias("_task")).join(m, on="_task", how="left")
    return ev.with_columns(pl.coalesce("host", "_th").alias("host")).drop("_task", "_th").sort("_id")


# ``srun -o slurm-%j-%t.out``: one output file per task (srun(1) filename pattern: %j job id, %t task id)
_TASK_FILE = re.compile(r"^slurm-(?P<job>\d+)-(?P<task>\d+)\.out$")


def _task_file_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """Under torchrun started by srun with per-task output files (``srun -o slurm-%j-%t.out torchrun ...``),
    a file holds one task's output: one agent and its workers, all on that task's node, which srun's exit
    record of the task names (``srun: error: n2: task 1: Exited ...``). Only srun's word is used (no layout
    guess). Under srun alone a task is a rank and ``_slurm_task_hosts`` places it."""
    if not under_torchrun(ev):
        return ev
    said = _srun_exit_task_hosts(ev)
    if not said:
        return ev
    jobs = {j for j in ev.filter(pl.col("kind") == Kind.JOB_STATE.value)["job_id"].drop_nulls().to_list()}
    mapping: dict[str, str] = {}
    for f in ev["file"].drop_nulls().unique().to_list():
        m = _TASK_FILE.match(f.rsplit("/", 1)[-1])
        if m and (not jobs or m.group("job") in jobs) and int(m.group("task")) in said:
            mapping[f] = said[int(m.group("task"))]
    if not mapping:
        return ev
    fill = pl.col("file").replace_strict(mapping, default=None, return_dtype=pl.String)
    return ev.with_columns(pl.coalesce(pl.col("host"), fill).alias("host"))


def _resolve_gpus(ev: pl.DataFrame) -> pl.DataFrame:
    """(host, rank) -> GPU PCI, and back: kernel/telemetry events on a GPU get its rank."""
    known = ev.select("host", "rank", "gpu").filter(pl.col("host").is_not_null() & pl.col("rank").is_not_null() & pl.col("gpu").is_not_null())
    if known.height == 0:
        return ev
    rank_gpu = known.group_by(["host", "rank"]).agg(pl.col("gpu").mode().first().alias("_g"))
    gpu_rank = known.group_by(["host", "gpu"]).agg(pl.col("rank").mode().first().alias("_r"))
    ev = _fill_nulls(ev, rank_gpu, ["host", "rank"], {"gpu": "_g"})
    ev = _fill_nulls(ev, gpu_rank, ["host", "gpu"], {"rank": "_r"})
    # nvidia-smi index for a PCI id, when an inventory names both.
    inv = ev.select("host", "gpu", "gpu_index", "source").filter(
        pl.col("gpu").is_not_null() & pl.col("gpu_index").is_not_null() & pl.col("host").is_not_null() & pl.col("source").is_in(["nvidia_smi", "gpu_csv", "kernel"]))
    if inv.height:
        gi = inv.group_by(["host", "gpu"]).agg(pl.col("gpu_index").mode().first().alias("_gi"))
        ev = _fill_nulls(ev, gi, ["host", "gpu"], {"gpu_index": "_gi"}, override=True)
    return ev.sort("_id")


def _kernel_clock(ev: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Boot-relative kernel stamps (attrs.mono, seconds) -> UTC via a per-host boot epoch."""
    mono = _attr("attrs", "mono", pl.Float64)
    has_mono = ev.filter(pl.col("attrs").str.contains('"mono"', literal=True))
    if has_mono.height == 0:
        return ev
    has_mono = has_mono.with_columns(mono.alias("_mono"), _attr("attrs", "boot", pl.String).alias("_boot"))
    need = has_mono.filter(pl.col("time").is_null() & pl.col("_mono").is_not_null())
    if need.height == 0:
        return ev
    # Epoch candidates: events with both clocks, and /proc/stat btime boot events.
    pairs = has_mono.filter(pl.col("time").is_not_null() & pl.col("_mono").is_not_null())
    epochs: dict[str, list[float]] = defaultdict(list)
    for host, t, m in pairs.select("host", pl.col("time").dt.epoch("ns"), "_mono").iter_rows():
        if host:
            epochs[host].append(t / 1e9 - m)
    btimes = ev.filter((pl.col("kind") == Kind.BOOT.value) & pl.col("attrs").str.contains('"btime"', literal=True))
    for host, bt in btimes.select("host", _attr("attrs", "btime", pl.Float64)).iter_rows():
        if host and bt:
            epochs[host].append(bt)
    boot_epoch = {h: median(v) for h, v in epochs.items()}
    # Later boots in the same file: mono restarts; only the last boot can use btime (it
    # is "now"'s boot), earlier boots stay unconverted.
    upd_ids: list[int] = []
    upd_times: list[int] = []
    unresolved: Counter[str] = Counter()
    boots_per_file = need.group_by("file").agg(pl.col("_boot").n_unique().alias("n"), pl.col("_boot").max().alias("last"))
    last_boot = {f: b for f, _, b in boots_per_file.iter_rows()}
    for _id, host, m, boot, f in need.select("_id", "host", "_mono", "_boot", "file").iter_rows():
        ep = boot_epoch.get(host) if host else None
        if ep is None or (boot is not None and boot != last_boot.get(f)):
            unresolved[f] += 1
            continue
        upd_ids.append(_id)
        upd_times.append(int(round((ep + m) * 1e9)))
    for f, n in unresolved.items():
        warnings.append(
            f"{f}: {n} kernel lines have only boot-relative stamps and no boot time for their host "
            "(collect /proc/stat btime or journalctl -o json); their times are unknown"
        )
    if not upd_ids:
        return ev
    upd = pl.DataFrame({"_id": upd_ids, "_t": upd_times}, schema={"_id": pl.UInt32, "_t": pl.Int64})
    ev = ev.join(upd, on="_id", how="left")
    return ev.with_columns(
        pl.when(pl.col("_t").is_not_null()).then(pl.col("_t").cast(pl.Datetime("ns", "UTC"))).otherwise(pl.col("time")).alias("time"),
        pl.when(pl.col("_t").is_not_null()).then(pl.lit(TimeQuality.ALIGNED.value)).otherwise(pl.col("time_quality").cast(pl.String)).cast(EVENT_SCHEMA["time_quality"]).alias("time_quality"),
    ).drop("_t").sort("_id")


def _clock_skew(ev: pl.DataFrame, warnings: list[str]) -> tuple[pl.DataFrame, dict[str, float]]:
    """Per-host offsets from events that happen at one true instant on every host:

    * the collective timeout of one (process group, sequence number) on every rank (each
      rank's watchdog fires ``timeout`` after the same collective started);
    * the slurmstepd cancel banner of one step on every node;
    * the start of each node's torchrun agent (srun starts the step's tasks together);
    * each node's torchrun agent receiving the step's signal (srun signals every task of the
      step at once: ``Received SIGTERM death signal, shutting down workers``).

    An anchor counts when at least ``SKEW_MIN_HOSTS`` hosts saw it; a host's offset is the
    median over its anchors of (its time - the anchor's median over hosts). The timeline is
    shifted only on strong evidence: ``|offset| >= SKEW_THRESHOLD_S``, at least
    ``SKEW_MIN_OBS`` observations on that host (two anchors, or one anchor seen by several
    of its ranks), and the observations agree (spread within ``SKEW_MAX_SPREAD``)."""
    anchors = ev.filter(pl.col("time").is_not_null() & pl.col("host").is_not_null() & (pl.col("source") != "sacct"))
    to = anchors.filter(pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value).with_columns(
        pl.concat_str([pl.lit("to:"), _attr("attrs", "pg_id").fill_null(""), pl.lit(":"), _attr("attrs", "seq").fill_null("")]).alias("_k")
    )
    ca = anchors.filter(pl.col("kind") == Kind.JOB_CANCEL.value).with_columns(
        pl.concat_str([pl.lit("cancel:"), _attr("attrs", "id").fill_null("")]).alias("_k")
    )
    # launcher lines: one per agent and node; a host with two (a restarted job) says nothing
    st = anchors.filter(
        (pl.col("kind") == Kind.JOB_STEP.value) & pl.col("attrs").str.contains('"launcher_start"', literal=True)
    ).with_columns(pl.concat_str([pl.lit("start:"), _attr("attrs", "launcher").fill_null("")]).alias("_k"))
    sg = anchors.filter(
        (pl.col("kind") == Kind.SIGNAL.value) & pl.col("attrs").str.contains('"received"', literal=True)
        & pl.col("attrs").str.contains('"agent_pid"', literal=True)
    ).with_columns(pl.concat_str([pl.lit("signal:"), _attr("attrs", "signal").fill_null("")]).alias("_k"))
    once = pl.concat([st, sg], how="vertical")
    if once.height:
        single = once.group_by(["_k", "host"]).agg(pl.len().alias("_c")).filter(pl.col("_c") == 1).drop("_c")
        once = once.join(single, on=["_k", "host"], how="semi")
    a = pl.concat([to, ca, once], how="vertical").filter(~pl.col("_k").str.ends_with(":"))
    if a.height == 0:
        return ev, {}
    a = a.with_columns(pl.col("time").dt.epoch("ns").alias("_t"))
    per_host = a.group_by(["_k", "host"]).agg(pl.col("_t").median().alias("_ht"), pl.len().alias("_obs"))
    multi = per_host.group_by("_k").agg(pl.len().alias("_nh"), pl.col("_ht").median().alias("_gt")).filter(pl.col("_nh") >= SKEW_MIN_HOSTS)
    if multi.height == 0:
        return ev, {}
    d = per_host.join(multi, on="_k").with_columns(((pl.col("_ht") - pl.col("_gt")) / 1e9).alias("_off"))
    offs = d.group_by("host").agg(
        pl.col("_off").median().alias("off"), pl.col("_obs").sum().alias("obs"),
        (pl.col("_off").max() - pl.col("_off").min()).alias("spread"),
    )
    skew = {h: round(o, 3) for h, o, _, _ in sorted(offs.iter_rows(), key=lambda r: r[0] or "") if h}
    strong = {h for h, o, n, sp in offs.iter_rows() if h and n >= SKEW_MIN_OBS and sp <= max(SKEW_MAX_SPREAD, 0.25 * abs(o))}
    fix = {h: o for h, o in skew.items() if abs(o) >= SKEW_THRESHOLD_S and h in strong}
    for h, o in sorted(skew.items()):
        if abs(o) >= SKEW_THRESHOLD_S and h not in strong:
            warnings.append(f"clock of {h} may be {o:+.1f} s off the other hosts (too few or disagreeing anchors); its events were not shifted")
    if not fix:
        return ev, skew
    for h, o in sorted(fix.items()):
        warnings.append(f"clock of {h} is {o:+.1f} s off the other hosts; its events were shifted (time quality 'aligned')")
    shift = pl.col("host").replace_strict({h: int(round(o * 1e9)) for h, o in fix.items()}, default=0, return_dtype=pl.Int64)
    apply = pl.col("time").is_not_null() & (pl.col("source") != "sacct") & pl.col("host").is_in(list(fix))
    ev = ev.with_columns(
        pl.when(apply).then((pl.col("time").dt.epoch("ns") - shift).cast(pl.Datetime("ns", "UTC"))).otherwise(pl.col("time")).alias("time"),
        pl.when(apply).then(pl.lit(TimeQuality.ALIGNED.value)).otherwise(pl.col("time_quality").cast(pl.String)).cast(EVENT_SCHEMA["time_quality"]).alias("time_quality"),
    )
    return ev, skew


def _same_line_times(ev: pl.DataFrame) -> pl.DataFrame:
    """An event whose source read no stamp takes the stamp another source read on the same
    line (the application log's `2026-12-01 11:36:50,140 - ERROR -` in front of a gloo error)."""
    if ev["time"].null_count() == 0:
        return ev
    if ev.filter(pl.col("time").is_not_null() & pl.col("line").is_not_null()).height == 0:
        return ev
    # Per (file, line): the earliest stamp and the first stamped row's quality, as window
    # expressions over the rows of files that have an unstamped line (a join of the whole
    # frame, then putting it back in order, cost ~1.4 s at 16,384 ranks); what they give
    # unstamped rows is put in place by row position. Rows without a file or line match nothing.
    stamped = pl.col("time").is_not_null()
    unstamped_files = ev.filter(pl.col("time").is_null() & pl.col("line").is_not_null())["file"].drop_nulls().unique()
    fill = (
        ev.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), "file", "line", "time", "time_quality")
        .filter(pl.col("file").is_in(unstamped_files.implode()) & pl.col("line").is_not_null())
        .with_columns(
            pl.col("time").min().over(["file", "line"]).alias("_lt"),
            pl.col("time_quality").filter(stamped).first().over(["file", "line"]).alias("_lq"),
        )
        .filter(pl.col("time").is_null() & pl.col("_lt").is_not_null())
    )
    if fill.height == 0:
        return ev
    return ev.with_columns(
        ev["time_quality"].scatter(fill["_p"], fill["_lq"]),
        ev["time"].scatter(fill["_p"], fill["_lt"]),
    )


ONE_SIDED_LINES = 20  # an unstamped line this close to a stamp on one side only takes its time


def _interpolate(ev: pl.DataFrame) -> pl.DataFrame:
    """Unstamped lines (NCCL INFO/WARN, tracebacks, srun) take the time of the nearest
    stamped event of their file by line distance, the earlier one on a tie: an NCCL WARN a
    few lines before the watchdog report is closer to it than to the banner at the top."""
    if ev["time"].null_count() == 0:
        return ev
    # The neighbours are found on the columns they need alone, sorted as the whole frame
    # would be (all rows: the order a sort gives rows of one file and line depends on the
    # rest, and a line may hold two stamps); the times they give are put in place by row
    # position (sorting the whole frame there and back cost ~0.9 s at 16,384 ranks).
    ev = ev if ev["_id"].is_sorted() else ev.sort("_id")
    stamped_line = pl.when(pl.col("time").is_not_null()).then(pl.col("line"))
    prev_t = pl.col("time").forward_fill().over("file")
    next_t = pl.col("time").backward_fill().over("file")
    prev_l = stamped_line.forward_fill().over("file")
    next_l = stamped_line.backward_fill().over("file")
    use_next = pl.col("_pt").is_null() | (pl.col("_nt").is_not_null() & ((pl.col("_nl") - pl.col("line")) < (pl.col("line") - pl.col("_pl"))))
    # Bracketed by stamps, the time lies between them; with a stamp on one side only (the
    # unstamped tail after a log's only banner line), just near that stamp.
    bracketed = pl.col("_pt").is_not_null() & pl.col("_nt").is_not_null()
    near = pl.when(use_next).then(pl.col("_nl") - pl.col("line")).otherwise(pl.col("line") - pl.col("_pl")) <= ONE_SIDED_LINES
    filled = pl.when(bracketed | near).then(pl.when(use_next).then(pl.col("_nt")).otherwise(pl.col("_pt")))
    fill = (
        ev.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), "file", "line", "time")
        .sort(["file", "line"], maintain_order=True)
        .with_columns(prev_t.alias("_pt"), next_t.alias("_nt"), prev_l.alias("_pl"), next_l.alias("_nl"))
        .select("_p", "time", filled.alias("_f"))
        .filter(pl.col("time").is_null() & pl.col("_f").is_not_null())
    )
    if fill.height == 0:
        return ev
    estimated = pl.Series([TimeQuality.ESTIMATED.value] * fill.height, dtype=EVENT_SCHEMA["time_quality"])
    return ev.with_columns(ev["time_quality"].scatter(fill["_p"], estimated), ev["time"].scatter(fill["_p"], fill["_f"]))


def _borrow_times(ev: pl.DataFrame) -> pl.DataFrame:
    """An exception with no time in a rank's log often has a stamped twin elsewhere (the
    worker's error.json, the ChildFailedError entry): same rank, same message."""
    kinds = [Kind.EXCEPTION.value, Kind.CUDA_OOM.value, Kind.CUDA_ERROR.value]
    cand = ev.filter(pl.col("kind").is_in(kinds))
    if cand.height == 0 or cand["time"].null_count() == 0:
        return ev
    stamped = (
        cand.filter(pl.col("time").is_not_null() & pl.col("rank").is_not_null())
        .group_by(["rank", "message"])
        .agg(pl.col("time").min().alias("_bt"))
    )
    if stamped.height == 0:
        return ev
    # Only unstamped rows can borrow: they alone are joined (the whole frame's join and
    # re-sort cost ~0.3 s at 16,384 ranks), and their stamps put in place by row.
    ev = ev if ev["_id"].is_sorted() else ev.sort("_id")
    need = (
        ev.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), "rank", "message", "time")
        .filter(pl.col("time").is_null() & pl.col("rank").is_not_null() & pl.col("message").is_not_null())
        .join(stamped, on=["rank", "message"], how="inner")
    )
    if need.height == 0:
        return ev
    bt = pl.Series("_bt", [None] * ev.height, dtype=ev.schema["time"]).scatter(need["_p"], need["_bt"])
    ev = ev.with_columns(bt)
    use = pl.col("time").is_null() & pl.col("_bt").is_not_null()
    return ev.with_columns(
        pl.when(use).then(pl.lit(TimeQuality.ESTIMATED.value)).otherwise(pl.col("time_quality").cast(pl.String)).cast(EVENT_SCHEMA["time_quality"]).alias("time_quality"),
        pl.when(use).then(pl.col("_bt")).otherwise(pl.col("time")).alias("time"),
    ).drop("_bt")


def _peer_hosts(ev: pl.DataFrame) -> pl.DataFrame:
    """NCCL names a failing peer by IP ("Got completion from peer 10.0.3.21<33811>"); the
    NET/IB and Bootstrap lines of every rank say which host owns which IP. Adds
    ``peer_host`` to those events' attrs, so the report can name both ends of a link."""
    cfg = ev.filter(pl.col("kind") == Kind.NET_CONFIG.value)
    errs = ev.filter((pl.col("kind") == Kind.NETWORK_ERROR.value) & pl.col("attrs").str.contains('"peer"', literal=True))
    if errs.height == 0 or errs.height > 100_000:
        return ev
    owner: dict[str, str] = {}
    # Each error's attrs decoded once; only the addresses they name as a peer are looked up.
    decoded = [(host, _id, attrs_of(a)) for host, _id, a in errs.select("host", "_id", "attrs").iter_rows()]
    wanted = {w for _, _, d in decoded for p in [str(d.get("peer") or "")] for w in (p, p.removeprefix("::ffff:")) if w}
    # Only lines that state an address (of 147k net_config lines at 16,384 ranks, most are
    # settings), and of those, when every wanted address is plain text (JSON writes it as it
    # is), only the lines whose text holds one of them (32k lines at 16k ranks, ~0.3 s).
    addressed = pl.col("attrs").str.contains('"oob_ip"', literal=True) | pl.col("attrs").str.contains('"ifaces"', literal=True)
    if all(w.isascii() and w.isprintable() and '"' not in w and "\\" not in w for w in wanted):
        addressed = addressed & pl.col("attrs").str.contains_any(sorted(wanted)) if wanted else pl.lit(False)
    for host, a in cfg.filter(pl.col("host").is_not_null() & addressed).select("host", "attrs").unique(maintain_order=True).iter_rows():
        d = attrs_of(a)
        ips = [d.get("oob_ip")] + [i.get("ip") for i in d.get("ifaces") or [] if isinstance(i, dict)]
        for ip in ips:
            if host and isinstance(ip, str) and ip:
                owner.setdefault(ip, host)
    # An error's own local GID ("::ffff:10.13.0.2") is an address of the host that logged it.
    for host, _, d in decoded:
        gid = str(d.get("local_gid") or "")
        if host and gid.startswith("::ffff:"):
            owner.setdefault(gid.removeprefix("::ffff:"), host)
    if not owner:
        return ev
    ids, new = [], []
    for _, _id, d in decoded:
        peer = str(d.get("peer") or "")
        host = owner.get(peer) or owner.get(peer.removeprefix("::ffff:"))
        if host:
            d["peer_host"] = host
            ids.append(_id)
            new.append(json.dumps(d, separators=(",", ":")))
    if not ids:
        return ev
    # A few rows change: replaced in place (a join and a sort of the whole frame cost ~0.3 s at 16,384 ranks).
    upd = pl.col("_id").replace_strict(pl.Series(ids, dtype=pl.UInt32), pl.Series(new, dtype=pl.String), default=None, return_dtype=pl.String)
    return ev.with_columns(pl.coalesce(upd, pl.col("attrs")).alias("attrs"))


def signature_expr() -> pl.Expr:
    """What makes two events "the same symptom": kind + message with numbers, hex,
    hosts and addresses folded. Collective timeouts key on (PG, SeqNum, OpType)."""
    folded = (
        pl.col("message")
        .str.replace_all(r"0x[0-9a-fA-F]+", "0x#")
        .str.replace_all(r"\b\d+(?:\.\d+)*\b", "#")
        .str.replace_all(r"<#>", "")
        .str.slice(0, 160)
    )
    timeout = pl.concat_str(
        [pl.lit("pg="), _attr("attrs", "pg_id").fill_null("0"), pl.lit(" seq="), _attr("attrs", "seq").fill_null("?"), pl.lit(" op="), _attr("attrs", "op").fill_null("?")]
    )
    return pl.when(pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value).then(timeout).otherwise(folded)


def collapse_symptoms(ev: pl.DataFrame, world: int | None) -> list[SymptomGroup]:
    """Group repeated events of symptom kinds; each group keeps its earliest member."""
    s = ev.filter(pl.col("kind").is_in(list(SYMPTOM_KINDS))).with_columns(signature_expr().alias("_sig"))
    if s.height == 0:
        return []
    s = s.sort(["time", "file", "line"], nulls_last=True, maintain_order=True)
    g = s.group_by(["kind", "_sig"], maintain_order=True).agg(
        _attr("attrs", "repeat", pl.Int64).fill_null(1).sum().alias("count"),  # folded repeats count
        pl.col("rank").drop_nulls().unique().sort().alias("ranks"),
        pl.col("host").drop_nulls().unique().sort().alias("hosts"),
        pl.col("time").first().dt.epoch("ns").alias("t"),
        pl.col("file").first(),
        pl.col("line").first(),
        pl.col("host").first().alias("h"),
        pl.col("rank").first().alias("r"),
        pl.col("message").first(),
    )
    groups = []
    for row in g.iter_rows(named=True):
        if row["count"] < GROUP_MIN_MEMBERS and len(row["ranks"]) < GROUP_MIN_MEMBERS:
            continue
        ranks = [int(r) for r in row["ranks"]]
        missing: list[int] = []
        # "Who did not report it" means something for a collective everyone must join.
        if world and str(row["kind"]) == Kind.COLLECTIVE_TIMEOUT.value and len(ranks) >= max(2, world // 2):
            missing = sorted(set(range(world)) - set(ranks))
        groups.append(
            SymptomGroup(
                kind=str(row["kind"]),
                signature=row["_sig"],
                count=row["count"],
                ranks=ranks,
                hosts=list(row["hosts"]),
                first_time=row["t"],
                first_file=row["file"],
                first_line=row["line"],
                first_host=row["h"],
                first_rank=row["r"],
                first_message=row["message"],
                missing_ranks=missing,
            )
        )
    groups.sort(key=lambda x: (-len(x.ranks), -x.count))
    return groups


def attrs_of(row_attrs: str | None) -> dict[str, Any]:
    if not row_attrs:
        return {}
    try:
        v = json.loads(row_attrs)
        return v if isinstance(v, dict) else {}
    except ValueError:
        return {}


# GPU telemetry attrs the analyses and the classifier read (stragglers' clocks, the
# telemetry features): decoded together, once per frame of rows (see attrs_fields).
TELEMETRY_KEYS: tuple[str, ...] = ("temperature", "reasons_mask", "mask", "sm_clock_mhz", "util")
_DECODED: list[tuple[tuple[str, ...], pl.Series, pl.DataFrame]] = []


# A JSON number as json.dumps writes one, then the end of its value.
_JSON_NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*[,}]"


def attrs_fields(attrs: pl.Series, keys: tuple[str, ...]) -> pl.DataFrame:
    """The top-level ``keys`` of each attrs JSON text, as strings (null when absent), one
    column per key and a row per value of ``attrs``: what a JSON path match per key gives
    (a number's text may differ in form, ``1e3`` for ``1000.0``, never in value).

    Flat objects (one ``{``: telemetry rows) whose keys hold numbers are read by one regex
    per key (``"key":`` can only be a key there: inside a JSON string every quote is
    escaped); the rows that are not flat, or name a key whose value is not a plain number
    (a string, a list), are decoded as JSON, in one pass as a struct, or by a JSON path per
    key when the struct decode refuses a row (a key holding a list or an object).

    A JSON decode costs ~2.5 us a row and a JSON path ~1.8 us per key and row, and 393k
    telemetry rows at 16,384 ranks are read by several stages: the last call's result is
    kept, and a call with equal ``attrs`` (the same rows, compared exactly) and keys gets it
    back without reading them again."""
    for k, a, out in _DECODED:
        if k == keys and a.len() == attrs.len() and a.equals(attrs):
            return out
    frame = attrs.rename("a").to_frame()
    fast = frame.select(
        *[pl.col("a").str.extract('"' + k + r'"\s*:\s*' + _JSON_NUMBER, 1).alias(k) for k in keys],
        (pl.col("a").str.count_matches("{", literal=True) != 1).fill_null(False).alias("_slow"),
        *[(pl.col("a").str.contains(f'"{k}"', literal=True).fill_null(False)).alias(f"_has_{k}") for k in keys],
    )
    slow = fast.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"),
        (pl.col("_slow") | pl.any_horizontal([pl.col(k).is_null() & pl.col(f"_has_{k}") for k in keys])).alias("_s"),
    ).filter("_s")["_p"]
    out = fast.select(keys)
    if slow.len():
        decoded = _decode_fields(frame[slow], keys)
        out = out.with_columns(out[k].scatter(slow, decoded[k]) for k in keys)
    _DECODED[:] = [(keys, attrs, out)]
    return out


def _decode_fields(frame: pl.DataFrame, keys: tuple[str, ...]) -> pl.DataFrame:
    """``keys`` of the attrs column ``a`` decoded as JSON (see :func:`attrs_fields`)."""
    try:
        return frame.select(pl.col("a").str.json_decode(pl.Struct({k: pl.String for k in keys})).struct.unnest())
    except pl.exceptions.PolarsError:
        return frame.select(*[pl.col("a").str.json_path_match(f"$.{k}").alias(k) for k in keys])
