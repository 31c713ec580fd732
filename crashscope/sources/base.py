"""The small interface every input source implements, and the helpers they share.

A source is one module in ``crashscope/sources/`` exposing ``SOURCE``. Two shapes:

* ``LineSource``: text logs. The ingest scans a file once (in Rust, via polars) for the
  union of every line source's ``prefilter`` and hands each source the matching lines of
  the file, in order, with 1-based line numbers. Mixed files (a ``slurm-%j.out`` holding
  NCCL, PyTorch, srun and traceback lines) are therefore parsed by every line source; the
  file is *claimed* by the source that sniffs highest.
* ``FileSource``: small structured files (JSON, CSV, ``nvidia-smi -q``) parsed whole.

Sources never raise on bad input: they call ``ctx.warn`` and go on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, ClassVar, Sequence, cast
from zoneinfo import ZoneInfo

import polars as pl
import regex

from crashscope.patterns import compile_pattern
from crashscope.schema import EVENT_SCHEMA, Kind, Severity, TimeQuality


class LazyPattern:
    """A module-level pattern compiled the first time it is used.

    The sources hold ~330 module-level ``regex`` patterns; compiling them all when
    ``crashscope.sources`` was imported cost every process ~0.45 s CPU (``regex`` parses in
    Python), and a small job uses about a third of them. The first attribute access
    (``.search``, ``.match``, ...) compiles, copies the compiled pattern's public attributes
    (its bound methods, ``groupindex`` ...) into the instance and turns it into a
    :class:`CompiledPattern`, a plain class without ``__getattr__``: a class with that hook
    costs ~300 ns more per attribute lookup, which a hot loop's ``_RX.match(line)`` would pay
    on every line. ``pattern`` is known without compiling; ``.compiled`` is the real
    ``regex.Pattern`` (pass it where one is required).
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    @property
    def compiled(self) -> Any:
        self._materialize()
        return self.__dict__["compiled"]

    def _materialize(self) -> None:
        rx = compile_pattern(self.pattern, self._flags)
        d = self.__dict__
        for name in dir(rx):
            if not name.startswith("_"):
                d[name] = getattr(rx, name)
        d["compiled"] = rx
        self.__class__ = CompiledPattern  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_flags", "pattern", "compiled"):
            raise AttributeError(name)
        self._materialize()
        return getattr(self, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyPattern, (self.pattern, self._flags))

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


class CompiledPattern:
    """A :class:`LazyPattern` after its first use: the compiled pattern's attributes are
    its own instance attributes."""

    pattern: str
    _flags: int

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyPattern, (self.pattern, self._flags))

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, compiled)"


def lazy_compile(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """:func:`compile_pattern`, compiled on first use (see LazyPattern); duck-types
    ``regex.Pattern`` for its methods."""
    return cast("regex.Pattern[str]", LazyPattern(pattern, flags))


UTC = timezone.utc

MAX_WARNINGS_PER_FILE = 20
_MIN_NS = 0  # 1970
_MAX_NS = 7_258_118_400 * 1_000_000_000  # 2200-01-01
MAX_EPOCH_S = _MAX_NS // 1_000_000_000  # plausible stamps end here (corrupted years do not)

# Bounds on identity fields (a hostile or corrupted log must not overflow a column or make
# the timeline's per-host/per-rank work explode). Out of range: the value is dropped.
MAX_RANK = 10_000_000  # schema Int32; far above any real world size
MAX_LOCAL_RANK = 65_535
MAX_GPU_INDEX = 1_024  # CUDA ordinals / nvidia-smi indices are per node
MAX_PID = 2**63 - 1  # schema Int64 (Linux pid_max is at most 2**22)
MAX_HOST_CHARS = 255  # HOST_NAME_MAX is 64; FQDNs are at most 253 (RFC 1035)
MAX_GPU_CHARS = 128  # PCI ids (16) or GPU UUIDs (40)
MAX_JOB_ID_CHARS = 128  # "123456_7+1.batch"
# Distinct values per file and source: a merged slurm-%j.out of a 16k-node job is fine.
MAX_HOSTS_PER_FILE = 16_384
MAX_RANKS_PER_FILE = 1_048_576
MAX_GPUS_PER_FILE = 131_072
# Identical events of one file beyond this many rows fold into the last of those rows
# (memory and every later stage stay bounded on a flood; ordinary logs are unchanged).
FOLD_AFTER = 8
# Samples of a series, already thinned by their source (one telemetry sample per GPU per
# minute, a bounded step series): their times are the point, so they never fold.
SERIES_KINDS = frozenset({Kind.GPU_TELEMETRY.value, Kind.TRAIN_STEP.value, Kind.ACTIVITY.value, Kind.CHECKPOINT.value})
MAX_ATTRS_CHARS = 64 * 1024  # longer attrs JSON: long strings in it are cut
_HOSTNAME = lazy_compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")


@dataclass(frozen=True, slots=True)
class ParseWarning:
    file: str
    line: int | None
    reason: str
    excerpt: str = ""

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        tail = f": {self.excerpt!r}" if self.excerpt else ""
        return f"{loc}: {self.reason}{tail}"


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a source knows about the file it parses."""

    path: str  # display path relative to the analysed root; "x.tar.gz!member" in archives
    name: str  # base name without a compression suffix
    host_hint: str | None = None  # from a per-node directory or a file name
    rank_hint: int | None = None  # from names like rank12.log


@dataclass(slots=True)
class ParseOptions:
    """Settings shared by every source in one ingest run."""

    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    tz_known: bool = False  # False: local stamps are read as UTC, quality "estimated"
    year: int | None = None  # for year-less stamps; None: current year, quality "estimated"
    month: int | None = None  # job start month, for Dec->Jan roll-over of year-less stamps


# Rows are built with ints for time and plain strings for the enums, then cast once.
_ROW_SCHEMA = {k: (pl.Int64 if k == "time" else pl.String if isinstance(v, pl.Enum) else v) for k, v in EVENT_SCHEMA.items()}


class ParseContext:
    """Collects the events and warnings of one file for one source."""

    def __init__(self, file: FileInfo, source: str, options: ParseOptions | None = None):
        self.file = file
        self.source = source
        self.options = options or ParseOptions()
        self.rows: list[dict[str, Any]] = []
        self.warnings: list[ParseWarning] = []
        self.suppressed_warnings = 0
        self._seen: dict[tuple, list[Any]] = {}  # event key -> [rows so far, last row]
        self._repeats: dict[int, list[Any]] = {}
        self._hosts: set[str] = set()
        self._ranks: set[int] = set()
        self._gpus: set[str] = set()
        self._dropped: set[str] = set()
        # Lines standing for a run of identical lines the ingest did not pass on (see
        # ingest._fold_runs): the row their event went to, to count the run onto.
        self.watch_lines: set[int] = set()
        self._line_rows: dict[int, dict[str, Any]] = {}
        self._yearless_times: set[int] = set()  # stamps yearless_ns dated in an assumed year

    def restart(self) -> None:
        """Forget every event and warning: the file is parsed again from the start (a
        source that read several files together and failed reads each one alone)."""
        watch = self.watch_lines
        self.__init__(self.file, self.source, self.options)  # type: ignore[misc]
        self.watch_lines = watch

    # -- output -------------------------------------------------------------------------
    def emit(
        self,
        kind: Kind | str,
        line: int | None,
        message: str,
        *,
        severity: Severity | str = Severity.INFO,
        time: int | None = None,
        time_quality: TimeQuality | str | None = None,
        host: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        gpu: str | None = None,
        gpu_index: int | None = None,
        pid: int | None = None,
        job_id: str | None = None,
        attrs: dict[str, Any] | None = None,
        attrs_json: str | None = None,
    ) -> None:
        """Record one event. ``time`` is UTC nanoseconds (see the ``*_ns`` helpers).

        Identity fields out of their plausible range are dropped (one warning per field and
        file). Identical events of a file (same kind, severity, identity, message and attrs;
        a flapping link prints one NCCL WARN a million times) give at most ``FOLD_AFTER``
        rows: the first ones are rows as usual, and the last of them stands for every later
        occurrence too, with ``repeat`` (occurrences it stands for, itself included),
        ``last_time`` and ``last_line`` in its attrs. Counting ``attrs.repeat`` (default 1)
        over rows gives the occurrences.

        ``attrs_json`` is ``attrs`` already encoded as ``attrs_text`` encodes it, for a
        source that encodes many rows at once; ``attrs`` wins where both are given.
        """
        if time is not None and not plausible_ns(time):
            # A corrupted stamp (year 8026) would overflow the column; keep the event, not the time.
            self.warn("implausible time stamp ignored", line)
            time, time_quality = None, TimeQuality.MISSING
        if time_quality is None:
            time_quality = TimeQuality.MISSING if time is None else TimeQuality.EXACT
        host = self._bound_host(short_host(host) if host else self.file.host_hint, line)
        if rank is None:
            rank = self.file.rank_hint
        if rank is not None:
            rank = self._bound_int("rank", rank, -1, MAX_RANK, line, self._ranks, MAX_RANKS_PER_FILE)
        if local_rank is not None:
            local_rank = self._bound_int("local_rank", local_rank, -1, MAX_LOCAL_RANK, line)
        if gpu_index is not None:
            gpu_index = self._bound_int("gpu_index", gpu_index, -1, MAX_GPU_INDEX, line)
        if pid is not None:
            pid = self._bound_int("pid", pid, 0, MAX_PID, line)
        if gpu is not None:
            gpu = self._bound_str("gpu", gpu, MAX_GPU_CHARS, line, self._gpus, MAX_GPUS_PER_FILE)
        if job_id is not None:
            job_id = self._bound_str("job_id", job_id, MAX_JOB_ID_CHARS, line)
        kind_v, severity_v = _val(kind), _val(severity)
        message = message[:2000]
        if attrs:
            attrs_json = attrs_text(attrs)
        key = (kind_v, severity_v, host, rank, local_rank, gpu, gpu_index, pid, job_id, message.strip(), attrs_json)
        seen = self._seen.get(key)
        if seen is not None and seen[0] >= FOLD_AFTER and kind_v not in SERIES_KINDS:
            last = seen[1]
            if line is not None and line in self.watch_lines:
                self._line_rows.setdefault(line, last)
            rep = self._repeats.get(id(last))
            if rep is None:
                rep = self._repeats[id(last)] = [last, 1, None, None]
            rep[1] += 1
            if time is not None:
                rep[2] = time
            if line is not None:
                rep[3] = line
            return
        row = {
            "time": time,
            "time_quality": _val(time_quality),
            "host": host,
            "rank": rank,
            "local_rank": local_rank,
            "gpu": gpu,
            "gpu_index": gpu_index,
            "pid": pid,
            "job_id": job_id,
            "source": self.source,
            "kind": kind_v,
            "severity": severity_v,
            "message": message,
            "attrs": attrs_json,
            "file": self.file.path,
            "line": line,
            "year_assumed": (time in self._yearless_times) if time is not None and self._yearless_times else None,
        }
        if seen is None:
            self._seen[key] = [1, row]
        else:
            seen[0] += 1
            seen[1] = row
        if line is not None and line in self.watch_lines:
            self._line_rows.setdefault(line, row)
        self.rows.append(row)

    def add_repeats(self, line: int, count: int, last_line: int) -> None:
        """``count`` more occurrences, up to ``last_line``, of the event emitted for ``line``
        (identical lines the ingest folded before parsing; their time is that line's)."""
        row = self._line_rows.get(line)
        if row is None or count <= 0:
            return
        rep = self._repeats.get(id(row))
        if rep is None:
            rep = self._repeats[id(row)] = [row, 1, None, None]
        rep[1] += count
        rep[2] = rep[2] if rep[2] is not None else row["time"]
        rep[3] = max(rep[3] or 0, last_line)

    @property
    def repeated(self) -> int:
        """Events folded into an earlier identical one so far."""
        return sum(rep[1] - 1 for rep in self._repeats.values())

    def take_rows(self) -> list[dict[str, Any]]:
        """The rows, with the repeat counts of collapsed events written into their attrs."""
        for row, count, last_time, last_line in self._repeats.values():
            a = json.loads(row["attrs"]) if row["attrs"] else {}
            a["repeat"] = count
            if last_time is not None:
                a["last_time"] = _iso_ns(last_time)
            if last_line is not None:
                a["last_line"] = last_line
            row["attrs"] = _ATTRS_ENCODER.encode(a)
        self._repeats.clear()
        self._seen.clear()
        self._line_rows.clear()
        return self.rows

    # -- bounds on identity fields ---------------------------------------------------------
    def _drop_once(self, field_name: str, reason: str, line: int | None, excerpt: str) -> None:
        if field_name not in self._dropped:
            self._dropped.add(field_name)
            self.warn(f"{reason}; dropped (further ones in this file dropped silently)", line, excerpt)

    def _bound_int(
        self, name: str, v: Any, lo: int, hi: int, line: int | None, seen: set | None = None, max_distinct: int = 0
    ) -> int | None:
        try:
            iv = int(v)
        except (TypeError, ValueError, OverflowError):
            self._drop_once(name, f"{name} is not an integer", line, str(v)[:80])
            return None
        if not lo <= iv <= hi:
            self._drop_once(name, f"{name} out of range ({lo}..{hi})", line, str(iv)[:80])
            return None
        if seen is not None and iv not in seen:
            if len(seen) >= max_distinct:
                self._drop_once(f"{name}#distinct", f"more than {max_distinct} distinct {name} values in one file", line, str(iv))
                return None
            seen.add(iv)
        return iv

    def _bound_str(
        self, name: str, v: Any, max_chars: int, line: int | None, seen: set | None = None, max_distinct: int = 0
    ) -> str | None:
        s = str(v)
        if len(s) > max_chars or not s.isprintable():
            self._drop_once(name, f"{name} longer than {max_chars} characters or not printable", line, s[:80])
            return None
        if seen is not None and s not in seen:
            if len(seen) >= max_distinct:
                self._drop_once(f"{name}#distinct", f"more than {max_distinct} distinct {name} values in one file", line, s[:80])
                return None
            seen.add(s)
        return s

    def _bound_host(self, host: str | None, line: int | None) -> str | None:
        if host is None:
            return None
        if host in self._hosts:
            return host
        if len(host) > MAX_HOST_CHARS or not _HOSTNAME.fullmatch(host):
            self._drop_once("host", f"host name longer than {MAX_HOST_CHARS} characters or with characters no host name has", line, host[:80])
            return None
        if len(self._hosts) >= MAX_HOSTS_PER_FILE:
            self._drop_once("host#distinct", f"more than {MAX_HOSTS_PER_FILE} distinct host names in one file", line, host[:80])
            return None
        self._hosts.add(host)
        return host

    def warn(self, reason: str, line: int | None = None, excerpt: str = "") -> None:
        if len(self.warnings) >= MAX_WARNINGS_PER_FILE:
            self.suppressed_warnings += 1
            return
        self.warnings.append(ParseWarning(self.file.path, line, reason, excerpt[:80]))

    def frame(self) -> pl.DataFrame:
        return frame_from_rows(self.take_rows())

    # -- time -----------------------------------------------------------------------------
    def local_quality(self) -> TimeQuality:
        """Quality of a local-time stamp converted with the configured zone."""
        return TimeQuality.EXACT if self.options.tz_known else TimeQuality.ESTIMATED

    def local_ns(self, year: int, month: int, day: int, hh: int, mm: int, ss: int, ns: int = 0) -> int | None:
        """Local wall time (no zone printed) to UTC ns, using the run's time zone."""
        try:
            dt = datetime(year, month, day, hh, mm, ss, tzinfo=self.options.tz)
        except ValueError:
            return None
        return epoch_ns(dt) + ns

    def yearless_ns(self, month: int, day: int, hh: int, mm: int, ss: int, ns: int = 0) -> int | None:
        """Year-less local stamp (syslog, c10, torchrun): dated in the job's year.

        The year is the one that puts the stamp within six months of the job's month, so a
        job across New Year gets December stamps in one year and January ones in the next,
        whichever side of it the reference month lies on.
        """
        year = self.options.year or datetime.now(UTC).year
        ref = self.options.month
        if ref is not None:
            if month - ref > 6:
                year -= 1
            elif ref - month > 6:
                year += 1
        t = self.local_ns(year, month, day, hh, mm, ss, ns)
        if t is not None and self.options.year is None:
            self._yearless_times.add(t)
        return t


def frame_from_rows(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Event rows (as ``ParseContext.emit`` builds them) to one ``EVENT_SCHEMA`` frame."""
    if not rows:
        return pl.DataFrame(schema=EVENT_SCHEMA)
    for r in rows:
        # A file name that is not UTF-8 arrives surrogate-escaped, which polars cannot hold:
        # the events show its bytes as \xNN (the file record keeps the name as it was).
        f = r.get("file")
        if f and not f.isascii():
            try:
                f.encode("utf-8")
            except UnicodeEncodeError:
                r["file"] = f.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    df = pl.DataFrame(rows, schema={**_ROW_SCHEMA}, strict=False)
    return df.with_columns(pl.col("time").cast(pl.Datetime("ns", "UTC"))).select(
        [pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()]
    )


# What json.dumps(x, separators=(",", ":"), default=str) builds on every call, built once:
# the same text, ~40% less time an event.
_ATTRS_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
ATTRS_ENCODER = _ATTRS_ENCODER  # for sources that encode attrs values themselves (gpu_csv)


def attrs_text(attrs: dict[str, Any]) -> str:
    """An event's ``attrs`` column text: compact JSON, long strings cut past MAX_ATTRS_CHARS."""
    text = _ATTRS_ENCODER.encode(attrs)
    if len(text) <= MAX_ATTRS_CHARS:
        return text
    cut = {k: (v[:1024] + "...[cut]" if isinstance(v, str) and len(v) > 1024 else v) for k, v in attrs.items()}
    text = _ATTRS_ENCODER.encode(cut)
    if len(text) <= MAX_ATTRS_CHARS:
        return text
    return json.dumps({"attrs_cut": f"attrs of {len(text)} characters dropped"})


def _iso_ns(t: int) -> str:
    s, ns = divmod(t, 1_000_000_000)
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


def _val(x: Any) -> Any:
    return x.value if hasattr(x, "value") else x


def plausible_ns(t: int) -> bool:
    """Within 1970..2200: anything else is a corrupted stamp."""
    return _MIN_NS <= t <= _MAX_NS


def epoch_ns(dt: datetime) -> int:
    """Aware datetime to integer ns since the epoch, without float rounding."""
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def iso_to_ns(text: str, ctx: ParseContext | None = None) -> tuple[int | None, TimeQuality]:
    """Parse ISO-8601-ish stamps: with zone -> exact; without -> local via ``ctx``.

    Accepts ``T`` or space or ``_`` between date and time, ``,`` or ``.`` before the
    fraction, ``Z``, ``+hh:mm`` and ``+hhmm`` offsets.
    """
    m = _ISO.match(text.strip())
    if not m:
        return None, TimeQuality.MISSING
    y, mo, d, hh, mi, ss = (int(m.group(i)) for i in ("y", "mo", "d", "hh", "mi", "ss"))
    frac = m.group("frac") or ""
    ns = int((frac + "000000000")[:9]) if frac else 0
    zone = m.group("zone")
    try:
        if zone:
            if zone == "Z":
                tz: Any = UTC
            else:
                sign = 1 if zone[0] == "+" else -1
                digits = zone[1:].replace(":", "")
                tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))
            t = epoch_ns(datetime(y, mo, d, hh, mi, ss, tzinfo=tz)) + ns
            # A corrupted year (8026) would overflow the schema's Datetime("ns") column.
            return (t, TimeQuality.EXACT) if _MIN_NS <= t <= _MAX_NS else (None, TimeQuality.MISSING)
        if ctx is None:
            return epoch_ns(datetime(y, mo, d, hh, mi, ss, tzinfo=UTC)) + ns, TimeQuality.ESTIMATED
        t = ctx.local_ns(y, mo, d, hh, mi, ss, ns)
        if t is None or not _MIN_NS <= t <= _MAX_NS:
            return None, TimeQuality.MISSING
        return t, ctx.local_quality()
    except ValueError:
        return None, TimeQuality.MISSING


_ISO = lazy_compile(
    r"""(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T _](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)
        (?:[.,](?P<frac>\d{1,9}))?
        (?P<zone>Z|[+-]\d\d:?\d\d)?""",
    regex.VERBOSE,
)

MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


# -- identity helpers ----------------------------------------------------------------------

def short_host(host: str) -> str:
    """Hosts are compared by short name (NCCL and Slurm print short names; torchrun FQDNs)."""
    host = host.strip()
    if _IPV4.fullmatch(host):
        return host
    return host.split(".", 1)[0]


_IPV4 = lazy_compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_PCI = lazy_compile(r"(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?")


def normalize_pci(text: str) -> str | None:
    """PCI addresses in every spelling to lower-case ``dddd:bb:dd.f``.

    Xid prints ``0000:3b:00`` (no function), nvidia-smi ``00000000:3B:00.0`` (8-digit
    domain), NCCL ``busId 3b000`` (hex, no separators: bus<<12 | dev<<4 | fn... see
    ``pci_from_nccl_busid``).
    """
    m = _PCI.fullmatch(text.strip())
    if not m:
        return None
    dom = (m.group("dom") or "0000")[-4:]
    return f"{dom}:{m.group('bus')}:{m.group('dev')}.{m.group('fn') or '0'}".lower()


def pci_from_nccl_busid(busid: str) -> str | None:
    """NCCL ``busId`` is the bus id as hex without separators: ``1b000`` = 0000:1b:00.0."""
    try:
        v = int(busid, 16)
    except ValueError:
        return None
    fn, dev, bus, dom = v & 0xF, (v >> 4) & 0xFF, (v >> 12) & 0xFF, (v >> 20) & 0xFFFF
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """What the launcher put in front of a program's line."""

    task: int | None = None  # srun --label task id (SLURM_PROCID)
    local_rank: int | None = None  # torchrun [default3]:
    rank: int | None = None  # c10 / python [rank3]:, else mpirun's / horovodrun's rank tag
    host: str | None = None  # pdsh's "<host>: " (DeepSpeed's multi-node launcher), Ray's "ip=<addr>"
    pid: int | None = None  # Ray's worker-log prefix "(<name> pid=N)": the worker process's pid
    ray: str | None = None  # ... and its actor/task name ("" when Ray printed none; "raylet", "autoscaler")


# mpirun --tag-output: "[<jobid>,<vpid>]<stdout>:" (Open MPI 4, orte/mca/iof/base/iof_base_setup.c;
# Open MPI 5 / PRRTE "--output tag" adds a space), the vpid being the MPI_COMM_WORLD rank;
# horovodrun "[<index>]<stdout>:" (horovod/runner/common/util/safe_shell_exec.py prefix_connection).
# pdsh puts "<host>: " before every line of a remote command (dshbak(1), pdsh 2.31: "the
# leading 'node:'"), so DeepSpeed's multi-node launcher (deepspeed/launcher/multinode_runner.py
# PDSHRunner) shows "<host>: [rank14]: ..."; the host is read as a prefix only when a
# torchrun/c10 tag follows it and it is not all digits (that is srun's task id).
# Ray's driver reprints every worker's stdout/stderr line as
# "{Style.DIM}{color}({actor or task name} pid={pid}[, ip={ip}]){Style.RESET_ALL} {line}"
# (ray-project/ray python/ray/_private/worker.py print_worker_logs / prefix_for; the name since
# Ray 2.x, ", ip=" when the worker is on another node than the driver; "(raylet)" and
# "(autoscaler +1m2s)" for Ray's own lines); pastes often keep the colorama codes, or their
# "[36m" without the ESC byte.
_PREFIX = lazy_compile(
    r"""^(?:(?=[\w.-]*[A-Za-z.])(?P<host>[A-Za-z0-9][\w.-]{0,62}):\ (?=\[(?:rank|default)\d+\]:))?   # pdsh "host: "
        (?:\s*(?P<task>\d{1,6}):\ )?               # srun --label "12: " (right-aligned)
        (?:(?:\x1b?\[[0-9;]{0,8}m)*                  # Ray worker-log prefix, colorama codes around it
           \((?:(?:(?P<rayname>[^\s()]{1,200})\ )?pid=(?P<raypid>\d{1,9})|(?P<raysys>raylet|autoscaler\ \+[\dhms]{1,12}))
           (?:,\ ip=(?P<rayip>[0-9A-Fa-f.:]{3,45}))?\)
           (?:\x1b?\[[0-9;]{0,8}m)*\ ?)?
        (?:\[(?:\d{1,9},)?(?P<mpi>\d{1,7})\]<std(?:out|err|diag)>:\ ?)?   # mpirun / horovodrun tag
        (?:\[(?P<role>[A-Za-z_][\w-]*?)(?P<lr>\d+)\]:\s?)?   # torchrun "[default3]:"
        (?:\[rank(?P<rank>\d+)\]:\s?)?                 # c10 / python "[rank3]:"
    """,
    regex.VERBOSE,
)


def split_prefix(text: str) -> tuple[LinePrefix, str]:
    """Strip ``srun -l``, Ray's worker-log, torchrun and ``[rankN]:`` prefixes from a line.

    >>> split_prefix(" 3: [default1]:[rank9]:[E0917 04:21:41.1 x.cpp:1] hi")
    (LinePrefix(task=3, local_rank=1, rank=9, host=None, pid=None, ray=None), '[E0917 04:21:41.1 x.cpp:1] hi')
    >>> split_prefix("100.83.191.29: [rank14]: RuntimeError: x")
    (LinePrefix(task=None, local_rank=None, rank=14, host='100.83.191.29', pid=None, ray=None), 'RuntimeError: x')
    >>> split_prefix("(WorkerDict pid=835, ip=172.26.143.83) [rank38]:[E809 14:59:30.4 x.cpp:1] hi")
    (LinePrefix(task=None, local_rank=None, rank=38, host='172.26.143.83', pid=835, ray='WorkerDict'), '[E809 14:59:30.4 x.cpp:1] hi')
    """
    m = _PREFIX.match(text)
    if not m or m.end() == 0:
        return _NO_PREFIX, text
    role = m.group("role")
    lr = int(m.group("lr")) if m.group("lr") is not None and role != "rank" else None
    rank = m.group("rank")
    if role == "rank" and m.group("lr") is not None and rank is None:
        rank = m.group("lr")
    if rank is None:
        rank = m.group("mpi")
    ray = m.group("raysys") or m.group("rayname") or ("" if m.group("raypid") is not None else None)
    return (
        LinePrefix(
            task=int(m.group("task")) if m.group("task") is not None else None,
            local_rank=lr,
            rank=int(rank) if rank is not None else None,
            host=m.group("host") or m.group("rayip"),
            pid=int(m.group("raypid")) if m.group("raypid") is not None else None,
            ray=ray.split(" ", 1)[0] if ray else ray,
        ),
        text[m.end():],
    )


_NO_PREFIX = LinePrefix()


# -- the interface --------------------------------------------------------------------------

class Source:
    """Common metadata of a source. Subclass ``LineSource`` or ``FileSource``."""

    name: ClassVar[str]
    description: ClassVar[str]
    # fnmatch patterns on the base name: a weak prior, content sniffing decides.
    filename_hints: ClassVar[tuple[str, ...]] = ()

    def sniff(self, head: str, name: str) -> float:
        """Confidence 0..1 that this source understands a file, from its first 8 KiB."""
        raise NotImplementedError


class LineSource(Source):
    # A regex (Rust `regex` syntax, also valid Python `regex`) selecting the lines this
    # source wants. Runs over every line of every text file, so keep it literal-heavy.
    prefilter: ClassVar[str]

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        """Parse the prefilter-matching lines of one file (1-based numbers, file order)."""
        raise NotImplementedError


def feed_guarded(
    ctx: ParseContext,
    lines: Sequence[tuple[int, str]],
    on_line: Callable[[int, str], None],
    on_end: Callable[[], None] | None = None,
) -> None:
    """Feed lines to a source's parser so that one odd line (or an unfinished block at the
    end) costs a warning, never the file."""
    for n, text in lines:
        try:
            on_line(n, text)
        except Exception as exc:  # noqa: BLE001
            ctx.warn(f"{ctx.source}: line not parsed ({type(exc).__name__})", n, text)
    if on_end is not None:
        try:
            on_end()
        except Exception as exc:  # noqa: BLE001
            ctx.warn(f"{ctx.source}: unfinished block not parsed ({type(exc).__name__})")


class FileSource(Source):
    max_bytes: ClassVar[int] = 64 * 1024 * 1024  # larger files are cut with a warning
    # True: the ingest hands it the files of a batch together (``parse_files``), for a
    # source whose fixed cost per file is most of its time (one polars pipeline each)
    batchable: ClassVar[bool] = False

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        """Parse one whole (decompressed) file."""
        raise NotImplementedError

    def parse_files(self, items: list[tuple[bytes, ParseContext]]) -> None:
        """Parse several whole files, each into its own context: the same events and
        warnings as ``parse_file`` on each (which is what this default does)."""
        for data, ctx in items:
            self.parse_file(data, ctx)


MAX_JSON_DEPTH = 64  # real collector/sacct/torchelastic JSON nests fewer than 10 levels


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for files a user wrote: nesting deeper than ``max_depth`` (which
    would exhaust the stack here or in any later walk of the value) raises
    ``json.JSONDecodeError`` like any other invalid JSON, never ``RecursionError``."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(f"nested too deeply (more than {max_depth} levels)", "", 0) from None
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if d > max_depth:
            raise json.JSONDecodeError(f"nested too deeply (more than {max_depth} levels)", "", 0)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values() if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return obj


def decode(data: bytes) -> tuple[str, bool]:
    """Decode bytes as UTF-8; returns (text, had_invalid_bytes)."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "backslashreplace"), True
