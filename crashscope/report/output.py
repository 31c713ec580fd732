"""Writing a report (or an export) to ``-o FILE`` without ever touching the evidence.

:class:`SafeOutput` is prepared BEFORE the analysis, so a missing or unwritable directory
fails in a second, not after minutes of work:

* the parent directory is opened once (``O_DIRECTORY | O_NOFOLLOW``) and everything after
  that is relative to that descriptor (``dir_fd``): swapping the parent path for a symlink
  later changes nothing;
* the opened directory's ancestry is walked (``..`` by descriptor, compared by device and
  inode) and a directory inside an analysed directory is refused -- at preparation and
  again just before the rename;
* the data goes to a temporary file created there with ``O_CREAT | O_EXCL | O_NOFOLLOW``
  and is renamed over the name at the end: a symlink or hard link at the name is replaced,
  never followed or written through, and a reader never sees half a report.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Callable, Iterable

from crashscope.errors import OutputError

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_MAX_DEPTH = 4096


def _why(e: OSError) -> str:
    return os.strerror(e.errno) if e.errno else str(e)


class SafeOutput:
    """An output file prepared now and written (atomically) later; see the module doc.

    Args:
        path: the file to write.
        never_inside: analysed inputs. A directory here may not contain the output; a file
            here may not be the output.
    """

    def __init__(self, path: str | Path, *, never_inside: Iterable[str | Path] = ()):
        self.path = Path(path)
        self.name = self.path.name
        if not self.name or self.name in (".", "..") or str(path).endswith(os.sep):
            raise OutputError(f"cannot write {path}: not a file name")
        parent = self.path.parent if str(self.path.parent) else Path(".")
        self._forbidden_dirs: set[tuple[int, int]] = set()
        self._forbidden_files: set[tuple[int, int]] = set()
        for p in never_inside:
            try:
                st = os.stat(p)
            except OSError:
                continue
            (self._forbidden_dirs if stat.S_ISDIR(st.st_mode) else self._forbidden_files).add((st.st_dev, st.st_ino))
        try:
            # Symlinks above the last component are the user's own layout (/scratch -> /lustre);
            # resolve them now and open the result without following a link at its end.
            real = os.path.realpath(parent)
            self.dir_fd = os.open(real, _DIR_FLAGS)
        except FileNotFoundError:
            raise OutputError(f"cannot write {path}: directory {parent} does not exist") from None
        except NotADirectoryError:
            raise OutputError(f"cannot write {path}: {parent} is not a directory") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OutputError(f"cannot write {path}: {parent} changed into a symlink while opening it") from None
            raise OutputError(f"cannot write {path}: {parent}: {_why(e)}") from None
        self.tmp: str | None = None
        self._fd: int | None = None
        try:
            self.check()
            self._create_tmp()
        except BaseException:
            self.close()
            raise

    # -- checks ------------------------------------------------------------------------------

    def check(self) -> None:
        """Refuse when the opened directory lies inside an analysed directory, the name is a
        directory, or the name is an analysed file."""
        fd = os.dup(self.dir_fd)
        try:
            for _ in range(_MAX_DEPTH):
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) in self._forbidden_dirs:
                    raise OutputError(f"refusing to write {self.path} inside the analysed directory")
                up = os.open("..", _DIR_FLAGS, dir_fd=fd)
                ust = os.fstat(up)
                os.close(fd)
                fd = up
                if (ust.st_dev, ust.st_ino) == (st.st_dev, st.st_ino):
                    break  # the root
        finally:
            os.close(fd)
        try:
            st = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {self.path}: it is a directory")
        if (st.st_dev, st.st_ino) in self._forbidden_files:
            raise OutputError(f"refusing to overwrite the analysed file {self.path}")

    def _create_tmp(self) -> None:
        name = f".{self.name[:100]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(name, flags, 0o666, dir_fd=self.dir_fd)
        except OSError as e:
            raise OutputError(f"cannot write {self.path}: {_why(e)}") from None
        self.tmp = name

    # -- writing -----------------------------------------------------------------------------

    def write_with(self, write: Callable[[IO[bytes]], object]) -> None:
        """Call ``write(binary file)`` on the temporary file, then rename it into place."""
        if self._fd is None or self.tmp is None:
            raise OutputError(f"cannot write {self.path}: already written or discarded")
        fd, self._fd = self._fd, None
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
            self.check()
            os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            self.tmp = None
        except OSError as e:
            self.discard()
            raise OutputError(f"cannot write {self.path}: {_why(e)}") from None
        except BaseException:
            self.discard()
            raise
        finally:
            self.close()

    def write_text(self, text: str) -> None:
        data = text.encode("utf-8", errors="backslashreplace")
        self.write_with(lambda f: f.write(data))

    def discard(self) -> None:
        """Remove the temporary file (nothing was written at the name)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.tmp is not None:
            try:
                os.unlink(self.tmp, dir_fd=self.dir_fd)
            except OSError:
                pass
            self.tmp = None

    def close(self) -> None:
        if self.tmp is not None:
            self.discard()
        if getattr(self, "dir_fd", None) is not None:
            os.close(self.dir_fd)
            self.dir_fd = None  # type: ignore[assignment]

    def __enter__(self) -> SafeOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
