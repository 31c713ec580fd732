"""Per-node shards: one node's parsed events, made where its logs are, merged later.

Layout (``<spool_dir>/<jobid>/``)::

    n1.shard/events.parquet   the node's events in the event schema (crashscope/schema.py);
                              enumerated columns stored as strings so a newer crashscope's
                              vocabulary never breaks an older reader (unknown values drop)
    n1.shard/shard.json       {"format": "crashscope-shard/1", "node", "job_id", "created",
                               "seconds", "job_files" (it holds the job's stdout/stderr), "coverage": {"files": [...FileRecord fields]},
                               "warnings": [...], "events": N}
    _job.shard/               the job's stdout/stderr and scheduler record (made by the merge)

A directory holding ``*.shard/shard.json`` children (or a ``.shard`` directory itself) is a
spool: :func:`read_spool` gives its events for ``ingest`` (which concatenates them with any
other files it finds), so ``crashscope analyze <spool>/<jobid>`` runs the normal timeline and
verdict on shards built in parallel by the job's own nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from crashscope.schema import EVENT_SCHEMA

FORMAT = "crashscope-shard/1"
SUFFIX = ".shard"
META = "shard.json"
EVENTS = "events.parquet"
MAX_META_BYTES = 4 << 20
MAX_EVENTS_BYTES = 1 << 30
MAX_SHARDS = 100_000
_ENUMS = [c for c, t in EVENT_SCHEMA.items() if isinstance(t, pl.Enum)]


def to_storage(events: pl.DataFrame) -> pl.DataFrame:
    return events.select([pl.col(c).cast(pl.String) if c in _ENUMS else pl.col(c) for c in EVENT_SCHEMA])


def from_storage(frame: pl.DataFrame, *, keep_invalid: bool = False) -> tuple[pl.DataFrame, int]:
    """A stored frame back in the event schema; rows with values outside this version's
    vocabularies are dropped (returned as the count), or kept with ``keep_invalid``."""
    cols = []
    for c, t in EVENT_SCHEMA.items():
        if c not in frame.columns:
            cols.append(pl.lit(None, dtype=t).alias(c))
        elif isinstance(t, pl.Enum):
            cols.append(pl.col(c).cast(pl.String).cast(t, strict=False).alias(c))  # a value not in the vocabulary: null
        elif isinstance(t, pl.Datetime):
            cols.append(pl.col(c).cast(pl.Datetime("ns", "UTC"), strict=False).alias(c))
        else:
            cols.append(pl.col(c).cast(t, strict=False).alias(c))
    out = frame.select(cols)
    if keep_invalid:
        return out, 0
    before = out.height
    out = out.filter(pl.col("source").is_not_null() & pl.col("kind").is_not_null() & pl.col("severity").is_not_null() & pl.col("time_quality").is_not_null())
    return out, before - out.height


def write_shard(job_dir: Path, name: str, events: pl.DataFrame, *, node: str | None, job_id: str,
                files: list[dict[str, Any]], warnings: list[str], seconds: float, job_files: bool = False) -> Path:
    """Write ``<job_dir>/<name>.shard`` atomically (a temporary directory renamed into place)."""
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = job_dir / f"{name}{SUFFIX}"
    tmp = job_dir / f".{name}{SUFFIX}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        # lz4, not zstd: the merge decodes every node's shard, ~30% faster (a 16,384-rank
        # spool: 1.2 -> 0.8 CPU s) for ~35% more bytes (41 -> 55 MB); any codec reads back
        to_storage(events).write_parquet(tmp / EVENTS, compression="lz4")
        meta = {"format": FORMAT, "node": node, "job_id": job_id, "created": time.time(), "seconds": round(seconds, 3),
                "events": events.height, "job_files": job_files, "coverage": {"files": files}, "warnings": warnings[:1000]}
        (tmp / META).write_text(json.dumps(meta, default=str))
        if final.exists():
            old = job_dir / f".{name}{SUFFIX}.{os.getpid()}.old"
            os.rename(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


@dataclass
class Spool:
    root: Path
    shards: list[Path]
    events: pl.DataFrame
    files: list[Any] = field(default_factory=list)  # ingest.FileRecord
    warnings: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def owns(self, rel: str) -> bool:
        """A path (relative to the spool root) that belongs to a shard: not read as a log."""
        first = rel.split("/", 1)[0]
        # shard folders, their temporaries, the merge lock and the epilog's own log
        return first.endswith(SUFFIX) or first.startswith(".") or rel in (META, EVENTS, "epilog.log")


def shard_meta(d: Path) -> dict[str, Any]:
    try:
        meta = json.loads(_read_bounded(d / META, MAX_META_BYTES))
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        return {}


def shard_dirs(root: Path) -> list[Path]:
    """The shard directories of a spool (``root`` itself when it is one)."""
    try:
        if (root / META).is_file() and root.name.endswith(SUFFIX):
            return [root]
        if not root.is_dir():
            return []
        out = []
        with os.scandir(root) as it:
            for e in it:
                if e.name.endswith(SUFFIX) and e.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(e.path, META)):
                    out.append(Path(e.path))
                    if len(out) >= MAX_SHARDS:
                        break
        return sorted(out)
    except OSError:
        return []


def _read_bounded(path: Path, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        if st.st_size > limit:
            raise OSError(f"larger than {limit} bytes")
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_shard(d: Path) -> tuple[pl.DataFrame, dict[str, Any], list[str]]:
    """(events, meta, warnings) of one shard; a broken shard gives no events and a warning."""
    frame, meta, warnings = _read_shard_stored(d)
    if frame is None:
        return pl.DataFrame(schema=EVENT_SCHEMA), meta, warnings
    try:
        events, dropped = from_storage(frame)
    except Exception as e:  # noqa: BLE001 - a corrupt parquet costs its shard, not the analysis
        return pl.DataFrame(schema=EVENT_SCHEMA), meta, [f"{d.name}: unreadable shard events: {type(e).__name__}: {str(e)[:200]}"]
    return events, meta, _shard_warnings(d, meta, dropped, warnings)


def _shard_warnings(d: Path, meta: dict[str, Any], dropped: int, warnings: list[str]) -> list[str]:
    out = [f"{d.name}: {dropped} event(s) with values this crashscope does not know were dropped"] if dropped else []
    for w in warnings:
        out.append(w)
    for w in meta.get("warnings") or []:
        if isinstance(w, str):
            out.append(f"{d.name}: {w[:2000]}")
    return out


def _read_meta(d: Path) -> tuple[dict[str, Any], list[str]]:
    """(meta, warnings) of one shard; a warning means it is not one this crashscope reads."""
    try:
        meta = json.loads(_read_bounded(d / META, MAX_META_BYTES))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return {}, [f"{d.name}: not a {FORMAT} shard (format {str(meta.get('format') if isinstance(meta, dict) else None)[:40]!r})"]
    except (OSError, ValueError) as e:
        return {}, [f"{d.name}: unreadable shard metadata: {e}"]
    return meta, []


def _events_error(d: Path, e: BaseException) -> str:
    return f"{d.name}: unreadable shard events: {type(e).__name__}: {str(e)[:200]}"


def _parse_events(d: Path, data: bytes) -> tuple[pl.DataFrame | None, list[str]]:
    import io

    try:
        return pl.read_parquet(io.BytesIO(data)), []
    except Exception as e:  # noqa: BLE001 - a corrupt parquet costs its shard, not the analysis
        return None, [_events_error(d, e)]


def _read_shard_stored(d: Path) -> tuple[pl.DataFrame | None, dict[str, Any], list[str]]:
    """(stored events frame or None, meta, warnings) of one shard, not yet in the event schema."""
    meta, warnings = _read_meta(d)
    if warnings:
        return None, meta, warnings
    try:
        data = _read_bounded(d / EVENTS, MAX_EVENTS_BYTES)
    except Exception as e:  # noqa: BLE001 - an unreadable file costs its shard, not the analysis
        return None, meta, [_events_error(d, e)]
    frame, warnings = _parse_events(d, data)
    return frame, meta, warnings


# The columns as write_shard stores them: what one multi-file read of a spool expects.
STORED_SCHEMA = {c: (pl.String if isinstance(t, pl.Enum) else t) for c, t in EVENT_SCHEMA.items()}


def _read_many(blobs: list[bytes], rows: int) -> pl.DataFrame | None:
    """Many shards' events.parquet as one frame in one multi-file read (polars decodes them
    in parallel, with no Python work per shard): None unless every one has the stored
    columns' types (a missing column is null, one this version does not know is left out)
    and together they hold ``rows`` rows (their shard.json counts)."""
    if not blobs:
        return pl.DataFrame(schema=STORED_SCHEMA)
    try:
        # one chunk per column, not one per shard: every later pass over a 2,049-chunk frame
        # paid for its chunks (the timeline ~1.6 s at 16,384 ranks; the copy costs ~0.1 s)
        frame = pl.scan_parquet(blobs, schema=STORED_SCHEMA, missing_columns="insert", extra_columns="ignore").collect().rechunk()
    except TypeError:
        raise  # a polars without these keywords: not a shard problem, and not to be hidden as one
    except Exception:  # noqa: BLE001 - a shard of another shape or a corrupt one: each alone then
        return None
    return frame if frame.height == rows else None


_VALID = pl.col("source").is_not_null() & pl.col("kind").is_not_null() & pl.col("severity").is_not_null() & pl.col("time_quality").is_not_null()


def _convert(frame: pl.DataFrame, owners: list[tuple[int, int]], dropped: dict[int, int]) -> pl.DataFrame:
    """:func:`from_storage` of a run of shards' stored rows (``owners``: (shard, rows) in
    order) in one pass; the rows dropped are counted per shard in ``dropped``."""
    events, _ = from_storage(frame, keep_invalid=True)
    ok = events.select(_VALID.alias("ok"))["ok"]
    if ok.all():
        return events
    ends = pl.Series([n for _, n in owners], dtype=pl.Int64).cum_sum()
    bad = pl.Series(range(frame.height), dtype=pl.Int64).filter(~ok)
    for pos, n in pl.DataFrame({"p": ends.search_sorted(bad, side="right")}).group_by("p").len().iter_rows():
        i = owners[pos][0]
        dropped[i] = dropped.get(i, 0) + n
    return events.filter(ok)


def read_spool(root: Path | str) -> Spool | None:
    """The shards under ``root`` as one frame, or None when ``root`` holds no shard.

    The events of a spool are those of its shards read one by one (:func:`read_shard`), in
    shard order, with the same warnings: the shards that look whole (parquet magic at both
    ends, an event count in shard.json) are decoded in one multi-file read and converted to
    the event schema in one pass; any other shard, and all of them when that read fails or
    its row count disagrees with the shards' counts, is read alone."""
    from crashscope.ingest import FileRecord

    root = Path(root)
    dirs = shard_dirs(root)
    if not dirs:
        return None
    metas: list[tuple[Path, dict[str, Any], list[str]]] = []  # warnings: the shard could not be read
    data: dict[int, bytes] = {}
    fast: list[int] = []
    for i, d in enumerate(dirs):
        meta, w = _read_meta(d)
        if not w:
            try:
                data[i] = _read_bounded(d / EVENTS, MAX_EVENTS_BYTES)
            except Exception as e:  # noqa: BLE001 - an unreadable file costs its shard, not the analysis
                w = [_events_error(d, e)]
        metas.append((d, meta, w))
        n = meta.get("events")
        if i in data and type(n) is int and n >= 0 and len(data[i]) >= 12 and data[i][:4] == data[i][-4:] == b"PAR1":
            fast.append(i)
    many = _read_many([data[i] for i in fast], sum(metas[i][1]["events"] for i in fast))
    rows = {i: metas[i][1]["events"] for i in fast} if many is not None else {}
    for i in rows:  # decoded: their bytes are not needed any more
        del data[i]
    # runs of shards in order: (stored frame, [(shard, rows)]); a run of the multi-file read
    # is a slice of it, any other shard is a run of its own
    runs: list[tuple[pl.DataFrame, list[tuple[int, int]]]] = []
    at = 0
    for i, (d, _meta, w) in enumerate(metas):
        if many is not None and i in rows:
            if runs and runs[-1][0] is many and runs[-1][1][-1][0] == i - 1:
                runs[-1][1].append((i, rows[i]))
            else:
                runs.append((many, [(i, rows[i])]))
            continue
        if i not in data:
            continue
        frame, w2 = _parse_events(d, data[i])
        if frame is None:
            metas[i] = (d, _meta, w2)
        elif frame.height:
            runs.append((frame, [(i, frame.height)]))
    frames: list[pl.DataFrame] = []
    dropped: dict[int, int] = {}
    for frame, owners in runs:
        if frame is many:
            n = sum(k for _, k in owners)
            frame, at = frame.slice(at, n), at + n
        try:
            events = _convert(frame, owners, dropped)
        except Exception:  # noqa: BLE001 - a column that does not convert: each shard alone, as read_shard
            events = _convert_each(frame, owners, dropped, metas)
        if events.height:
            frames.append(events)
    warnings: list[str] = []
    files, nodes = [], []
    for i, (d, meta, w) in enumerate(metas):
        warnings.extend(w or _shard_warnings(d, meta, dropped.get(i, 0), []))
        node = meta.get("node")
        if isinstance(node, str):
            nodes.append(node)
        for f in (meta.get("coverage") or {}).get("files") or []:
            if isinstance(f, dict) and isinstance(f.get("file"), str):
                try:  # the fields this version knows (a newer shard's others are left out)
                    files.append(FileRecord(**{k: v for k, v in f.items() if k in _RECORD_FIELDS}))
                except TypeError:
                    continue
    events = pl.concat(frames, how="vertical", rechunk=len(frames) > 1) if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    return Spool(root=root, shards=dirs, events=events, files=files, warnings=warnings, nodes=sorted(set(nodes)))


_RECORD_FIELDS = frozenset(("file", "kind", "confidence", "events", "bytes", "lines", "warnings", "runner_up", "runner_up_confidence", "note"))


def _convert_each(frame: pl.DataFrame, owners: list[tuple[int, int]], dropped: dict[int, int],
                  metas: list[tuple[Path, dict[str, Any], list[str]]]) -> pl.DataFrame:
    """A run whose conversion failed, one shard at a time: a shard that does not convert
    costs itself (its warning), not the run."""
    out, at = [], 0
    for i, n in owners:
        part, at = frame.slice(at, n), at + n
        try:
            out.append(_convert(part, [(i, n)], dropped))
        except Exception as e:  # noqa: BLE001 - as read_shard
            d, meta, _ = metas[i]
            metas[i] = (d, meta, [_events_error(d, e)])
    return pl.concat(out, how="vertical") if out else pl.DataFrame(schema=EVENT_SCHEMA)


def file_records(records: list[Any]) -> list[dict[str, Any]]:
    return [asdict(r) for r in records]
