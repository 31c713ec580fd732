"""The layer-by-layer check a cluster engineer does by hand after a multi-node job dies,
done from the timeline and the findings, for every report (``Report.layers``,
``docs/layers.md``).

One row per layer, in this order: ``gpu`` (GPU visibility and driver parity), ``fabric``
(InfiniBand/RoCE/Ethernet fabric and the NCCL transport settings), ``storage`` (storage and
checkpoint I/O), ``scheduler`` (what Slurm did), ``network`` (node-to-node communication:
NCCL/gloo init and connections), ``gpu_health`` (throttling, ECC, Xid). Each row::

    {"layer", "title", "status": "ok" | "suspect" | "failed" | "no data", "reason",
     "evidence": [{"file", "line", "node", "rank", "time", "message"}], "settle"}

The verdict's layer (``CAUSE_LAYER``) is ``failed``; a cause above the infrastructure
(software_error, oom) or none marks no layer failed. The other rows say what was ruled out
and from which lines, ``suspect`` where something is wrong there that did not decide the
verdict, and ``no data`` with what would settle it (``settle``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable

import polars as pl

from crashscope.analyses import checkpoint_io, nccl_env
from crashscope.engine.model import Evidence, Finding
from crashscope.report.model import EventRef, Report
from crashscope.schema import Kind, one_of
from crashscope.timeline import attrs_of, iso

LAYERS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU visibility and driver parity"),
    ("fabric", "Fabric (InfiniBand / RoCE / Ethernet) and NCCL transport"),
    ("storage", "Storage and checkpoint I/O"),
    ("scheduler", "Scheduler (Slurm)"),
    ("network", "Node-to-node communication"),
    ("gpu_health", "GPU health (throttling, ECC, Xid)"),
)
STATUSES = ("ok", "suspect", "failed", "no data")

# The layer a cause lives in (documented in docs/layers.md). Causes absent here (software_error,
# oom, unknown, none) are above the layers: no layer is marked failed.
CAUSE_LAYER: dict[str, str] = {
    "driver_drift": "gpu",
    "fabric_timeout": "fabric",
    "storage_stall": "storage",
    "preemption": "scheduler",
    "time_limit": "scheduler",
    "node_failure": "network",
    "gpu_hardware": "gpu_health",
    "gpu_throttle": "gpu_health",
}
PARITY_COMPONENTS = ("driver", "cuda_driver", "nccl", "torch", "ofed", "cuda_toolkit", "kernel")
MAX_EVIDENCE = 3
REPRO_SETTLE = "no repro run: `crashscope repro REPORT`"


def compute_layers(report: Report, events: pl.DataFrame, findings: Iterable[Finding] = (), hosts: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The six rows for ``report`` (its verdict already decided) over the job's events."""
    ctx = _Ctx(report, events, list(findings), sorted({h for h in hosts if h}))
    failed = CAUSE_LAYER.get(report.cause)
    rows = []
    for name, title in LAYERS:
        row = getattr(ctx, name)()
        if name == failed:
            row["status"] = "failed"
            row["reason"] = f"verdict {report.cause}" + (f": {row['reason']}" if row.get("reason") else "")
            cause_ev = [_item_from_report(e) for e in report.evidence if getattr(e, "role", "cause") == "cause"][:MAX_EVIDENCE]
            row["evidence"] = cause_ev or row["evidence"]
            row["settle"] = None
        elif row["status"] == "failed":
            row["status"] = "suspect"
        if row["status"] != "no data":
            row["settle"] = row.get("settle") if row["status"] == "suspect" else None
        rows.append({"layer": name, "title": title, "status": row["status"], "reason": row["reason"],
                     "evidence": row["evidence"][:MAX_EVIDENCE], "settle": row.get("settle"), **row.get("extra", {})})
    return rows


def apply_layers(report: Report, events: pl.DataFrame, findings: Iterable[Finding] = (), hosts: Iterable[str] = ()) -> None:
    """Fill ``report.layers`` and add the NCCL-environment actions that bear on the verdict."""
    report.layers = compute_layers(report, events, findings, hosts)
    env = [a for a in nccl_env.env_actions(events, report.cause) if a not in report.actions]
    report.actions[:0] = env  # the setting to change, with its value, before the generic advice


# -- helpers -------------------------------------------------------------------------------

def _item_from_report(e: Any) -> dict[str, Any]:
    return {"file": e.file, "line": e.line, "node": e.node, "rank": e.rank, "time": e.time, "message": e.message}


def _item(e: Evidence) -> dict[str, Any]:
    return {"file": e.file, "line": e.line, "node": e.host, "rank": e.rank, "time": iso(e.time), "message": e.message}


def _row_item(r: dict[str, Any]) -> dict[str, Any]:
    t = r["time"]
    return {"file": r["file"], "line": r["line"], "node": r["host"], "rank": r["rank"],
            "time": iso(int(t.timestamp() * 1_000_000_000)) if t is not None else None, "message": r["message"]}


def _allocation(events: pl.DataFrame) -> list[str]:
    """The job's nodes as Slurm allocated them (a node that left no log is still one)."""
    nodes: set[str] = set()
    if not events.height:
        return []
    for a in events.filter(pl.col("kind") == Kind.JOB_STATE.value)["attrs"].drop_nulls().to_list():
        try:
            v = json.loads(a).get("nodes")
        except (ValueError, AttributeError):
            continue
        if isinstance(v, list) and len(v) <= 10_000:
            nodes.update(str(x) for x in v if isinstance(x, str))
    return sorted(nodes)


def _ff_ns(ff: EventRef | None) -> int | None:
    if ff is None or not ff.time:
        return None
    from crashscope.sources.base import iso_to_ns

    t, _ = iso_to_ns(str(ff.time))
    return t


def _list(names: list[str], n: int = 6) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


class _Ctx:
    def __init__(self, report: Report, events: pl.DataFrame, findings: list[Finding], hosts: list[str]):
        self.report = report
        self.ev = events
        self.findings = findings
        self.hosts = hosts or sorted(events["host"].drop_nulls().unique().to_list()) if events.height else hosts
        self.hosts = sorted(set(self.hosts) | set(_allocation(events)))
        # kind and source compared as they are (is_in on the enum, no text: a cast of each
        # column cost ~25 ms a time at 16,384 ranks)
        self._kind = events["kind"] if events.height else None
        self._source = events["source"] if events.height else None
        self.kernel_hosts = set(self._of(source="kernel")["host"].drop_nulls().unique().to_list())
        self.sched = self._of(source=("slurm", "sacct"))

    def _of(self, kinds: Iterable[str] | str | None = None, source: Iterable[str] | str | None = None) -> pl.DataFrame:
        ev = self.ev
        if not ev.height:
            return ev
        keep: pl.Series | None = None
        if kinds is not None and self._kind is not None:
            keep = self._kind.is_in([kinds] if isinstance(kinds, str) else list(kinds))
        if source is not None and self._source is not None:
            by_source = self._source.is_in([source] if isinstance(source, str) else list(source))
            keep = by_source if keep is None else keep & by_source
        return ev if keep is None else ev.filter(keep)

    def _items(self, df: pl.DataFrame, n: int = MAX_EVIDENCE) -> list[dict[str, Any]]:
        return [_row_item(r) for r in df.sort(["time", "file", "line"], nulls_last=True).head(n).iter_rows(named=True)]

    def _context(self, rule_id: str) -> list[Finding]:
        return [f for f in self.findings if f.rule_id == rule_id]

    def _no_kernel(self) -> list[str]:
        return [h for h in self.hosts if h not in self.kernel_hosts]

    # -- the layers ------------------------------------------------------------------------
    def gpu(self) -> dict[str, Any]:
        ver = self._of(Kind.VERSION.value)
        per: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        # Ranks and nodes print the same few version records: each distinct one is decoded once,
        # and the rows are grouped by (component, version) in polars, in order of first appearance.
        if ver.height:
            dec: dict[str, list[Any]] = {"attrs": [], "_c": [], "_v": []}
            for a in ver["attrs"].drop_nulls().unique().to_list():
                d = attrs_of(a)
                comp, v = d.get("component"), d.get("version")
                if comp in PARITY_COMPONENTS and v:
                    dec["attrs"].append(a)
                    dec["_c"].append(comp)
                    dec["_v"].append(str(v))
            if dec["attrs"]:
                hit = (ver.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_i"), "host", "attrs")
                       .filter(pl.col("host").is_not_null() & (pl.col("host") != ""))
                       .join(pl.DataFrame(dec, schema={"attrs": pl.String, "_c": pl.String, "_v": pl.String}), on="attrs", how="inner")
                       .sort("_i")
                       .group_by(["_c", "_v"], maintain_order=True).agg(pl.col("_i").first(), pl.col("host").unique()))
                for comp, v, i, hs in hit.iter_rows():
                    per[comp][v].update(hs)
                    rows[(comp, v)] = ver.row(i, named=True)
        inv = self._of((Kind.GPU_INVENTORY.value, Kind.COMM_INIT.value)).filter(pl.col("gpu").is_not_null() | pl.col("gpu_index").is_not_null())
        gpus_seen = inv.select(pl.col("host"), pl.coalesce(pl.col("gpu"), pl.col("gpu_index").cast(pl.String))).unique().height if inv.height else 0
        seen = f"; {gpus_seen} GPUs seen" if gpus_seen else ""
        version_hosts = sorted({h for vals in per.values() for hs in vals.values() for h in hs})
        drift = {c: vals for c, vals in per.items() if len(vals) > 1}
        if drift:
            parts = []
            ev: list[dict[str, Any]] = []
            for c, vals in sorted(drift.items()):
                parts.append(f"{c} " + " vs ".join(f"{v} on {_list(sorted(hs), 3)}" for v, hs in sorted(vals.items(), key=lambda p: -len(p[1]))))
                ev.extend(_row_item(rows[(c, v)]) for v in vals)
            return {"status": "failed", "reason": "versions differ across nodes: " + "; ".join(parts) + seen, "evidence": ev,
                    "settle": None}
        if not version_hosts:
            return {"status": "no data", "reason": "no driver, CUDA or NCCL version lines" + seen, "evidence": [],
                    "settle": "no version records from the nodes: run the epilog collector (nvidia-smi, /proc/driver/nvidia/version, "
                              "pip freeze) or run with NCCL_DEBUG=INFO (NCCL version and cudaDriverVersion lines)"}
        missing = [h for h in self.hosts if h not in version_hosts]
        compared = sorted(per)
        same = ", ".join(f"{c} {next(iter(per[c]))}" for c in compared[:4])
        if len(self.hosts) > 1 and len(version_hosts) < 2:
            return {"status": "no data", "reason": f"versions from {_list(version_hosts)} only ({same}): parity cannot be checked" + seen,
                    "evidence": self._items(ver), "settle": f"no version records from {_list(missing)}: run the epilog collector on every node"}
        reason = f"same {same} on {len(version_hosts)} node{'s' if len(version_hosts) != 1 else ''}" + seen
        if missing:
            reason += f"; no versions from {_list(missing)}"
        return {"status": "ok", "reason": reason, "evidence": self._items(ver, 2), "settle": None}

    def fabric(self) -> dict[str, Any]:
        ib_err = self._of((Kind.NETWORK_ERROR.value, Kind.LINK_EVENT.value)).filter(
            (pl.col("kind") == Kind.LINK_EVENT.value)
            | pl.col("attrs").str.contains('"transport":"ib"', literal=True)
        )
        bad_links = ib_err.filter(pl.col("severity").is_in(["warning", "error", "critical"]))
        st = nccl_env.collect(self.ev)
        env_problems = nccl_env.problems(st)
        nets = defaultdict(list)
        for w in st.who.values():
            if w.network:
                nets[w.network[0]].append(w)
        layers = sorted({ll for w in st.who.values() for ll in w.link_layers})
        chosen = "; ".join(f"{'IB' if n == 'ib' else n} on {nccl_env._names(ws)}" for n, ws in sorted(nets.items()))
        net_rows = self._of(Kind.NET_CONFIG.value).filter(~pl.col("attrs").str.contains('"transport":"env"', literal=True))
        settings = sorted({k for w in st.who.values() for k in w.settings if k.startswith("NCCL_")})
        extra = {"nccl_env": {"settings": _settings_table(st), "differs": [
            {"setting": k, "values": {v: nccl_env._names(ws) for v, ws in vals.items()}} for k, vals in nccl_env.diffs(st)]}}
        if bad_links.height:
            where = sorted(set(bad_links["host"].drop_nulls().to_list()))
            return {"status": "failed", "reason": f"{bad_links.height} InfiniBand/link error line(s) on {_list(where) or 'unknown hosts'}",
                    "evidence": self._items(bad_links), "extra": extra}
        if env_problems:
            return {"status": "suspect", "reason": "; ".join(q["title"] for q in env_problems[:3]),
                    "evidence": [_item(e) for q in env_problems[:2] for e in q["evidence"][:2]],
                    "settle": "compare the settings across nodes (`crashscope analyze --format json`: layers[fabric].nccl_env)", "extra": extra}
        if nets or layers:
            reason = f"transport {chosen or 'IB'}" + (f" ({'/'.join(layers)})" if layers else "") + ", no InfiniBand or link errors"
            if settings:
                reason += f"; {len(settings)} NCCL setting{'s' if len(settings) != 1 else ''} consistent across ranks"
            return {"status": "ok", "reason": reason, "evidence": self._items(net_rows, 2), "extra": extra}
        if self.hosts and not self._no_kernel():
            return {"status": "ok", "reason": f"kernel logs of all {len(self.hosts)} nodes show no link or HCA errors "
                                              "(the transport NCCL chose is not logged)", "evidence": [],
                    "settle": None, "extra": extra}
        no_k = self._no_kernel()
        return {"status": "no data", "reason": "no NCCL transport lines and no kernel log" + (f" from {_list(no_k)}" if no_k else ""),
                "evidence": [], "extra": extra,
                "settle": "run with NCCL_DEBUG=INFO (NET/IB or NET/Socket selection lines)"
                          + (f"; no kernel log from {_list(no_k)}: run the epilog collector" if no_k else "")}

    def storage(self) -> dict[str, Any]:
        st = self._of((Kind.STORAGE_ERROR.value, Kind.HUNG_TASK.value))
        ck = checkpoint_io.summary(self.ev)
        extra = {"checkpoints": ck}
        io_findings = self._context(checkpoint_io.RULE_ID)
        ck_text = ""
        if ck["saves"]:
            ck_text = f"{ck['saves']} checkpoint save(s)"
            if ck["median_s"] is not None:  # trainers that print only the end of a save (torchtune) give no duration
                ck_text += f", median {ck['median_s']} s, max {ck['max_s']} s"
        if ck["data_wait"]:
            dw = ck["data_wait"]
            ck_text += ("; " if ck_text else "") + f"data-loader wait median {dw['median_s']} s, max {dw['max_s']} s"
        if st.height or io_findings:
            where = sorted(set(st["host"].drop_nulls().to_list()))
            parts = []
            if st.height:
                parts.append(f"{st.height} storage kernel line(s) (NFS/Lustre/hung task) on {_list(where) or 'unknown hosts'}")
            parts.extend(f.title for f in io_findings[:2])
            ev = self._items(st) + [_item(e) for f in io_findings[:2] for e in f.evidence[:1]]
            return {"status": "failed", "reason": "; ".join(parts) + (f"; {ck_text}" if ck_text else ""), "evidence": ev,
                    "settle": "check the file system's servers and that node's mount at that time", "extra": extra}
        no_k = self._no_kernel()
        if ck["saves"] and not no_k:
            return {"status": "ok", "reason": ck_text + "; no storage errors in the kernel logs", "evidence": [], "extra": extra}
        if ck["saves"]:
            return {"status": "ok", "reason": ck_text + " (no kernel log from " + _list(no_k) + ")", "evidence": [],
                    "extra": extra}
        if self.hosts and not no_k:
            return {"status": "ok", "reason": f"no NFS, Lustre or hung-task lines in the kernel logs of all {len(self.hosts)} nodes"
                                              + (f"; {ck_text}" if ck_text else ""), "evidence": [], "extra": extra}
        return {"status": "no data", "reason": "no checkpoint lines and no kernel log" + (f" from {_list(no_k)}" if no_k else ""),
                "evidence": [], "extra": extra,
                "settle": (f"no kernel log from {_list(no_k)}: run the epilog collector" if no_k else "no kernel log: run the epilog collector")
                          + "; checkpoint timing needs the trainer's own log (rank logs)"}

    def scheduler(self) -> dict[str, Any]:
        s = self.sched
        if not s.height:
            return {"status": "no data", "reason": "no Slurm records", "evidence": [],
                    "settle": "no Slurm records: save `sacct -j JOBID -P`, the job's output and the slurmctld log (the epilog collector)"}
        # The job's own state (a step CANCELLED after a task failed, or a banner without
        # "DUE TO", is srun cleaning up, not the scheduler acting).
        states = []
        for r in self._of(Kind.JOB_STATE.value).iter_rows(named=True):
            a = attrs_of(r["attrs"])
            v = a.get("state")
            if v and a.get("step") is None and a.get("action") is None:
                states.append(str(v).split()[0].upper())
        bad_state = [x for x in states if x in ("PREEMPTED", "REQUEUED", "TIMEOUT", "NODE_FAIL", "CANCELLED", "DEADLINE", "BOOT_FAIL")]
        acted = []
        for r in self._of((Kind.JOB_CANCEL.value, Kind.NODE_STATE.value)).filter(one_of("source", ["slurm", "sacct"])).iter_rows(named=True):
            a = attrs_of(r["attrs"])
            if r["kind"] == Kind.NODE_STATE.value or a.get("entity") == "job" or a.get("reason") not in (None, "FAILED", "CANCELLED"):
                acted.append(r)
        cancels = pl.DataFrame(acted, schema=s.schema) if acted else s.clear()
        if cancels.height or bad_state:
            parts = []
            if bad_state:
                parts.append("job state " + "/".join(dict.fromkeys(bad_state)))
            if cancels.height:
                parts.append(f"{cancels.height} cancel/node-state line(s)")
            return {"status": "failed", "reason": ", ".join(parts), "evidence": self._items(cancels) or self._items(self._of(Kind.JOB_STATE.value)),
                    "settle": "the slurmctld log says who cancelled and why"}
        final = "/".join(dict.fromkeys(x for x in states if x not in ("COMPLETING", "RUNNING", "PENDING"))) or "no final state"
        return {"status": "ok", "reason": f"Slurm records ({final}): no preemption, cancel, time limit or node failure",
                "evidence": self._items(self._of(Kind.JOB_STATE.value), 2), "settle": None}

    def network(self) -> dict[str, Any]:
        init = self._of(Kind.COMM_INIT.value).filter(pl.col("attrs").str.contains('"phase":"complete"', literal=True))
        # rank-communicators: distinct (host, pid, the attrs' rank), counted in one pass
        init_ranks = init.select("host", "pid", pl.col("attrs").str.json_path_match("$.rank").alias("_rk")).n_unique() if init.height else 0
        sock = self._of(Kind.NETWORK_ERROR.value).filter(~pl.col("attrs").str.contains('"transport":"ib"', literal=True))
        timeouts = self._of((Kind.COLLECTIVE_TIMEOUT.value, Kind.WATCHDOG_ERROR.value, Kind.HEARTBEAT_TIMEOUT.value))
        world = self.report.coverage.ranks_expected if self.report.coverage is not None else None
        init_text = f"NCCL init completed on {init_ranks} rank-communicator(s)" if init_ranks else ""
        extra_settle = REPRO_SETTLE if not self.report.repro else None
        t_fail = _ff_ns(self.report.first_failure)
        if sock.height and t_fail is not None:
            after = sock.filter(pl.col("time").is_not_null() & (pl.col("time").dt.epoch("ns") > t_fail))
            if after.height == sock.height:  # connections that broke after the failure are its symptoms
                return {"status": "ok", "reason": (f"{init_text}; " if init_text else "")
                        + f"{sock.height} connection error line(s), all after the first failure (symptoms)",
                        "evidence": self._items(init, 1), "settle": None}
        if sock.height:
            where = sorted(set(sock["host"].drop_nulls().to_list()))
            return {"status": "failed", "reason": f"{sock.height} connection error line(s) (socket/gloo/proxy) on {_list(where) or 'unknown hosts'}"
                    + (f"; {init_text}" if init_text else ""), "evidence": self._items(sock), "settle": extra_settle}
        if init_ranks:
            reason = init_text + (f" (world {world})" if world else "") + ", no connection errors"
            if timeouts.height:
                reason += f"; {timeouts.height} collective timeout line(s) followed the failure"
            return {"status": "ok", "reason": reason, "evidence": self._items(init, 2), "settle": None}
        if timeouts.height:
            return {"status": "no data", "reason": f"{timeouts.height} collective timeout line(s) but no NCCL init lines to show the links came up",
                    "evidence": self._items(timeouts, 2), "settle": "run with NCCL_DEBUG=INFO (Init COMPLETE lines); " + REPRO_SETTLE}
        return {"status": "no data", "reason": "no NCCL init or connection lines", "evidence": [],
                "settle": "run with NCCL_DEBUG=INFO; " + REPRO_SETTLE}

    def gpu_health(self) -> dict[str, Any]:
        hw = self._of((Kind.XID.value, Kind.SXID.value, Kind.GPU_THROTTLE.value, Kind.PCIE_ERROR.value))
        ecc = self._of(Kind.GPU_ECC.value).filter(pl.col("severity").is_in(["warning", "error", "critical"]))
        bad = pl.concat([hw, ecc]) if hw.height and ecc.height else (hw if hw.height else ecc)
        telemetry = self._of((Kind.GPU_TELEMETRY.value, Kind.GPU_ECC.value, Kind.GPU_INVENTORY.value))
        if bad.height:
            where = sorted(set(bad["host"].drop_nulls().to_list()))
            kinds = sorted(set(bad["kind"].cast(pl.String).to_list()))
            return {"status": "failed", "reason": f"{bad.height} {'/'.join(kinds)} line(s) on {_list(where) or 'unknown hosts'}",
                    "evidence": self._items(bad), "settle": "nvidia-smi -q on that node (ECC, row remapping, clocks)"}
        no_k = self._no_kernel()
        src = []
        if telemetry.height:
            src.append(f"GPU telemetry from {len(set(telemetry['host'].drop_nulls().to_list()))} node(s)")
        if self.hosts and not no_k:
            src.append(f"kernel logs of all {len(self.hosts)} nodes")
        if src:
            return {"status": "ok", "reason": "no Xid, ECC error or throttling in " + " and ".join(src)
                    + (f" (no kernel log from {_list(no_k)})" if no_k and self.kernel_hosts else ""), "evidence": [], "settle": None}
        return {"status": "no data", "reason": "no GPU telemetry and no kernel log" + (f" from {_list(no_k)}" if no_k else ""), "evidence": [],
                "settle": (f"no kernel log from {_list(no_k)}: run the epilog collector" if no_k else "no kernel log: run the epilog collector")
                          + "; nvidia-smi -q / DCGM samples show throttling and ECC"}


def _settings_table(st: nccl_env.EnvState) -> dict[str, dict[str, str]]:
    """setting -> value -> who (ranks, nodes): the NCCL environment in force, compact."""
    out: dict[str, dict[str, str]] = {}
    for k in sorted({k for w in st.who.values() for k in w.settings if k.startswith(("NCCL_", "TORCH_NCCL_"))})[:40]:
        out[k] = {v: nccl_env._names(ws) for v, ws in st.values(k).items()}
    return out
