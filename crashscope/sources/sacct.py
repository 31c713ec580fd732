"""sacct output: ``sacct -p`` / ``-P`` (parsable) text, the fixed-width default, and ``--json``.

Parsable text (``-p`` ends every line with the delimiter, ``-P`` does not; first line is
the header, any field subset and order)::

    JobID|JobName|State|ExitCode|Start|End|NodeList|
    123456|pretrain|NODE_FAIL|0:0|2026-09-14T06:00:02|2026-09-14T08:14:24|node[001-004]|
    123456.0|python|CANCELLED by 0|0:9|2026-09-14T06:00:09|2026-09-14T08:14:24|node[001-004]|

``JobID`` is job[.step] (``123456``, ``123456.batch``, ``123456_7.0``, ``123456+0``),
``CANCELLED by <uid>`` names the requester, ``ExitCode`` is ``exit:signal``, times are
``%FT%T`` in the local time of the host that ran sacct (``Unknown``/``None`` = unset).

``sacct --json`` (data_parser v0.0.39 .. v0.0.44 and the older openapi dbv0.0.3x): one
object ``{"meta": ..., "jobs": [...]}``; states are a string (<= v0.0.39) or an array
(``state.current`` for jobs, ``state`` for steps), numbers may be wrapped as
``{"set": true, "infinite": false, "number": N}``, times are epoch seconds (UTC, exact).

Every job row and step row becomes one ``job_state`` event (host None: sacct names the
allocation, not one host), time = end (else start). Attrs:
job_id, step (None for the job row; "batch", "extern", "0", ...), state (base state),
state_flags (other states of a JSON state array), state_by_uid (``CANCELLED by N``),
kill_request_user (JSON), exit_code "e:s", signal (SIGKILL..), derived_exit_code,
nodes (expanded list), nodelist (raw), start, end (ISO UTC), elapsed (text as printed,
or seconds from JSON), name, reason, restarts, failed_node, user, format
(parsable|fixed|json), data_parser (JSON meta), job_id_raw.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import regex

from crashscope.hostlist import expand
from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import MAX_EPOCH_S, FileSource, ParseContext, decode, iso_to_ns, load_json
from crashscope.sources.base import lazy_compile

FAIL_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
                         "DEADLINE", "CANCELLED", "REVOKED"})
BASE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
                         "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
SIGNAL_NUM = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
              8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
              14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}
_SIG_BY_NAME = {v: v for v in SIGNAL_NUM.values()} | {v[3:]: v for v in SIGNAL_NUM.values()}
_SIG_BY_NAME |= {"Killed": "SIGKILL", "Terminated": "SIGTERM", "Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV",
                 "Bus error": "SIGBUS", "Interrupt": "SIGINT", "Hangup": "SIGHUP", "Floating point exception": "SIGFPE",
                 "User defined signal 1": "SIGUSR1", "User defined signal 2": "SIGUSR2"}

_EMPTY = frozenset({"", "Unknown", "None", "N/A", "(null)", "None assigned"})
_HEADER = lazy_compile(r"^\s*(?:JobID|JobIDRaw)\s*\|", regex.IGNORECASE)
_FIXED_HEADER = lazy_compile(r"^\s*JobID(?:Raw)?\s{2,}\S", regex.IGNORECASE)
_DASHES = lazy_compile(r"^\s*-+(?:\s+-+)*\s*$")
_STATE = lazy_compile(r"^(?P<state>[A-Z_]+)(?P<trunc>\+)?(?: by (?P<uid>\d+))?$")
_EXIT = lazy_compile(r"^(?P<e>\d+):(?P<s>\d+)$")
# sniff
_S_HEADER = lazy_compile(r"^(?:JobID|JobIDRaw)\|", regex.MULTILINE)
_S_ANY_HEADER = lazy_compile(r"^(?:[A-Za-z]+\|){2,}", regex.MULTILINE)
_S_FIXED = lazy_compile(r"^\s*JobID(?:Raw)?\s{2,}.*\n\s*-{6,} -+", regex.MULTILINE)


def _iso(sec: int | None) -> str | None:
    if sec is None:
        return None
    return datetime.fromtimestamp(sec, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(v: Any) -> int | None:
    """Plain int, numeric string, or data_parser's {"set","infinite","number"} wrapper."""
    if isinstance(v, dict):
        if v.get("set") is False or v.get("infinite") is True:
            return None
        v = v.get("number")
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _split_jobid(jobid: str) -> tuple[str, str | None]:
    job, dot, step = jobid.partition(".")
    return job, (step if dot else None)


class SacctSource(FileSource):
    name = "sacct"
    description = "sacct -p/-P text and sacct --json"
    filename_hints = ("sacct*", "*.sacct", "*sacct*.txt", "*sacct*.json")

    def sniff(self, head: str, name: str) -> float:
        s = head.lstrip("\ufeff \t\r\n")
        if s.startswith("{") and '"jobs"' in head and '"meta"' in head:
            return 0.95
        if _S_HEADER.search(head):
            return 0.95
        if _S_FIXED.search(head):
            return 0.9
        first = s.split("\n", 1)[0]
        if _S_ANY_HEADER.match(first) and regex.search(r"(?:^|\|)(?:State|ExitCode|NodeList)\|", first):
            return 0.8
        return 0.0

    # ------------------------------------------------------------------------------------
    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        try:
            text, bad = decode(data)
            if bad:
                ctx.warn("sacct: invalid UTF-8 bytes replaced")
            text = text.lstrip("\ufeff")
            if text.lstrip().startswith("{"):
                self._json(text, ctx)
            else:
                self._text(text, ctx)
        except Exception as e:  # never raise on bad input
            ctx.warn(f"sacct: unparsable file ({type(e).__name__}: {e})")

    # -- text --------------------------------------------------------------------------------
    def _text(self, text: str, ctx: ParseContext) -> None:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if _HEADER.match(line):
                self._parsable(lines, i, ctx)
                return
            if _FIXED_HEADER.match(line) and i + 1 < len(lines) and _DASHES.match(lines[i + 1]):
                self._fixed(lines, i, ctx)
                return
            if i > 50:
                break
        # header anywhere else ("State|ExitCode|JobID")? take the first |-line with JobID
        for i, line in enumerate(lines[:50]):
            if "|" in line and any(f.strip().lower() in ("jobid", "jobidraw") for f in line.split("|")):
                self._parsable(lines, i, ctx)
                return
        if text.strip():
            ctx.warn("sacct: no header line with JobID found (sacct -n output is not supported)")

    def _parsable(self, lines: list[str], hi: int, ctx: ParseContext) -> None:
        header = [h.strip() for h in lines[hi].rstrip("\r").split("|")]
        trailing = header and header[-1] == ""
        if trailing:
            header = header[:-1]
        for n in range(hi + 1, len(lines)):
            raw = lines[n].rstrip("\r")
            if not raw.strip():
                continue
            vals = raw.split("|")
            if trailing and vals and vals[-1] == "":
                vals = vals[:-1]
            if len(vals) != len(header):
                if _HEADER.match(raw):  # a second sacct run appended: new header
                    header = [h.strip() for h in raw.split("|")]
                    trailing = header[-1] == ""
                    header = header[:-1] if trailing else header
                    continue
                ctx.warn(f"sacct: row has {len(vals)} fields, header {len(header)}", n + 1, raw)
                if len(vals) < 2:
                    continue
                vals = (vals + [""] * len(header))[: len(header)]
            try:
                self._row(dict(zip(header, (v.strip() for v in vals))), n + 1, raw, "parsable", ctx)
            except Exception as e:  # one odd row must not lose the rest
                ctx.warn(f"sacct: unparsable row ({type(e).__name__})", n + 1, raw)

    def _fixed(self, lines: list[str], hi: int, ctx: ParseContext) -> None:
        header_line, dash = lines[hi], lines[hi + 1]
        spans = [m.span() for m in regex.finditer(r"-+", dash)]
        header = [header_line[a:b].strip() for a, b in spans]
        for n in range(hi + 2, len(lines)):
            raw = lines[n].rstrip("\r")
            if not raw.strip():
                continue
            row = {h: raw[a:b].strip() for h, (a, b) in zip(header, spans)}
            try:
                self._row(row, n + 1, raw, "fixed", ctx)
            except Exception as e:
                ctx.warn(f"sacct: unparsable row ({type(e).__name__})", n + 1, raw)

    def _row(self, row: dict[str, str], n: int, raw: str, fmt: str, ctx: ParseContext) -> None:
        get = {k.lower(): v for k, v in row.items()}
        jobid = get.get("jobid") or get.get("jobidraw") or ""
        if not regex.match(r"^\d+(?:_\d+|_\[[\d,\-%]+\]|\+\d+)?(?:\.\w+)?(?:\+\d+)?$", jobid):
            ctx.warn("sacct: bad JobID", n, raw)
            return
        job, step = _split_jobid(jobid)
        attrs: dict[str, Any] = {"format": fmt, "job_id": job, "step": step}
        if get.get("jobidraw") and get.get("jobid") and get["jobidraw"] != get["jobid"]:
            attrs["job_id_raw"] = get["jobidraw"].split(".")[0]
        state_raw = get.get("state", "")
        if state_raw:
            m = _STATE.match(state_raw)
            if m:
                attrs["state"] = m.group("state")
                if m.group("uid"):
                    attrs["state_by_uid"] = int(m.group("uid"))
                if m.group("trunc"):
                    attrs["state_truncated"] = True
            else:
                ctx.warn("sacct: unrecognised State", n, state_raw)
                attrs["state"] = state_raw.split()[0]
        for key, out in (("exitcode", "exit_code"), ("derivedexitcode", "derived_exit_code")):
            v = get.get(key)
            if v:
                if _EXIT.match(v):
                    attrs[out] = v
                else:
                    ctx.warn(f"sacct: bad {key}", n, v)
        if "exit_code" in attrs:
            sig = int(attrs["exit_code"].split(":")[1])
            if 0 < sig < 65:  # OUT_OF_MEMORY steps show 0:125, which is no signal
                attrs["signal"] = SIGNAL_NUM.get(sig, f"SIG{sig}")
        nodelist = get.get("nodelist")
        if nodelist is not None and nodelist not in _EMPTY:
            nodes, ok = expand(nodelist)
            if not ok:
                ctx.warn("sacct: bad NodeList hostlist", n, nodelist)
            attrs["nodes"] = nodes
            attrs["nodelist"] = nodelist
        times: dict[str, tuple[int | None, TimeQuality]] = {}
        for key in ("start", "end"):
            v = get.get(key)
            if v and v not in _EMPTY:
                t, q = iso_to_ns(v, ctx)
                if t is None:
                    ctx.warn(f"sacct: bad {key} time", n, v)
                    continue
                times[key] = (t, q)
                attrs[key] = _iso(t // 1_000_000_000)
        for key, out in (("elapsed", "elapsed"), ("jobname", "name"), ("reason", "reason"), ("user", "user"),
                         ("uid", "uid"), ("partition", "partition"), ("failednode", "failed_node"), ("layout", "distribution")):
            v = get.get(key)
            if v and v not in _EMPTY:
                attrs[out] = v
        if (v := get.get("ntasks")) and v.isdigit():
            attrs["ntasks"] = int(v)
        time, quality = times.get("end") or times.get("start") or (None, TimeQuality.MISSING)
        self._emit(ctx, n, raw, attrs, time, quality)

    # -- json --------------------------------------------------------------------------------
    def _json(self, text: str, ctx: ParseContext) -> None:
        try:
            obj = load_json(text)
        except ValueError as e:
            ctx.warn(f"sacct: invalid JSON ({e.msg} at line {e.lineno})", e.lineno)
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("jobs"), list):
            ctx.warn("sacct: JSON without a jobs list")
            return
        parser = None
        meta = obj.get("meta")
        if isinstance(meta, dict):
            plugin = meta.get("plugin") or meta.get("plugins") or {}
            if isinstance(plugin, dict):
                parser = plugin.get("data_parser") or plugin.get("type")
        for i, job in enumerate(obj["jobs"]):
            if not isinstance(job, dict):
                ctx.warn(f"sacct: jobs[{i}] is not an object")
                continue
            try:
                self._json_job(job, parser, ctx)
            except Exception as e:
                ctx.warn(f"sacct: jobs[{i}] unparsable ({type(e).__name__}: {e})")

    def _json_common(self, rec: dict[str, Any], state_v: Any, attrs: dict[str, Any], ctx: ParseContext) -> tuple[int | None, TimeQuality]:
        states = [s for s in (state_v if isinstance(state_v, list) else [state_v]) if isinstance(s, str) and s]
        if states:
            base = [s for s in states if s in BASE_STATES]
            attrs["state"] = (base or states)[0]
            flags = [s for s in states if s != attrs["state"]]
            if flags:
                attrs["state_flags"] = flags
        ec = _json_exit(rec.get("exit_code"))
        if ec:
            attrs["exit_code"], sig = ec
            if sig:
                attrs["signal"] = sig
        user = rec.get("kill_request_user")
        if isinstance(user, (str, int)) and str(user) not in _EMPTY and attrs.get("state") == "CANCELLED":
            attrs["kill_request_user"] = str(user)
        t = rec.get("time") if isinstance(rec.get("time"), dict) else {}
        start, end = _num(t.get("start")), _num(t.get("end"))
        start = start if start and 0 < start < MAX_EPOCH_S else None
        end = end if end and 0 < end < MAX_EPOCH_S else None
        if start:
            attrs["start"] = _iso(start)
        if end:
            attrs["end"] = _iso(end)
        el = _num(t.get("elapsed"))
        if el is not None:
            attrs["elapsed"] = el
        sec = end or start
        return (sec * 1_000_000_000, TimeQuality.EXACT) if sec else (None, TimeQuality.MISSING)

    def _json_job(self, job: dict[str, Any], parser: str | None, ctx: ParseContext) -> None:
        jid = _num(job.get("job_id"))
        if jid is None:
            ctx.warn("sacct: JSON job without job_id")
            return
        job_id = str(jid)
        attrs: dict[str, Any] = {"format": "json", "job_id": job_id, "step": None}
        if parser:
            attrs["data_parser"] = parser
        state = job.get("state")
        state_v = state.get("current") if isinstance(state, dict) else state
        if isinstance(state, dict) and isinstance(state.get("reason"), str) and state["reason"] not in _EMPTY:
            attrs["reason"] = state["reason"]
        time, quality = self._json_common(job, state_v, attrs, ctx)
        dec = _json_exit(job.get("derived_exit_code"))
        if dec:
            attrs["derived_exit_code"] = dec[0]
        nodelist = job.get("nodes")
        if isinstance(nodelist, str) and nodelist not in _EMPTY:
            attrs["nodes"], ok = expand(nodelist)
            attrs["nodelist"] = nodelist
            if not ok:
                ctx.warn("sacct: bad nodes hostlist", None, nodelist)
        for key, out in (("name", "name"), ("failed_node", "failed_node"), ("user", "user")):
            v = job.get(key)
            if isinstance(v, str) and v not in _EMPTY:
                attrs[out] = v
        rc = _num(job.get("restart_cnt"))
        if rc is not None:
            attrs["restarts"] = rc
        arr = job.get("array") if isinstance(job.get("array"), dict) else {}
        a_job, a_task = _num(arr.get("job_id")), _num(arr.get("task_id"))
        if a_job and a_task is not None:
            attrs["array_job_id"], attrs["array_task_id"] = str(a_job), a_task
        self._emit(ctx, None, f"sacct: JobId={job_id}", attrs, time, quality)

        for step in job.get("steps") or []:
            if not isinstance(step, dict):
                continue
            sid = step.get("step") if isinstance(step.get("step"), dict) else {}
            name_v = sid.get("name")
            ident = sid.get("id")
            if isinstance(ident, dict):  # <= v0.0.39: {"job_id": N, "step_id": "batch"|N}
                step_name = ident.get("step_id")
                step_name = str(_num(step_name)) if _num(step_name) is not None else step_name
            elif isinstance(ident, str):
                step_name = _split_jobid(ident)[1] or ident
            elif isinstance(ident, int) and not isinstance(ident, bool):  # v0.0.38 (22.05): "id": 0
                step_name = str(ident)
            else:
                step_name = None
            sattrs: dict[str, Any] = {"format": "json", "job_id": job_id, "step": step_name}
            if parser:
                sattrs["data_parser"] = parser
            st = step.get("state")
            st_v = st.get("current") if isinstance(st, dict) else st
            stime, squality = self._json_common(step, st_v, sattrs, ctx)
            nodes = step.get("nodes")
            rng = nodes.get("range") if isinstance(nodes, dict) else nodes
            if isinstance(rng, str) and rng not in _EMPTY:
                sattrs["nodes"], _ = expand(rng)
                sattrs["nodelist"] = rng
            elif isinstance(nodes, dict) and isinstance(nodes.get("list"), list) and nodes["list"]:
                sattrs["nodes"] = [str(x) for x in nodes["list"]]
            # the step's task layout ("tasks": {"count": 4}, "task": {"distribution": "Block"}):
            # which node ran which task id, for ranks no line names a node of
            tasks, task = step.get("tasks"), step.get("task")
            if isinstance(tasks, dict) and isinstance(tasks.get("count"), int) and not isinstance(tasks["count"], bool):
                sattrs["ntasks"] = tasks["count"]
            if isinstance(task, dict) and isinstance(task.get("distribution"), str) and task["distribution"] not in _EMPTY:
                sattrs["distribution"] = task["distribution"]
            if isinstance(name_v, str) and name_v:
                sattrs["name"] = name_v
            self._emit(ctx, None, f"sacct: StepId={job_id}.{step_name}", sattrs, stime, squality)

    # ------------------------------------------------------------------------------------
    def _emit(self, ctx: ParseContext, n: int | None, msg: str, attrs: dict[str, Any], time: int | None,
              quality: TimeQuality) -> None:
        state = attrs.get("state")
        if state:
            msg += f" State={state}" if msg.startswith("sacct:") else ""
        if "exit_code" in attrs and msg.startswith("sacct:"):
            msg += f" ExitCode={attrs['exit_code']}"
        sev = Severity.ERROR if state in FAIL_STATES else Severity.WARNING if state == "REQUEUED" else Severity.INFO
        ctx.emit(Kind.JOB_STATE, n, msg, severity=sev, time=time, time_quality=quality,
                 job_id=attrs.get("job_id"), attrs=attrs)


def _json_exit(ec: Any) -> tuple[str, str | None] | None:
    """exit_code object (any version) -> ("exit:signal", signal name)."""
    if ec is None:
        return None
    if isinstance(ec, (int, dict)) and not isinstance(ec, bool) and _num(ec) is not None and not (
            isinstance(ec, dict) and "return_code" in ec):
        raw = _num(ec)  # raw wait status (very old openapi)
        if raw is None:
            return None
        e, s = (raw >> 8) & 0xFF, raw & 0x7F
        return f"{e}:{s}", SIGNAL_NUM.get(s) if s else None
    if not isinstance(ec, dict):
        return None
    status = ec.get("status")
    statuses = status if isinstance(status, list) else [status]
    if "PENDING" in statuses or "INVALID" in statuses:
        return None
    rc = _num(ec.get("return_code")) or 0
    sig_num, sig_name = None, None
    sig = ec.get("signal")
    if isinstance(sig, dict):
        sig_num = _num(sig.get("id")) if "id" in sig else _num(sig.get("signal_id"))
        name = sig.get("name")
        if isinstance(name, str) and name:
            sig_name = _SIG_BY_NAME.get(name, name if name.startswith("SIG") else "SIG" + name.upper())
    if sig_num is None and sig_name:
        sig_num = next((k for k, v in SIGNAL_NUM.items() if v == sig_name), None)
    if sig_num:
        sig_name = sig_name or SIGNAL_NUM.get(sig_num, str(sig_num))
        return f"{max(rc, 0)}:{sig_num}", sig_name
    return f"{max(rc, 0)}:0", None


SOURCE = SacctSource()
