"""``nvidia-smi -q`` reports and the plain ``nvidia-smi`` table, one node per file.

``nvidia-smi -q`` (optionally ``-d ECC,PERFORMANCE,...``; repeated snapshots of ``-q -l``
are fine) is a ``key : value`` tree nested by 4-space indentation::

    ==============NVSMI LOG==============
    Timestamp                                 : Mon Sep 14 08:12:44 2026   <- ctime, node-local
    Driver Version                            : 535.154.05
    CUDA Version                              : 12.2                       <- driver API level
    GPU 00000000:18:00.0                                                   <- one section per GPU
        Product Name                          : NVIDIA H100 80GB HBM3
        Clocks Event Reasons                                               <- "Clocks Throttle Reasons" < R535
            HW Slowdown                       : Active
                HW Thermal Slowdown           : Active

The colon column moves between drivers (42, 51, 55), so lines are read with
``^(\\s*)(.+?)\\s*:\\s(.*)$`` and a stack of indentation widths, never fixed columns.

The plain table::

    Mon Sep 14 08:12:44 2026
    | NVIDIA-SMI 535.154.05   Driver Version: 535.154.05   CUDA Version: 12.2     |
    |   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |                    0 |
    | N/A   33C    P0             71W / 700W |      4MiB / 81559MiB |      0%      Default |

Events (gpu = normalized PCI ``dddd:bb:dd.f``, gpu_index = Minor Number / table index):

* version: attrs {component: "driver" | "cuda_driver", version}; once per file and value.
* gpu_inventory: attrs {pci, index, uuid, name, serial}; once per GPU and content.
* gpu_telemetry (one per GPU per snapshot): attrs {temperature, power_w, sm_clock_mhz,
  max_sm_clock_mhz, pstate, util, mem_used_mib, mem_total_mib, reasons (active names),
  reasons_mask (NVML bits)} for the values present.
* gpu_throttle (warning): when HW Slowdown / HW Thermal Slowdown / HW Power Brake
  Slowdown / SW Thermal Slowdown is Active; attrs {reasons (all active), mask,
  temperature, sm_clock_mhz}. Repeated identical snapshots of one GPU give one event.
* gpu_ecc: attrs {volatile_uncorrected, volatile_corrected, aggregate_uncorrected,
  aggregate_corrected, remapped_correctable, remapped_uncorrectable, remap_pending,
  remap_failure, sram_threshold_exceeded, retired_sbe, retired_dbe, retired_pending,
  channel_repair_pending, tpc_repair_pending, unrepairable_memory} (keys present only
  when the report has them); emitted only when something is non-zero/pending/failed.
  Severity: critical for volatile uncorrectable errors, remap failure, SRAM threshold
  or unrepairable memory; error for lifetime uncorrectable errors, uncorrectable
  remaps, pending remap/retirement; warning for volatile correctable; else info.
  Table rows give {volatile_uncorrected} from the "Volatile Uncorr. ECC" column.
* log_error (critical): a value ``[GPU requires reset]`` or ``Reset Required : Yes``.

Times: the ``Timestamp`` (or the ctime line above the table) is node-local, so
``ctx.local_ns``; a report without one gives time None.
"""

from __future__ import annotations

from typing import Any

import regex

from crashscope.schema import Kind, Severity
from crashscope.sources.base import MONTHS, FileSource, ParseContext, decode, normalize_pci
from crashscope.sources.base import lazy_compile

# NVML clocks event (formerly throttle) reason bits; nvidia-smi -q labels and the
# --query-gpu field suffixes map onto the same names.
REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
    "board_limit": 0x200,
    "reliability": 0x400,
}
# Reasons that mean the GPU is actually slowed by hardware or heat (not idle/power cap).
SERIOUS_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
SERIOUS_MASK = sum(REASON_BITS[r] for r in SERIOUS_REASONS)  # 0xE8

# -q labels that differ from the snake-cased label
_LABEL_TO_REASON = {"idle": "gpu_idle", "display clock setting": "display_clock_setting", "display clocks setting": "display_clock_setting"}


def reason_names(mask: int) -> list[str]:
    """NVML bitmask to reason names (unknown bits as ``bit_0x...``)."""
    names = [n for n, b in REASON_BITS.items() if mask & b]
    rest = mask & ~sum(REASON_BITS.values())
    if rest:
        names.append(f"bit_{rest:#x}")
    return names


def reason_from_label(label: str) -> str:
    low = label.strip().lower()
    return _LABEL_TO_REASON.get(low) or regex.sub(r"[^a-z0-9]+", "_", low).strip("_")


SENTINELS = frozenset({"n/a", "[n/a]", "[not supported]", "not supported", "unknown error", "[unknown error]",
                       "[insufficient permissions]", "insufficient permissions", "[gpu requires reset]",
                       "not found", "[unknown]", ""})


def is_sentinel(v: str | None) -> bool:
    return v is None or v.strip().lower() in SENTINELS


def ctime_ns(text: str, ctx: ParseContext) -> int | None:
    """``Mon Sep 14 08:12:44 2026`` (node-local) to UTC ns."""
    m = _CTIME.search(text)
    if not m or m.group("mon") not in MONTHS:
        return None
    return ctx.local_ns(int(m.group("y")), MONTHS[m.group("mon")], int(m.group("d")),
                        int(m.group("hh")), int(m.group("mi")), int(m.group("ss")))


_CTIME = lazy_compile(
    r"""(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?P<mon>[A-Z][a-z]{2})\s+(?P<d>\d{1,2})\s+
        (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)\s+(?P<y>\d{4})""",
    regex.VERBOSE,
)
_CTIME_LINE = lazy_compile(r"^\s*(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+\d{4}\s*$")

_LOG_BANNER = lazy_compile(r"^\s*=+NVSMI LOG=+\s*$", regex.MULTILINE)
# "key : value"; a bare "Key :" (rare) has an empty value. A PCI id has no ": " in it.
_KV = lazy_compile(r"^(?P<ind>\s*)(?P<key>\S.*?)\s*:(?:\s(?P<val>.*))?$")
# A pasted fragment of one GPU's -q section, its "GPU <pci>" header cut off (an issue
# comment quoting only "Remapped Rows"): a section heading, then indented key : value. The
# heading keeps its indentation, or loses it where the paste was dedented (a README quoting
# "Clocks Throttle Reasons" at column 0: tests/data/real/l4rz-idrac).
_SECTIONS = r"(?:Remapped Rows|ECC Errors|Retired Pages|Clocks Event Reasons|Clocks Throttle Reasons|GPU Reset Status|Temperature|Clocks)"
_FRAGMENT = lazy_compile(r"^(?P<ind>[ \t]*)" + _SECTIONS + r"[ \t]*\n[ \t]+\S[^\n]*?[ \t]:[ \t]", regex.MULTILINE)
_SECTION_HEAD = lazy_compile(r"^(?P<ind>[ \t]*)" + _SECTIONS + r"\s*$")
_GPU_HEAD = lazy_compile(r"^(?P<ind>\s*)GPU\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_NUM = lazy_compile(r"^\s*(-?\d+(?:\.\d+)?)")

_BANNER = lazy_compile(
    r"""NVIDIA-SMI\s+(?P<smi>\S+)\s+
        (?:Driver|KMD)\ Version:\s+(?P<drv>\S+)             # KMD on paravirtualized drivers
        (?:\s+CUDA(?:\ UMD)?\ Version:\s+(?P<cuda>[^\s|]+))?""",
    regex.VERBOSE,
)
_ROW1 = lazy_compile(
    r"""^\s*\|\s*(?P<idx>\d+)\s+(?P<name>.*?)\s+(?P<persist>On|Off|N/A)\s*
        \|\s*(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*
        \|\s*(?P<ecc>\S+)\s*\|""",
    regex.VERBOSE,
)
_ROW2 = lazy_compile(
    r"""^\s*\|\s*(?P<fan>\d+%|N/A)\s+(?P<temp>\d+C|N/A)\s+(?P<perf>P\d+|N/A)\s+
        (?P<pwr>\d+W|N/A)\s*/\s*(?P<cap>\d+W|N/A)\s*
        \|\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*
        \|\s*(?P<util>\d+%|N/A)\s""",
    regex.VERBOSE,
)


def _num(v: str | None) -> float | None:
    if is_sentinel(v):
        return None
    m = _NUM.match(v or "")
    if not m:
        return None
    x = float(m.group(1))
    return int(x) if x.is_integer() and "." not in m.group(1) else x


def _yes(v: str | None) -> bool | None:
    if is_sentinel(v):
        return None
    low = (v or "").strip().lower()
    if low in ("yes", "active", "true", "enabled"):
        return True
    if low in ("no", "not active", "false", "disabled"):
        return False
    return None


class _Gpu:
    """Values of one GPU section: path (lower-case labels) -> (value, line)."""

    def __init__(self, pci: str | None, line: int):
        self.pci = pci
        self.line = line
        self.values: dict[tuple[str, ...], tuple[str, int]] = {}
        # values by their first label, for under(): it is asked ~15 times a GPU, and a scan
        # of all ~300 values each time was most of a -q file's time (rebuilt when values grew)
        self._by_first: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        self._indexed = 0

    def get(self, *paths: tuple[str, ...]) -> str | None:
        for p in paths:
            if p in self.values:
                return self.values[p][0]
        return None

    def under(self, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
        n = len(prefix)
        if not n:
            return [(p, v) for p, (v, _) in self.values.items()]
        if self._indexed != len(self.values):  # values are only ever added
            self._by_first = {}
            for p, (v, _) in self.values.items():
                self._by_first.setdefault(p[0], []).append((p, v))
            self._indexed = len(self.values)
        return [(p, v) for p, v in self._by_first.get(prefix[0], ()) if p[:n] == prefix]


class NvidiaSmiSource(FileSource):
    name = "nvidia_smi"
    description = "nvidia-smi and nvidia-smi -q text reports"
    filename_hints = ("nvidia-smi*", "nvidia_smi*", "nvsmi*", "smi*.txt", "*nvidia-smi*.log")

    def sniff(self, head: str, name: str) -> float:
        if _LOG_BANNER.search(head):
            return 1.0
        if _GPU_LOST.search(head) or _NVML_MISMATCH.search(head):
            return 0.9
        m = _BANNER.search(head)
        if m:
            # A job log that printed the table at start is not ours to claim.
            first = [ln for ln in head[: m.start()].splitlines() if ln.strip()]
            return 0.9 if len(first) <= 3 else 0.4
        f = _FRAGMENT.search(head)
        if f and not [ln for ln in head[: f.start()].splitlines() if ln.strip()][3:]:
            return 0.6  # a headerless -q fragment at the top of the file
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        text, bad = decode(data)
        if bad:
            ctx.warn("invalid UTF-8 bytes replaced")
        lines = text.replace("\r\n", "\n").split("\n")
        _Parser(ctx).run(lines)
        _failures(lines, ctx)


def _failures(lines: list[str], ctx: ParseContext) -> None:
    """nvidia-smi's own error output: a GPU it can no longer reach, or NVML refusing the
    driver (the kernel module and the user-space library differ after an upgrade)."""
    for n, line in enumerate(lines, 1):
        if "Unable to determine" in line and (m := _GPU_LOST.search(line)):
            pci = normalize_pci(m.group("pci"))
            ctx.emit(Kind.LOG_ERROR, n, line.strip(), severity=Severity.CRITICAL, gpu=pci,
                     attrs={"error": "gpu_lost", "pci": pci, "detail": m.group("err").strip()})
        elif "Failed to initialize NVML" in line and _NVML_MISMATCH.search(line):
            ctx.emit(Kind.LOG_ERROR, n, line.strip(), severity=Severity.CRITICAL,
                     attrs={"error": "nvml_driver_library_mismatch"})


# "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error" (newer),
# "... for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU" (older)
_GPU_LOST = lazy_compile(
    r"Unable to determine the device handle for GPU\s?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]): (?P<err>.+)$"
)
_NVML_MISMATCH = lazy_compile(r"Failed to initialize NVML: Driver/library version mismatch")


class _Parser:
    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.time: int | None = None
        self.seen_versions: set[tuple[str, str]] = set()
        self.seen_inventory: set[tuple[Any, ...]] = set()
        self.last_throttle: dict[str, tuple[str, ...]] = {}
        self.last_ecc: dict[str, str] = {}
        self.reset_flagged: set[str] = set()
        self.had_gpu_head = False

    # -- shared emitters ----------------------------------------------------------------
    def tq(self):
        return self.ctx.local_quality() if self.time is not None else None

    def version(self, component: str, version: str, line: int, text: str) -> None:
        if is_sentinel(version) or (component, version) in self.seen_versions:
            return
        self.seen_versions.add((component, version))
        self.ctx.emit(Kind.VERSION, line, text.strip(), time=self.time, time_quality=self.tq(),
                      attrs={"component": component, "version": version})

    def inventory(self, line: int, pci: str | None, index: int | None, uuid: str | None, name: str | None,
                  serial: str | None) -> None:
        key = (pci, index, uuid, name, serial)
        if key in self.seen_inventory:
            return
        self.seen_inventory.add(key)
        attrs = {k: v for k, v in (("pci", pci), ("index", index), ("uuid", uuid), ("name", name), ("serial", serial))
                 if v is not None and not (isinstance(v, str) and is_sentinel(v))}
        self.ctx.emit(Kind.GPU_INVENTORY, line, f"GPU {index if index is not None else '?'} {pci or ''} {name or ''}".strip(),
                      time=self.time, time_quality=self.tq(), gpu=pci, gpu_index=index, attrs=attrs)

    def reset_required(self, line: int, pci: str | None, index: int | None, what: str) -> None:
        key = f"{pci}/{index}"
        if key in self.reset_flagged:
            return
        self.reset_flagged.add(key)
        self.ctx.emit(Kind.LOG_ERROR, line, f"GPU {pci or index}: {what}", severity=Severity.CRITICAL,
                      time=self.time, time_quality=self.tq(), gpu=pci, gpu_index=index,
                      attrs={"error": "gpu_requires_reset", "detail": what})

    # -- driver --------------------------------------------------------------------------
    def run(self, lines: list[str]) -> None:
        gpu: _Gpu | None = None
        stack: list[tuple[int, tuple[str, ...]]] = []  # (indent, path of lower-case labels) of open sections
        base_indent = 0
        pending_time: int | None = None  # ctime line seen just before a table banner
        in_table = False
        row1: dict[str, Any] | None = None
        for n, raw in enumerate(lines, 1):
            line = raw.rstrip()
            if not line.strip():
                continue
            try:
                # (each regex below only where its literal is in the line: they ran on
                # every line of every -q file, a third of its time)
                if "NVSMI LOG" in line and _LOG_BANNER.match(line):
                    if gpu:
                        self.finish_gpu(gpu)
                    gpu, stack, in_table = None, [], False
                    self.time = None
                    continue
                if line[-1].isdigit() and _CTIME_LINE.match(line):  # (it ends in the year; the line is rstripped)
                    pending_time = ctime_ns(line, self.ctx)
                    continue
                bm = _BANNER.search(line) if "NVIDIA-SMI" in line else None
                if bm:
                    if gpu:
                        self.finish_gpu(gpu)
                        gpu = None
                    self.time = pending_time
                    pending_time = None
                    in_table, row1 = True, None
                    self.version("driver", bm.group("drv"), n, line.strip(" |"))
                    if bm.group("cuda"):
                        self.version("cuda_driver", bm.group("cuda"), n, line.strip(" |"))
                    continue
                if in_table and line.lstrip().startswith(("|", "+")):
                    row1 = self.table_line(n, line, row1)
                    continue
                in_table = False
                gm = _GPU_HEAD.match(line) if "GPU" in line else None
                if gm:
                    self.had_gpu_head = True
                    if gpu:
                        self.finish_gpu(gpu)
                    gpu = _Gpu(normalize_pci(gm.group("pci")) or gm.group("pci").lower(), n)
                    base_indent = len(gm.group("ind"))
                    stack = []
                    continue
                kv = _KV.match(line)
                indent = len(line) - len(line.lstrip())
                if gpu is None and not kv and not self.had_gpu_head and (sm := _SECTION_HEAD.match(line)):
                    # a section of a GPU whose header was cut off: one GPU, no bus id
                    gpu = _Gpu(None, n)
                    base_indent = len(sm.group("ind")) - 1
                    stack = []
                if gpu is not None and indent <= base_indent:
                    # back at top level: the GPU section ended (e.g. "Unit" blocks)
                    self.finish_gpu(gpu)
                    gpu = None
                if gpu is None:
                    if kv:
                        self.top_level(n, kv.group("key"), kv.group("val") or "", line)
                    continue
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                label = (kv.group("key") if kv else line).strip().lower()
                path = (stack[-1][1] if stack else ()) + (label,)
                if kv:
                    val = (kv.group("val") or "").strip()
                    gpu.values.setdefault(path, (val, n))
                    if val.lower() == "[gpu requires reset]":
                        self.reset_required(n, gpu.pci, None, f"{kv.group('key').strip()}: [GPU requires reset]")
                stack.append((indent, path))
            except Exception as e:  # never let one odd line stop the file
                self.ctx.warn(f"unparsed nvidia-smi line ({type(e).__name__})", n, line)
        if gpu:
            self.finish_gpu(gpu)

    def top_level(self, n: int, key: str, val: str, line: str) -> None:
        k = key.strip().lower()
        if k == "timestamp":
            self.time = ctime_ns(val, self.ctx)
            if self.time is None:
                self.ctx.warn("unparsed nvidia-smi Timestamp", n, line)
        elif k in ("driver version", "kmd version"):
            self.version("driver", val.strip(), n, line)
        elif k in ("cuda version", "cuda umd version"):
            self.version("cuda_driver", val.strip(), n, line)

    # -- -q GPU section ----------------------------------------------------------------------
    def finish_gpu(self, g: _Gpu) -> None:
        ctx = self.ctx
        idx_v = _num(g.get(("minor number",)))
        index = int(idx_v) if isinstance(idx_v, (int, float)) else None
        uuid, name, serial = g.get(("gpu uuid",)), g.get(("product name",)), g.get(("serial number",))
        if uuid or name or index is not None:
            self.inventory(g.line, g.pci, index, uuid, name, serial)
        if _yes(g.get(("gpu reset status", "reset required"))):
            self.reset_required(g.values[("gpu reset status", "reset required")][1], g.pci, index, "Reset Required: Yes")

        # clocks event / throttle reasons (both headings); the "... Counters" block is µs totals
        active: list[str] = []
        saw_reasons = False
        for head in ("clocks event reasons", "clocks throttle reasons"):
            for p, v in g.under((head,)):
                if len(p) < 2:
                    continue
                saw_reasons = True
                if _yes(v):
                    active.append(reason_from_label(p[-1]))
        mask = sum(REASON_BITS.get(r, 0) for r in active)

        tel: dict[str, Any] = {}
        for key, paths in (
            ("temperature", [("temperature", "gpu current temp"), ("temperature", "gpu")]),
            ("power_w", [("gpu power readings", "power draw"), ("gpu power readings", "instantaneous power draw"),
                         ("power readings", "power draw"), ("gpu power readings", "average power draw")]),
            ("power_limit_w", [("gpu power readings", "current power limit"), ("power readings", "power limit"),
                               ("power readings", "enforced power limit")]),
            ("sm_clock_mhz", [("clocks", "sm")]),
            ("max_sm_clock_mhz", [("max clocks", "sm")]),
            ("util", [("utilization", "gpu")]),
            ("mem_used_mib", [("fb memory usage", "used")]),
            ("mem_total_mib", [("fb memory usage", "total")]),
        ):
            x = _num(g.get(*paths))
            if x is not None:
                tel[key] = x
        pstate = g.get(("performance state",))
        if not is_sentinel(pstate):
            tel["pstate"] = pstate
        if saw_reasons:
            tel["reasons"] = active
            tel["reasons_mask"] = mask
        if tel:
            msg = " ".join(f"{k}={v}" for k, v in tel.items() if k not in ("reasons",))
            ctx.emit(Kind.GPU_TELEMETRY, g.line, f"GPU {g.pci or '(bus id not shown)'} {msg}", time=self.time, time_quality=self.tq(),
                     gpu=g.pci, gpu_index=index, attrs=tel)

        serious = tuple(r for r in active if r in SERIOUS_REASONS)
        if serious:
            if self.last_throttle.get(g.pci) != tuple(active):
                attrs: dict[str, Any] = {"reasons": active, "mask": mask}
                for k in ("temperature", "sm_clock_mhz", "max_sm_clock_mhz", "power_w"):
                    if k in tel:
                        attrs[k] = tel[k]
                line = min((ln for p, (v, ln) in g.values.items()
                            if p[0] in ("clocks event reasons", "clocks throttle reasons") and _yes(v)), default=g.line)
                ctx.emit(Kind.GPU_THROTTLE, line, f"GPU {g.pci or '(bus id not shown)'} clocks slowed: {', '.join(active)}",
                         severity=Severity.WARNING, time=self.time, time_quality=self.tq(),
                         gpu=g.pci, gpu_index=index, attrs=attrs)
            self.last_throttle[g.pci] = tuple(active)
        else:
            self.last_throttle.pop(g.pci, None)

        self.ecc(g, index)

    def ecc(self, g: _Gpu, index: int | None) -> None:
        a: dict[str, Any] = {}

        def total(scope: str, kind: str) -> int | None:
            # R450+: SRAM/DRAM rows; pre-Ampere: Single Bit / Double Bit blocks with a Total row
            vals: list[int] = []
            old = "double bit" if kind == "uncorrectable" else "single bit"
            for p, v in g.under(("ecc errors", scope)):
                if len(p) != 3 and not (len(p) == 4 and p[2] == old):
                    continue
                leaf = p[-1]
                # (the row's name first, its number only for the rows counted: ~50 numbers a GPU were read for 8)
                if len(p) == 4:
                    if leaf != "total":
                        continue
                elif not (leaf.startswith(("sram ", "dram ")) and (
                    (kind == "uncorrectable" and "uncorrectable" in leaf)
                    or (kind == "correctable" and leaf.endswith("correctable") and "uncorrectable" not in leaf)
                )):
                    continue
                x = _num(v)
                if x is not None:
                    vals.append(int(x))
            return sum(vals) if vals else None

        for key, scope, kind in (("volatile_uncorrected", "volatile", "uncorrectable"),
                                 ("volatile_corrected", "volatile", "correctable"),
                                 ("aggregate_uncorrected", "aggregate", "uncorrectable"),
                                 ("aggregate_corrected", "aggregate", "correctable")):
            t = total(scope, kind)
            if t is not None:
                a[key] = t
        for key, paths in (
            ("remapped_correctable", [("remapped rows", "correctable error")]),
            ("remapped_uncorrectable", [("remapped rows", "uncorrectable error")]),
            ("retired_sbe", [("retired pages", "single bit ecc")]),
            ("retired_dbe", [("retired pages", "double bit ecc")]),
        ):
            x = _num(g.get(*paths))
            if x is not None:
                a[key] = int(x)
        for key, paths in (
            ("remap_pending", [("remapped rows", "pending")]),
            ("remap_failure", [("remapped rows", "remapping failure occurred")]),
            ("sram_threshold_exceeded", [("ecc errors", "aggregate", "sram threshold exceeded")]),
            ("retired_pending", [("retired pages", "pending page blacklist"), ("retired pages", "pending page retirement"),
                                 ("retired pages", "pending")]),
            ("channel_repair_pending", [("ecc errors", "channel repair pending")]),
            ("tpc_repair_pending", [("ecc errors", "tpc repair pending")]),
            ("unrepairable_memory", [("ecc errors", "unrepairable memory"), ("unrepairable memory",)]),
        ):
            b = _yes(g.get(*paths))
            if b is not None:
                a[key] = b
        if not any(v for v in a.values()):
            return
        sig = repr(sorted(a.items()))
        if self.last_ecc.get(g.pci) == sig:
            return
        self.last_ecc[g.pci] = sig
        if a.get("volatile_uncorrected") or a.get("remap_failure") or a.get("sram_threshold_exceeded") or a.get("unrepairable_memory"):
            sev = Severity.CRITICAL
        elif (a.get("aggregate_uncorrected") or a.get("remapped_uncorrectable") or a.get("remap_pending")
              or a.get("retired_pending") or a.get("retired_dbe") or a.get("channel_repair_pending") or a.get("tpc_repair_pending")):
            sev = Severity.ERROR
        elif a.get("volatile_corrected"):
            sev = Severity.WARNING
        else:
            sev = Severity.INFO
        line = min((ln for p, (v, ln) in g.values.items() if p[0] in ("ecc errors", "retired pages", "remapped rows")
                    and (_num(v) or _yes(v))), default=g.line)
        msg = " ".join(f"{k}={v}" for k, v in a.items() if v)
        self.ctx.emit(Kind.GPU_ECC, line, f"GPU {g.pci or '(bus id not shown)'} ECC: {msg}", severity=sev, time=self.time,
                      time_quality=self.tq(), gpu=g.pci, gpu_index=index, attrs=a)

    # -- plain table ------------------------------------------------------------------------------
    def table_line(self, n: int, line: str, row1: dict[str, Any] | None) -> dict[str, Any] | None:
        m1 = _ROW1.match(line)
        if m1:
            pci = normalize_pci(m1.group("pci"))
            idx = int(m1.group("idx"))
            name = m1.group("name").strip()
            # the table truncates long names ("NVIDIA GeForce ..."): keep them out of inventory
            self.inventory(n, pci, idx, None, None if name.endswith("...") else name, None)
            ecc = _num(m1.group("ecc"))
            if ecc:
                sig = f"table:{int(ecc)}"
                if self.last_ecc.get(pci or str(idx)) != sig:
                    self.last_ecc[pci or str(idx)] = sig
                    self.ctx.emit(Kind.GPU_ECC, n, f"GPU {idx} {pci}: Volatile Uncorr. ECC {int(ecc)}",
                                  severity=Severity.CRITICAL, time=self.time, time_quality=self.tq(),
                                  gpu=pci, gpu_index=idx, attrs={"volatile_uncorrected": int(ecc)})
            return {"pci": pci, "idx": idx}
        m2 = _ROW2.match(line)
        if m2 and row1 is not None:
            tel: dict[str, Any] = {}
            for key, grp in (("temperature", "temp"), ("power_w", "pwr"), ("power_limit_w", "cap"),
                             ("util", "util"), ("mem_used_mib", "used"), ("mem_total_mib", "total")):
                x = _num(m2.group(grp))
                if x is not None:
                    tel[key] = x
            if m2.group("perf") != "N/A":
                tel["pstate"] = m2.group("perf")
            self.ctx.emit(Kind.GPU_TELEMETRY, n, f"GPU {row1['idx']} " + " ".join(f"{k}={v}" for k, v in tel.items()),
                          time=self.time, time_quality=self.tq(), gpu=row1["pci"], gpu_index=row1["idx"], attrs=tel)
            return None
        if "[GPU requires reset]" in line or "GPU requires reset" in line:
            self.reset_required(n, row1["pci"] if row1 else None, row1["idx"] if row1 else None, line.strip(" |"))
        return row1


SOURCE = NvidiaSmiSource()
