"""One compile for the project's patterns: the stdlib's engine where it can, else ``regex``."""

from __future__ import annotations

import re
import warnings
from typing import Any

import regex

# regex's flags that mean the same in the stdlib's engine (its ASCII bit differs; the rest,
# VERSION1, FULLCASE, BESTMATCH ..., are regex's own).
_STDLIB_FLAGS = {
    int(regex.IGNORECASE): re.IGNORECASE,
    int(regex.MULTILINE): re.MULTILINE,
    int(regex.DOTALL): re.DOTALL,
    int(regex.VERBOSE): re.VERBOSE,
    int(regex.UNICODE): re.UNICODE,
    int(regex.ASCII): re.ASCII,
}


def compile_pattern(pattern: str | bytes, flags: int = 0) -> Any:
    """The stdlib's engine where it takes ``pattern``, else ``regex``.

    ``re`` matches these patterns about 1.5x faster: the small-file ingest spent a fifth of
    its CPU in ``regex``'s match calls. ``regex`` keeps what ``re`` refuses: ``\\p{..}``
    classes, variable-width lookbehind, inline flags mid-pattern, a group name used in two
    alternatives (a catalog entry's texts), flags of its own, and a
    possible nested set (``[[:digit:]]``, a POSIX class to ``regex`` and a plain set with
    a FutureWarning to ``re``: the warning counts as a refusal).

    The two engines differ only outside printable ASCII, where logs keep no identifier: ``re``'s
    ``\\w`` is ``str.isalnum`` (superscript digits and fractions in, combining marks out),
    its ``\\s`` takes the separators \\x1c-\\x1f, and its Unicode tables are Python's own
    (tests/test_patterns.py).
    """
    std, rest = 0, flags
    for bit, flag in _STDLIB_FLAGS.items():
        if rest & bit:
            std, rest = std | flag, rest & ~bit
    if not rest:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return re.compile(pattern, std)
        except (re.error, Warning, ValueError, TypeError, OverflowError, RecursionError):
            pass
    return regex.compile(pattern, flags)
