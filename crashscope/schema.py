"""The one event schema every source produces, and the closed vocabularies it uses.

Every parsed log line that matters becomes one row of ``EVENT_SCHEMA``. Sources never
invent columns; anything source-specific goes into ``attrs`` (a JSON object string whose
keys are documented per kind in ``docs/schema.md``).
"""

from __future__ import annotations

import importlib.util
import pkgutil
from enum import Enum
from typing import Iterable

import polars as pl


class Cause(str, Enum):
    """Crash cause labels of the report contract (``shared/taxonomy.md``); values are exact."""

    FABRIC_TIMEOUT = "fabric_timeout"  # network fabric failed or stalled during collectives
    STORAGE_STALL = "storage_stall"  # shared/local storage I/O stalled a rank
    DRIVER_DRIFT = "driver_drift"  # mismatched driver/CUDA/NCCL/OFED/torch across nodes
    PREEMPTION = "preemption"  # scheduler preempted, requeued or cancelled the job
    GPU_THROTTLE = "gpu_throttle"  # one GPU ran slow (thermal, power, HW slowdown)
    GPU_HARDWARE = "gpu_hardware"  # Xid/ECC/NVLink/fallen off the bus
    NODE_FAILURE = "node_failure"  # host crashed, rebooted or became unreachable
    OOM = "oom"  # GPU or host out of memory
    SOFTWARE_ERROR = "software_error"  # bug in user/framework code, desync
    TIME_LIMIT = "time_limit"  # job hit its time limit
    UNKNOWN = "unknown"  # failed, not enough evidence
    NONE = "none"  # no failure


# What a person reads for each cause (the verdict's summary opens with it).
CAUSE_TITLES = {
    "fabric_timeout": "Network fabric failure",
    "storage_stall": "Storage stall",
    "driver_drift": "Software/driver version drift",
    "preemption": "Scheduler preemption or cancellation",
    "gpu_throttle": "GPU throttling",
    "gpu_hardware": "GPU hardware fault",
    "node_failure": "Node failure",
    "oom": "Out of memory",
    "software_error": "Software error in the training code",
    "time_limit": "Job time limit",
    "unknown": "Unknown",
    "none": "No failure",
}


CAUSES: tuple[str, ...] = tuple(c.value for c in Cause)


class Kind(str, Enum):
    """Normalized event types. Closed: rules validate against this list."""

    VERSION = "version"  # attrs: component, version (+ host)
    GPU_INVENTORY = "gpu_inventory"  # attrs: index, pci, uuid, name
    COMM_INIT = "comm_init"  # attrs: phase(start|complete), comm, rank, nranks, cuda_dev, bus_id, comm_id
    COMM_ABORT = "comm_abort"  # attrs: phase, comm, rank
    NET_CONFIG = "net_config"  # attrs: transport, devices
    NETWORK_ERROR = "network_error"  # attrs: transport(ib|socket|...), status, vendor_err, peer, hca
    NCCL_ERROR = "nccl_error"  # attrs: code, result, file
    CUDA_ERROR = "cuda_error"  # attrs: error
    CUDA_OOM = "cuda_oom"  # attrs: tried_bytes, device
    COLLECTIVE_TIMEOUT = "collective_timeout"  # attrs: seq, op, numel_in, numel_out, timeout_ms, ran_ms, pg
    WATCHDOG_ERROR = "watchdog_error"  # attrs: pg, last_enqueued, last_completed, what
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # attrs: seconds
    DESYNC_REPORT = "desync_report"  # attrs: lagging_ranks, seq, op
    COLLECTIVE_MISMATCH = "collective_mismatch"  # attrs: detail
    EXCEPTION = "exception"  # attrs: type, text
    PROCESS_EXIT = "process_exit"  # attrs: exitcode, signal, pid, tasks
    SIGNAL = "signal"  # attrs: signal, pid, direction(sent|received)
    ROOT_CAUSE_REPORT = "root_cause_report"  # torchrun ChildFailedError entry; attrs: root(bool), exitcode, host
    JOB_CANCEL = "job_cancel"  # slurmstepd banner; attrs: entity, id, reason
    JOB_STATE = "job_state"  # sacct/scontrol/slurmctld; attrs: state, exit_code, nodes, start, end, step
    JOB_STEP = "job_step"  # step launch/abort/termination; attrs: step, action
    NODE_STATE = "node_state"  # slurmctld node not responding/down/returned; attrs: state
    HOST_OOM = "host_oom"  # kernel OOM killer or Slurm cgroup OOM; attrs: pid, comm, job, step
    XID = "xid"  # attrs: xid, pci, pid, name
    SXID = "sxid"  # attrs: sxid, pci
    GPU_ECC = "gpu_ecc"  # attrs: volatile/aggregate counts, remapped rows, pending
    GPU_TELEMETRY = "gpu_telemetry"  # attrs: temperature, power, sm_clock, reasons (bitmask)
    GPU_THROTTLE = "gpu_throttle"  # attrs: reasons (list), mask
    LINK_EVENT = "link_event"  # mlx5/IB port module, link down/up, health; attrs: device, state
    STORAGE_ERROR = "storage_error"  # NFS not responding, Lustre lost, GPFS; attrs: fs, server
    STORAGE_RECOVERED = "storage_recovered"  # NFS OK, Lustre restored; attrs: fs, server (NFS: stall_seconds)
    HUNG_TASK = "hung_task"  # attrs: comm, pid, seconds, subsystem (nfs|lustre|gpfs|nvidia|rdma|localfs|...)
    PCIE_ERROR = "pcie_error"  # AER; attrs: severity, device
    MCE = "mce"  # machine check
    KERNEL_PANIC = "kernel_panic"  # panic, oops, soft/hard lockup, RCU stall; attrs: text
    BOOT = "boot"  # kernel boot banner / reboot
    SEGFAULT = "segfault"  # attrs: comm, pid, library
    CHECKPOINT = "checkpoint"  # app-level save; attrs: phase(start|end), path, iteration
    TRAIN_STEP = "train_step"  # app-level iteration; attrs: step, step_ms
    LOG_ERROR = "log_error"  # any other error/warning line worth showing
    ACTIVITY = "activity"  # applog: a rank's last time-stamped line in a file; attrs: first_time, last_time, lines, last_message, last_step
    RUN_END = "run_end"  # a trainer/benchmark said it finished; attrs: outcome (success), framework
    COLLECTIVE = "collective"  # one Flight Recorder entry; attrs: pg, pg_desc, seq, op, state, input_sizes, input_dtypes, ...
    TRACE_DUMP = "trace_dump"  # one Flight Recorder dump file; attrs: format, version, entries, pg_config, pg_status
    TRACE_SUMMARY = "trace_summary"  # nsys: one process+GPU of a trace, aggregated; attrs: kernels, compute_ms, nccl_ms, ops, steps, step_compute_ms_median
    COLLECTIVE_TRACE = "collective_trace"  # nsys: the last NCCL collective of a process+GPU; attrs: op, algo, proto, dtype, seq, start, end, ended, state
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: a rank entered a collective (ProcessGroupWrapper logs it before
    # its monitored barrier); attrs: seq, op, shape, dtypes, pg_rank. Appended last: older shards load.
    COLLECTIVE_ENTER = "collective_enter"
    # applog: a rank's own line that leads with its rank tag and then its host ("[rank 2] hostname=n2
    # local_rank=0"); attrs: host. Where the rank runs, for the timeline. Appended last: older shards load.
    IDENTITY = "identity"


KINDS: tuple[str, ...] = tuple(k.value for k in Kind)


class Severity(str, Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)


class TimeQuality(str, Enum):
    """How far an event's ``time`` can be trusted.

    exact: the source stamped it with an explicit zone/epoch, or local time with a known zone.
    aligned: converted from another clock (monotonic, skewed host) by an offset crashscope estimated.
    estimated: local time with an assumed zone, or interpolated from neighbouring lines.
    missing: no usable time.
    """

    EXACT = "exact"
    ALIGNED = "aligned"
    ESTIMATED = "estimated"
    MISSING = "missing"


TIME_QUALITIES: tuple[str, ...] = tuple(q.value for q in TimeQuality)

def _source_module_names() -> tuple[str, ...]:
    """One name per module in ``crashscope/sources/`` (read from the package folder without
    importing it: the sources import this module). A source's ``name`` is its module's
    name, so adding a source is one module plus one registry line; a test checks both."""
    spec = importlib.util.find_spec("crashscope.sources")
    paths = list(spec.submodule_search_locations or []) if spec else []
    names = {m.name for m in pkgutil.iter_modules(paths) if not m.ispkg and m.name != "base"}
    return tuple(sorted(names))


SOURCE_NAMES: tuple[str, ...] = _source_module_names()

_EVENT_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = (
    {
        "time": pl.Datetime("ns", "UTC"),
        "time_quality": pl.Enum(TIME_QUALITIES),
        "host": pl.String,
        "rank": pl.Int32,
        "local_rank": pl.Int32,
        "gpu": pl.String,  # PCI bus id dddd:bb:dd.f (lower case) when known
        "gpu_index": pl.Int32,  # CUDA ordinal / nvidia-smi index when the PCI id is not known
        "pid": pl.Int64,
        "job_id": pl.String,
        "source": pl.Enum(SOURCE_NAMES),
        "kind": pl.Enum(KINDS),
        "severity": pl.Enum(SEVERITIES),
        "message": pl.String,
        "attrs": pl.String,  # JSON object
        "file": pl.String,  # path relative to the analysed directory ("a.tar.gz!member" inside archives)
        "line": pl.Int64,  # 1-based
        # The stamp printed no year (syslog, c10/glog, torchrun): the timeline dates it in the
        # job's year, from the stamps that carry one (one pass, no second reading).
        "year_assumed": pl.Boolean,
    }
)
EVENT_SCHEMA = pl.Schema(_EVENT_COLUMNS)


def one_of(col: str, values: Iterable[str | Enum]) -> pl.Expr:
    """``col``, one of the schema's Enum columns (``kind``, ``source``, ``severity``,
    ``time_quality``), is one of ``values``: compared as Enum values, not cast to strings
    row by row (a cast of the 699k rows of a 16,384-rank job cost ~15-25 ms a test, the
    compare ~0.5 ms). A value the Enum does not know matches nothing and a null stays
    null, as with the cast; a column that is still plain strings is compared the same."""
    dtype = EVENT_SCHEMA[col]
    assert isinstance(dtype, pl.Enum), col
    known = set(dtype.categories.to_list())
    wanted = [v.value if isinstance(v, Enum) else v for v in values]  # (a str Enum member hashes by its name)
    return pl.col(col).is_in(pl.Series([v for v in wanted if v in known], dtype=dtype).implode())


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_SCHEMA)


def world_size(ev: pl.DataFrame) -> int | None:
    """The job's rank count as the events show it: the largest communicator NCCL reports
    (``nranks``), or one more than the highest rank seen when that is larger (a subgroup's
    communicator, or logs of ranks beyond the one NCCL line kept). The one definition the
    timeline and the rule engine share."""
    best: int | None = None
    init = ev.filter(pl.col("kind") == Kind.COMM_INIT.value)
    if init.height:
        n = init.select(pl.col("attrs").str.json_path_match("$.nranks").cast(pl.Int64, strict=False).max()).item()
        best = int(n) if n else None
    top = ev.select(pl.col("rank").max()).item() if "rank" in ev.columns else None
    if top is not None:
        best = max(best or 0, int(top) + 1)
    return best


def conform_events(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` in exactly ``EVENT_SCHEMA``: columns it lacks (events written by an older
    crashscope, a shard, a test's frame) come as nulls, extra ones go, types are cast."""
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in EVENT_SCHEMA.items() if c not in df.columns]
    if missing:
        df = df.with_columns(missing)
    return df.select([pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()])
