"""The NCCL environment in force, per rank: what NCCL printed about its settings and the
environment dumps a job left, diffed across ranks and nodes and read against the verdict.

Inputs are net_config events (``sources/nccl.py``: ``NCCL_IB_TIMEOUT set by environment to
22.``, ``NET/IB : Using [0]mlx5_0:1/RoCE ...``, ``NET/Socket : Using [0]eth0:10.0.0.1<0>``,
``Using network Socket``, ``NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'``;
``sources/envdump.py``: ``NCCL_IB_GID_INDEX=3`` from ``env``/``printenv`` output).

Semantics (NCCL user guide, Environment Variables,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, and the NCCL_PARAM
defaults in NVIDIA/nccl ``src/transport/net_ib*.cc``):

* ``NCCL_IB_TIMEOUT``: the InfiniBand Verbs timeout; "the timeout is computed as 4.096 µs *
  2 ^ timeout", default 18 up to NCCL 2.22 and 20 since 2.23 (``NCCL_PARAM(IbTimeout,
  "IB_TIMEOUT", 20)``). A queue pair gives up with ``IBV_WC_RETRY_EXC_ERR`` after about
  ``NCCL_IB_RETRY_CNT + 1`` such timeouts, so a low value turns a short fabric hiccup (a
  link flap, a switch reboot) into a job-killing completion error.
* ``NCCL_IB_RETRY_CNT``: the Verbs retry count, default 7 (the most the 3-bit IB field holds).
* ``NCCL_IB_DISABLE=1`` makes NCCL use the socket transport (``Using network Socket``)
  even where InfiniBand/RoCE HCAs exist; ``NCCL_SOCKET_IFNAME`` picks the IP interfaces
  for sockets and bootstrap (a prefix list; ``=eth0`` exact; ``^`` excludes).
* ``NCCL_IB_GID_INDEX``: the GID index used for RoCE; every node of one job must resolve
  to the same RoCE version/address family, so a value that differs across nodes is named.
* ``NCCL_NET_GDR_LEVEL`` (``LOC`` / 0 disables GPU Direct RDMA) and the per-HCA ``GPU
  Direct RDMA Enabled|Disabled`` lines: GDR off on some ranks of an IB job while on for
  the others means the peer-memory module or the PCI topology differs on those nodes.

Every settings finding here is ``context`` (it explains and advises, it never picks the
cause); :func:`env_actions` turns the settings into actions for the verdict's cause.

One finding is a cause: :func:`file_version_drift`, the same package at different versions
in environment dumps (``pip freeze`` / ``pip list`` / conda listings, ``sources/versions.py``)
that name no host. Each such file describes one environment (one node, one container), so
two files that disagree are two environments that disagree, which is what
``version-drift-across-hosts`` says when the hosts are known; without host names the files
are the places named.
"""

from __future__ import annotations

import json
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind
from crashscope.hostlist import compress_ints

RULE_ID = "nccl-env"
WEIGHT = 0.3
IB_TIMEOUT_DEFAULT = 18  # the lower of the two defaults (<= 2.22); 20 since 2.23
IB_TIMEOUT_TRY = 22  # 4.096 us * 2^22 = 17.2 s per attempt
IB_RETRY_DEFAULT = 7
DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"

# Keys compared across ranks: how the job communicates. Per-rank identity keys (RANK,
# SLURM_PROCID, CUDA_VISIBLE_DEVICES...) legitimately differ and are never diffed.
DIFF_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "UCX_", "FI_", "CUDA_", "NVIDIA_")
PER_RANK_KEYS = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER_RANK",
                           "NCCL_COMM_ID", "NCCL_HOSTID", "NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE"})


def ib_timeout_s(value: int) -> float:
    """The Verbs local ACK timeout NCCL_IB_TIMEOUT=value sets: 4.096 µs * 2^value."""
    return 4.096e-6 * (2 ** value)


@dataclass
class Who:
    """One process's view: its settings and the transport it chose."""

    key: str
    host: str | None = None
    rank: int | None = None
    settings: dict[str, tuple[str, Evidence]] = field(default_factory=dict)
    network: tuple[str, Evidence] | None = None  # "ib" | "socket" | plugin name
    link_layers: set[str] = field(default_factory=set)  # IB | RoCE
    gdr: dict[bool, Evidence] = field(default_factory=dict)
    oob_iface: str | None = None


@dataclass
class EnvState:
    who: dict[str, Who] = field(default_factory=dict)
    ib_present: bool = False  # any HCA seen (NET/IB lines, IB completions, mlx5 kernel lines)
    ib_evidence: Evidence | None = None

    def values(self, setting: str) -> dict[str, list[Who]]:
        out: dict[str, list[Who]] = defaultdict(list)
        for w in self.who.values():
            if setting in w.settings:
                out[w.settings[setting][0]].append(w)
        return out

    def setting_evidence(self, setting: str) -> list[Evidence]:
        return [w.settings[setting][1] for w in self.who.values() if setting in w.settings]


def _evidence(r: dict[str, Any]) -> Evidence:
    t = r["time"]
    return Evidence(
        time=int(t.timestamp() * 1_000_000_000) if t is not None else None, host=r["host"], rank=r["rank"],
        gpu=r["gpu"], gpu_index=r["gpu_index"], file=r["file"] or "", line=r["line"], source=str(r["source"]),
        kind=str(r["kind"]), message=r["message"] or "",
    )


# The last frame read and its state: the analysis, the layer check and the verdict's actions
# all read the same job's frame (147k net_config lines at 16,384 ranks, ~1.6 s a reading).
_LAST: tuple[weakref.ref[pl.DataFrame], int, EnvState] | None = None


def collect(events: pl.DataFrame) -> EnvState:
    """Every process's settings and transport from the net_config events (read once per
    frame: callers must not change the state they get)."""
    global _LAST
    if _LAST is not None and _LAST[0]() is events and _LAST[1] == events.height:
        return _LAST[2]
    st = _collect(events)
    _LAST = (weakref.ref(events), events.height, st)
    return st


def _evidences(rows: pl.DataFrame) -> list[Evidence]:
    """:func:`_evidence` of every row of ``rows``, from its columns as lists."""
    cols = [rows[c].to_list() for c in ("time", "host", "rank", "gpu", "gpu_index", "file", "line", "source", "kind", "message")]
    return [
        Evidence(time=int(t.timestamp() * 1_000_000_000) if t is not None else None, host=h, rank=r, gpu=g, gpu_index=gi,
                 file=f or "", line=ln, source=str(so), kind=str(k), message=m or "")
        for t, h, r, g, gi, f, ln, so, k, m in zip(*cols)
    ]


def _collect(events: pl.DataFrame) -> EnvState:
    """Every process's settings and transport (see :func:`collect`): one pass over the
    net_config rows' key columns and attrs as plain lists (a JSON decode per row, no row
    dict), keeping row numbers; the evidence of the rows the state keeps (a few per
    process) is made at the end. The same state as one :func:`_evidence` per row gave."""
    st = EnvState()
    nc = events.filter(pl.col("kind") == Kind.NET_CONFIG.value)
    settings: dict[str, dict[str, tuple[str, int]]] = {}
    network: dict[str, tuple[str, int]] = {}
    gdr: dict[str, dict[bool, int]] = {}
    ib_row: int | None = None
    cols = nc.select("rank", "host", "pid", "file", "attrs")
    for i, (rank, host, pid, file, attrs) in enumerate(zip(*(cols[c].to_list() for c in cols.columns))):
        try:
            a = json.loads(attrs) if attrs else {}
        except ValueError:
            continue
        key = f"rank {rank}" if rank is not None else f"{host or '?'}:{pid or file}"
        w = st.who.get(key)
        if w is None:
            w = st.who[key] = Who(key=key, host=host, rank=rank)
        w.host = w.host or host
        t = a.get("transport")
        if t == "env" and a.get("setting"):
            settings.setdefault(key, {}).setdefault(str(a["setting"]), (str(a.get("value", "")), i))
        elif t == "ib" and a.get("devices") is not None:
            w.link_layers.update(a.get("link_layers") or [])
            w.oob_iface = a.get("oob_iface") or w.oob_iface
            st.ib_present = True
            ib_row = i if ib_row is None else ib_row
        elif t in ("ib", "socket") and a.get("network"):
            network[key] = (t, i)
        elif t == "socket" and key not in network:
            network[key] = ("socket", i)
        elif t == "gdr":
            if str(a.get("network", "")).lower() == "ib":
                gdr.setdefault(key, {}).setdefault(bool(a.get("gdr")), i)
        elif a.get("network"):
            network[key] = (str(a["network"]), i)
    kept = {i for s in settings.values() for _, i in s.values()} | {i for _, i in network.values()}
    kept |= {i for g in gdr.values() for i in g.values()} | ({ib_row} if ib_row is not None else set())
    rows = sorted(kept)
    evs = dict(zip(rows, _evidences(nc[rows]))) if rows else {}
    for key, w in st.who.items():
        w.settings = {k: (v, evs[i]) for k, (v, i) in settings.get(key, {}).items()}
        if key in network:
            w.network = (network[key][0], evs[network[key][1]])
        w.gdr = {k: evs[i] for k, i in gdr.get(key, {}).items()}
    if ib_row is not None:
        st.ib_evidence = evs[ib_row]
    return _ib_seen_in_errors(events, st)


def _ib_seen_in_errors(events: pl.DataFrame, st: EnvState) -> EnvState:
    """No NCCL IB init line: an IB network error or an mlx link event says IB was in use."""
    if not st.ib_present:
        ib = events.filter(
            ((pl.col("kind") == Kind.NETWORK_ERROR.value) & (pl.col("attrs").str.contains('"transport":"ib"', literal=True)))
            | ((pl.col("kind") == Kind.LINK_EVENT.value) & pl.col("message").str.contains("mlx"))
        )
        if ib.height:
            st.ib_present = True
            st.ib_evidence = _evidence(ib.row(0, named=True))
    return st


def _collect_rows(events: pl.DataFrame) -> EnvState:
    """The reference for :func:`_collect`: one row dict and one evidence per net_config row."""
    st = EnvState()
    nc = events.filter(pl.col("kind") == Kind.NET_CONFIG.value)
    for r in nc.iter_rows(named=True):
        try:
            a = json.loads(r["attrs"]) if r["attrs"] else {}
        except ValueError:
            continue
        key = f"rank {r['rank']}" if r["rank"] is not None else f"{r['host'] or '?'}:{r['pid'] or r['file']}"
        w = st.who.get(key)
        if w is None:
            w = st.who[key] = Who(key=key, host=r["host"], rank=r["rank"])
        w.host = w.host or r["host"]
        t = a.get("transport")
        ev = _evidence(r)
        if t == "env" and a.get("setting"):
            w.settings.setdefault(str(a["setting"]), (str(a.get("value", "")), ev))
        elif t == "ib" and a.get("devices") is not None:
            w.link_layers.update(a.get("link_layers") or [])
            w.oob_iface = a.get("oob_iface") or w.oob_iface
            st.ib_present = True
            st.ib_evidence = st.ib_evidence or ev
        elif t in ("ib", "socket") and a.get("network"):
            w.network = (t, ev)
        elif t == "socket" and w.network is None:
            w.network = ("socket", ev)
        elif t == "gdr":
            if str(a.get("network", "")).lower() == "ib":
                w.gdr.setdefault(bool(a.get("gdr")), ev)
        elif a.get("network"):
            w.network = (str(a["network"]), ev)
    return _ib_seen_in_errors(events, st)


def _names(ws: list[Who]) -> str:
    ranks = sorted(w.rank for w in ws if w.rank is not None)
    others = sorted({w.key for w in ws if w.rank is None})
    parts = []
    if ranks:
        parts.append("ranks " + compress_ints(ranks))
    if others:
        parts.append(", ".join(others[:6]) + (" ..." if len(others) > 6 else ""))
    hosts = sorted({w.host for w in ws if w.host})
    if hosts:
        parts.append("on " + ", ".join(hosts[:6]) + (" ..." if len(hosts) > 6 else ""))
    return " ".join(parts) or "?"



def diffs(st: EnvState) -> list[tuple[str, dict[str, list[Who]]]]:
    """Settings whose value differs across the processes that report them."""
    keys = sorted({k for w in st.who.values() for k in w.settings})
    out = []
    for k in keys:
        if k in PER_RANK_KEYS or not k.startswith(DIFF_PREFIXES):
            continue
        vals = st.values(k)
        if len(vals) > 1:
            out.append((k, dict(vals)))
    return out


def _finding(title: str, evidence: list[Evidence], explanation: str, actions: tuple[str, ...], cause: str, count: int = 1) -> Finding:
    ev = sorted(evidence, key=lambda e: (e.time is None, e.time or 0, e.file, e.line or 0))[:6]
    hosts = tuple(sorted({e.host for e in ev if e.host}))
    ranks = tuple(sorted({e.rank for e in ev if e.rank is not None}))
    return Finding(
        rule_id=RULE_ID, title=title, cause=cause, role="context", status="stable", weight=WEIGHT,
        first_time=min((e.time for e in ev if e.time is not None), default=None), count=count,
        hosts=hosts, ranks=ranks, gpus=(), evidence=tuple(ev), explanation=explanation, actions=actions,
    )


def _int(v: str) -> int | None:
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        return None


def problems(st: EnvState) -> list[dict[str, Any]]:
    """What is wrong or inconsistent in the settings, each with the evidence and the
    setting and value to try: {"what", "setting", "try", "evidence", "cause", "title"}."""
    out: list[dict[str, Any]] = []
    for k, vals in diffs(st):
        desc = "; ".join(f"{v!r} on {_names(ws)}" for v, ws in sorted(vals.items(), key=lambda p: -len(p[1])))
        majority = max(vals.items(), key=lambda p: len(p[1]))[0]
        ev = [ws[0].settings[k][1] for ws in vals.values()]
        what = "gid_index" if k == "NCCL_IB_GID_INDEX" else "differs"
        title = f"{k} differs across ranks: {desc}"
        if what == "gid_index":
            title = f"RoCE GID index differs across nodes: {k} {desc}"
        out.append({"what": what, "setting": k, "try": majority, "evidence": ev, "title": title,
                    "cause": "fabric_timeout" if k.startswith("NCCL_") else "driver_drift"})
    for v, ws in st.values("NCCL_IB_TIMEOUT").items():
        n = _int(v)
        if n is not None and 0 < n < IB_TIMEOUT_DEFAULT:
            out.append({"what": "ib_timeout", "setting": "NCCL_IB_TIMEOUT", "value": n, "try": str(IB_TIMEOUT_TRY),
                        "evidence": [ws[0].settings["NCCL_IB_TIMEOUT"][1]],
                        "title": f"NCCL_IB_TIMEOUT={n} on {_names(ws)}: {_dur(ib_timeout_s(n))} per attempt "
                                 f"(4.096 us x 2^{n}; the default {IB_TIMEOUT_DEFAULT}-20 gives {_dur(ib_timeout_s(IB_TIMEOUT_DEFAULT))}-{_dur(ib_timeout_s(20))})",
                        "cause": "fabric_timeout"})
    for v, ws in st.values("NCCL_IB_RETRY_CNT").items():
        n = _int(v)
        if n is not None and n < IB_RETRY_DEFAULT:
            out.append({"what": "ib_retry", "setting": "NCCL_IB_RETRY_CNT", "value": n, "try": str(IB_RETRY_DEFAULT),
                        "evidence": [ws[0].settings["NCCL_IB_RETRY_CNT"][1]],
                        "title": f"NCCL_IB_RETRY_CNT={n} on {_names(ws)} (default {IB_RETRY_DEFAULT})", "cause": "fabric_timeout"})
    sock = [w for w in st.who.values() if w.network and w.network[0] == "socket"]
    disabled = [w for w in st.who.values() if w.settings.get("NCCL_IB_DISABLE", ("0",))[0] not in ("0", "")]
    if sock and st.ib_present or disabled and st.ib_present:
        ws = sock or disabled
        ev = [w.network[1] for w in sock[:3] if w.network] + [w.settings["NCCL_IB_DISABLE"][1] for w in disabled[:3]]
        if st.ib_evidence is not None:
            ev.append(st.ib_evidence)
        iface = next((w.oob_iface for w in st.who.values() if w.oob_iface), None)
        try_ = "NCCL_IB_DISABLE=0 (unset it)" if disabled else f"NCCL_SOCKET_IFNAME={iface or '<the IB interface, e.g. ib0>'} and check NCCL_IB_HCA"
        out.append({"what": "socket_on_ib", "setting": "NCCL_IB_DISABLE" if disabled else "NCCL_SOCKET_IFNAME", "try": try_,
                    "evidence": ev, "cause": "fabric_timeout",
                    "title": f"socket transport selected on {_names(ws)} although InfiniBand/RoCE HCAs are present"
                             + (" (NCCL_IB_DISABLE set)" if disabled else "")})
    for v, ws in st.values("NCCL_SOCKET_IFNAME").items():
        if v.lstrip("=^").startswith(("lo", "docker")) and not v.startswith("^"):
            out.append({"what": "socket_ifname", "setting": "NCCL_SOCKET_IFNAME", "try": "an interface that reaches the other nodes",
                        "evidence": [ws[0].settings["NCCL_SOCKET_IFNAME"][1]], "cause": "fabric_timeout",
                        "title": f"NCCL_SOCKET_IFNAME={v} on {_names(ws)} names a local-only interface"})
    on = [w for w in st.who.values() if True in w.gdr]
    off = [w for w in st.who.values() if False in w.gdr and True not in w.gdr]
    gdr_level_off = [w for w in st.who.values() if w.settings.get("NCCL_NET_GDR_LEVEL", ("",))[0].upper() in ("LOC", "0")]
    if on and off or gdr_level_off:
        ws = off or gdr_level_off
        ev = [w.gdr[False] for w in off[:3]] + [w.settings["NCCL_NET_GDR_LEVEL"][1] for w in gdr_level_off[:3]]
        if on:
            ev.append(on[0].gdr[True])
        out.append({"what": "gdr_off", "setting": "NCCL_NET_GDR_LEVEL", "try": "unset (or PHB/SYS), and nvidia-peermem loaded on those nodes",
                    "evidence": ev, "cause": "fabric_timeout",
                    "title": f"GPU Direct RDMA disabled on {_names(ws)}" + (f" while enabled on {_names(on)}" if on else " (NCCL_NET_GDR_LEVEL)")})
    return out


def _dur(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def nccl_env(events: pl.DataFrame, world: int | None) -> list[Finding]:
    st = collect(events)
    out = []
    for p in problems(st):
        out.append(_finding(
            p["title"], p["evidence"],
            f"From the settings NCCL printed and the job's environment dumps ({DOCS}).",
            (action_for(p),), p["cause"],
        ))
    out.extend(file_version_drift(events))
    return out


FILE_DRIFT_RULE = "version-drift-across-files"
FILE_DRIFT_WEIGHT = 0.5  # weaker than version-drift-across-hosts (0.6): the files' places are inferred


def file_version_drift(events: pl.DataFrame) -> list[Finding]:
    """A package at different versions in host-less package listings of different files.

    Only ``versions`` events with a ``package`` (a pip/conda listing line) and no host are
    read; a file counts for a package only when it lists one version of it (one
    environment), and a finding needs two files that disagree."""
    if events.is_empty():
        return []
    rows = events.filter(
        (pl.col("kind") == Kind.VERSION.value) & (pl.col("source") == "versions") & pl.col("host").is_null()
        & pl.col("attrs").str.contains('"package":', literal=True)
    )
    if rows.height < 2:
        return []
    per: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))  # package -> file -> version -> row
    for r in rows.iter_rows(named=True):
        try:
            a = json.loads(r["attrs"])
        except ValueError:
            continue
        pkg, ver = a.get("package"), a.get("version")
        if not pkg or not ver or not r["file"]:
            continue
        per[str(pkg).lower().replace("_", "-")][r["file"]].setdefault(str(ver), r)
    out: list[Finding] = []
    for pkg, files in sorted(per.items()):
        one = {f: next(iter(vs.items())) for f, vs in files.items() if len(vs) == 1}
        by_ver: dict[str, list[str]] = defaultdict(list)
        for f, (v, _) in sorted(one.items()):
            by_ver[v].append(f)
        if len(by_ver) < 2:
            continue
        order = sorted(by_ver.items(), key=lambda p: (-len(p[1]), p[0]))
        desc = "; ".join(f"{v} in {', '.join(fs)}" for v, fs in order)
        ev = [_evidence(one[f][1]) for _, fs in order for f in fs]
        minority = [f for _, fs in order[1:] for f in fs] if len(order[0][1]) > len(order[1][1]) else [f for _, fs in order for f in fs]
        out.append(Finding(
            rule_id=FILE_DRIFT_RULE, title=f"{pkg} differs between environment listings: {desc}", cause="driver_drift",
            role="cause", status="stable", weight=FILE_DRIFT_WEIGHT, first_time=None, count=len(ev), hosts=(), ranks=(),
            gpus=(), evidence=tuple(ev[:6]),
            explanation=("Each package listing (pip freeze, pip list, conda list) describes one environment, one node or "
                         "container; these name no host, so the files are the places. Mixed versions of the same "
                         f"library across the job's environments break collectives in ways that look like other faults; "
                         f"the odd one out: {', '.join(minority)}."),
            actions=(f"Install the same {pkg} version in every environment of the job (the one most listings have: {order[0][0]}), "
                     "and say in each listing which node it came from.",),
        ))
    return out


def action_for(p: dict[str, Any]) -> str:
    what, setting, try_ = p["what"], p["setting"], p["try"]
    if what == "ib_timeout":
        return (f"Set {setting}={try_} (4.096 us x 2^{try_} = {_dur(ib_timeout_s(int(try_)))} per attempt) instead of {p['value']} "
                f"so a short fabric stall does not exhaust the retries, and find the stall in the fabric counters ({DOCS}).")
    if what == "ib_retry":
        return f"Set {setting}={try_} (the default and the IB maximum) instead of {p['value']} ({DOCS})."
    if what == "socket_on_ib":
        return f"Use the InfiniBand transport: {try_}; the socket transport over Ethernet is slower and has its own timeouts ({DOCS})."
    if what == "socket_ifname":
        return f"Set {setting} to {try_} (e.g. the OOB interface NET/IB prints) ({DOCS})."
    if what == "gid_index":
        return f"Set {setting}={try_} on every node (the value most ranks used), or let NCCL pick it (unset) ({DOCS})."
    if what == "gdr_off":
        return f"GPU Direct RDMA: {setting} {try_} ({DOCS})."
    return f"Make {setting} the same on every rank ({try_!r} is what most ranks used) ({DOCS})."


def env_actions(events: pl.DataFrame, cause: str) -> list[str]:
    """Actions for the verdict: the settings problems that bear on its cause (a network
    cause for the IB settings), the setting named with the value to try."""
    if cause not in ("fabric_timeout", "node_failure", "unknown", "driver_drift"):
        return []
    st = collect(events)
    acts = []
    for p in problems(st):
        if cause == "driver_drift" and p["cause"] != "driver_drift":
            continue
        if cause != "driver_drift" and p["cause"] != "fabric_timeout":
            continue
        acts.append(action_for(p))
    return list(dict.fromkeys(acts))
