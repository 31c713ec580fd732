"""A per-user cache of pure data built from the package's own files (the parsed catalogs and
the shipped rules), so a small job does not parse ~100 YAML files on every run.

Parsing the catalogs and the rules cost every process ~0.2 s CPU (of ~1.2 s for a 12-file
job); unpickling the result costs ~0.01 s. An entry is one file
``$XDG_CACHE_HOME/crashscope/<name>.pickle`` (default ``~/.cache/crashscope``;
``$CRASHSCOPE_CACHE_DIR`` overrides the folder, and ``off``, ``0`` or an empty value turns
the cache off) holding a header and the pickled object. The header carries the key: a hash
of the inputs (every YAML file's bytes) *and* of the source of the code that builds the
object, the Python version and the package version, so any change to the data or to the
loader rebuilds the entry. One file per name (:func:`entry_name`: the kind and the folder
the data comes from): a new key overwrites the old one.

The cache is an optimisation only. Every failure falls back to building from the YAML,
silently: a folder that cannot be created or written (a read-only home, the Slurm epilog
as another user), a file that is not ours, a truncated or corrupted entry (its payload
hash is checked before unpickling), an entry that names a class it should not. Safety:

* the folder is created 0700 and used only if it is a real directory (not a link) owned by
  this user and not writable by group or others; the same for the entry file, which is
  opened ``O_NOFOLLOW`` and ``fstat``-checked (a regular file, ours, not group/other
  writable);
* writes go to a fresh ``O_EXCL`` temporary file in that folder, then ``os.replace``: a
  reader never sees half an entry; nothing is ever written anywhere else (never into an
  analysed log directory);
* unpickling goes through an unpickler that resolves only the classes the caller lists
  (plus the builtins pickle needs without a lookup), so even a forged entry cannot name an
  arbitrary callable.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any, Iterable

ENV_DIR = "CRASHSCOPE_CACHE_DIR"
_OFF = {"", "0", "off", "no", "none", "false"}
_MAGIC = b"crashscope-datacache\x001\n"
_PROTOCOL = 5
_HASH = 32  # sha256 digest bytes


def cache_dir() -> Path | None:
    """The cache folder, or ``None`` when the cache is turned off (not yet created)."""
    env = os.environ.get(ENV_DIR)
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not base or not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        home = os.path.expanduser("~")
        if not home or home == "~" or not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "crashscope"


def fingerprint(parts: Iterable[bytes | str]) -> bytes:
    """A key over ``parts`` (each length-prefixed, so no two lists collide), the Python
    version and the package version."""
    from crashscope import __version__

    h = hashlib.sha256()
    for p in (sys.version, __version__, str(_PROTOCOL), *parts):
        b = p.encode("utf-8", "surrogateescape") if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.digest()


def entry_name(kind: str, where: str) -> str:
    """``kind`` plus a short hash of ``where`` (the folder the data comes from): each install
    or checkout keeps its own entry, so two of them at different versions used in turn do
    not overwrite each other's on every run."""
    return f"{kind}-{hashlib.sha256(where.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"


def source_of(*modules: str) -> list[bytes]:
    """The source bytes of these modules (what a cached object's builder is made of); a
    module whose file cannot be read contributes its name and ``__file__`` only."""
    out: list[bytes] = []
    for name in modules:
        mod = sys.modules.get(name)
        if mod is None:
            __import__(name)
            mod = sys.modules[name]
        path = getattr(mod, "__file__", None) or ""
        try:
            with open(path, "rb") as fh:
                out.append(fh.read())
        except OSError:
            out.append(f"{name}:{path}".encode())
    return out


def _owned_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _ensure_dir(path: Path) -> bool:
    if _owned_dir(path):
        return True
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return _owned_dir(path)


class _Restricted(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: frozenset[tuple[str, str]]):
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a cache entry")
        return super().find_class(module, name)


def _path(name: str) -> Path | None:
    d = cache_dir()
    if d is None or not name or not all(c.isalnum() or c in "-_" for c in name):
        return None
    return d / f"{name}.pickle"


def get(name: str, key: bytes, allowed: Iterable[tuple[str, str]]) -> Any | None:
    """The object stored under ``name`` if its key is ``key``, else ``None`` (also on any
    error: a missing, foreign, corrupted or stale entry)."""
    path = _path(name)
    if path is None or not _owned_dir(path.parent):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(st.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    head = len(_MAGIC)
    if len(data) < head + 2 * _HASH or data[:head] != _MAGIC or data[head:head + _HASH] != key:
        return None
    digest, payload = data[head + _HASH:head + 2 * _HASH], data[head + 2 * _HASH:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        return _Restricted(payload, frozenset(allowed)).load()
    except Exception:  # a corrupted or forged entry: rebuild
        return None


def put(name: str, key: bytes, obj: Any) -> bool:
    """Store ``obj`` under ``name`` with ``key``; ``False`` (and nothing written) when the
    cache is off or its folder is not usable."""
    path = _path(name)
    if path is None or not _ensure_dir(path.parent):
        return False
    try:
        payload = pickle.dumps(obj, protocol=_PROTOCOL)
    except Exception:
        return False
    data = _MAGIC + key + hashlib.sha256(payload).digest() + payload
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
