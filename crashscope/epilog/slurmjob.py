"""What the epilog knows about the job: its environment, ``scontrol show job``, ``sacct``.

Formats (``/work/shared/reference/slurm.md`` §3-§5, from SchedMD/slurm
``src/plugins/prep/script/prep_script_slurmd.c``, ``src/scontrol/info_job.c``,
``src/sacct/*.c``; https://slurm.schedmd.com/prolog_epilog.html):

* epilog environment: ``SLURM_JOB_ID``, ``SLURM_JOB_UID``/``GID``/``USER``, ``SLURMD_NODENAME``,
  ``SLURM_JOB_NODELIST``, ``SLURM_JOB_EXIT_CODE`` (a raw wait status: ``256`` = exit 1,
  ``9`` = SIGKILL), ``SLURM_JOB_EXIT_CODE2`` (``exit:signal``), ``SLURM_JOB_DERIVED_EC``
  (raw), ``SLURM_JOB_WORK_DIR``, ``SLURM_JOB_STDOUT``/``STDERR`` (may still hold ``%j``...),
  ``SLURM_JOB_START_TIME``/``END_TIME`` (epoch seconds), ``SLURM_SCRIPT_CONTEXT``
  (``epilog_slurmd`` / ``epilog_slurmctld``).
* ``scontrol show job -o ID``: ``Key=Value`` tokens; a value may contain spaces, so a new
  token starts only at `` Key=`` (``AllocNode:Sid``, ``CPUs/Task`` are keys). Measured on
  22.05 during the epilog: ``JobState=COMPLETING``; ``Reason=NonZeroExitCode`` /
  ``Reason=TimeLimit``; a preemption shows only as ``PreemptTime=<time>`` with
  ``Reason=None`` and ``ExitCode=0:15``.
* ``sacct -X -n -P -o State,ExitCode,DerivedExitCode -j ID``: ``|``-separated, ``State``
  such as ``FAILED``, ``TIMEOUT``, ``PREEMPTED``, ``CANCELLED by 1000``.
* Output file name patterns (sbatch(1) "filename pattern"): ``%%``, ``%A`` array master id,
  ``%a`` array index, ``%J`` jobid.stepid, ``%j`` jobid, ``%N`` first node, ``%n`` node index,
  ``%s`` step id, ``%t`` task id, ``%u`` user name, ``%x`` job name; a number between ``%``
  and the letter zero-pads (``%5j``).

External tools are run with argv lists, absolute paths and timeouts (no PATH in an epilog).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Mapping

TOOL_DIRS = ("/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/opt/slurm/bin", "/sbin")
MAX_TOOL_OUTPUT = 4 << 20
_TOKEN = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")
_PATTERN = re.compile(r"%(\d{0,2})([%AaJjNnstux])")


def find_tool(name: str, dirs: tuple[str, ...] = TOOL_DIRS) -> str | None:
    """An absolute path to ``name`` from fixed directories (the epilog has no PATH)."""
    extra = os.environ.get("CRASHSCOPE_TOOL_DIR")  # a site's Slurm prefix (set by the wrapper)
    for d in ((extra,) if extra else ()) + dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def run_tool(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> tuple[int | None, str, str | None]:
    """(exit status, stdout text cut at 4 MiB, error) of an external tool; never raises."""
    if timeout <= 0:
        return None, "", "no time left"
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=dict(env) if env is not None else None, close_fds=True)
    except subprocess.TimeoutExpired:
        return None, "", f"{os.path.basename(argv[0])} timed out after {timeout:.1f} s"
    except OSError as e:
        return None, "", f"{os.path.basename(argv[0])}: {e.strerror or e}"
    return p.returncode, p.stdout[:MAX_TOOL_OUTPUT].decode("utf-8", "replace"), None


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o`` text -> {key: value}; values may hold spaces."""
    line = " ".join(text.split("\n")).strip()
    out: dict[str, str] = {}
    marks = list(_TOKEN.finditer(line))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def decode_wait_status(raw: str | None) -> tuple[int | None, int | None]:
    """A raw wait status (``SLURM_JOB_EXIT_CODE``) -> (exit code, signal)."""
    try:
        v = int(str(raw).strip())
    except (TypeError, ValueError):
        return None, None
    return (v >> 8) & 0xFF, v & 0x7F


def parse_pair(text: str | None) -> tuple[int | None, int | None]:
    """``1:0`` (exit:signal) -> (1, 0)."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


@dataclass
class JobInfo:
    job_id: str
    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    node: str | None = None  # this node (SLURMD_NODENAME); None on the controller
    nodes: list[str] = field(default_factory=list)
    name: str | None = None
    work_dir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    start: int | None = None  # epoch seconds
    end: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    derived_exit: int | None = None
    derived_signal: int | None = None
    state: str | None = None  # final state from sacct when it has one, else scontrol's
    reason: str | None = None
    preempt_time: str | None = None
    outcome: str = "unknown"  # failed | time_limit | preempted | cancelled | success | unknown
    notes: list[str] = field(default_factory=list)
    scontrol: dict[str, str] = field(default_factory=dict)
    batch_host: str | None = None  # the fields as read (for the epilog's log)

    @property
    def failed(self) -> bool:
        return self.outcome != "success"

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in ("job_id", "user", "uid", "gid", "nodes", "name", "work_dir", "stdout", "stderr",
                                              "start", "end", "exit_code", "signal", "derived_exit", "derived_signal",
                                              "state", "reason", "preempt_time", "outcome")}


def expand_pattern(pattern: str, job: JobInfo, array_job: str | None = None, array_task: str | None = None) -> str:
    """A Slurm output file name pattern with the job's values (sbatch(1))."""

    def sub(m: re.Match[str]) -> str:
        width, letter = m.group(1), m.group(2)
        if letter == "%":
            return "%"
        value = {
            "j": job.job_id, "J": job.job_id, "A": array_job or job.job_id, "a": array_task or "4294967294",
            "N": (job.nodes[0] if job.nodes else (job.node or "")), "n": "0", "s": "batch", "t": "0",
            "u": job.user or "", "x": job.name or "",
        }[letter]
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(sub, pattern)


def local_epoch(text: str) -> int | None:
    """``%FT%T`` in this host's local time (scontrol's times) -> epoch seconds."""
    import time

    try:
        return int(time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        return None


def job_from_env(env: Mapping[str, str]) -> JobInfo:
    from crashscope.hostlist import expand_hosts as expand_hostlist

    job = JobInfo(job_id=(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip())
    job.user = env.get("SLURM_JOB_USER") or None
    job.uid = _int(env.get("SLURM_JOB_UID") or env.get("SLURM_UID"))
    job.gid = _int(env.get("SLURM_JOB_GID"))
    job.node = env.get("SLURMD_NODENAME") or None
    job.name = env.get("SLURM_JOB_NAME") or None
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        job.nodes = list(expand_hostlist(nodelist))[:100_000] if nodelist else []
    except Exception:  # noqa: BLE001 - a bad hostlist must not stop the epilog
        job.notes.append(f"cannot expand the node list {nodelist[:200]!r}")
    job.work_dir = env.get("SLURM_JOB_WORK_DIR") or None
    job.stdout = env.get("SLURM_JOB_STDOUT") or None
    job.stderr = env.get("SLURM_JOB_STDERR") or None
    job.start = _int(env.get("SLURM_JOB_START_TIME"))
    job.end = _int(env.get("SLURM_JOB_END_TIME"))
    e2, s2 = parse_pair(env.get("SLURM_JOB_EXIT_CODE2"))
    e1, s1 = decode_wait_status(env.get("SLURM_JOB_EXIT_CODE"))
    job.exit_code, job.signal = (e2, s2) if e2 is not None else (e1, s1)
    job.derived_exit, job.derived_signal = decode_wait_status(env.get("SLURM_JOB_DERIVED_EC"))
    return job


def add_scontrol(job: JobInfo, fields: dict[str, str]) -> None:
    """Fill what the environment lacked from ``scontrol show job`` fields."""
    from crashscope.hostlist import expand_hosts as expand_hostlist

    def val(key: str) -> str | None:
        v = fields.get(key)
        return None if v in (None, "", "(null)", "None", "N/A", "Unknown") else v

    job.state = val("JobState") or job.state
    job.reason = val("Reason") or job.reason
    job.preempt_time = val("PreemptTime")
    job.name = job.name or val("JobName")
    job.work_dir = job.work_dir or val("WorkDir")
    job.stdout = job.stdout or val("StdOut")
    job.stderr = job.stderr or val("StdErr")
    if job.exit_code is None:
        job.exit_code, job.signal = parse_pair(fields.get("ExitCode"))
    if job.derived_exit is None:
        job.derived_exit, job.derived_signal = parse_pair(fields.get("DerivedExitCode"))
    job.batch_host = job.batch_host or val("BatchHost")
    for attr, key in (("start", "StartTime"), ("end", "EndTime")):
        if getattr(job, attr) is None and val(key):
            setattr(job, attr, local_epoch(fields[key]))
    if job.exit_code in (None, 0) and not job.signal:
        # during the epilog the environment can still say 0:0 where scontrol knows 0:15 (scancel)
        e, sg = parse_pair(fields.get("ExitCode"))
        if e or sg:
            job.exit_code, job.signal = e, sg
    m = re.fullmatch(r"([^()\s]+)\((\d+)\)", fields.get("UserId", ""))
    if m:
        job.user = job.user or m.group(1)
        job.uid = job.uid if job.uid is not None else int(m.group(2))
    m = re.fullmatch(r"([^()\s]+)\((\d+)\)", fields.get("GroupId", ""))
    if m and job.gid is None:
        job.gid = int(m.group(2))
    if not job.nodes and val("NodeList"):
        try:
            job.nodes = list(expand_hostlist(fields["NodeList"]))[:100_000]
        except Exception:  # noqa: BLE001
            pass


def add_sacct(job: JobInfo, text: str) -> None:
    """The first ``State|ExitCode|DerivedExitCode`` row of ``sacct -X -n -P``; a final state only."""
    for row in text.splitlines():
        cols = row.split("|")
        if len(cols) < 2 or not cols[0].strip():
            continue
        state = cols[0].strip()
        if state.split()[0] not in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED", "SUSPENDED"):
            job.state = state
        if job.exit_code is None:
            job.exit_code, job.signal = parse_pair(cols[1])
        break


def decide(job: JobInfo) -> str:
    """The job's outcome from everything known; a missing answer counts as a failure only
    when some signal says so (an epilog that cannot tell does not invent a crash)."""
    state = (job.state or "").split()[0] if job.state else ""
    reason = job.reason or ""
    if state == "TIMEOUT" or reason == "TimeLimit":
        return "time_limit"
    if state == "PREEMPTED" or job.preempt_time:
        return "preempted"
    if state in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE") or reason in ("NonZeroExitCode", "NodeDown", "OutOfMemory"):
        return "failed"
    if state == "CANCELLED":
        return "cancelled"
    if job.signal:
        return "cancelled" if job.signal in (9, 15) else "failed"
    if job.exit_code:
        return "failed"
    if job.derived_exit or job.derived_signal:
        return "failed"
    if job.exit_code == 0 or state == "COMPLETED":
        return "success"
    return "unknown"


def job_info(env: Mapping[str, str], deadline_s: float) -> JobInfo:
    """Everything the epilog can learn within ``deadline_s`` seconds; never raises."""
    import time

    t0 = time.monotonic()
    job = job_from_env(env)
    left = lambda: deadline_s - (time.monotonic() - t0)  # noqa: E731
    tool_env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    if env.get("SLURM_CONF"):
        tool_env["SLURM_CONF"] = env["SLURM_CONF"]
    if job.job_id.isdigit() or re.fullmatch(r"[0-9_+]+", job.job_id or ""):
        scontrol = find_tool("scontrol")
        if scontrol:
            rc, out, err = run_tool([scontrol, "show", "job", "-o", job.job_id], min(5.0, left() / 3), tool_env)
            if rc == 0 and out.strip():
                job.scontrol = parse_scontrol(out)
                add_scontrol(job, job.scontrol)
            else:
                job.notes.append(f"scontrol show job gave nothing ({err or f'exit {rc}'})")
        else:
            job.notes.append("no scontrol found: the job state comes from the environment alone")
        sacct = find_tool("sacct")
        if sacct:
            rc, out, err = run_tool([sacct, "-X", "-n", "-P", "-o", "State,ExitCode,DerivedExitCode", "-j", job.job_id], min(5.0, left() / 3), tool_env)
            if rc == 0:
                add_sacct(job, out)
    else:
        job.notes.append(f"no usable SLURM_JOB_ID in the environment ({job.job_id[:40]!r})")
    for attr in ("stdout", "stderr"):
        v = getattr(job, attr)
        if v:
            v = expand_pattern(v, job, env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID"))
            if not os.path.isabs(v) and job.work_dir:
                v = os.path.join(job.work_dir, v)  # sbatch -o relative to the working directory
            setattr(job, attr, v if os.path.isabs(v) and v != "/dev/null" else None)
    if job.signal == 15 and job.exit_code == 0 and job.reason in (None, "None") and not job.preempt_time and not job.state:
        job.notes.append("ExitCode 0:15 without PreemptTime: cancelled (scancel or a signal)")
    if job.stdout is None and job.work_dir:
        job.stdout = os.path.join(job.work_dir, f"slurm-{job.job_id}.out")  # sbatch's default
    job.outcome = decide(job)
    return job


_JOB_ID = re.compile(r"\d{1,12}(?:[_+]\d{1,12})?")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def safe_job_id(v: str | None) -> bool:
    """A job id usable as a directory name (digits, an array or het suffix)."""
    return bool(v and _JOB_ID.fullmatch(v))


def safe_node_name(v: str | None) -> bool:
    return bool(v and _NODE_NAME.fullmatch(v) and ".." not in v)


def job_after_the_fact(job_id: str, timeout: float, env: Mapping[str, str] | None = None) -> JobInfo:
    """A finished job from ``scontrol show job`` (while the controller remembers it) and
    ``sacct`` (``SLURM_TIME_FORMAT=%s`` makes its times epoch seconds), for ``collect``/``shard``."""
    import time

    from crashscope.hostlist import expand_hosts

    t0 = time.monotonic()
    base = dict(env or os.environ)
    job = job_info({"SLURM_JOB_ID": job_id, **({"SLURM_CONF": base["SLURM_CONF"]} if base.get("SLURM_CONF") else {})}, timeout / 2)
    sacct = find_tool("sacct")
    if sacct:
        tool_env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "SLURM_TIME_FORMAT": "%s"}
        if base.get("SLURM_CONF"):
            tool_env["SLURM_CONF"] = base["SLURM_CONF"]
        rc, out, _ = run_tool([sacct, "-X", "-n", "-P", "-j", job_id, "-o", "User,UID,GID,JobName,NodeList,Start,End,State,ExitCode,WorkDir"],
                              max(0.5, timeout - (time.monotonic() - t0)), tool_env)
        row = next((r.split("|") for r in out.splitlines() if r.count("|") >= 9), None) if rc == 0 else None
        if row:
            user, uid, gid, name, nodes, start, end, state, exit_code, work_dir = row[:10]
            job.user = job.user or user or None
            job.uid = job.uid if job.uid is not None else _int(uid)
            job.gid = job.gid if job.gid is not None else _int(gid)
            job.name = job.name or name or None
            job.nodes = job.nodes or (expand_hosts(nodes) if nodes and nodes != "None assigned" else [])
            job.start = job.start or _int(start)
            job.end = job.end or _int(end)
            job.work_dir = job.work_dir or work_dir or None
            if state and state.split()[0] not in ("RUNNING", "PENDING", "COMPLETING"):
                job.state = state
            if job.exit_code is None:
                job.exit_code, job.signal = parse_pair(exit_code)
            job.outcome = decide(job)
    return job
