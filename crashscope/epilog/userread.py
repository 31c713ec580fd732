"""Reading the job user's files with the job user's privileges.

The epilog runs as root; everything the user controls (rank logs, NCCL files, the job's
stdout/stderr, its working directory) is read by a separate, fresh process
(``python -I -m crashscope.epilog.userread``, started as root so it can load the
interpreter wherever it is installed) that imports what it needs, then calls
:func:`drop_privileges` (``setgroups`` to the user's groups, ``setresgid``, ``setresuid``,
checked: regaining root must fail) before it reads the request's paths. A hard link to a
root-only file or a job directory that is a symlink to a directory the user cannot read
then fails with EACCES exactly as it would for the user; and since the process changed
credentials without exec'ing afterwards, it is not dumpable, so the user cannot ptrace it. On top of that the reader refuses a
file with more than one link that the user does not own, and a root that is a symbolic
link to a directory the user does not own.

The child is isolated (``-I``: no PYTHONPATH, no user site; cwd ``/``; a fixed environment). Request on stdin (JSON), answer on stdout: 8 bytes
of big-endian length, that many bytes of JSON meta (files, warnings), then the events as
parquet. The parent treats the answer as untrusted data (bounded, parsed, never executed).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MAX_ANSWER_BYTES = 1 << 30
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/", "POLARS_MAX_THREADS": "2"}


def link_check(uid: int):  # type: ignore[no-untyped-def]
    """The ``skip`` function for ``ingest``: refuse another owner's multiply-linked file."""

    def skip(ref: Any) -> str | None:
        try:
            st = os.lstat(ref.abs_path)
        except OSError as e:
            return f"cannot inspect: {e.strerror}"
        if st.st_nlink > 1 and st.st_uid != uid:
            return f"a hard link to a file of uid {st.st_uid}, not the job user's: not read"
        return None

    return skip


def root_check(path: str, uid: int) -> str | None:
    """Why a root is refused (a link to a directory another user owns), or None."""
    try:
        lst = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if os.path.islink(path):
        try:
            st = os.stat(path)
        except OSError as e:
            return f"{path}: a symbolic link whose target cannot be read ({e.strerror})"
        if st.st_uid != uid and uid != 0:
            return f"{path}: a symbolic link to a directory of uid {st.st_uid}, not the job user's: not read"
    elif lst.st_nlink > 1 and not os.path.isdir(path) and lst.st_uid != uid and uid != 0:
        return f"{path}: a hard link to a file of uid {lst.st_uid}, not the job user's: not read"
    return None


def drop_privileges(uid: int, gid: int, groups: list[int]) -> None:
    """Become ``uid:gid`` with ``groups`` for good (real, effective and saved ids)."""
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise SystemExit("privileges could be regained: refusing to read")
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise SystemExit("privileges not dropped: refusing to read")


def _preload() -> None:
    """Import everything the reading needs while the interpreter's files are still readable
    (an interpreter under /root is not readable by the job user), by reading an empty
    directory of our own once."""
    import bz2, gzip, io, lzma, tarfile, tempfile, zipfile  # noqa: E401, F401

    import polars as pl  # noqa: F401

    from crashscope.ingest import ingest
    from crashscope.report.output import SafeOutput  # noqa: F401
    from crashscope.sources.base import ParseOptions

    d = tempfile.mkdtemp(prefix="crashscope-preload-")
    try:
        with open(os.path.join(d, "x.log"), "w") as fh:
            fh.write("[rank0]: RuntimeError: warm-up\n")
        ingest(d, ParseOptions(), workers=1)
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def _child_main() -> None:
    """Started as root: preload, drop to the job user, ingest each requested root, answer on stdout."""
    req = json.loads(sys.stdin.buffer.read(1 << 20))
    _preload()
    if req.get("uid") is not None and os.geteuid() == 0:
        drop_privileges(int(req["uid"]), int(req["gid"]), [int(g) for g in req.get("groups") or [req["gid"]]])
    import io

    import polars as pl

    from crashscope.ingest import Budget, ingest
    from crashscope.schema import EVENT_SCHEMA
    from crashscope.shards import file_records, to_storage
    from crashscope.sources.base import ParseOptions

    uid = os.getuid()
    budget = Budget(float(req.get("budget_s") or 10), int(req.get("max_memory") or (2 << 30)))
    frames, files, warnings = [], [], []
    for r in req.get("roots", []):
        path, prefix, host = r["path"], r.get("prefix") or "", r.get("host")
        why = root_check(path, uid)
        if why:
            warnings.append(why)
            continue
        if not os.path.exists(path):
            warnings.append(f"{path}: does not exist")
            continue
        res = ingest(Path(path), ParseOptions(), budget=budget, skip=link_check(uid), workers=1)
        ev = res.events
        if ev.height:
            ev = ev.with_columns(pl.concat_str([pl.lit(prefix), pl.col("file")]).alias("file"))
            if host:
                ev = ev.with_columns(pl.col("host").fill_null(host))
            frames.append(ev)
        for rec in res.files:
            rec.file = prefix + rec.file
        files.extend(file_records(res.files))
        warnings.extend(f"{prefix}{w}" for w in res.warnings)
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    buf = io.BytesIO()
    to_storage(events).write_parquet(buf, compression="lz4")
    meta = json.dumps({"files": files, "warnings": warnings[:2000], "uid": uid}, default=str).encode()
    out = sys.stdout.buffer
    out.write(struct.pack(">Q", len(meta)) + meta + buf.getvalue())
    out.flush()


def _groups(user: str | None, gid: int) -> list[int]:
    if not user:
        return [gid]
    try:
        return os.getgrouplist(user, gid)
    except (OSError, KeyError):
        return [gid]


class Reader:
    """A reader child started now (it reads while the caller does other work); :meth:`result`
    collects ``(events, file records, warnings)``.

    As root with no job uid, or when the job uid is root's, nothing is read (user files are
    never read with root's privileges). Not root: the child keeps this process's uid."""

    def __init__(self, roots: list[dict[str, Any]], uid: int | None, gid: int | None, user: str | None, timeout_s: float,
                 max_memory: int = 2 << 30):
        self.uid, self.timeout_s, self.started = uid, timeout_s, time.monotonic()
        self.proc: subprocess.Popen[bytes] | None = None
        self.refused: list[str] = []
        if not roots:
            return
        ids: dict[str, Any] = {}
        if os.geteuid() == 0:
            if uid is None or gid is None:
                self.refused = ["no job uid/gid known: the job's own files were not read (never read as root)"]
                return
            if uid == 0 and not os.environ.get("CRASHSCOPE_ALLOW_ROOT_JOBS"):
                self.refused = ["the job ran as root: its files were not read (set CRASHSCOPE_ALLOW_ROOT_JOBS=1 to allow)"]
                return
            ids = {"uid": uid, "gid": gid, "groups": _groups(user, gid)}
        request = json.dumps({"roots": roots, "budget_s": max(1.0, timeout_s - 2.5), "max_memory": max_memory, **ids}).encode()
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-m", "crashscope.epilog.userread"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", env=dict(CHILD_ENV), close_fds=True)
            assert self.proc.stdin is not None
            self.proc.stdin.write(request)
            self.proc.stdin.close()
            self.proc.stdin = None  # communicate() must not flush it again
        except (OSError, subprocess.SubprocessError) as e:
            self.refused = [f"cannot start the reader as uid {uid}: {e}"]
            if self.proc is not None:
                self.proc.kill()
            self.proc = None

    def result(self):  # type: ignore[no-untyped-def]
        import polars as pl

        from crashscope.schema import EVENT_SCHEMA
        from crashscope.shards import from_storage

        empty = pl.DataFrame(schema=EVENT_SCHEMA)
        p = self.proc
        if p is None:
            return empty, [], list(self.refused)
        left = self.timeout_s - (time.monotonic() - self.started)
        try:
            out, err = p.communicate(timeout=max(0.5, left))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return empty, [], [f"reading the job's files took more than {self.timeout_s:.1f} s: stopped"]
        if p.returncode != 0 or len(out) < 8:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err else []
            return empty, [], [f"the reader (uid {self.uid}) failed with exit {p.returncode}: {(tail[0] if tail else '')[:300]}"]
        if len(out) > MAX_ANSWER_BYTES:
            return empty, [], ["the reader's answer is too large: dropped"]
        (n,) = struct.unpack(">Q", out[:8])
        try:
            meta = json.loads(out[8:8 + n])
            import io

            events, dropped = from_storage(pl.read_parquet(io.BytesIO(out[8 + n:])))
        except Exception as e:  # noqa: BLE001 - the answer is untrusted data
            return empty, [], [f"the reader's answer is unreadable: {type(e).__name__}"]
        files = [f for f in meta.get("files", []) if isinstance(f, dict)] if isinstance(meta, dict) else []
        warnings = [w for w in meta.get("warnings", []) if isinstance(w, str)] if isinstance(meta, dict) else []
        if dropped:
            warnings.append(f"{dropped} event(s) from the reader dropped (unknown values)")
        return events, files, warnings


def read_as_user(roots: list[dict[str, Any]], uid: int | None, gid: int | None, user: str | None, timeout_s: float,
                 max_memory: int = 2 << 30):  # type: ignore[no-untyped-def]
    """(events, file records, warnings) of ``roots`` read by a child running as ``uid:gid``."""
    return Reader(roots, uid, gid, user, timeout_s, max_memory).result()


if __name__ == "__main__":
    _child_main()
