"""Catalog texts anywhere in any line: CUDA/NCCL/IB/Xid/errno/signal/OOM/scheduler errors
behind any envelope (``crashscope/catalogs/*.yaml``; format in ``docs/catalogs.md``).

The other sources understand a line when its envelope is one they expect. Real pastes wrap
the same texts in anything, so this source looks for the catalogs' key texts in every line
of every text file, and parses a leading envelope only to place the event in time, host and
rank. Sample lines (composed in the real formats)::

    [1,5]<stderr>:RuntimeError: CUDA error: uncorrectable ECC error encountered
    ^ mpirun --tag-output [jobid,rank]<stream>: (rank 5)
    2024-05-01T10:00:00.123Z stdout F NVRM: Xid (PCI:0000:9a:00): 95, pid=1, name=python3, Uncontained: FBHUB.
    ^ Kubernetes CRI log: stamp (exact), stream, F(ull)/P(artial)
    Jun 17 20:18:08 node003 kernel: mlx5_core 0000:17:00.0: Port module event: module 0, Cable unplugged
    ^ journald/syslog: year-less local stamp, host, ident[pid]
    2024-05-01 10:00:00,123 - trainer - ERROR - CUDA out of memory. Tried to allocate 2.00 GiB
    ^ Python logging asctime (local)
    logs/node002/rank9.log:1042:NCCL WARN NET/IB : Got completion from peer 10.0.0.7<4000> with error 12
    ^ grep -rn path:line: prefix
    epoch 3:  41%|####1     | 410/1000 [05:12<07:30]\\rTERM_RUNLIMIT: job killed after reaching LSF run time limit.
    ^ tqdm progress glued with carriage returns: the hit's own segment is the message

Envelopes parsed at the start of a line, in any nesting: ``grep -r`` ``path:`` /
``path:N:``, Kubernetes CRI ``<RFC3339> stdout|stderr F|P ``, ISO-8601 stamps (bare, in
brackets, Python logging ``YYYY-MM-DD HH:MM:SS,mmm``), journald/syslog
``Mon DD HH:MM:SS[.us] host ident[pid]: `` and ``<ISO> host ident[pid]: ``, dmesg
``[ sec.usec]``, mpirun ``[jobid,rank]<stdout|stderr>:`` (with ``--timestamp-output`` the
ctime() stamp ``Tue Nov 27 13:49:06 2018`` glued in front: ORTE's iof_base_output.c), srun ``N: ``, torchrun
``[default3]:``, ``[rankN]:``, NCCL ``host:pid:tid [dev] ``.

Kinds: each hit's catalog ``kind`` (cuda_error, cuda_oom, nccl_error, network_error, xid,
link_event, host_oom, job_state, job_cancel, node_state, process_exit, exception,
log_error, comm_abort). attrs: catalog, name, code, cause (taxonomy label or null), role
(cause|symptom|context), mono/boot for dmesg boot-relative stamps (as the kernel source),
srun_task (srun --label task id, SLURM_PROCID: the timeline makes it the rank under plain
srun, the node's launcher under torchrun; the rank column only from ``[rankN]:`` or mpirun),
plus what the entry's pattern captured (status, vendor_err, peer, pci, signal, exit_code,
errno, ...). The gpu column is set from a captured PCI address.
One event per hit and (catalog, cause, role): a line may hold several (``NCCL error ...
unhandled cuda error ... Cuda failure 2 'out of memory'`` is an NCCL symptom and a CUDA
OOM). Other sources may parse the same line; the caller de-duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


from crashscope import catalogs
from crashscope.schema import TimeQuality
from crashscope.sources.base import MONTHS, LineSource, ParseContext, feed_guarded, iso_to_ns, normalize_pci, split_prefix
from crashscope.sources.base import lazy_compile

_MON = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_GREP = lazy_compile(r"^(?:\./)?(?:[\w.@+-]+/)*[\w.@+-]+\.(?:log|out|err|txt|stdout|stderr|json)(?:\.\d+)?(?::\d+)?[:-](?!\d)")
_CRI = lazy_compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) (?:stdout|stderr) [FP] ")
_ISO = lazy_compile(
    r"^\[?(?P<ts>\d{4}-\d\d-\d\d(?P<sep>[T ])\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?P<zone>Z|[+-]\d\d:?\d\d)?)\]?(?:\s+|,\s*|\s*-\s+|:\s)"
)
_BSD = lazy_compile(
    rf"^(?P<mon>{_MON}) {{1,2}}(?P<d>\d{{1,2}}) (?P<hh>\d\d):(?P<mm>\d\d):(?P<ss>\d\d)(?:\.(?P<frac>\d{{1,9}}))? "
)
# C ctime(): "%.3s %.3s%3d %.2d:%.2d:%.2d %d" (day of week, month, day padded to 3, year):
# mpirun --timestamp-output writes it right before the --tag-output tag, with no space.
_CTIME = lazy_compile(
    rf"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>{_MON}) {{1,2}}(?P<d>\d{{1,2}}) (?P<hh>\d\d):(?P<mm>\d\d):(?P<ss>\d\d) (?P<y>\d{{4}})(?=\[|\s)\s?"
)
_HOST_IDENT = lazy_compile(r"^(?P<host>[\w.:-]+) (?P<ident>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?: ")
_MONO = lazy_compile(r"^\[\s*(?P<sec>\d+)\.(?P<frac>\d{1,9})\]\s?")
_MPI = lazy_compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:\s?")
_NCCL = lazy_compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
# Python logging: "%(asctime)s - %(name)s - %(levelname)s - " and basicConfig "LEVEL:name:".
_PYLOG = lazy_compile(
    r"^(?:-\s+)?(?:[\w.\[\]-]+\s+-\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+|^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"
)


MATCH_CHARS = 8192  # of each line, where the catalog texts are looked for
RAY_FIELDS_BEFORE = 2  # ActorDiedError: "\tip: " is the last field, the cause right after it
HYDRA_BANNER = ("EXIT CODE: ", "KILLED BY SIGNAL: ")  # the signal line right after "RUNNING AT <host>"


@dataclass(slots=True)
class Envelope:
    body: str
    time: int | None = None
    quality: TimeQuality | None = None
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    mono_us: int | None = None  # dmesg "[ sec.usec]": seconds since boot
    task: int | None = None  # srun --label task id


def _frac_ns(frac: str | None) -> int:
    return int((frac + "000000000")[:9]) if frac else 0


def parse_envelope(text: str, ctx: ParseContext) -> Envelope:
    """Peel the common prefixes off the start of a line (any order, any nesting)."""
    env = Envelope(text)
    rest = text.lstrip("\ufeff")
    for _ in range(10):
        if m := _GREP.match(rest):
            rest = rest[m.end():]
            continue
        if m := _CRI.match(rest):
            if env.time is None:
                env.time, env.quality = iso_to_ns(m.group("ts"), ctx)
            rest = rest[m.end():]
            continue
        if m := _ISO.match(rest):
            if env.time is None:
                env.time, env.quality = iso_to_ns(m.group("ts"), ctx)
            rest = rest[m.end():]
            # Syslog / journald short-iso put "host ident[pid]: " after a bare T-separated stamp;
            # Python logging's "YYYY-MM-DD HH:MM:SS,mmm - name - LEVEL - " does not, nor does a
            # Slurm daemon's "[ISO] error: plugin: msg" (the level is no host).
            if m.group("sep") == "T" and not m.group(0).startswith("[") \
                    and (hm := _HOST_IDENT.match(rest)) and not hm.group("host").endswith(":"):
                env.host = env.host or hm.group("host")
                if hm.group("pid") and env.pid is None:
                    env.pid = int(hm.group("pid"))
                rest = rest[hm.end():]
            continue
        if m := _CTIME.match(rest):
            if env.time is None:
                t = ctx.local_ns(int(m.group("y")), MONTHS[m.group("mon")], int(m.group("d")), int(m.group("hh")), int(m.group("mm")), int(m.group("ss")))
                if t is not None:
                    env.time, env.quality = t, ctx.local_quality()
            rest = rest[m.end():]
            continue
        if m := _BSD.match(rest):
            if env.time is None:
                t = ctx.yearless_ns(MONTHS[m.group("mon")], int(m.group("d")), int(m.group("hh")), int(m.group("mm")), int(m.group("ss")), _frac_ns(m.group("frac")))
                if t is not None:
                    env.time, env.quality = t, ctx.local_quality()
            rest = rest[m.end():]
            if hm := _HOST_IDENT.match(rest):
                env.host = env.host or hm.group("host")
                if hm.group("pid") and env.pid is None:
                    env.pid = int(hm.group("pid"))
                rest = rest[hm.end():]
            continue
        if m := _PYLOG.match(rest):
            rest = rest[m.end():]
            continue
        if m := _MONO.match(rest):
            if env.mono_us is None:
                env.mono_us = int(m.group("sec")) * 1_000_000 + _frac_ns(m.group("frac")) // 1000
            rest = rest[m.end():]
            continue
        if m := _MPI.match(rest):
            if env.rank is None:
                env.rank = int(m.group("rank"))
            rest = rest[m.end():]
            continue
        if m := _NCCL.match(rest):
            env.host = env.host or m.group("host")
            if env.pid is None:
                env.pid = int(m.group("pid"))
            rest = rest[m.end():]
            continue
        prefix, after = split_prefix(rest)
        if after is not rest and len(after) < len(rest):
            # srun's task id is SLURM_PROCID (a node index under torchrun), not a rank: attrs only.
            if env.rank is None and prefix.rank is not None:
                env.rank = prefix.rank
            if env.task is None and prefix.task is not None:
                env.task = prefix.task
            if env.local_rank is None:
                env.local_rank = prefix.local_rank
            env.host = env.host or prefix.host
            rest = after
            continue
        break
    env.body = rest
    return env


def _segment(text: str, span: tuple[int, int], body: str) -> str:
    """The carriage-return segment holding the hit (tqdm redraws glue lines with \\r)."""
    if "\r" not in text:
        return body
    start = text.rfind("\r", 0, span[0]) + 1
    end = text.find("\r", span[1])
    seg = text[start:] if end < 0 else text[start:end]
    return body if start == 0 and body and seg.endswith(body[-min(len(body), 40):]) else seg


class CatalogSource(LineSource):
    name = "catalog"
    description = "Catalog texts (CUDA, NCCL, IB verbs, Xid/NVRM, errno, signals, OOM, scheduler/cloud states) anywhere in any line"
    filename_hints = ()
    prefilter = catalogs.prefilter()

    def sniff(self, head: str, name: str) -> float:
        return 0.0  # never claims a file: line sources see every text file's matching lines

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        cats = catalogs.load()
        clock = {"boot": 0, "last": -1}
        ray_ip: dict[str, Any] = {}  # the last ActorDiedError "\tip: " field: line and address
        hydra_at: dict[str, Any] = {}  # the last Hydra banner's "RUNNING AT" line: line, host, rank

        def on_line(n: int, text: str) -> None:
            # The known texts sit near the start of a line; matching a 1 MiB line whole costs
            # seconds per line for nothing (a flood of 50 KB host names).
            hits = catalogs.match_text(text[:MATCH_CHARS], cats)
            if not hits:
                return
            env = parse_envelope(text.split("\r", 1)[0], ctx)
            mono: dict[str, Any] = {}
            if env.mono_us is not None:
                # Like the kernel source: boot-relative seconds for the timeline to convert,
                # and a boot counter that moves when the clock restarts (a reboot).
                if env.mono_us < clock["last"]:
                    clock["boot"] += 1
                clock["last"] = env.mono_us
                mono = {"mono": f"{env.mono_us // 1_000_000}.{env.mono_us % 1_000_000:06d}", "boot": clock["boot"]}
            for h in hits:
                attrs: dict[str, Any] = {"catalog": h.catalog, "name": h.name, "code": h.code, "cause": h.cause, "role": h.role, **mono}
                for k, v in h.attrs.items():
                    attrs.setdefault(k, v)
                if env.task is not None:
                    attrs.setdefault("srun_task", env.task)
                gpu = normalize_pci(str(h.attrs["pci"])) if h.attrs.get("pci") else None
                msg = _segment(text, h.span, env.body).strip() or text.strip()
                # A text that names where it happened (mpirun's "process rank 140 ... on node
                # 10.87.102.19", a Slurm banner's "ON node023", a Kubernetes NodeLost) gives the
                # event that identity when the envelope gave none.
                if isinstance(h.attrs.get("exec_host"), str):
                    # Torque/PBS exec_host "host/cpu+host/cpu": the job's nodes, as a NodeList would be
                    attrs["nodes"] = list(dict.fromkeys(part.split("/", 1)[0] for part in h.attrs["exec_host"].split("+")))
                host = env.host or (str(h.attrs["node"]) if h.attrs.get("node") else None) or _one_host(attrs.get("nodes"))
                if h.name == "ray_actor_died_ip":
                    ray_ip.update(line=n, ip=host)
                elif host is None and h.name == "ray_node_died" and ray_ip and 0 < n - ray_ip["line"] <= RAY_FIELDS_BEFORE:
                    host = ray_ip["ip"]  # the error's own ip: field, a line or two above its cause
                rank = env.rank if env.rank is not None else (h.attrs["rank"] if isinstance(h.attrs.get("rank"), int) else None)
                if h.name == "hydra_bad_termination_at":
                    hydra_at.update(line=n, host=host, rank=rank)
                elif h.catalog == "signals" and hydra_at and n - hydra_at["line"] == 1 and any(k in text for k in HYDRA_BANNER):
                    # Hydra's banner: the signal line names neither host nor rank, the line above both
                    host = host or hydra_at["host"]
                    rank = rank if rank is not None else hydra_at["rank"]
                ctx.emit(
                    h.kind, n, msg, severity=h.severity, time=env.time, time_quality=env.quality if env.time is not None else None,
                    host=host, rank=rank, local_rank=env.local_rank, pid=env.pid, gpu=gpu, attrs=attrs,
                )

        feed_guarded(ctx, lines, on_line)


def _one_host(nodes: Any) -> str | None:
    """A captured host list that names one host (``worker-1``, not ``node[01-04]`` or ``a,b``;
    or a list of one, as a Torque exec_host gives)."""
    if isinstance(nodes, list):
        return str(nodes[0]) if len(nodes) == 1 and nodes[0] else None
    if isinstance(nodes, str) and nodes and not any(c in nodes for c in "[],"):
        return nodes
    return None


SOURCE = CatalogSource()
