"""Slurm lines: job output banners, srun messages, slurmctld/slurmd logs, scontrol, jobcomp.

Sample lines (texts checked against SchedMD/slurm, 20.11 .. master 2026-08)::

    slurmstepd: error: *** STEP 123456.0 ON node003 CANCELLED AT 2026-09-14T08:19:59 DUE TO TIME LIMIT ***
        entity STEP, id 123456.0 (job 123456, step 0), node003 = the node the step ran on,
        time = node-local %FT%T (no zone), reason TIME LIMIT        (slurmstepd/req.c)
    srun: error: node002: tasks 8-15: Killed
        hostlist node002, task ranges 8-15, strsignal(9)            (srun/launch.c)
    [2026-09-14T08:14:24.550] error: Nodes node003 not responding, setting DOWN
        slurmctld.log, LogTimeFormat=iso8601_ms (local time, no zone)   (ping_nodes.c)

Daemon log lines are read in every LogTimeFormat (iso8601[_ms] local, rfc5424[_ms] and
rfc3339 with zone -> exact, ``short`` ``Sep 14 08:12:44`` year-less), with the slurmstepd
``[123456.0] `` prefix, and as ``LogFileFormat=json`` objects
``{"log": "...", "stream": "stderr", "time": "..."}``.

Events and attrs keys:

* job_cancel (slurmstepd banner; host = banner node; time = the banner's node-local
  ``CANCELLED AT`` stamp, or in slurmd.log the line's own stamp, the same instant with ms):
  entity (job|step), id, job_id, step (None for JOB), node, reason (TIME LIMIT,
  PREEMPTION, NODE FAILURE, JOB REQUEUE, SIGNAL, TASK FAILURE, FAILED, UNCORRECTABLE
  MEMORY ERROR, CANCELLED (plain scancel banner), JOB NOT RUNNING, JOB NOT ENDING WITH
  SIGNALS (``STEPD TERMINATED``)), signal (SIGTERM.. for ``DUE to SIGNAL``), details (the
  ``*** REASON: ... ***`` follow-up line, when present).
* host_oom: count, step, job_id, hosts, tasks; memory_limit_hit=True for the
  ``hit memory limit at least once`` info line; source (cgroup|srun).
* process_exit (srun task exit): hosts (expanded), tasks (ints), exitcode | signal
  (SIGKILL..) + core_dumped.
* job_step: action (abort_wait|abort_timeout|terminate|force_terminate|launch_failed),
  step, seconds, task, error.
* node_state: state (not_responding|down|up|drain|failed), node, nodes, reason, job_id.
* job_state: state (Slurm base state, e.g. FAILED, TIMEOUT, CANCELLED, PREEMPTED,
  REQUEUED, OUT_OF_MEMORY), job_id, exit_code "exit:signal", signal, uid, preemptor,
  action; from ``scontrol show job`` / jobcomp also reason, nodes (expanded), nodelist,
  start, end (ISO UTC), failed_node, restarts, user, name, format (scontrol|jobcomp).
* log_error: level (error|fatal), text; any other error/fatal line of Slurm's.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Sequence

import regex

from crashscope.hostlist import expand, expand_ints
from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import MONTHS, LineSource, feed_guarded, ParseContext, iso_to_ns, plausible_ns, split_prefix
from crashscope.sources.base import lazy_compile

# strsignal() texts (glibc) -> signal names; srun and slurmstepd print the text.
SIGNAL_TEXT = {
    "Hangup": "SIGHUP", "Interrupt": "SIGINT", "Quit": "SIGQUIT", "Illegal instruction": "SIGILL",
    "Trace/breakpoint trap": "SIGTRAP", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE", "Killed": "SIGKILL", "User defined signal 1": "SIGUSR1",
    "Segmentation fault": "SIGSEGV", "User defined signal 2": "SIGUSR2", "Broken pipe": "SIGPIPE",
    "Alarm clock": "SIGALRM", "Terminated": "SIGTERM", "CPU time limit exceeded": "SIGXCPU",
    "File size limit exceeded": "SIGXFSZ",
}
SIGNAL_NUM = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
              8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
              14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}

FAIL_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
                         "DEADLINE", "CANCELLED", "REQUEUED", "REVOKED"})

# --------------------------------------------------------------------------------------
# Prefilter: literal-heavy alternatives, valid for Rust regex and Python regex.
_PREFILTER_PARTS = (
    r"\*\*\* (?:JOB|STEP|REASON)",  # slurmstepd banners
    r"oom[-_]kill event",
    r"hit memory limit at least once",
    r"srun: (?:error|fatal|Job step aborted|Terminating|forcing job termination|launch/)",
    r"slurmstepd(?:-[\w.-]+)?: (?:error|fatal): ",
    r"Nodes \S+ not responding",
    r"returned to service",
    r"reason set to: ",
    r"on failed node ",
    r"_job_complete: JobId=",
    r"Time limit exhausted for JobId=",
    r"Requeuing JobId=",
    r"REQUEST_KILL_JOB JobId=",
    r"preempted JobId=",
    r"^\[[^\]]{8,40}\] (?:\[[^\]]{1,40}\] )?(?:error|fatal): ",  # daemon error lines
    r'^\{.*"log":"(?:\[[^\]]{1,40}\] )?(?:error|fatal): ',  # LogFileFormat=json
    r"^JobId=\d+ ",  # scontrol show job first line / -o; jobcomp/filetxt
    r"^   (?:UserId|JobState|Requeue|RunTime|StartTime|NodeList|BatchHost|NumNodes|Socks/Node)=",  # scontrol block
)
PREFILTER = "|".join(f"(?:{p})" for p in _PREFILTER_PARTS)

# --------------------------------------------------------------------------------------
# Line envelopes
_DAEMON = lazy_compile(
    r"""^\[(?P<ts>[^\]]{8,40})\]\ 
        (?:\[(?P<stepid>\d+(?:_\d+|\+\d+)?\.(?:\d+|batch|extern|interactive)(?:\+\d+)?(?:\ stepmgr)?)\]\ )?
        (?P<rest>.*)$""",
    regex.VERBOSE,
)
# slurmctld/slurmd/slurmstepd through syslog or journald (syslog stamp or ISO), host printed
_SYSLOG = lazy_compile(
    r"""^(?P<ts>[A-Z][a-z]{2}\ [\ \d]\d\ \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\ 
        (?P<host>\S+)\ (?:slurmctld|slurmd|slurmstepd)(?:\[\d+\])?:\ 
        (?:\[(?P<stepid>\d[\w.+]*(?:\ stepmgr)?)\]\ )?(?P<rest>.*)$""",
    regex.VERBOSE,
)
# LogTimeFormat shapes only (iso8601[_ms], rfc5424[_ms], rfc3339, short): a Python logger's
# "[2026-09-14 08:12:44,123]" is not a Slurm daemon line.
_SLURM_TS = lazy_compile(r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3,6})?(?:Z|[+-]\d\d:\d\d)?|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?)$")
_SHORT_TS = lazy_compile(r"(?P<mon>[A-Z][a-z]{2})\ +(?P<d>\d{1,2})\ (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d+))?$")
_PROG = lazy_compile(r"^(?P<prog>slurmstepd(?:-[\w.-]+)?|srun|slurmd|slurmctld|sbatch|salloc):\ ")
_LEVEL = lazy_compile(r"^(?P<lvl>fatal|error|warning|debug\d?|verbose):\ +")
_SCHED = lazy_compile(r"^sched(?:/\w+)?:\ ")

# --------------------------------------------------------------------------------------
# Messages
_BANNER = lazy_compile(
    r"""\*\*\*\ (?P<entity>JOB|STEP)\ (?P<id>\d[\w.+]*)\ 
        (?:ON\ (?P<node>\S+)\ 
           (?:CANCELLED\ AT\ (?P<t>\S+)(?:\ DUE\ (?:TO|to)\ (?P<why>[^*]+?))?
             |(?P<failed>FAILED)\ \(non-zero\ exit\ code\ or\ other\ failure\ mode\)
             |(?P<ue>UNCORRECTABLE\ MEMORY\ ERROR)\ AT\ (?P<t2>\S+))
          |STEPD\ TERMINATED\ ON\ (?P<node2>\S+)\ AT\ (?P<t3>\S+)\ DUE\ TO\ (?P<why2>[^*]+?))
        \ \*\*\*""",
    regex.VERBOSE,
)
_REASON = lazy_compile(r"\*\*\* REASON: (?P<details>.*?) \*\*\*")
# 23.02+: "oom_kill event(s) in StepId=1.0. Some of the step tasks..."; 20.11-22.05:
# "oom-kill event(s) in StepId=1.0[ cgroup]. Some of your processes..."; older "step 1.0".
_OOM = lazy_compile(
    r"""Detected\ (?P<n>\d+)\ oom[-_]kill\ event(?:s|\(s\))?\ in\ 
        (?:StepId=|step\ )?(?P<step>\d+(?:_\d+|\+\d+)?\.\w+(?:\+\d+)?)""",
    regex.VERBOSE,
)
_MEMLIMIT = lazy_compile(r"(?:StepId=|step )(?P<step>\d+(?:_\d+|\+\d+)?\.\w+(?:\+\d+)?) hit memory limit at least once")
_TASK_EXIT = lazy_compile(
    r"""^(?P<hosts>[^\s:]+):\ (?:task|tasks)\ (?P<tasks>[\d,\-\[\]]+):\ 
        (?:Exited\ with\ exit\ code\ (?P<code>\d+)
          |(?P<oom>Out\ Of\ Memory)
          |(?P<sig>[A-Za-z][\w /]*?)(?P<core>\ \(core\ dumped\))?)\s*$""",
    regex.VERBOSE,
)
_ABORT_WAIT = lazy_compile(r"^Job step aborted(?:: Waiting up to (?P<s>\d+) seconds for job step to finish)?")
_ABORT_TIMEOUT = lazy_compile(r"^Timed out waiting for job step to complete")
_TERMINATING = lazy_compile(r"^(?:[\w/]+: )?(?:_?\w+: )?Terminating (?:job step )?(?:StepId=)?(?P<step>\d+(?:_\d+|\+\d+)?\.\w+(?:\+\d+)?)")
_FORCE = lazy_compile(r"^forcing job termination")
_LAUNCH_FAILED = lazy_compile(r"^task (?P<task>\d+) launch failed: (?P<err>.*)$")
_NODE_FAILURE = lazy_compile(r"^Node failure on (?P<nodes>\S+)")

_JOBREF = r"JobId=(?P<job>\d+(?:_\d+|_\*|\+\d+)?)(?:\((?P<raw>\d+)\))?"
_NOT_RESPONDING = lazy_compile(r"^Nodes (?P<nodes>\S+) not responding(?P<down>, setting DOWN)?")
_RETURNED = lazy_compile(r"^(?:\w+: )?node (?P<node>\S+) returned to service")
_REASON_SET = lazy_compile(r"^update_node: node (?P<node>\S+) reason set to: (?P<reason>.*)$")
_KILL_FAILED_NODE = lazy_compile(r"^Killing " + _JOBREF + r" on failed node (?P<node>\S+)")
_JOB_COMPLETE = lazy_compile(
    r"^_job_complete: " + _JOBREF + r" (?:WEXITSTATUS (?P<ec>\d+)|WTERMSIG (?P<sig>\d+)|(?P<oom>OOM failure)|(?P<done>done))"
)
_TIME_LIMIT = lazy_compile(r"^Time limit exhausted for " + _JOBREF)
_REQUEUE = lazy_compile(r"^Requeuing " + _JOBREF)
_KILL_RPC = lazy_compile(r"^(?:_slurm_rpc_kill_job: )?REQUEST_KILL_JOB JobId=(?P<job>\S+) uid (?P<uid>\d+)(?P<routed> routed to \S+)?")
_PREEMPTED = lazy_compile(
    r"""^(?:\w+:\ )?preempted\ """ + _JOBREF + r"""\ 
        (?:has\ been\ (?P<act>killed|requeued)(?:\ to\ reclaim\ resources\ for\ JobId=(?P<by>\d+(?:_\d+|\+\d+)?)(?:\(\d+\))?)?
          |had\ to\ be\ (?P<act2>killed)
          |(?P<fail>kill\ failure|could\ not\ be\ requeued).*)""",
    regex.VERBOSE,
)

# scontrol / jobcomp key=value: a key starts after whitespace with an upper-case letter.
_KV = lazy_compile(r"(?:^|(?<=\s))(?P<k>[A-Z][A-Za-z0-9_/:]*)=")
_SCONTROL_CONT = lazy_compile(r"^\s{2,}[A-Z][A-Za-z0-9_/:]*=")
_EMPTY = frozenset({"", "Unknown", "None", "N/A", "(null)", "unknown"})


def _split_kv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    ms = list(_KV.finditer(text))
    for i, m in enumerate(ms):
        end = ms[i + 1].start() if i + 1 < len(ms) else len(text)
        out.setdefault(m.group("k"), text[m.end():end].strip())
    return out


def _job_id_of(stepid: str | None) -> str | None:
    return stepid.split(".", 1)[0] if stepid else None


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


class SlurmSource(LineSource):
    name = "slurm"
    description = "Slurm job output banners, srun lines, slurmctld/slurmd logs, scontrol show job, jobcomp"
    filename_hints = ("slurm-*.out", "slurm-*.err", "slurmctld*.log*", "slurmd*.log*", "*jobcomp*.log*", "scontrol*")

    prefilter = PREFILTER

    # -- sniff ---------------------------------------------------------------------------
    _S_BANNER = lazy_compile(r"\*\*\* (?:JOB|STEP) \d[\w.+]* (?:ON|STEPD) ")
    _S_DAEMON = lazy_compile(
        r"^\[(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?|[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d)\] "
        r"(?:\[\d[\w.+ ]*\] )?.*(?:JobId=|StepId=|slurmctld|slurmd|_slurm_rpc_|sched: |Nodes \S+ not responding|node \S+ returned)",
        regex.MULTILINE,
    )
    _S_JSON = lazy_compile(r'^\{"log":".*","stream":"std(?:err|out)","time":"', regex.MULTILINE)
    _S_SCONTROL = lazy_compile(r"^JobId=\d+ (?:ArrayJobId=\d+ ArrayTaskId=\S+ )?(?:HetJobId=\d+ HetJobOffset=\d+ )?JobName=", regex.MULTILINE)
    _S_JOBCOMP = lazy_compile(r"^JobId=\d+ UserId=\S+ GroupId=\S+ Name=.* JobState=\S+ ", regex.MULTILINE)
    _S_SRUN = lazy_compile(r"^srun: (?:error: \S+: tasks? [\d,-]+: |Job step aborted|error: Node failure on |forcing job termination)", regex.MULTILINE)

    def sniff(self, head: str, name: str) -> float:
        if self._S_SCONTROL.search(head) or self._S_JOBCOMP.search(head):
            return 0.95
        n_daemon = len(self._S_DAEMON.findall(head[:65536]))
        if n_daemon >= 3 or self._S_JSON.search(head) and ("JobId=" in head or "slurm" in head):
            return 0.95
        if n_daemon:
            return 0.8
        if self._S_BANNER.search(head):
            return 0.85
        if self._S_SRUN.search(head):
            return 0.7
        if "slurmstepd: error: " in head:
            return 0.5
        return 0.0

    # -- parse ---------------------------------------------------------------------------
    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        st = _State(ctx)
        feed_guarded(ctx, lines, st.line, st.flush_all)


class _State:
    """Per-file parser state: a banner waiting for its REASON line, an scontrol block."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.banner: dict[str, Any] | None = None  # kwargs for ctx.emit, pending REASON
        self.block: dict[str, Any] | None = None  # scontrol show job (multi-line)
        self.cur_host: str | None = None  # host printed by a syslog envelope
        self.full = ""

    def emit(self, *args: Any, **kw: Any) -> None:
        if kw.get("host") is None:
            kw["host"] = self.cur_host
        self.ctx.emit(*args, **kw)

    # envelope ---------------------------------------------------------------------------
    def _ts(self, ts: str) -> tuple[int | None, TimeQuality]:
        ts = ts.strip()
        if ts[:1].isdigit():
            t, q = iso_to_ns(ts, self.ctx)
            return t, q
        m = _SHORT_TS.match(ts)
        if m and m.group("mon") in MONTHS:
            frac = m.group("f") or ""
            ns = int((frac + "000000000")[:9]) if frac else 0
            t = self.ctx.yearless_ns(MONTHS[m.group("mon")], int(m.group("d")), int(m.group("h")), int(m.group("m")), int(m.group("s")), ns)
            if t is not None and plausible_ns(t):
                q = self.ctx.local_quality() if self.ctx.options.year else TimeQuality.ESTIMATED
                return t, q
        return None, TimeQuality.MISSING

    def line(self, n: int, raw: str) -> None:
        ctx = self.ctx
        _, text = split_prefix(raw.rstrip("\r\n"))
        text = text.rstrip()
        time: int | None = None
        quality: TimeQuality = TimeQuality.MISSING
        stepid: str | None = None
        daemon = False
        self.cur_host = None

        if text.startswith("{") and '"log"' in text:
            try:
                obj = json.loads(text)
                msg = obj.get("log") if isinstance(obj, dict) else None
            except ValueError:
                msg = None
            if not isinstance(msg, str):
                ctx.warn("slurm: bad LogFileFormat=json line", n, raw)
                return
            if isinstance(obj.get("time"), str):
                time, quality = self._ts(obj["time"])
            daemon = True
            m = regex.match(r"^\[(?P<s>\d[^\]]*)\] ", msg)
            if m:
                stepid = m.group("s").replace(" stepmgr", "")
                msg = msg[m.end():]
            text = msg
        else:
            m = _DAEMON.match(text)
            if m and _SLURM_TS.match(m.group("ts")):
                t, q = self._ts(m.group("ts"))
                if t is not None:
                    time, quality, daemon = t, q, True
                    stepid = m.group("stepid").replace(" stepmgr", "") if m.group("stepid") else None
                    text = m.group("rest")
            else:
                m = _SYSLOG.match(text)
                if m:
                    time, quality = self._ts(m.group("ts"))
                    daemon = True
                    self.cur_host = m.group("host")
                    stepid = m.group("stepid").replace(" stepmgr", "") if m.group("stepid") else None
                    text = m.group("rest")

        # scontrol block continuation / start
        if not daemon:
            if self.block is not None and _SCONTROL_CONT.match(text) and n - self.block["last"] <= 12:
                self.block["kv"].update({k: v for k, v in _split_kv(text.strip()).items() if k not in self.block["kv"]})
                self.block["last"] = n
                return
            if text.startswith("JobId="):
                self._flush_block()
                self._flush_banner()
                kv = _split_kv(text)
                if "JobId" not in kv:
                    ctx.warn("slurm: JobId line without fields", n, raw)
                    return
                self.block = {"line": n, "last": n, "kv": kv, "raw": text}
                return
        self._flush_block()

        self.full = full = text  # the message as shown: the line without launcher prefix and timestamp
        prog = None
        pm = _PROG.match(text)
        if pm:
            prog = pm.group("prog")
            text = text[pm.end():]
        level = None
        while True:
            lm = _LEVEL.match(text)
            if lm:
                level = level or lm.group("lvl")
                text = text[lm.end():]
                continue
            sm = _SCHED.match(text)
            if sm:
                text = text[sm.end():]
                continue
            break

        # REASON follow-up belongs to the banner just before it
        rm = _REASON.search(text)
        if rm and not _BANNER.search(text):
            if self.banner is not None and n - self.banner["line"] <= 3:
                self.banner["attrs"]["details"] = rm.group("details")
                self.banner["message"] += " / " + rm.group("details")
            else:
                self._flush_banner()
                self.emit(Kind.LOG_ERROR, n, text, severity=Severity.ERROR, time=time, time_quality=quality,
                         job_id=_job_id_of(stepid), attrs={"level": "error", "text": rm.group("details")})
            return
        self._flush_banner()

        bm = _BANNER.search(text)
        if bm:
            self._banner(n, text, bm, time, quality)
            return
        if self._oom(n, text, time, quality, stepid):
            return
        if prog == "srun" and self._srun(n, text, level):
            return
        if daemon and self._daemon(n, text, level, time, quality, stepid):
            return
        if "*** JOB " in text or "*** STEP " in text:
            self.ctx.warn("slurm: unrecognised or truncated slurmstepd banner", n, raw)
        if level in ("error", "fatal") and (daemon or prog):
            attrs = {"level": level, "text": text}
            if prog:
                attrs["program"] = prog
            self.emit(Kind.LOG_ERROR, n, full, severity=Severity.CRITICAL if level == "fatal" else Severity.ERROR,
                     time=time, time_quality=quality, job_id=_job_id_of(stepid), attrs=attrs)
            return
        # a line the prefilter caught but nothing recognised: not ours (e.g. quoted text)

    def flush_all(self) -> None:
        self._flush_banner()
        self._flush_block()

    # banners ----------------------------------------------------------------------------
    def _banner(self, n: int, text: str, m: regex.Match, time: int | None, quality: TimeQuality) -> None:
        entity = m.group("entity").lower()
        ident = m.group("id")
        node = m.group("node") or m.group("node2")
        why = (m.group("why") or m.group("why2") or "").strip()
        signal = None
        if m.group("failed"):
            reason = "FAILED"
        elif m.group("ue"):
            reason = "UNCORRECTABLE MEMORY ERROR"
        elif m.group("node2"):
            reason = why.upper()
        elif not why:
            reason = "CANCELLED"
        else:
            up = why.upper()
            if up.startswith("SIGNAL"):
                reason = "SIGNAL"
                sig_text = why[len("SIGNAL"):].strip()
                signal = SIGNAL_TEXT.get(sig_text, sig_text or None)
            elif up.startswith("NODE FAILURE"):
                reason = "NODE FAILURE"
            else:
                reason = up
        stamp = m.group("t") or m.group("t2") or m.group("t3")
        if stamp and time is None:
            # In job output the banner stamp is the only time. In slurmd.log the line's own
            # stamp is the same instant with ms (and maybe a zone), so it wins. A stamp that
            # SLURM_TIME_FORMAT reshaped does not parse and leaves time None.
            t, q = iso_to_ns(stamp, self.ctx)
            if t is not None:
                time, quality = t, q
        if entity == "job":
            job_id, step = ident, None
        else:
            job_id, _, step = ident.partition(".")
            step = step or None
        attrs: dict[str, Any] = {"entity": entity, "id": ident, "job_id": job_id, "step": step, "node": node, "reason": reason}
        if signal:
            attrs["signal"] = signal
        sev = Severity.ERROR
        self.banner = dict(line=n, kind=Kind.JOB_CANCEL, message=self.full, severity=sev, time=time,
                           time_quality=quality, host=node, job_id=job_id, attrs=attrs)

    def _flush_banner(self) -> None:
        b = self.banner
        if b is None:
            return
        self.banner = None
        self.emit(b.pop("kind"), b.pop("line"), b.pop("message"), **b)

    # OOM ----------------------------------------------------------------------------------
    def _oom(self, n: int, text: str, time: int | None, quality: TimeQuality, stepid: str | None) -> bool:
        m = _OOM.search(text)
        if m:
            step = m.group("step")
            self.emit(Kind.HOST_OOM, n, self.full, severity=Severity.ERROR, time=time, time_quality=quality,
                          job_id=_job_id_of(step), attrs={"count": int(m.group("n")), "step": step,
                                                          "job_id": _job_id_of(step), "source": "cgroup"})
            return True
        m = _MEMLIMIT.search(text)
        if m:
            step = m.group("step")
            self.emit(Kind.HOST_OOM, n, self.full, severity=Severity.INFO, time=time, time_quality=quality,
                          job_id=_job_id_of(step), attrs={"count": 0, "step": step, "job_id": _job_id_of(step),
                                                          "memory_limit_hit": True, "source": "cgroup"})
            return True
        return False

    # srun -----------------------------------------------------------------------------------
    def _srun(self, n: int, text: str, level: str | None) -> bool:
        ctx = self.ctx
        m = _TASK_EXIT.match(text)
        if m:
            hosts, ok_h = expand(m.group("hosts"))
            tasks, ok_t = expand_ints(m.group("tasks"))
            if not (ok_h and ok_t):
                ctx.warn("slurm: bad hostlist or task list in srun exit line", n, text)
            attrs: dict[str, Any] = {"hosts": hosts, "tasks": tasks}
            host = hosts[0] if hosts else None
            if m.group("oom"):
                attrs["source"] = "srun"
                self.emit(Kind.HOST_OOM, n, self.full, severity=Severity.ERROR, host=host, attrs=attrs)
                return True
            if m.group("code") is not None:
                attrs["exitcode"] = int(m.group("code"))
            else:
                sig_text = m.group("sig").strip()
                attrs["signal"] = SIGNAL_TEXT.get(sig_text, sig_text)
                if m.group("core"):
                    attrs["core_dumped"] = True
            self.emit(Kind.PROCESS_EXIT, n, self.full, severity=Severity.ERROR, host=host, attrs=attrs)
            return True
        m = _NODE_FAILURE.match(text)
        if m:
            nodes, ok = expand(m.group("nodes"))
            if not ok:
                ctx.warn("slurm: bad hostlist", n, text)
            for node in nodes[:256]:
                self.emit(Kind.NODE_STATE, n, self.full, severity=Severity.ERROR, host=node,
                         attrs={"state": "failed", "node": node, "nodes": nodes, "reporter": "srun"})
            return True
        m = _ABORT_WAIT.match(text)
        if m:
            attrs = {"action": "abort_wait"}
            if m.group("s"):
                attrs["seconds"] = int(m.group("s"))
            self.emit(Kind.JOB_STEP, n, self.full, severity=Severity.WARNING, attrs=attrs)
            return True
        if _ABORT_TIMEOUT.match(text):
            self.emit(Kind.JOB_STEP, n, self.full, severity=Severity.ERROR, attrs={"action": "abort_timeout"})
            return True
        m = _TERMINATING.match(text)
        if m:
            step = m.group("step")
            self.emit(Kind.JOB_STEP, n, self.full, severity=Severity.WARNING, job_id=_job_id_of(step),
                     attrs={"action": "terminate", "step": step})
            return True
        if _FORCE.match(text):
            self.emit(Kind.JOB_STEP, n, self.full, severity=Severity.WARNING, attrs={"action": "force_terminate"})
            return True
        m = _LAUNCH_FAILED.match(text)
        if m:
            self.emit(Kind.JOB_STEP, n, self.full, severity=Severity.ERROR,
                     attrs={"action": "launch_failed", "task": int(m.group("task")), "error": m.group("err")})
            return True
        return False

    # slurmctld / slurmd ---------------------------------------------------------------------
    def _daemon(self, n: int, text: str, level: str | None, time: int | None, quality: TimeQuality,
                stepid: str | None) -> bool:
        ctx = self.ctx
        kw = dict(time=time, time_quality=quality)

        m = _NOT_RESPONDING.match(text)
        if m:
            nodes, ok = expand(m.group("nodes"))
            if not ok:
                ctx.warn("slurm: bad hostlist", n, text)
            state = "down" if m.group("down") else "not_responding"
            for node in nodes[:256]:
                self.emit(Kind.NODE_STATE, n, self.full, severity=Severity.ERROR, host=node,
                         attrs={"state": state, "node": node, "nodes": nodes}, **kw)
            return True
        m = _RETURNED.match(text)
        if m:
            node = m.group("node")
            self.emit(Kind.NODE_STATE, n, self.full, severity=Severity.INFO, host=node, attrs={"state": "up", "node": node}, **kw)
            return True
        m = _REASON_SET.match(text)
        if m:
            nodes, _ = expand(m.group("node"))
            for node in nodes[:256]:
                self.emit(Kind.NODE_STATE, n, self.full, severity=Severity.WARNING, host=node,
                         attrs={"state": "drain", "node": node, "reason": m.group("reason")}, **kw)
            return True
        m = _KILL_FAILED_NODE.match(text)
        if m:
            node, job = m.group("node"), m.group("job")
            self.emit(Kind.NODE_STATE, n, self.full, severity=Severity.ERROR, host=node, job_id=job,
                     attrs={"state": "failed", "node": node, "job_id": job}, **kw)
            return True
        m = _JOB_COMPLETE.match(text)
        if m:
            job = m.group("job")
            attrs: dict[str, Any] = {"job_id": job}
            sev = Severity.INFO
            if m.group("ec") is not None:
                ec = int(m.group("ec"))
                attrs.update(state="FAILED" if ec else "COMPLETED", exit_code=f"{ec}:0")
                sev = Severity.ERROR if ec else Severity.INFO
            elif m.group("sig") is not None:
                sig = int(m.group("sig"))
                attrs.update(state="FAILED", exit_code=f"0:{sig}", signal=SIGNAL_NUM.get(sig, str(sig)))
                sev = Severity.ERROR
            elif m.group("oom"):
                attrs.update(state="OUT_OF_MEMORY")
                sev = Severity.ERROR
            else:
                attrs.update(action="done")
            if m.group("raw"):
                attrs["job_id_raw"] = m.group("raw")
            self.emit(Kind.JOB_STATE, n, self.full, severity=sev, job_id=job, attrs=attrs, **kw)
            return True
        for rx, state, sev in ((_TIME_LIMIT, "TIMEOUT", Severity.ERROR), (_REQUEUE, "REQUEUED", Severity.WARNING)):
            m = rx.match(text)
            if m:
                job = m.group("job")
                self.emit(Kind.JOB_STATE, n, self.full, severity=sev, job_id=job, attrs={"state": state, "job_id": job}, **kw)
                return True
        m = _KILL_RPC.match(text)
        if m:
            job = m.group("job")
            attrs = {"state": "CANCELLED", "job_id": job, "uid": int(m.group("uid"))}
            if m.group("routed"):
                attrs["routed"] = True
            self.emit(Kind.JOB_STATE, n, self.full, severity=Severity.WARNING, job_id=job, attrs=attrs, **kw)
            return True
        m = _PREEMPTED.match(text)
        if m:
            job = m.group("job")
            attrs = {"state": "PREEMPTED", "job_id": job, "action": m.group("act") or m.group("act2") or "failed"}
            if m.group("by"):
                attrs["preemptor"] = m.group("by")
            self.emit(Kind.JOB_STATE, n, self.full, severity=Severity.ERROR, job_id=job, attrs=attrs, **kw)
            return True
        return False

    # scontrol show job / jobcomp ------------------------------------------------------------
    def _flush_block(self) -> None:
        b = self.block
        if b is None:
            return
        self.block = None
        ctx = self.ctx
        kv: dict[str, str] = b["kv"]
        job = kv.get("JobId", "").split()[0] if kv.get("JobId") else ""
        if not job.isdigit():
            ctx.warn("slurm: bad JobId in scontrol/jobcomp record", b["line"], b["raw"])
            return
        state_raw = kv.get("JobState")
        if not state_raw:
            # a JobId= line alone is not enough to say anything (e.g. an echo in a script)
            if "JobName" in kv or "UserId" in kv:
                ctx.warn("slurm: scontrol/jobcomp record without JobState", b["line"], b["raw"])
            return
        # jobcomp/filetxt: "JobId=N UserId=..."; scontrol: "JobId=N [Array..|Het..] JobName=..."
        fmt = "jobcomp" if regex.match(r"JobId=\d+ UserId=", b["raw"]) else "scontrol"
        state = state_raw.split()[0]
        attrs: dict[str, Any] = {"format": fmt, "job_id": job, "state": state}
        if kv.get("ArrayJobId") and kv.get("ArrayTaskId"):
            attrs["array_job_id"] = kv["ArrayJobId"]
            attrs["array_task_id"] = kv["ArrayTaskId"]
        if kv.get("Reason") not in (None, "None"):
            attrs["reason"] = kv["Reason"]
        for key, out in (("ExitCode", "exit_code"), ("DerivedExitCode", "derived_exit_code")):
            v = kv.get(key)
            if v and regex.fullmatch(r"\d+:\d+", v):
                attrs[out] = v
        if "exit_code" in attrs:
            sig = int(attrs["exit_code"].split(":")[1])
            if sig:
                attrs["signal"] = SIGNAL_NUM.get(sig, str(sig))
        nodelist = kv.get("NodeList")
        if nodelist and nodelist not in _EMPTY:
            nodes, ok = expand(nodelist)
            if not ok:
                ctx.warn("slurm: bad NodeList hostlist", b["line"], nodelist)
            attrs["nodes"] = nodes
            attrs["nodelist"] = nodelist
        if kv.get("NumTasks", "").isdigit():
            attrs["ntasks"] = int(kv["NumTasks"])
        if (per := kv.get("NtasksPerN:B:S:C", "").split(":")[0]).isdigit() and int(per) > 0:
            attrs["tasks_per_node"] = int(per)  # --ntasks-per-node
        if kv.get("FailedNode") not in (None, "", "(null)"):
            attrs["failed_node"] = kv["FailedNode"]
        if kv.get("Restarts", "").isdigit():
            attrs["restarts"] = int(kv["Restarts"])
        user = kv.get("UserId")
        if user:
            um = regex.match(r"(?P<name>[^(\s]*)(?:\((?P<uid>\d+)\))?", user)
            attrs["user"] = um.group("name") if um and um.group("name") else user
            if um and um.group("uid"):
                attrs["uid"] = int(um.group("uid"))
        name = kv.get("JobName") or kv.get("Name")
        if name:
            attrs["name"] = name
        times: dict[str, tuple[int | None, TimeQuality]] = {}
        for key in ("StartTime", "EndTime"):
            v = kv.get(key)
            if v and v not in _EMPTY:
                t, q = iso_to_ns(v, ctx)
                if t is None:
                    ctx.warn(f"slurm: bad {key}", b["line"], v)
                    continue
                times[key] = (t, q)
                attrs["start" if key == "StartTime" else "end"] = _iso(t)
        time, quality = times.get("EndTime") or times.get("StartTime") or (None, TimeQuality.MISSING)
        sev = Severity.ERROR if state in FAIL_STATES else Severity.INFO
        msg = f"{fmt}: JobId={job} JobState={state}" + (f" Reason={attrs['reason']}" if "reason" in attrs else "") + (
            f" ExitCode={attrs['exit_code']}" if "exit_code" in attrs else "")
        self.ctx.emit(Kind.JOB_STATE, b["line"], msg, severity=sev, time=time, time_quality=quality, job_id=job, attrs=attrs)


SOURCE = SlurmSource()
