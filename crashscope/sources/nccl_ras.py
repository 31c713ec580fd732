"""NCCL RAS reports (NCCL >= 2.24): what ``ncclras`` (or ``echo status | nc localhost 28028``)
printed, and the RAS lines NCCL itself writes into its debug log.

The text comes from NVIDIA/nccl ``src/ras/client_support.cc`` (``rasClientRunInit``,
``rasClientRunConns``, ``rasClientRunComms``, ``rasClientBreakDownErrors``,
``rasClientsNotifyEvent``; checked at v2.24.3-1, v2.26.2-1 and 5067397c); the meaning of
each part from NCCL's user guide, ``docs/userguide/source/troubleshooting/ras.rst``. Sample
report (composed from those format strings)::

    NCCL version 2.26.2 compiled with CUDA 12.6
    Job summary
    ===========
      Nodes  Processes         GPUs  Processes     GPUs
    (total)   per node  per process    (total)  (total)
          4          8            1         32       32
    Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
        #  in group  per comm  per node  per comm  in group
        0         1         4       7-8        32        32   RUNNING  INCOMPLETE,MISMATCH
    Errors
    ======
    DEAD
      1 job process is considered dead (unreachable via the RAS network)
      Process 3487984 on node 172.16.64.213 managing GPU 5
    #0-0 (cf264af53edbe986) INCOMPLETE
      Missing communicator data from 1 rank
      Rank 21 -- GPU 5 managed by process 3487984 on node 172.16.64.213
    Warnings
    ========
    #0-0 (27a079b828ff1a75) MISMATCH
      Communicator ranks have different AllReduce operation counts
      26 ranks have launched up to operation 6650
      6 ranks have launched up to operation 6649
      Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210

Monitor mode (``ncclras -m``, NCCL >= 2.29; local time)::

    [2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1

NCCL's own log (``NCCL_DEBUG_SUBSYS`` with ``RAS``; src/ras/peers.cc ``rasPeerDeclareDead``,
src/ras/rasnet.cc ``rasConnHandleNetTimeouts`` / ``rasNetHandleTimeouts``)::

    node1:123:456 [0] NCCL INFO RAS declaring peer 10.0.0.7<45123> as DEAD; rasDeadPeersHash 0x1f
    node1:123:456 [0] NCCL INFO RAS keep-alive timeout error (20s) on socket connection with 10.0.0.7<45123>

What the report means, and so what this source says (``log_error`` events, one per process
or rank named, attrs ``ras`` says which; not ``desync_report`` or ``nccl_error``, whose
readers in ``analyses/`` take them for a rank's own words at a time):

* ``ras: dead``: RAS could not reach the process for 60 s (``RAS_PEER_DEAD_TIMEOUT``) and
  declared it dead for good: it crashed, hung, or its node or network went. ``whole_node``
  is true when every process the job summary puts on a node is dead there (processes per
  node from the summary table, when it prints one number); that is what a lost node looks
  like. ``ras: missing``: a process (``INCOMPLETE``) or a communicator rank that did not
  answer the query (unresponsive at that moment; dead ones are listed apart).
* ``ras: lagging`` / ``lagging_once`` / ``ahead``): the ranks of one
  communicator grouped by how many operations of one collective they launched, the most
  frequent count first (``rasValCountsCompareRev``). Per-rank lines are printed only for an
  outlier group (``rasCountIsOutlier``: one rank, or at most 25% and at most 10 ranks), which
  is the minority, not necessarily the laggards: in nccl#1911 the two listed ranks are
  *ahead*. A listed group is ``lagging`` only when its count is lower than the largest
  group's; a higher one is ``ahead`` (one event for the block, no rank). NCCL's guide says
  a mismatch in one snapshot is normal (collectives outpace the query; "as long as the
  counts increase across repeated queries"), and only counts that stay the same across
  queries say the communicator is stuck: an outlier group whose counts are the same in an
  earlier report of the same file is ``lagging``, one seen once is ``lagging_once``.
* ``ras: status`` (a rank in another state than its peers: INIT, FINALIZE, ABORT, NOCOMM),
  ``ras: error`` (an init or async error a rank reported, ``result`` the
  ``ncclErrorToString`` text), ``ras: timeout`` (RAS's own query timed out on some legs),
  ``ras: comm`` (a communicator table row; severity info where its Errors column is OK).

Hosts are what NCCL printed (``ncclSocketToHost``: an IP address, or a name). Reports have
no time; monitor lines have their local stamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from crashscope.schema import Kind, Severity
from crashscope.sources.base import LineSource, ParseContext, feed_guarded, lazy_compile, split_prefix

_STATUS = r"(?:NOCOMM|INIT|RUNNING|FINALIZE|ABORT|UNKNOWN)"
_ERRS = r"(?:OK|MISMATCH|ERROR|INCOMPLETE)(?:,(?:MISMATCH|ERROR))*"
_GPU = r"GPUs? (?P<gpu>\d+(?:,\d+)*)(?: \(NVML [\d,]+\))?"
_ON_NODE = r"managed by process (?P<pid>\d+) on node (?P<host>\S+)"

# Rust-regex and Python-regex compatible; literal-heavy.
PREFILTER = (
    r"NCCL version \S+ compiled with CUDA"
    r"|^\s*(?:Job summary|Errors|Warnings|INCOMPLETE|DEAD|TIMEOUT)\s*$"
    r"|^\s*#\d+-\d+ \([0-9a-f]+\) (?:MISMATCH|INCOMPLETE|ERROR)"
    r"|^\s*Group +Comms +Nodes"
    r"|^\(total\) +per node +per process"
    r"|^ *\d{1,7}  +\d{1,9}  +\d{1,11}  +\d{1,9}  +\d{1,7}$"
    r"|\s" + _STATUS + r"\s+" + _ERRS + r"\s*$"
    r"|ranks? ha(?:ve|s) (?:launched up to operation|not launched any operations|status )"
    r"|Communicator ranks have different "
    r"|Missing communicator data from "
    r"|considered dead \(unreachable via the RAS network\)"
    r"| managed by process \d+ on node "
    r"|Process \d+ on node \S+ managing GPU"
    r"|The (?:missing|unknown) ranks?: "
    r"|\[process information not found\]"
    r"| ranks? reported "
    r"|(?:Initialization|Asynchronous) errors? on \d+ rank"
    r"|communication timeouts? while gathering"
    r"|\] PEER_[A-Z_]+: "
    r"|NCCL INFO RAS (?:declaring peer |keep-alive timeout error |connect retry timeout )"
)

_ROW = lazy_compile(
    r"^\s*(?P<grp>\d+)\s+(?P<comms>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>\d+(?:-\d+)?)\s+(?P<rpc>\d+)\s+(?P<rig>\d+)\s+"
    r"(?P<status>" + _STATUS + r")\s+(?P<errors>" + _ERRS + r")\s*$"
)
_SUMMARY_NUMS = lazy_compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_BLOCK = lazy_compile(r"^\s*(?P<id>#\d+-\d+) \((?P<hash>[0-9a-f]+)\) (?P<what>MISMATCH|INCOMPLETE|ERROR)\s*$")
_DIFF_OPS = lazy_compile(r"^\s*Communicator ranks have different (?P<op>\w+) operation counts")
_DIFF_STATUS = lazy_compile(r"^\s*Communicator ranks have different status")
_GROUP_OPS = lazy_compile(r"^\s*(?P<n>\d+) ranks have (?:launched up to operation (?P<v>\d+)|not launched any operations)\s*$")
_GROUP_STATUS = lazy_compile(r"^\s*(?P<n>\d+) ranks have status (?P<st>\w+)\s*$")
_GROUP_ERR = lazy_compile(r"^\s*(?P<n>\d+) ranks reported (?P<res>.+?)\s*$")
_ERR_PHASE = lazy_compile(r"^\s*(?P<phase>Initialization|Asynchronous) errors? on (?P<n>\d+) ranks?")
# "Rank R -- GPU ..." / "Rank R has launched up to operation V -- ..." / "Rank R has not launched
# any operations -- ..." / "Rank R has status S -- ..." / "Rank R reported X -- ...", each with
# "GPU G managed by process P on node H" or "[process information not found]".
_RANK = lazy_compile(
    r"^\s*Rank (?P<rank>\d+)(?: has launched up to operation (?P<v>\d+)| has (?P<none>not) launched any operations"
    r"| has status (?P<st>\w+)| reported (?P<res>.+?))?"
    r" -- (?:" + _GPU + r" " + _ON_NODE + r"|\[process information not found\])\s*$"
)
_PROCESS = lazy_compile(r"^\s*Process (?P<pid>\d+) on node (?P<host>\S+) managing " + _GPU + r"\s*$")
_MISSING_RANKS = lazy_compile(r"^\s*The missing ranks?: (?P<ranks>\d+(?:,\d+)*)\s*$")
_DEAD_COUNT = lazy_compile(r"^\s*(?P<n>\d+) job process(?:es are| is) considered dead")
_TIMEOUTS = lazy_compile(r"(?P<n>\d+) communication timeouts? while gathering")
_MONITOR = lazy_compile(
    r"^\[(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)\] (?P<ev>PEER_[A-Z_]+): (?P<rest>.*)$"
)
_MON_PEER = lazy_compile(r"^Process (?P<pid>\d+) on node (?P<host>\S+) managing " + _GPU + r"\s*(?P<details>.*)$")
_INFO = lazy_compile(
    r"(?P<rhost>[\w.-]+):(?P<rpid>\d+):\d+ \[\d+\] NCCL INFO RAS (?:declaring peer (?P<dead>\S+) as DEAD"
    r"|keep-alive timeout error \((?P<ka>\d+)s\) on socket connection with (?P<kpeer>\S+)"
    r"|connect retry timeout \((?P<cr>\d+)s\) on socket connection with (?P<cpeer>\S+))"
)
_ADDR = lazy_compile(r"^\[?(?P<ip>[0-9A-Fa-f.:]+?)\]?(?:<\d+>)?$")

DEAD_EVENTS = ("PEER_DEAD", "PEER_TIMEOUT_DEAD")
_GROUP_TAGS = ("status_group", "error_group")  # labels of the rank lines that follow, in _Report.pending
_SECTIONS = {"Errors": "errors", "Warnings": "warnings"}


@dataclass
class _Report:
    n: int
    procs_per_node: int | None = None
    summary_next: bool = False
    section: str | None = None
    block: str | None = None  # INCOMPLETE / DEAD / TIMEOUT / #x-y MISMATCH ...
    comm: str | None = None
    comm_hash: str | None = None
    sub: str | None = None  # "ops:<op>" / "status" / "error:<phase>"
    group: tuple[int, int] | None = None  # (count, value) the next per-rank lines belong to
    groups: list[tuple[int, int]] = field(default_factory=list)
    listed: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # (group index, line, rank entry)
    block_line: int = 0
    dead: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    pid_rank: dict[tuple[str | None, int | None], int] = field(default_factory=dict)
    pending: list[tuple[Any, ...]] = field(default_factory=list)  # events emitted when the report ends


class NcclRasSource(LineSource):
    name = "nccl_ras"
    description = "NCCL RAS reports (ncclras / port 28028 STATUS output, monitor events) and RAS lines of the NCCL log"
    filename_hints = ("ncclras*", "*ras*.txt", "*ras*.log")
    prefilter = PREFILTER

    def sniff(self, head: str, name: str) -> float:
        if "Job summary\n===========" in head or "RAS Monitor Mode" in head:
            return 0.9
        if "Communicators..." in head and "Group     Comms" in head:
            return 0.9
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        st: dict[str, Any] = {"rep": None, "count": 0, "seen": {}}
        feed_guarded(ctx, lines, lambda n, raw: self._line(n, raw, ctx, st), lambda: self._end(ctx, st))
        ctx.rows.sort(key=lambda r: r["line"] or 0)

    # -- one line ---------------------------------------------------------------------------
    def _new_report(self, ctx: ParseContext, st: dict[str, Any]) -> _Report:
        self._end(ctx, st)
        st["count"] += 1
        st["rep"] = _Report(st["count"])
        return st["rep"]

    def _line(self, n: int, raw: str, ctx: ParseContext, st: dict[str, Any]) -> None:
        _, text = split_prefix(raw.rstrip("\r\n"))
        body = text.strip()
        if m := _INFO.search(text):
            self._info(n, m, ctx)
            return
        if m := _MONITOR.match(body):
            self._monitor(n, m, body, ctx)
            return
        rep: _Report | None = st["rep"]
        if "compiled with CUDA" in body and body.startswith("NCCL version"):
            self._new_report(ctx, st)
            return
        if body == "Job summary":
            if rep is None or rep.section is not None or rep.procs_per_node is not None:
                rep = self._new_report(ctx, st)
            rep.section = "summary"
            return
        if rep is None:
            if not (_ROW.match(text) or _BLOCK.match(text) or body in ("Errors", "Warnings")):
                return  # a lone RAS-shaped line outside any report
            rep = self._new_report(ctx, st)
        if body.startswith("(total)") and "per node" in body and "per process" in body:
            rep.summary_next = True
            return
        if rep.summary_next:
            rep.summary_next = False
            if sm := _SUMMARY_NUMS.match(text):
                rep.procs_per_node = int(sm.group(2))
            return
        if body.startswith("Group ") and "Comms" in body:
            rep.section = "comms"
            return
        if body in _SECTIONS:
            self._close_block(ctx, rep, st)
            rep.section = _SECTIONS[body]
            rep.block = None
            return
        if m := _ROW.match(text):
            if True:  # an OK row too: the report says the communicator was healthy then
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.INFO if m.group("errors") == "OK" else Severity.WARNING, {}, {
                    "ras": "comm", "group": int(m.group("grp")), "comms": int(m.group("comms")),
                    "ranks_per_comm": int(m.group("rpc")), "status": m.group("status"), "errors": m.group("errors")}))
            return
        if body in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            self._close_block(ctx, rep, st)
            rep.block, rep.comm, rep.sub, rep.group = body, None, None, None
            rep.block_line = n
            return
        if m := _BLOCK.match(text):
            self._close_block(ctx, rep, st)
            rep.block, rep.comm, rep.comm_hash, rep.sub, rep.group = m.group("what"), m.group("id"), m.group("hash"), None, None
            rep.block_line = n
            return
        if rep.block is None:
            return
        self._block_line(n, text, body, ctx, rep, st)

    def _block_line(self, n: int, text: str, body: str, ctx: ParseContext, rep: _Report, st: dict[str, Any]) -> None:
        comm = {"comm": rep.comm, "comm_hash": rep.comm_hash} if rep.comm else {}
        if rep.block == "TIMEOUT":
            if m := _TIMEOUTS.search(body):
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.WARNING, {}, {"ras": "timeout", "timeouts": int(m.group("n"))}))
            return
        if m := _PROCESS.match(text):
            ident = _ident(m)
            if rep.block == "DEAD":
                rep.dead.append((n, body, ident))
            elif rep.block == "INCOMPLETE":
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.WARNING, ident, {"ras": "missing", "what": "process"}))
            return
        if m := _MISSING_RANKS.match(text):  # NCCL 2.24/2.25: the ranks without their processes
            for r in m.group("ranks").split(","):
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.WARNING, {"rank": int(r)}, {"ras": "missing", "what": "rank", **comm}))
            return
        if m := _DIFF_OPS.match(text):
            self._close_groups(ctx, rep, st)
            rep.sub, rep.group = f"ops:{m.group('op')}", None
            return
        if _DIFF_STATUS.match(text):
            self._close_groups(ctx, rep, st)
            rep.sub, rep.group = "status", None
            return
        if m := _ERR_PHASE.match(text):
            rep.sub, rep.group = "error:" + ("init" if m.group("phase") == "Initialization" else "async"), None
            return
        if m := _GROUP_OPS.match(text):
            rep.groups.append((int(m.group("n")), int(m.group("v") or 0)))
            rep.group = rep.groups[-1]
            return
        if m := _GROUP_STATUS.match(text):
            rep.group = (int(m.group("n")), 0)
            rep.pending.append(("status_group", m.group("st")))
            return
        if m := _GROUP_ERR.match(text):
            rep.group = (int(m.group("n")), 0)
            rep.pending.append(("error_group", m.group("res")))
            return
        if m := _RANK.match(text):
            ident = _ident(m)
            ident["rank"] = int(m.group("rank"))
            if ident.get("host") and ident.get("pid") is not None:
                rep.pid_rank[(ident["host"], ident["pid"])] = ident["rank"]
            if rep.block == "INCOMPLETE":
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.WARNING, ident, {"ras": "missing", "what": "rank", **comm}))
            elif rep.block == "ERROR" or (rep.sub or "").startswith("error:"):
                res = m.group("res") or _last_group_label(rep, "error_group")
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.ERROR, ident, {
                    "ras": "error", "result": res, "phase": (rep.sub or "error:").split(":", 1)[1] or None, **comm}))
            elif rep.sub == "status":
                status = m.group("st") or _last_group_label(rep, "status_group")
                rep.pending.append((Kind.LOG_ERROR, n, body, Severity.WARNING, ident, {"ras": "status", "status": status, **comm}))
            elif (rep.sub or "").startswith("ops:"):
                if m.group("v") is not None or m.group("none"):
                    rep.groups.append((1, int(m.group("v") or 0)))
                    rep.group = rep.groups[-1]
                if rep.group is not None:
                    rep.listed.append((len(rep.groups) - 1, n, ident))
            return

    # -- closing blocks: decide what the listed ranks are -----------------------------------
    def _close_groups(self, ctx: ParseContext, rep: _Report, st: dict[str, Any]) -> None:
        sub = rep.sub or ""
        if sub.startswith("ops:") and rep.groups:
            op = sub[4:]
            majority = rep.groups[0][1]  # most frequent first (rasValCountsCompareRev)
            shape = (rep.comm_hash, op, tuple(rep.groups))
            seen_before = st["seen"].get(shape)
            st["seen"].setdefault(shape, rep.n)
            groups = [{"ranks": c, "launched": v} for c, v in rep.groups]
            base = {"op": op, "comm": rep.comm, "comm_hash": rep.comm_hash, "groups": groups, "majority_launched": majority,
                    "report": rep.n}
            ahead = [(gi, line, ident) for gi, line, ident in rep.listed if rep.groups[gi][1] > majority]
            behind = [(gi, line, ident) for gi, line, ident in rep.listed if rep.groups[gi][1] < majority]
            lagging_ranks = sorted({ident["rank"] for _, _, ident in behind})
            stuck = seen_before is not None and seen_before != rep.n
            for gi, line, ident in behind:
                attrs = {**base, "ras": "lagging" if stuck else "lagging_once", "launched": rep.groups[gi][1],
                         "behind_by": majority - rep.groups[gi][1], "lagging_ranks": lagging_ranks,
                         "repeated_from_report": seen_before if stuck else None}
                rep.pending.append((Kind.LOG_ERROR, line, _rank_text(ident, rep.groups[gi][1], op),
                                    Severity.WARNING if stuck else Severity.INFO, ident, attrs))
            if ahead or not behind:
                ranks = sorted({ident["rank"] for _, _, ident in ahead})
                rep.pending.append((Kind.LOG_ERROR, rep.block_line, f"RAS {rep.comm} MISMATCH: {op} operation counts "
                                    + ", ".join(f"{c} rank{'s' if c > 1 else ''} at {v}" for c, v in rep.groups),
                                    Severity.INFO, {}, {**base, "ras": "ahead" if ahead else "mismatch", "ahead_ranks": ranks}))
        rep.groups, rep.listed, rep.group = [], [], None

    def _close_block(self, ctx: ParseContext, rep: _Report, st: dict[str, Any]) -> None:
        self._close_groups(ctx, rep, st)
        rep.sub = None

    def _end(self, ctx: ParseContext, st: dict[str, Any]) -> None:
        rep: _Report | None = st.get("rep")
        if rep is None:
            return
        st["rep"] = None
        self._close_block(ctx, rep, st)
        per_host: dict[str, int] = {}
        for _, _, ident in rep.dead:
            if ident.get("host"):
                per_host[ident["host"]] = per_host.get(ident["host"], 0) + 1
        for line, body, ident in rep.dead:
            rank = rep.pid_rank.get((ident.get("host"), ident.get("pid")))
            whole = bool(rep.procs_per_node and ident.get("host") and per_host.get(ident["host"], 0) >= rep.procs_per_node)
            ctx.emit(Kind.LOG_ERROR, line, body, severity=Severity.ERROR, rank=rank, **_emit_ident(ident),
                     attrs={"ras": "dead", "whole_node": whole, "dead_on_node": per_host.get(ident.get("host") or "", 0),
                            "procs_per_node": rep.procs_per_node, "report": rep.n})
        for item in rep.pending:
            if item[0] in _GROUP_TAGS:
                continue
            kind, line, msg, sev, ident, attrs = item
            rank = ident.get("rank")
            if rank is None and ident.get("pid") is not None:
                rank = rep.pid_rank.get((ident.get("host"), ident.get("pid")))
            ctx.emit(kind, line, msg, severity=sev, rank=rank, **_emit_ident(ident),
                     attrs={"report": rep.n, **{k: v for k, v in attrs.items() if v is not None}})

    # -- lines outside reports --------------------------------------------------------------
    def _monitor(self, n: int, m: Any, body: str, ctx: ParseContext) -> None:
        ev = m.group("ev")
        pm = _MON_PEER.match(m.group("rest"))
        ident = _ident(pm) if pm else {}
        if not pm and (am := _ADDR.match(m.group("rest").split(" ", 1)[0])):
            ident = {"host": am.group("ip")}
        t = ctx.local_ns(*(int(m.group(k)) for k in ("y", "mo", "d", "hh", "mi", "ss")))
        dead = ev in DEAD_EVENTS
        if not dead and ev not in ("PEER_UNRESPONSIVE", "PEER_KEEPALIVE_TIMEOUT", "PEER_DISCONNECTED", "PEER_SEND_STUCK",
                                   "PEER_INIT_TIMEOUT"):
            return  # PEER_NEW, PEER_CONNECTED, PEER_RECOVERED ...: the job's life, not trouble
        ctx.emit(Kind.LOG_ERROR, n, body, severity=Severity.ERROR if dead else Severity.WARNING, time=t,
                 time_quality=ctx.local_quality(), **_emit_ident(ident),
                 attrs={"ras": "dead" if dead else "unresponsive", "event": ev, "monitor": True})

    def _info(self, n: int, m: Any, ctx: ParseContext) -> None:
        peer = m.group("dead") or m.group("kpeer") or m.group("cpeer")
        am = _ADDR.match(peer.rstrip(";,"))
        host = am.group("ip") if am else None
        dead = m.group("dead") is not None or m.group("cr") is not None
        ctx.emit(Kind.LOG_ERROR, n, m.group(0), severity=Severity.ERROR if dead else Severity.WARNING, host=host,
                 attrs={"ras": "dead" if dead else "unresponsive", "peer": peer.rstrip(";,"), "reporter": m.group("rhost"),
                        "reporter_pid": int(m.group("rpid")), "nccl_log": True})


def _ident(m: Any) -> dict[str, Any]:
    d = m.groupdict()
    out: dict[str, Any] = {}
    if d.get("host"):
        out["host"] = d["host"]
    if d.get("pid"):
        out["pid"] = int(d["pid"])
    if d.get("gpu"):
        gpus = [int(g) for g in d["gpu"].split(",")]
        out["gpus"] = gpus
    return out


def _emit_ident(ident: dict[str, Any]) -> dict[str, Any]:
    gpus = ident.get("gpus") or []
    return {"host": ident.get("host"), "pid": ident.get("pid"), "gpu_index": gpus[0] if len(gpus) == 1 else None}


def _last_group_label(rep: _Report, tag: str) -> str | None:
    for item in reversed(rep.pending):
        if item[0] == tag:
            return item[1]
    return None


def _rank_text(ident: dict[str, Any], launched: int, op: str) -> str:
    where = f" (GPU {ident['gpus'][0]}, process {ident.get('pid')} on node {ident.get('host')})" if ident.get("gpus") else ""
    return f"RAS: rank {ident['rank']} has launched {op} operations up to {launched}{where}, behind its communicator's majority"


SOURCE = NcclRasSource()
