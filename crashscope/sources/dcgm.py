"""NVIDIA DCGM output: ``dcgmi dmon`` tables, ``dcgmi health -c`` reports, dcgm-exporter metrics.

Formats are read from NVIDIA/DCGM 4.6 (``dcgmi/DeviceMonitor.cpp``, ``dcgmi/Health.cpp``,
``dcgmi/DcgmiOutput.cpp``, ``dcgmlib/src/dcgm_fields.cpp`` for the short column names,
``dcgmlib/dcgm_fields.h`` for field ids and the 4.6 renames, ``dcgmlib/dcgm_errors.h`` for the
health messages) and public dcgm-exporter output; ``shared/reference/gpu-telemetry.md`` §3.

**``dcgmi dmon -e 100,112,150,155,203,230 [-c N -d ms]``**: a header of field short names
(first column ``#Entity``, 14 wide), a units line (``ID``), then one row per entity and sample;
blank values print ``N/A``; there are no time stamps (events have no time)::

    #Entity           SMCLK   DVCCTR               TMPTR   POWER    GPUTL   XIDER
    ID                MHZ                          C       W
    GPU 0             1980    0                    61      512.370  98      0
    GPU 5             945     72                   88      301.020  97      0

``DVCCTR`` (field 112, ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, formerly ``..._CLOCK_THROTTLE_REASONS``)
is the NVML clock-event bitmask printed in decimal (72 = 0x48: HW slowdown + HW thermal
slowdown). ``XIDER`` (230) is the last Xid, not a count.

**``dcgmi health -c``**: a box tree (``DcgmiOutputTree``, ``-> `` per level, messages wrapped
onto rows with an empty left cell)::

    +---------------------------+------------------------------------------------------------+
    | Health Monitor Report                                                                  |
    +===========================+============================================================+
    | Overall Health            | Warning                                                    |
    | GPU                       |                                                            |
    | -> 0                      | Warning                                                    |
    |    -> Errors              |                                                            |
    |       -> Thermal system   | Warning                                                    |
    |                           | Detected clocks event due to thermal violation in GPU 0.   |

**``dcgmi diag -r N``**: a two-column table (``Diag.cpp`` ``DIAG_DATA``: a 25-wide name, a 46-wide
result), section rows ``-----  Deployment  ---``, ``Hardware``, ``Integration``, ``Stress``. Up to
DCGM 3.x a test's row reads ``Pass - All``, ``Fail - GPU: 0`` or ``Fail - GPUs: 0, 3`` (the GPUs of
each result on their own row) and, under a failed test, each failing GPU's error message in
``Warning`` rows cut into 45-character pieces (``HelperDisplayDetails``, ``DisplayVerboseInfo``)::

    | GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |
    |                           | Fail - GPU: 0                                  |
    | Warning                   | GPU 0 Thermal violations totaling 13.3 second  |
    |                           | s started at 9.7 seconds into the test for GP  |

Since DCGM 4.0 the test row has the overall result and each entity follows as ``GPU0: Fail``, its
messages under ``Warning: GPU0`` (``HelperDisplayEntityResults``).

**dcgm-exporter** (Prometheus text, ``/metrics``): the metric name is the field name, labels
``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (set depends on the
exporter's version and config), optional sample time in ms after the value::

    DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a0ac...",pci_bus_id="00000000:03:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node002"} 1755

Both the <= 4.5 names and the 4.6 canonical ones (``DCGM_FI_DEV_GPU_TEMP_CELSIUS``,
``DCGM_FI_DEV_BOARD_POWER_WATTS``, ``DCGM_FI_DEV_XID_ERROR``, ...) are read.

Events (gpu = normalized PCI where the output has it, gpu_index = the DCGM GPU id):

* gpu_telemetry: attrs as ``gpu_csv`` (temperature, mem_temperature, power_w, sm_clock_mhz,
  mem_clock_mhz, util, mem_used_mib, reasons_mask, reasons, thermal_violation, power_violation);
  dmon keeps each GPU's first sample and every unusual one (a slowing reason, 83 C or more).
* gpu_throttle (warning): a run of samples of one GPU with HW slowdown, HW thermal, HW power
  brake or SW thermal slowdown: attrs {reasons, mask, temperature, sm_clock_mhz, run_samples};
  from ``dcgmi health``: a Thermal/Power system incident, attrs {reasons: [thermal_violation |
  power_violation], system, health, detail}.
* xid (error): a non-zero ``XIDER`` / ``DCGM_FI_DEV_XID_ERRORS``, or a health ``Detected XID``
  incident: attrs {xid, via: dcgm}; once per GPU and code.
* gpu_ecc: volatile DBE/SBE totals, remapped rows, remap pending/failure when non-zero.
* from ``dcgmi diag``: a failed test on a GPU whose message is a thermal or power violation
  (``dcgm_errors.h`` DCGM_FR_THERMAL_VIOLATIONS[_TS], DCGM_FR_CLOCKS_EVENT_THERMAL/POWER,
  DCGM_FR_TEMP_VIOLATION) is a gpu_throttle (warning) with attrs {reasons, via: dcgm_diag, test,
  result, detail}; any other failed test is a log_error (error) with attrs {via: dcgm_diag, test,
  category, result: Fail, detail}.
* log_error: any other health incident (severity error for ``Failure``, warning for
  ``Warning``): attrs {system, health, detail, entity}.
"""

from __future__ import annotations

from typing import Any


from crashscope.schema import Kind, Severity
from crashscope.sources.base import FileSource, ParseContext, decode, normalize_pci
from crashscope.sources.nvidia_smi import SERIOUS_MASK, reason_names
from crashscope.sources.base import lazy_compile

HOT_C = 83

# dmon short column names (dcgm_fields.cpp) -> attrs keys
DMON_COLUMNS = {
    "SMCLK": "sm_clock_mhz", "MMCLK": "mem_clock_mhz", "DVCCTR": "reasons_mask", "TMPTR": "temperature",
    "MMTMP": "mem_temperature", "POWER": "power_w", "GPUTL": "util", "FBUSD": "mem_used_mib", "XIDER": "xid",
    "ESVTL": "ecc_sbe_volatile", "EDVTL": "ecc_dbe_volatile", "URMPS": "remapped_uncorrectable",
    "RRP": "remap_pending", "RRF": "remap_failure", "PCBID": "pci", "TVIOL": "thermal_violation", "PVIOL": "power_violation",
}
# exporter / field names (<= 4.5 and 4.6 canonical) -> attrs keys
FIELD_NAMES = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "reasons_mask", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "reasons_mask",
    "DCGM_FI_DEV_GPU_TEMP": "temperature", "DCGM_FI_DEV_GPU_TEMP_CELSIUS": "temperature",
    "DCGM_FI_DEV_MEMORY_TEMP": "mem_temperature", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": "mem_temperature",
    "DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_BOARD_POWER_WATTS": "power_w",
    "DCGM_FI_DEV_GPU_UTIL": "util", "DCGM_FI_DEV_GPU_UTIL_RATIO": "util", "DCGM_FI_DEV_FB_USED": "mem_used_mib",
    "DCGM_FI_DEV_XID_ERRORS": "xid", "DCGM_FI_DEV_XID_ERROR": "xid",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_volatile",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_uncorrectable", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": "remapped_uncorrectable",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_correctable", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": "remapped_correctable",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILED": "remap_failure",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation", "DCGM_FI_DEV_POWER_VIOLATION": "power_violation",
}
_TELEMETRY_KEYS = ("temperature", "mem_temperature", "power_w", "sm_clock_mhz", "mem_clock_mhz", "util", "mem_used_mib",
                   "reasons_mask", "thermal_violation", "power_violation")
_ECC_KEYS = {"ecc_dbe_volatile": "volatile_uncorrected", "ecc_sbe_volatile": "volatile_corrected",
             "remapped_uncorrectable": "remapped_uncorrectable", "remapped_correctable": "remapped_correctable",
             "remap_pending": "remap_pending", "remap_failure": "remap_failure"}

_DMON_HEAD = lazy_compile(r"^#Entity\s+(?P<cols>.*)$")
_DMON_ROW = lazy_compile(r"^(?P<group>GPU|GPU-I|GPU-CI|SW|CPU|CPU-CORE|LINK|GPU \d+ LINK|SW \d+ LINK)\s+(?P<id>\d+)\s+(?P<vals>.*)$")
_PROM = lazy_compile(r"^(?P<name>DCGM_FI_[A-Z0-9_]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<val>\S+)(?:\s+(?P<ts>-?\d+))?\s*$")
_LABEL = lazy_compile(r'(?P<k>[A-Za-z_][A-Za-z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')
_TREE_ROW = lazy_compile(r"^\|\s(?P<left>.*?)\s\|\s(?P<right>.*?)\s*\|\s*$")
_HEALTH_XID = lazy_compile(r"Detected XID (?P<xid>\d+) for GPU (?P<gpu>\d+)")
_DIAG_ROW = lazy_compile(r"^\| (?P<name>.{25}) \| (?P<info>.*?)(?:\s*\|)?\s*$")
_DIAG_SECTION = lazy_compile(r"^[|+]-----\s+(?P<section>[A-Za-z]+)\s+-+[+|]")
# legacy (<= 3.x) "Fail - GPU: 0", "Pass - GPUs: 1, 2", "Fail - All"; 4.x "GPU0: Fail"
_DIAG_RESULT = lazy_compile(r"^(?P<result>Pass|Fail|Warn|Skip) - (?:All|GPUs?: (?P<gpus>\d+(?:, \d+)*))\s*$")
_DIAG_ENTITY = lazy_compile(r"^GPU(?P<gpu>\d+): (?P<result>Pass|Fail|Warn|Skip|Not Run)\s*$")
_DIAG_WARN_LABEL = lazy_compile(r"^Warning(?:: GPU(?P<gpu>\d+))?$")
_DIAG_MSG_GPU = lazy_compile(r"\bGPU (?P<gpu>\d+)\b")
_DIAG_THERMAL = lazy_compile(r"(?i:thermal violation)|Temperature \d+ of \S+ \d+ exceeded")
_DIAG_POWER = lazy_compile(r"(?i:power violation)")
DIAG_INFO_LEN = 45  # dcgmi/Diag.cpp DATA_INFO_TAG_LEN


class DcgmSource(FileSource):
    name = "dcgm"
    description = "NVIDIA DCGM: dcgmi dmon tables, dcgmi health reports, dcgm-exporter metrics"
    filename_hints = ("*dcgm*", "*dmon*", "metrics*.txt", "*.prom")
    max_bytes = 256 * 1024 * 1024

    def sniff(self, head: str, name: str) -> float:
        lines = [ln for ln in head.splitlines()[:60] if ln.strip()]
        if any(_DMON_HEAD.match(ln) for ln in lines[:10]):
            return 0.95
        if "Health Monitor Report" in head and "Overall Health" in head:
            return 0.95
        if _is_diag(lines):
            return 0.9
        if sum(1 for ln in lines if ln.startswith("DCGM_FI_") or ln.startswith(("# HELP DCGM_FI_", "# TYPE DCGM_FI_"))) >= 2:
            return 0.95
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        text, bad = decode(data)
        if bad:
            ctx.warn("invalid UTF-8 bytes replaced")
        lines = text.replace("\r\n", "\n").split("\n")
        head = "\n".join(lines[:60])
        if "Health Monitor Report" in head:
            _health(lines, ctx)
        elif _is_diag(lines[:200]):
            _diag(lines, ctx)
        elif any(_DMON_HEAD.match(ln) for ln in lines[:20]):
            _dmon(lines, ctx)
        else:
            _exporter(lines, ctx)


def _num(v: str | None) -> float | int | None:
    if v is None:
        return None
    v = v.strip()
    if not v or v.upper() in ("N/A", "NAN", "[N/A]"):
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return int(x) if x.is_integer() and "." not in v and "e" not in v.lower() else x


class _Series:
    """One GPU's samples in file order: telemetry thinning, throttle runs, Xid/ECC changes."""

    def __init__(self, ctx: ParseContext, keep_every: bool):
        self.ctx = ctx
        self.keep_every = keep_every  # exporter scrapes are few: keep them all
        self.seen: set[Any] = set()
        self.run: dict[Any, dict[str, Any]] = {}
        self.xids: set[tuple[Any, int]] = set()
        self.ecc: dict[Any, str] = {}

    def sample(self, key: Any, line: int, vals: dict[str, Any], *, host: str | None, gpu: str | None, index: int | None,
               time: int | None) -> None:
        ident: dict[str, Any] = dict(host=host, gpu=gpu, gpu_index=index, time=time, time_quality="exact" if time is not None else None)
        who = gpu or (f"{index}" if index is not None else "?")
        mask = vals.get("reasons_mask")
        tel = {k: vals[k] for k in _TELEMETRY_KEYS if vals.get(k) is not None}
        if isinstance(mask, int):
            tel["reasons"] = reason_names(mask)
        serious = isinstance(mask, int) and bool(mask & SERIOUS_MASK)
        hot = isinstance(vals.get("temperature"), (int, float)) and vals["temperature"] >= HOT_C
        if tel and (self.keep_every or key not in self.seen or serious or hot):
            self.seen.add(key)
            self.ctx.emit(Kind.GPU_TELEMETRY, line, f"GPU {who} " + " ".join(f"{k}={v}" for k, v in tel.items() if k != "reasons"),
                          attrs=tel, **ident)
        # throttle runs: one event at a run's first sample, counted on
        run = self.run.get(key)
        if serious:
            if run is None or run["mask"] != mask:
                reasons = reason_names(mask)  # type: ignore[arg-type]
                attrs = {"reasons": reasons, "mask": mask, **{k: vals[k] for k in ("temperature", "sm_clock_mhz", "power_w") if vals.get(k) is not None}}
                self.run[key] = {"mask": mask, "attrs": attrs, "line": line, "n": 0, "ident": ident, "who": who}
                run = self.run[key]
            run["n"] += 1
        elif run is not None:
            self._close(key)
        xid = vals.get("xid")
        if isinstance(xid, int) and xid > 0 and (key, xid) not in self.xids:
            self.xids.add((key, xid))
            self.ctx.emit(Kind.XID, line, f"GPU {who}: DCGM reports Xid {xid} (the last Xid of this GPU)", severity=Severity.ERROR,
                          attrs={"xid": xid, "via": "dcgm"}, **ident)
        ecc = {_ECC_KEYS[k]: vals[k] for k in _ECC_KEYS if vals.get(k) is not None}
        if any(ecc.values()):
            sig = repr(sorted(ecc.items()))
            if self.ecc.get(key) != sig:
                self.ecc[key] = sig
                sev = (Severity.CRITICAL if ecc.get("volatile_uncorrected") or ecc.get("remap_failure")
                       else Severity.ERROR if ecc.get("remapped_uncorrectable") or ecc.get("remap_pending") else Severity.WARNING)
                self.ctx.emit(Kind.GPU_ECC, line, f"GPU {who} ECC: " + " ".join(f"{k}={v}" for k, v in ecc.items() if v),
                              severity=sev, attrs=ecc, **ident)

    def _close(self, key: Any) -> None:
        run = self.run.pop(key)
        attrs = dict(run["attrs"], run_samples=run["n"])
        self.ctx.emit(Kind.GPU_THROTTLE, run["line"], f"GPU {run['who']} clocks slowed: {', '.join(attrs['reasons'])} ({run['n']} samples)",
                      severity=Severity.WARNING, attrs=attrs, **run["ident"])

    def finish(self) -> None:
        for key in list(self.run):
            self._close(key)


def _dmon(lines: list[str], ctx: ParseContext) -> None:
    cols: list[str] | None = None
    series = _Series(ctx, keep_every=False)
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _DMON_HEAD.match(line)
        if m:
            cols = m.group("cols").split()
            continue
        if line.startswith("ID") or line.startswith("#"):
            continue  # the units line
        r = _DMON_ROW.match(line)
        if r is None or cols is None:
            if not line.startswith(("Error", "Warning")):
                ctx.warn("dmon row not understood", n, line)
            continue
        if r.group("group") != "GPU":
            continue  # MIG instances, NvSwitches, links: not GPUs of a rank
        vals_raw = r.group("vals").split()
        if len(vals_raw) != len(cols):
            ctx.warn(f"dmon row has {len(vals_raw)} values for {len(cols)} columns", n, line)
            continue
        vals: dict[str, Any] = {}
        pci = None
        for c, v in zip(cols, vals_raw):
            key = DMON_COLUMNS.get(c)
            if key == "pci":
                pci = normalize_pci(v) if v != "N/A" else None
            elif key in ("remap_pending", "remap_failure"):
                x = _num(v)
                vals[key] = bool(x) if x is not None else None
            elif key:
                vals[key] = _num(v)
        idx = int(r.group("id"))
        series.sample(("gpu", idx), n, vals, host=None, gpu=pci, index=idx, time=None)
    if cols is None:
        ctx.warn("no dmon header (#Entity ...) found")
    series.finish()


def _exporter(lines: list[str], ctx: ParseContext) -> None:
    samples: dict[tuple, dict[str, Any]] = {}
    order: list[tuple] = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        if m is None:
            continue
        key = FIELD_NAMES.get(m.group("name"))
        labels = {x.group("k"): x.group("v") for x in _LABEL.finditer(m.group("labels") or "")}
        ts = m.group("ts")
        t = int(ts) * 1_000_000 if ts is not None else None
        gpu_id = labels.get("gpu")
        skey = (labels.get("Hostname"), gpu_id, labels.get("UUID"), t)
        s = samples.get(skey)
        if s is None:
            s = samples[skey] = {"line": n, "labels": labels, "vals": {}, "time": t}
            order.append(skey)
        if key is None:
            continue
        v = _num(m.group("val"))
        if key in ("remap_pending", "remap_failure"):
            s["vals"][key] = bool(v) if v is not None else None
        else:
            s["vals"][key] = int(v) if key in ("reasons_mask", "xid") and v is not None else v
    series = _Series(ctx, keep_every=True)
    inventory: set[tuple] = set()
    for skey in order:
        s = samples[skey]
        lab = s["labels"]
        pci = normalize_pci(lab["pci_bus_id"]) if lab.get("pci_bus_id") else None
        idx = int(lab["gpu"]) if (lab.get("gpu") or "").isdigit() else None
        host = lab.get("Hostname") or None
        inv = (host, pci, idx, lab.get("UUID"))
        if inv not in inventory and (pci or lab.get("UUID")):
            inventory.add(inv)
            attrs = {k: v for k, v in (("pci", pci), ("index", idx), ("uuid", lab.get("UUID")), ("name", lab.get("modelName"))) if v is not None and v != ""}
            ctx.emit(Kind.GPU_INVENTORY, s["line"], f"GPU {idx if idx is not None else '?'} {pci or ''} {lab.get('modelName') or ''}".strip(),
                     host=host, gpu=pci, gpu_index=idx, time=s["time"], attrs=attrs)
        if s["vals"]:
            series.sample((host, idx, lab.get("UUID")), s["line"], s["vals"], host=host, gpu=pci, index=idx, time=s["time"])
    series.finish()


def _health(lines: list[str], ctx: ParseContext) -> None:
    """Walk the tree: group (GPU) -> entity id -> Errors -> "<X> system" -> message rows."""
    entity: int | None = None
    system: tuple[str, str, int] | None = None  # (name, health, line)
    detail: list[str] = []
    overall = None

    def flush() -> None:
        nonlocal system, detail
        if system is None or entity is None:
            system, detail = None, []
            return
        name, health, line = system
        text = " ".join(d.strip() for d in detail if d.strip())
        sysname = name.removesuffix(" system").strip()
        low = sysname.lower()
        base: dict[str, Any] = {"gpu_index": entity}
        xids = [int(x.group("xid")) for x in _HEALTH_XID.finditer(text)]
        if low in ("thermal", "power") and "clocks event" in text.lower() or low == "thermal" and "violation" in text.lower():
            reason = "thermal_violation" if low == "thermal" else "power_violation"
            ctx.emit(Kind.GPU_THROTTLE, line, f"GPU {entity}: DCGM health {sysname} {health}: {text}"[:2000], severity=Severity.WARNING,
                     attrs={"reasons": [reason], "system": sysname, "health": health, "detail": text[:1000]}, **base)
        elif xids:
            for x in xids:
                ctx.emit(Kind.XID, line, f"GPU {entity}: DCGM health {sysname} {health}: {text}"[:2000], severity=Severity.ERROR,
                         attrs={"xid": x, "via": "dcgm", "system": sysname, "health": health}, **base)
        else:
            sev = Severity.ERROR if health.lower() == "failure" else Severity.WARNING
            ctx.emit(Kind.LOG_ERROR, line, f"GPU {entity}: DCGM health {sysname} {health}: {text}"[:2000], severity=sev,
                     attrs={"system": sysname, "health": health, "detail": text[:1000], "entity": entity, "via": "dcgm_health"}, **base)
        system, detail = None, []

    for n, raw in enumerate(lines, 1):
        m = _TREE_ROW.match(raw.rstrip())
        if m is None:
            continue
        left, right = m.group("left"), m.group("right").strip()
        label = left.strip()
        if label.startswith("-> "):
            depth = (len(left) - len(left.lstrip())) // 3 + 1
            label = label[3:].strip()
        elif label:
            depth = 0
        else:
            if system is not None and right:
                detail.append(right)
            continue
        if depth <= 3:
            flush()
        if depth == 0:
            if label == "Overall Health":
                overall = right
            entity = None if label not in ("GPU",) else entity
            continue
        if depth == 1:
            entity = int(label) if label.isdigit() else None
            continue
        if depth == 3 and entity is not None:
            system = (label, right, n)
            continue
        if system is not None and right:
            detail.append(f"{label}: {right}" if label else right)
    flush()
    if overall is None:
        ctx.warn("dcgmi health report without Overall Health")


def _is_diag(lines: list[str]) -> bool:
    """A dcgmi diag table: its header, or a result row of either generation."""
    for ln in lines[:200]:
        m = _DIAG_ROW.match(ln.rstrip())
        if m is None:
            continue
        name, info = m.group("name").strip(), m.group("info").strip()
        if name == "Diagnostic" and info == "Result":
            return True
        if _DIAG_RESULT.match(info) or (not name and _DIAG_ENTITY.match(info)):
            return True
    return False


def _diag(lines: list[str], ctx: ParseContext) -> None:
    """Per test: the failed GPUs and, after them, each failed GPU's message (45-character pieces)."""
    section: str | None = None
    test: str | None = None
    failed: dict[int | None, int] = {}  # gpu index (None: "Fail - All") -> line of its result
    messages: list[tuple[int | None, int, list[str]]] = []  # (gpu from a "Warning: GPUn" label, line, pieces)
    cur: list[str] | None = None  # the message whose continuation rows follow

    def flush() -> None:
        nonlocal failed, messages
        texts: list[tuple[int | None, int, str]] = []
        for gpu, line, pieces in messages:
            text = " ".join("".join(pieces).split())
            m = _DIAG_MSG_GPU.search(text)
            texts.append((gpu if gpu is not None else (int(m.group("gpu")) if m else None), line, text))
        for gpu, line in failed.items():
            mine = [t for g, _, t in texts if g == gpu or g is None or gpu is None]
            detail = " ".join(mine)
            reasons = (["thermal_violation"] if _DIAG_THERMAL.search(detail) else []) + (
                ["power_violation"] if _DIAG_POWER.search(detail) else [])
            where = f"GPU {gpu}" if gpu is not None else "all GPUs"
            msg = f"{where}: DCGM diag {test}: Fail" + (f": {detail}" if detail else "")
            if reasons and all(_DIAG_THERMAL.search(t) or _DIAG_POWER.search(t) for t in mine):
                ctx.emit(Kind.GPU_THROTTLE, line, msg[:2000], severity=Severity.WARNING, gpu_index=gpu,
                         attrs={"reasons": reasons, "via": "dcgm_diag", "test": test, "result": "Fail", "detail": detail[:1000]})
            else:
                ctx.emit(Kind.LOG_ERROR, line, msg[:2000], severity=Severity.ERROR, gpu_index=gpu,
                         attrs={"via": "dcgm_diag", "test": test, "category": section, "result": "Fail",
                                "detail": detail[:1000], "entity": gpu})
        failed, messages = {}, []

    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        sec = _DIAG_SECTION.match(line)
        if sec:
            flush()
            section = sec.group("section").lower()
            test, cur = None, None
            continue
        m = _DIAG_ROW.match(line)
        if m is None:
            continue
        name = m.group("name").strip()
        cell = line[30:]  # after "| <25> | "
        if "|" in cell:
            cell = cell[: cell.rindex("|")]
        # a message piece is DATA_INFO_TAG_LEN characters (a trailing blank included), padded
        cell = cell[:DIAG_INFO_LEN] + cell[DIAG_INFO_LEN:].rstrip()
        info = m.group("info").strip()
        if name == "Diagnostic" and info == "Result":
            continue
        wl = _DIAG_WARN_LABEL.match(name)
        if wl:
            g = wl.group("gpu")
            cur = [cell[:DIAG_INFO_LEN]]
            messages.append((int(g) if g is not None else None, n, cur))
            continue
        if name == "Info" or name.startswith("Info:"):
            cur = None  # verbose info rows (and their continuation) are not failure messages
            continue
        if name:
            flush()
            test, cur = name, None
        if test is None:
            continue
        r = _DIAG_RESULT.match(info)
        e = _DIAG_ENTITY.match(info) if r is None else None
        if r or e:
            cur = None
        if r and r.group("result") == "Fail":
            gpus = r.group("gpus")
            for g in (gpus.split(", ") if gpus else [None]):
                failed[int(g) if g is not None else None] = n
            continue
        if e and e.group("result") == "Fail":
            failed[int(e.group("gpu"))] = n
            continue
        if r or e or (name and info in ("Pass", "Fail", "Warn", "Skip", "Not Run")):
            continue
        if not name and cur is not None and info:
            cur.append(cell[:DIAG_INFO_LEN])
    flush()


SOURCE = DcgmSource()
