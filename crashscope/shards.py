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
            cols.append(pl.col(c).cast(pl.String).replace_strict(list(t.categories), list(t.categories), default=None).cast(t).alias(c))
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
        to_storage(events).write_parquet(tmp / EVENTS, compression="zstd")
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


def _read_shard_stored(d: Path) -> tuple[pl.DataFrame | None, dict[str, Any], list[str]]:
    """(stored events frame or None, meta, warnings) of one shard, not yet in the event schema."""
    import io

    try:
        meta = json.loads(_read_bounded(d / META, MAX_META_BYTES))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None, {}, [f"{d.name}: not a {FORMAT} shard (format {str(meta.get('format') if isinstance(meta, dict) else None)[:40]!r})"]
    except (OSError, ValueError) as e:
        return None, {}, [f"{d.name}: unreadable shard metadata: {e}"]
    try:
        frame = pl.read_parquet(io.BytesIO(_read_bounded(d / EVENTS, MAX_EVENTS_BYTES)))
    except Exception as e:  # noqa: BLE001 - a corrupt parquet costs its shard, not the analysis
        return None, meta, [f"{d.name}: unreadable shard events: {type(e).__name__}: {str(e)[:200]}"]
    return frame, meta, []


def _from_storage_many(frames: list[pl.DataFrame]) -> tuple[pl.DataFrame, list[int]] | None:
    """:func:`from_storage` of many shards' frames in one pass (three polars calls per
    shard were most of a 2,048-node merge's reading time): events in shard order and the
    rows dropped per shard; None when their columns do not stack (each alone then)."""
    try:
        tagged = [f.with_columns(pl.lit(i, pl.UInt32).alias("_shard")) for i, f in enumerate(frames)]
        stacked = pl.concat(tagged, how="diagonal_relaxed")
        shard = stacked["_shard"]
        events, _ = from_storage(stacked.drop("_shard"), keep_invalid=True)
        ok = (pl.col("source").is_not_null() & pl.col("kind").is_not_null() & pl.col("severity").is_not_null() & pl.col("time_quality").is_not_null())
        flags = events.select(ok.alias("ok"))["ok"]
    except Exception:  # noqa: BLE001 - a shard of another shape: the per-shard path says which
        return None
    dropped = [0] * len(frames)
    if not flags.all():
        for i, n in pl.DataFrame({"s": shard, "ok": flags}).filter(~pl.col("ok")).group_by("s").len().iter_rows():
            dropped[i] = n
        events = events.filter(flags)
    return events, dropped


def read_spool(root: Path | str) -> Spool | None:
    """The shards under ``root`` as one frame, or None when ``root`` holds no shard."""
    from crashscope.ingest import FileRecord

    root = Path(root)
    dirs = shard_dirs(root)
    if not dirs:
        return None
    files, warnings, nodes = [], [], []
    stored: list[tuple[int, pl.DataFrame]] = []  # (index in metas, stored frame)
    metas: list[tuple[Path, dict[str, Any], list[str]]] = []  # warnings: the shard could not be read
    for d in dirs:
        frame, meta, w = _read_shard_stored(d)
        if frame is not None and frame.height:
            stored.append((len(metas), frame))
        metas.append((d, meta, w))
    many = _from_storage_many([f for _, f in stored]) if stored else (pl.DataFrame(schema=EVENT_SCHEMA), [])
    if many is not None:
        frames = [many[0]] if many[0].height else []
        dropped = {i: n for (i, _), n in zip(stored, many[1])}
        for i, (d, meta, w) in enumerate(metas):
            warnings.extend(w or _shard_warnings(d, meta, dropped.get(i, 0), []))
    else:  # each shard on its own, as read_shard reads it
        frames = []
        for d, _meta, _w in metas:
            events, _, w2 = read_shard(d)
            warnings.extend(w2)
            if events.height:
                frames.append(events)
    for d, meta, w in metas:
        node = meta.get("node")
        if isinstance(node, str):
            nodes.append(node)
        for f in (meta.get("coverage") or {}).get("files") or []:
            if isinstance(f, dict) and isinstance(f.get("file"), str):
                known = {k: f[k] for k in ("file", "kind", "confidence", "events", "bytes", "lines", "warnings", "runner_up", "runner_up_confidence", "note") if k in f}
                try:
                    files.append(FileRecord(**known))
                except TypeError:
                    continue
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    return Spool(root=root, shards=dirs, events=events, files=files, warnings=warnings, nodes=sorted(set(nodes)))


def file_records(records: list[Any]) -> list[dict[str, Any]]:
    return [asdict(r) for r in records]
