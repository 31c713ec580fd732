"""A connection reset (or aborted) with nothing else wrong anywhere: the network path is the suspect.

A TCP reset is what the survivors of a dead peer see (the kernel of a killed process's node
answers with RST), so the NCCL, gloo and c10d socket errors are symptom rules. But when the
whole directory shows no process dying or stopping (no exit by a signal, no OOM, no
traceback of another kind, no cancel, no kernel or GPU fault, no timeout waiting for a
silent rank, no "connection closed" by an exiting peer), the reset is the only anomaly
there is: a middlebox, a firewall or conntrack table, an overlay network (Kubernetes
flannel/calico) or a wrong interface tore the connection down, or the peer died where no log
was collected. This analysis names that hypothesis at a low weight (its verdict stays well
below the 0.8 that promises the cause), naming the hosts and ranks that saw the reset and,
where the timeline maps it, the peer; the verdict adds the peer's own log to what is missing.

Reset texts: ``ECONNRESET`` "Connection reset by peer" (NCCL ``socketProgressOpt: Call to
send to <peer> failed : Connection reset by peer``, old ``Call to recv failed : ...``, gloo
``Read error [addr]:port: Connection reset by peer``), ``ECONNABORTED`` "Software caused
connection abort" (NCCL ``socketStartConnect: Connect to <peer> failed : ...``).
"""

from __future__ import annotations

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind, one_of
from crashscope.timeline import _ns, attrs_of

RULE_ID = "lone-network-reset"
WEIGHT = 0.35  # above MIN_CAUSE_SCORE so it can name the cause alone; its cap (0.53) stays far below 0.8
RESET_RX = r"(?i)connection reset by peer|software caused connection abort|\bECONNRESET\b|\bECONNABORTED\b"
# A peer that went away (FIN, nothing listening) or a peer that is alive but absent: those say a
# process stopped or died, so the reset is then that story's symptom.
# PyTorch's heartbeat monitor says it in its own words when the reset came from the TCPStore's
# host: "Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut
# down too early), with error: Connection reset by peer" (ProcessGroupNCCL.cpp).
PEER_GONE_RX = r"(?i)closed by (?:remote )?peer|connection refused|\bECONNREFUSED\b|timed out waiting|pair closure|TCPStore server has shut down"
# Lines that wrap the reset (the c10d/NCCL error it raised, the propagation stack): not another story.
WRAPPER_RX = r"(?i)NCCL error|DistBackendError|ncclSystemError|ncclRemoteError|unhandled system error|remote process exited or there was a network error|socket"
CARRIER_KINDS = (Kind.NETWORK_ERROR.value, Kind.NCCL_ERROR.value, Kind.LOG_ERROR.value, Kind.EXCEPTION.value, Kind.WATCHDOG_ERROR.value)
# Any of these anywhere: a process died, stopped, was killed or cancelled, or the node or GPU failed.
STORY_KINDS = (
    Kind.COLLECTIVE_TIMEOUT, Kind.HEARTBEAT_TIMEOUT, Kind.DESYNC_REPORT, Kind.COLLECTIVE_MISMATCH, Kind.CUDA_OOM,
    Kind.CUDA_ERROR, Kind.SIGNAL, Kind.JOB_CANCEL, Kind.HOST_OOM, Kind.XID, Kind.SXID, Kind.GPU_THROTTLE,
    Kind.STORAGE_ERROR, Kind.HUNG_TASK, Kind.MCE, Kind.KERNEL_PANIC, Kind.BOOT, Kind.SEGFAULT,
)
QUIET_STATES = {"FAILED", "COMPLETED", "RUNNING", "PENDING"}  # a plain FAILED says only that it failed; other end states are a story
DEATH_CODES = {9, 15, 137, 143, -9, -15, 134, -6, 139, -11}


def lone_network_reset(ev: pl.DataFrame, world: int | None) -> list[Finding]:
    if ev.height == 0:
        return []
    bad = one_of("severity", ["warning", "error", "critical"])
    resets = ev.filter(one_of("kind", CARRIER_KINDS) & bad & pl.col("message").str.contains(RESET_RX))
    if resets.height == 0:
        return []
    if ev.filter(one_of("kind", STORY_KINDS) & bad).height:
        return []
    if ev.filter(one_of("kind", CARRIER_KINDS) & bad & pl.col("message").str.contains(PEER_GONE_RX)).height:
        return []
    other_exc = ev.filter(
        (pl.col("kind") == Kind.EXCEPTION.value) & ~pl.col("message").str.contains(RESET_RX) & ~pl.col("message").str.contains(WRAPPER_RX)
    )
    if other_exc.height:
        return []
    if not _no_deaths(ev):
        return []
    # One row per line: the format source's reading (host, rank) before the catalog's twin of it.
    rows = (
        resets.with_columns((pl.col("source").cast(pl.String) == "catalog").alias("_cat"), pl.col("host").is_null().alias("_nohost"))
        .sort(["file", "line", "_cat", "_nohost"], nulls_last=True)
        .unique(subset=["file", "line"], keep="first", maintain_order=True)
        .sort("time", "file", "line", nulls_last=True)
        .to_dicts()
    )
    hosts = sorted({r["host"] for r in rows if r["host"]})
    peers = sorted({p for r in rows if (p := attrs_of(r["attrs"]).get("peer_host")) and isinstance(p, str) and p not in hosts})
    ranks = sorted({int(r["rank"]) for r in rows if r["rank"] is not None})
    evidence = tuple(
        Evidence(
            time=_ns(r["time"]), host=r["host"], rank=r["rank"], gpu=r["gpu"], gpu_index=r["gpu_index"], file=r["file"] or "",
            line=r["line"], source=str(r["source"]), kind=str(r["kind"]), message=r["message"] or "",
        )
        for r in rows[:10]
    )
    times = [e.time for e in evidence if e.time is not None]
    where = ", ".join(hosts[:3]) if hosts else "a host the logs do not name"
    return [
        Finding(
            rule_id=RULE_ID, title=f"Connection reset with no process seen dying (on {where})", cause="fabric_timeout",
            role="cause", status="stable", weight=WEIGHT, first_time=min(times) if times else None, count=len(rows),
            hosts=tuple(hosts + peers), ranks=tuple(ranks), gpus=(), evidence=evidence,
            explanation=(
                "The only anomaly in these logs is a TCP connection reset (or aborted) between ranks: no process "
                "exited by a signal, ran out of memory, raised another error or stopped answering, and no node or "
                "GPU fault is logged. A reset is what a dead peer's survivors see, so this is a hypothesis: the "
                "network path (switch, firewall/conntrack, an overlay network, a wrong interface) tore the "
                "connection down, unless the peer died where no log was collected."
            ),
            actions=(
                "Collect the peer's own log (the address in the reset line) and the job's exit records: if the peer died, that is the cause.",
                "Check the path between the two endpoints: NCCL_SOCKET_IFNAME (the interface NCCL picked), firewalls, conntrack/NAT timeouts, the CNI overlay, switch port counters.",
            ),
        )
    ]


def _no_deaths(ev: pl.DataFrame) -> bool:
    """No exit by a signal (or 128+signal), no root-cause entry with a signal, no job end
    state other than a plain FAILED."""
    kinds = [Kind.PROCESS_EXIT.value, Kind.ROOT_CAUSE_REPORT.value, Kind.JOB_STATE.value]
    for a in ev.filter(one_of("kind", kinds))["attrs"].drop_nulls().to_list()[:100_000]:
        d = attrs_of(a)
        if d.get("signal"):
            return False
        code = d.get("exitcode")
        try:
            if code is not None and int(code) in DEATH_CODES:
                return False
        except (TypeError, ValueError):
            pass
        state = d.get("state")
        if isinstance(state, str) and state.strip() and state.split()[0].upper() not in QUIET_STATES:
            return False
    return True

