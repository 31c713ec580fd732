"""torchelastic error.json files (TORCHELASTIC_ERROR_FILE) written by @record.

Written by ``ErrorHandler.record_exception`` in the worker (path set by the agent:
``{log_dir}/{run_id}/attempt_{n}/{local_rank}/error.json``)::

    {"message": {"message": "DistBackendError: [3] ...",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n ...",
                               "timestamp": "1789612399"}}}

``message.message`` is ``f"{type(e).__name__}: {e}"``; ``timestamp`` a string of integer
Unix seconds (UTC, exact); the agent adds ``"errorCode": <int>`` when it re-dumps the root
cause into its own error file. Legacy shape: ``{"message": "<str>", "timestamp": <int>}``.

One ``exception`` event per file; attrs: type, text, py_callstack_last (last non-empty
callstack line), py_callstack_exc (the exception line after the innermost frame), frames_top
("file:line in func" of the innermost frame), error_code, nccl_result / nccl_version / nccl_enum
(when the message is a c10d ``NCCL error in: ...``),
attempt (from ``attempt_N`` in the path). ``local_rank`` is the parent directory name when
it is a number.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import regex

from crashscope.schema import Kind, Severity
from crashscope.sources.base import FileSource, ParseContext, decode, load_json
from crashscope.sources.pytorch import _NCCL_ERR
from crashscope.sources.base import lazy_compile

_TYPE = lazy_compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*): ?(?P<text>.*)$", regex.DOTALL)
_FRAME = lazy_compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*?))?\s*$')
_ATTEMPT = lazy_compile(r"^attempt_(?P<n>\d+)$")
_NCCL_ENUM_ANY = lazy_compile(r"^(?P<enum>nccl[A-Z]\w*): ", regex.MULTILINE)
_SNIFF = lazy_compile(r'^\s*\{\s*"message"\s*:')


class TorchelasticSource(FileSource):
    name = "torchelastic"
    description = "torchelastic error.json files (TORCHELASTIC_ERROR_FILE) written by @record"
    filename_hints = ("error.json", "*error*.json")
    max_bytes = 16 * 1024 * 1024

    def sniff(self, head: str, name: str) -> float:
        if not _SNIFF.match(head):
            return 0.0
        if '"extraInfo"' in head and '"py_callstack"' in head:
            return 0.95
        if '"timestamp"' in head:
            # legacy {"message": "<str>", "timestamp": <int>}: check it really is that shape
            try:
                obj = load_json(head)
            except ValueError:
                return 0.5
            if isinstance(obj, dict) and isinstance(obj.get("message"), str) and "timestamp" in obj:
                return 0.95
            if isinstance(obj, dict) and isinstance(obj.get("message"), dict):
                return 0.9
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        text, bad = decode(data)
        if not text.strip():
            return
        try:
            obj = load_json(text)
        except ValueError as e:
            ctx.warn(f"torchelastic: not valid JSON ({e.msg})", getattr(e, "lineno", None), text[:80])
            return
        if not isinstance(obj, dict) or "message" not in obj:
            ctx.warn("torchelastic: JSON without a 'message' key", 1, text[:80])
            return

        msg = obj["message"]
        attrs: dict[str, Any] = {}
        ts: Any = None
        callstack = ""
        if isinstance(msg, dict):
            message = msg.get("message")
            extra = msg.get("extraInfo") if isinstance(msg.get("extraInfo"), dict) else {}
            ts = extra.get("timestamp")
            callstack = extra.get("py_callstack") or ""
            if msg.get("errorCode") is not None:
                attrs["error_code"] = msg.get("errorCode")
        else:
            message = msg
            ts = obj.get("timestamp")
        message = message if isinstance(message, str) else ("" if message is None else json.dumps(message))
        if not isinstance(callstack, str):
            callstack = str(callstack)

        time = None
        if ts is not None:
            try:
                time = int(str(ts).strip()) * 1_000_000_000
                if time <= 0:
                    time = None
            except ValueError:
                ctx.warn("torchelastic: timestamp is not integer seconds", 1, str(ts))
        else:
            ctx.warn("torchelastic: no timestamp", 1, text[:80])

        first = message.strip().split("\n", 1)[0]
        if m := _TYPE.match(message.strip()):
            attrs["type"] = m.group("type")
            attrs["text"] = m.group("text").strip()
        else:
            attrs["text"] = message.strip()
        lines = [ln for ln in callstack.splitlines() if ln.strip()]
        if lines:
            attrs["py_callstack_last"] = lines[-1].strip()
            frames = [fm for ln in lines if (fm := _FRAME.match(ln))]
            if frames:
                f = frames[-1]
                attrs["frames_top"] = f"{f.group('file')}:{f.group('line')}" + (f" in {f.group('func')}" if f.group("func") else "")
            # the exception line: first unindented line after the innermost frame (the
            # message itself may run over several lines, e.g. NCCL's "Last error:")
            last_frame = max((i for i, ln in enumerate(lines) if _FRAME.match(ln)), default=-1)
            for ln in lines[last_frame + 1:]:
                if not ln[:1].isspace() and (m := _TYPE.match(ln)):
                    attrs["py_callstack_exc"] = ln.strip()
                    attrs.setdefault("type", m.group("type"))
                    break
        if nm := _NCCL_ERR.search(message):
            attrs["nccl_result"] = nm.group("result")
            attrs["nccl_version"] = nm.group("ver")
            if em := _NCCL_ENUM_ANY.search(message):
                attrs["nccl_enum"] = em.group("enum")

        local_rank = None
        path = PurePosixPath(ctx.file.path.split("!")[-1])
        if path.parent.name.isdigit():
            local_rank = int(path.parent.name)
        for part in path.parts:
            if am := _ATTEMPT.match(part):
                attrs["attempt"] = int(am.group("n"))
        if bad:
            ctx.warn("torchelastic: invalid UTF-8 bytes replaced", None, "")

        ctx.emit(Kind.EXCEPTION, 1, first or "(empty error message)", severity=Severity.ERROR, time=time,
                 local_rank=local_rank, attrs=attrs)


SOURCE = TorchelasticSource()
