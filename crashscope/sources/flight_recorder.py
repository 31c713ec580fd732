"""PyTorch Flight Recorder dumps (c10d ``FlightRecorder``, torchcomms' ``FlightRecorderHook``): one file per rank.

Where they come from: with ``TORCH_FR_BUFFER_SIZE`` (older ``TORCH_NCCL_TRACE_BUFFER_SIZE``) > 0 every
collective is recorded in a ring buffer; ProcessGroupNCCL's watchdog dumps it on a timeout to
``{TORCH_FR_DUMP_TEMP_FILE}{rank}`` (older ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``; default prefix
``/tmp/nccl_trace_rank_``), a program may dump it itself (``torch._C._distributed_c10d._dump_fr_trace()``
for the pickle, ``_dump_fr_trace_json()`` for JSON; ``_dump_nccl_trace`` before the rename), torchtitan
names them ``{dump_dir}/rank_{N}``, torchcomms ``{TORCHCOMM_FR_DUMP_TEMP_FILE}{rank}`` (default
``~/.cache/torch/comm_lib_trace_rank_``). With gloo there is no watchdog that dumps.

Format (torch 2.13's ``torch/csrc/distributed/c10d/FlightRecorder.hpp`` / ``FlightRecorderDetail.hpp``,
``version_val`` "2.10"; keys only accumulate from 2.x on; torchcomms ``comms/torchcomms/hooks/fr/
FlightRecorder.cpp`` writes the same keys, ``p2p_seq_id`` 0, ``is_p2p`` false and the communicator's
name and backend as the process group)::

    {'version': '2.10', 'comm_lib_version': '',
     'pg_config': {'0': {'name': '0', 'desc': 'default_pg', 'ranks': '[0, 1, 2, 3]'}},
     'pg_status': {'0': {'last_enqueued_collective': 6, 'last_started_collective': -1, 'last_completed_collective': 6}},
     'entries': [{'record_id': 11, 'pg_id': 0, 'process_group': ('0', 'default_pg'), 'collective_seq_id': 6,
                  'p2p_seq_id': 0, 'op_id': 6, 'profiling_name': 'gloo:all_reduce', 'time_created_ns': 1796132982629057791,
                  'input_sizes': [[3]], 'input_dtypes': ['Float'], 'output_sizes': [[3]], 'output_dtypes': ['Float'],
                  'state': 'scheduled', 'time_discovered_started_ns': None, 'time_discovered_completed_ns': None,
                  'retired': True, 'timeout_ms': 5000, 'is_p2p': False, 'thread_id': '1403...', 'thread_name': 'python3',
                  'frames': [{'name': 'all_reduce', 'filename': '.../distributed_c10d.py', 'line': 3252}, ...]}]}

The pickle is protocol 2 (``torch::jit::Pickler``) of plain dicts, lists, tuples, strings, ints,
floats, bools and None. The JSON dump (nlohmann, keys sorted) has the same keys without ``frames``,
``0`` for the missing ``time_discovered_*`` and the ``pg_status`` numbers as strings. ``pg_id`` is the
rank's local PG index; ``process_group[0]`` (the PG name) is what is the same on every member, so
collectives are matched across ranks by that name and ``collective_seq_id``. The dump names no rank
of its own (``fr_trace`` takes it from ``<prefix><rank>``): the rank is a ``rank`` key when a
variant has one, else the file name's number. Observed with torch 2.13 gloo (``benchmarks/lab/
fr_record.py``): ``pg_config`` holds one entry keyed ``''`` with ranks ``'[]'`` while the entries say
``('0', 'default_pg')``; every entry stays ``scheduled`` (gloo reports no start/completion), and
``pg_status`` counts a collective that timed out as completed.

Reading: the file is sniffed by the pickle protocol header plus the key names in its head, or by
the JSON keys. The pickle is loaded by an unpickler that refuses every global (``find_class``) and
persistent id, so no class is built and no code runs; only containers and scalars load. Entries
are capped at ``MAX_ENTRIES``, frames at ``MAX_FRAMES``.

Events: one ``trace_dump`` per file (attrs: format, version, entries, pg_config {pg: {desc, ranks}},
pg_status {pg_id: {last_enqueued, last_started, last_completed}}, rank_from) and one ``collective``
per entry (attrs: pg, pg_desc, pg_id, seq, p2p_seq, op_id, record_id, op, state, is_p2p,
input_sizes, input_dtypes, output_sizes, output_dtypes, timeout_ms, started_ns, completed_ns,
duration_ms, retired, frame (innermost frame "file:line in name"); time: ``time_created_ns``).
A dump has no text lines: an entry's ``line`` is its 1-based position in ``entries`` (the header's is 1).
"""

from __future__ import annotations

import io
import pickle
from pathlib import PurePosixPath
from typing import Any

import regex

from crashscope.schema import Kind
from crashscope.sources.base import FileSource, ParseContext, decode, load_json
from crashscope.sources.base import lazy_compile

MAX_ENTRIES = 100_000  # the ring buffer is 2000 by default; a bigger one is cut here
MAX_FRAMES = 64
MAX_TENSORS = 64  # input/output tensors of one entry kept in attrs
MAX_DIMS = 16
MAX_PGS = 1_024
MAX_STR = 512
STATES = ("scheduled", "started", "completed")

# Head of a pickle: PROTO opcode (0x80) and protocol 2..5, as the ingest's sniff text shows it
# (invalid UTF-8 bytes become "\\x80"). The key names are plain UTF-8 in the pickle.
_PICKLE_HEAD = lazy_compile(r"^(?:\\x80|\x80)[\x02-\x05]")
_HEAD_KEYS = ("pg_config", "pg_status", "entries", "collective_seq_id", "profiling_name", "nccl_trace", "comm_lib_version")
_JSON_HEAD = lazy_compile(r'^\s*\{\s*"')
_RANK_IN_NAME = (
    lazy_compile(r"(?:rank|_dump)[-_.]?(\d{1,7})(?:\.(?:json|pkl|pickle))?$", regex.IGNORECASE),
    lazy_compile(r"(\d{1,7})(?:\.(?:json|pkl|pickle))?$"),  # fr_trace: <prefix><rank>
)
_RANKS = lazy_compile(r"\d{1,7}")


class _NoGlobals(pickle.Unpickler):
    """Loads only what pickle builds without a global: dicts, lists, tuples, sets, str, bytes,
    int, float, bool, None. Every class, function or persistent id is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module[:80]}.{name[:80]} refused")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id refused")


def load_restricted(data: bytes) -> Any:
    """Unpickle ``data`` admitting only plain containers and scalars (raises on anything else)."""
    return _NoGlobals(io.BytesIO(data)).load()


class FlightRecorderSource(FileSource):
    name = "flight_recorder"
    description = "PyTorch Flight Recorder dumps (pickle and JSON; c10d 2.x and torchcomms)"
    filename_hints = ("nccl_trace_rank_*", "*trace_rank_*", "rank_*", "*_dump_*", "comm_lib_trace_rank_*", "*fr_trace*")
    max_bytes = 256 * 1024 * 1024
    reads_binary = True  # the ingest hands the bytes over without the "binary data" warning

    def sniff(self, head: str, name: str) -> float:
        if _PICKLE_HEAD.match(head):
            keys = sum(f"{k}" in head for k in _HEAD_KEYS)
            if "version" in head and keys >= 1:
                return 0.95
            return 0.0
        if _JSON_HEAD.match(head):
            if '"pg_config"' in head and ('"pg_status"' in head or '"version"' in head):
                return 0.9
            if '"collective_seq_id"' in head and '"profiling_name"' in head:
                return 0.9
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        fmt = "pickle" if data[:1] == b"\x80" else "json"
        try:
            if fmt == "pickle":
                obj = load_restricted(data)
            else:
                text, _ = decode(data)
                obj = load_json(text)
        except Exception as exc:  # noqa: BLE001 - truncated, garbage or refused content: one warning
            ctx.warn(f"flight_recorder: {fmt} dump not loaded ({type(exc).__name__}: {str(exc)[:120]})")
            return
        if not isinstance(obj, dict):
            ctx.warn(f"flight_recorder: {fmt} dump is a {type(obj).__name__}, not a dict")
            return
        rank, rank_from = _rank(obj, ctx)
        host = obj.get("hostname") or obj.get("host_name")
        host = host if isinstance(host, str) and host and not host.startswith("host_rank") else None
        entries = obj.get("entries")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            ctx.warn("flight_recorder: 'entries' is not a list")
            entries = []
        if len(entries) > MAX_ENTRIES:
            ctx.warn(f"flight_recorder: {len(entries)} entries; the last {MAX_ENTRIES} were read")
            entries = entries[-MAX_ENTRIES:]
        version = _str(obj.get("version"))
        header = {
            "format": fmt,
            "version": version,
            "entries": len(entries),
            "pg_config": _pg_config(obj.get("pg_config")),
            "pg_status": _pg_status(obj.get("pg_status")),
            "rank_from": rank_from,
        }
        if obj.get("comm_lib_version"):
            header["comm_lib_version"] = _str(obj.get("comm_lib_version"))
        ctx.emit(Kind.TRACE_DUMP, 1, f"Flight Recorder dump ({fmt}, version {version or '?'}) with {len(entries)} entries",
                 rank=rank, host=host, attrs=header)
        bad = 0
        for pos, e in enumerate(entries, 1):
            if not isinstance(e, dict):
                bad += 1
                continue
            try:
                attrs, t = _entry(e)
            except (TypeError, ValueError, OverflowError):
                bad += 1
                continue
            pg = f"{attrs.get('pg')}" + (f" ({attrs['pg_desc']})" if attrs.get("pg_desc") else "")
            msg = (f"{attrs.get('op') or '?'} PG {pg} #{attrs.get('seq')} {attrs.get('state') or '?'}"
                   f" in {attrs.get('input_sizes')} {','.join(attrs.get('input_dtypes') or [])} (record {attrs.get('record_id')})")
            ctx.emit(Kind.COLLECTIVE, pos, msg, time=t, rank=rank, host=host, attrs=attrs)
        if bad:
            ctx.warn(f"flight_recorder: {bad} entries that are not entry dicts skipped")


def _rank(obj: dict, ctx: ParseContext) -> tuple[int | None, str]:
    r = obj.get("rank")
    if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 10_000_000:
        return r, "key"
    base = PurePosixPath(ctx.file.path.split("!")[-1]).name
    for rx in _RANK_IN_NAME:
        if m := rx.search(base):
            return int(m.group(1)), "file name"
    if ctx.file.rank_hint is not None:
        return ctx.file.rank_hint, "path"
    ctx.warn("flight_recorder: no rank in the dump or its file name")
    return None, "unknown"


def _str(v: Any) -> str:
    return v[:MAX_STR] if isinstance(v, str) else "" if v is None else str(v)[:MAX_STR] if isinstance(v, (int, float)) else ""


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, str) and regex.fullmatch(r"-?\d{1,19}", v.strip()):
        return int(v)
    return None


def _pg_config(v: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(v, dict):
        return out
    for k, info in list(v.items())[:MAX_PGS]:
        if not isinstance(info, dict):
            continue
        name = _str(info.get("name", k))
        ranks_text = info.get("ranks")
        ranks: list[int] = []
        if isinstance(ranks_text, str):
            ranks = [int(x) for x in _RANKS.findall(ranks_text[:1_000_000])]
        elif isinstance(ranks_text, list):
            ranks = [x for x in ranks_text if isinstance(x, int) and not isinstance(x, bool)]
        out[name] = {"desc": _str(info.get("desc")), "ranks": ranks[:100_000]}
    return out


def _pg_status(v: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(v, dict):
        return out
    for k, st in list(v.items())[:MAX_PGS]:
        if isinstance(st, dict):
            out[_str(k)] = {
                "last_enqueued": _int(st.get("last_enqueued_collective")),
                "last_started": _int(st.get("last_started_collective")),
                "last_completed": _int(st.get("last_completed_collective")),
            }
    return out


def _sizes(v: Any) -> list[list[int]]:
    if not isinstance(v, list):
        return []
    out = []
    for s in v[:MAX_TENSORS]:
        if isinstance(s, (list, tuple)):
            out.append([int(d) for d in s[:MAX_DIMS] if isinstance(d, int) and not isinstance(d, bool)])
    return out


def _dtypes(v: Any) -> list[str]:
    return [_str(d)[:32] for d in v[:MAX_TENSORS]] if isinstance(v, list) else []


def _entry(e: dict) -> tuple[dict[str, Any], int | None]:
    pg = e.get("process_group")
    pg_name, pg_desc = (pg[0], pg[1]) if isinstance(pg, (list, tuple)) and len(pg) >= 2 else (pg, None)
    state = _str(e.get("state"))
    attrs: dict[str, Any] = {
        "pg": _str(pg_name) if pg_name is not None else _str(e.get("pg_id")),
        "pg_desc": _str(pg_desc),
        "pg_id": _int(e.get("pg_id")),
        "seq": _int(e.get("collective_seq_id")),
        "p2p_seq": _int(e.get("p2p_seq_id")),
        "op_id": _int(e.get("op_id")),
        "record_id": _int(e.get("record_id")),
        "op": _str(e.get("profiling_name")),
        "state": state if state in STATES else (state or None),
        "is_p2p": bool(e.get("is_p2p")) if isinstance(e.get("is_p2p"), bool) else None,
        "input_sizes": _sizes(e.get("input_sizes")),
        "input_dtypes": _dtypes(e.get("input_dtypes")),
        "output_sizes": _sizes(e.get("output_sizes")),
        "output_dtypes": _dtypes(e.get("output_dtypes")),
        "timeout_ms": _int(e.get("timeout_ms")),
        "retired": e.get("retired") if isinstance(e.get("retired"), bool) else None,
    }
    for key, src in (("started_ns", "time_discovered_started_ns"), ("completed_ns", "time_discovered_completed_ns")):
        v = _int(e.get(src))
        attrs[key] = v if v else None  # JSON writes 0 for "never"
    d = e.get("duration_ms")
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        attrs["duration_ms"] = float(d)
    frames = e.get("frames")
    if isinstance(frames, list) and frames and isinstance(frames[0], dict):
        f = frames[0]
        attrs["frame"] = f"{_str(f.get('filename'))}:{_int(f.get('line'))} in {_str(f.get('name'))}"
        attrs["frames"] = len(frames[:MAX_FRAMES])
    t = _int(e.get("time_created_ns"))
    return {k: v for k, v in attrs.items() if v is not None}, (t if t and t > 0 else None)


SOURCE = FlightRecorderSource()
