"""Nsight Systems traces: ``nsys export --type sqlite`` files and ``nsys stats`` CSV reports.

A trace says what text logs cannot: which rank computed slowly while the others sat in
NCCL kernels waiting for it, and which rank's last collective never finished.

**SQLite export** (``nsys export --type sqlite -o rank3.sqlite rank3.nsys-rep``; read from
the real Nsight Systems 2024.5.1 / schema 3.13.2 export and NVIDIA's "SQLite Export Schema
Reference"; ``shared/reference/nsys.md``). The file starts with ``SQLite format 3\\0`` and
its first page names the tables (``StringIds``, ``TARGET_INFO_SESSION_START_TIME``, ...).
It is opened from its bytes in memory (``sqlite3.connect(':memory:')`` + ``deserialize``,
``PRAGMA query_only``): nothing is written next to the logs. Tables are created lazily by
nsys, so every table and column is checked before it is queried. The tables read:

* ``TARGET_INFO_SESSION_START_TIME(utcEpochNs, ...)``: every ``start``/``end`` is ns on
  the session timeline, so ``wall_ns = utcEpochNs + start`` (exact UTC).
* ``CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, globalPid, correlationId, shortName,
  demangledName)``; names are ids into ``StringIds(id, value)``.
* ``CUPTI_ACTIVITY_KIND_RUNTIME(start, globalTid, correlationId, nameId)``: the launch of
  each kernel (joined on ``correlationId`` within one process: ``globalPid =
  globalTid & ~0xFFFFFF``); a ``*LaunchKernel*`` call with no kernel row after the last
  kernel of its process is a kernel that never completed.
* ``NVTX_EVENTS(start, end, eventType, text, textId, globalTid, domainId)``: push/pop (59)
  and start/end (60) ranges, name ``COALESCE(text, StringIds(textId))``. Ranges named like
  a training step (``ProfilerStep#12``, ``step 12``, ``iteration 12``, ``train_step``)
  delimit steps; NCCL's own ranges (domain ``NCCL``, named after the call: ``ncclAllReduce``,
  NVIDIA/nccl ``src/include/nvtx.h``) name the collective of a launch.
* GPU identity: ``TARGET_INFO_CUDA_DEVICE(gpuId, cudaId, pid)`` -> ``TARGET_INFO_GPU(id,
  busLocation, uuid, name, cuDevice)``; where the first is absent (the 2024.5 export) the
  kernel's ``deviceId`` is matched to ``TARGET_INFO_GPU.cuDevice``.
* Host: ``TARGET_INFO_SYSTEM_ENV`` row ``Hostname`` (the profiled machine), else
  ``META_DATA_CAPTURE`` ``DEVICE_DISPLAY_NAME``; ``META_DATA_EXPORT`` gives
  ``EXPORT_PRODUCT_VERSION`` / ``EXPORT_SCHEMA_VERSION`` (``EXPORT_HOST`` is where the export
  ran, often a login node: recorded, never used as the host).
* Rank: the file name (``rank12_node002_4567.sqlite`` from ``-o rank%q{SLURM_PROCID}_%h_%p``),
  else ``RANK`` / ``SLURM_PROCID`` / ``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK`` in the captured
  process environment (``META_DATA_CAPTURE`` ``PROCESS_n:ENVIRONMENT_VARIABLE``, then
  ``TARGET_INFO_SYSTEM_ENV`` ``DeviceEnvironment``), when the file holds one process.
* Capture end: ``ANALYSIS_DETAILS.duration`` (the session timeline runs 0..duration).

NCCL kernel names (NVIDIA/nccl): NCCL <= 2.18 ``ncclKernel_{Coll}_{ALGO}_{PROTO}_{RedOp}_{type}``
(``src/include/collectives.h`` ``NCCL_KERN_NAME``, e.g. ``ncclKernel_AllReduce_RING_LL_Sum_float``);
NCCL >= 2.19 ``ncclDevKernel_{Coll}[_{RedOp}_{ty}][_{ALGO}_{PROTO}]`` (``src/device/generate.py``:
``paste("_", "ncclDevKernel", coll, redop, ty, algo, proto)``, e.g.
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``ncclDevKernel_AllGather_RING_LL``,
``ncclDevKernel_SendRecv``, ``ncclDevKernel_Generic``); symmetric-memory kernels
``ncclSymkDevKernel_{Coll}_{algo}[_{red}_{ty}]`` (``src/device/symmetric/generate.py``). The
ALGO/PROTO of a specialised entry kernel is what it was specialised for, not necessarily
what ran (``generate.py`` ``best_kernel``).

**``nsys stats`` CSV** (``nsys stats -r cuda_gpu_kern_sum,nvtx_sum,cuda_gpu_trace -f csv -o
rank3``; headers in ``shared/reference/nsys.md`` §6, parsed by column name, units from the
header ``(ns)``/``(us)``/``(ms)``/``(s)``; the informational lines nsys prints around the
CSV on stdout are skipped)::

    Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
    61.4,912345678901,20480,44548128.4,1023456.0,20112,600012345678,4712345678.1,ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgs4K)

Times in these reports are session-relative without the epoch: their events have no time.

Events (one trace can hold several processes and GPUs: one set per process and GPU; a
large trace gives a handful of events, never one per kernel):

* gpu_inventory: attrs {pci, uuid, name, index (CUDA ordinal)}.
* trace_summary (info): attrs {kernels, compute_ms, nccl_ms, nccl_kernels, ops {op: {count,
  total_ms, max_ms, algo, proto, dtype}}, steps, step_compute_ms_median, step_nccl_ms_median,
  step_ms_median, window_s, capture_end, pid, process, device, nsys_version, schema_version,
  report (for CSV: the report name)}; time = the first kernel's start.
* collective_trace: the last NCCL collective of the process on that GPU: attrs {op, algo,
  proto, dtype, redop, kernel, seq (its ordinal among that GPU's NCCL kernels), start, end,
  duration_ms, ended (bool), state (completed | running_at_capture_end | launched_not_completed)};
  warning when it did not end.
"""

from __future__ import annotations

import csv
import sqlite3
import statistics
from bisect import bisect_right
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import regex

from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import FileSource, ParseContext, decode, normalize_pci, plausible_ns
from crashscope.sources.base import lazy_compile

SQLITE_MAGIC = "SQLite format 3\x00"
# Names only an nsys export puts into its first page (sqlite_master's root).
_NSYS_TABLES = ("TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_", "TARGET_INFO_SYSTEM_ENV", "NVTX_EVENTS",
                "ANALYSIS_DETAILS", "META_DATA_EXPORT", "TARGET_INFO_GPU", "ENUM_NSYS_")

# -- NCCL kernel names ------------------------------------------------------------------------
NCCL_PREFIXES = ("ncclDevKernel_", "ncclKernel_", "ncclSymkDevKernel_")
REDOPS = ("Sum", "Prod", "MinMax", "Min", "Max", "PreMulSum", "SumPostDiv", "Avg")
PROTOS = ("LL", "LL128", "SIMPLE")
_OLD_TYPES = {"int8_t": "i8", "uint8_t": "u8", "int32_t": "i32", "uint32_t": "u32", "int64_t": "i64",
              "uint64_t": "u64", "half": "f16", "float": "f32", "double": "f64", "__nv_bfloat16": "bf16",
              "__nv_fp8_e4m3": "f8e4m3", "__nv_fp8_e5m2": "f8e5m2", "char": "i8"}
_NEW_TYPES = ("i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2")
_OLD_KERNEL = lazy_compile(r"^ncclKernel_(?P<op>[A-Za-z]+)_(?P<algo>[A-Z][A-Z_]*?)_(?P<proto>LL128|LL|SIMPLE)_(?P<redop>[A-Za-z]+)_(?P<ty>\w+)$")


def parse_nccl_kernel(name: str) -> dict[str, Any] | None:
    """``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` -> {op, redop, dtype, algo, proto}; None for
    a kernel that is not NCCL's. The demangled form's ``(ncclDevKernelArgs4K)`` is ignored."""
    base = name.strip()
    if base.startswith("void "):
        base = base[5:]
    base = base.split("(", 1)[0].split("<", 1)[0].strip()
    if not base.startswith(NCCL_PREFIXES):
        return None
    out: dict[str, Any] = {"kernel": base}
    if base.startswith("ncclKernel_"):
        m = _OLD_KERNEL.match(base)
        if m:
            out.update(op=m.group("op"), algo=m.group("algo"), proto=m.group("proto"), redop=m.group("redop"),
                       dtype=_OLD_TYPES.get(m.group("ty"), m.group("ty")))
        else:
            out["op"] = base.split("_")[1] if base.count("_") >= 1 else None
        return out
    symmetric = base.startswith("ncclSymkDevKernel_")
    parts = base.split("_")[1:]
    if not parts or not parts[0]:
        return out
    out["op"] = parts[0]
    rest = parts[1:]
    if symmetric:
        # {Coll}_{algo}[_{red}_{ty}]
        if len(rest) >= 2 and rest[-1] in _NEW_TYPES and rest[-2] in REDOPS:
            out.update(redop=rest[-2], dtype=rest[-1])
            rest = rest[:-2]
        if rest:
            out["algo"] = "_".join(rest)
        return out
    if len(rest) >= 2 and rest[0] in REDOPS and rest[1] in _NEW_TYPES:
        out.update(redop=rest[0], dtype=rest[1])
        rest = rest[2:]
    if rest and rest[-1] in PROTOS:
        out["proto"] = rest[-1]
        rest = rest[:-1]
    if rest:
        out["algo"] = "_".join(rest)
    return out


# Ranges that delimit training steps (PyTorch's profiler, hand-made nvtx.range_push names).
_STEP_RANGE = lazy_compile(r"^(?:ProfilerStep#\d+|(?i:(?:train(?:ing)?[ _-]?)?(?:step|iter(?:ation)?))(?:[\s_#:=-]*\d+)?)\s*$")
_RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_LOCAL_RANK_ENV = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_ENV_PAIR = lazy_compile(r'^\s*(?P<k>[A-Za-z_][A-Za-z0-9_]*)="?(?P<v>[^"]*)"?\s*$')
PID_MASK = ~0xFFFFFF  # globalPid = globalTid & ~0xFFFFFF (upper bits hold hardware/VM ids)
MAX_STEPS_KEPT = 64  # per-step compute times kept in the summary (the last ones)
CAPTURE_END_SLACK_NS = 1_000_000  # a kernel ending this close to the capture's end was cut by it


class NsysSource(FileSource):
    name = "nsys"
    description = "Nsight Systems traces: nsys export --type sqlite files and nsys stats CSV reports"
    filename_hints = ("*.sqlite", "*nsys*", "*_cuda_gpu_kern_sum*.csv", "*_nvtx_sum*.csv", "*_cuda_gpu_trace*.csv",
                      "*gpukernsum*.csv", "*gputrace*.csv", "*nvtxsum*.csv")
    # Exports of long multi-GPU captures reach gigabytes; the whole file is deserialized in
    # memory (twice briefly: the bytes and SQLite's copy), so larger files are skipped.
    max_bytes = 1024 * 1024 * 1024
    reads_binary = True  # SQLite files: the ingest must not call them text with binary parts

    def sniff(self, head: str, name: str) -> float:
        if head.startswith(SQLITE_MAGIC):
            # Table names sit in the head only while sqlite_master fits its first pages; no
            # other source reads SQLite, and the parse checks the tables before reading.
            return 0.95 if any(t in head for t in _NSYS_TABLES) else 0.6
        hdr = _find_csv_header(head.splitlines()[:40])
        return 0.9 if hdr is not None else 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        if data.startswith(SQLITE_MAGIC.encode("latin-1")):
            _parse_sqlite(data, ctx)
        else:
            _parse_stats_csv(data, ctx)


# -- SQLite -----------------------------------------------------------------------------------------

def _open(data: bytes) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    con.execute("PRAGMA query_only = ON")
    return con


def _tables(con: sqlite3.Connection) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if isinstance(t, str) and regex.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t):
            out[t] = {r[1] for r in con.execute(f"PRAGMA table_info({t})").fetchall()}
    return out


def _parse_sqlite(data: bytes, ctx: ParseContext) -> None:
    try:
        con = _open(data)
    except (sqlite3.Error, OverflowError, MemoryError) as exc:
        ctx.warn(f"not a readable SQLite file ({type(exc).__name__}: {exc})")
        return
    try:
        _read_export(con, ctx)
    except sqlite3.DatabaseError as exc:
        ctx.warn(f"nsys export not fully readable ({exc}); a cut or damaged file?")
    finally:
        con.close()


def _kv(con: sqlite3.Connection, tables: dict[str, set[str]], table: str) -> list[tuple[str, str]]:
    if table not in tables or not {"name", "value"} <= tables[table]:
        return []
    return [(str(n), str(v)) for n, v in con.execute(f"SELECT name, value FROM {table}").fetchall() if n is not None and v is not None]


def _env_rank(pairs: list[tuple[str, str]], keys: tuple[str, ...]) -> int | None:
    env: dict[str, str] = {}
    for k, v in pairs:
        if k.endswith(":ENVIRONMENT_VARIABLE"):
            m = _ENV_PAIR.match(v)
            if m:
                env.setdefault(m.group("k"), m.group("v"))
        elif k == "DeviceEnvironment":
            for item in v.split(";"):
                if "=" in item:
                    a, b = item.split("=", 1)
                    env.setdefault(a.strip(), b.strip())
    for key in keys:
        val = env.get(key)
        if val is not None and val.isdigit():
            return int(val)
    return None


def _read_export(con: sqlite3.Connection, ctx: ParseContext) -> None:
    tables = _tables(con)
    if not {"StringIds", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_KERNEL", "META_DATA_EXPORT"} & set(tables):
        ctx.warn("SQLite database that is not an nsys export (none of its tables); skipped")
        return
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        ctx.warn("nsys export without CUDA kernels (CUPTI_ACTIVITY_KIND_KERNEL absent: not traced with -t cuda)")
    meta = dict(_kv(con, tables, "META_DATA_EXPORT"))
    capture = _kv(con, tables, "META_DATA_CAPTURE")
    sysenv = [(n, v) for n, v in (con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall()
                                  if {"name", "value"} <= tables.get("TARGET_INFO_SYSTEM_ENV", set()) else [])
              if n is not None and v is not None]
    host = next((str(v) for n, v in sysenv if n == "Hostname" and v), None) or next(
        (v for n, v in capture if n == "DEVICE_DISPLAY_NAME" and v), None)
    epoch = None
    if "utcEpochNs" in tables.get("TARGET_INFO_SESSION_START_TIME", set()):
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row and isinstance(row[0], int) and plausible_ns(row[0]):
            epoch = row[0]
    if epoch is None:
        ctx.warn("nsys export without TARGET_INFO_SESSION_START_TIME.utcEpochNs: trace events have no wall time")
    capture_end = None
    if "duration" in tables.get("ANALYSIS_DETAILS", set()):
        row = con.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()
        capture_end = row[0] if row and isinstance(row[0], int) else None

    def wall(t: int | None) -> int | None:
        return None if t is None or epoch is None else epoch + int(t)

    common = {"nsys_version": meta.get("EXPORT_PRODUCT_VERSION"), "schema_version": meta.get("EXPORT_SCHEMA_VERSION")}
    if meta.get("EXPORT_HOST"):
        common["export_host"] = meta["EXPORT_HOST"]
    common = {k: v for k, v in common.items() if v}

    gpus = _gpus(con, tables)
    kernels = _kernels(con, tables)
    if not kernels:
        return
    names = _strings(con, tables, {k[5] for k in kernels})
    procs = {}
    if {"globalPid", "pid", "name"} <= tables.get("PROCESSES", set()):
        procs = {gp: (pid, nm) for gp, pid, nm in con.execute("SELECT globalPid, pid, name FROM PROCESSES").fetchall()}
    by_proc: dict[tuple[int, int], list[tuple]] = defaultdict(list)
    for k in kernels:
        by_proc[(k[3] or 0, k[2])].append(k)
    single_process = len({gp for gp, _ in by_proc}) == 1
    env_rank = _env_rank(capture + [(n, v) for n, v in sysenv if n == "DeviceEnvironment"], _RANK_ENV) if single_process else None
    env_local = _env_rank(capture + [(n, v) for n, v in sysenv if n == "DeviceEnvironment"], _LOCAL_RANK_ENV) if single_process else None
    steps = _step_ranges(con, tables)
    pending = _pending_nccl_launches(con, tables, kernels)
    seen_gpu: set[str] = set()

    for (gpid, dev), rows in sorted(by_proc.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        pid = procs.get(gpid, (None, None))[0] or ((gpid >> 24) & 0xFFFFFF) or None
        pname = procs.get(gpid, (None, None))[1]
        gpu = _gpu_for(gpus, dev, pid)
        pci = gpu.get("pci") if gpu else None
        rank = ctx.file.rank_hint if ctx.file.rank_hint is not None else env_rank
        local = env_local if env_local is not None else (dev if not single_process else None)
        ident: dict[str, Any] = dict(host=host, rank=rank, local_rank=local, gpu=pci, gpu_index=dev, pid=pid)
        if gpu and (pci or gpu.get("uuid")) and (pci or str(dev)) not in seen_gpu:
            seen_gpu.add(pci or str(dev))
            attrs = {k: v for k, v in (("pci", pci), ("uuid", gpu.get("uuid")), ("name", gpu.get("name")), ("index", dev)) if v is not None}
            ctx.emit(Kind.GPU_INVENTORY, None, f"GPU {dev} {pci or ''} {gpu.get('name') or ''}".strip(), time=wall(rows[0][0]),
                     time_quality=TimeQuality.EXACT if epoch else None, attrs=attrs, **ident)
        _emit_process(ctx, rows, names, steps.get(gpid, []), pending.get(gpid, []), capture_end, wall, epoch, ident,
                      {**common, "pid": pid, "process": pname, "device": dev})


def _gpus(con: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[str, Any]:
    cols = tables.get("TARGET_INFO_GPU", set())
    by_id: dict[int, dict[str, Any]] = {}
    if {"id", "busLocation"} <= cols:
        sel = [c for c in ("id", "busLocation", "uuid", "name", "cuDevice") if c in cols]
        for row in con.execute(f"SELECT {', '.join(sel)} FROM TARGET_INFO_GPU").fetchall():
            r = dict(zip(sel, row))
            pci = normalize_pci(str(r.get("busLocation") or "")) if r.get("busLocation") else None
            uuid = r.get("uuid")
            if uuid and not str(uuid).startswith("GPU-"):
                uuid = f"GPU-{uuid}"  # nvidia-smi and NVML spell it with the prefix
            by_id[int(r["id"])] = {"pci": pci, "uuid": uuid, "name": r.get("name"), "cuDevice": r.get("cuDevice")}
    mapping: dict[tuple[int | None, int], int] = {}
    cd = tables.get("TARGET_INFO_CUDA_DEVICE", set())
    if {"gpuId", "cudaId"} <= cd:
        pidcol = "pid" if "pid" in cd else "NULL"
        for gid, cid, pid in con.execute(f"SELECT gpuId, cudaId, {pidcol} FROM TARGET_INFO_CUDA_DEVICE").fetchall():
            if gid is not None and cid is not None:
                mapping[(pid, int(cid))] = int(gid)
                mapping.setdefault((None, int(cid)), int(gid))
    return {"by_id": by_id, "cuda": mapping}


def _gpu_for(gpus: dict[str, Any], dev: int, pid: int | None) -> dict[str, Any] | None:
    by_id, cuda = gpus["by_id"], gpus["cuda"]
    gid = cuda.get((pid, dev), cuda.get((None, dev)))
    if gid is not None and gid in by_id:
        return by_id[gid]
    for g in by_id.values():
        if g.get("cuDevice") == dev:
            return g
    if len(by_id) == 1:
        return next(iter(by_id.values()))
    return by_id.get(dev)


def _kernels(con: sqlite3.Connection, tables: dict[str, set[str]]) -> list[tuple]:
    """(start, end, deviceId, globalPid, correlationId, shortName, launch_start) by start."""
    kc = tables.get("CUPTI_ACTIVITY_KIND_KERNEL", set())
    if not {"start", "end", "deviceId", "shortName"} <= kc:
        return []
    gp = "k.globalPid" if "globalPid" in kc else "0"
    corr = "k.correlationId" if "correlationId" in kc else "NULL"
    rc = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", set())
    if "correlationId" in kc and {"start", "globalTid", "correlationId"} <= rc:
        # correlation ids are per process: join within the kernel's process only
        sql = (f"SELECT k.start, k.end, k.deviceId, {gp}, {corr}, k.shortName, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
               "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
               f"AND (r.globalTid & {PID_MASK}) = {gp} ORDER BY k.start")
    else:
        sql = f"SELECT k.start, k.end, k.deviceId, {gp}, {corr}, k.shortName, NULL FROM CUPTI_ACTIVITY_KIND_KERNEL k ORDER BY k.start"
    return [r for r in con.execute(sql).fetchall() if isinstance(r[0], int) and isinstance(r[2], int)]


def _strings(con: sqlite3.Connection, tables: dict[str, set[str]], ids: set[int]) -> dict[int, str]:
    if not {"id", "value"} <= tables.get("StringIds", set()) or not ids:
        return {}
    out: dict[int, str] = {}
    ids_l = [i for i in ids if isinstance(i, int)]
    for i in range(0, len(ids_l), 900):  # SQLite's bound-parameter limit
        chunk = ids_l[i:i + 900]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})"
        out.update({int(a): str(b) for a, b in con.execute(q, chunk).fetchall()})
    return out


def _nvtx(con: sqlite3.Connection, tables: dict[str, set[str]], where: str) -> list[tuple]:
    nc = tables.get("NVTX_EVENTS", set())
    if not {"start", "eventType", "globalTid"} <= nc:
        return []
    end = "n.end" if "end" in nc else "NULL"
    text = "n.text" if "text" in nc else "NULL"
    if "textId" in nc and {"id", "value"} <= tables.get("StringIds", set()):
        name = f"COALESCE({text}, s.value)"
        join = "LEFT JOIN StringIds s ON s.id = n.textId"
    else:
        name, join = text, ""
    sql = (f"SELECT n.start, {end}, n.globalTid, {name} FROM NVTX_EVENTS n {join} "
           f"WHERE n.eventType IN (59, 60) AND ({where.replace('NAME', name)}) ORDER BY n.start")
    return con.execute(sql).fetchall()


def _step_ranges(con: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[int, list[tuple[int, int | None, str]]]:
    rows = _nvtx(con, tables, "NAME LIKE 'ProfilerStep#%' OR NAME LIKE '%step%' OR NAME LIKE '%iter%' "
                              "OR NAME LIKE '%STEP%' OR NAME LIKE '%Step%' OR NAME LIKE '%Iter%'")
    out: dict[int, list[tuple[int, int | None, str]]] = defaultdict(list)
    for start, end, gtid, name in rows:
        if isinstance(start, int) and isinstance(gtid, int) and isinstance(name, str) and _STEP_RANGE.match(name):
            out[gtid & PID_MASK].append((start, end if isinstance(end, int) and end > 0 else None, name))
    return out


def _pending_nccl_launches(con: sqlite3.Connection, tables: dict[str, set[str]], kernels: list[tuple]) -> dict[int, list[dict[str, Any]]]:
    """Kernel launches after the last kernel row of their process (the kernel never
    completed), that an NCCL NVTX range (``ncclAllReduce``) encloses."""
    rc = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", set())
    if not {"start", "globalTid", "correlationId", "nameId"} <= rc:
        return {}
    last_corr: dict[int, int] = {}
    for k in kernels:
        if isinstance(k[4], int):
            last_corr[k[3] or 0] = max(last_corr.get(k[3] or 0, -1), k[4])
    floor = min(last_corr.values(), default=-1)  # only launches after some process's last kernel matter
    launches = con.execute(
        "SELECT r.start, r.globalTid, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId WHERE r.correlationId > ? "
        "AND (s.value LIKE '%LaunchKernel%' OR s.value LIKE '%LaunchCooperativeKernel%')", (floor,)
    ).fetchall() if {"id", "value"} <= tables.get("StringIds", set()) else []
    late = [(st, gt, c) for st, gt, c, _ in launches
            if isinstance(st, int) and isinstance(gt, int) and isinstance(c, int) and c > last_corr.get(gt & PID_MASK, -1)]
    if not late:
        return {}
    ranges = _nvtx(con, tables, "NAME LIKE 'nccl%'")
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for st, gt, c in late:
        enclosing = None
        for rs, re_, rgt, name in ranges:
            if rgt == gt and rs <= st and (re_ is None or re_ <= 0 or st <= re_):
                enclosing = (rs, name)
        if enclosing is None:
            continue
        op = str(enclosing[1])[4:] or None
        out[gt & PID_MASK].append({"launch": st, "op": op, "range": enclosing[1], "correlation": c})
    return out


def _emit_process(ctx: ParseContext, rows: list[tuple], names: dict[int, str], steps: list[tuple[int, int | None, str]],
                  pending: list[dict[str, Any]], capture_end: int | None, wall: Any, epoch: int | None,
                  ident: dict[str, Any], extra: dict[str, Any]) -> None:
    tq = TimeQuality.EXACT if epoch is not None else None
    ops: dict[str, dict[str, Any]] = {}
    compute_ns = nccl_ns = n_nccl = 0
    last_nccl: tuple[tuple, dict[str, Any], int] | None = None
    step_starts = [s[0] for s in steps]
    step_ends = [s[1] for s in steps]
    per_step: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    parsed = {i: parse_nccl_kernel(names[i]) for i in {k[5] for k in rows} if i in names}  # per name, not per kernel
    for k in rows:
        dur = max(0, (k[1] or 0) - k[0])
        info = parsed.get(k[5])
        if info is not None:
            n_nccl += 1
            nccl_ns += dur
            op = info.get("op") or "?"
            o = ops.setdefault(op, {"count": 0, "total_ns": 0, "max_ns": 0})
            o["count"] += 1
            o["total_ns"] += dur
            o["max_ns"] = max(o["max_ns"], dur)
            for key in ("algo", "proto", "dtype"):
                if info.get(key):
                    o.setdefault(key, info[key])
            last_nccl = (k, info, n_nccl)
        else:
            compute_ns += dur
        if step_starts:
            t = k[6] if isinstance(k[6], int) else k[0]
            i = bisect_right(step_starts, t) - 1
            if i >= 0 and (step_ends[i] is None or t <= step_ends[i]):  # type: ignore[operator]
                per_step[i][1 if info is not None else 0] += dur
    first, last_end = rows[0][0], max((k[1] or k[0]) for k in rows)
    summary: dict[str, Any] = {
        "kernels": len(rows), "compute_ms": round(compute_ns / 1e6, 3), "nccl_ms": round(nccl_ns / 1e6, 3),
        "nccl_kernels": n_nccl,
        "ops": {op: {"count": o["count"], "total_ms": round(o["total_ns"] / 1e6, 3), "max_ms": round(o["max_ns"] / 1e6, 3),
                     **{k: o[k] for k in ("algo", "proto", "dtype") if k in o}} for op, o in sorted(ops.items())},
        "window_s": round((last_end - first) / 1e9, 3),
    }
    # Steps that ran to their end and launched kernels; an open last step is the one in flight.
    full = [i for i in sorted(per_step) if steps[i][1] is not None and sum(per_step[i]) > 0]
    if full:
        comp = [per_step[i][0] / 1e6 for i in full]
        nccl = [per_step[i][1] / 1e6 for i in full]
        span = [(steps[i][1] - steps[i][0]) / 1e6 for i in full]  # type: ignore[operator]
        summary.update(steps=len(full), step_compute_ms_median=round(statistics.median(comp), 3),
                       step_nccl_ms_median=round(statistics.median(nccl), 3), step_ms_median=round(statistics.median(span), 3),
                       step_compute_ms=[round(x, 3) for x in comp[-MAX_STEPS_KEPT:]])
    if steps and steps[-1][1] is None:
        summary["open_step"] = steps[-1][2]
    if capture_end is not None:
        summary["capture_end"] = _iso(wall(capture_end)) if epoch is not None else capture_end
    summary.update({k: v for k, v in extra.items() if v is not None})
    who = " ".join(x for x in (f"rank {ident['rank']}" if ident.get("rank") is not None else None, ident.get("host"),
                               f"GPU {ident['gpu'] or ident['gpu_index']}") if x)
    ops_txt = ", ".join(f"{op} {o['count']}x {o['total_ms']:.0f} ms" for op, o in summary["ops"].items())
    msg = (f"{who}: {len(rows)} kernels over {summary['window_s']:.1f} s: compute {compute_ns / 1e6:.0f} ms, "
           f"NCCL {nccl_ns / 1e6:.0f} ms ({ops_txt or 'none'})")
    if full:
        msg += f"; {len(full)} steps, median compute {summary['step_compute_ms_median']:.0f} ms, NCCL {summary['step_nccl_ms_median']:.0f} ms per step"
    ctx.emit(Kind.TRACE_SUMMARY, None, msg, time=wall(first), time_quality=tq, attrs=summary, **ident)

    # The last collective: a launch that never produced a kernel row beats the last kernel.
    last_k = last_nccl[0] if last_nccl else None
    pend = [p for p in pending if last_k is None or p["launch"] > (last_k[6] if isinstance(last_k[6], int) else last_k[0])]
    if pend:
        p = pend[-1]
        attrs = {"op": p["op"], "range": p["range"], "seq": n_nccl + 1, "start": _iso(wall(p["launch"])), "ended": False,
                 "state": "launched_not_completed", "source_of_time": "launch"}
        ctx.emit(Kind.COLLECTIVE_TRACE, None,
                 f"{who}: last collective {p['op'] or '?'} (NCCL call #{n_nccl + 1}) was launched and never completed",
                 severity=Severity.WARNING, time=wall(p["launch"]), time_quality=tq, attrs=attrs, **ident)
    elif last_nccl is not None:
        k, info, seq = last_nccl
        cut = capture_end is not None and k[1] is not None and k[1] >= capture_end - CAPTURE_END_SLACK_NS
        attrs = {**{x: info[x] for x in ("op", "algo", "proto", "dtype", "redop", "kernel") if info.get(x)}, "seq": seq,
                 "start": _iso(wall(k[0])), "end": _iso(wall(k[1])), "duration_ms": round(((k[1] or k[0]) - k[0]) / 1e6, 3),
                 "ended": not cut, "state": "running_at_capture_end" if cut else "completed"}
        if epoch is None:
            attrs["start"], attrs["end"] = k[0], k[1]
        text = "was still running when the capture ended" if cut else "completed"
        ctx.emit(Kind.COLLECTIVE_TRACE, None, f"{who}: last NCCL kernel {info.get('kernel')} (#{seq}) {text}",
                 severity=Severity.WARNING if cut else Severity.INFO, time=wall(k[0]), time_quality=tq, attrs=attrs, **ident)


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    s, frac = divmod(int(ns), 1_000_000_000)
    try:
        return datetime.fromtimestamp(s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"
    except (OverflowError, OSError, ValueError):
        return None


# -- nsys stats CSV ------------------------------------------------------------------------------------

_UNIT = lazy_compile(r"^(?P<base>.*?)\s*\((?P<unit>[^()]*)\)\s*$")
_UNIT_NS = {"ns": 1, "nsec": 1, "us": 1_000, "usec": 1_000, "ms": 1_000_000, "msec": 1_000_000, "s": 1_000_000_000, "sec": 1_000_000_000}
# report -> columns that identify its header (names without units)
_REPORTS = {
    "cuda_gpu_kern_sum": ("Time", "Total Time", "Instances", "Avg", "Name"),
    "nvtx_sum": ("Time", "Total Time", "Instances", "Avg", "Range"),
    "cuda_gpu_trace": ("Start", "Duration", "Name"),
}


def _split_header(line: str) -> tuple[list[str], dict[str, int]] | None:
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    names, units = [], {}
    for c in cells:
        m = _UNIT.match(c.strip())
        if m:
            names.append(m.group("base").strip())
            if m.group("unit") in _UNIT_NS:
                units[m.group("base").strip()] = _UNIT_NS[m.group("unit")]
        else:
            names.append(c.strip())
    return names, units


def _find_csv_header(lines: list[str]) -> tuple[int, str, list[str], dict[str, int]] | None:
    for i, line in enumerate(lines):
        if "," not in line or ("Name" not in line and "Range" not in line):
            continue
        sp = _split_header(line)
        if sp is None:
            continue
        names, units = sp
        for report, need in _REPORTS.items():
            if all(n in names for n in need) and (report != "cuda_gpu_trace" or "Start" in units):
                return i, report, names, units
    return None


def _parse_stats_csv(data: bytes, ctx: ParseContext) -> None:
    text, bad = decode(data)
    if bad:
        ctx.warn("invalid UTF-8 bytes replaced")
    lines = text.replace("\r\n", "\n").split("\n")
    found = _find_csv_header(lines[:200])
    if found is None:
        ctx.warn("no nsys stats CSV header found")
        return
    hdr_i, report, names, units = found
    body: list[tuple[int, dict[str, str]]] = []
    for n, line in enumerate(lines[hdr_i + 1:], hdr_i + 2):
        if not line.strip():
            if body:
                break  # the report ended (stdout goes on with the next one)
            continue
        try:
            cells = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            ctx.warn("unreadable CSV row", n, line)
            continue
        if len(cells) != len(names):
            ctx.warn(f"CSV row has {len(cells)} fields, the header {len(names)}", n, line)
            continue
        body.append((n, dict(zip(names, cells))))
    base = {"report": report}
    if report == "cuda_gpu_kern_sum":
        _csv_kern_sum(ctx, body, units, base)
    elif report == "nvtx_sum":
        _csv_nvtx_sum(ctx, body, units, base)
    else:
        _csv_trace(ctx, body, units, base)


def _num(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return float(v.replace(",", "").strip())
    except ValueError:
        return None


def _ns(row: dict[str, str], col: str, units: dict[str, int]) -> float | None:
    x = _num(row.get(col))
    return None if x is None else x * units.get(col, 1)


def _csv_kern_sum(ctx: ParseContext, body: list[tuple[int, dict[str, str]]], units: dict[str, int], base: dict[str, Any]) -> None:
    ops: dict[str, dict[str, Any]] = {}
    compute = nccl = 0.0
    kernels = n_nccl = 0
    for _, r in body:
        total, count, mx = _ns(r, "Total Time", units), _num(r.get("Instances")), _ns(r, "Max", units)
        if total is None or count is None:
            continue
        kernels += int(count)
        info = parse_nccl_kernel(r.get("Name", ""))
        if info is None:
            compute += total
            continue
        nccl += total
        n_nccl += int(count)
        o = ops.setdefault(info.get("op") or "?", {"count": 0, "total_ms": 0.0, "max_ms": 0.0})
        o["count"] += int(count)
        o["total_ms"] = round(o["total_ms"] + total / 1e6, 3)
        o["max_ms"] = round(max(o["max_ms"], (mx or 0) / 1e6), 3)
        for key in ("algo", "proto", "dtype"):
            if info.get(key):
                o.setdefault(key, info[key])
    if not kernels:
        return
    attrs = {"kernels": kernels, "compute_ms": round(compute / 1e6, 3), "nccl_ms": round(nccl / 1e6, 3), "nccl_kernels": n_nccl,
             "ops": dict(sorted(ops.items())), **base}
    ops_txt = ", ".join(f"{op} {o['count']}x {o['total_ms']:.0f} ms" for op, o in attrs["ops"].items())
    ctx.emit(Kind.TRACE_SUMMARY, body[0][0], f"{kernels} kernels: compute {compute / 1e6:.0f} ms, NCCL {nccl / 1e6:.0f} ms ({ops_txt or 'none'})",
             attrs=attrs)


def _csv_nvtx_sum(ctx: ParseContext, body: list[tuple[int, dict[str, str]]], units: dict[str, int], base: dict[str, Any]) -> None:
    steps = [(n, r) for n, r in body if _STEP_RANGE.match(r.get("Range", "").split(":", 1)[-1].strip()) or
             regex.match(r"^(?:ProfilerStep|(?i:(?:train(?:ing)?[ _-]?)?(?:step|iter(?:ation)?)))", r.get("Range", "").split(":", 1)[-1].strip())]
    if not steps:
        return
    count = sum(int(_num(r.get("Instances")) or 0) for _, r in steps)
    total = sum(_ns(r, "Total Time", units) or 0 for _, r in steps)
    med = _ns(steps[0][1], "Med", units) if len(steps) == 1 else (total / count if count else None)
    mx = max((_ns(r, "Max", units) or 0) for _, r in steps)
    attrs = {"steps": count, "step_ms_median": round((med or 0) / 1e6, 3), "step_ms_max": round(mx / 1e6, 3),
             "ranges": [r.get("Range") for _, r in steps][:8], **base}
    ctx.emit(Kind.TRACE_SUMMARY, steps[0][0], f"{count} step ranges, median {attrs['step_ms_median']:.0f} ms, max {attrs['step_ms_max']:.0f} ms",
             attrs=attrs)


def _csv_trace(ctx: ParseContext, body: list[tuple[int, dict[str, str]]], units: dict[str, int], base: dict[str, Any]) -> None:
    by_dev: dict[str, list[tuple[int, float, float, dict[str, Any] | None]]] = defaultdict(list)
    for n, r in body:
        st, du = _ns(r, "Start", units), _ns(r, "Duration", units)
        if st is None or du is None:
            continue
        by_dev[r.get("Device", "").strip()].append((n, st, du, parse_nccl_kernel(r.get("Name", ""))))
    for dev, rows in sorted(by_dev.items()):
        m = regex.search(r"\((\d+)\)|^(\d+)$", dev)
        idx = int(m.group(1) or m.group(2)) if m else None
        ops: dict[str, dict[str, Any]] = {}
        compute = sum(du for _, _, du, i in rows if i is None)
        nccl_rows = [(n, st, du, i) for n, st, du, i in rows if i is not None]
        for _, _, du, i in nccl_rows:
            o = ops.setdefault(i.get("op") or "?", {"count": 0, "total_ms": 0.0, "max_ms": 0.0})  # type: ignore[union-attr]
            o["count"] += 1
            o["total_ms"] = round(o["total_ms"] + du / 1e6, 3)
            o["max_ms"] = round(max(o["max_ms"], du / 1e6), 3)
        attrs = {"kernels": len(rows), "compute_ms": round(compute / 1e6, 3), "nccl_ms": round(sum(r[2] for r in nccl_rows) / 1e6, 3),
                 "nccl_kernels": len(nccl_rows), "ops": dict(sorted(ops.items())), "device": dev or None,
                 "window_s": round((max(st + du for _, st, du, _ in rows) - rows[0][1]) / 1e9, 3), **base}
        ctx.emit(Kind.TRACE_SUMMARY, rows[0][0], f"GPU {dev}: {len(rows)} kernels: compute {compute / 1e6:.0f} ms, NCCL {attrs['nccl_ms']:.0f} ms",
                 gpu_index=idx, attrs={k: v for k, v in attrs.items() if v is not None})
        if nccl_rows:
            n, st, du, i = nccl_rows[-1]
            ctx.emit(Kind.COLLECTIVE_TRACE, n, f"GPU {dev}: last NCCL kernel {i.get('kernel')} (#{len(nccl_rows)}) completed",  # type: ignore[union-attr]
                     gpu_index=idx, attrs={**{x: i[x] for x in ("op", "algo", "proto", "dtype", "redop", "kernel") if i.get(x)},  # type: ignore[union-attr]
                                           "seq": len(nccl_rows), "start": int(st), "end": int(st + du), "duration_ms": round(du / 1e6, 3),
                                           "ended": True, "state": "completed", **base})


SOURCE = NsysSource()
