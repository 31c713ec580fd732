"""The merge: a job's shards + its stdout/stderr -> report.json, report.md (, report.html).

Run by the controller epilog (it waits for the nodes' shards within its budget), by the
last node to write its shard, or later by ``crashscope collect JOBID``; an ``O_EXCL`` lock
file in the job's spool directory lets only one of them merge.

The job side (its stdout/stderr and the ``log_dirs`` entries without ``%n``) is read as the
job user and becomes the ``_job.shard`` beside the nodes' shards, with the scheduler's view
(outcome from scontrol/env/sacct) as a ``sacct --json``-shaped record (a ``job_state``
event in the sacct source's JSON form, crashscope/sources/sacct.py); then
``crashscope.pipeline.analyze(<spool>/<jobid>)`` runs the one pipeline on it, so
``crashscope analyze <spool>/<jobid>`` later gives the same report.

Reports go to ``<reports_dir>/<jobid>/`` (directory 0700, files 0600, owned by the job user,
written through descriptors: temporary file ``O_EXCL|O_NOFOLLOW``, ``fchown``, rename) and,
with ``copy_to_workdir``, to ``<work_dir>/crashscope-<jobid>/`` written by a child running as
the job user (a link planted there is replaced by the rename, never written through).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashscope.epilog.slurmjob import JobInfo

LOCK = ".merge.lock"
JOB_SHARD = "_job"
_STATE_OF = {"time_limit": "TIMEOUT", "preempted": "PREEMPTED", "failed": "FAILED", "cancelled": "CANCELLED", "success": "COMPLETED"}


@dataclass
class MergeResult:
    report: Any
    written: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def expand_log_dir(pattern: str, job: JobInfo, node: str | None) -> str:
    """A ``log_dirs`` entry: ``%j`` job id, ``%u`` user, ``%x`` job name, ``%n`` node,
    ``%w`` working directory, ``%%`` a percent sign."""
    import re

    values = {"j": job.job_id, "u": job.user or "", "x": job.name or "", "n": node or "", "w": job.work_dir or "", "%": "%"}
    return re.sub(r"%([juxnw%])", lambda m: values[m.group(1)], pattern)


def log_roots(config: Any, job: JobInfo, node: str | None) -> list[dict[str, Any]]:
    """The ``log_dirs`` roots for a node (entries with ``%n``) or for the job (the others)."""
    roots = []
    for pattern in getattr(config, "log_dirs", ()) or ():
        per_node = "%n" in str(pattern)
        if per_node != (node is not None):
            continue
        path = expand_log_dir(str(pattern), job, node)
        if path and os.path.isabs(path):
            roots.append({"path": path, "prefix": f"{node}/logs/" if node else "job/logs/", "host": node})
    return roots


def scheduler_record(job: JobInfo) -> dict[str, Any] | None:
    """The scheduler's view as a ``sacct --json`` object (data_parser v0.0.40 field shapes)."""
    state = _STATE_OF.get(job.outcome)
    if state is None:
        return None
    if job.state and job.state.split()[0] in ("NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"):
        state = job.state.split()[0]
    from crashscope.hostlist import compress

    num = lambda v: {"set": v is not None, "infinite": False, "number": v or 0}  # noqa: E731
    rec: dict[str, Any] = {
        "job_id": int(job.job_id) if job.job_id.isdigit() else job.job_id,
        "name": job.name or "",
        "state": {"current": [state], "reason": job.reason or "None"},
        "exit_code": {"status": ["SIGNALED" if job.signal else ("ERROR" if job.exit_code else "SUCCESS")],
                      "return_code": num(job.exit_code), "signal": {"id": num(job.signal or None), "name": ""}},
        "time": {"start": job.start or 0, "end": job.end or 0},
        "nodes": compress(job.nodes) if job.nodes else "",
        "user": job.user or "",
    }
    return {"meta": {"plugin": {"data_parser": "crashscope-epilog"}, "slurm": {"source": "scontrol show job + epilog environment"}},
            "jobs": [rec], "warnings": [], "errors": []}


def wait_for_shards(job_dir: Path, nodes: list[str], deadline: float) -> list[str]:
    """Wait (until ``deadline``, monotonic) for every node's shard; the nodes still missing.
    Each round lists the spool once and looks only at the shards not seen yet (a round over
    2,048 nodes was 2,048 stat calls, five times a second)."""
    missing = list(nodes)
    while True:
        try:
            names = set(os.listdir(job_dir))
        except OSError:
            names = set()
        missing = [n for n in missing if f"{n}.shard" not in names or not (job_dir / f"{n}.shard" / "shard.json").is_file()]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.2)


def take_lock(job_dir: Path, hold_s: float) -> bool:
    """The merge lock (``O_EXCL``), held for ``hold_s`` seconds at most: a holder killed at
    its budget leaves a lock that expires, and the next merger takes it over."""
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = job_dir / LOCK
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.write(fd, f"{os.getpid()} {time.time() + hold_s:.0f}\n".encode())
            os.close(fd)
            return True
        except FileExistsError:
            try:
                with open(path, "rb") as fh:
                    expires = float(fh.read(100).split()[1])
            except (OSError, ValueError, IndexError):
                expires = os.lstat(path).st_mtime + hold_s
            if time.time() > expires:
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            return False
    return False


def release_lock(job_dir: Path) -> None:
    try:
        os.unlink(job_dir / LOCK)
    except OSError:
        pass


def job_roots(job: JobInfo, config: Any) -> list[dict[str, Any]]:
    roots = [{"path": p, "prefix": "job/", "host": None} for p in dict.fromkeys(x for x in (job.stdout, job.stderr) if x)]
    return roots + log_roots(config, job, None)


def start_job_reader(job: JobInfo, config: Any, timeout: float):  # type: ignore[no-untyped-def]
    from crashscope.epilog.userread import Reader

    return Reader(job_roots(job, config), job.uid, job.gid, job.user, timeout)


def build_job_shard(job: JobInfo, config: Any, job_dir: Path, timeout: float, reader: Any = None) -> list[str]:
    """``_job.shard``: stdout/stderr and job log dirs (as the user) + the scheduler record."""
    import polars as pl

    from crashscope.ingest import ingest
    from crashscope.schema import EVENT_SCHEMA
    from crashscope.shards import file_records, write_shard
    from crashscope.sources.base import ParseOptions

    from crashscope.shards import shard_dirs, shard_meta

    t0 = time.monotonic()
    if any(shard_meta(d).get("job_files") for d in shard_dirs(job_dir) if d.name != f"{JOB_SHARD}.shard"):
        # the batch host's shard has the job's stdout/stderr already: no reader of our own
        if reader is not None and reader.proc is not None:
            reader.proc.kill()
            reader.proc.communicate()
        ev, files, warnings = pl.DataFrame(schema=EVENT_SCHEMA), [], []
    else:
        reader = reader or start_job_reader(job, config, max(1.0, timeout * 0.8))
        ev, files, warnings = reader.result()
    frames = [ev] if ev.height else []
    rec = scheduler_record(job)
    if rec is not None:
        tmp = Path(tempfile.mkdtemp(prefix="crashscope-job-"))
        try:
            (tmp / "scheduler.sacct.json").write_text(json.dumps(rec))
            res = ingest(tmp, ParseOptions(), workers=1)
            if res.events.height:
                frames.append(res.events.with_columns(pl.concat_str([pl.lit("job/"), pl.col("file")]).alias("file")))
            for r in res.files:
                r.file = "job/" + r.file
            files += file_records(res.files)
        except OSError as e:
            warnings.append(f"scheduler record not written: {e.strerror}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=EVENT_SCHEMA)
    write_shard(job_dir, JOB_SHARD, events, node=None, job_id=job.job_id, files=files, warnings=warnings,
                seconds=time.monotonic() - t0)
    return warnings


def render_all(report: Any) -> dict[str, str]:
    from crashscope.report.render import RENDERERS

    out = {"report.json": RENDERERS["json"](report), "report.md": RENDERERS["markdown"](report)}
    html = RENDERERS.get("html")
    if html is not None:
        try:
            out["report.html"] = html(report)
        except Exception:  # noqa: BLE001 - the HTML view is optional; JSON and Markdown stand
            pass
    return out


def write_private(directory: Path, texts: dict[str, str], uid: int | None, gid: int | None) -> list[str]:
    """Write ``texts`` into ``directory`` (0700) as 0600 files owned by ``uid:gid``."""
    from crashscope.report.output import SafeOutput

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    as_root = os.geteuid() == 0 and uid is not None
    owner = uid if uid is not None else -1
    st = os.lstat(directory)
    if as_root and st.st_uid != uid:
        os.chown(directory, owner, gid if gid is not None else -1, follow_symlinks=False)
    os.chmod(directory, 0o700, follow_symlinks=False) if hasattr(os, "lchmod") else os.chmod(directory, 0o700)
    written = []
    for name, text in texts.items():
        data = text.encode("utf-8", "backslashreplace")

        def write(f: Any, data: bytes = data) -> None:
            os.fchmod(f.fileno(), 0o600)
            if as_root:
                os.fchown(f.fileno(), owner, gid if gid is not None else -1)
            f.write(data)

        with SafeOutput(directory / name) as out:
            out.write_with(write)
        written.append(str(directory / name))
    return written


def write_workdir_as_user(job: JobInfo, texts: dict[str, str], timeout: float) -> list[str]:
    """``<work_dir>/crashscope-<jobid>/`` written by a child running as the job user."""
    import subprocess
    import sys

    from crashscope.epilog.userread import CHILD_ENV, _groups

    if not job.work_dir or not os.path.isabs(job.work_dir):
        return ["no working directory known: no copy there"]
    ids: dict[str, Any] = {}
    if os.geteuid() == 0:
        if job.uid is None or job.gid is None or job.uid == 0:
            return ["no non-root job user known: nothing written to the working directory"]
        ids = {"uid": job.uid, "gid": job.gid, "groups": _groups(job.user, job.gid)}
    req = json.dumps({"dir": os.path.join(job.work_dir, f"crashscope-{job.job_id}"), "texts": texts, **ids}).encode()
    try:
        p = subprocess.run([sys.executable, "-I", "-m", "crashscope.epilog.userwrite"], input=req, capture_output=True,
                           timeout=max(0.5, timeout), cwd="/", env=dict(CHILD_ENV), close_fds=True)
    except (OSError, subprocess.SubprocessError) as e:
        return [f"copy to the working directory failed: {type(e).__name__}"]
    msg = p.stdout.decode("utf-8", "replace").strip()[-500:]
    return [] if p.returncode == 0 else [f"copy to the working directory failed: {msg or p.returncode}"]


def merge(job: JobInfo, config: Any, timeout: float, *, force: bool = False, extra_warnings: list[str] | None = None,
          reader: Any = None) -> MergeResult | None:
    """Merge the job's shards into its reports; None when another process holds the merge."""
    from crashscope.pipeline import analyze
    from crashscope.epilog.secrets import scrub_report
    from crashscope.shards import shard_dirs

    t0 = time.monotonic()
    left = lambda: timeout - (time.monotonic() - t0)  # noqa: E731
    job_dir = Path(config.spool_dir) / job.job_id
    if not force and not take_lock(job_dir, hold_s=timeout):
        return None
    warnings = list(extra_warnings or [])
    warnings += build_job_shard(job, config, job_dir, left() * 0.35, reader)
    have = {d.name[: -len(".shard")] for d in shard_dirs(job_dir)}
    missing = [n for n in job.nodes if n not in have]
    if missing:
        warnings.append(f"no shard from {len(missing)} node(s): {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} (their epilog did not finish; `crashscope collect {job.job_id} --srun` builds them)")
    report, _tl, _res = analyze(job_dir, tz=config.tz or None, budget_s=max(1.0, left() * 0.7))
    report.job = dict(report.job or {})
    report.job["id"] = job.job_id
    report.job["nodes"] = sorted(set(report.job.get("nodes") or []) | set(job.nodes))
    report.job["slurm"] = {k: v for k, v in job.to_json().items() if k in ("outcome", "state", "reason", "exit_code", "signal", "preempt_time", "user", "name", "start", "end")}
    report.warnings = list(dict.fromkeys(list(report.warnings) + warnings + job.notes))
    if missing:
        report.missing = list(report.missing) + [f"no shard from node(s) {', '.join(missing[:8])}"]
    _fleet(report, config)  # fills report.history: before the views are rendered
    unredacted = report  # tickets redact on their own, and fingerprint the real culprit
    report = scrub_report(report, full=bool(getattr(config, "redact", False)))
    texts = render_all(report)
    result = MergeResult(report=report, warnings=[])
    try:
        result.written += write_private(Path(config.reports_dir) / job.job_id, texts, job.uid, job.gid)
    except Exception as e:  # noqa: BLE001 - a full disk or a bad reports_dir: say so, go on
        result.warnings.append(f"reports not written to {config.reports_dir}: {type(e).__name__}: {e}")
    if config.copy_to_workdir:
        result.warnings += write_workdir_as_user(job, texts, max(0.5, left()))
    _ticket(unredacted, config)  # last: a slow ticket service only costs what is left of the budget
    result.seconds = time.monotonic() - t0
    if not force:
        release_lock(job_dir)
    return result


def _fleet(report: Any, config: Any) -> None:
    try:
        from crashscope import fleet

        fleet.record(report, config)
    except Exception as e:  # noqa: BLE001 - the fleet history is optional; never breaks the epilog
        report.warnings = [*report.warnings, f"fleet history not updated: {type(e).__name__}: {str(e)[:200]}"]


def _ticket(report: Any, config: Any) -> None:
    if not (getattr(config, "ticket", None) or {}).get("to"):
        return
    try:
        from crashscope.tickets import file_ticket

        file_ticket(report, config)  # a Config: short timeouts and one retry, within the budget
    except Exception:  # noqa: BLE001 - a ticket system that is down never breaks the epilog
        pass
