"""Safe, read-only access to a job's log directory.

The Slurm epilog runs this as root over directories users write, so:

* nothing is ever written under the root;
* symbolic links are followed only when they resolve to a regular file inside the root
  (links out of the root, to directories, and loops are skipped with a warning);
* every file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` after
  opening, so a file swapped for a FIFO, device or link after the directory scan is
  refused rather than followed or blocked on;
* ``.gz``, ``.zst``, ``.bz2``, ``.xz`` files and tar archives (compressed or not) are
  read in place by streaming; members are never extracted, so no member path can escape;
* a file is read only up to the size ``fstat`` gave when it was opened (a log that keeps
  growing, or a sparse tail extended while we read, cannot keep the reader busy);
* decompression stops, with a warning, past a ratio of ``MAX_RATIO`` beyond the first
  ``RATIO_FREE_BYTES`` or past ``MAX_DECOMPRESSED_BYTES`` per file or member (a
  decompression bomb); both are module settings, ``set_decompression_limits`` changes them.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import regex

from crashscope.patterns import compile_pattern

HEAD_BYTES = 64 * 1024
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz")
MAX_TAR_MEMBERS = 200_000
SPARSE_SLACK = 1024 * 1024  # a file this much larger than its blocks has holes worth skipping
# Decompression-bomb limits (per file or archive member, on the decompressed bytes).
RATIO_FREE_BYTES = 64 * 1024 * 1024  # no ratio check before this much output
MAX_RATIO = 200  # output / compressed input consumed, checked beyond RATIO_FREE_BYTES
MAX_DECOMPRESSED_BYTES = 8 * 1024 * 1024 * 1024


def set_decompression_limits(*, max_ratio: float | None = None, max_bytes: int | None = None, ratio_free_bytes: int | None = None) -> None:
    """Change the decompression-bomb limits for this process."""
    global MAX_RATIO, MAX_DECOMPRESSED_BYTES, RATIO_FREE_BYTES
    if max_ratio is not None:
        MAX_RATIO = max_ratio  # type: ignore[assignment]
    if max_bytes is not None:
        MAX_DECOMPRESSED_BYTES = max_bytes
    if ratio_free_bytes is not None:
        RATIO_FREE_BYTES = ratio_free_bytes


@dataclass(slots=True)
class Entry:
    """One readable file (or archive member) of the job directory."""

    path: str  # display path relative to the root; "a.tar.gz!member/path" inside archives
    name: str  # base name without compression suffix
    size: int | None  # on-disk (compressed) size
    stream: BinaryIO  # decompressed bytes; valid until the walk moves on
    compression: str | None = None
    # The open descriptor of a plain file on disk without holes (None for anything else),
    # for a helper process to read it (crashscope/rgpass.py); valid while ``stream`` is.
    fd: int | None = None


@dataclass(slots=True)
class Skipped:
    """A path that was found but not read, with the reason for ``warnings``/``sources``."""

    path: str
    reason: str
    unreadable: bool = False  # True: list it in sources as "unreadable"


def _magic_kind(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    if head.startswith(b"BZh") and len(head) > 3 and head[3:4].isdigit():
        return "bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    return None


def _decompressor(kind: str, raw: BinaryIO) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    raise ValueError(kind)


class BoundedReader(io.RawIOBase):
    """At most ``limit`` bytes of ``raw``: the size a file had when it was opened.

    With ``fd`` (a regular file with holes), holes are skipped with ``SEEK_DATA``: a hole
    reads as NUL bytes, which hold no log line, and a 1 TB sparse tail would otherwise
    take hours to read. Line numbers are unchanged (NULs hold no newline).
    """

    def __init__(self, raw: BinaryIO, limit: int, fd: int | None = None):
        self._raw = raw
        self.left = limit
        self.consumed = 0
        self._fd = fd
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        n = min(len(b), self.left)
        if n <= 0:
            return 0
        if self._fd is not None:
            return self._read_sparse(b, n)
        k = self._raw.readinto(memoryview(b)[:n])  # straight into the caller's buffer
        self.left -= k
        self.consumed += k
        return k

    def _read_sparse(self, b, n: int) -> int:  # type: ignore[no-untyped-def]
        fd = self._fd
        assert fd is not None
        try:
            data_at = os.lseek(fd, self._pos, os.SEEK_DATA)
            hole_at = os.lseek(fd, data_at, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                self.left = 0
                return 0
            self._fd = None  # no SEEK_DATA here: plain reads from where we are
            self._raw.seek(self._pos)
            return self.readinto(memoryview(b)[:n])
        if data_at > self._pos:
            skip = min(data_at - self._pos, self.left)
            self._pos += skip
            self.left -= skip
            n = min(n, self.left)
            if n <= 0:
                return 0
        data = os.pread(fd, min(n, max(1, hole_at - self._pos)), self._pos)
        k = len(data)
        b[:k] = data
        self._pos += k
        self.left -= k
        self.consumed += k
        return k


class CountingReader(io.RawIOBase):
    """Counts the compressed bytes a decompressor pulls (tar members, nested streams)."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        data = self._raw.read(len(b))
        k = len(data or b"")
        b[:k] = data or b""
        self.consumed += k
        return k


class BombGuard(io.RawIOBase):
    """Decompressed bytes, ended with ``error`` set when the output outgrows the input
    (ratio) or an absolute size: a bomb is read as far as the limits and no further."""

    def __init__(self, out: BinaryIO, counter: "CountingReader | BoundedReader", kind: str):
        self._out = out
        self._counter = counter
        self._kind = kind
        self.produced = 0
        self.error: str | None = None
        self.max_bytes: int | None = MAX_DECOMPRESSED_BYTES  # None for a tar (limited per member)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        if self.error:
            return 0
        data = self._out.read(min(len(b), 1024 * 1024))
        if not data:
            return 0
        k = len(data)
        self.produced += k
        consumed = max(1, self._counter.consumed)
        if self.max_bytes is not None and self.produced > self.max_bytes:
            self.error = (
                f"decompressed ({self._kind}) beyond {self.max_bytes // (1024 * 1024):,} MiB; "
                "the rest was not read (decompression size limit)"
            )
        elif self.produced > RATIO_FREE_BYTES and self.produced > MAX_RATIO * consumed:
            self.error = (
                f"expands more than {MAX_RATIO:g}x ({self._kind}: {self.produced // (1024 * 1024):,} MiB "
                f"from {consumed:,} bytes); the rest was not read (decompression bomb limit)"
            )
        b[:k] = data
        return k


class PeekStream(io.RawIOBase):
    """A stream whose first bytes were already read (to sniff) and are replayed.

    Read errors of the underlying stream (a gzip that ends early, a corrupt zstd frame)
    end the stream instead of raising; ``error`` says what happened.

    ``direct`` (a plain file, not compressed, not an archive): once the head is replayed,
    a read goes straight to ``rest.readinto`` whatever its size, instead of in 64 KiB pieces
    copied through each layer (a 1.85 MB file read in 1.9 ms that way, 0.14 ms plainly).
    """

    def __init__(self, head: bytes, rest: BinaryIO, direct: bool = False):
        self._head = head
        self._rest = rest
        self.direct = direct
        self.error: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        n = len(b)
        if self._head:
            k = min(n, len(self._head))
            b[:k] = self._head[:k]
            self._head = self._head[k:]
            return k
        if self.error:
            return 0
        if self.direct:
            try:
                k = self._rest.readinto(b)
            except Exception as exc:  # noqa: BLE001 - an I/O error: the stream ends here
                self.error = _describe(exc)
                return 0
            if not k:
                self.error = getattr(self._rest, "error", None)
                return 0
            return k
        try:
            # Small reads: a decoder that fails at a truncated end loses only this piece.
            data = self._rest.read(min(n, 64 * 1024))
        except Exception as exc:  # noqa: BLE001 - EOFError, zlib/lzma/zstd errors: the stream ends here
            self.error = _describe(exc)
            return 0
        if not data:
            self.error = getattr(self._rest, "error", None)  # a BombGuard that stopped
            return 0
        k = len(data)
        b[:k] = data
        return k


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError):
        return f"compressed data ends early ({text})"
    return f"read error: {text}"


def read_head(stream: BinaryIO, n: int = HEAD_BYTES) -> tuple[bytes, str | None]:
    """Read up to n bytes, tolerating a stream that breaks early."""
    chunks: list[bytes] = []
    got = 0
    try:
        while got < n:
            b = stream.read(n - got)
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except Exception as exc:  # noqa: BLE001 - any decoder error means "stream ended"
        return b"".join(chunks), _describe(exc)
    return b"".join(chunks), None


_HOSTISH = compile_pattern(r"^[A-Za-z][A-Za-z0-9-]*?\d+[A-Za-z0-9-]*$")
_NOT_HOST = compile_pattern(
    r"^(?:rank|worker|attempt|job|step|task|proc|gpu|local|node_rank|log|logs|run|epoch|slurm|out|err|dmesg|trace|nccl|iter)[-_]?\d+$",
    regex.IGNORECASE,
)
_RANK_IN_NAME = compile_pattern(r"(?:^|[^a-z])rank[-_.]?(\d{1,6})(?:\D|$)", regex.IGNORECASE)


def host_hint_from_path(rel: str) -> str | None:
    """A host name from a per-node directory (``node001/dmesg.log``), or None.

    Only directory components are used; names inside files are matched against the
    job's known hosts later, by the timeline.
    """
    parts = [p for p in rel.replace("!", "/").split("/")[:-1] if p]
    for part in reversed(parts):
        if _HOSTISH.match(part) and not _NOT_HOST.match(part):
            return part.split(".", 1)[0]
    return None


# A shell prompt pasted above a command's output: bash's default PS1 (Debian/Ubuntu
# ``\u@\h:\w\$``, RHEL ``[\u@\h \W]\$``), zsh's ``%n@%m %~ %#``, a conda env in front.
_PROMPT = compile_pattern(
    r"(?m)^(?:\([^()\s]{1,64}\) ?)?\[?[a-z_][a-z0-9_.-]{0,31}@([A-Za-z0-9][A-Za-z0-9.-]{0,252})"
    r"(?::[^\s$#%]{0,200}| [^\n$#%\]]{1,200}?)\]? ?[$#%] +(?:sudo +(?:-[ugpCDhRTU] +\S+ +|-\S+ +)*)?(?P<cmd>\S+)"
)
# Commands whose output is about other hosts: scheduler and accounting clients (Slurm, PBS/Torque,
# SGE, LSF, HTCondor, Kubernetes) and the ones that run a command elsewhere. A prompt before them
# names where they were typed (a login node), not where the job ran.
_ELSEWHERE_COMMANDS = frozenset((
    "sacct", "scontrol", "squeue", "sinfo", "sstat", "seff", "sshare", "sprio", "sreport", "sacctmgr", "srun", "salloc",
    "qacct", "qstat", "qhost", "tracejob", "pbsnodes", "bjobs", "bhist", "bacct", "bhosts", "condor_q", "condor_history",
    "kubectl", "oc", "ssh", "pdsh", "clush", "ansible", "mpirun", "mpiexec",
))
_PROMPT_HOST = compile_pattern(r"^(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9-]{0,62}$")  # a letter: not an IPv4 address


def host_hint_from_prompt(head: str) -> str | None:
    """The host of the shell prompts in a pasted terminal session (``root@node4:~# dmesg``),
    when every prompt in ``head`` names the same one and no command at one of them reports on
    or runs on other hosts (``user@login1:~$ sacct -j 42``); None otherwise."""
    prompts = list(_PROMPT.finditer(head))
    if any(m.group("cmd").rsplit("/", 1)[-1] in _ELSEWHERE_COMMANDS for m in prompts):
        return None
    hosts = {m.group(1).split(".", 1)[0] for m in prompts}
    if len(hosts) != 1:
        return None
    host = hosts.pop()
    return host if _PROMPT_HOST.match(host) and host.lower() not in ("localhost", "localhost4", "localhost6") else None


def rank_hint_from_path(rel: str) -> int | None:
    m = None
    for m in _RANK_IN_NAME.finditer(rel.replace("!", "/").rsplit("/", 1)[-1]):
        pass
    return int(m.group(1)) if m else None


def strip_compression(name: str) -> str:
    for suf in COMPRESSED_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _inside(root: str, fd: int) -> bool:
    """The opened file lies under ``root`` (a directory swapped for a link to elsewhere
    after the scan is followed by ``open``; ``O_NOFOLLOW`` guards the last name only)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True  # no /proc: the scan's checks are all there is
    return os.path.commonpath([root, real]) == root


def _open_nofollow(path: str, root: str | None = None) -> tuple[BinaryIO | None, os.stat_result | None, str | None]:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return None, None, exc.strerror or str(exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None, st, "not a regular file"
        if root is not None and not _inside(root, fd):
            os.close(fd)
            return None, st, "not a regular file inside the job directory (a directory on its path was replaced by a link)"
        # O_NONBLOCK is only there to never hang on a FIFO; regular reads ignore it.
        return os.fdopen(fd, "rb", buffering=1024 * 1024), st, None
    except OSError as exc:
        os.close(fd)
        return None, None, exc.strerror or str(exc)


@dataclass(frozen=True, slots=True)
class FileRef:
    """A regular file found by the directory scan, not yet opened."""

    abs_path: str
    rel: str
    size: int
    root: str | None = None  # the real path of the scanned root: opened files must lie under it


def walk(root: Path) -> Iterator[Entry | Skipped]:
    """Yield every readable file under ``root`` (and inside archives) in a stable order.

    Each ``Entry.stream`` must be consumed before the iterator advances (tar members are
    streamed). The caller closes nothing: the walk does.
    """
    for ref in scan(root):
        if isinstance(ref, Skipped):
            yield ref
        else:
            yield from open_ref(ref)


def open_ref(ref: FileRef) -> Iterator[Entry | Skipped]:
    """The entries of one file: itself, decompressed, or its archive members."""
    yield from _yield_file(ref.abs_path, ref.rel, ref.root)


def scan(root: Path) -> Iterator[FileRef | Skipped]:
    """The directory scan alone: regular files in a stable order, and what was skipped."""
    root = Path(root)
    root_real = os.path.realpath(root)
    if os.path.isfile(root_real):
        yield FileRef(root_real, os.path.basename(root_real), os.path.getsize(root_real))
        return
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    stack = [("", root_real)]
    while stack:
        rel_dir, abs_dir = stack.pop()
        try:
            st = os.stat(abs_dir, follow_symlinks=False)
        except OSError as exc:
            yield Skipped(rel_dir or ".", f"unreadable directory: {exc.strerror}", unreadable=True)
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        try:
            with os.scandir(abs_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield Skipped(rel_dir or ".", f"unreadable directory: {exc.strerror}", unreadable=True)
            continue
        subdirs = []
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            try:
                if e.is_symlink():
                    target = os.path.realpath(e.path)
                    if os.path.commonpath([root_real, target]) != root_real:
                        yield Skipped(rel, "symbolic link pointing outside the job directory (not followed)")
                    # A link inside the root needs no following: its target is walked itself.
                    continue
                if e.is_dir(follow_symlinks=False):
                    subdirs.append((rel, e.path))
                    continue
                if not e.is_file(follow_symlinks=False):
                    yield Skipped(rel, "not a regular file (FIFO, socket or device): skipped")
                    continue
                est = e.stat(follow_symlinks=False)
                if (est.st_dev, est.st_ino) in seen_files:
                    continue
                seen_files.add((est.st_dev, est.st_ino))
            except (OSError, ValueError) as exc:
                yield Skipped(rel, f"cannot inspect: {exc}", unreadable=True)
                continue
            yield FileRef(e.path, rel, est.st_size, root_real)
        stack.extend(reversed(subdirs))


def _yield_file(abs_path: str, rel: str, root: str | None = None) -> Iterator[Entry | Skipped]:
    fh, st, err = _open_nofollow(abs_path, root)
    if fh is None:
        yield Skipped(rel, f"cannot open: {err}", unreadable=err is not None and not err.startswith("not a regular file"))
        return
    with fh:
        size = st.st_size if st else 0
        # Never past the size the file had when opened: a growing log cannot hold us;
        # a file with holes (fewer blocks than its size) is read around them.
        sparse = st is not None and hasattr(os, "SEEK_DATA") and st.st_blocks * 512 + SPARSE_SLACK < size
        reader = BoundedReader(fh, size, fh.fileno() if sparse else None)
        yield from _yield_stream(reader, rel, size, depth=0, fd=None if sparse else fh.fileno())  # type: ignore[arg-type]


def _yield_stream(raw: BinaryIO, rel: str, size: int | None, depth: int, fd: int | None = None) -> Iterator[Entry | Skipped]:
    magic, err = read_head(raw, 8)
    kind = _magic_kind(magic)
    plain = kind is None and depth == 0  # a file on disk as it is (or a plain tar, below)
    stream: BinaryIO = PeekStream(magic, raw, direct=plain)  # type: ignore[assignment]
    name = rel.replace("!", "/").rsplit("/", 1)[-1]
    if kind:
        try:
            counter = raw if isinstance(raw, BoundedReader) else CountingReader(raw)
            if counter is not raw:
                stream = PeekStream(magic, counter)  # type: ignore[assignment]
            guard = BombGuard(_decompressor(kind, io.BufferedReader(stream)), counter, kind)  # type: ignore[arg-type]
            stream = guard  # type: ignore[assignment]
        except Exception as exc:  # noqa: BLE001
            yield Skipped(rel, f"cannot decompress ({kind}): {exc}", unreadable=True)
            return
        name = strip_compression(name)
    head, err = read_head(stream, 512)
    peek = PeekStream(head, stream)
    peek.error = err
    if len(head) >= 262 and head[257:262] == b"ustar" and depth == 0:
        if isinstance(stream, BombGuard):
            stream.max_bytes = None  # an archive: the size limit applies to each member
        yield from _yield_tar(peek, rel)
        return
    peek.direct = plain
    yield Entry(path=rel, name=name, size=size, stream=peek, compression=kind, fd=fd if plain else None)  # type: ignore[arg-type]


def _yield_tar(stream: BinaryIO, rel: str) -> Iterator[Entry | Skipped]:
    try:
        tar = tarfile.open(fileobj=stream, mode="r|")  # streaming: no seeking, no extraction
    except (tarfile.TarError, OSError, EOFError) as exc:
        yield Skipped(rel, f"unreadable tar archive: {exc}", unreadable=True)
        return
    count = 0
    try:
        for member in tar:
            count += 1
            if count > MAX_TAR_MEMBERS:
                yield Skipped(rel, f"more than {MAX_TAR_MEMBERS} archive members: rest skipped")
                break
            mrel = f"{rel}!{member.name.lstrip('/')}"
            if not member.isreg():
                if not member.isdir():
                    yield Skipped(mrel, "archive member is not a regular file (link or device): skipped")
                continue
            fobj = tar.extractfile(member)
            if fobj is None:
                continue
            if member.size > MAX_DECOMPRESSED_BYTES:
                yield Skipped(mrel, f"archive member of {member.size:,} bytes: only the first {MAX_DECOMPRESSED_BYTES // (1024 * 1024):,} MiB read (size limit)")
                fobj = BoundedReader(fobj, MAX_DECOMPRESSED_BYTES)  # type: ignore[assignment]
            yield from _yield_stream(fobj, mrel, member.size, depth=1)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt archive, decompressor errors
        yield Skipped(rel, f"tar archive ends early or is corrupt after {count} members: {exc}")


BINARY_CONTROL_FRACTION = 0.05
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27, 8)) + b"\x7f"


def looks_binary(sample: bytes) -> bool:
    """Control bytes (other than tab, newlines, form feed, backspace, ANSI escape) above 5%."""
    if not sample:
        return False
    controls = len(sample) - len(sample.translate(None, _CONTROL))
    return controls / len(sample) > BINARY_CONTROL_FRACTION
