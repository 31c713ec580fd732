"""What `crashscope repro` runs: the suspect collective, the nodes (or ranks) it runs on, and
which of them are implicated and which are healthy references.

From a report (``REPORT.json``, as ``crashscope analyze --format json`` writes it) or a job
directory (analysed first), the suspect collective is the c10d work item the watchdog named.
Its real format (PyTorch ProcessGroupNCCL, see ``crashscope/sources/pytorch.py``)::

    [rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3]
        Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5012, OpType=ALLREDUCE,
        NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.

The log names the element count, not the dtype, so the size is ``NumelIn x sizeof(dtype)`` with
``--dtype`` (default float32, said in the plan). For AllGather nccl-tests' ``S`` is the gathered
array (``NumelOut``); for the others ``NumelIn``.

The NCCL environment in force comes from NCCL's own INFO lines (``NCCL_DEBUG=INFO``), which
``ncclGetEnv`` callers print as (NVIDIA/nccl ``src/misc/param.cc``, ``src/misc/socket.cc``)::

    node001:2718:2718 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1
    node001:2718:2718 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0.

Only ``NCCL_*`` names with plain values are kept, and never ones that name files on the
crashed job's machines (the values go into the re-run's environment, never into a shell).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crashscope.errors import UsageError
from crashscope.repro import DTYPES, OPS, OPTYPE_TO_OP, canonical_dtype

_WORK = re.compile(
    r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?"
    r"(?:, TensorShape=\[(?P<shape>[^\]]*)\])?"
    r"(?:, Timeout\(ms\)=(?P<tmo>\d+))?\)"
)
_PG = re.compile(r"\[(?:PG ID (?P<id>\d+) PG GUID [^\s(\]]+(?:\((?P<desc>[^)]*)\))? |PG (?P<id2>\d+) (?:\((?P<desc2>[^)]*)\) )?)?Rank (?P<rank>\d+)\]")
_ENV = re.compile(r"NCCL INFO (?P<name>NCCL_[A-Z0-9_]{1,64}) set by environment to (?P<value>[A-Za-z0-9_.,:=^+\-/]{0,256}?)\.?\s*$")
_ENV_VALUE = re.compile(r"[A-Za-z0-9_.,:=^+\-]{0,256}")
# paths and per-job identities of the crashed job: meaningless (or harmful) in the re-run
_ENV_SKIP = {"NCCL_DEBUG_FILE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE", "NCCL_GRAPH_DUMP_FILE",
             "NCCL_COMM_ID", "NCCL_HOSTID", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
             "NCCL_RAS_ADDR", "NCCL_CONF_FILE"}
_ENV_SCAN_BYTES = 8 << 20  # per file: NCCL prints its environment at init, near the top


@dataclass
class Plan:
    op: str
    bytes: int
    dtype: str
    units: list[str]  # what a run is made of: nodes (srun) or ranks (local --nproc)
    per_unit: int = 1  # ranks per unit: GPUs per node under srun, 1 locally
    unit_kind: str = "rank"  # "node" | "rank"
    implicated: dict[str, list[Any]] = field(default_factory=lambda: {"nodes": [], "ranks": []})
    implicated_units: list[str] = field(default_factory=list)
    reference_units: list[str] = field(default_factory=list)
    process_group: dict[str, Any] = field(default_factory=dict)
    collective: dict[str, Any] = field(default_factory=dict)  # what the log said (op type, numel, seq)
    nccl_env: dict[str, str] = field(default_factory=dict)
    unit_ranks: dict[str, list[int]] = field(default_factory=dict)  # the job's ranks on each unit (for the verdict)
    source: str = "direct"  # direct | report | jobdir
    notes: list[str] = field(default_factory=list)

    def ranks_of(self, unit: str) -> list[int]:
        if unit in self.unit_ranks:
            return list(self.unit_ranks[unit])
        i = self.units.index(unit)
        return [i * self.per_unit + k for k in range(self.per_unit)]

    @property
    def world(self) -> int:
        return len(self.units) * self.per_unit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def dtype_size(dtype: str) -> int:
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: choose one of {', '.join(sorted(DTYPES))}, got {dtype!r}")
    return DTYPES[dtype]


def direct_plan(op: str, nbytes: int, dtype: str, *, nproc: int | None, nodes: list[str] | None, gpus_per_node: int) -> Plan:
    if op not in OPS:
        raise UsageError(f"--op: choose one of {', '.join(OPS)}, got {op!r}")
    dtype_size(dtype)
    if nbytes <= 0:
        raise UsageError("--bytes must be positive")
    if nodes:
        return Plan(op=op, bytes=nbytes, dtype=canonical_dtype(dtype), units=list(nodes), per_unit=gpus_per_node, unit_kind="node",
                    reference_units=list(nodes))
    n = nproc or 2
    units = [f"rank{i}" for i in range(n)]
    return Plan(op=op, bytes=nbytes, dtype=canonical_dtype(dtype), units=units, per_unit=1, unit_kind="rank", reference_units=list(units))


def _messages(report: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    """(message, node, rank, file:line) of every line the report quotes."""
    out: list[tuple[str, Any, Any, str]] = []

    def add(d: Any) -> None:
        if isinstance(d, dict) and isinstance(d.get("message"), str):
            loc = f"{d.get('file')}:{d.get('line')}" if d.get("file") else ""
            out.append((d["message"], d.get("node"), d.get("rank"), loc))

    for e in report.get("evidence") or []:
        add(e)
    for s in report.get("symptoms") or []:
        if isinstance(s, dict):
            add(s.get("first"))
    for e in report.get("timeline_excerpt") or []:
        add(e)
    add(report.get("first_failure"))
    return out


def suspect_collective(report: dict[str, Any], extra: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The most often named c10d work item (op type and element counts) in the report's quoted
    lines, plus ``extra`` (collective_timeout attrs from a timeline); ties go to the first seen."""
    seen: Counter[tuple[str, int | None, int | None]] = Counter()
    first: dict[tuple[str, int | None, int | None], dict[str, Any]] = {}
    for a in extra or []:
        if a.get("op"):
            k = (str(a["op"]), a.get("numel_in"), a.get("numel_out"))
            seen[k] += 1
            first.setdefault(k, {"seq": a.get("seq"), "timeout_ms": a.get("timeout_ms"), "pg_id": a.get("pg_id"),
                                 "pg_desc": a.get("pg_desc"), "where": a.get("where", "")})
    for msg, _node, _rank, loc in _messages(report):
        m = _WORK.search(msg)
        if not m:
            continue
        k = (m.group("op"), int(m.group("nin")) if m.group("nin") else None, int(m.group("nout")) if m.group("nout") else None)
        seen[k] += 1
        pg = _PG.search(msg)
        first.setdefault(k, {"seq": int(m.group("seq")) if m.group("seq") else None,
                             "timeout_ms": int(m.group("tmo")) if m.group("tmo") else None,
                             "pg_id": (pg.group("id") or pg.group("id2")) if pg else None,
                             "pg_desc": (pg.group("desc") or pg.group("desc2")) if pg else None, "where": loc})
    if not seen:
        return None
    best = max(seen, key=lambda k: (seen[k], -list(first).index(k)))
    return {"op_type": best[0], "numel_in": best[1], "numel_out": best[2], "count": seen[best], **first[best]}


def _int_list(v: Any) -> list[int]:
    from crashscope.hostlist import expand_ints

    if isinstance(v, list):
        return [int(x) for x in v if isinstance(x, int) or (isinstance(x, str) and x.isdigit())]
    if isinstance(v, str) and v:
        return expand_ints(v)[0]
    return []


def rank_hosts(report: dict[str, Any], world: int, nodes: list[str]) -> dict[int, str]:
    """rank -> node: from the quoted lines that name both, else the even block layout
    (ranks 0..g-1 on the first node), which torchrun and srun's block distribution give."""
    out: dict[int, str] = {}
    for _msg, node, rank, _loc in _messages(report):
        if isinstance(rank, int) and isinstance(node, str) and node:
            out.setdefault(rank, node)
    if nodes and world:
        per = max(1, world // len(nodes))
        for r in range(world):
            out.setdefault(r, nodes[min(r // per, len(nodes) - 1)])
    return out


def plan_from_report(report: dict[str, Any], *, op: str | None = None, nbytes: int | None = None, dtype: str = "float32",
                     launcher: str = "local", gpus_per_node: int | None = None, nproc: int | None = None,
                     timeline_collectives: list[dict[str, Any]] | None = None, nccl_env: dict[str, str] | None = None,
                     source: str = "report") -> Plan:
    """The plan a report implies (``op``/``nbytes`` given on the command line win)."""
    notes: list[str] = []
    job = report.get("job") or {}
    nodes = [str(n) for n in job.get("nodes") or [] if n]
    world = job.get("ranks") if isinstance(job.get("ranks"), int) else None
    imp = report.get("implicated") or {}
    imp_nodes = [str(n) for n in imp.get("nodes") or [] if n]
    imp_ranks = _int_list(imp.get("ranks"))
    coll = suspect_collective(report, timeline_collectives)
    size = dtype_size(dtype)
    if op is None:
        if coll and coll["op_type"] in OPTYPE_TO_OP:
            op = OPTYPE_TO_OP[coll["op_type"]]
        else:
            op = "all_reduce"
            notes.append("the report names no collective the re-run knows" + (f" ({coll['op_type']})" if coll else "") + ": all_reduce")
    if nbytes is None:
        numel = None
        if coll:
            numel = coll.get("numel_out") if op == "all_gather" and coll.get("numel_out") else coll.get("numel_in")
        if numel and numel > 0:
            nbytes = int(numel) * size
            notes.append(f"size {numel} elements x {size} bytes ({canonical_dtype(dtype)}; the log does not name the dtype: --dtype)")
        else:
            nbytes = 64 << 20
            notes.append("the report names no message size: 64 MiB (--bytes)")
    if world is None and nodes:
        world = len(nodes) * (gpus_per_node or 1)
    gpn = gpus_per_node or (max(1, world // len(nodes)) if (world and nodes) else 1)
    hosts = rank_hosts(report, world or 0, nodes)
    pg: dict[str, Any] = {}
    if coll:
        pg = {"id": coll.get("pg_id"), "desc": coll.get("pg_desc")}
    pg_ranks = list(range(world)) if world else []
    if coll and coll.get("pg_id") not in (None, "0"):
        # not the default group: the ranks that reported the timeout (and the silent ones) are its members
        for s in report.get("symptoms") or []:
            if isinstance(s, dict) and s.get("kind") in ("collective_timeout", "watchdog_error"):
                pg_ranks = sorted(set(_int_list(s.get("ranks"))) | set(_int_list(s.get("missing_ranks"))))
                notes.append("process group other than the default: its ranks are those that reported it")
                break
    pg["ranks"] = pg_ranks
    pg["hosts"] = sorted({hosts[r] for r in pg_ranks if r in hosts})
    if not imp_nodes and imp_ranks:
        imp_nodes = sorted({hosts[r] for r in imp_ranks if r in hosts})
    group_nodes = [n for n in nodes if n in pg["hosts"]] or nodes
    if launcher == "srun" or (nproc is None and group_nodes):
        units = group_nodes
        kind = "node"
        implicated_units = [n for n in units if n in imp_nodes]
        if launcher != "srun":
            notes.append(f"local run: one process stands in for each of the {len(units)} nodes (srun runs {gpn} per node on the nodes themselves)")
    else:
        units = [f"rank{i}" for i in range(nproc or 2)]
        kind = "rank"
        implicated_units = [f"rank{r}" for r in imp_ranks if r < len(units)]
    if not units:
        units = [f"rank{i}" for i in range(nproc or 2)]
        kind = "rank"
        notes.append("the report names no nodes: local ranks")
    per_unit = gpn if launcher == "srun" and kind == "node" else 1
    references = [u for u in units if u not in implicated_units]
    unit_ranks = {u: sorted(r for r, h in hosts.items() if h == u) for u in units} if kind == "node" else {}
    if not implicated_units:
        notes.append("the report implicates no node or rank: every unit is a suspect")
    return Plan(op=op, bytes=int(nbytes), dtype=canonical_dtype(dtype), units=units, per_unit=per_unit, unit_kind=kind,
                implicated={"nodes": imp_nodes, "ranks": imp_ranks}, implicated_units=implicated_units,
                reference_units=references, process_group=pg, collective=coll or {}, nccl_env=dict(nccl_env or {}), unit_ranks=unit_ranks,
                source=source, notes=notes)


def nccl_env_from_lines(lines: Any) -> dict[str, str]:
    """NCCL variables NCCL itself said it read from the environment (first value wins)."""
    env: dict[str, str] = {}
    for line in lines:
        if "set by environment to" not in line:
            continue
        m = _ENV.search(line)
        if not m or m.group("name") in _ENV_SKIP or m.group("name") in env:
            continue
        value = m.group("value").rstrip(".")
        if "/" in value or not _ENV_VALUE.fullmatch(value):
            continue
        env[m.group("name")] = value
    return env


def scan_nccl_env(root: Path) -> dict[str, str]:
    """:func:`nccl_env_from_lines` over a job directory, through the safe walk (read-only)."""
    from crashscope.bundle import Entry, walk

    env: dict[str, str] = {}
    for item in walk(root):
        if not isinstance(item, Entry):
            continue
        chunks: list[bytes] = []
        got = 0
        try:
            while got < _ENV_SCAN_BYTES:  # raw streams return short reads
                chunk = item.stream.read(min(1 << 20, _ENV_SCAN_BYTES - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except Exception:  # an unreadable member costs only itself
            continue
        data = b"".join(chunks)
        if b"set by environment to" not in data:
            continue
        found = nccl_env_from_lines(data.decode("utf-8", "replace").splitlines())
        for k, v in found.items():
            env.setdefault(k, v)
    return env


def plan_from_jobdir(root: Path, **kw: Any) -> tuple[Plan, dict[str, Any]]:
    """Analyse ``root`` (never writing into it) and plan from the report and the timeline's
    collective timeouts; returns the plan and the report dict."""
    import json

    from crashscope.pipeline import analyze

    report, tl, _result = analyze(root)
    collectives: list[dict[str, Any]] = []
    ev = tl.events
    if ev.height and "kind" in ev.columns:
        for row in ev.filter(ev["kind"] == "collective_timeout").select(["attrs", "file", "line"]).iter_rows(named=True):
            try:
                a = json.loads(row["attrs"] or "{}")
            except ValueError:
                continue
            a["where"] = f"{row['file']}:{row['line']}"
            collectives.append(a)
    rd = report.to_dict()
    return plan_from_report(rd, timeline_collectives=collectives, nccl_env=scan_nccl_env(root), source="jobdir", **kw), rd
