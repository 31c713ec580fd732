"""Line formats, one function per real format the simulator writes.

Every function returns the exact text a real program prints (without the trailing
newline) and names, in its docstring, the upstream template it follows; the templates
are quoted from /work/shared/reference/*.md (nccl.md, pytorch.md, slurm.md,
kernel-and-xid.md, gpu-telemetry.md), which were written from the upstream sources.
Times are passed as timezone-aware ``datetime`` objects already in the zone (and with
the clock skew) of the host that prints them; the helpers never read a clock.
"""

from __future__ import annotations

import json
from datetime import datetime

# -- versions --------------------------------------------------------------------------------

def nccl_tuple(version: str) -> tuple[int, int, int]:
    a, b, c = version.split(".")[:3]
    return int(a), int(b), int(c)


def nccl_code(version: str) -> int:
    """NCCL_VERSION_CODE for >= 2.9: major*10000 + minor*100 + patch."""
    a, b, c = nccl_tuple(version)
    return a * 10000 + b * 100 + c


# -- NCCL (nccl.md §2, §5, §6) ---------------------------------------------------------------

def nccl_ts(version: str, dt: datetime) -> str:
    """NCCL >= 2.26 default NCCL_DEBUG_TIMESTAMP_FORMAT ``"[%F %T] "`` (WARN lines only, local time)."""
    if nccl_tuple(version) < (2, 26, 0):
        return ""
    return dt.strftime("[%Y-%m-%d %H:%M:%S] ")


def nccl_info(host: str, pid: int, tid: int, dev: int, msg: str) -> str:
    """nccl.md §2.1/2.2 INFO: ``{host}:{pid}:{tid} [{dev}] NCCL INFO {msg}`` (no timestamp by default)."""
    return f"{host}:{pid}:{tid} [{dev}] NCCL INFO {msg}"


def nccl_warn(version: str, dt: datetime, host: str, pid: int, tid: int, dev: int, src: str, msg: str, func: str = "") -> str:
    """nccl.md §2: WARN ``\\n{ts}{host}:{pid}:{tid} [{dev}] {file}:{line} NCCL WARN {msg}``.

    The caller writes the empty line that precedes every WARN. ``{ts}`` only for >= 2.26;
    ``({func}) `` only on master/2.30.7+.
    """
    fn = f"({func}) " if func and nccl_tuple(version) >= (2, 30, 7) else ""
    return f"{nccl_ts(version, dt)}{host}:{pid}:{tid} [{dev}] {src} {fn}NCCL WARN {msg}"


def nccl_version_banner(version: str, cuda: str) -> str:
    """nccl.md §5: ``NCCL version {M}.{m}.{p}+cuda{X}.{Y}`` (rank 0 only: ``if (myrank == 0) showVersion()``)."""
    return f"NCCL version {version}+cuda{cuda}"


def nccl_init_complete(version: str, comm: str, rank: int, nranks: int, dev: int, busid: str, commid: str) -> str:
    """nccl.md §5 Comm init done: 2.13-2.18 ``comm .. commId 0x.. - Init COMPLETE``; >= 2.19 prefixed by the function."""
    body = f"comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {busid} commId {commid} - Init COMPLETE"
    if nccl_tuple(version) >= (2, 19, 0):
        return f"ncclCommInitRank {body}"
    return body


def nccl_init_start(version: str, comm: str, rank: int, nranks: int, dev: int, busid: str, commid: str) -> str:
    """nccl.md §5 Comm init start: up to 2.18 ``comm ... - Init START``; 2.19+ prefixed by ``ncclCommInitRank``."""
    body = f"comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {busid} commId {commid} - Init START"
    if nccl_tuple(version) >= (2, 19, 0):
        return f"ncclCommInitRank {body}"
    return body


def nccl_ib_using(version: str, hca: str, ifname: str, ip: str, port: int) -> str:
    """nccl.md §5 Net transport: ``NET/IB : Using [0]mlx5_N:1/IB ; OOB {if}:{ip}<{port}>``."""
    return f"NET/IB : Using [0]{hca}:1/IB [RO]; OOB {ifname}:{ip}<{port}>"


def nccl_bootstrap(version: str, ifname: str, ip: str) -> str:
    """nccl.md §5 Bootstrap iface: old ``Bootstrap : Using {if}:{ip}<0>``, new ``Bootstrap: Using ...``."""
    sep = "Bootstrap: Using" if nccl_tuple(version) >= (2, 24, 0) else "Bootstrap : Using"
    return f"{sep} {ifname}:{ip}<0>"


def nccl_ib_completion_error(version: str, peer: str, status: int, verr: int, kind: str, lgid: str, rgid: str, hca: str) -> str:
    """nccl.md §6 IB completion WARN payload, per version family (<=2.20, 2.21-2.22, 2.23-2.30.4)."""
    v = nccl_tuple(version)
    if v <= (2, 20, 99):
        return (f"NET/IB : Got completion from peer {peer} with error {status}, opcode 0, len 0, vendor err {verr} ({kind})"
                f" localGid {lgid} remoteGid {rgid}")
    if v <= (2, 22, 99):
        return f"NET/IB : Got completion from peer {peer} with status={status} opcode=0 len=0 vendor err {verr} ({kind})"
    return (f"NET/IB: Got completion from peer {peer} with status={status} opcode=0 len=0 vendor err {verr} ({kind})"
            f" localGid {lgid} remoteGid {rgid} hca {hca}")


def nccl_ib_src(version: str) -> str:
    """``{file}:{line}`` of the IB completion WARN (compile-time __FILE__ relative to src/)."""
    v = nccl_tuple(version)
    if v <= (2, 18, 99):
        return "transport/net_ib.cc:1295"
    if v <= (2, 22, 99):
        return "transport/net_ib.cc:1696"
    return "transport/net_ib.cc:2352"


def nccl_propagate(src: str, code: int) -> str:
    """nccl.md §5 Error propagation (<= 2.29): ``{file}:{line} -> {code}``."""
    return f"{src} -> {code}"


def nccl_conn_closed(peer_host: str, port: int) -> str:
    """nccl.md §6 sockets: ``socketProgress: Connection closed by remote peer {host}<{port}>``."""
    return f"socketProgress: Connection closed by remote peer {peer_host}<{port}>"


def nccl_cuda_failure(err: str) -> str:
    """nccl.md §6 CUDA: ``Cuda failure '{cudaGetErrorString}'``."""
    return f"Cuda failure '{err}'"


def nccl_version_mismatch(r: int, v: int, r2: int, v2: int) -> str:
    """nccl.md §6 Misc: ``Mismatched NCCL version detected : rank {r} version {v} rank {r2} version {v2}``."""
    return f"Mismatched NCCL version detected : rank {r} version {v} rank {r2} version {v2}"


# -- PyTorch (pytorch.md §1, §2, §4) ---------------------------------------------------------

def c10_prefix(modern: bool, sev: str, dt: datetime, mono_ns: int, src: str, rank: int | None) -> str:
    """pytorch.md §1.1: ``[rank{R}]:[{S}{MMDD} {HH:MM:SS}.{nnnnnnnnn} {file}:{line}] `` (>= 2.3/2.4);
    ``[{S} {file}:{line}] `` (<= 2.2, no time). The fraction is CLOCK_MONOTONIC tv_nsec."""
    if not modern:
        return f"[{sev} {src}] "
    rp = f"[rank{rank}]:" if rank is not None else ""
    return f"{rp}[{sev}{dt.strftime('%m%d %H:%M:%S')}.{mono_ns % 1_000_000_000:09d} {src}] "


def pg_prefix(modern: bool, rank: int) -> str:
    """pytorch.md §2.1: ``[PG ID 0 PG GUID 0(default_pg) Rank {r}] `` (newer) / ``[Rank {r}] `` (older)."""
    return f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] " if modern else f"[Rank {rank}] "


def work_nccl(seq: int, op: str, numel: int, timeout_ms: int) -> str:
    """pytorch.md §2.2 (~1.13 -> main): ``WorkNCCL(SeqNum=.., OpType=.., NumelIn=.., NumelOut=.., Timeout(ms)=..)``."""
    return f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout_ms})"


def watchdog_timeout(modern: bool, rank: int, work: str, ran_ms: int) -> str:
    """pytorch.md §2.3: ``{prefix}Watchdog caught collective operation timeout: {WorkNCCL} ran for {ms} milliseconds before timing out.``"""
    return f"{pg_prefix(modern, rank)}Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out."


def watchdog_failure_detected(rank: int, seq: int, enq: int, done: int) -> str:
    """pytorch.md §2.3 (~2.3+): ``{pgprefix} failure detected by watchdog at work sequence id: ..`` (two spaces after ``]``)."""
    return (f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by watchdog at work sequence id: {seq}"
            f" PG status: last enqueued work: {enq}, last completed work: {done}")


def async_teardown(modern: bool, rank: int) -> list[str]:
    """pytorch.md §2.3: the two teardown messages before ``std::rethrow``."""
    p = pg_prefix(modern, rank)
    return [
        f"{p}Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{p}To avoid data inconsistency, we are taking the entire process down.",
    ]


def watchdog_terminated(modern: bool, rank: int, what: str) -> str:
    """pytorch.md §2.3: ``{pgprefix}Process group watchdog thread terminated with exception: {what}`` (newer) /
    ``[Rank {r}] NCCL watchdog thread terminated with exception: {what}`` (~2.0-2.2)."""
    if modern:
        return f"{pg_prefix(True, rank)}Process group watchdog thread terminated with exception: {what}"
    return f"[Rank {rank}] NCCL watchdog thread terminated with exception: {what}"


def terminate_called(modern: bool) -> str:
    """pytorch.md §2.3: ``terminate called after throwing an instance of 'c10::DistBackendError'`` (older: std::runtime_error)."""
    return "terminate called after throwing an instance of '" + ("c10::DistBackendError" if modern else "std::runtime_error") + "'"


NCCL_RESULT = {
    1: ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "ncclUnhandledCudaError: Call to CUDA function failed."),
    2: ("unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "),
    5: ("invalid usage (run with NCCL_DEBUG=WARN for details)", "ncclInvalidUsage: This usually reflects invalid usage of NCCL library."),
    6: ("remote process exited or there was a network error",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."),
}


def nccl_error_what(code: int, version: str, last: str) -> list[str]:
    """pytorch.md §2.3: ``NCCL error: {ncclGetErrorString}, NCCL version {M.m.p}\\n{ncclEnum}: {description}\\nLast error:\\n{last WARN}``."""
    s, d = NCCL_RESULT[code]
    return [f"NCCL error: {s}, NCCL version {version}", d, "Last error:", last]


def nccl_error_in(code: int, version: str, line: int, last: str) -> list[str]:
    """pytorch.md §2.3: ``NCCL error in: {path}/ProcessGroupNCCL.cpp:{line}, {string}, NCCL version ..\\n{enum}: ..\\nLast error:\\n..``."""
    s, d = NCCL_RESULT[code]
    return [f"NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{line}, {s}, NCCL version {version}",
            d, "Last error:", last]


CUDA_ERR_TAIL = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]


def cuda_oom_message(gib: float, dev: int, total: float, free: float, inuse: float, alloc: float, reserved: float) -> str:
    """torch.OutOfMemoryError text of the CUDA caching allocator (PyTorch >= 2.1)."""
    return (f"CUDA out of memory. Tried to allocate {gib:.2f} GiB. GPU {dev} has a total capacity of {total:.2f} GiB of which "
            f"{free:.2f} GiB is free. Including non-PyTorch memory, this process has {inuse:.2f} GiB memory in use. Of the "
            f"allocated memory {alloc:.2f} GiB is allocated by PyTorch, and {reserved:.2f} GiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


# -- torchrun agent (pytorch.md §4.1, §4.2, §4.3) --------------------------------------------

def agent_line(style: str, lvl: str, dt: datetime, pid: int, path: str, line: int, msg: str) -> str:
    """pytorch.md §4.1: >= 2.4 ``{L}{MMDD} {HH:MM:SS}.{uuuuuu} {pid} {path}:{line}] {msg}`` (ms*1000);
    2.1-2.3 ``[%(asctime)s] {logger}: [{LEVEL}] {msg}``; <= 2.0 ``{LEVEL}:{logger}:{msg}``."""
    if style == "glog":
        return f"{lvl}{dt.strftime('%m%d %H:%M:%S')}.{dt.microsecond // 1000:03d}000 {pid} {path}:{line}] {msg}"
    name = path[:-3].replace("/", ".")
    level = {"W": "WARNING", "E": "ERROR", "I": "INFO"}[lvl]
    if style == "logging":
        return f"[{dt.strftime('%Y-%m-%d %H:%M:%S')},{dt.microsecond // 1000:03d}] {name}: [{level}] {msg}"
    return f"{level}:{name}:{msg}"


def child_failed_block(script: str, failures: list[dict], root: dict) -> list[str]:
    """pytorch.md §4.2 ``_MSG_FORMAT_TEMPLATE`` / ``_FAILURE_FORMAT_TEMPLATE`` (border width 60)."""

    def fmt(idx: int, f: dict) -> list[str]:
        tb = f["traceback"].replace("\n", "\n  ")
        return [f"[{idx}]:", f"  time      : {f['time']}", f"  host      : {f['host']}",
                f"  rank      : {f['rank']} (local_rank: {f['local_rank']})",
                f"  exitcode  : {f['exitcode']} (pid: {f['pid']})", f"  error_file: {f['error_file']}",
                *f"  traceback : {tb}".split("\n")]

    out = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, f"{script} FAILED", "-" * 60, "Failures:"]
    if failures:
        for i, f in enumerate(failures, 1):
            out += fmt(i, f)
    else:
        out.append("  <NO_OTHER_FAILURES>")
    out += ["-" * 60, "Root Cause (first observed failure):", *fmt(0, root), "=" * 60]
    return out


def error_json(message: str, callstack: str, ts: int) -> str:
    """pytorch.md §4.3 error_file JSON written by ``@record``."""
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": callstack, "timestamp": str(ts)}}})


# -- Slurm (slurm.md §1, §2, §3) -------------------------------------------------------------

def slurm_ts(dt: datetime) -> str:
    """slurm.md §1.1 LogTimeFormat iso8601_ms (default): ``[2026-09-14T08:12:44.123]``."""
    return f"[{dt.strftime('%Y-%m-%dT%H:%M:%S')}.{dt.microsecond // 1000:03d}]"


def slurmctld_line(dt: datetime, msg: str) -> str:
    """slurm.md §1.1: ``[{timestamp}] {levelpfx}{message}``."""
    return f"{slurm_ts(dt)} {msg}"


def stepd_cancel(entity: str, node: str, dt: datetime, why: str | None) -> str:
    """slurm.md §2.1: ``slurmstepd: error: *** {entity} ON {node} CANCELLED AT {time}[ DUE TO {why}] ***`` (%FT%T node-local)."""
    tail = f" DUE TO {why}" if why else ""
    return f"slurmstepd: error: *** {entity} ON {node} CANCELLED AT {dt.strftime('%Y-%m-%dT%H:%M:%S')}{tail} ***"


def stepd_failed(entity: str, node: str) -> str:
    """slurm.md §2.1 (>= 20.11, --kill-on-bad-exit): ``*** {entity} ON {node} FAILED (non-zero exit code or other failure mode) ***``."""
    return f"slurmstepd: error: *** {entity} ON {node} FAILED (non-zero exit code or other failure mode) ***"


def stepd_oom(slurm_version: str, n: int, step: str) -> str:
    """slurm.md §2.1 OOM: >= 23.02 ``Detected {n} oom_kill event{s} in StepId=..``; older ``oom-kill event(s)``."""
    if tuple(int(x) for x in slurm_version.split(".")[:2]) >= (23, 2):
        return f"slurmstepd: error: Detected {n} oom_kill event{'s' if n != 1 else ''} in StepId={step}. Some of the step tasks have been OOM Killed."
    return (f"slurmstepd: error: Detected {n} oom-kill event(s) in StepId={step}. Some of your processes may have been killed "
            "by the cgroup out-of-memory handler.")


def srun_task_exit(host: str, tasks: str, plural: bool, what: str) -> str:
    """slurm.md §2.2: ``srun: error: {hostlist}: {task|tasks} {ranges}: {Exited with exit code n|strsignal|Out Of Memory}``."""
    return f"srun: error: {host}: {'tasks' if plural else 'task'} {tasks}: {what}"


def sacct_text_row(fields: list[str]) -> str:
    """slurm.md §3.1 ``sacct -P`` (``--parsable2``): ``|``-separated, no trailing delimiter."""
    return "|".join(fields)


# -- kernel (kernel-and-xid.md §1, §2, §3, §4, §5) --------------------------------------------

def kmsg_raw(mono: float, msg: str) -> str:
    """kernel-and-xid.md §1: dmesg raw ``[{sec:>5}.{usec:06}] {msg}``."""
    us = int(round(mono * 1e6))
    return f"[{us // 1_000_000:5d}.{us % 1_000_000:06d}] {msg}"


def kmsg_ctime(dt: datetime, msg: str) -> str:
    """kernel-and-xid.md §1: ``dmesg -T`` ``[Mon Sep 14 08:12:44 2026] {msg}`` (ctime, day space-padded)."""
    return f"[{dt.strftime('%a %b')} {dt.day:2d} {dt.strftime('%H:%M:%S %Y')}] {msg}"


def kmsg_short_precise(dt: datetime, host: str, msg: str) -> str:
    """kernel-and-xid.md §1: ``journalctl -o short-precise`` ``Sep 14 08:12:44.456789 node001 kernel: {msg}``."""
    return f"{dt.strftime('%b %d %H:%M:%S')}.{dt.microsecond:06d} {host} kernel: {msg}"


def kmsg_short_iso(dt: datetime, host: str, msg: str, colon: bool = True) -> str:
    """kernel-and-xid.md §1: ``journalctl -o short-iso`` ``2026-09-14T08:12:44+00:00 node001 kernel: {msg}`` (older ``+0000``)."""
    z = dt.strftime("%z")
    if colon:
        z = z[:3] + ":" + z[3:]
    return f"{dt.strftime('%Y-%m-%dT%H:%M:%S')}{z} {host} kernel: {msg}"


def kmsg_json(real_us: int, mono_us: int, src_mono_us: int, boot_id: str, host: str, prio: int, msg: str) -> str:
    """kernel-and-xid.md §1: ``journalctl -o json`` object with __REALTIME_TIMESTAMP, _SOURCE_MONOTONIC_TIMESTAMP, ...."""
    return json.dumps({
        "__REALTIME_TIMESTAMP": str(real_us), "__MONOTONIC_TIMESTAMP": str(mono_us), "_BOOT_ID": boot_id,
        "_TRANSPORT": "kernel", "PRIORITY": str(prio), "SYSLOG_FACILITY": "0", "SYSLOG_IDENTIFIER": "kernel",
        "_HOSTNAME": host, "_SOURCE_MONOTONIC_TIMESTAMP": str(src_mono_us), "MESSAGE": msg,
    }, separators=(", ", " : "))


def nvrm_loading(driver: str) -> str:
    """kernel-and-xid.md §2.1: ``NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {ver}  {date}`` (two spaces)."""
    return f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Thu Dec 28 15:37:48 UTC 2023"


def nvrm_gpu_uuid(pci4: str, uuid: str) -> str:
    """kernel-and-xid.md §2.1: ``NVRM: GPU at PCI:0000:2b:00: GPU-{uuid}`` printed once before a GPU's first Xid."""
    return f"NVRM: GPU at PCI:{pci4}: {uuid}"


def xid_line(pci4: str, xid: int, pid: int | None, name: str | None, msg: str) -> str:
    """kernel-and-xid.md §2.2: ``NVRM: Xid (PCI:{dom}:{bus}:{dev}): {xid}, pid={pid}, name={name}, {message}``."""
    p = "pid='<unknown>', name=<unknown>" if pid is None else f"pid={pid}, name={name}"
    return f"NVRM: Xid (PCI:{pci4}): {xid}, {p}, {msg}"


XID_MESSAGES = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    74: "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    119: "Timeout after 6s of waiting for RPC response from GPU{n} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
    63: "Row Remapper: New row (0x00000000000f3a21) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000000000f3a21), reset gpu to activate.",
    45: "Ch 00000010",
}


def mlx5_port_module_error(nic_pci: str, module: int, err: str) -> str:
    """kernel-and-xid.md §3: ``mlx5_core {bdf}: Port module event[error]: module {n}, Cable error, {error}``."""
    return f"mlx5_core {nic_pci}: Port module event[error]: module {module}, Cable error, {err}"


def mlx5_link_down(nic_pci: str, ifname: str) -> str:
    """kernel-and-xid.md §3: ``mlx5_core {bdf} {ifname}: Link down``."""
    return f"mlx5_core {nic_pci} {ifname}: Link down"


def nfs_not_responding(server: str) -> str:
    """kernel-and-xid.md §4: ``nfs: server {server} not responding, still trying``."""
    return f"nfs: server {server} not responding, still trying"


def nfs_ok(server: str) -> str:
    """kernel-and-xid.md §4: ``nfs: server {server} OK``."""
    return f"nfs: server {server} OK"


def hung_task_block(comm: str, pid: int, ppid: int, secs: int, release: str) -> list[str]:
    """kernel-and-xid.md §4 hung task (kernel/hung_task.c) with an NFS/sunrpc call trace."""
    return [
        f"INFO: task {comm}:{pid} blocked for more than {secs} seconds.",
        f"      Tainted: P           OE     {release} #101-Ubuntu",
        '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
        f"task:{comm:<15} state:D stack:0     pid:{pid} ppid:{ppid} flags:0x00004002",
        "Call Trace:",
        " <TASK>",
        " __schedule+0x2cd/0x890",
        " schedule+0x69/0x110",
        " rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]",
        " __wait_on_bit+0x7e/0x100",
        " out_of_line_wait_on_bit+0x94/0xb0",
        " __rpc_execute+0x16d/0x4a0 [sunrpc]",
        " rpc_execute+0x60/0xd0 [sunrpc]",
        " rpc_run_task+0x159/0x1b0 [sunrpc]",
        " nfs4_call_sync_custom+0x11/0x30 [nfsv4]",
        " nfs4_proc_getattr+0xa6/0x130 [nfsv4]",
        " __nfs_revalidate_inode+0xc1/0x2e0 [nfs]",
        " nfs_file_write+0x170/0x2a0 [nfs]",
        " vfs_write+0x1f1/0x2d0",
        " ksys_write+0x67/0xf0",
        " do_syscall_64+0x59/0xc0",
        " entry_SYSCALL_64_after_hwframe+0x61/0xcb",
        " </TASK>",
    ]


def oom_killer_block(pid: int, uid: int, job: str, task: int) -> list[str]:
    """kernel-and-xid.md §5 OOM killer, Slurm cgroup path ``/slurm/uid_U/job_J/step_0/user/task_T``."""
    return [
        "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_0,mems_allowed=0-1,oom_memcg=/slurm/uid_{uid}/job_{job},"
        f"task_memcg=/slurm/uid_{uid}/job_{job}/step_0/user/task_{task},task=python3,pid={pid},uid={uid}",
        f"Memory cgroup out of memory: Killed process {pid} (python3) total-vm:61234560kB, anon-rss:50123456kB, "
        f"file-rss:81234kB, shmem-rss:0kB, UID:{uid} pgtables:101234kB oom_score_adj:0",
    ]


# -- GPU telemetry (gpu-telemetry.md §1, §2) -------------------------------------------------

GPU_CSV_FIELDS = ("timestamp, index, pci.bus_id, temperature.gpu, power.draw [W], clocks.sm [MHz], utilization.gpu [%], "
                  "memory.used [MiB], clocks_event_reasons.active, clocks_event_reasons.hw_slowdown, "
                  "clocks_event_reasons.hw_thermal_slowdown, ecc.errors.uncorrected.volatile.total")


def gpu_csv_row(dt: datetime, idx: int, pci8: str, temp: int, power: float, sm: int, util: int, mem: int, mask: int, ecc: int) -> str:
    """gpu-telemetry.md §2 ``--query-gpu=... --format=csv``: ``2026/09/14 08:12:44.123, 0, 00000000:18:00.0, 61, 512.37 W, ...``."""
    hw = "Active" if mask & 0x8 else "Not Active"
    th = "Active" if mask & 0x40 else "Not Active"
    return (f"{dt.strftime('%Y/%m/%d %H:%M:%S')}.{dt.microsecond // 1000:03d}, {idx}, {pci8}, {temp}, {power:.2f} W, {sm} MHz, "
            f"{util} %, {mem} MiB, 0x{mask:016x}, {hw}, {th}, {ecc}")


def smi_q(dt: datetime, driver: str, cuda: str, gpus: list[dict]) -> str:
    """gpu-telemetry.md §1: ``nvidia-smi -q`` report (header, per-GPU PERFORMANCE / ECC / Remapped Rows sections)."""
    kv = lambda ind, k, v: f"{' ' * ind}{k:<{42 - ind}}: {v}"  # noqa: E731
    out = ["", "==============NVSMI LOG==============", "",
           kv(0, "Timestamp", f"{dt.strftime('%a %b')} {dt.day:2d} {dt.strftime('%H:%M:%S %Y')}"),
           kv(0, "Driver Version", driver), kv(0, "CUDA Version", cuda), "", kv(0, "Attached GPUs", str(len(gpus)))]
    for g in gpus:
        act = lambda bit: "Active" if g["mask"] & bit else "Not Active"  # noqa: E731, B023 - used inside this iteration
        out += [f"GPU {g['pci8']}", kv(4, "Product Name", "NVIDIA H100 80GB HBM3"), kv(4, "GPU UUID", g["uuid"]),
                kv(4, "Minor Number", str(g["index"])), kv(4, "Performance State", "P0"),
                "    Clocks Event Reasons",
                kv(8, "Idle", act(0x1)), kv(8, "Applications Clocks Setting", act(0x2)), kv(8, "SW Power Cap", act(0x4)),
                kv(8, "HW Slowdown", act(0x8)), kv(12, "HW Thermal Slowdown", act(0x40)),
                kv(12, "HW Power Brake Slowdown", act(0x80)), kv(8, "Sync Boost", act(0x10)),
                kv(8, "SW Thermal Slowdown", act(0x20)), kv(8, "Display Clock Setting", act(0x100)),
                "    ECC Mode", kv(8, "Current", "Enabled"), kv(8, "Pending", "Enabled"),
                "    ECC Errors", "        Volatile",
                kv(12, "SRAM Correctable", "0"), kv(12, "SRAM Uncorrectable Parity", "0"), kv(12, "SRAM Uncorrectable SEC-DED", "0"),
                kv(12, "DRAM Correctable", str(g["dram_ce"])), kv(12, "DRAM Uncorrectable", str(g["dram_ue"])),
                "        Aggregate",
                kv(12, "SRAM Correctable", "0"), kv(12, "SRAM Uncorrectable Parity", "0"), kv(12, "SRAM Uncorrectable SEC-DED", "0"),
                kv(12, "DRAM Correctable", str(g["dram_ce"] + 17)), kv(12, "DRAM Uncorrectable", str(g["dram_ue"])),
                kv(12, "SRAM Threshold Exceeded", "No"),
                "    Remapped Rows", kv(8, "Correctable Error", "0"), kv(8, "Uncorrectable Error", str(g["remap_ue"])),
                kv(8, "Pending", "Yes" if g["remap_pending"] else "No"), kv(8, "Remapping Failure Occurred", "Yes" if g["remap_fail"] else "No"),
                "    Temperature", kv(8, "GPU Current Temp", f"{g['temp']} C"),
                "    Clocks", kv(8, "SM", f"{g['sm']} MHz"), ""]
    return "\n".join(out) + "\n"


# -- per-node version files (gpu-telemetry.md §4) --------------------------------------------

def proc_driver_version(driver: str) -> str:
    """gpu-telemetry.md §4: ``/proc/driver/nvidia/version`` ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  {date}``."""
    return (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Thu Dec 28 15:37:48 UTC 2023\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def ofed_info_s(ofed: str) -> str:
    """kernel-and-xid.md §3 / gpu-telemetry.md §4: ``ofed_info -s`` -> ``MLNX_OFED_LINUX-23.10-1.1.9.0:``."""
    return f"MLNX_OFED_LINUX-{ofed}:\n"


def proc_stat(btime: int, rnd_cpu: list[int]) -> str:
    """/proc/stat (proc(5)): cpu lines, ``btime {epoch}`` = boot time in seconds since the epoch."""
    cpu = " ".join(str(x) for x in rnd_cpu)
    return (f"cpu  {cpu}\ncpu0 {cpu}\nintr 912345678 0 9 0 0 0 0 0 0 0 0\nctxt 1234567890\nbtime {btime}\n"
            "processes 4123456\nprocs_running 3\nprocs_blocked 0\nsoftirq 98765432 0 1234 56 7890 0 0 12 345 0 678\n")


def timedatectl(dt_local: datetime, dt_utc: datetime, zone: str) -> str:
    """systemd ``timedatectl status`` output (Local time / Universal time / RTC time / Time zone (ABBR, +hhmm) / ...)."""
    return (f"               Local time: {dt_local.strftime('%a %Y-%m-%d %H:%M:%S %Z')}\n"
            f"           Universal time: {dt_utc.strftime('%a %Y-%m-%d %H:%M:%S')} UTC\n"
            f"                 RTC time: {dt_utc.strftime('%a %Y-%m-%d %H:%M:%S')}\n"
            f"                Time zone: {zone} ({dt_local.strftime('%Z')}, {dt_local.strftime('%z')})\n"
            "System clock synchronized: yes\n"
            "              NTP service: active\n"
            "          RTC in local TZ: no\n")


def megatron_iteration(dt: datetime, it: int, total: int, samples: int, ms: float, lr: float, gbs: int, loss: float, gnorm: float) -> str:
    """Megatron-LM ``training_log`` line: `` [YYYY-MM-DD HH:MM:SS] iteration  N/ T | consumed samples: ... |``."""
    return (f" [{dt.strftime('%Y-%m-%d %H:%M:%S')}] iteration {it:8d}/{total:8d} | consumed samples: {samples:12d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | learning rate: {lr:.6E} | global batch size: {gbs:5d} | "
            f"lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gnorm:.3f} | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |")


# -- dump on timeout (ProcessGroupNCCL, torch >= 2.4) and Flight Recorder dumps -------------------

_DUMP_TAIL = ("This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order "
              "of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, "
              "this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications "
              "library (e.g. NCCL), etc. ")


def first_pg_to_signal(rank: int) -> str:
    """The watchdog that fired writes its rank into the store's dump key (``broadcastDumpSignal``)."""
    return f"{pg_prefix(True, rank)}First PG on this rank to signal dumping."


def observed_dump_signal(rank: int) -> str:
    """A peer's heartbeat monitor polling the store finds the dump key set."""
    return f"{pg_prefix(True, rank)}Observed flight recorder dump signal from another rank via TCPStore."


def dump_signal(rank: int, origin: int | None, enq: int, done: int) -> str:
    """``getNCCLWatchdogTimeoutErrorMsg``: ``from this local rank`` when the rank's own watchdog fired,
    ``from  rank N`` (``"from " + " rank N"``) when a peer's signal was read from the store."""
    frm = "this local rank" if origin is None else f" rank {origin}"
    return (f"{pg_prefix(True, rank)}Received a dump signal due to a collective timeout from {frm} and we will try our best "
            f"to dump the debug info. Last enqueued NCCL work: {enq}, last completed NCCL work: {done}.{_DUMP_TAIL}")


def fr_dump_json(version: str, ranks: int, entries: list[dict], enq: int, started: int, done: int) -> str:
    """A Flight Recorder JSON dump as ``_dump_nccl_trace_json`` writes it (nlohmann: keys sorted, the
    ``pg_status`` numbers as strings, 0 for a discovery time never seen, no frames)."""
    obj = {
        "version": version, "comm_lib_version": "", "nccl_comm_state": {},
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[" + ", ".join(map(str, range(ranks))) + "]"}},
        "pg_status": {"0": {"last_enqueued_collective": str(enq), "last_started_collective": str(started),
                            "last_completed_collective": str(done)}},
        "entries": entries,
    }
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def fr_entry(record_id: int, seq: int, op: str, numel: int, t_ns: int, state: str, started_ns: int, completed_ns: int,
             timeout_ms: int, tid: int) -> dict:
    return {
        "record_id": record_id, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq, "p2p_seq_id": 0,
        "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": t_ns, "input_sizes": [[numel]], "input_dtypes": ["BFloat16"],
        "output_sizes": [[numel]], "output_dtypes": ["BFloat16"], "state": state, "time_discovered_started_ns": started_ns,
        "time_discovered_completed_ns": completed_ns, "retired": state == "completed", "timeout_ms": timeout_ms,
        "is_p2p": False, "thread_id": str(tid), "thread_name": "pt_main_thread",
    }
