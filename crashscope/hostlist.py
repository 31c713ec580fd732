"""Slurm hostlist expressions: ``node[001-004,007],login1`` <-> a list of host names.

Wraps the ``python-hostlist`` package (the same grammar as ``scontrol show hostnames``:
zero padding follows the digits written, several bracket groups expand as a cartesian
product, top-level commas separate expressions) and adds what a log parser needs:

* a cap on the expansion size, checked *before* expanding, so a corrupted or hostile
  ``n[1-999999999]`` cannot eat memory;
* no exceptions: on any error the input comes back unchanged (as a one-item list) with
  ``ok=False`` so the caller can warn and go on;
* Slurm's "no nodes" sentinels (``(null)``, ``None assigned``, ``None``, ``N/A``, empty)
  expand to an empty list.

``expand_ints`` does the same for srun task ranges (``0,2,5-6``); ``compress_ints`` is its
inverse, for showing long rank lists.
"""

from __future__ import annotations

from typing import Iterable

import hostlist as _hl

from crashscope.patterns import compile_pattern

MAX_HOSTS = 65_536  # the largest Slurm clusters are well below this

_EMPTY = frozenset({"", "(null)", "none", "none assigned", "n/a", "unknown"})
_BRACKET = compile_pattern(r"\[([^\[\]]*)\]")
_RANGE = compile_pattern(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def _range_count(body: str) -> int | None:
    total = 0
    for piece in body.split(","):
        m = _RANGE.fullmatch(piece)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            return None
        total += hi - lo + 1
    return total


def estimate_size(text: str) -> int | None:
    """How many names ``text`` expands to, without expanding; None if malformed."""
    total = 0
    for part in _split_top(text):
        n = 1
        for body in _BRACKET.findall(part):
            c = _range_count(body)
            if c is None:
                return None
            n *= c
        total += n
    return total


def expand(text: str | None, limit: int = MAX_HOSTS) -> tuple[list[str], bool]:
    """Expand a hostlist. Returns ``(hosts, ok)``; never raises.

    >>> expand("node[001-003,007]")
    (['node001', 'node002', 'node003', 'node007'], True)
    >>> expand("node[1-")
    (['node[1-'], False)
    """
    if text is None:
        return [], True
    s = str(text).strip()
    if s.lower() in _EMPTY:
        return [], True
    try:
        n = estimate_size(s)
        if n is None or n > limit:
            return [s], False
        return list(_hl.expand_hostlist(s)), True
    except Exception:  # BadHostlist, or anything the library trips on
        return [s], False


def expand_hosts(text: str | None, limit: int = MAX_HOSTS) -> list[str]:
    """``expand`` without the flag (bad input: the input itself as the one host)."""
    return expand(text, limit)[0]


def compress(hosts: Iterable[str]) -> str:
    """Hosts to the shortest hostlist expression (``scontrol show hostlist``); never raises."""
    names = [h for h in (str(x).strip() for x in hosts) if h]
    if not names:
        return ""
    try:
        return str(_hl.collect_hostlist(names))
    except Exception:
        return ",".join(dict.fromkeys(names))


def expand_ints(text: str | None, limit: int = MAX_HOSTS) -> tuple[list[int], bool]:
    """Expand an integer range list (srun ``tasks 0,2,5-6``). Returns ``(ints, ok)``."""
    if text is None:
        return [], True
    s = str(text).strip().strip("[]")
    if not s:
        return [], True
    out: list[int] = []
    for piece in s.split(","):
        m = _RANGE.fullmatch(piece)
        if not m:
            return [], False
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or len(out) + hi - lo + 1 > limit:
            return [], False
        out.extend(range(lo, hi + 1))
    return out, True


__all__ = ["MAX_HOSTS", "compress", "estimate_size", "expand", "expand_hosts", "expand_ints"]


def compress_ints(values: Iterable[object]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (srun's task-range style, so long rank lists stay
    readable); anything that is not an int (a bool, None, a string) is left out."""
    vals = sorted({v for v in values if isinstance(v, int) and not isinstance(v, bool)})
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)
