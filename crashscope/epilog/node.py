"""One node's shard: what only this node has, parsed here.

* kernel log over the job's window: ``journalctl -k -o short-iso-precise --since @S --until @E``
  (systemd.time(7): ``@`` = Unix seconds; journalctl(1) output modes), else
  ``dmesg --time-format iso`` (util-linux dmesg(1): ``2026-12-01T11:40:37,682284+00:00 msg``,
  wall-clock from the boot time) cut to the window here;
* ``nvidia-smi -q`` where the binary exists (read by the nvidia_smi source);
* versions as crashscope's collector JSON (crashscope/sources/versions.py): kernel release,
  NVIDIA driver (``/proc/driver/nvidia/version``), boot time (``/proc/stat`` btime), boot id,
  the node's time zone (for its local-time logs);
* the node's rank logs and NCCL files: the ``log_dirs`` entries with ``%n`` (config), read as
  the job user (:mod:`crashscope.epilog.userread`).

Node-made files go to a private temporary directory and are ingested as root (they are the
output of root's tools, never a user's file); the shard lands in ``<spool>/<jobid>/<node>.shard``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from crashscope.epilog.slurmjob import JobInfo, find_tool, run_tool

WINDOW_MARGIN_S = 120
MAX_KERNEL_LINES = 200_000
_DMESG_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)[,.](\d+)([+-]\d\d:?\d\d)\s")


def kernel_log(job: JobInfo, timeout: float) -> tuple[str, str, list[str]]:
    """(file name, text, notes) of the kernel log over the job's window."""
    notes: list[str] = []
    since = (job.start - WINDOW_MARGIN_S) if job.start else None
    until = (job.end + WINDOW_MARGIN_S) if job.end else None
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "SYSTEMD_PAGER": "", "TZ": "UTC"}
    jctl = find_tool("journalctl")
    if jctl:
        argv = [jctl, "-k", "-q", "--no-pager", "-o", "short-iso-precise", "-n", str(MAX_KERNEL_LINES)]
        if since:
            argv += ["--since", f"@{since}"]
        if until:
            argv += ["--until", f"@{until}"]
        rc, out, err = run_tool(argv, timeout / 2, env)
        if rc == 0 and any(line[:1].isdigit() for line in out.splitlines()[:50]):
            return "kernel.journal.log", out, notes
        notes.append(f"journalctl -k gave no kernel lines ({err or f'exit {rc}'}); dmesg used")
    dmesg = find_tool("dmesg")
    if not dmesg:
        return "", "", notes + ["neither journalctl nor dmesg found: no kernel log"]
    rc, out, err = run_tool([dmesg, "--time-format", "iso"], timeout / 2, env)
    if rc != 0:
        return "", "", notes + [f"dmesg failed ({err or f'exit {rc}'}): no kernel log"]
    keep = []
    for line in out.splitlines()[-MAX_KERNEL_LINES:]:
        m = _DMESG_ISO.match(line)
        if m and (since or until):
            try:
                t = datetime.fromisoformat(f"{m.group(1)}.{m.group(2)[:6]}{m.group(3)}").timestamp()
            except ValueError:
                continue
            if (since and t < since) or (until and t > until):
                continue
        keep.append(line)
    return "kernel.dmesg.log", "\n".join(keep) + ("\n" if keep else ""), notes


def _read_small(path: str, limit: int = 65536) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def node_timezone() -> str | None:
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and "/" in tz and not tz.startswith("/"):
        return tz
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    name = _read_small("/etc/timezone").strip()
    return name or None


def versions(job: JobInfo, node: str) -> dict[str, Any]:
    info: dict[str, Any] = {"hostname": node, "job_id": job.job_id,
                            "collected_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "kernel": os.uname().release}
    boot_id = _read_small("/proc/sys/kernel/random/boot_id").strip()
    if boot_id:
        info["boot_id"] = boot_id
    m = re.search(r"^btime (\d+)", _read_small("/proc/stat", 1 << 20), re.M)
    if m:
        info["btime"] = int(m.group(1))
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", _read_small("/proc/driver/nvidia/version"))
    if m:
        info["driver"] = m.group(1)
    tz = node_timezone()
    if tz:
        info["timezone"] = tz
    return info


def collect_node_files(job: JobInfo, node: str, timeout: float, out_dir: Path) -> list[str]:
    """Write this node's own data under ``out_dir/<node>/``; returns notes."""
    notes: list[str] = []
    d = out_dir / node
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    t0 = time.monotonic()
    name, text, kn = kernel_log(job, timeout * 0.5)
    notes += kn
    if name and text.strip():
        (d / name).write_text(text, errors="backslashreplace")
    elif name:
        notes.append("no kernel messages in the job's window")
    smi = find_tool("nvidia-smi")
    if smi:
        rc, out, err = run_tool([smi, "-q"], min(15.0, timeout - (time.monotonic() - t0)), {"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        if rc == 0 and out:
            (d / "nvidia-smi-q.txt").write_text(out)
        else:
            notes.append(f"nvidia-smi -q failed ({err or f'exit {rc}'})")
    (d / "versions.json").write_text(json.dumps(versions(job, node)))
    return notes


def build_shard(job: JobInfo, node: str, config: Any, timeout: float, log_roots: list[dict[str, Any]],
                job_files: bool = False) -> Path:
    """Collect, parse and write ``<spool>/<jobid>/<node>.shard``. ``job_files``: ``log_roots``
    include the job's stdout/stderr (this node ran the batch script), so the merge needs no
    reader of its own."""
    import polars as pl

    from crashscope.epilog.userread import Reader
    from crashscope.ingest import Budget, ingest
    from crashscope.schema import EVENT_SCHEMA
    from crashscope.shards import file_records, write_shard
    from crashscope.sources.base import ParseOptions

    t0 = time.monotonic()
    left = lambda: timeout - (time.monotonic() - t0)  # noqa: E731
    warnings: list[str] = []
    frames = []
    files: list[dict[str, Any]] = []
    reader = Reader(log_roots, job.uid, job.gid, job.user, max(1.0, timeout * 0.8))  # reads while root's side runs
    tmp = None
    for base in (None, "/dev/shm"):
        try:
            tmp = Path(tempfile.mkdtemp(prefix="crashscope-node-", dir=base))
            break
        except OSError as e:
            warnings.append(f"cannot make a temporary directory{' in ' + base if base else ''}: {e.strerror}")
    try:
        if tmp is not None:
            try:
                warnings += collect_node_files(job, node, left() * 0.4, tmp)
            except OSError as e:  # a full disk: parse what was written
                warnings.append(f"collecting node files: {e.strerror or e}")
            res = ingest(tmp, ParseOptions(), budget=Budget(max(1.0, left() * 0.3)), workers=1)
            if res.events.height:
                frames.append(res.events.with_columns(pl.col("host").fill_null(node)))
            files += file_records(res.files)
            warnings += res.warnings
        if log_roots:
            ev, fr, w = reader.result()
            if ev.height:
                frames.append(ev)
            files += fr
            warnings += w
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    if job.job_id:
        events = events.with_columns(pl.col("job_id").fill_null(job.job_id))
    return write_shard(Path(config.spool_dir) / job.job_id, node, events, node=node, job_id=job.job_id, files=files,
                       warnings=warnings + job.notes, seconds=time.monotonic() - t0,
                       job_files=job_files and any(str(f.get("file", "")).startswith("job/") for f in files))
