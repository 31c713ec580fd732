"""The ripgrep pass: large text files that are mostly NCCL's Channel chatter, read by ripgrep.

NCCL prints an ``NCCL INFO Channel`` line per channel, peer and communicator; in a large
job those lines are nearly all of the rank logs' bytes and never an event. The polars
pass (``ingest._bulk_hits``) reads every line of them into a column to drop them, about
1 GB per CPU second. ripgrep (the ``ripgrep`` wheel's ``rg``, else one on PATH) prints
only the lines that are not Channel lines, with their numbers, at about 3 GB per CPU
second: a 2 GB job's 1,152 rank logs in 0.75 CPU s instead of 2.2 (benchmarks/ingest_bench.py).

It reads the files through descriptors this process opened and checked
(``bundle._open_nofollow``), as ``/dev/fd/N`` of its own: it resolves no path of the job
directory and follows no link, and nothing of a log's text is on its command line. What it
prints goes through the polars pass's filters (``ingest._rg_hits``); a file it cannot read
as the polars pass would (a line over ``MAX_LINE_BYTES``, a file that changed, rg
failing, more output than ``MAX_OUTPUT_BYTES``) is read the plain way instead, and
tests/test_fast_path.py proves both ways give the same hits, line numbers and counts.
``CRASHSCOPE_RIPGREP=off`` turns it off.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sysconfig

CHANNEL = b"NCCL INFO Channel "  # ingest.CHATTER[0]
MIN_BYTES = 256 * 1024  # smaller files: the polars pass costs about what rg does (rg starts in ~2.5 ms; at ~100 KB the two ways cost the same, at 490 KB rg took 2.0 CPU s of rank logs where polars took 2.6)
CHATTER_SHARE = 0.5  # of a file's head's lines that are Channel lines, to hand it to rg
GROUP_FILES = 128  # descriptors handed to one rg
MAX_OUTPUT_BYTES = 64 << 20  # more back than this (a head of chatter, the rest not): the plain way
PROBE_BYTES = 4096
TAIL_BYTES = 64 * 1024
COUNT_BYTES = 8 << 20


@functools.cache
def ripgrep() -> str | None:
    """The rg to run: the one installed beside this Python (the ``ripgrep`` wheel), else
    the first on PATH; None when there is none that runs, or it is turned off."""
    if os.environ.get("CRASHSCOPE_RIPGREP", "").strip().lower() in ("0", "off", "no", "false"):
        return None
    for cand in (os.path.join(sysconfig.get_path("scripts"), "rg"), shutil.which("rg")):
        if not cand or not os.path.isfile(cand) or not os.access(cand, os.X_OK):
            continue
        try:
            out = subprocess.run([cand, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.match(rb"ripgrep (\d+)\.(\d+)", out)
        if m and (int(m[1]), int(m[2])) >= (11, 0):  # --null, -E none and /dev/fd paths: all there by 11
            return cand
    return None


def children_cpu() -> float:
    """CPU seconds of this process's finished children (rg's, for ``--profile``)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def chatter_heavy(head: bytes) -> bool:
    """Whether at least CHATTER_SHARE of a file's head's lines are Channel lines."""
    return head.count(CHANNEL) >= CHATTER_SHARE * (head.count(b"\n") + 1)


def scan(rg: str, files: list[tuple[int, int]], max_line: int) -> list[tuple[list[tuple[int, bytes]], int] | None]:
    """For each (descriptor, size): the lines that are not Channel lines, as (number, raw
    bytes without the newline), and the file's line count; None for a file to read the
    plain way (rg failed or printed too much, the file changed, a line may be over
    ``max_line`` bytes)."""
    out: list[tuple[list[tuple[int, bytes]], int] | None] = [None] * len(files)
    fds = [fd for fd, _ in files]
    argv = [
        rg, "--no-config", "--text", "--encoding", "none", "--line-number", "--invert-match", "--fixed-strings",
        "--no-heading", "--with-filename", "--null", "--color", "never", "--regexp", CHANNEL.decode(), "--",
        *(f"/dev/fd/{fd}" for fd in fds),
    ]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=fds)
    except OSError:
        return out
    chunks: list[bytes] = []
    got = 0
    assert proc.stdout is not None
    with proc.stdout:
        while True:
            b = os.read(proc.stdout.fileno(), 1 << 20)
            if not b:
                break
            got += len(b)
            if got > MAX_OUTPUT_BYTES:
                proc.kill()
                proc.wait()
                return out
            chunks.append(b)
    if proc.wait() not in (0, 1):  # 1: no line selected (every line chatter); 2: an error
        return out
    by_fd: dict[bytes, list[tuple[int, bytes]]] = {}
    for rec in b"".join(chunks).split(b"\n")[:-1]:
        path, _, rest = rec.partition(b"\0")
        num, _, text = rest.partition(b":")
        by_fd.setdefault(path, []).append((int(num), text))
    for j, (fd, size) in enumerate(files):
        lines = by_fd.get(f"/dev/fd/{fd}".encode(), [])
        try:
            if os.fstat(fd).st_size != size or _maybe_long_line(fd, size, max_line):
                continue
            count = _line_count(fd, size, lines)
        except OSError:
            continue
        if count is not None:
            out[j] = (lines, count)
    return out


def _maybe_long_line(fd: int, size: int, max_line: int) -> bool:
    """Whether a line may be longer than ``max_line``: such a line holds a whole aligned
    window of half that length, and so a window whose first PROBE_BYTES (or all of it,
    if smaller) have no newline."""
    window = max(1, max_line // 2)
    probe = min(PROBE_BYTES, window)
    for at in range(0, size - window + 1, window):
        if b"\n" not in os.pread(fd, probe, at):
            return True
    return False


def _line_count(fd: int, size: int, lines: list[tuple[int, bytes]]) -> int | None:
    """The file's line count (a last line without a newline counts): the number of the
    last line rg printed where that is the file's last line, else counted."""
    if size == 0:
        return 0
    tail = os.pread(fd, min(size, TAIL_BYTES), max(0, size - TAIL_BYTES))
    ended = tail.endswith(b"\n")
    body = tail[:-1] if ended else tail
    cut = body.rfind(b"\n")
    if cut >= 0 or len(tail) == size:
        last = body[cut + 1 :]
        if CHANNEL not in last:
            if not lines or lines[-1][1] != last:
                return None  # rg did not print the file's last line: not read as we read it
            return lines[-1][0]
    n, at = 0, 0
    while at < size:
        b = os.pread(fd, min(COUNT_BYTES, size - at), at)
        if not b:
            return None
        n += b.count(b"\n")
        at += len(b)
    return n + (0 if ended else 1)
