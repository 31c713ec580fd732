"""Ingest: every file of a job directory -> sniffed -> parsed into one events frame.

Speed comes from scanning text in Rust: each file is read in blocks, polars splits a
block into lines and keeps only lines matching the union of the line sources'
prefilters; only those (typically well under 1% of a large job's NCCL INFO chatter)
reach Python. Memory stays flat: a block at a time, plus the sparse events.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import polars as pl
import regex

from crashscope import envelope, rgpass
from crashscope.bundle import HEAD_BYTES, BoundedReader, Entry, FileRef, PeekStream, Skipped, _describe, host_hint_from_path, host_hint_from_prompt, looks_binary, open_ref, rank_hint_from_path, read_head, scan
from crashscope.schema import EVENT_SCHEMA
from crashscope.sources import LINE_SOURCES, sniff_scores
from crashscope.patterns import compile_pattern
from crashscope.sources.base import FileInfo, FileSource, LineSource, ParseContext, ParseOptions, decode, frame_from_rows

log = logging.getLogger(__name__)

BLOCK_BYTES = 32 * 1024 * 1024
SNIFF_BYTES = 8 * 1024  # sniffers see this much of a file's head (they run on every file)
MAX_LINE_BYTES = 1024 * 1024  # longer lines are cut here (a 100 MB line is not a log line)
NEAR_TIE = 0.05
BATCH_BYTES = 64 * 1024 * 1024
NUMPY_COUNT_BYTES = 4 * 1024 * 1024  # a bulk pass this large counts its newlines with numpy
ITER_SLICE = 16_384  # hit lines made into Python strings at a time
SMALL_HITS = 4_096  # a block with fewer hits is split among sources in Python, not polars
BATCH_FILES = 256  # a bulk pass has ~5 ms of fixed cost: 64 small files a batch paid ~90 us each, 256 ~40 us
# Plain files up to this size (the rank logs of most jobs) are read ahead and scanned
# together, several to a polars pass (one block each; a file with a line over
# MAX_LINE_BYTES or a separator byte takes the plain path instead, see _bulk_hits).
SMALL_FILE_BYTES = 16 * 1024 * 1024
# Files scanned together in one polars pass: enough MiB to amortise a pass's fixed cost
# (~10 ms: each regex call on the big prefilters builds its lazy DFA afresh, ~1 ms even for
# a hundred lines; the split by file) and small enough that the allocator reuses its
# buffers. 100 rank logs of 1.9 MB, one process: 8 MiB 0.89 CPU s, 16 MiB 0.72. _bulk_hits
# alone (benchmarks/bulk_scan_bench.py --passes, loaded machine) was 0-20% faster with 32
# MiB passes, but a whole ingest of 256 rank logs was not (1.68-1.72 user CPU s either way)
# and each worker's peak RSS grew from ~165 to ~250 MB: 16 MiB.
PASS_BYTES = 16 * 1024 * 1024
PARALLEL_MIN_BYTES = 256 * 1024 * 1024  # below this, worker start-up costs more than it saves
PARALLEL_MIN_FILES = 2_000  # ... unless there are this many files (a few ms of fixed cost each)
MAX_WORKERS = 8
# Labels of a job (simulator ground truth, an operator's label) are never read as logs:
# the analysis must not see the answer.
LABEL_FILES = {"truth.json", "crashscope-label.json"}


@dataclass(slots=True)
class FileRecord:
    """What happened to one file; the report's ``sources`` entries come from these."""

    file: str
    kind: str  # winning source name, "unrecognized" or "unreadable"
    confidence: float = 0.0
    events: int = 0
    bytes: int = 0
    lines: int = 0
    warnings: int = 0
    runner_up: str | None = None
    runner_up_confidence: float = 0.0
    note: str | None = None
    seconds: float = 0.0  # sniffing and parsing it (in whichever process read it): for --profile
    cpu_seconds: float = 0.0  # the same, CPU time of that process (all its threads): on a shared machine


def rss_bytes() -> int:
    """This process's resident set size now (``/proc/self/statm``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak, in KiB on Linux


@dataclass(slots=True)
class Budget:
    """A time and memory budget for one analysis. Once spent, the ingest reads no further
    file and ends the current one at a block boundary; what was read is analysed.

    ``started`` is ``time.monotonic()`` (system-wide on Linux, so worker processes share
    the clock); ``max_memory`` is bytes of RSS of each process checking it.
    """

    seconds: float | None = None
    max_memory: int | None = None
    started: float = field(default_factory=time.monotonic)
    exceeded: str | None = None

    def check(self) -> str | None:
        """The reason the budget is spent, or None."""
        if self.exceeded is None:
            if self.seconds is not None and time.monotonic() - self.started > self.seconds:
                self.exceeded = f"time budget of {self.seconds:g} s spent"
            elif self.max_memory is not None and rss_bytes() > self.max_memory:
                self.exceeded = f"memory budget of {_human(self.max_memory)} reached"
        return self.exceeded

    @property
    def active(self) -> bool:
        return self.seconds is not None or self.max_memory is not None


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    """``2G``, ``512M``, ``1.5GiB``, ``1000000`` -> bytes (binary units)."""
    m = regex.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text or "")
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 2G, 512M)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    value = int(float(m.group(1)) * mult)
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return value


NOT_READ = "not read: "


@dataclass(slots=True)
class IngestResult:
    root: Path
    events: pl.DataFrame
    files: list[FileRecord]
    warnings: list[str] = field(default_factory=list)
    bytes_read: int = 0

    def sources_summary(self) -> list[dict[str, object]]:
        return [{"file": f.file, "kind": f.kind, "events": f.events} for f in self.files]


def ingest(
    root: Path | str,
    options: ParseOptions | None = None,
    *,
    progress: Callable[[str, int], None] | None = None,
    overrides: dict[str, str] | None = None,
    workers: int | None = None,
    budget: Budget | None = None,
    skip: Callable[[FileRef], str | None] | None = None,
) -> IngestResult:
    """Read every file under ``root`` into one events frame (times not yet aligned).

    Args:
        root: the job's log directory (or one file / archive).
        options: time zone and year for local-time sources.
        progress: called with (file, bytes) after each batch of files.
        overrides: {fnmatch glob: source name} forcing a source for matching files.
        workers: processes to parse with; default: all cores for large jobs, else 1.
        budget: time/memory budget; once spent, the rest is skipped (see ``Budget``).
        skip: a file that ``skip(ref)`` gives a reason for is not read (the reason is a warning).
    """
    root = Path(root)
    options = options or ParseOptions()
    refs: list[FileRef] = []
    files: list[FileRecord] = []
    warnings: list[str] = []
    from crashscope.shards import read_spool

    spool = read_spool(root)  # a spool of per-node shards: their events join the frame
    for item in scan(root):
        if spool is not None and spool.owns(item.path if isinstance(item, Skipped) else item.rel):
            continue
        if not isinstance(item, Skipped) and skip is not None and (why := skip(item)):
            warnings.append(f"{item.rel}: {why}")
            files.append(FileRecord(item.rel, "unreadable", note=why))
            continue
        if isinstance(item, Skipped):
            warnings.append(f"{item.path}: {item.reason}")
            if item.unreadable:
                files.append(FileRecord(item.path, "unreadable", note=item.reason))
        else:
            refs.append(item)
    batches = _batches(refs)
    if workers is None:
        total_size = sum(r.size for r in refs)
        large = total_size >= PARALLEL_MIN_BYTES or len(refs) >= PARALLEL_MIN_FILES
        workers = min(os.cpu_count() or 1, MAX_WORKERS) if (large and len(batches) > 1) else 1
    if budget is not None and not budget.active:
        budget = None
    if budget is not None and budget.max_memory is not None and workers > 1:
        # each worker checks its own RSS: the whole stays under the budget
        worker_budget = Budget(budget.seconds, max(1, budget.max_memory // (workers + 1)), budget.started)
    else:
        worker_budget = budget
    frames: list[pl.DataFrame] = [spool.events] if spool is not None and spool.events.height else []
    if spool is not None:
        files.extend(spool.files)
        warnings.extend(spool.warnings)
    total = 0
    for recs, frame, batch_warnings in _run_batches(batches, options, overrides, workers, worker_budget):
        files.extend(recs)
        warnings.extend(batch_warnings)
        total += sum(r.bytes for r in recs)
        if frame.height:
            frames.append(frame)
        if progress and recs:
            progress(recs[-1].file, sum(r.bytes for r in recs))
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    if budget is not None:
        warnings.extend(_budget_warnings(files, budget if worker_budget is budget else worker_budget))
    # Scan order is by directory; report files in path order for stable output.
    return IngestResult(root=root, events=events, files=files, warnings=warnings, bytes_read=total)


def _budget_warnings(files: list[FileRecord], budget: Budget) -> list[str]:
    skipped = [f.file for f in files if f.note and f.note.startswith(NOT_READ)]
    cut = [f.file for f in files if f.note and f.note.startswith("cut after ")]
    if not skipped and not cut:
        return []
    reason = budget.exceeded or next(
        (f.note.split(": ", 1)[1] for f in files if f.note and (f.note.startswith(NOT_READ) or f.note.startswith("cut after "))), "budget spent"
    )

    def names(xs: list[str]) -> str:
        return ", ".join(xs[:10]) + (f" and {len(xs) - 10} more" if len(xs) > 10 else "")

    out = [f"partial analysis: {reason}; {len(skipped)} file(s) not read, {len(cut)} cut short"]
    if cut:
        out.append(f"cut short by the budget: {names(cut)}")
    if skipped:
        out.append(f"not read because of the budget: {names(skipped)}")
    return out


def _batches(refs: list[FileRef]) -> list[list[FileRef]]:
    """Group files so each task carries ~BATCH_BYTES or BATCH_FILES (fixed costs amortised)."""
    out: list[list[FileRef]] = []
    cur: list[FileRef] = []
    size = 0
    for r in refs:
        cur.append(r)
        size += r.size
        if size >= BATCH_BYTES or len(cur) >= BATCH_FILES:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def _run_batches(batches, options, overrides, workers, budget=None):  # type: ignore[no-untyped-def]
    """Each batch's result, in batch order. With ``workers`` > 1 this process is one of
    them: ``workers - 1`` spawned processes take batches in order while this one parses
    the next batch not yet handed out whenever the oldest pending one is not done yet
    (a spawned worker spends about a second importing before its first batch, and its
    import is CPU the job pays again; this process has it already)."""
    if workers <= 1 or len(batches) <= 1:
        for b in batches:
            yield ingest_batch(b, options, overrides, budget)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: polars' thread pool does not survive fork. One polars thread per
    # worker: the workers already use every core.
    ctx = multiprocessing.get_context("spawn")
    saved = os.environ.get("POLARS_MAX_THREADS")
    os.environ["POLARS_MAX_THREADS"] = "1"
    n = len(batches)
    futures: dict[int, object] = {}
    own: dict[int, tuple] = {}  # batches parsed here, waiting for their turn
    nxt = 0  # first batch neither handed out nor parsed here
    done = 0  # batches yielded
    ahead = 2 * (workers - 1)  # handed out beyond the oldest pending one
    try:
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
            while done < n:
                while nxt < n and len(futures) < ahead:
                    futures[nxt] = pool.submit(ingest_batch, batches[nxt], options, overrides, budget)
                    nxt += 1
                if done in own:
                    yield own.pop(done)
                    done += 1
                elif done in futures and (futures[done].done() or nxt >= n):  # type: ignore[attr-defined]
                    result = futures[done].result()  # type: ignore[attr-defined]
                    del futures[done]
                    yield result
                    done += 1
                elif nxt < n:
                    own[nxt] = ingest_batch(batches[nxt], options, overrides, budget)
                    nxt += 1
    except Exception as exc:  # noqa: BLE001 - e.g. a __main__ that spawn cannot re-import
        log.info("worker processes failed (%s); parsing the rest in this process", exc)
        for i in range(done, n):
            yield own.pop(i) if i in own else ingest_batch(batches[i], options, overrides, budget)
    finally:
        if saved is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
        else:
            os.environ["POLARS_MAX_THREADS"] = saved


def ingest_batch(
    refs: list[FileRef], options: ParseOptions, overrides: dict[str, str] | None, budget: Budget | None = None
) -> tuple[list[FileRecord], pl.DataFrame, list[str]]:
    """Parse a batch of files (in this process or a worker): records, one frame, warnings.

    Small plain files are read ahead and their lines filtered together (:func:`_bulk_hits`):
    polars compiles a regex once per call, which cost every small file ~2 ms, more than
    scanning it. Records, rows and warnings keep the files' order either way."""
    # per file, in walk order: (record or None for a skip, rows, warnings); None while pending
    results: list[tuple[FileRecord | None, list[dict], list[str]] | None] = []
    # read-ahead files: (result slot, entry, offset in the pass buffer or -1 for one that
    # goes the plain way, length); their bytes lie one after another in ``buf``
    pending: list[tuple[int, Entry, int, int]] = []
    buf = _pass_buffer()
    mv = memoryview(buf)
    pos = 0  # end of the pass's bytes in buf
    pass_limit = min(PASS_BYTES, BLOCK_BYTES)
    sniff_cache: dict = {}
    deferred: list[tuple[int, _Deferred]] = []  # whole files a batchable source reads together, at the end

    def flush() -> None:
        """Parse the read-ahead files and ripgrep's files, in walk order: the sniff of
        a family of files (``_sniff_siblings``) reports runner-ups for its first only."""
        nonlocal pos
        if not pending and not rg_files:
            return
        todo: list[tuple[int, Entry, tuple[pl.DataFrame, int, int] | None, float, float, int | None]] = []
        if pending:
            t0, c0 = time.perf_counter(), time.process_time()
            spans = [(start, n) for _, _, start, n in pending if start >= 0]
            hits = iter(_bulk_hits(mv[:pos], spans) if spans else [])
            share = (time.perf_counter() - t0) / len(pending)  # the one bulk pass, split evenly
            cpu_share = (time.process_time() - c0) / len(pending)
            for slot, item, start, _ in pending:
                # pre None: a file the bulk pass does not take; its bytes go the plain way
                todo.append((slot, item, next(hits) if start >= 0 else None, share, cpu_share, None))
        if rg_files:
            t0, c0 = time.perf_counter(), time.process_time() + rgpass.children_cpu()
            sizes = [e.size or 0 for _, e, _, _ in rg_files]
            pres = _rg_hits(rgpass.scan(rg, [(fd, n) for (_, _, _, fd), n in zip(rg_files, sizes)], MAX_LINE_BYTES), sizes)  # type: ignore[arg-type]
            share = (time.perf_counter() - t0) / len(rg_files)
            cpu_share = (time.process_time() + rgpass.children_cpu() - c0) / len(rg_files)  # rg's own CPU too
            for (slot, item, head, fd), pre in zip(rg_files, pres):
                # the file from our descriptor, bounded at its size at open: read only for
                # its head where rg's lines are used, and whole where they are not
                fh = os.fdopen(fd, "rb", buffering=0, closefd=False)  # closed below, by us
                fh.seek(len(head))
                stream = PeekStream(head, BoundedReader(fh, (item.size or 0) - len(head)), direct=True)  # type: ignore[arg-type]
                todo.append((slot, Entry(item.path, item.name, item.size, stream), pre, share, cpu_share, fd))
        todo.sort(key=lambda t: t[0])
        try:
            for slot, item, pre, share, cpu_share, fd in todo:
                res = _ingest_entry(item, options, overrides, sniff_cache, budget, pre=pre, defer=True)
                rec = res.rec if isinstance(res, _Deferred) else res[0]
                rec.seconds += share
                rec.cpu_seconds += cpu_share
                put(slot, res)
        finally:
            for *_, fd in todo:
                if fd is not None:
                    os.close(fd)
        pending.clear()
        rg_files.clear()
        pos = 0

    def put(slot: int, res: "tuple[FileRecord, list[dict], list[str]] | _Deferred") -> None:
        if isinstance(res, _Deferred):
            deferred.append((slot, res))
        else:
            results[slot] = res

    def done(rec: FileRecord, warning: str | None = None) -> None:
        results.append((rec, [], [warning] if warning else []))

    # files for ripgrep (rgpass): (result slot, entry, its head, our duplicate of its descriptor)
    rg_files: list[tuple[int, Entry, bytes, int]] = []
    rg: str | None = None  # found (rg --version, once a process) when the first large file comes

    for ref in refs:
        if budget is not None and budget.check():
            done(FileRecord(ref.rel, "unreadable", note=NOT_READ + budget.exceeded))  # type: ignore[operator]
            continue
        for item in open_ref(ref):
            if isinstance(item, Skipped):
                rec = FileRecord(item.path, "unreadable", note=item.reason) if item.unreadable else None
                results.append((rec, [], [f"{item.path}: {item.reason}"]))
                continue
            if item.name in LABEL_FILES:
                done(FileRecord(item.path, "unrecognized", note="job label file, not a log"))
                continue
            if budget is not None and budget.check():  # members of an archive
                done(FileRecord(item.path, "unreadable", note=NOT_READ + budget.exceeded))  # type: ignore[operator]
                continue
            if RG_PASS and item.fd is not None and item.size is not None and item.size >= rgpass.MIN_BYTES and (rg := rgpass.ripgrep()):
                head, err = read_head(item.stream)
                if err is None and len(head) == min(item.size, HEAD_BYTES) and rgpass.chatter_heavy(head):
                    results.append(None)
                    rg_files.append((len(results) - 1, item, head, os.dup(item.fd)))
                    if len(rg_files) >= rgpass.GROUP_FILES:
                        flush()
                    continue
                item = Entry(item.path, item.name, item.size, PeekStream(head, item.stream, direct=True), item.compression)  # type: ignore[arg-type]
            if item.compression is None and "!" not in item.path and item.size is not None and 0 < item.size <= min(SMALL_FILE_BYTES, BLOCK_BYTES):
                if pending and pos + item.size + 1 > pass_limit:
                    flush()  # a pass holds at most PASS_BYTES of files (one larger file alone)
                got, err = _read_into(item.stream, mv, pos, item.size)
                if err is None and got <= item.size:  # all of it (the size at open bounds the read)
                    results.append(None)
                    if got and buf.find(b"\x1f", pos, pos + got) < 0:
                        pending.append((len(results) - 1, Entry(item.path, item.name, item.size, _ViewReader(mv[pos : pos + got])), pos, got))
                        pos += got
                        if buf[pos - 1] != 10:  # the pass needs every file's last line ended
                            buf[pos] = 10
                            pos += 1
                    else:  # our column separator (or emptied since the walk): the plain way
                        pending.append((len(results) - 1, Entry(item.path, item.name, item.size, io.BytesIO(mv[pos : pos + got])), -1, got))
                    if pos >= pass_limit:
                        flush()
                    continue
                # grown since the walk, or a read error: the usual path, from what was read
                data = bytes(mv[pos : pos + got])
                item = Entry(item.path, item.name, item.size, PeekStream(data, item.stream), item.compression)  # type: ignore[arg-type]
                if err:
                    item.stream.error = err  # type: ignore[attr-defined]
            flush()  # the files before it first (walk order)
            results.append(None)
            put(len(results) - 1, _ingest_entry(item, options, overrides, sniff_cache, budget, defer=True))
    flush()
    _parse_deferred(deferred, results)
    files: list[FileRecord] = []
    warnings: list[str] = []
    rows: list[dict] = []
    for res in results:
        assert res is not None
        rec, file_rows, file_warnings = res
        if rec is not None:
            files.append(rec)
        warnings.extend(file_warnings)
        rows.extend(file_rows)
    return files, frame_from_rows(rows), warnings


def _read_into(stream: BinaryIO, mv: memoryview, at: int, size: int) -> tuple[int, str | None]:
    """Up to ``size + 1`` bytes of a stream into ``mv[at:]``: bytes read, and the error
    that ended the stream early, if one did (as ``read_head`` says it)."""
    got, err = 0, None
    try:
        while got <= size:
            k = stream.readinto(mv[at + got : at + size + 1])
            if not k:
                break
            got += k
    except Exception as exc:  # noqa: BLE001 - any decoder error means "stream ended"
        err = _describe(exc)
    return got, err


class _ViewReader(io.RawIOBase):
    """A read-ahead file's bytes in the pass buffer, as a stream (no copy)."""

    def __init__(self, view: memoryview):
        self._view = view
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        k = min(len(b), len(self._view) - self._at)
        b[:k] = self._view[self._at : self._at + k]
        self._at += k
        return k


_PASS = threading.local()


def _pass_buffer() -> bytearray:
    """This thread's buffer for the read-ahead files of a pass, kept between batches: a
    fresh one per pass cost a page fault per 4 KiB it held, every pass."""
    need = max(PASS_BYTES, min(SMALL_FILE_BYTES, BLOCK_BYTES)) + 64 * 1024
    buf = getattr(_PASS, "buf", None)
    if buf is None or len(buf) < need:
        buf = _PASS.buf = bytearray(need)
    return buf


def _ingest_entry(
    entry: Entry, options: ParseOptions, overrides: dict[str, str] | None, sniff_cache: dict | None = None,
    budget: Budget | None = None, pre: "tuple[pl.DataFrame, int, int] | None" = None, defer: bool = False,
) -> "tuple[FileRecord, list[dict], list[str]] | _Deferred":
    """One file: sniffed, parsed. ``pre``: its hits already found by :func:`_bulk_hits`
    (hit lines, line count, bytes), used when it is read as a text file. ``defer``: a
    file of a ``batchable`` source is read but not parsed (see :func:`_parse_deferred`)."""
    started, cpu = time.perf_counter(), time.process_time()
    res = _read_entry(entry, options, overrides, sniff_cache, budget, pre, defer)
    rec = res.rec if isinstance(res, _Deferred) else res[0]
    rec.seconds += time.perf_counter() - started
    rec.cpu_seconds += time.process_time() - cpu
    return res


@dataclass(slots=True)
class _Deferred:
    """A whole file read for a batchable source, parsed with the batch's others."""

    src: FileSource
    data: bytes
    ctx: ParseContext
    rec: FileRecord
    warnings: list[str]
    err: str | None
    path: str


def _parse_deferred(deferred: list[tuple[int, _Deferred]], results: list) -> None:  # type: ignore[type-arg]
    """Each batchable source's files in one ``parse_files`` call; their results go to their
    slots as each file's own parse would have put them (a failure is one file's: each is
    parsed alone again, and a file that fails alone is skipped with the usual warning)."""
    by_src: dict[str, list[tuple[int, _Deferred]]] = {}
    for slot, d in deferred:
        by_src.setdefault(d.src.name, []).append((slot, d))
    for group in by_src.values():
        src = group[0][1].src
        t0, c0 = time.perf_counter(), time.process_time()
        failed: set[int] = set()
        try:
            src.parse_files([(d.data, d.ctx) for _, d in group])
        except Exception:  # noqa: BLE001 - a parser bug must cost one file, not the batch
            for i, (_, d) in enumerate(group):
                d.ctx.restart()
                try:
                    src.parse_file(d.data, d.ctx)
                except Exception as exc:  # noqa: BLE001
                    log.exception("parser failure on %s", d.path)
                    d.warnings.append(f"{d.path}: internal parser error ({type(exc).__name__}: {exc}); file skipped")
                    failed.add(i)
        share, cpu_share = (time.perf_counter() - t0) / len(group), (time.process_time() - c0) / len(group)
        for i, (slot, d) in enumerate(group):
            d.rec.seconds += share
            d.rec.cpu_seconds += cpu_share
            results[slot] = (d.rec, [], d.warnings) if i in failed else _finish(d.path, d.rec, d.warnings, [d.ctx], d.src, d.err)


def _read_entry(  # type: ignore[no-untyped-def]
    entry: Entry, options: ParseOptions, overrides: dict[str, str] | None, sniff_cache: dict | None,
    budget: Budget | None, pre: "tuple[pl.DataFrame, int, int] | None", defer: bool = False,
):
    head, head_err = read_head(entry.stream)
    stream = PeekStream(head, entry.stream)
    rec = FileRecord(entry.path, "unrecognized")
    info = FileInfo(
        path=entry.path,
        name=entry.name,
        host_hint=host_hint_from_path(entry.path),
        rank_hint=rank_hint_from_path(entry.path),
    )
    warnings: list[str] = []
    if not head:
        rec.note = "empty"
        err = head_err or getattr(entry.stream, "error", None)
        if err:
            warnings.append(f"{entry.path}: {err}")
        return rec, [], warnings
    binary = looks_binary(head[:8192])
    sniff_head = head[:SNIFF_BYTES]
    head_text, _ = decode(sniff_head[: len(sniff_head) - _partial_utf8_tail(sniff_head)])
    if info.host_hint is None and "@" in head_text:
        prompt_host = host_hint_from_prompt(head_text)
        if prompt_host:
            info = dataclasses.replace(info, host_hint=prompt_host)
    forced = _override(entry.path, overrides)
    if forced is not None:
        winner, score, runner = forced, 1.0, None
    else:
        scores = _sniff_siblings(head_text, entry, sniff_cache)
        (score, winner), runner = scores[0], (scores[1] if len(scores) > 1 else None)
        if runner and runner[0] > 0:
            rec.runner_up, rec.runner_up_confidence = runner[1].name, round(runner[0], 3)
            # Line sources all parse a text file anyway; a tie matters only when a
            # whole-file parser would be chosen over another reading.
            exclusive = isinstance(winner, FileSource) or isinstance(runner[1], FileSource)
            if score - runner[0] < NEAR_TIE and score > 0 and exclusive:
                warnings.append(
                    f"{entry.path}: sources {winner.name} ({score:.2f}) and {runner[1].name} ({runner[0]:.2f}) "
                    f"both claim this file; read as {winner.name} (use --source to force)"
                )
    if not binary and (env := envelope.detect(head)) is not None and (score < envelope.RAW_CLAIM_BELOW or env.collector_only):
        # every line behind a collector's prefix (kubectl's CRI log, docker compose, the
        # journal, grep -r): read the lines as the program wrote them, if a source knows them
        inner_head = env.strip(head)
        inner_text, _ = decode(inner_head[:SNIFF_BYTES])
        inner = sniff_scores(inner_text, entry.name)
        if inner and (inner[0][0] >= score or env.collector_only):
            (score, winner), pre = inner[0], None
            stream = PeekStream(b"", envelope.EnvelopeStream(stream, env))  # type: ignore[arg-type]
            rec.note = f"read inside a {env.name} line envelope"
    if score <= 0:
        if binary:
            rec.note = "binary"
            warnings.append(f"{entry.path}: binary file that no source reads; skipped")
            rec.bytes = len(head)
            return rec, [], warnings
        # Text nobody recognises from its head (a user's train.log, a file opening with a
        # huge line) is still scanned: a traceback on line 90,000 is what matters.
        winner = None
    if binary and winner is not None and not getattr(winner, "reads_binary", False):
        warnings.append(f"{entry.path}: contains binary data; text parts were read")
    if winner is not None:
        rec.kind, rec.confidence = winner.name, round(score, 3)
    try:
        if isinstance(winner, FileSource):
            data, ctx = _read_whole(stream, winner, info, options, rec)
            if defer and winner.batchable:
                return _Deferred(winner, data, ctx, rec, warnings, stream.error or getattr(entry.stream, "error", None), entry.path)
            winner.parse_file(data, ctx)
            ctxs = [ctx]
        else:
            ctxs = _scan_lines(stream, info, options, rec, budget, pre)
    except Exception as exc:  # noqa: BLE001 - a parser bug must cost one file, not the run
        log.exception("parser failure on %s", entry.path)
        warnings.append(f"{entry.path}: internal parser error ({type(exc).__name__}: {exc}); file skipped")
        return rec, [], warnings
    return _finish(entry.path, rec, warnings, ctxs, winner, stream.error or getattr(entry.stream, "error", None))


def _finish(path: str, rec: FileRecord, warnings: list[str], ctxs: list[ParseContext], winner: object, err: str | None):  # type: ignore[no-untyped-def]
    """A parsed file's record, rows and warnings, from its parse contexts."""
    if err:
        warnings.append(f"{path}: {err}; read what was there")
    for ctx in ctxs:
        for w in ctx.warnings:
            warnings.append(str(w))
        if ctx.repeated:
            rec.note = rec.note or f"{ctx.repeated} repeated identical events folded (attrs.repeat)"
        if ctx.suppressed_warnings:
            warnings.append(f"{path}: {ctx.suppressed_warnings} more {ctx.source} parse warnings not shown")
        rec.warnings += len(ctx.warnings) + ctx.suppressed_warnings
    repeated = sum(ctx.repeated for ctx in ctxs)
    rows = [r for ctx in ctxs for r in ctx.take_rows()]
    rec.events = len(rows) + repeated  # occurrences: folded repeats count (see ParseContext.emit)
    if winner is None and rows:
        from collections import Counter

        rec.kind = Counter(r["source"] for r in rows).most_common(1)[0][0]
        rec.note = rec.note or "recognized by lines beyond the first 8 KiB"
    return rec, rows, warnings


_DIGITS = compile_pattern(r"\d+")


def _sniff_siblings(head_text: str, entry: Entry, cache: dict | None):  # type: ignore[no-untyped-def]
    """Every source sniffs the first of a family of siblings (rank0.log ... rank1023.log in
    one directory); the rest are checked by the family's winner alone, and fully sniffed
    again when it no longer recognises them (at half its first score or less)."""
    if cache is None:
        return sniff_scores(head_text, entry.name)
    # nodes/node017/dmesg.txt and logs/rank12.log are families across directories too
    key = _DIGITS.sub("#", entry.path)
    hit = cache.get(key)
    if hit is not None:
        score, winner, _runner = hit
        try:
            again = float(winner.sniff(head_text, entry.name))
        except Exception:  # noqa: BLE001
            again = 0.0
        if again >= 0.5 * score and again > 0:
            return [(again, winner)]  # runner-ups were not asked: no tie to report
    scores = sniff_scores(head_text, entry.name)
    if scores and scores[0][0] > 0:
        cache[key] = (scores[0][0], scores[0][1], scores[1] if len(scores) > 1 else None)
    return scores


def _override(path: str, overrides: dict[str, str] | None):  # type: ignore[no-untyped-def]
    if not overrides:
        return None
    import fnmatch

    from crashscope.sources import get_source

    for glob, name in overrides.items():
        if fnmatch.fnmatch(path, glob) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], glob):
            return get_source(name)
    return None


def _partial_utf8_tail(b: bytes) -> int:
    """Bytes of a multi-byte character cut at the end of a block (0-3)."""
    for i in range(1, min(4, len(b)) + 1):
        c = b[-i]
        if c & 0xC0 != 0x80:  # lead byte or ASCII
            need = 1 if c < 0x80 else 2 if c >> 5 == 0b110 else 3 if c >> 4 == 0b1110 else 4 if c >> 3 == 0b11110 else 1
            return i if need > i else 0
    return 0


def _read_whole(stream: PeekStream, src: FileSource, info: FileInfo, options: ParseOptions, rec: FileRecord) -> tuple[bytes, ParseContext]:
    """A whole file for ``src`` (cut at its ``max_bytes``, said once) and its context."""
    data, _ = read_head(stream, src.max_bytes + 1)  # short reads joined: one read() returns one piece
    ctx = ParseContext(info, src.name, options)
    if len(data) > src.max_bytes:
        data = data[: src.max_bytes]
        ctx.warn(f"larger than {src.max_bytes // (1024 * 1024)} MiB; only the beginning was read")
    rec.bytes = len(data)
    rec.lines = data.count(b"\n")
    return data, ctx


# One Rust regex for all line sources; per-source Python regexes split the hits.
_COMBINED = "|".join(f"(?:{s.prefilter})" for s in LINE_SOURCES)


_PER_SOURCE = [(s, compile_pattern(s.prefilter)) for s in LINE_SOURCES]

# NCCL's INFO chatter is most of a large job's bytes and is never an event. Dropping it
# with a plain-string search first (several GB/s) leaves the regex (~250 MB/s per core)
# only the rest. A test checks no prefilter-matching line of any golden input or rule
# example contains one of these.
CHATTER = (
    "NCCL INFO Channel ",
    "NCCL INFO Ring ",
    "NCCL INFO Trees ",
    "NCCL INFO Connected all ",
    "NCCL INFO P2P Chunksize",
    "NCCL INFO threadThresholds",
    "NCCL INFO Setting affinity",
    " opCount ",
)
# One regex of literals (Rust's literal prefilter) beats polars' contains_any here.
_CHATTER_RE = "|".join(regex.escape(c) for c in CHATTER)
# NCCL prints a Channel line per channel, peer and communicator, most of the chatter: one
# plain-substring test (memmem) drops those first, and the regex of all the chatter runs on
# the rest (a pass of the 2 GB job's rank logs: 911 -> 1,102 MB/CPU s; the same lines).
_CHANNEL = CHATTER[0]
assert _CHANNEL == "NCCL INFO Channel "


def iter_blocks(
    stream: io.RawIOBase | PeekStream, rec: FileRecord, notes: list[str], budget: "Budget | None" = None
) -> Iterable[bytes]:
    """Yield blocks of whole lines, each ending in \\n (the consumer counts lines once).

    Lines longer than MAX_LINE_BYTES are cut. When ``budget`` runs out, the file ends at
    the block boundary (``rec.note`` says so).
    """
    carry = b""
    skipping = False
    while True:
        if budget is not None and rec.bytes and budget.check():
            rec.note = f"cut after {rec.bytes:,} bytes: {budget.exceeded}"
            break
        chunk, _ = read_head(stream, BLOCK_BYTES)  # short reads joined; errors end the stream
        if not chunk:
            break
        rec.bytes += len(chunk)
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1 :]
            skipping = False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE_BYTES:
                notes.append(f"a line longer than {MAX_LINE_BYTES // 1024} KiB was cut")
                yield data[:MAX_LINE_BYTES] + b"\n"
                carry, skipping = b"", True
            else:
                carry = data
            continue
        block, carry = data[: cut + 1], data[cut + 1 :]
        if len(carry) > MAX_LINE_BYTES:
            notes.append(f"a line longer than {MAX_LINE_BYTES // 1024} KiB was cut")
            carry, skipping = carry[:MAX_LINE_BYTES], True
        yield block
    if carry:
        yield carry + b"\n"


def _block_hit_frame(block: bytes, first_line: int, notes: list[str]) -> tuple[pl.DataFrame, int]:
    """The block's lines matching any prefilter (``n``: line number, ``l``: text without a
    trailing CR), and the number of lines in the block."""
    try:
        if b"\x1f" in block:  # our column separator: polars would cut those lines there
            raise ValueError("separator byte in block")
        df = pl.read_csv(
            io.BytesIO(block),
            has_header=False,
            separator="\x1f",
            quote_char=None,
            encoding="utf8-lossy",
            truncate_ragged_lines=True,
            new_columns=["l"],
            schema_overrides={"l": pl.String},
            infer_schema=False,
        )
        # Blocks end in a newline and there is no quoting, so every line is one row (empty
        # ones as null): the evidence's line numbers rest on this, and a property test
        # (tests/test_line_numbers.py) checks it against Python's split on random bytes.
        n_lines = df.height
        ok = n_lines > 0
    except Exception:  # noqa: BLE001 - fall back to Python splitting for odd bytes
        ok = False
    if not ok:
        n_lines = block.count(b"\n")
        text = block.decode("utf-8", "replace").replace("\x1f", " ")
        df = pl.DataFrame({"l": text.split("\n")[:n_lines]}, schema={"l": pl.String})
    # Chatter out first (its own collect: one fused predicate would run the regex on
    # every line again), then the hits, plus over-long lines (cut, and said once).
    long = pl.col("b") > MAX_LINE_BYTES
    rest = (
        df.lazy()
        .with_row_index("n", offset=first_line)
        .with_columns(pl.col("l").str.len_bytes().alias("b"))
        .filter(~pl.col("l").str.contains(_CHANNEL, literal=True).fill_null(False) | long)
        .collect()
    )
    rest = rest.filter(~rest["l"].str.contains(_CHATTER_RE).fill_null(False) | (rest["b"] > MAX_LINE_BYTES))
    out = rest.lazy().filter(pl.col("l").str.contains(_COMBINED) | long).collect()
    if len(block) > MAX_LINE_BYTES and (out["b"] > MAX_LINE_BYTES).any():
        long = out.filter(pl.col("b") > MAX_LINE_BYTES)
        notes.append(f"{long.height} line(s) longer than {MAX_LINE_BYTES // 1024} KiB (first: line {long['n'][0]}); cut")
        out = out.with_columns(pl.col("l").str.slice(0, MAX_LINE_BYTES))
        out = out.filter(pl.col("l").str.contains(_COMBINED))
    return out.select("n", pl.col("l").fill_null("").str.strip_chars_end("\r")), n_lines


# Where a pass has no CR and is all UTF-8 (most passes of most jobs), it is split by
# polars' line reader and the file of each line is worked out from the lines' byte
# lengths (_bulk_hits_lines); any other pass takes the CSV reader (_bulk_hits_csv), which
# reads bytes that are not UTF-8 lossily and keeps each CR for _COMBINED. A switch for
# tests and benchmarks: False sends every pass the CSV way.
LINES_PASS = True
# Large files that are mostly NCCL Channel chatter go to ripgrep where there is one
# (crashscope/rgpass.py); a switch for tests and benchmarks, as LINES_PASS.
RG_PASS = True


def _bulk_hits(data: memoryview, spans: list[tuple[int, int]]) -> list[tuple[pl.DataFrame, int, int] | None]:
    """:func:`_block_hit_frame` for many files of one block in one pass: (hit lines, line
    count, bytes) per file, the same as each file's own scan gives (tests/test_fast_path.py
    checks it). ``data`` holds the files one after another, each (offset, length) of
    ``spans`` followed by a newline of its own where it lacks a last one, and none holds
    our column separator. None for a file this pass does not take, which the caller reads
    the plain way: one with a line over MAX_LINE_BYTES (which the plain path cuts and says
    so), or every file of a pass polars could not split a row per line."""
    raw = bytes(data)
    if LINES_PASS and raw.find(b"\r") < 0:
        got = _bulk_hits_lines(raw, spans)
        if got is not None:
            return got
    return _bulk_hits_csv(raw, spans)


def _bulk_hits_lines(raw: bytes, spans: list[tuple[int, int]]) -> list[tuple[pl.DataFrame, int, int] | None] | None:
    """:func:`_bulk_hits` for a pass without CR: None where polars' line reader does not
    take it (bytes that are not UTF-8) or its rows do not add up to the files' bytes.

    Splitting the lines and the Channel test on each are most of its cost, as in the CSV
    way; what it saves is the CSV reader's work per line and the newline counts: the
    file's last line is the one whose running total of bytes (each line and its newline)
    reaches the file's end, which also proves a row per line. (Callgrind, 9 rank logs of
    the 2 GB job twice: 658 -> 363 million instructions.)"""
    try:
        lines = pl.read_lines(io.BytesIO(raw), name="l")["l"]
    except Exception:  # noqa: BLE001 - not UTF-8 (or a reader that changed): the CSV way
        return None
    nb = lines.str.len_bytes()
    ends = pl.Series([s for s, _ in spans[1:]] + [len(raw)], dtype=pl.UInt64)
    total = (nb.cast(pl.UInt64) + 1).cum_sum()
    last = total.search_sorted(ends, side="left")
    if not lines.len() or int(last[-1]) != lines.len() - 1 or not (total.gather(last) == ends).all():  # type: ignore[arg-type]
        return None
    last_rows = last.to_list()
    starts = [0] + [r + 1 for r in last_rows[:-1]]
    counts = [r + 1 - s for r, s in zip(last_rows, starts)]
    first_rows = pl.Series(starts, dtype=pl.UInt32)
    kept = pl.DataFrame({"l": lines, "_b": nb}).with_row_index("i").filter(~lines.str.contains(_CHANNEL, literal=True) | (nb > MAX_LINE_BYTES))
    del lines, nb, total
    kept = kept.filter(~kept["l"].str.contains(_CHATTER_RE) | (kept["_b"] > MAX_LINE_BYTES))

    def located(frame: pl.DataFrame) -> pl.DataFrame:
        f = (first_rows.search_sorted(frame["i"], side="right") - 1).cast(pl.UInt32).alias("f")
        return frame.with_columns(f, (frame["i"] - first_rows.gather(f) + 1).cast(pl.UInt32).alias("n"))

    long: set[int] = set()
    if kept.height and (kept["_b"].max() or 0) > MAX_LINE_BYTES:  # type: ignore[operator]
        long = set(located(kept.filter(pl.col("_b") > MAX_LINE_BYTES).select("i"))["f"].unique().to_list())
    # empty lines are never hits (the CSV reader reads them as nulls, which match nothing)
    rest = kept.filter(kept["_b"] > 0).drop("_b")
    del kept
    hits = located(_select_hits(rest, "i")).select("f", "n", "l", *_WANTS)
    del rest
    return _by_file(hits, [None if j in long else (counts[j], n) for j, (_, n) in enumerate(spans)])


_WANTS = [f"_s{i}" for i in range(len(_PER_SOURCE))]


def _select_hits(rest: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """The hits among lines that are not chatter (``keys``, ``l`` as read, CR and all, null
    for an empty line): ``keys``, ``l`` without trailing CRs, and which line source wants
    each (``_s0`` ...). A hit is a line _COMBINED matches as read.

    A regex call on these patterns costs ~1 ms however few its rows (polars hands each
    call a fresh copy of the compiled regex, whose lazy DFA starts empty), so where few
    lines are left the per-source prefilters run on them all and a hit is a line one of
    them matches (their union is _COMBINED): one call of the nine fewer. Where a line
    ends in a CR (the sources see it without) _COMBINED is asked as before."""
    few = rest.height <= SMALL_HITS and not rest["l"].str.ends_with("\r").any()
    if not few:
        rest = rest.filter(rest["l"].str.contains(_COMBINED))
    text = rest["l"].fill_null("").str.strip_chars_end("\r")
    # Which line sources want each hit, in Rust for the whole pass: the stdlib's engine
    # took ~90 us a hit for the seven prefilters, most of a small file's line parsing.
    wants = [text.str.contains(src.prefilter).fill_null(False).alias(name) for name, (src, _) in zip(_WANTS, _PER_SOURCE)]
    hits = rest.select(*keys, text, *wants, rest["l"].is_not_null().alias("_v"))
    if few:
        hits = hits.filter(pl.col("_v") & pl.any_horizontal(*_WANTS))
    return hits.drop("_v")


def _by_file(hits: pl.DataFrame, files: "list[tuple[int, int] | None]") -> list[tuple[pl.DataFrame, int, int] | None]:
    """Hits with a file index ``f`` split into each file's (hits, line count, bytes), for
    the files given as (line count, bytes); None for the others."""
    parts = hits.partition_by("f", as_dict=True, include_key=False, maintain_order=True)
    empty = hits.clear().drop("f")
    return [None if c is None else (parts.get((j,), empty), c[0], c[1]) for j, c in enumerate(files)]


def _rg_hits(scanned: "list[tuple[list[tuple[int, bytes]], int] | None]", sizes: list[int]) -> list[tuple[pl.DataFrame, int, int] | None]:
    """:func:`_bulk_hits`' result for files ripgrep read (``rgpass.scan``: each file's lines
    that are not Channel lines, and its line count): the same filters on those lines.
    None for a file with our column separator byte (the plain path reads those lines
    with it replaced) and for the files rg did not take."""
    fs: list[int] = []
    ns: list[int] = []
    ls: list[str] = []
    files: list[tuple[int, int] | None] = [None] * len(scanned)
    for j, got in enumerate(scanned):
        if got is None or any(b"\x1f" in raw for _, raw in got[0]):
            continue
        files[j] = (got[1], sizes[j])
        for n, raw in got[0]:
            if raw:  # empty lines are never hits
                fs.append(j)
                ns.append(n)
                ls.append(raw.decode("utf-8", "replace"))  # as polars' utf8-lossy reads them (checked in tests)
    rest = pl.DataFrame({"f": fs, "n": ns, "l": ls}, schema={"f": pl.UInt32, "n": pl.UInt32, "l": pl.String})
    rest = rest.filter(~rest["l"].str.contains(_CHATTER_RE))
    return _by_file(_select_hits(rest, "f", "n"), files)


def _bulk_hits_csv(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[pl.DataFrame, int, int] | None]:
    """:func:`_bulk_hits` by polars' CSV reader: any bytes, CRs kept."""
    out: list[tuple[pl.DataFrame, int, int] | None] = [None] * len(spans)
    ends = [s for s, _ in spans[1:]] + [len(data)]
    if len(data) > NUMPY_COUNT_BYTES:
        import numpy as np  # counts newlines ~6x faster than bytes.count; its import is not worth it on a small pass

        counts = [int(np.count_nonzero(np.frombuffer(data, np.uint8, e - s, s) == 10)) for (s, _), e in zip(spans, ends)]
    else:
        counts = [data.count(b"\n", s, e) for (s, _), e in zip(spans, ends)]
    total = sum(counts)
    # One streaming scan splits the pass into lines and drops the chatter as it goes: a
    # frame of every line, filtered after, was a third more CPU (its column written and
    # read again). It keeps, besides the lines that are not chatter, every line over
    # MAX_LINE_BYTES (their files go the plain way) and the rows from the last line on,
    # which prove a row per line: the last row must be row ``total - 1``.
    try:
        kept = (
            pl.scan_csv(
                io.BytesIO(data),
                has_header=False, separator="\x1f", quote_char=None, encoding="utf8-lossy",
                truncate_ragged_lines=True, new_columns=["l"], schema_overrides={"l": pl.String}, infer_schema=False,
            )
            .with_row_index("i")
            .with_columns(pl.col("l").str.len_bytes().alias("_b"))
            .filter(~pl.col("l").str.contains(_CHANNEL, literal=True).fill_null(False) | (pl.col("_b") > MAX_LINE_BYTES) | (pl.col("i") >= total - 1))
            .with_columns(pl.col("l").str.contains(_CHATTER_RE).fill_null(False).alias("_c"))
            .filter(~pl.col("_c") | (pl.col("_b") > MAX_LINE_BYTES) | (pl.col("i") >= total - 1))
            .collect(engine="streaming")
            .sort("i")  # (the streaming engine keeps the order; the line numbers must not rest on that)
        )
    except Exception:  # noqa: BLE001 - odd bytes: each file on its own
        return out
    if not kept.height or kept["i"][-1] != total - 1 or (kept.height > 1 and kept["i"][-2] >= total - 1):
        return out  # a row per line is what the line numbers rest on
    # Row i of the pass is line i - starts[f] + 1 of file f: worked out for the hits only
    # (a file and a line column over every line was an eighth of the pass).
    starts = [0] * len(spans)
    acc = 0
    for j, c in enumerate(counts):
        starts[j] = acc
        acc += c
    first_rows = pl.Series(starts, dtype=pl.UInt32)

    def located(frame: pl.DataFrame) -> pl.DataFrame:
        f = (first_rows.search_sorted(frame["i"], side="right") - 1).cast(pl.UInt32).alias("f")
        return frame.with_columns(f, (frame["i"] - first_rows.gather(f) + 1).cast(pl.UInt32).alias("n"))

    long: set[int] = set()
    if any(n > MAX_LINE_BYTES for _, n in spans) and (kept["_b"].max() or 0) > MAX_LINE_BYTES:  # type: ignore[operator]
        long = set(located(kept.filter(pl.col("_b") > MAX_LINE_BYTES).select("i"))["f"].unique().to_list())
    rest = kept.filter(~kept["_c"]).select("i", "l")
    del kept
    hits = located(_select_hits(rest, "i")).select("f", "n", "l", *_WANTS)
    del rest
    return _by_file(hits, [None if j in long else (counts[j], n) for j, (_, n) in enumerate(spans)])


def _block_hits(block: bytes, first_line: int, notes: list[str]) -> tuple[list[int], list[str], int]:
    """Line numbers and texts of the block's lines matching any prefilter."""
    out, n_lines = _block_hit_frame(block, first_line, notes)
    return out["n"].to_list(), out["l"].to_list(), n_lines


def _iter_hits(frames: Iterable[pl.DataFrame | list[tuple[int, str]]]) -> Iterator[tuple[int, str]]:
    """(line number, text) pairs of hit frames, made into Python objects a slice at a time."""
    for f in frames:
        if isinstance(f, list):
            yield from f
            continue
        for off in range(0, f.height, ITER_SLICE):
            part = f.slice(off, ITER_SLICE)
            yield from zip(part["n"].to_list(), part["l"].to_list())


class _Feed:
    """One line source parsing a large file while it is read: it runs in a thread that
    pulls each block's hits from a small queue, so only a few blocks of hits are ever
    held, whatever the file's size (``parse_lines`` sees one lazy sequence, as before)."""

    def __init__(self, src: LineSource, ctx: ParseContext):
        self.ctx = ctx
        self.error: BaseException | None = None
        self._q: queue.Queue = queue.Queue(maxsize=2)
        self._thread = threading.Thread(target=self._run, args=(src,), name=f"crashscope-{src.name}", daemon=True)
        self._thread.start()

    def _frames(self) -> Iterator[pl.DataFrame]:
        while True:
            f = self._q.get()
            if f is None:
                return
            yield f

    def _run(self, src: LineSource) -> None:
        frames = self._frames()
        try:
            src.parse_lines(_iter_hits(frames), self.ctx)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - re-raised in the reading thread
            self.error = exc
        for _ in frames:  # a parser that stopped early or failed: drain, never block the reader
            pass

    def put(self, frame: pl.DataFrame) -> None:
        self._q.put(frame)

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()


# A run of byte-identical consecutive hit lines reaches the sources only up to this many
# lines; the rest are counted onto the events of the last line passed.
RUN_FOLD_AFTER = 8


@dataclass(slots=True)
class _Runs:
    """Run-length state of a file's hit lines across blocks."""

    last: str | None = None  # text of the last hit line
    pos: int = 0  # its 0-based position in its run of identical lines
    kth: int | None = None  # line number of the run's RUN_FOLD_AFTER-th line, once seen
    extra: dict[int, list[int]] = field(default_factory=dict)  # kth line -> [lines folded, last line]


def _fold_runs(f: pl.DataFrame, st: _Runs, watch: set[int]) -> pl.DataFrame:
    """Drop the lines of ``f`` past the RUN_FOLD_AFTER-th of a run of identical lines,
    counting them in ``st.extra`` under the run's last passed line (added to ``watch``)."""
    k = RUN_FOLD_AFTER
    same = pl.col("l") == pl.col("l").shift(1)
    df = f.with_columns(same.fill_null(pl.lit(st.last is not None) & (pl.col("l") == (st.last or ""))).alias("_s"))
    if not df["_s"].any():
        st.last, st.pos, st.kth = f["l"][-1], 0, None
        return f
    df = df.with_columns((~pl.col("_s")).cum_sum().alias("_r"))
    carried = st.pos + 1 if df["_s"][0] else 0  # run 0 continues the previous block's last run
    df = df.with_columns((pl.int_range(pl.len()).over("_r") + pl.when(pl.col("_r") == 0).then(carried).otherwise(0)).alias("_p"))
    kth = dict(df.filter(pl.col("_p") == k - 1).select("_r", "n").iter_rows())
    if carried and 0 not in kth and st.kth is not None:
        kth[0] = st.kth
    watch.update(int(v) for v in kth.values())
    drop = df.filter(pl.col("_p") >= k)
    if drop.height:
        for run, cnt, last in drop.group_by("_r").agg(pl.len(), pl.col("n").max()).iter_rows():
            kn = kth.get(run)
            if kn is None:
                continue
            e = st.extra.setdefault(int(kn), [0, 0])
            e[0] += int(cnt)
            e[1] = max(e[1], int(last))
    tail = df.row(-1, named=True)
    st.last, st.pos = tail["l"], int(tail["_p"])
    st.kth = int(kth[tail["_r"]]) if tail["_r"] in kth else None
    return df.filter(pl.col("_p") < k).select("n", "l")


def _fold_runs_py(ns: list[int], ts: list[str], st: _Runs, watch: set[int]) -> list[tuple[int, str]]:
    """``_fold_runs`` for a few hits, in Python (polars' per-call cost dominates there)."""
    k = RUN_FOLD_AFTER
    out = []
    for n, t in zip(ns, ts):
        if t == st.last:
            st.pos += 1
        else:
            st.last, st.pos, st.kth = t, 0, None
        if st.pos < k:
            out.append((n, t))
            if st.pos == k - 1:
                st.kth = n
                watch.add(n)
        elif st.kth is not None:
            e = st.extra.setdefault(st.kth, [0, 0])
            e[0] += 1
            e[1] = max(e[1], n)
    return out


def _scan_lines(  # type: ignore[no-untyped-def]
    stream: PeekStream, info: FileInfo, options: ParseOptions, rec: FileRecord, budget: "Budget | None" = None,
    pre: "tuple[pl.DataFrame, int, int] | None" = None,
):
    """Scan a text file block by block and give every line source its hits.

    A file of one block is parsed after it is read; from the second block on, every line
    source that has hits parses in its own thread while the file is read (see ``_Feed``),
    so memory stays at a few blocks of hits, not one Python string per matching line.
    """
    notes: list[str] = []
    held: dict[int, list] = {}  # source index -> hit frames (or lists) not yet parsed
    feeds: dict[int, _Feed] = {}
    ctxs: dict[int, ParseContext] = {}
    runs = _Runs()
    watch: set[int] = set()
    streaming = False
    bad_utf8 = False
    blocks = 0

    def block_hits() -> Iterator[tuple[pl.DataFrame, int]]:
        if pre is not None:
            hits, n, size = pre
            rec.bytes += size
            yield hits, n
            return
        first = 1
        for block in iter_blocks(stream, rec, notes, budget):
            hits, n = _block_hit_frame(block, first, notes)
            first += n
            yield hits, n

    try:
        for hits, n in block_hits():
            rec.lines += n
            blocks += 1
            streaming = blocks > 1  # a second block: parse from here on while reading
            if hits.height:
                # Identical consecutive hits are identical consecutive lines of every source
                # that takes them: fold them once, before the split. Few hits (most files)
                # are split in Python; many (a flood, a huge log) in polars.
                few = hits.height <= SMALL_HITS
                wants = None  # line number -> (wanted by source 0, by source 1, ...), from _bulk_hits
                if few:
                    ns = hits["n"].to_list()
                    pairs = _fold_runs_py(ns, hits["l"].to_list(), runs, watch)
                    if "_s0" in hits.columns:
                        wants = dict(zip(ns, zip(*(hits[f"_s{k}"].to_list() for k in range(len(_PER_SOURCE))))))
                else:
                    hits = _fold_runs(hits, runs, watch)
                for i, (src, rx) in enumerate(_PER_SOURCE):
                    mine: list[tuple[int, str]] | pl.DataFrame
                    if few:
                        mine = [p for p in pairs if wants[p[0]][i]] if wants is not None else [p for p in pairs if rx.search(p[1])]
                        if not mine:
                            continue
                        bad_utf8 = bad_utf8 or any("\ufffd" in t for _, t in mine)
                    else:
                        # the bulk pass already matched each source's prefilter (unless runs were folded)
                        wanted = pl.col(f"_s{i}") if f"_s{i}" in hits.columns else pl.col("l").str.contains(src.prefilter)
                        mine = hits.filter(wanted)
                        if not mine.height:
                            continue
                        bad_utf8 = bad_utf8 or bool(mine["l"].str.contains("\ufffd", literal=True).any())
                    if i not in ctxs:
                        ctxs[i] = ParseContext(info, src.name, options)
                        ctxs[i].watch_lines = watch
                    held.setdefault(i, []).append(mine)
            if streaming:
                for i, frames in held.items():
                    if i not in feeds:
                        feeds[i] = _Feed(_PER_SOURCE[i][0], ctxs[i])
                    for f in frames:
                        feeds[i].put(f)
                held = {i: [] for i in held}
    finally:
        for feed in feeds.values():
            feed.close()
    for i in sorted(held):
        if held[i] and i not in feeds:
            _PER_SOURCE[i][0].parse_lines(list(_iter_hits(held[i])), ctxs[i])
    for feed in feeds.values():
        if feed.error is not None:
            raise feed.error
    for line, (count, last) in runs.extra.items():
        for ctx in ctxs.values():  # a no-op for a source that emitted nothing for that line
            ctx.add_repeats(line, count, last)
    out = [ctxs[i] for i in sorted(ctxs)]
    if notes or bad_utf8:
        ctx = ParseContext(info, rec.kind, options)
        for note in notes:
            ctx.warn(note)
        if bad_utf8:
            ctx.warn("bytes that are not UTF-8 were replaced")
        out.append(ctx)
    return out
