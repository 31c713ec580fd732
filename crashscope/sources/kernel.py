"""Kernel logs: dmesg, /dev/kmsg, journalctl and syslog containers; NVRM Xid/SXid, mlx5
link events, NFS/Lustre stalls, hung tasks, OOM killer, AER, MCE/EDAC, panics, segfaults.

Sample lines (composed in the real formats)::

    [ 9120.330217] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    ^ seconds since boot (dmesg raw; time=None, attrs mono/boot)
                                  ^ PCI dom:bus:dev (no function; normalised to 0000:3b:00.0)
                                               ^ Xid code  ^ pid/name of the channel owner, then free text
    Sep 14 08:12:44 node003 kernel: nfs: server fs01 not responding, still trying
    ^ year-less local receive time (journalctl -o short / RFC 3164 syslog) ^ host

Containers (one line each): dmesg raw ``[ sec.usec] msg`` (optionally ``[T123]`` caller,
``dmesg -x`` ``kern  :err   : `` prefix, ``dmesg -r`` ``<3>``), ``dmesg -T``
``[Mon Sep 14 08:12:44 2026] msg`` (local), ``dmesg --time-format iso`` (exact),
``/dev/kmsg`` ``prio,seq,usec,flags;msg`` (mono), journalctl ``short``/``short-precise``
(year-less local), ``short-iso``/``short-iso-precise`` and RFC 3339 syslog (exact),
``short-monotonic`` (mono), ``-o json`` (``__REALTIME_TIMESTAMP`` exact) and RFC 3164 syslog
with or without the kernel's ``[ sec.usec]`` stamp. Only ``kernel`` ident lines give events.

Every event carries, when the line has them: attrs ``mono`` (seconds since boot as a string
with 6 decimals) and ``boot`` (0-based boot counter within the file, incremented when the
monotonic stamp goes backwards); JSON records carry ``mono`` and ``boot_id`` instead. A line
with only a monotonic stamp gets time=None: the timeline converts it with the boot epoch.

Kinds and attrs:

* boot: kernel (release string). Also version {component: "kernel", version}.
* version: component "driver", version, flavor (open|proprietary), arch.
* xid: xid (int), pci, gpu_instance, compute_instance, pid (int or "<unknown>"), name, text,
  mnemonic, description, category (APP/MEM/PCIE/NVL/FW/GPU/PWR/SYM; None when the code is
  not in the catalog), action (NVIDIA immediate-action bucket); Xid 154 adds
  recovery_action. gpu column = pci.
* sxid: sxid (int), pci, nvswitch (index), fatal (bool), text.
* gpu_inventory: pci, uuid (``NVRM: GPU at PCI:...: GPU-...``).
* log_error: NVRM "GPU has fallen off the bus" / "RmInitAdapter failed" with pci, what.
* link_event: device (pci), ifname, module, state (plugged|unplugged|error|disabled|down|
  up|health_compromised|fatal_error), error (port-module error text), driver.
* storage_error / storage_recovered: fs (nfs|lustre), server (NFS server or Lustre NID),
  target (Lustre target), obd, program (RPC program), state (not_responding|timed_out|ok|
  lost|restored|evicted|request_timeout|op_failed), op, rc.
  storage_recovered for NFS: stall_seconds (first 'not responding' to 'OK' on the same host and
  server, by wall time or, within one boot, the monotonic stamp; absent when not known).
* hung_task: comm, pid (None when the reporter redacted it; pid_redacted keeps the token),
  seconds, subsystem (nfs|lustre|gpfs|nvidia|rdma|localfs|other; localfs = jbd2/ext4/xfs/btrfs),
  top_frames (up to 6 non-scheduler symbols), modules (module names seen in the trace).
* host_oom: comm, pid, uid, invoker, constraint, oom_memcg, task_memcg, job_id, step, task,
  anon_rss_kb, cgroup (bool: memcg OOM). job_id column from the Slurm cgroup path.
* pcie_error: severity (corrected|non_fatal|fatal|multiple...), device (reporting port),
  source_device, driver, error_type (PCIe layer from the following "PCIe Bus Error" line).
* mce: type (machine_check|events_logged|edac), cpu, bank, status, uncorrected (bool),
  addr, mc, count, error (CE|UE), location.
* kernel_panic: type (panic|oops|soft_lockup|hard_lockup|rcu_stall), reason, cpu, seconds,
  comm, pid.
* segfault: comm, pid, type (segfault|general_protection|trap), address, library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import regex

from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import MONTHS, LineSource, feed_guarded, ParseContext, iso_to_ns, normalize_pci, split_prefix
from crashscope.sources.base import lazy_compile

# -- Xid catalog (shared/reference/kernel-and-xid.md §2.3, NVIDIA Xid catalog, Ampere+) ------
# code: (mnemonic, description, immediate action, crashscope category). Mnemonics the
# reference abbreviates ("..._FECS_...") keep only the part it spells out.
_XID_ROWS: list[tuple[Sequence[int], str, str, str | None, str]] = [
    ((8,), "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "GPU"),
    ((11,), "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP", "APP"),
    ((13,), "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", "APP"),
    ((14,), "ROBUST_CHANNEL_FAKE_ERROR", "Injected error", "IGNORE", "SYM"),
    ((25,), "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP", "APP"),
    ((31,), "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", "APP"),
    ((32,), "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", "PCIE"),
    ((37,), "FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE", "FW"),
    ((38,), "FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE", "FW"),
    ((39,), "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", "GPU"),
    ((40,), "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", "GPU"),
    ((41,), "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", "GPU"),
    ((43,), "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", "APP"),
    ((44,), "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE", "GPU"),
    ((45,), "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", "SYM"),
    ((46,), "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", "GPU"),
    ((48,), "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", "MEM"),
    ((54,), "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS", "PWR"),
    ((60,), "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", "FW"),
    ((61,), "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", "CONTACT_SUPPORT", "FW"),
    ((62,), "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", "FW"),
    ((63,), "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", "MEM"),
    ((64,), "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", "MEM"),
    ((66,), "FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE", "FW"),
    ((67,), "FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE", "FW"),
    ((68,), "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", "GPU"),
    ((69,), "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", "APP"),
    ((74,), "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "NVL"),
    ((78,), "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", "FW"),
    ((79,), "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "PCIE"),
    ((80,), "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", "PCIE"),
    ((82,), "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP", "GPU"),
    ((85,), "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP", "GPU"),
    ((86,), "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP", "GPU"),
    ((92,), "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "MEM"),
    ((93,), "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE", "FW"),
    ((94,), "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", "MEM"),
    ((95,), "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", "MEM"),
    ((106,), "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE", "SYM"),
    ((107,), "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message", "IGNORE", "SYM"),
    ((108,), "NVLINK_REMOTE_TRANSLATION_ERROR", "NVLink remote translation error", "IGNORE", "NVL"),
    ((109,), "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", "GPU"),
    ((110,), "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "GPU"),
    ((119,), "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "FW"),
    ((120,), "GSP_ERROR", "GSP Error", "RESET_GPU", "FW"),
    ((121,), "C2C_ERROR", "C2C Error", "IGNORE", "NVL"),
    ((136,), "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", "NVL"),
    ((137,), "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", "APP"),
    ((139,), "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP", "GPU"),
    ((140,), "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", "MEM"),
    ((141,), "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE", "FW"),
    ((142,), "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT", "GPU"),
    ((143,), "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", "GPU"),
    ((144,), "NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((145,), "NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((146,), "NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((147,), "NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((148,), "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((149,), "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((150,), "NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", "NVL"),
    ((151,), "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", "FW"),
    ((154,), "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", "SYM"),
    ((155,), "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU", "NVL"),
    ((156,), "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", "MEM"),
    ((157,), "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE", "MEM"),
    ((158,), "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", "GPU"),
    ((159,), "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM", "NVL"),
    ((160,), "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", "FW"),
    ((161,), "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", "FW"),
    ((162,), "PSHC_REENGAGED", "Power Smoothing HW circuitry re-engaged", None, "PWR"),
    ((163,), "PSHC_DISENGAGED", "Power Smoothing HW circuitry disengaged", None, "PWR"),
    ((164,), "PSHC_LOW_LIFETIME", "Power Smoothing HW circuitry low lifetime", None, "PWR"),
    ((165,), "PSHC_ZERO_LIFETIME", "Power Smoothing HW circuitry zero lifetime", None, "PWR"),
    ((166,), "NVLINK_SECURE_CRYPTO_ERR", "NVLink secure crypto error", None, "NVL"),
    ((167,), "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", None, "PCIE"),
    ((168,), "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR", None, "MEM"),
    ((169,), "SEC2_HALT_ERROR", "Internal micro-controller halt", None, "FW"),
    ((170,), "NVLINK_SECURE_OTHER", "NVLink secure error", None, "NVL"),
    ((171,), "UNCORRECTABLE_DRAM_ERROR", "Additional to Xid 48 (DRAM)", None, "MEM"),
    ((172,), "UNCORRECTABLE_SRAM_ERROR", "Additional to Xid 48 (SRAM)", None, "MEM"),
]
# Numbered engine families: (codes, mnemonic template, description template).
for _codes, _first, _mn, _desc in (
    ((70, 71, 72, 75, 76, 77), 3, "ROBUST_CHANNEL_CE{}_ERROR", "CE{}: Unknown Error"),
    ((83, 84, 88, 89, 96, 97, 98), 1, "ROBUST_CHANNEL_NVDEC{}_ERROR", "NVDEC{} Error"),
    ((99, 100, 101, 102, 103, 104, 105), 1, "ROBUST_CHANNEL_NVJPG{}_ERROR", "NVJPG{} Error"),
    (tuple(range(126, 136)), 10, "ROBUST_CHANNEL_CE{}_ERROR", "CE{}: Unknown Error"),
):
    for _i, _c in enumerate(_codes):
        _XID_ROWS.append(((_c,), _mn.format(_first + _i), _desc.format(_first + _i), "RESTART_APP" if _mn.startswith("ROBUST") else None, "GPU"))

XID_CATALOG: dict[int, dict[str, str | None]] = {
    code: {"mnemonic": mn, "description": desc, "action": act, "category": cat}
    for codes, mn, desc, act, cat in _XID_ROWS
    for code in codes
}

# Hardware Xids that end the job / need a reset: critical. Others of a HW category: error.
_XID_FATAL = {46, 48, 62, 64, 74, 79, 94, 95, 109, 110, 119, 120, 136, 140, 143, 158, 167, 171, 172}
_XID_NVLINK5 = set(range(144, 151))  # severity depends on the sub-code: read Fatal/Non-fatal in the text
_HW_CATEGORIES = {"MEM", "PCIE", "NVL", "GPU", "FW", "PWR"}


def xid_severity(xid: int, category: str | None, text: str) -> Severity:
    if category == "SYM":
        if xid == 154:
            m = _XID154.search(text)
            return Severity.ERROR if m and m.group("to_name").strip().lower() != "none" else Severity.WARNING
        return Severity.WARNING
    if category == "APP":
        return Severity.ERROR
    if category == "PWR":
        return Severity.ERROR if xid == 54 else Severity.WARNING
    if category in _HW_CATEGORIES:
        if xid in _XID_FATAL:
            return Severity.CRITICAL
        if xid in _XID_NVLINK5:
            low = text.lower()
            return Severity.CRITICAL if "fatal" in low.replace("non-fatal", "").replace("nonfatal", "") else Severity.ERROR
        return Severity.ERROR
    return Severity.ERROR


# -- prefilter ---------------------------------------------------------------------------------
# Rust-regex compatible (no lookaround/backrefs). One alternative per message family; the
# stack-frame pattern lets hung-task traces through, "Call Trace:"/"task:" keep them adjacent.
_PREFILTER_PARTS = [
    r"Linux version \d",
    r"NVRM: (?:loading NVIDIA|Xid |GPU at PCI:|GPU [0-9a-fA-F]{4}:)",
    r"NVRM version: ",
    r"SXid \(",
    r"Port module event",
    r": Link (?:down|up)",
    r"NIC Link is (?:Up|Down)",
    r"health compromised",
    r"Fatal error \d+ detected",
    r": server \S+ (?:not responding|OK)",
    r"was lost; in progress operations",
    r"Connection restored to ",
    r"This client was evicted by",
    r"Request sent has (?:timed out|failed)",
    r"Lustre(?:Error)?: .*failed: rc = -",
    r"INFO: task .{1,64} blocked for more than",
    r"hung_task_timeout_secs",
    r"Call Trace:",
    r"task:\S+ +state:",
    r"\+0x[0-9a-f]+/0x[0-9a-f]+",
    r"invoked oom-killer",
    r"oom-kill:constraint=",
    r"Kill(?:ed)? process \d+ \(",
    r"AER: ",
    r"PCIe Bus Error: ",
    r"mce: \[Hardware Error\]",
    r"Machine check events logged",
    r"EDAC \S+: \d+ [CU]E ",
    r"Kernel panic - not syncing",
    r"BUG: (?:unable to handle|kernel NULL pointer|soft lockup)",
    r"detected hard LOCKUP",
    r"detected stalls? on CPU",
    r"\]: segfault at ",
    r"traps: \S+\[\d+\] ",
]
PREFILTER = "|".join(_PREFILTER_PARTS)

# -- containers --------------------------------------------------------------------------------
_MON = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_KMSG = lazy_compile(r"^(?P<prio>\d{1,4}),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_RAWPRIO = lazy_compile(r"^<\d{1,3}>")
# dmesg -x: facility and level names padded with spaces, e.g. "kern  :err   : "
_DMESG_X = lazy_compile(r"^(?P<fac>[a-z]+[0-9]?)\s*:(?P<lvl>emerg|alert|crit|err|warn|notice|info|debug)\s*:\s")
_WALL = lazy_compile(
    rf"""^(?:
        (?P<iso>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{{1,9}})?(?:Z|[+-]\d\d:?\d\d)?)        # dmesg iso / short-iso / RFC 3339
      | (?P<bsd>(?P<bmon>{_MON})\s{{1,2}}(?P<bday>\d{{1,2}})\s(?P<bh>\d\d):(?P<bm>\d\d):(?P<bs>\d\d)(?:\.(?P<bfrac>\d{{1,9}}))?)  # syslog / journal short
      | \[(?P<ctime>[A-Z][a-z]{{2}}\s(?P<cmon>{_MON})\s{{1,2}}(?P<cday>\d{{1,2}})\s(?P<ch>\d\d):(?P<cm>\d\d):(?P<cs>\d\d)\s(?P<cyear>\d{{4}}))\]  # dmesg -T
    )\s?""",
    regex.VERBOSE,
)
_MONO = lazy_compile(r"^\[\s*(?P<sec>\d+)\.(?P<frac>\d{1,9})\]\s?")
_CALLER = lazy_compile(r"^\[\s*[TC]\d+\]\s?")
_HOST_KERNEL = lazy_compile(r"^(?P<host>[\w.:-]+)\skernel:\s?")
# Another daemon's syslog line: "host ident[pid]: " (bsd stamps always have host+ident).
_HOST_OTHER = lazy_compile(r"^(?P<host>[\w.:-]+)\s(?P<ident>[^\s:\[]+)(?:\[\d+\])?:\s")
_HOST_OTHER_PID = lazy_compile(r"^(?P<host>[\w.:-]+)\s(?P<ident>[^\s:\[]+)\[\d+\]:\s")
# talosctl dmesg (siderolabs/talos, the kernel ring buffer of each node it asks):
# "<node>: <facility>: <severity, right-aligned to 7>: [<RFC 3339 time, UTC>]: <message>",
# e.g. "10.5.0.3: kern:    info: [2022-07-28T11:49:42.505423063Z]: cni0: ...".
_TALOS = lazy_compile(
    r"^(?P<host>[\w.:-]+): (?P<fac>[a-z]+[0-9]?): {0,6}(?:emerg|alert|crit|err|warning|notice|info|debug): "
    r"\[(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d))\]: ?"
)


@dataclass(slots=True)
class _Line:
    msg: str
    time: int | None = None
    quality: TimeQuality | None = None
    host: str | None = None
    mono_us: int | None = None
    boot_id: str | None = None


def _frac_ns(frac: str | None) -> int:
    return int((frac + "000000000")[:9]) if frac else 0


# `grep -r ... /var/log` output: "messages:Jun 17 20:18:09 host kernel: ...", "kern.log.1:...",
# "logs/node3/dmesg.txt:120:[ 12.3] ..." (the file, an optional line number, no space after the colon)
_GREP_PREFIX = lazy_compile(
    r"^(?:\./)?(?:[\w.@+-]+/)*(?:messages|syslog|kern\.log|kernel\.log|dmesg|journal|[\w.@+-]+\.(?:log|txt|out))(?:[.-]\d+)?(?::\d+)?:(?=[A-Z\[<0-9])"
)


def _container(text: str, ctx: ParseContext, n: int | None = None) -> _Line | None:
    """Strip the container prefix of one line. None: not a kernel line (another daemon)."""
    if text.startswith("{"):
        return _json_line(text, ctx, n)
    if gm := _GREP_PREFIX.match(text):
        text = text[gm.end():]
    if tm := _TALOS.match(text):
        if tm.group("fac") != "kern":
            return None  # another facility's record (talosctl dmesg shows the whole ring buffer)
        talos = _Line(text[tm.end():], host=tm.group("host"))
        talos.time, talos.quality = iso_to_ns(tm.group("iso"), ctx)
        return talos
    m = _KMSG.match(text)
    if m:
        return _Line(m.group("msg"), mono_us=int(m.group("usec")))
    rest = text
    m = _RAWPRIO.match(rest)
    if m:
        rest = rest[m.end():]
    m = _DMESG_X.match(rest)
    if m:
        rest = rest[m.end():]
    out = _Line("")
    m = _WALL.match(rest)
    if m:
        rest = rest[m.end():]
        if m.group("iso"):
            out.time, out.quality = iso_to_ns(m.group("iso"), ctx)
            if out.time is not None and out.quality != TimeQuality.EXACT:
                out.quality = ctx.local_quality()
            hm = _HOST_KERNEL.match(rest)
            if hm:
                out.host, rest = hm.group("host"), rest[hm.end():]
            elif _HOST_OTHER_PID.match(rest):
                return None
        elif m.group("bsd"):
            out.time = ctx.yearless_ns(MONTHS[m.group("bmon")], int(m.group("bday")), int(m.group("bh")), int(m.group("bm")), int(m.group("bs")), _frac_ns(m.group("bfrac")))
            out.quality = ctx.local_quality() if out.time is not None else None
            hm = _HOST_KERNEL.match(rest)
            if hm:
                out.host, rest = hm.group("host"), rest[hm.end():]
            elif _HOST_OTHER.match(rest):
                return None
        else:
            out.time = ctx.local_ns(int(m.group("cyear")), MONTHS[m.group("cmon")], int(m.group("cday")), int(m.group("ch")), int(m.group("cm")), int(m.group("cs")))
            out.quality = ctx.local_quality() if out.time is not None else None
    m = _MONO.match(rest)
    if m is None and out.time is None and rest[:1] in (" ", "\t"):
        # a console excerpt pasted with indentation (a forum code block, a quoted ticket):
        # "    [  959.792370] nfs: ..." is still a dmesg line with its monotonic stamp
        lead = rest.lstrip(" \t")
        if (lm := _MONO.match(lead)) is not None:
            rest, m = lead, lm
    if m:
        out.mono_us = int(m.group("sec")) * 1_000_000 + _frac_ns(m.group("frac")) // 1000
        rest = rest[m.end():]
        if out.host is None:  # journalctl -o short-monotonic: "[ 8123.456789] node001 kernel: msg"
            hm = _HOST_KERNEL.match(rest)
            if hm:
                out.host, rest = hm.group("host"), rest[hm.end():]
            elif _HOST_OTHER_PID.match(rest):
                return None
    m = _CALLER.match(rest)
    if m:
        rest = rest[m.end():]
    out.msg = rest
    return out


def _json_line(text: str, ctx: ParseContext, n: int | None) -> _Line | None:
    try:
        obj = json.loads(text)
    except ValueError:
        if "MESSAGE" in text or "__REALTIME" in text:
            ctx.warn("unparseable journal JSON record", n, text)
        return None
    if not isinstance(obj, dict):
        return None
    if obj.get("_TRANSPORT", "kernel") != "kernel" and obj.get("SYSLOG_IDENTIFIER") != "kernel":
        return None
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):  # journald stores non-UTF-8 messages as byte arrays
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "backslashreplace")
        except (TypeError, ValueError):
            msg = None
    if not isinstance(msg, str):
        return None
    out = _Line(msg)
    try:
        rt = obj.get("__REALTIME_TIMESTAMP")
        if rt is not None:
            out.time, out.quality = int(rt) * 1000, TimeQuality.EXACT
        mono = obj.get("_SOURCE_MONOTONIC_TIMESTAMP")
        if mono is not None:
            out.mono_us = int(mono)
    except (TypeError, ValueError):
        pass
    host = obj.get("_HOSTNAME")
    out.host = host if isinstance(host, str) and host else None
    bid = obj.get("_BOOT_ID")
    out.boot_id = bid if isinstance(bid, str) else None
    return out


# -- message patterns ------------------------------------------------------------------------------
_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

_LINUX_VERSION = lazy_compile(r"^Linux version (?P<kernel>\S+)")
_NVRM_LOAD = lazy_compile(
    r"""NVRM(?::\ loading|\ version:)\ NVIDIA\ UNIX\s
        (?:Open\ Kernel\ Module\ for\ (?P<arch_open>\S+)|(?P<arch>\S+)\ Kernel\ Module)
        \s+(?P<ver>\d+\.\d+(?:\.\d+)?)\b""",
    regex.VERBOSE,
)
_XID = lazy_compile(
    r"""NVRM:\ Xid\ \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})
        (?:\ GPU-I:(?P<gi>\d+))?(?:\ GPU-CI:(?P<ci>\d+))?\):\s*
        (?P<xid>\d+)
        (?:,\s*pid=(?P<pid>'<unknown>'|\d+))?      # absent on very old drivers
        (?:,\s*name=(?P<name>[^,]*))?               # added around R525
        (?:,\s*(?P<text>.*))?$""",
    regex.VERBOSE,
)
_XID154 = lazy_compile(r"recovery action changed from (?P<from>0x[0-9a-fA-F]+) \((?P<from_name>[^)]*)\) to (?P<to>0x[0-9a-fA-F]+) \((?P<to_name>[^)]*)\)")
_GPU_UUID = lazy_compile(r"NVRM: GPU at PCI:(?P<pci>" + _BDF + r"): (?P<uuid>GPU-[0-9a-fA-F-]{36})")
_GPU_FALLEN = lazy_compile(r"NVRM: GPU (?:at PCI:)?(?P<pci>" + _BDF + r"):? (?P<what>GPU has fallen off the bus|RmInitAdapter failed!?)")
_SXID = lazy_compile(r"(?:nvidia-nvswitch(?P<sw>\d+): )?SXid \(PCI:(?P<pci>" + _BDF + r")\): (?P<sxid>\d+),\s*(?P<text>.*)$")

# "mlx5_core 0000:17:00.0: [port_module:252:(pid 0): ]Port module event[error]: module 0, Cable error, High Temperature"
_DEV_PREFIX = r"(?P<driver>[\w-]+)(?:\ (?P<dev>" + _BDF + r"))?(?:\ (?P<ifname>[\w.@-]+))?:\ (?:\w+:\d+:\(pid\ \d+\):\ )?"
_PORT_MODULE = lazy_compile(
    _DEV_PREFIX + r"Port\ module\ event(?P<err>\[error\])?:\ module\ (?P<module>\d+),\ (?P<status>[^,]+)(?:,\ (?P<error>.+))?$",
    regex.VERBOSE,
)
_NETDEV_LINK = lazy_compile(r"(?P<driver>[\w-]+) (?P<dev>" + _BDF + r") (?P<ifname>[\w.@-]+): Link (?P<state>down|up)\b")
_NIC_LINK = lazy_compile(r"(?:(?P<driver>[\w-]+) (?P<dev>" + _BDF + r")(?: (?P<ifname>[\w.@-]+))?:|(?P<ifname2>[\w.@-]+):?) NIC Link is (?P<state>Up|Down)")
_MLX5_HEALTH = lazy_compile(_DEV_PREFIX + r"(?P<what>device's\ health\ compromised|Fatal\ error\ (?P<code>\d+)\ detected)", regex.VERBOSE)

_NFS = lazy_compile(r"(?P<prog>[\w.-]+): server (?P<server>\S+) (?:not responding, (?P<how>still trying|timed out)|(?P<ok>OK))\s*$")
_LUSTRE_LOST = lazy_compile(
    r"""(?P<obd>\S+):\ Connection\ to\ (?:service\ )?(?P<target>\S*)\ (?:\(at\ (?P<nid>[^)]+)\)|via\ nid\ (?P<nid2>\S+))
        \ was\ lost;\ in\ progress\ operations\ using\ this\ service\ will\ (?P<will>wait|fail)""",
    regex.VERBOSE,
)
_LUSTRE_RESTORED = lazy_compile(r"(?P<obd>\S+): Connection restored to (?:service )?(?P<target>\S*)\s*(?:\(at (?P<nid>[^)]+)\)|using nid (?P<nid2>\S+?)\.?$)")
_LUSTRE_EVICTED = lazy_compile(r"(?P<obd>\S+): This client was evicted by (?P<target>[^;\s]+)")
_LUSTRE_EXPIRE = lazy_compile(
    r"""Request\ sent\ has\ (?P<what>timed\ out|failed\ due\ to\ network\ error)(?:\ for\ (?P<why>[\w ]+?))?:
        .*?\ o(?P<opc>\d+)->(?P<obd>[^@\s]+)@(?P<nid>[^:\s]+):""",
    regex.VERBOSE,
)
_LUSTRE_OPFAIL = lazy_compile(r"(?P<obd>\S+): operation (?P<op>\w+) to node (?P<nid>\S+) failed: rc = (?P<rc>-?\d+)")
_LUSTRE_OBD_TARGET = lazy_compile(r"^(?P<target>.+?)-(?:osc|mdc|lwp|mgc|osp)-")

# kernel/hung_task.c: "INFO: task %s:%d blocked for more than %ld seconds." Reporters who paste
# the message into a ticket or forum often redact the pid ("python:XXXX", "$NAME:$PID"): the
# report is still a hung task, with the pid unknown.
_HUNG = lazy_compile(r"INFO: task (?P<comm>.+):(?:(?P<pid>\d+)|(?P<redacted>[^\s:\d][^\s:]*)) blocked for more than (?P<sec>\d+) seconds\.")
_FRAME = lazy_compile(r"^\s*(?:\[<[0-9a-fA-F]+>\]\s*)?(?:\?\s+)?(?P<sym>[\w.$]+)\+0x[0-9a-f]+/0x[0-9a-f]+(?:\s+\[(?P<mod>[\w-]+)\])?")
_HUNG_CONT = lazy_compile(r"Call Trace:|hung_task_timeout_secs|^task:\S+ +state:")
# 32-bit ARM unwinder (arch/arm/kernel/traps.c dump_backtrace_entry):
# "[<%08lx>] (%ps) from [<%08lx>] (%pS)": the function, then its caller with offset.
_ARM_FRAME = lazy_compile(
    r"^\s*\[<[0-9a-fA-F]+>\] \((?P<sym>[\w.$]+)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)?(?: \[(?P<mod>[\w-]+)\])?\)"
    r" from \[<[0-9a-fA-F]+>\] \((?P<csym>[\w.$]+)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)?(?: \[(?P<cmod>[\w-]+)\])?\)"
)

_OOM_INVOKED = lazy_compile(r"^(?P<comm>.+?) invoked oom-killer: ")
_OOM_KILL = lazy_compile(r"oom-kill:(?P<kv>constraint=.*)$")
_OOM_KV = lazy_compile(r"(?P<k>\w+)=(?P<v>[^,]*(?:,(?!\w+=)[^,]*)*)")
_OOM_KILLED = lazy_compile(
    r"""(?P<memcg>Memory\ cgroup\ out\ of\ memory:\ )?(?:Out\ of\ memory:\ )?(?:Out\ of\ memory\ \(oom_kill_allocating_task\):\ )?
        Kill(?P<done>ed)?\ process\ (?P<pid>\d+)\ \((?P<comm>[^)]*)\)(?P<rest>.*)$""",
    regex.VERBOSE,
)
_ANON_RSS = lazy_compile(r"anon-rss:(?P<kb>\d+)kB")
_SLURM_JOB = lazy_compile(r"job_(?P<job>\d+)")
_SLURM_STEP = lazy_compile(r"step_(?P<step>[\w]+?)(?:/|$|,)")
_SLURM_TASK = lazy_compile(r"task_(?P<task>\d+)")

# Old kernels: "AER: Corrected error received: 0000:18:00.0" / "id=0018"; since ~6.8:
# "AER: Correctable error message received from 0000:18:00.0".
_AER = lazy_compile(
    r"""(?:(?P<driver>[\w-]+)\ (?P<dev>""" + _BDF + r"""):\ )?AER:\ (?P<multi>Multiple\ )?
        (?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)(?:\ \((?P<fatal>Fatal|Non-Fatal)\))?
        \ error(?:\ message)?\ received(?::\ |\ from\ )(?P<src>(?:id=)?[0-9a-fA-F:.]+)""",
    regex.VERBOSE,
)
_AER_SEVERITY = {"corrected": Severity.WARNING, "non_fatal": Severity.ERROR, "fatal": Severity.CRITICAL}
_AER_DETAIL = lazy_compile(r"PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+)")

_MCE = lazy_compile(r"mce: \[Hardware Error\]: CPU (?P<cpu>\d+): Machine Check(?: Exception)?: (?P<code>\S+) Bank (?P<bank>\d+): (?P<status>[0-9a-fA-F]{16})")
_MCE_CONT = lazy_compile(r"mce: \[Hardware Error\]: (?:TSC \S+ )?(?:ADDR (?P<addr>[0-9a-fA-F]+))?")
_MCE_LOGGED = lazy_compile(r"Machine check events logged")
_EDAC = lazy_compile(r"EDAC (?P<mc>\S+?): (?P<count>\d+) (?P<kind>CE|UE) (?P<what>.*?)(?: on (?P<loc>\S+))?(?: \(.*)?$")

_PANIC = lazy_compile(r"Kernel panic - not syncing: ?(?P<reason>.*)$")
_OOPS = lazy_compile(r"BUG: (?P<reason>unable to handle .*|kernel NULL pointer dereference.*)$")
_SOFT_LOCKUP = lazy_compile(r"BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<sec>\d+)s! \[(?P<comm>.*):(?P<pid>\d+)\]")
_HARD_LOCKUP = lazy_compile(r"Watchdog detected hard LOCKUP on cpu (?P<cpu>\d+)")
_RCU_STALL = lazy_compile(r"INFO: (?P<flavor>rcu_\w+) (?:self-)?detected stalls? on CPU")

_SEGV = lazy_compile(
    r"""(?P<comm>[^\s\[]+(?:\ [^\s\[]+)*)\[(?P<pid>\d+)\]:\ segfault\ at\ (?P<addr>[0-9a-fA-F]+)\ ip\ (?P<ip>[0-9a-fA-F]+)
        \ sp\ (?P<sp>[0-9a-fA-F]+)\ error\ (?P<err>[0-9a-fA-F]+)(?:\ in\ (?P<lib>[^\[\s]+)\[)?""",
    regex.VERBOSE,
)
_TRAP = lazy_compile(r"traps: (?P<comm>[^\[]+)\[(?P<pid>\d+)\] (?P<what>general protection fault|trap [\w ]+?) ip:(?P<ip>[0-9a-fA-F]+)(?:.*? in (?P<lib>[^\[\s]+)\[)?")

_SCHED_FRAMES = {
    "__schedule", "schedule", "schedule_timeout", "io_schedule", "io_schedule_timeout", "schedule_preempt_disabled",
    "__wait_on_bit", "out_of_line_wait_on_bit", "bit_wait_io", "bit_wait", "__mutex_lock", "mutex_lock",
    "__mutex_lock_slowpath", "rwsem_down_write_slowpath", "rwsem_down_read_slowpath", "wait_for_completion",
    "__wait_for_common", "wait_for_common", "ret_from_fork", "kthread", "entry_SYSCALL_64_after_hwframe",
    "do_syscall_64", "__x64_sys_ioctl", "__x64_sys_read", "__x64_sys_write", "ksys_read", "ksys_write",
    "vfs_read", "vfs_write", "__x64_sys_openat", "do_sys_openat2", "x64_sys_call", "__x64_sys_fsync",
}
_SUBSYS_MODULES = {
    "nfs": {"sunrpc", "nfs", "nfsv4", "nfsv3", "nfsv2", "lockd", "rpcsec_gss_krb5", "auth_rpcgss", "nfs_acl"},
    "lustre": {"lustre", "ptlrpc", "lnet", "osc", "lov", "mdc", "lmv", "obdclass", "libcfs", "fid", "fld", "mgc", "ko2iblnd", "ksocklnd", "llite"},
    "gpfs": {"mmfs26", "mmfslinux", "tracedev", "mmfs"},
    "nvidia": {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nv_peer_mem"},
    "rdma": {"mlx5_ib", "mlx5_core", "ib_core", "ib_uverbs", "rdma_cm", "ib_cm", "rdma_ucm", "ib_ipoib", "mlx4_ib"},
    # local/block-device file systems: the journal or writeback waiting on the disk (fs/jbd2,
    # fs/ext4, fs/xfs, fs/btrfs). Checked after the network file systems and the drivers above
    # only by frame order, so an NFS trace with an ext4 frame further down stays nfs.
    "localfs": {"jbd2", "ext4", "xfs", "btrfs"},
}
_SUBSYS_SYMBOLS = (
    ("nfs", ("nfs_", "nfs4_", "rpc_", "__rpc_", "xprt_", "lockd_", "nlmclnt_")),
    ("lustre", ("ll_", "ptlrpc_", "osc_", "lov_", "cl_", "ldlm_", "mdc_", "lnet_", "vvp_")),
    ("gpfs", ("cxiWait", "mmfs", "gpfs", "_ZN")),
    ("nvidia", ("uvm_", "nv_", "_nv0", "os_acquire", "rm_")),
    ("rdma", ("mlx5_", "ib_", "rdma_")),
    ("localfs", ("jbd2_", "ext4_", "xfs_", "btrfs_")),
)


def _classify(frames: list[tuple[str, str | None]]) -> str:
    """First classifiable frame from the top decides (the blocking call is nearest the top)."""
    for sym, mod in frames:
        if mod:
            for name, mods in _SUBSYS_MODULES.items():
                if mod in mods:
                    return name
    for sym, _ in frames:
        for name, prefixes in _SUBSYS_SYMBOLS:
            if name == "gpfs" and sym.startswith("_ZN"):
                continue  # C++ mangled names are not proof of GPFS on their own
            if sym.startswith(prefixes):
                return name
    return "other"


def _mono_str(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


@dataclass
class _Pending:
    kind: Kind
    line: int
    message: str
    info: _Line
    attrs: dict[str, Any]
    severity: Severity
    pid: int | None = None
    gpu: str | None = None
    job_id: str | None = None
    last_line: int = 0
    frames: list[tuple[str, str | None]] = field(default_factory=list)


class _Parser:
    """State of one file: boot counter and multi-line blocks still open."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.boot = 0
        self.last_mono: int | None = None
        self.block: _Pending | None = None  # hung task / AER / MCE: continues on adjacent lines
        self.oom: _Pending | None = None  # OOM report: invoked ... Killed process (many lines apart)
        # stack frames outside any block: the tail of a report whose header was cut off (a pasted dmesg)
        self.orphan: list[tuple[str, str | None]] = []
        self.orphan_lines: tuple[int, int] = (0, 0)
        # first "nfs: server X not responding" per (host, program, server) not yet followed by
        # "server X OK": (wall time ns, monotonic us, boot) to measure how long the stall lasted
        self.nfs_down: dict[tuple[str | None, str, str], tuple[int | None, int | None, int]] = {}

    # -- output ----------------------------------------------------------------------------------
    def base_attrs(self, info: _Line) -> dict[str, Any]:
        a: dict[str, Any] = {}
        if info.mono_us is not None:
            a["mono"] = _mono_str(info.mono_us)
            if info.boot_id is None:
                a["boot"] = self.boot
        if info.boot_id:
            a["boot_id"] = info.boot_id
        return a

    def emit(self, kind: Kind, line: int, info: _Line, severity: Severity, attrs: dict[str, Any], *, message: str | None = None, **kw: Any) -> None:
        full = {k: v for k, v in attrs.items() if v is not None}
        full.update(self.base_attrs(info))
        self.ctx.emit(
            kind, line, message if message is not None else info.msg.strip(), severity=severity,
            time=info.time, time_quality=info.quality if info.time is not None else None,
            host=info.host, attrs=full, **kw,
        )

    def stall_seconds(self, down: tuple[int | None, int | None, int] | None, info: _Line) -> float | None:
        """Seconds from the first 'not responding' to this recovery: by wall time when both
        lines have it, else by the kernel's monotonic stamp within one boot; None if unknown."""
        if down is None:
            return None
        t0, mono0, boot0 = down
        if t0 is not None and info.time is not None and info.time >= t0:
            return round((info.time - t0) / 1e9, 1)
        if mono0 is not None and info.mono_us is not None and boot0 == self.boot and info.mono_us >= mono0:
            return round((info.mono_us - mono0) / 1e6, 1)
        return None

    def flush_block(self) -> None:
        p, self.block = self.block, None
        if p is None:
            return
        if p.kind == Kind.HUNG_TASK:
            p.attrs["subsystem"] = _classify(p.frames)
            tops = [s for s, _ in p.frames if s not in _SCHED_FRAMES][:6]
            p.attrs["top_frames"] = tops
            mods = sorted({m for _, m in p.frames if m})
            if mods:
                p.attrs["modules"] = mods
        self.emit(p.kind, p.line, p.info, p.severity, p.attrs, message=p.message, pid=p.pid, gpu=p.gpu, job_id=p.job_id)

    def flush_oom(self) -> None:
        p, self.oom = self.oom, None
        if p is not None:
            self.emit(p.kind, p.line, p.info, p.severity, p.attrs, message=p.message, pid=p.pid, job_id=p.job_id)

    # -- one line -----------------------------------------------------------------------------------
    def feed(self, n: int, raw: str) -> None:
        _, text = split_prefix(raw.rstrip("\r"))
        info = _container(text, self.ctx, n)
        if info is None:
            return
        if info.mono_us is not None and info.boot_id is None:
            if self.last_mono is not None and info.mono_us < self.last_mono:
                self.boot += 1  # monotonic clock restarted: the node rebooted
            self.last_mono = info.mono_us
        msg = info.msg.rstrip()
        info.msg = msg
        if self.block is not None:
            if self.continue_block(n, msg, info):
                return
            self.flush_block()
        if self.orphan_frame(n, msg):
            return
        self.dispatch(n, msg, info)

    def orphan_frame(self, n: int, msg: str) -> bool:
        frames: list[tuple[str, str | None]] = []
        if am := _ARM_FRAME.match(msg):
            frames = [(am.group("sym"), am.group("mod")), (am.group("csym"), am.group("cmod"))]
        elif fm := _FRAME.match(msg):
            frames = [(fm.group("sym"), fm.group("mod"))]
        else:
            return False
        if not self.orphan or n - self.orphan_lines[1] > 2:
            self.orphan, self.orphan_lines = [], (n, n)
        for f in frames:
            if len(self.orphan) < 64 and (not self.orphan or self.orphan[-1][0] != f[0]):
                self.orphan.append(f)
        self.orphan_lines = (self.orphan_lines[0], n)
        return True

    def continue_block(self, n: int, msg: str, info: _Line) -> bool:
        p = self.block
        assert p is not None
        if n - p.last_line > 8:
            return False
        if p.kind == Kind.HUNG_TASK:
            if am := _ARM_FRAME.match(msg):
                for sym, mod in ((am.group("sym"), am.group("mod")), (am.group("csym"), am.group("cmod"))):
                    if len(p.frames) < 64 and (not p.frames or p.frames[-1][0] != sym):
                        p.frames.append((sym, mod))
                p.last_line = n
                return True
            fm = _FRAME.match(msg)
            if fm:
                if len(p.frames) < 64:
                    p.frames.append((fm.group("sym"), fm.group("mod")))
                p.last_line = n
                return True
            if _HUNG_CONT.search(msg):
                p.last_line = n
                return True
            return False
        if p.kind == Kind.PCIE_ERROR:
            dm = _AER_DETAIL.search(msg)
            if dm and n - p.last_line <= 3:
                p.attrs.setdefault("error_type", dm.group("type").strip())
                p.attrs.setdefault("detail_severity", dm.group("sev").strip())
                p.last_line = n
                return True
            return False
        if p.kind == Kind.MCE and p.attrs.get("type") == "machine_check":
            if "mce: [Hardware Error]" in msg and not _MCE.search(msg) and "Machine check events logged" not in msg:
                cm = _MCE_CONT.search(msg)
                if cm and cm.group("addr"):
                    p.attrs["addr"] = "0x" + cm.group("addr").lower()
                p.last_line = n
                return True
        return False

    def dispatch(self, n: int, msg: str, info: _Line) -> None:  # noqa: C901 - one branch per family
        ctx = self.ctx
        if "NVRM" in msg:
            self.nvrm(n, msg, info)
            return
        if "SXid (" in msg:
            m = _SXID.search(msg)
            if not m:
                ctx.warn("SXid line not understood", n, msg)
                return
            txt = m.group("text").strip()
            fatal = txt.lower().startswith("fatal")
            pci = normalize_pci(m.group("pci"))
            self.emit(Kind.SXID, n, info, Severity.CRITICAL if fatal else Severity.WARNING,
                      {"sxid": int(m.group("sxid")), "pci": pci, "nvswitch": int(m.group("sw")) if m.group("sw") else None, "fatal": fatal, "text": txt})
            return
        m = _LINUX_VERSION.search(msg)
        if m:
            k = m.group("kernel")
            self.emit(Kind.BOOT, n, info, Severity.INFO, {"kernel": k})
            self.emit(Kind.VERSION, n, info, Severity.INFO, {"component": "kernel", "version": k})
            return
        if "INFO: task " in msg:
            m = _HUNG.search(msg)
            if not m:
                ctx.warn("hung task report not understood", n, msg)
                return
            pid = int(m.group("pid")) if m.group("pid") else None
            if self.orphan and n - self.orphan_lines[1] <= 2:
                # khungtaskd prints its reports back to back: the frames right above this header
                # are the end of the previous report, whose header is not in the log.
                frames = self.orphan
                attrs = {"header_missing": True, "orphan_subsystem": _classify(frames),
                         "top_frames": [s for s, _ in frames if s not in _SCHED_FRAMES][:6]}
                mods = sorted({mo for _, mo in frames if mo})
                if mods:
                    attrs["modules"] = mods
                self.emit(Kind.HUNG_TASK, self.orphan_lines[0], info, Severity.WARNING, attrs,
                          message="stack of an earlier hung-task report (its 'INFO: task ... blocked' header is not in the log)")
            self.orphan = []
            self.block = _Pending(Kind.HUNG_TASK, n, msg.strip(), info,
                                  {"comm": m.group("comm"), "pid": pid, "seconds": int(m.group("sec")),
                                   **({"pid_redacted": m.group("redacted")} if m.group("redacted") else {})},
                                  Severity.ERROR, pid=pid, last_line=n)
            return
        if "Port module event" in msg:
            m = _PORT_MODULE.search(msg)
            if not m:
                ctx.warn("mlx5 port module event not understood", n, msg)
                return
            status = m.group("status").strip()
            st = {"cable plugged": "plugged", "cable unplugged": "unplugged", "cable error": "error", "cable disabled": "disabled"}.get(status.lower(), status.lower())
            sev = Severity.INFO if st == "plugged" else Severity.ERROR
            self.emit(Kind.LINK_EVENT, n, info, sev, {
                "device": normalize_pci(m.group("dev")) if m.group("dev") else None, "driver": m.group("driver"),
                "ifname": m.group("ifname"), "module": int(m.group("module")), "state": st, "status": status,
                "error": m.group("error").strip() if m.group("error") else None,
            })
            return
        m = _NETDEV_LINK.search(msg) or _NIC_LINK.search(msg)
        if m:
            st = m.group("state").lower()
            ifname = m.group("ifname") or (m.groupdict().get("ifname2"))
            dev = m.group("dev")
            self.emit(Kind.LINK_EVENT, n, info, Severity.ERROR if st == "down" else Severity.INFO,
                      {"device": normalize_pci(dev) if dev else None, "driver": m.group("driver"), "ifname": ifname, "state": st})
            return
        if "health compromised" in msg or "Fatal error" in msg:
            m = _MLX5_HEALTH.search(msg)
            if m:
                st = "health_compromised" if m.group("what").startswith("device") else "fatal_error"
                self.emit(Kind.LINK_EVENT, n, info, Severity.CRITICAL, {
                    "device": normalize_pci(m.group("dev")) if m.group("dev") else None, "driver": m.group("driver"),
                    "state": st, "error": m.group("what"), "code": int(m.group("code")) if m.group("code") else None,
                })
            return
        if ": server " in msg:
            m = _NFS.search(msg)
            if m:
                prog, server = m.group("prog"), m.group("server")
                key = (info.host, prog, server)
                if m.group("ok"):
                    self.emit(Kind.STORAGE_RECOVERED, n, info, Severity.INFO, {
                        "fs": "nfs", "program": prog, "server": server, "state": "ok",
                        "stall_seconds": self.stall_seconds(self.nfs_down.pop(key, None), info)})
                else:
                    st = "not_responding" if m.group("how") == "still trying" else "timed_out"
                    self.nfs_down.setdefault(key, (info.time, info.mono_us, self.boot))
                    self.emit(Kind.STORAGE_ERROR, n, info, Severity.ERROR, {"fs": "nfs", "program": prog, "server": server, "state": st})
            return
        if self.lustre(n, msg, info):
            return
        if "oom" in msg or "process" in msg:
            if self.oom_line(n, msg, info):
                return
        if "AER: " in msg:
            m = _AER.search(msg)
            if not m:
                return  # other AER chatter (e.g. "AER: enabled with IRQ"): not an error report
            kind = m.group("sev")
            sev_attr = "corrected" if kind.startswith("Correct") else ("fatal" if m.group("fatal") == "Fatal" else "non_fatal")
            if m.group("multi"):
                sev_attr = "multiple_" + sev_attr
            src = m.group("src")
            self.block = _Pending(Kind.PCIE_ERROR, n, msg.strip(), info, {
                "severity": sev_attr, "device": normalize_pci(m.group("dev")) if m.group("dev") else None, "driver": m.group("driver"),
                "source_device": normalize_pci(src) or src,
            }, _AER_SEVERITY[sev_attr.removeprefix("multiple_")], last_line=n)
            return
        if "mce: " in msg or "Machine check" in msg or "EDAC " in msg:
            self.mce(n, msg, info)
            return
        if self.panic(n, msg, info):
            return
        if "segfault at" in msg or "traps: " in msg:
            m = _SEGV.search(msg)
            if m:
                pid = int(m.group("pid")) if m.group("pid") else None
                self.emit(Kind.SEGFAULT, n, info, Severity.ERROR, {
                    "comm": m.group("comm"), "pid": pid, "type": "segfault", "address": "0x" + m.group("addr"),
                    "ip": "0x" + m.group("ip"), "error_code": int(m.group("err"), 16), "library": m.group("lib"),
                }, pid=pid)
                return
            m = _TRAP.search(msg)
            if m:
                pid = int(m.group("pid")) if m.group("pid") else None
                what = m.group("what")
                self.emit(Kind.SEGFAULT, n, info, Severity.ERROR, {
                    "comm": m.group("comm"), "pid": pid, "type": "general_protection" if what.startswith("general") else "trap",
                    "trap": what, "ip": "0x" + m.group("ip"), "library": m.group("lib"),
                }, pid=pid)
                return
            if "segfault at" in msg:
                ctx.warn("segfault line not understood", n, msg)

    # -- families -------------------------------------------------------------------------------------
    def nvrm(self, n: int, msg: str, info: _Line) -> None:
        ctx = self.ctx
        if "NVRM: Xid" in msg:
            m = _XID.search(msg)
            if not m:
                ctx.warn("Xid line not understood", n, msg)
                return
            xid = int(m.group("xid"))
            pci = normalize_pci(m.group("pci"))
            cat = XID_CATALOG.get(xid, {})
            pid_s = m.group("pid")
            pid = int(pid_s) if pid_s and pid_s.isdigit() else None
            text = (m.group("text") or "").strip()
            attrs: dict[str, Any] = {
                "xid": xid, "pci": pci,
                "gpu_instance": int(m.group("gi")) if m.group("gi") else None,
                "compute_instance": int(m.group("ci")) if m.group("ci") else None,
                "pid": pid if pid is not None else ("<unknown>" if pid_s else None),
                "name": m.group("name").strip() if m.group("name") is not None else None,
                "text": text, "mnemonic": cat.get("mnemonic"), "description": cat.get("description"),
                "category": cat.get("category"), "action": cat.get("action"),
            }
            if xid == 154:
                rm = _XID154.search(text)
                if rm:
                    attrs["recovery_action"] = rm.group("to_name").strip()
                    attrs["recovery_action_code"] = rm.group("to")
            self.emit(Kind.XID, n, info, xid_severity(xid, cat.get("category"), text), attrs, gpu=pci, pid=pid)
            return
        m = _NVRM_LOAD.search(msg)
        if m:
            self.emit(Kind.VERSION, n, info, Severity.INFO, {
                "component": "driver", "version": m.group("ver"),
                "flavor": "open" if m.group("arch_open") else "proprietary", "arch": m.group("arch_open") or m.group("arch"),
            })
            return
        m = _GPU_UUID.search(msg)
        if m:
            pci = normalize_pci(m.group("pci"))
            self.emit(Kind.GPU_INVENTORY, n, info, Severity.INFO, {"pci": pci, "uuid": m.group("uuid")}, gpu=pci)
            return
        m = _GPU_FALLEN.search(msg)
        if m:
            pci = normalize_pci(m.group("pci"))
            fallen = m.group("what").startswith("GPU has fallen")
            self.emit(Kind.LOG_ERROR, n, info, Severity.CRITICAL if fallen else Severity.ERROR,
                      {"pci": pci, "what": "fallen_off_bus" if fallen else "rm_init_adapter_failed"}, gpu=pci)

    def lustre(self, n: int, msg: str, info: _Line) -> bool:
        def target_of(obd: str) -> str | None:
            tm = _LUSTRE_OBD_TARGET.match(obd)
            return tm.group("target") if tm else None

        m = _LUSTRE_LOST.search(msg)
        if m:
            self.emit(Kind.STORAGE_ERROR, n, info, Severity.ERROR, {
                "fs": "lustre", "obd": m.group("obd"), "target": m.group("target"),
                "server": m.group("nid") or m.group("nid2"), "state": "lost", "will": m.group("will"),
            })
            return True
        if "Connection restored to" in msg:
            m = _LUSTRE_RESTORED.search(msg)
            if m:
                obd = m.group("obd")
                self.emit(Kind.STORAGE_RECOVERED, n, info, Severity.INFO, {
                    "fs": "lustre", "obd": obd, "target": m.group("target") or target_of(obd),
                    "server": m.group("nid") or m.group("nid2"), "state": "restored",
                })
            return True
        m = _LUSTRE_EVICTED.search(msg)
        if m:
            self.emit(Kind.STORAGE_ERROR, n, info, Severity.ERROR, {"fs": "lustre", "obd": m.group("obd"), "target": m.group("target"), "state": "evicted"})
            return True
        if "Request sent has" in msg:
            m = _LUSTRE_EXPIRE.search(msg)
            if m:
                obd = m.group("obd")
                self.emit(Kind.STORAGE_ERROR, n, info, Severity.WARNING, {
                    "fs": "lustre", "obd": obd, "target": target_of(obd), "server": m.group("nid"), "state": "request_timeout"
                    if m.group("what").startswith("timed") else "network_error", "reason": m.group("why"), "opc": int(m.group("opc")),
                })
            return True
        if "failed: rc = " in msg:
            m = _LUSTRE_OPFAIL.search(msg)
            if m:
                obd = m.group("obd")
                self.emit(Kind.STORAGE_ERROR, n, info, Severity.ERROR, {
                    "fs": "lustre", "obd": obd, "target": target_of(obd), "server": m.group("nid"),
                    "state": "op_failed", "op": m.group("op"), "rc": int(m.group("rc")),
                })
                return True
        return False

    def oom_line(self, n: int, msg: str, info: _Line) -> bool:
        m = _OOM_INVOKED.search(msg)
        if m:
            self.flush_oom()
            self.oom = _Pending(Kind.HOST_OOM, n, msg.strip(), info, {"invoker": m.group("comm").strip()}, Severity.ERROR, last_line=n)
            return True
        m = _OOM_KILL.search(msg)
        if m:
            kv = {k: v for k, v in _OOM_KV.findall(m.group("kv"))}
            p = self.oom
            if p is None:
                p = self.oom = _Pending(Kind.HOST_OOM, n, msg.strip(), info, {}, Severity.ERROR, last_line=n)
            a = p.attrs
            a["constraint"] = kv.get("constraint")
            for key in ("oom_memcg", "task_memcg"):
                if kv.get(key) and kv[key] != "(null)":
                    a[key] = kv[key]
            a["comm"] = kv.get("task") or a.get("comm")
            try:
                p.pid = int(kv["pid"].strip())
                a["pid"] = p.pid
                a["uid"] = int(kv["uid"].strip())
            except (KeyError, ValueError):
                pass
            path = a.get("task_memcg") or a.get("oom_memcg") or ""
            jm = _SLURM_JOB.search(path)
            if jm:
                p.job_id = a["job_id"] = jm.group("job")
            sm = _SLURM_STEP.search(path)
            if sm:
                a["step"] = sm.group("step")
            tm = _SLURM_TASK.search(path)
            if tm:
                a["task"] = int(tm.group("task"))
            a["cgroup"] = kv.get("constraint") == "CONSTRAINT_MEMCG"
            p.last_line = n
            return True
        m = _OOM_KILLED.search(msg)
        if m:
            pid = int(m.group("pid")) if m.group("pid") else None
            p = self.oom
            if p is None or (p.pid is not None and p.pid != pid):
                self.flush_oom()
                p = self.oom = _Pending(Kind.HOST_OOM, n, msg.strip(), info, {}, Severity.ERROR)
            p.pid = pid
            p.attrs["pid"] = pid
            p.attrs["comm"] = m.group("comm")
            if m.group("memcg"):
                p.attrs["cgroup"] = True
            rm = _ANON_RSS.search(m.group("rest"))
            if rm:
                p.attrs["anon_rss_kb"] = int(rm.group("kb"))
            if m.group("done"):
                # The kill itself: the event is dated here, the report's details attached.
                p.line, p.message, p.info = n, msg.strip(), info
                self.flush_oom()
            return True
        return False

    def mce(self, n: int, msg: str, info: _Line) -> None:
        m = _MCE.search(msg)
        if m:
            status = int(m.group("status"), 16)
            uc = bool(status >> 61 & 1)  # MCi_STATUS.UC
            self.block = _Pending(Kind.MCE, n, msg.strip(), info, {
                "type": "machine_check", "cpu": int(m.group("cpu")), "bank": int(m.group("bank")),
                "status": "0x" + m.group("status").lower(), "uncorrected": uc, "pcc": bool(status >> 57 & 1),
            }, Severity.CRITICAL if uc else Severity.WARNING, last_line=n)
            return
        if _MCE_LOGGED.search(msg):
            self.emit(Kind.MCE, n, info, Severity.WARNING, {"type": "events_logged"})
            return
        m = _EDAC.search(msg)
        if m:
            ue = m.group("kind") == "UE"
            self.emit(Kind.MCE, n, info, Severity.CRITICAL if ue else Severity.WARNING, {
                "type": "edac", "mc": m.group("mc"), "count": int(m.group("count")), "error": m.group("kind"),
                "what": m.group("what").strip() or None, "location": m.group("loc"), "uncorrected": ue,
            })

    def panic(self, n: int, msg: str, info: _Line) -> bool:
        m = _PANIC.search(msg)
        if m:
            self.emit(Kind.KERNEL_PANIC, n, info, Severity.CRITICAL, {"type": "panic", "reason": m.group("reason").strip()})
            return True
        m = _SOFT_LOCKUP.search(msg)
        if m:
            pid = int(m.group("pid")) if m.group("pid") else None
            self.emit(Kind.KERNEL_PANIC, n, info, Severity.ERROR, {
                "type": "soft_lockup", "cpu": int(m.group("cpu")), "seconds": int(m.group("sec")), "comm": m.group("comm"), "pid": pid,
            })
            return True
        m = _OOPS.search(msg)
        if m:
            self.emit(Kind.KERNEL_PANIC, n, info, Severity.ERROR, {"type": "oops", "reason": m.group("reason").strip()})
            return True
        m = _HARD_LOCKUP.search(msg)
        if m:
            self.emit(Kind.KERNEL_PANIC, n, info, Severity.CRITICAL, {"type": "hard_lockup", "cpu": int(m.group("cpu"))})
            return True
        m = _RCU_STALL.search(msg)
        if m:
            self.emit(Kind.KERNEL_PANIC, n, info, Severity.WARNING, {"type": "rcu_stall", "reason": m.group("flavor")})
            return True
        return False

    def finish(self) -> None:
        self.flush_block()
        self.flush_oom()


# -- sniffing ------------------------------------------------------------------------------------
_SNIFF_KERNEL = lazy_compile(
    rf"""^(?:<\d{{1,3}}>)?(?:[a-z]+\d?\s*:[a-z]+\s*:\s)?(?:
        \[\s*\d+\.\d{{6}}\]\s                                                  # dmesg raw
      | \[[A-Z][a-z]{{2}}\s(?:{_MON})\s{{1,2}}\d{{1,2}}\s\d\d:\d\d:\d\d\s\d{{4}}\]\s  # dmesg -T
      | \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{{6}}[+-]\d\d:\d\d\s                 # dmesg --time-format iso
      | \d{{1,4}},\d+,\d+,[^;\s]*;                                              # /dev/kmsg
      | [\w.:-]+:\s[a-z]+\d?:\s{{0,6}}(?:emerg|alert|crit|err|warning|notice|info|debug):\s\[\d{{4}}-\d\d-\d\dT[^\]\s]+\]:  # talosctl dmesg
      | (?:(?:{_MON})\s{{1,2}}\d{{1,2}}\s\d\d:\d\d:\d\d(?:\.\d+)?|\d{{4}}-\d\d-\d\dT\S+|\[\s*\d+\.\d+\])\s\S+\skernel:  # journal / syslog
    )""",
    regex.VERBOSE,
)
_SNIFF_SYSLOG = lazy_compile(rf"^(?:(?:{_MON})\s{{1,2}}\d{{1,2}}\s\d\d:\d\d:\d\d(?:\.\d+)?|\d{{4}}-\d\d-\d\dT\S+)\s\S+\s[^\s:\[]+(?:\[\d+\])?:\s")
_SNIFF_STRONG = lazy_compile(r"\[\s*0\.000000\] Linux version |NVRM: Xid \(|NVRM: loading NVIDIA|_TRANSPORT\"\s*:\s*\"kernel\"")


def sniff_kernel(head: str) -> float:
    lines = [ln for ln in head.splitlines()[:500] if ln.strip()]
    if not lines:
        return 0.0
    kern = syslog = json_kernel = json_other = 0
    for ln in lines:
        if ln.startswith("{"):
            if '"_TRANSPORT":"kernel"' in ln.replace(" ", ""):
                json_kernel += 1
            elif "__REALTIME_TIMESTAMP" in ln:
                json_other += 1
            continue
        if _SNIFF_KERNEL.match(ln):
            kern += 1
        elif _SNIFF_SYSLOG.match(ln):
            syslog += 1
    total = len(lines)
    strong = bool(_SNIFF_STRONG.search(head))
    if json_kernel + json_other:
        share = json_kernel / (json_kernel + json_other)
        if share >= 0.5:
            return 0.95
        return 0.6 if json_kernel else 0.0
    share = kern / total
    if share >= 0.5:
        return 0.95 if strong or share >= 0.8 else 0.9
    if kern and (kern + syslog) / total >= 0.5:
        return 0.6  # syslog with kernel lines among other daemons
    if kern >= 3 or (kern and strong):
        return 0.4
    if strong:
        return 0.3
    return 0.0


class KernelSource(LineSource):
    name = "kernel"
    description = "Kernel logs: dmesg raw/-T/iso, journalctl short/precise/iso/json, syslog; NVRM Xid, mlx5, NFS/Lustre/GPFS, hung tasks, OOM killer, AER, MCE, panic"
    filename_hints = ("dmesg*", "kern.log*", "messages*", "syslog*", "journal*", "kmsg*", "*.dmesg", "*dmesg*.txt", "*dmesg*.log")

    prefilter = PREFILTER

    def sniff(self, head: str, name: str) -> float:
        try:
            return sniff_kernel(head)
        except Exception:  # noqa: BLE001 - sniffing must never fail the ingest
            return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        p = _Parser(ctx)
        feed_guarded(ctx, lines, p.feed, p.finish)


SOURCE = KernelSource()
