"""Hang localization and collective mismatches from Flight Recorder dumps and watchdog lines.

Every process group (the default group, and each data / tensor / pipeline / expert group) numbers
its collectives on its own (``collective_seq_id``, the watchdog's ``SeqNum``); the number is the same
on every member for the same collective. So the dumps (``flight_recorder`` source, ``collective``
events) are matched by PG name (``process_group[0]``, the same on every member; ``pg_id`` is local)
and sequence number:

* **hang**: in a PG whose members' last sequence numbers differ, the first divergent collective is
  the lowest last number + 1; the members without it never entered it. A rank that is missing
  from one divergent collective but sits in another that its peers are missing from is waiting
  downstream, not the cause; the rest are named. Cause ``node_failure`` (a rank that stopped:
  the taxonomy's unresponsive rank, as ``silent-ranks`` says it), below the 0.8 line: the dump
  says where, not why.
* **mismatch**: the same (PG, sequence number) with a different op, input sizes or dtypes on some
  ranks (all_to_all and gather/scatter sizes may differ by design: only op and dtypes compared);
  the ranks outside the majority are named. Cause ``software_error``.
* **missing dumps**: ranks of the job (``pg_config`` ranks, the world size) with no dump. A hang
  found with dumps missing gets a lower weight and says which; with no divergence among the
  dumps present, the ranks without a dump are the only ones that can be missing from the
  collective the others wait in (weaker still). :func:`missing_dumps` gives the report's line.
* **watchdog** (no dumps needed): ``last enqueued work: X, last completed work: Y`` per rank and PG
  (ProcessGroupNCCL's ``failure detected by watchdog at work sequence id: ... PG status: ...``):
  X == Y + 1: the rank entered collective X and waits; X == Y: it never entered the next one and
  is stuck outside. Ranks stuck outside while peers of the same PG wait are named. The
  collective's start is the timeout line's time minus ``ran for`` (else ``Timeout(ms)``).
* **dump origin** (log lines, any finding above): ProcessGroupNCCL's watchdog that sees a timeout
  (or an error) first writes its own rank into the store's dump key (``broadcastDumpSignal``) and its
  heartbeat monitor logs ``Received a dump signal due to a collective timeout from this local rank``;
  every other rank's monitor polls the key, logs ``Observed flight recorder dump signal from another
  rank via TCPStore`` and ``... from  rank N`` (N read from the key) and dumps too. The rank whose
  watchdog fired first (its collective timeout, failure-detected or own-signal line, earliest) is the
  **initiator**; ranks that dumped on a peer's signal are **notified**; ranks that logged neither
  never answered the signal (dead, frozen, or their log is not here). The dumps carry no such
  field: this comes from the logs only (:func:`dump_origin`).
* **traces** (Nsight Systems, ``collective_trace`` events: each GPU's last NCCL call, its ordinal
  among that GPU's NCCL calls and whether it ended): a synchronous collective cannot finish on
  some members while another never launched it. So when most ranks' last NCCL call #N+1 is in
  flight (launched and never completed, or still running at the end of the capture) and some
  ranks' last call is a completed #N, those never launched #N+1: they are named. Only a gap of
  exactly one call is read (captures that started late number their calls differently).
* **tracebacks** (no dumps, no debug): every rank of the world timed out in a collective of the
  default process group (the call's source line in its traceback passes no ``group``) and not all in
  the same one: the group's collectives were issued in different orders (:func:`traceback_op_mismatch`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import regex

from crashscope.patterns import compile_pattern
from crashscope.engine.model import Evidence, Finding
from crashscope.hostlist import compress_ints
from crashscope.schema import Kind
from crashscope.timeline import attrs_of

HANG_ID = "fr-hang"
MISMATCH_ID = "fr-mismatch"
WATCHDOG_ID = "watchdog-stuck-outside"
TRACE_HANG_ID = "nsys-never-launched"
TRACE_HANG_WEIGHT = 0.55  # the traces say who never launched, not why
HANG_WEIGHT = 0.6  # every member's dump present: the rank that never entered is named
HANG_PARTIAL_WEIGHT = 0.45  # some members' dumps missing: they might be missing too
NO_DUMP_WEIGHT = 0.35  # nothing diverges among the dumps present: only the undumped can be missing
MISMATCH_WEIGHT = 0.75
WATCHDOG_WEIGHT = 0.45
MAX_EVIDENCE = 10
DEFAULT_PG_DESC = "default_pg"
# ops whose per-rank sizes may differ by design (all_to_all splits, root-only gather/scatter buffers)
_UNEVEN_OPS = ("all_to_all", "alltoall", "gather", "scatter", "send", "recv")


_SIGNAL_FROM = compile_pattern(r"dump signal due to a collective timeout from\s+(?:(?P<local>this local rank)|rank\s+(?P<rank>-?\d{1,9}))")


@dataclass
class DumpOrigin:
    """Who started the Flight Recorder dump and who dumped on its signal (see the module docstring)."""

    initiator: int | None = None
    initiator_row: dict[str, Any] | None = None
    initiator_how: str = ""  # what says its watchdog fired first
    self_fired: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its earliest own-watchdog row
    notified: dict[int, tuple[int | None, dict[str, Any]]] = field(default_factory=dict)  # rank -> (named initiator, row)

    def evidence(self, dumped: set[int], expected: set[int]) -> list[Evidence]:
        """The initiator's line first, then one line per notified rank (capped by the caller)."""
        if self.initiator is None:
            return []
        out = []
        later = sorted(r for r in self.self_fired if r != self.initiator)
        note = [f"rank {self.initiator}'s watchdog fired first ({self.initiator_how}) and signalled every rank to dump"]
        if self.notified:
            note.append(f"rank(s) {compress_ints(sorted(self.notified))} were notified by its signal")
        if later:
            note.append(f"rank(s) {compress_ints(later)} timed out on their own later")
        # only where the signal evidently went round (some rank logged it) is silence telling
        silent = sorted((expected - set(self.notified) - set(self.self_fired)) - {self.initiator}) if self.notified else []
        if silent:
            note.append(f"rank(s) {compress_ints(silent)} logged no dump signal (dead, frozen, or no log here)")
        unanswered = sorted((set(self.notified) | set(self.self_fired)) - dumped) if dumped else []
        if unanswered:
            note.append(f"no dump here from rank(s) {compress_ints(unanswered)}, which got the signal: collect it from their node")
        if self.initiator_row is not None:
            out.append(_evidence(self.initiator_row, "; ".join(note)))
        for r, (by, row) in sorted(self.notified.items()):
            out.append(_evidence(row, f"rank {r} was notified (dump signal from rank {by if by is not None and by >= 0 else '?'}), "
                                      "its watchdog had not fired"))
        return out

    def summary(self) -> str:
        if self.initiator is None:
            return ""
        s = f"rank {self.initiator}'s watchdog fired first and signalled the dump"
        if self.notified:
            s += f"; rank(s) {compress_ints(sorted(self.notified))} were notified by its signal"
        return s


def _t_of(row: dict[str, Any]) -> int | None:
    t = row.get("_t")
    if t is None and row.get("time") is not None:
        t = int(row["time"].timestamp() * 1_000_000_000)
    return t


def dump_origin(events: pl.DataFrame) -> DumpOrigin:
    """The dump's initiator and the ranks notified by its signal, from ProcessGroupNCCL's lines:
    the collective timeout, ``failure detected by watchdog`` and ``Received a dump signal ... from
    this local rank`` (the rank's own watchdog fired) versus ``... from  rank N`` (a peer's signal)."""
    out = DumpOrigin()
    if events.height == 0:
        return out
    # the kinds first, then the text tests on those rows only (a substring search of every
    # attrs and message text cost ~0.1 s at 16,384 ranks)
    w = events.filter(pl.col("rank").is_not_null() & pl.col("kind").is_in(
        [Kind.COLLECTIVE_TIMEOUT.value, Kind.WATCHDOG_ERROR.value, Kind.HEARTBEAT_TIMEOUT.value])).filter(
        pl.col("rank").is_not_null()
        & (
            (pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value)
            | ((pl.col("kind") == Kind.WATCHDOG_ERROR.value) & pl.col("attrs").str.contains('"failure_detected"', literal=True).fill_null(False))
            | ((pl.col("kind") == Kind.HEARTBEAT_TIMEOUT.value) & pl.col("message").str.contains("dump signal", literal=True).fill_null(False))
        )
    )
    if w.height == 0:
        return out
    named: Counter[int] = Counter()
    w = w.with_columns(pl.col("time").dt.epoch("ns").alias("_t")).sort("_t", nulls_last=True)
    # The rows are walked on the three columns the walk reads; the rows it keeps (one per
    # rank) are taken whole afterwards (every row as a dict of every column cost ~0.15 s
    # a call at 16,384 ranks).
    notified: dict[int, tuple[int | None, int]] = {}
    fired: dict[int, tuple[int, str]] = {}
    for i, (rank, kind, message) in enumerate(w.select("rank", "kind", "message").iter_rows()):
        r = int(rank)
        how = {Kind.COLLECTIVE_TIMEOUT.value: "its collective timed out", Kind.WATCHDOG_ERROR.value: "failure detected by its watchdog"}.get(
            str(kind), "dump signal from this local rank")
        if str(kind) == Kind.HEARTBEAT_TIMEOUT.value:
            m = _SIGNAL_FROM.search(message or "")
            if m is None:
                continue
            if m.group("rank") is not None:
                by = int(m.group("rank"))
                if r not in notified and r not in fired:
                    notified[r] = (by if by >= 0 else None, i)
                if by >= 0 and by != r:
                    named[by] += 1
                continue
        if r in notified:
            continue  # its monitor saw the peer's signal first: its own timeout came later
        if r not in fired:
            fired[r] = (i, how)
    at = sorted({i for _, i in notified.values()} | {i for i, _ in fired.values()})
    whole = dict(zip(at, w[at].iter_rows(named=True))) if at else {}
    out.notified = {r: (by, whole[i]) for r, (by, i) in notified.items()}
    out.self_fired = {r: whole[i] | {"_how": how} for r, (i, how) in fired.items()}
    if out.self_fired:
        first = min(out.self_fired.items(), key=lambda kv: (_t_of(kv[1]) is None, _t_of(kv[1]) or 0, kv[0]))
        out.initiator, out.initiator_row = first[0], first[1]
        out.initiator_how = str(first[1].get("_how") or "")
    elif named:  # the initiator's own log is not here: the notified ranks name it
        out.initiator = named.most_common(1)[0][0]
        out.initiator_how = f"named by {sum(named.values())} notified rank(s); its own log is not here"
        out.initiator_row = next(row for _, (by, row) in sorted(out.notified.items()) if by == out.initiator)
    return out


@dataclass
class _Dumps:
    ranks: set[int] = field(default_factory=set)  # ranks with a dump
    expected: set[int] = field(default_factory=set)
    pg_ranks: dict[str, set[int]] = field(default_factory=dict)  # PG name -> members (pg_config)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its dump's event row




def _dumps(events: pl.DataFrame, world: int | None) -> _Dumps:
    out = _Dumps()
    d = events.filter((pl.col("kind") == Kind.TRACE_DUMP.value) & pl.col("rank").is_not_null())
    for row in d.iter_rows(named=True):
        r = int(row["rank"])
        out.ranks.add(r)
        out.rows.setdefault(r, row)
        for pg, info in (attrs_of(row["attrs"]).get("pg_config") or {}).items():
            ranks = {x for x in (info or {}).get("ranks") or [] if isinstance(x, int) and 0 <= x < 10_000_000}
            if ranks:
                out.pg_ranks.setdefault(str(pg), set()).update(ranks)
                out.expected |= ranks
    if out.ranks:
        out.expected |= out.ranks
        if world and world <= 100_000:
            out.expected |= set(range(world))
    return out


def missing_dumps(events: pl.DataFrame, world: int | None) -> list[int]:
    """Ranks of the job with no Flight Recorder dump, when any rank has one."""
    d = _dumps(events, world)
    return sorted(d.expected - d.ranks) if d.ranks else []


def missing_line(events: pl.DataFrame, world: int | None) -> str | None:
    """The report's ``missing`` line for absent dumps, or None."""
    m = missing_dumps(events, world)
    if not m:
        return None
    shown = ", ".join(map(str, m[:16])) + (" ..." if len(m) > 16 else "")
    return f"Flight Recorder dumps of {len(m)} rank(s): {shown} (whether they entered the collective cannot be seen)"


def _entries(events: pl.DataFrame) -> list[dict[str, Any]]:
    c = events.filter((pl.col("kind") == Kind.COLLECTIVE.value) & pl.col("rank").is_not_null())
    out, seen = [], set()
    for row in c.with_columns(pl.col("time").dt.epoch("ns").alias("_t")).iter_rows(named=True):
        a = attrs_of(row["attrs"])
        if a.get("is_p2p") or not isinstance(a.get("seq"), int) or a.get("pg") is None:
            continue
        # Unnamed groups (gloo under TORCH_DISTRIBUTED_DEBUG: the default PG and the debug
        # wrapper's helper PG are both ('', '')) are told apart by their local index, which
        # is the same on every rank for groups created in the same order.
        pg = str(a["pg"]) or f"#{a.get('pg_id')}"
        key = (int(row["rank"]), pg, a["seq"], a.get("record_id"))
        if key in seen:  # the pickle and the JSON dump of one rank
            continue
        seen.add(key)
        out.append({"rank": int(row["rank"]), "pg": pg, "desc": a.get("pg_desc") or "", "seq": a["seq"],
                    "op": a.get("op") or "", "sizes": a.get("input_sizes") or [], "dtypes": a.get("input_dtypes") or [],
                    "state": a.get("state"), "_t": row["_t"], "row": row})
    return out


def _evidence(row: dict[str, Any], message: str | None = None) -> Evidence:
    t = row.get("_t")
    if t is None and row.get("time") is not None:
        t = int(row["time"].timestamp() * 1_000_000_000)
    return Evidence(time=t, host=row.get("host"), rank=row.get("rank"), gpu=row.get("gpu"), gpu_index=row.get("gpu_index"),
                    file=row.get("file") or "", line=row.get("line"), source=str(row.get("source")), kind=str(row.get("kind")),
                    message=message or row.get("message") or "")


def _hosts(rows: list[dict[str, Any]], ranks: set[int]) -> tuple[str, ...]:
    return tuple(sorted({r["host"] for r in rows if r.get("host") and r.get("rank") in ranks}))


def flight_recorder(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """Hang and mismatch findings from the Flight Recorder dumps (see the module docstring)."""
    if events.height == 0:
        return []
    dumps = _dumps(events, world)
    if not dumps.ranks:
        return []
    entries = _entries(events)
    findings = _mismatch(entries)
    hang = _hang(entries, dumps, events)
    if hang is not None:
        findings.append(hang)
    return findings


def _members(pg: str, desc: str, by_rank: dict[int, Any], dumps: _Dumps) -> set[int]:
    if dumps.pg_ranks.get(pg):
        return dumps.pg_ranks[pg]
    if desc == DEFAULT_PG_DESC or pg in ("0", "#0"):
        return set(dumps.expected)
    return set(by_rank)  # a subgroup the header does not describe (gloo): its ranks seen in entries


def _hang(entries: list[dict[str, Any]], dumps: _Dumps, events: pl.DataFrame) -> Finding | None:
    by_pg: dict[str, dict[int, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    desc_of: dict[str, str] = {}
    for e in entries:
        by_pg[e["pg"]][e["rank"]][e["seq"]] = e
        desc_of.setdefault(e["pg"], e["desc"])
    divergent = []  # (time, pg, seq, missing ranks, present entries)
    undumped_members: set[int] = set()
    members_of: dict[str, set[int]] = {}
    for pg, by_rank in by_pg.items():
        members = _members(pg, desc_of.get(pg, ""), by_rank, dumps)
        if not dumps.pg_ranks.get(pg) and pg not in ("0", "#0") and desc_of.get(pg) != DEFAULT_PG_DESC:
            members = members | (dumps.expected - dumps.ranks)  # an undumped rank may belong to it
        members_of[pg] = members
        dumped = members & dumps.ranks
        undumped_members |= members - dumps.ranks
        last = {r: max(by_rank[r]) if by_rank.get(r) else -1 for r in dumped}
        if not last:
            continue
        top, low = max(last.values()), min(last.values())
        if top == low:
            continue
        seq = low + 1
        missing = {r for r, s in last.items() if s < seq}
        present = [by_rank[r][seq] for r in sorted(by_rank) if seq in by_rank[r]]
        if not present:
            continue
        t0 = min((p["_t"] for p in present if p["_t"] is not None), default=None)
        divergent.append((t0, pg, seq, missing, present, top))
    missing_dump = sorted(dumps.expected - dumps.ranks)
    if not divergent:
        return _undumped(entries, dumps, missing_dump, undumped_members, events)
    divergent.sort(key=lambda d: (d[0] is None, d[0] or 0, d[1]))
    waiting = _waiting(entries, by_pg, members_of, dumps.ranks)
    suspects = set().union(*(d[3] for d in divergent)) - waiting
    if not suspects and missing_dump:  # every missing rank waits on someone: on the undumped ones
        return _undumped(entries, dumps, missing_dump, undumped_members, events, force=True)
    if not suspects:  # every missing rank waits elsewhere (a cycle): the earliest collective decides
        suspects = set(divergent[0][3])
    first = next(d for d in divergent if d[3] & suspects)
    t0, pg, seq, missing, present, top = first
    culprits = sorted(missing & suspects)
    weight = HANG_WEIGHT if not missing_dump else HANG_PARTIAL_WEIGHT
    desc = desc_of.get(pg) or ""
    op = Counter(p["op"] for p in present).most_common(1)[0][0]
    name = f"PG {pg}" + (f" ({desc})" if desc else "")
    states = Counter(p["state"] or "?" for p in present)
    title = (
        f"Rank {', '.join(map(str, culprits))} never entered collective #{seq} ({op}) of {name}: "
        f"{len(present)} peer rank(s) entered it ({', '.join(f'{n} {s}' for s, n in states.items())}) and waited"
    )
    if missing_dump:
        title += f"; no Flight Recorder dump from rank(s) {', '.join(map(str, missing_dump[:16]))}, which may be missing too"
    rows_by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        rows_by_rank[e["rank"]].append(e)
    ev = []
    for r in culprits:
        own = [e for e in rows_by_rank[r] if e["pg"] == pg] or rows_by_rank[r]
        if own:
            final = max(own, key=lambda e: (e["seq"] if e["pg"] == pg else -1, e["_t"] or 0))
            ev.append(_evidence(final["row"] | {"_t": final["_t"]},
                                f"rank {r}'s last collective in {name}: #{final['seq']} {final['op']} ({final['state']}); nothing after it"))
        elif r in dumps.rows:
            ev.append(_evidence(dumps.rows[r], f"rank {r}'s dump holds no collective of {name}"))
    origin = dump_origin(events)
    if origin.initiator is not None:
        title += f"; {origin.summary()}"
        ev.extend(origin.evidence(dumps.ranks, dumps.expected)[: max(1, MAX_EVIDENCE - len(ev) - 1)])
    for p in present[: max(0, MAX_EVIDENCE - len(ev))]:
        ev.append(_evidence(p["row"] | {"_t": p["_t"]}, f"rank {p['rank']} entered #{seq} {p['op']} of {name}: {p['state']}"))
    rows = [e["row"] for e in entries]
    return Finding(
        rule_id=HANG_ID, title=title, cause="node_failure", role="cause", status="stable", weight=weight,
        first_time=min((x.time for x in ev[: len(culprits)] if x.time is not None), default=t0), count=len(present),
        hosts=_hosts(rows, set(culprits)), ranks=tuple(culprits), gpus=(), evidence=tuple(ev[:MAX_EVIDENCE]),
        explanation=(
            "Flight Recorder dumps matched by process group and sequence number: the named ranks' last collective in "
            "this group is the one before, so they stopped outside the collective their peers sat in until the timeout "
            "(hung, stopped, stuck in data loading, I/O or a host problem). The dump says where, not why: read those "
            "ranks' node (kernel log, GPU, storage) around the time of their last entry."
        ),
        actions=(
            f"Look at what rank(s) {', '.join(map(str, culprits))} did after their last collective (py-spy dump / the stack in "
            "their log, their node's kernel log for Xid, hung tasks, NFS, OOM killer).",
            "Run `python -m torch.distributed.flight_recorder.fr_trace <dump dir>` for torch's own reading of the dumps.",
        ),
    )


def _waiting(entries: list[dict[str, Any]], by_pg: dict, members_of: dict[str, set[int]], dumped: set[int]) -> set[int]:
    """Ranks that entered their latest collective and wait in it: no member of its group got
    further, and a member lacks it (or may: a member without a dump). They are not where the
    hang began."""
    latest: dict[int, dict[str, Any]] = {}
    for e in entries:
        cur = latest.get(e["rank"])
        if cur is None or ((e["_t"] or 0), e["row"].get("line") or 0) > ((cur["_t"] or 0), cur["row"].get("line") or 0):
            latest[e["rank"]] = e
    out = set()
    for r, e in latest.items():
        group = by_pg[e["pg"]]
        others = members_of.get(e["pg"], set()) - {r}
        if any(max(group[o], default=-1) > e["seq"] for o in others if o in group):
            continue  # a peer got past it: it completed
        if any(o not in dumped or e["seq"] not in group.get(o, {}) for o in others):
            out.add(r)
    return out


def _undumped(entries, dumps: _Dumps, missing_dump: list[int], members: set[int], events: pl.DataFrame, force: bool = False) -> Finding | None:  # type: ignore[no-untyped-def]
    """All dumps present agree (or every rank they show missing waits itself), some members
    have no dump, and the dumped ranks failed waiting."""
    cands = sorted(set(missing_dump) & (members | dumps.expected))
    if not cands or len(cands) > max(1, len(dumps.expected) // 2):
        return None
    loss = events.filter(
        pl.col("rank").is_in(sorted(dumps.ranks))
        & pl.col("kind").is_in([Kind.COLLECTIVE_TIMEOUT.value, Kind.NETWORK_ERROR.value, Kind.WATCHDOG_ERROR.value])
        & pl.col("severity").is_in(["error", "critical"])
    )
    if loss.height == 0:
        return None
    last_by_rank: dict[int, dict[str, Any]] = {}
    for e in entries:
        if e["rank"] not in last_by_rank or (e["_t"] or 0) > (last_by_rank[e["rank"]]["_t"] or 0):
            last_by_rank[e["rank"]] = e
    origin = dump_origin(events)
    ev = origin.evidence(dumps.ranks, dumps.expected)[:1]
    ev += [_evidence(e["row"] | {"_t": e["_t"]}, f"rank {r} dumped while in #{e['seq']} {e['op']} of PG {e['pg']} ({e['state']})")
           for r, e in sorted(last_by_rank.items())][: MAX_EVIDENCE - len(ev)]
    signalled = ""
    if origin.initiator is not None:
        signalled = f"; {origin.summary()}"
        if quiet := sorted(set(cands) - set(origin.notified) - set(origin.self_fired)):
            signalled += f", and rank(s) {', '.join(map(str, quiet))} logged no dump signal either"
    return Finding(
        rule_id=HANG_ID,
        title=(f"No Flight Recorder dump from rank(s) {', '.join(map(str, cands))}, while the {len(dumps.ranks)} dumped rank(s) "
               f"agree and failed waiting: the undumped ranks are the only ones that can be missing from the collective{signalled}"),
        cause="node_failure", role="cause", status="stable", weight=NO_DUMP_WEIGHT,
        first_time=min((x.time for x in ev[1 if origin.initiator is not None else 0:] if x.time is not None), default=None),
        count=len(cands), hosts=(),
        ranks=tuple(cands), gpus=(), evidence=tuple(ev),
        explanation=("A rank that stopped (killed, frozen, its node gone) writes no dump; the others' dumps all end in the "
                     "same collective. Collect the missing dumps (node-local /tmp by default) to confirm."),
        actions=(f"Collect the Flight Recorder dumps of rank(s) {', '.join(map(str, cands))} (TORCH_FR_DUMP_TEMP_FILE, default /tmp/nccl_trace_rank_N on their node).",),
    )


def _signature(e: dict[str, Any]) -> tuple:
    op = e["op"].split(":", 1)[-1]
    uneven = any(u in op for u in _UNEVEN_OPS)
    return (e["op"], () if uneven else json.dumps(e["sizes"]), json.dumps(e["dtypes"]))


def _mismatch(entries: list[dict[str, Any]]) -> list[Finding]:
    by_key: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_key[(e["pg"], e["seq"])].append(e)
    found = []
    for (pg, seq), es in by_key.items():
        if len({e["rank"] for e in es}) < 2:
            continue
        sigs = Counter(_signature(e) for e in es)
        if len(sigs) < 2:
            continue
        (major, n_major), = sigs.most_common(1)
        odd = [e for e in es if _signature(e) != major] if n_major * 2 > len(es) else list(es)
        t = min((e["_t"] for e in es if e["_t"] is not None), default=None)
        found.append((t, seq, pg, odd, es, major))
    if not found:
        return []
    found.sort(key=lambda f: (f[0] is None, f[0] or 0, f[1]))
    t, seq, pg, odd, es, major = found[0]
    ranks = sorted({e["rank"] for e in odd})
    what = []
    ref = next(e for e in es if _signature(e) == major)
    for e in odd[:4]:
        diffs = [k for k, a, b in (("op", e["op"], ref["op"]), ("sizes", e["sizes"], ref["sizes"]), ("dtypes", e["dtypes"], ref["dtypes"])) if a != b]
        what.append(f"rank {e['rank']} {e['op']} {e['sizes']} {','.join(e['dtypes'])} ({'/'.join(diffs)} differ)")
    desc = ref["desc"]
    name = f"PG {pg}" + (f" ({desc})" if desc else "")
    title = (f"Collective #{seq} of {name} differs across ranks: {'; '.join(what)}, where the others run "
             f"{ref['op']} {ref['sizes']} {','.join(ref['dtypes'])}")
    ev = [_evidence(e["row"] | {"_t": e["_t"]}) for e in odd] + [_evidence(e["row"] | {"_t": e["_t"]}) for e in es if e not in odd]
    return [Finding(
        rule_id=MISMATCH_ID, title=title, cause="software_error", role="cause", status="stable", weight=MISMATCH_WEIGHT,
        first_time=min((x.time for x in ev[: len(odd)] if x.time is not None), default=t), count=len(es),
        hosts=_hosts([e["row"] for e in odd], set(ranks)), ranks=tuple(ranks), gpus=(), evidence=tuple(ev[:MAX_EVIDENCE]),
        explanation=("The same process group and sequence number must be the same collective with the same shapes on "
                     "every member; the ranks named call something else (a rank-dependent branch, a data-dependent shape)."),
        actions=("Read the named ranks' code path at the frame in their dump entry; TORCH_DISTRIBUTED_DEBUG=DETAIL checks "
                 "every collective's fingerprint across ranks.",),
    )]


def watchdog_stuck_outside(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """From ``last enqueued work: X, last completed work: Y`` per rank and PG (see the module docstring)."""
    # the watchdog's failure line, and the dump-signal line of a rank told by a peer to dump
    w = events.filter(pl.col("kind").is_in([Kind.WATCHDOG_ERROR.value, Kind.HEARTBEAT_TIMEOUT.value]) & pl.col("rank").is_not_null()).filter(
        pl.col("attrs").str.contains('"last_enqueued"', literal=True).fill_null(False))  # the text test on those kinds' rows only
    if w.height == 0:
        return []
    per_pg: dict[str, dict[int, tuple[int, int, dict]]] = defaultdict(dict)
    for row in w.with_columns(pl.col("time").dt.epoch("ns").alias("_t")).iter_rows(named=True):
        a = attrs_of(row["attrs"])
        enq, comp = a.get("last_enqueued"), a.get("last_completed")
        if isinstance(enq, int) and isinstance(comp, int):
            per_pg[str(a.get("pg_guid", a.get("pg_id", "0")))][int(row["rank"])] = (enq, comp, row)
    out = []
    for pg, ranks in per_pg.items():
        waits = {r for r, (x, y, _) in ranks.items() if x == y + 1}
        outside = {r for r, (x, y, _) in ranks.items() if x == y}
        if not waits or not outside:
            continue
        seq = max(ranks[r][0] for r in waits)
        stuck = sorted(r for r in outside if ranks[r][0] < seq)
        if not stuck:
            continue
        start = _collective_start(events, seq, sorted(waits))
        origin = dump_origin(events)
        ev = [_evidence(ranks[r][2], None) for r in stuck]
        ev += origin.evidence(set(), set(ranks))[:1]
        ev += [_evidence(ranks[r][2], None) for r in sorted(waits)]
        title = (f"Rank {', '.join(map(str, stuck))} never entered collective #{seq} of PG {pg} (last enqueued = last completed), "
                 f"while rank(s) {', '.join(map(str, sorted(waits)[:16]))} entered it and waited (last enqueued = completed + 1)")
        if start:
            title += f"; the collective started at {start}"
        if origin.initiator is not None:
            title += f"; {origin.summary()}"
        out.append(Finding(
            rule_id=WATCHDOG_ID, title=title, cause="node_failure", role="cause", status="stable", weight=WATCHDOG_WEIGHT,
            first_time=min((x.time for x in ev[: len(stuck)] if x.time is not None), default=None), count=len(ranks),
            hosts=_hosts([ranks[r][2] for r in stuck], set(stuck)), ranks=tuple(stuck), gpus=(), evidence=tuple(ev[:MAX_EVIDENCE]),
            explanation=("The watchdog's PG status: a rank whose last enqueued work equals its last completed one had nothing "
                         "in flight, so it never reached the collective its peers were waiting in."),
            actions=("Look at what the named ranks were doing at the collective's start (their stack, data loading, I/O).",),
        ))
    return out


def trace_never_launched(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """From each GPU's last NCCL call in its Nsight Systems trace (see the module docstring)."""
    t = events.filter((pl.col("kind") == Kind.COLLECTIVE_TRACE.value) & pl.col("rank").is_not_null())
    if t.height < 2:
        return []
    last: dict[int, tuple[int, bool, dict[str, Any]]] = {}
    for row in t.with_columns(pl.col("time").dt.epoch("ns").alias("_t")).iter_rows(named=True):
        a = attrs_of(row["attrs"])
        seq, state = a.get("seq"), a.get("state")
        if not isinstance(seq, int) or state not in ("completed", "running_at_capture_end", "launched_not_completed"):
            continue
        rank = int(row["rank"])
        if rank not in last or seq > last[rank][0]:
            last[rank] = (seq, state != "completed", row)
    in_flight = {r for r, (_, open_, _) in last.items() if open_}
    if len(in_flight) * 2 <= len(last):
        return []  # most ranks finished their last call: no collective is hung here
    n1 = Counter(last[r][0] for r in in_flight).most_common(1)[0][0]
    stuck = sorted(r for r, (seq, open_, _) in last.items() if not open_ and seq == n1 - 1)
    if not stuck:
        return []
    waiting = sorted(r for r in in_flight if last[r][0] == n1)
    op = attrs_of(last[waiting[0]][2]["attrs"]).get("op") if waiting else None
    ev = [_evidence(last[r][2]) for r in stuck] + [_evidence(last[r][2]) for r in waiting]
    title = (f"Rank {', '.join(map(str, stuck))} never launched NCCL call #{n1}{f' ({op})' if op else ''}, which rank(s) "
             f"{compress_ints(waiting)} launched and were still in when the trace ended")
    return [Finding(
        rule_id=TRACE_HANG_ID, title=title, cause="node_failure", role="cause", status="stable", weight=TRACE_HANG_WEIGHT,
        first_time=min((x.time for x in ev[: len(stuck)] if x.time is not None), default=None), count=len(last),
        hosts=_hosts([last[r][2] for r in stuck], set(stuck)), ranks=tuple(stuck), gpus=(), evidence=tuple(ev[:MAX_EVIDENCE]),
        explanation=("In the GPU traces, the named ranks' last NCCL kernel completed while their peers' next one was launched "
                     "and never completed: the peers wait in a collective the named ranks never reached."),
        actions=("Look at what the named ranks were doing after their last NCCL call (stack, data loading, I/O, a CPU "
                 "stall); py-spy dump on a live hang, or a Flight Recorder dump, shows it.",),
    )]


def _collective_start(events: pl.DataFrame, seq: int, ranks: list[int]) -> str | None:
    """Timeout line time minus ``ran for`` (else ``Timeout(ms)``): when the collective began."""
    t = events.filter((pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value) & pl.col("rank").is_in(ranks) & pl.col("time").is_not_null())
    for row in t.sort("time").iter_rows(named=True):
        a = attrs_of(row["attrs"])
        if a.get("seq") not in (None, seq):
            continue
        ms = a.get("ran_ms") or a.get("timeout_ms")
        if isinstance(ms, int):
            from datetime import timedelta

            return (row["time"] - timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return None


TB_MISMATCH_ID = "tb-op-mismatch"
# Likely, not certain (a rank one collective ahead of peers that lost a message looks the same), and
# the tracebacks seldom say which rank is which: below the lines that say it (fr-mismatch 0.75).
TB_MISMATCH_WEIGHT = 0.5
# The place of ``group`` among each collective's parameters (torch 2.13.0 torch/distributed/distributed_c10d.py:
# all_reduce(tensor, op, group, async_op), all_gather(tensor_list, tensor, group, async_op), reduce(tensor, dst,
# op, group, ...), reduce_scatter(output, input_list, op, group, ...), all_to_all_single(output, input,
# output_split_sizes, input_split_sizes, group, ...), barrier(group, ...), ...); left out, it is the default group.
_GROUP_PARAM = {
    "all_reduce": 2, "broadcast": 2, "all_gather": 2, "all_gather_into_tensor": 2, "all_gather_object": 2,
    "broadcast_object_list": 2, "all_to_all": 2, "reduce": 3, "gather": 3, "scatter": 3, "reduce_scatter": 3,
    "reduce_scatter_tensor": 3, "all_to_all_single": 4, "barrier": 0,
}
_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _call_args(call: str, op: str) -> list[str] | None:
    """The top-level arguments of the call of ``op`` in one source line (``dist.all_gather(parts, lt)``
    -> ["parts", "lt"]); None when the line has no such call or it does not close on the line."""
    m = regex.search(r"(?:^|[\s.=(])" + regex.escape(op) + r"\s*\(", call)
    if m is None:
        return None
    args: list[str] = []
    depth: list[str] = []
    cur = ""
    quote = ""
    for ch in call[m.end():]:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch in _PAIRS:
            depth.append(_PAIRS[ch])
            cur += ch
        elif depth and ch == depth[-1]:
            depth.pop()
            cur += ch
        elif ch == ")":
            if cur.strip():
                args.append(cur.strip())
            return args
        elif ch == "," and not depth:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return None


def _default_group(call: str | None, op: str) -> bool:
    """Does this call of a collective run on the default process group: no ``group`` argument by
    keyword or by place, and nothing unpacked (``*args``, ``**kw``) that could carry one?"""
    pos = _GROUP_PARAM.get(op)
    if call is None or pos is None:
        return False
    args = _call_args(call, op)
    if args is None:
        return False
    positional = 0
    for a in args:
        if a.startswith("*"):
            return False
        if (k := regex.match(r"^(\w+)\s*=(?!=)", a)):
            if k.group(1) in ("group", "group_name", "pg", "process_group"):
                return False
            continue
        positional += 1
    return positional <= pos


def traceback_op_mismatch(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """Every rank of the job timed out in a collective of the default process group, and not all in
    the same one (their tracebacks end in different torch.distributed calls).

    A process group's collectives must be issued in the same order on every member (torch.distributed;
    ProcessGroupWrapper checks exactly this under TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks of one group
    waiting in different collectives at once issued them in different orders, a program bug. Only the
    default group is read, from the call's source line in the traceback (no ``group`` argument): ranks
    of pipeline-, tensor- or data-parallel sub-groups wait in different collectives by design. Only when
    every rank timed out (a stopped or dead rank leaves its peers waiting wherever they were). The op
    fewer ranks wait in, when there is one, is the odd one out, named by rank where a prefix says it."""
    if not world or world < 2 or events.height == 0:
        return []
    ex = events.filter((pl.col("kind") == Kind.EXCEPTION.value) & pl.col("attrs").str.contains('"c10d_op"', literal=True).fill_null(False))
    if ex.height < world:
        return []
    waits = events.filter(pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value).select("file", "line").unique()
    ex = ex.join(waits, on=["file", "line"], how="semi")
    if ex.height < world:
        return []
    rows: list[dict[str, Any]] = []
    seen_ranks: set[int] = set()
    for r in ex.sort("time", "file", "line", nulls_last=True).with_columns(pl.col("time").dt.epoch("ns").alias("_t")).iter_rows(named=True):
        a = attrs_of(r["attrs"])
        op = str(a.get("c10d_op") or "")
        if not _default_group(a.get("c10d_call"), op):
            return []  # a sub-group's wait, or a call whose group cannot be told: nothing to compare
        if r["rank"] is not None:
            if int(r["rank"]) in seen_ranks:
                continue  # the same rank's traceback again (an echo)
            seen_ranks.add(int(r["rank"]))
        rows.append(r | {"_op": op})
    ops = Counter(r["_op"] for r in rows)
    if len(rows) < world or len(ops) < 2:
        return []
    counts = sorted(ops.values())
    odd_op = next(op for op, n in ops.items() if n == counts[0]) if counts[0] < counts[1] else None
    odd = [r for r in rows if r["_op"] == odd_op]
    ranks = sorted({int(r["rank"]) for r in odd if r["rank"] is not None}) if odd and all(r["rank"] is not None for r in odd) else []
    ordered = odd + [r for r in rows if r["_op"] != odd_op]
    ev = [_evidence(r) for r in ordered]
    where = ", ".join(f"{op} on {n} rank{'s' if n > 1 else ''}" for op, n in ops.most_common())
    title = (f"Every rank timed out in a collective of the default process group, but not the same one ({where})"
             + (f": the odd one out is {odd_op}" + (f" on rank {', '.join(map(str, ranks))}" if ranks else "") if odd_op else ""))
    return [Finding(
        rule_id=TB_MISMATCH_ID, title=title, cause="software_error", role="cause", status="stable", weight=TB_MISMATCH_WEIGHT,
        first_time=min((e.time for e in ev if e.time is not None), default=None), count=len(rows),
        hosts=_hosts(odd, set(ranks)) if ranks else (), ranks=tuple(ranks), gpus=(), evidence=tuple(ev[:MAX_EVIDENCE]),
        explanation=("The collectives of one process group must be called in the same order on every member; ranks of the "
                     "default group waiting in different collectives at the same time called them in different orders (a "
                     "rank-dependent branch, an uneven number of batches or parameters). Less likely, a rank one collective "
                     "ahead of peers that lost a message on the way looks the same."),
        actions=("Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (ProcessGroupWrapper checks every collective's op and shapes across "
                 "ranks and names the mismatch) and make every rank issue the same collectives in the same order.",),
    )]
