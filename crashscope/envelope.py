"""Line envelopes: what a log collector puts in front of every line a program wrote.

A training script's traceback read back through ``kubectl logs`` of the node's CRI log, a
``docker compose`` service, the journal, or ``grep -r`` arrives with a prefix on every line
that no source expects, so the lines that start with ``Traceback`` or ``  File`` in the
program's own output start with something else. When the head of a file shows one envelope
on nearly every line, the file is read as the program wrote it: the envelope is removed
from the start of each line, one line for one line (line numbers stay the file's own).

The formats, from their sources:

* Kubernetes CRI container log (kubelet ``pkg/kubelet/kuberuntime/logs``, the file under
  ``/var/log/pods`` that ``kubectl logs`` reads): ``<RFC3339Nano> <stdout|stderr> <F|P> <line>``.
* ``docker compose logs`` / ``up`` (compose ``cmd/formatter/logs.go``): ``<service>-<n>  | <line>``
  (compose v1: ``<service>_<n>``), the name padded to the widest.
* journald's ``short`` and ``short-iso`` output (``journalctl``, systemd ``logs-show.c``):
  ``<Mmm dd hh:mm:ss> <host> <identifier>[<pid>]: <line>``, or the ISO stamp first.
* ``grep -r``/``-n``/context output: ``<path>:<line>`` or ``<path>:<n>:`` / ``<path>-<n>-``.

A file some source already claims from its raw head keeps its raw lines (the kernel source
reads the journal's own header, the NCCL source its ``host:pid:tid`` prefix): an envelope is
taken off only when no source claims the raw head well and a source claims what is left,
except the CRI envelope, which no program writes. The envelope's own time stamp is not
kept: the events get the times their lines carry.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import BinaryIO

import regex

from crashscope.patterns import compile_pattern

MIN_LINES = 2  # an excerpt of two enveloped lines is enough
MIN_SHARE = 0.8  # of the head's non-empty lines
HEAD_LINES = 200
RAW_CLAIM_BELOW = 0.5  # a raw head claimed at least this well is read as it is


@dataclass(frozen=True)
class Envelope:
    name: str
    pattern: "regex.Pattern[bytes]"
    # never part of a program's own output: taken off even when a source reads the raw
    # lines (the applog source reads the CRI stamp as a line header, and no more of them)
    collector_only: bool = False

    def strip(self, data: bytes) -> bytes:
        return self.pattern.sub(b"", data)


_MONTH = rb"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"
_IDENT = rb"[\w@.:/-]{1,64}(?:\[\d{1,10}\])?"

ENVELOPES: tuple[Envelope, ...] = (
    Envelope("kubernetes CRI", compile_pattern(rb"(?m)^" + _ISO + rb" (?:stdout|stderr) [FP] "), collector_only=True),
    Envelope("docker compose", compile_pattern(rb"(?m)^[A-Za-z0-9][\w.-]{0,63}?[-_]\d{1,4} *\| ")),
    Envelope("journal", compile_pattern(rb"(?m)^(?:" + _MONTH + rb" [ \d]\d \d\d:\d\d:\d\d|" + _ISO + rb") [\w.-]{1,253} " + _IDENT + rb": ")),
    Envelope("grep", compile_pattern(rb"(?m)^(?:\./)?(?:[\w.@+-]+/)*[\w.@+-]+\.(?:log|out|err|txt)(?:[:-]\d{1,9})?[:-]")),
)


def detect(head: bytes) -> Envelope | None:
    """The envelope on at least ``MIN_SHARE`` of the head's non-empty lines (the last,
    possibly cut line left out), if any."""
    first = head.lstrip()[:512]
    maybe = [env for env in ENVELOPES if env.pattern.match(first)]
    if not maybe:  # every file is asked: most answer here, at the first line
        return None
    lines = [ln for ln in head.split(b"\n")[:HEAD_LINES] if ln.strip()]
    if len(lines) > 1 and not head.endswith(b"\n"):
        lines = lines[:-1]
    if len(lines) < MIN_LINES:
        return None
    for env in maybe:
        hit = sum(1 for ln in lines if env.pattern.match(ln))
        if hit >= MIN_SHARE * len(lines):
            return env
    return None


class EnvelopeStream(io.RawIOBase):
    """``inner`` with ``envelope`` taken off the start of every line."""

    def __init__(self, inner: BinaryIO, envelope: Envelope, chunk: int = 1 << 20, max_line: int = 4 << 20):
        self._inner = inner
        self._env = envelope
        self._chunk = chunk
        self._max_line = max_line
        self._out = b""
        self._partial = b""
        self._eof = False
        self._mid_line = False

    @property
    def error(self) -> str | None:
        return getattr(self._inner, "error", None)

    def readable(self) -> bool:
        return True

    def _strip(self, data: bytes) -> bytes:
        if not self._mid_line:
            return self._env.strip(data)
        # the first bytes end a line that was passed on whole-less (longer than a chunk)
        nl = data.find(b"\n") + 1
        return data if nl == 0 else data[:nl] + self._env.strip(data[nl:])

    def _fill(self) -> None:
        while not self._out and not self._eof:
            data = self._inner.read(self._chunk)
            if not data:
                self._eof = True
                self._out, self._partial = self._strip(self._partial), b""
                return
            data = self._partial + data
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) > self._max_line:
                cut = len(data)  # a line longer than memory should hold: pass it on as it comes
            self._partial = data[cut:]
            self._out = self._strip(data[:cut])
            self._mid_line = not self._out.endswith(b"\n") if self._out else self._mid_line

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        self._fill()
        k = min(len(b), len(self._out))
        b[:k] = self._out[:k]
        self._out = self._out[k:]
        return k
