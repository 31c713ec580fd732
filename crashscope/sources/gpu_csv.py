"""``nvidia-smi --query-gpu=... --format=csv[,nounits] -l N`` time series, one node per file.

The header holds the requested field names, units in brackets; values are separated by
comma + space; one row per GPU per sample::

    timestamp, index, pci.bus_id, temperature.gpu, power.draw [W], clocks.sm [MHz], clocks_event_reasons.active
    2026/09/14 08:12:44.123, 5, 00000000:9A:00.0, 88, 301.02 W, 945 MHz, 0x0000000000000048

``timestamp`` is node-local wall time (ms) -> ``ctx.local_ns`` semantics; ``.active`` is
the NVML reason bitmask (0x48 = HW slowdown + HW thermal slowdown). Any subset and order
of fields works; ``clocks_throttle_reasons.*`` (pre-R535 names) equal
``clocks_event_reasons.*``. Sentinels ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``
read as missing.
``noheader`` files cannot be mapped to fields and are skipped with a warning.

Events (gpu = normalized PCI when ``pci.bus_id`` is queried, gpu_index = ``index``):

* gpu_telemetry, one per sample row with anything readable: attrs, only for the fields present:
  temperature, mem_temperature, power_w, power_limit_w, sm_clock_mhz, max_sm_clock_mhz,
  mem_clock_mhz, util, mem_util, mem_used_mib, mem_total_mib, pstate, fan,
  pcie_gen, pcie_width, reasons_mask (int), reasons (names),
  ecc_uncorrected_volatile, ecc_corrected_volatile, ecc_uncorrected_aggregate,
  ecc_corrected_aggregate, remapped_rows_correctable, remapped_rows_uncorrectable,
  remapped_rows_pending (bool), remapped_rows_failure (bool), retired_pages_sbe,
  retired_pages_dbe, retired_pages_pending (bool).
* gpu_throttle (warning), one per contiguous run of samples of one GPU with HW slowdown,
  HW thermal, HW power brake or SW thermal active, at the run's first sample: attrs
  {reasons, mask, temperature, sm_clock_mhz, run_samples, run_end (ISO UTC)}.
* log_error: critical once per GPU for ``[GPU requires reset]``; error at the first
  sample of a GPU whose every measured field reads ``[Unknown Error]`` (NVML lost it).
* gpu_ecc: when a GPU's ECC/remap/retirement fields become non-zero or change: attrs
  {volatile_uncorrected, volatile_corrected, aggregate_uncorrected, remapped_correctable,
  remapped_uncorrectable, remap_pending, remap_failure, retired_pending, ...} (the keys
  nvidia_smi uses); critical for volatile uncorrectable or remap failure.
  ``--query-remapped-rows`` CSVs (``gpu_uuid, remapped_rows.*``) are read the same way.
* version {component: "driver"} per distinct ``driver_version``; gpu_inventory
  {pci, index, uuid, name, serial} per distinct GPU.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import polars as pl

from crashscope.schema import Kind, Severity
from crashscope.sources.base import ATTRS_ENCODER, MAX_ATTRS_CHARS, FileSource, ParseContext, attrs_text, decode, normalize_pci
from crashscope.sources.nvidia_smi import REASON_BITS, SERIOUS_MASK, reason_names
from crashscope.sources.base import lazy_compile

# Query-name aliases to the canonical header name nvidia-smi prints.
_ALIASES = {
    "gpu_bus_id": "pci.bus_id",
    "gpu_uuid": "uuid",
    "gpu_name": "name",
    "gpu_serial": "serial",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "clocks.current.memory": "clocks.mem",
    "clocks.max.graphics": "clocks.max.gr",
    "clocks.max.memory": "clocks.max.mem",
    "clocks.max.sm": "clocks.max.sm",
    "enforced.power.limit": "enforced.power.limit",
}
# canonical field -> attrs key, for numeric fields (first listed field wins per key)
_NUMERIC: dict[str, str] = {
    "temperature.gpu": "temperature",
    "temperature.memory": "mem_temperature",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "power.draw.average": "power_w",
    "enforced.power.limit": "power_limit_w",
    "power.limit": "power_limit_w",
    "clocks.sm": "sm_clock_mhz",
    "clocks.max.sm": "max_sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "utilization.gpu": "util",
    "utilization.memory": "mem_util",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "fan.speed": "fan",
    "pcie.link.gen.current": "pcie_gen",
    "pcie.link.gen.gpucurrent": "pcie_gen",
    "pcie.link.width.current": "pcie_width",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected_volatile",
    "ecc.errors.corrected.volatile.total": "ecc_corrected_volatile",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrected_aggregate",
    "ecc.errors.corrected.aggregate.total": "ecc_corrected_aggregate",
    "remapped_rows.correctable": "remapped_rows_correctable",
    "remapped_rows.uncorrectable": "remapped_rows_uncorrectable",
    "retired_pages.single_bit_ecc.count": "retired_pages_sbe",
    "retired_pages.sbe": "retired_pages_sbe",
    "retired_pages.double_bit.count": "retired_pages_dbe",
    "retired_pages.dbe": "retired_pages_dbe",
}
_INT_KEYS = {"temperature", "mem_temperature", "sm_clock_mhz", "max_sm_clock_mhz", "mem_clock_mhz", "util", "mem_util",
             "mem_used_mib", "mem_total_mib", "fan", "pcie_gen", "pcie_width"} | {
    v for v in _NUMERIC.values() if v.startswith(("ecc_", "remapped_", "retired_"))}
_BOOL: dict[str, str] = {
    "remapped_rows.pending": "remapped_rows_pending",
    "remapped_rows.failure": "remapped_rows_failure",
    "retired_pages.pending": "retired_pages_pending",
}
_STRING = {"pstate": "pstate"}
_IDENT = ("timestamp", "index", "pci.bus_id", "uuid", "name", "serial", "driver_version")
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_KNOWN_PREFIXES = ("temperature.", "power.", "clocks.", "clocks_event_reasons.", "clocks_throttle_reasons.", "utilization.",
                   "memory.", "ecc.", "remapped_rows.", "retired_pages.", "pcie.", "pci.", "fan.", "enforced.", "inforom.",
                   "mig.", "compute_", "driver_", "vbios_", "reset_status.", "gpu_", "display_", "persistence_", "accounting.")

_SENTINELS = ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[GPU requires reset]", "[Insufficient Permissions]",
              "[Unknown]", "Not Supported", ""]
_UNIT = lazy_compile(r"\s*\[[^\]]*\]\s*$")
_NUM_RE = r"^\s*(-?\d+(?:\.\d+)?)"
_DATA_TS = lazy_compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?, ")
# the ECC facts a gpu_ecc event carries, with the nvidia_smi attrs names
_ECC_KEYS = {
    "ecc_uncorrected_volatile": "volatile_uncorrected",
    "ecc_corrected_volatile": "volatile_corrected",
    "ecc_uncorrected_aggregate": "aggregate_uncorrected",
    "ecc_corrected_aggregate": "aggregate_corrected",
    "remapped_rows_correctable": "remapped_correctable",
    "remapped_rows_uncorrectable": "remapped_uncorrectable",
    "remapped_rows_pending": "remap_pending",
    "remapped_rows_failure": "remap_failure",
    "retired_pages_sbe": "retired_sbe",
    "retired_pages_dbe": "retired_dbe",
    "retired_pages_pending": "retired_pending",
}


def _canon(header_name: str) -> str:
    name = _UNIT.sub("", header_name).strip().lower()
    return _ALIASES.get(name, name)


def _is_field(name: str) -> bool:
    return name in _IDENT or name in _NUMERIC or name in _BOOL or name in _STRING or name.startswith(_KNOWN_PREFIXES)


class GpuCsvSource(FileSource):
    name = "gpu_csv"
    description = "nvidia-smi --query-gpu CSV time series"
    filename_hints = ("*gpu*.csv", "*nvidia*smi*.csv", "*smi*.csv", "gpu_metrics*", "*query-gpu*")

    def sniff(self, head: str, name: str) -> float:
        first = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
        if not first:
            return 0.0
        if first.startswith("timestamp, ") or any(k in first for k in ("pci.bus_id", "temperature.gpu", "clocks.sm")):
            return 0.95
        fields = [_canon(f) for f in first.split(", ")]
        if len(fields) >= 2 and sum(_is_field(f) for f in fields) >= 2 and "," in first:
            return 0.8
        if _DATA_TS.match(first):
            return 0.4  # noheader series: claimed so the report says why it was skipped
        return 0.0

    batchable = True  # the ingest hands it every gpu CSV of a batch at once (parse_files)

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        self.parse_files([(data, ctx)])

    def parse_files(self, items: list[tuple[bytes, ParseContext]]) -> None:
        """Several files in one polars pipeline per header: a file's own pipeline was
        ~10 ms of fixed cost (two dozen small frames) for a few hundred rows. Each file's
        events and warnings are the ones it gives alone (tests/sources/test_gpu_csv.py);
        should the joint pipeline fail, each file is read again alone."""
        if len(items) > 1:
            try:
                self._parse_many(items, strict=True)
                return
            except Exception:  # noqa: BLE001 - one odd file must cost only itself
                for _, ctx in items:
                    ctx.restart()
        for item in items:
            self._parse_many([item], strict=False)

    def _parse_many(self, items: list[tuple[bytes, ParseContext]], strict: bool) -> None:
        groups: dict[tuple[tuple[str, ...], str], list[_File]] = {}
        for data, ctx in items:
            text, bad = decode(data)
            if bad:
                ctx.warn("invalid UTF-8 bytes replaced")
            lines = text.replace("\r\n", "\n").split("\n")
            hdr_i = next((i for i, ln in enumerate(lines) if ln.strip()), None)
            if hdr_i is None:
                continue
            header = lines[hdr_i].strip()
            names = [_canon(h) for h in header.split(",")]
            if sum(_is_field(n) for n in names) < max(1, len(names) // 2) or any(not n for n in names):
                ctx.warn("CSV without a known nvidia-smi --query-gpu header (noheader?): skipped", hdr_i + 1, header)
                continue
            tz = getattr(ctx.options.tz, "key", None) or "UTC"
            groups.setdefault((tuple(names), tz), []).append((lines, hdr_i, header, ctx))
        for (names_t, _tz), files in groups.items():
            if strict:
                _parse(files, list(names_t))
                continue
            try:
                _parse(files, list(names_t))
            except Exception as e:  # a polars surprise must not stop the ingest
                files[0][3].warn(f"gpu CSV parse failed ({type(e).__name__}: {e})", None)


TELEMETRY_EVERY_S = 60  # routine samples kept per GPU
HOT_C = 83  # samples at or above this temperature are always kept



_File = tuple[list[str], int, str, ParseContext]  # lines, header index, header, its context


def _parse(files: list[_File], names: list[str]) -> None:
    """Files of one header (and time zone), as one frame: column ``f`` is the file's
    index in ``files``; every window, unique and join is per file, so each file's events
    are the ones it gives alone."""
    ctxs = [f[3] for f in files]
    ctx0 = ctxs[0]
    ncol = len(names)
    col_l: list[str] = []
    col_n: list[int] = []
    col_f: list[int] = []
    col_h: list[str] = []
    for k, (lines, hdr_i, header, _ctx) in enumerate(files):
        body = lines[hdr_i + 1:]
        col_l.extend(body)
        col_n.extend(range(hdr_i + 2, hdr_i + 2 + len(body)))
        col_f.extend([k] * len(body))
        col_h.extend([header] * len(body))
    raw = pl.DataFrame({"f": pl.Series(col_f, dtype=pl.UInt32), "n": pl.Series(col_n, dtype=pl.UInt32),
                        "l": pl.Series(col_l, dtype=pl.String), "_h": pl.Series(col_h, dtype=pl.String)})
    raw = (raw.lazy().with_columns(pl.col("l").str.strip_chars_end())
           .filter((pl.col("l").str.len_chars() > 0) & (pl.col("l") != pl.col("_h")))
           .select("f", "n", "l", pl.col("l").str.split(",").alias("parts")).collect())
    bad = raw.filter(pl.col("parts").list.len() != ncol)
    if bad.height:
        for (k,), part in bad.partition_by("f", as_dict=True, maintain_order=True).items():
            for n, line in part.select("n", "l").head(5).iter_rows():
                ctxs[k].warn(f"CSV row has the wrong number of fields (want {ncol})", n, line)
            if part.height > 5:
                ctxs[k].warn(f"{part.height - 5} more CSV rows with the wrong number of fields", None)
    df = raw.filter(pl.col("parts").list.len() == ncol)
    if df.height == 0:
        return

    seen: set[str] = set()
    cols: list[pl.Expr] = [pl.col("f"), pl.col("n")]
    for i, name in enumerate(names):
        if name in seen:
            continue
        seen.add(name)
        cols.append(pl.col("parts").list.get(i).str.strip_chars().alias(name))
    df = df.select(cols)
    present = [c for c in df.columns if c not in ("f", "n")]

    # "[GPU requires reset]" in any field: report once per GPU before blanking sentinels.
    # (Each test only where some line holds the text at all: a field equal to it is part
    # of its line, and the filters over every column were a fifth of a file's time.)
    reset_rows = (df.filter(pl.any_horizontal([pl.col(c) == "[GPU requires reset]" for c in present]))
                  if any("[GPU requires reset]" in ln for ln in col_l) else df.clear())
    # every measured field "[Unknown Error]": NVML lost the GPU (fallen off the bus, Xid 79 ...)
    measured = [c for c in present if c not in _IDENT]
    lost_rows = (df.filter(pl.all_horizontal([pl.col(c) == "[Unknown Error]" for c in measured]))
                 if measured and any("[Unknown Error]" in ln for ln in col_l) else df.clear())

    # -- vectorised typing -----------------------------------------------------------------
    blank = {c: pl.when(pl.col(c).is_in(_SENTINELS)).then(None).otherwise(pl.col(c)) for c in present}
    exprs: list[pl.Expr] = [pl.col("f"), pl.col("n")]
    tz = getattr(ctx0.options.tz, "key", None) or "UTC"
    if "timestamp" in present:
        exprs.append(
            blank["timestamp"].str.strptime(pl.Datetime("ns"), "%Y/%m/%d %H:%M:%S%.f", strict=False)
            .dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
            .dt.epoch("ns").alias("_t")
        )
    else:
        exprs.append(pl.lit(None, pl.Int64).alias("_t"))
    exprs.append(blank["index"].str.extract(r"^(\d+)$", 1).cast(pl.Int64, strict=False).alias("_idx")
                 if "index" in present else pl.lit(None, pl.Int64).alias("_idx"))
    for name in ("pci.bus_id", "uuid", "name", "serial", "driver_version"):
        exprs.append(blank[name].alias(f"_{name}") if name in present else pl.lit(None, pl.String).alias(f"_{name}"))
    tel_keys: list[str] = []
    for name in present:
        key = _NUMERIC.get(name)
        if key and key not in tel_keys:
            dtype = pl.Int64 if key in _INT_KEYS else pl.Float64
            exprs.append(blank[name].str.extract(_NUM_RE, 1).cast(pl.Float64, strict=False).cast(dtype, strict=False).alias(key))
            tel_keys.append(key)
        elif name in _BOOL:
            low = blank[name].str.to_lowercase()
            exprs.append(pl.when(low.is_in(["yes", "active", "true"])).then(True)
                         .when(low.is_in(["no", "not active", "false"])).then(False).otherwise(None).alias(_BOOL[name]))
            tel_keys.append(_BOOL[name])
        elif name in _STRING:
            exprs.append(blank[name].alias(_STRING[name]))
            tel_keys.append(_STRING[name])
    # reasons: the .active bitmask, else the per-reason Active/Not Active columns
    active_col = next((p + "active" for p in _REASON_PREFIXES if p + "active" in present), None)
    named = {n.split(".", 1)[1]: n for n in present if n.startswith(_REASON_PREFIXES) and n.split(".", 1)[1] in REASON_BITS}
    if active_col:
        exprs.append(blank[active_col].str.replace(r"^0[xX]", "").str.to_integer(base=16, strict=False).alias("reasons_mask"))
    elif named:
        exprs.append(pl.sum_horizontal([
            pl.when(blank[col].str.to_lowercase() == "active").then(REASON_BITS[r]).otherwise(0) for r, col in named.items()
        ]).cast(pl.Int64).alias("reasons_mask"))
    has_mask = bool(active_col or named)
    if has_mask:
        tel_keys.append("reasons_mask")
    df = df.select(exprs)

    # GPU identity per row: normalized PCI (few distinct values, mapped in Python)
    pci_map = {v: normalize_pci(v) for v in df["_pci.bus_id"].unique().to_list() if v is not None}
    df = df.with_columns(pl.col("_pci.bus_id").replace_strict(pci_map, default=None, return_dtype=pl.String).alias("_pci"))
    df = df.with_columns(pl.coalesce(pl.col("_pci"), pl.col("_idx").cast(pl.String), pl.col("_uuid"), pl.lit("?")).alias("_gpu"))
    quality = ctx0.local_quality()

    def tq(t: int | None):
        return quality if t is not None else None

    # -- identity: versions, inventory -------------------------------------------------------
    for k, t, n, v in df.filter(pl.col("_driver_version").is_not_null()).unique(["f", "_driver_version"], keep="first",
                                                                                  maintain_order=True).select("f", "_t", "n", "_driver_version").iter_rows():
        ctxs[k].emit(Kind.VERSION, n, f"driver_version {v}", time=t, time_quality=tq(t), attrs={"component": "driver", "version": v})
    inv_cols = ["_pci", "_idx", "_uuid", "_name", "_serial"]
    # (a file whose rows name no GPU by pci, uuid, name or serial has no inventory)
    inv_files = df.filter(pl.any_horizontal([pl.col(c).is_not_null() for c in ("_pci", "_uuid", "_name", "_serial")]).any().over("f"))
    for row in inv_files.unique(["f", *inv_cols], keep="first", maintain_order=True).select(["f", "_t", "n", *inv_cols]).iter_rows(named=True):
        attrs = {k: row[f"_{k}" if k != "pci" else "_pci"] for k in ("pci", "uuid", "name", "serial")}
        attrs["index"] = row["_idx"]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        ctxs[row["f"]].emit(Kind.GPU_INVENTORY, row["n"], f"GPU {row['_idx'] if row['_idx'] is not None else row['_uuid'] or '?'} {row['_pci'] or ''} {row['_name'] or ''}".strip(),
                            time=row["_t"], time_quality=tq(row["_t"]), gpu=row["_pci"], gpu_index=row["_idx"], attrs=attrs)

    ident = df.select("f", "n", "_t", "_pci", "_idx", "_gpu")
    for row in (reset_rows.select("f", "n").join(ident, on=["f", "n"]).unique(["f", "_gpu"], keep="first", maintain_order=True)
                .iter_rows(named=True) if reset_rows.height else ()):
        ctxs[row["f"]].emit(Kind.LOG_ERROR, row["n"], f"GPU {row['_gpu']}: [GPU requires reset]", severity=Severity.CRITICAL,
                            time=row["_t"], time_quality=tq(row["_t"]), gpu=row["_pci"], gpu_index=row["_idx"],
                            attrs={"error": "gpu_requires_reset"})

    for row in (lost_rows.select("f", "n").join(ident, on=["f", "n"]).unique(["f", "_gpu"], keep="first", maintain_order=True)
                .iter_rows(named=True) if lost_rows.height else ()):
        ctxs[row["f"]].emit(Kind.LOG_ERROR, row["n"], f"GPU {row['_gpu']}: nvidia-smi reads [Unknown Error] for every field",
                            severity=Severity.ERROR, time=row["_t"], time_quality=tq(row["_t"]), gpu=row["_pci"], gpu_index=row["_idx"],
                            attrs={"error": "gpu_unreadable", "fields": len(measured)})

    # -- telemetry: one event per GPU per minute, plus every sample that is unusual ----------------
    # (a 1 s series over a day is 86,400 rows per GPU; the timeline needs the shape, and
    # throttle runs below are computed on every row)
    tel_kind, q_val = Kind.GPU_TELEMETRY.value, quality.value  # plain strings: many emits
    unusual = pl.lit(False)
    if "reasons_mask" in df.columns:
        unusual = unusual | ((pl.col("reasons_mask").fill_null(0) & SERIOUS_MASK) != 0)
    if "temperature" in df.columns:
        unusual = unusual | (pl.col("temperature").fill_null(0) >= HOT_C)
    bucket = (pl.col("_t") // (TELEMETRY_EVERY_S * 1_000_000_000)).fill_null(pl.col("n").cast(pl.Int64))
    sampled = df.filter(unusual | (pl.int_range(pl.len()).over(["f", "_gpu", bucket]) == 0))
    sampled = sampled.select(["f", "n", "_t", "_pci", "_idx", "_gpu", "_uuid", *tel_keys])
    for k, n, t, pci, idx, message, attrs_json in _telemetry_texts(sampled, tel_keys).iter_rows():
        if len(attrs_json) > MAX_ATTRS_CHARS:  # a long string field: cut as every event's attrs are
            attrs_json = attrs_text(json.loads(attrs_json))
        ctxs[k].emit(tel_kind, n, message, severity="info", time=t, time_quality=q_val if t is not None else None,
                     gpu=pci, gpu_index=idx, attrs_json=attrs_json)

    # -- throttle runs -----------------------------------------------------------------------------
    # (only where some sample is throttled: the window below was a seventh of a file's time,
    # and most series never slow down)
    d = df.with_columns(((pl.col("reasons_mask").fill_null(0) & SERIOUS_MASK) != 0).alias("_ser")) if has_mask else df
    if has_mask and d["_ser"].any():
        d = d.with_columns((pl.col("_ser") != pl.col("_ser").shift(1)).fill_null(True).cum_sum().over(["f", "_gpu"]).alias("_run"))
        keep = [c for c in ("temperature", "sm_clock_mhz", "max_sm_clock_mhz", "power_w") if c in d.columns]
        runs = (d.filter(pl.col("_ser")).group_by("f", "_gpu", "_run", maintain_order=True)
                .agg(pl.col("n").first(), pl.col("_t").first(), pl.col("_pci").first(), pl.col("_idx").first(),
                     pl.col("reasons_mask").first(), pl.len().alias("run_samples"), pl.col("_t").last().alias("_end"),
                     *[pl.col(c).first() for c in keep])
                .sort("f", "n"))
        for row in runs.iter_rows(named=True):
            reasons = reason_names(row["reasons_mask"])
            attrs: dict[str, Any] = {"reasons": reasons, "mask": row["reasons_mask"]}
            for c in keep:
                if row[c] is not None:
                    attrs[c] = row[c]
            attrs["run_samples"] = row["run_samples"]
            if row["_end"] is not None:
                attrs["run_end"] = _iso(row["_end"])
            ctxs[row["f"]].emit(Kind.GPU_THROTTLE, row["n"], f"GPU {row['_gpu']} clocks slowed: {', '.join(reasons)} ({row['run_samples']} samples)",
                                severity=Severity.WARNING, time=row["_t"], time_quality=tq(row["_t"]), gpu=row["_pci"],
                                gpu_index=row["_idx"], attrs=attrs)

    # -- ECC state changes -----------------------------------------------------------------------------
    ecc_cols = [k for k in _ECC_KEYS if k in df.columns]
    nonzero = pl.any_horizontal([pl.col(c).cast(pl.Int64, strict=False).fill_null(0) != 0 for c in ecc_cols]) if ecc_cols else pl.lit(False)
    if ecc_cols and df.select(nonzero.any()).item():  # (most series have none: the windowed change test only then)
        d = df.with_columns(pl.concat_str([pl.col(c).cast(pl.String).fill_null("-") for c in ecc_cols], separator="|").alias("_sig"))
        d = d.with_columns((pl.col("_sig") != pl.col("_sig").shift(1).over(["f", "_gpu"])).fill_null(True).alias("_chg"))
        for row in d.filter(pl.col("_chg") & nonzero).select(["f", "n", "_t", "_pci", "_idx", "_gpu", "_uuid", *ecc_cols]).iter_rows(named=True):
            a = {_ECC_KEYS[c]: row[c] for c in ecc_cols if row[c] is not None}
            if row["_uuid"] is not None:
                a["uuid"] = row["_uuid"]
            sev = (Severity.CRITICAL if a.get("volatile_uncorrected") or a.get("remap_failure")
                   else Severity.ERROR if a.get("aggregate_uncorrected") or a.get("remapped_uncorrectable") or a.get("remap_pending")
                   or a.get("retired_pending") or a.get("retired_dbe")
                   else Severity.WARNING if a.get("volatile_corrected") else Severity.INFO)
            ctxs[row["f"]].emit(Kind.GPU_ECC, row["n"], f"GPU {row['_gpu']} ECC: " + " ".join(f"{k}={v}" for k, v in a.items() if v and k != "uuid"),
                                severity=sev, time=row["_t"], time_quality=tq(row["_t"]), gpu=row["_pci"], gpu_index=row["_idx"], attrs=a)

    if "timestamp" in present:
        for k, unparsed in df.group_by("f").agg(pl.col("_t").null_count()).iter_rows():
            if unparsed:
                ctxs[k].warn(f"{unparsed} CSV rows with an unparsed timestamp", None)


def _telemetry_texts(sampled: pl.DataFrame, tel_keys: list[str]) -> pl.DataFrame:
    """Each telemetry sample's message and attrs JSON, as one event of it would have them
    (``GPU <id> key=value ...``; the fields that are set, in column order, then ``uuid``
    where it is the only identity and ``reasons`` beside the mask), built per column in
    polars: a Python dict, message and JSON per row were most of a CSV's time. Values are
    written by Python (``str``, ``json``) once per distinct value; samples with no field
    set are left out. Columns: f, n, _t, _pci, _idx, message, attrs_json."""
    msg_parts: list[pl.Expr] = []
    json_parts: list[pl.Expr] = []
    for key in tel_keys:
        col = sampled[key]
        if col.dtype in (pl.Int64, pl.Int32, pl.UInt32, pl.UInt64):
            as_msg = as_json = pl.col(key).cast(pl.String)
        else:
            values = [v for v in col.unique().to_list() if v is not None]
            as_msg = pl.col(key).replace_strict({v: str(v) for v in values}, default=None, return_dtype=pl.String)
            as_json = pl.col(key).replace_strict({v: _ENCODE(v) for v in values}, default=None, return_dtype=pl.String)
        msg_parts.append(pl.lit(f"{key}=") + as_msg)
        json_parts.append(pl.lit(f"{_ENCODE(key)}:") + as_json)
    uuids = [v for v in sampled["_uuid"].unique().to_list() if v is not None]
    only_uuid = pl.col("_pci").is_null() & pl.col("_idx").is_null() & pl.col("_uuid").is_not_null()
    json_parts.append(pl.when(only_uuid).then(
        pl.lit('"uuid":') + pl.col("_uuid").replace_strict({v: _ENCODE(v) for v in uuids}, default=None, return_dtype=pl.String)))
    if "reasons_mask" in tel_keys:
        masks = [m for m in sampled["reasons_mask"].unique().to_list() if m is not None]
        json_parts.append(pl.lit('"reasons":') + pl.col("reasons_mask").replace_strict(
            {m: _ENCODE(reason_names(m)) for m in masks}, default=None, return_dtype=pl.String))
    any_set = pl.any_horizontal([pl.col(k).is_not_null() for k in tel_keys]) if tel_keys else pl.lit(False)
    return sampled.filter(any_set).select(
        "f", "n", "_t", "_pci", "_idx",
        (pl.lit("GPU ") + pl.col("_gpu") + pl.lit(" ") + pl.concat_str(msg_parts, separator=" ", ignore_nulls=True)).alias("message"),
        (pl.lit("{") + pl.concat_str(json_parts, separator=",", ignore_nulls=True) + pl.lit("}")).alias("attrs_json"),
    )


_ENCODE = ATTRS_ENCODER.encode  # as attrs_text encodes


def _iso(ns: int) -> str:
    s, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac // 1_000_000:03d}Z"


SOURCE = GpuCsvSource()
