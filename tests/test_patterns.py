"""compile_pattern hands a pattern to the stdlib's engine where it takes it: the project's
patterns must then find the same matches, spans and groups as ``regex`` on what logs hold.

Checked on every module-level pattern of crashscope and every catalog entry, against the
lines of the real-incident corpus and the recorded runs that some line source selects
(printable ASCII: see ``compile_pattern`` for where the engines part), and on each catalog
entry's own hit and miss examples.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import regex

import crashscope
from crashscope import catalogs
from crashscope.patterns import compile_pattern
from crashscope.sources.base import CompiledPattern, LazyPattern

ROOT = Path(__file__).resolve().parent.parent
LINES_PER_PATTERN = 4000


def _module_patterns() -> dict[str, tuple[str | bytes, int]]:
    found: dict[str, tuple[str | bytes, int]] = {}
    for info in pkgutil.walk_packages(crashscope.__path__, "crashscope."):
        if info.name.startswith(("crashscope.repro", "crashscope.simulate.", "crashscope.cli")) or info.name.endswith("__main__"):
            continue  # torch, and command code without log patterns
        mod = importlib.import_module(info.name)
        for name, value in vars(mod).items():
            if isinstance(value, (LazyPattern, CompiledPattern)):
                found[f"{info.name}.{name}"] = (value.pattern, value._flags)
            elif isinstance(value, (re.Pattern, regex.Pattern)):
                found[f"{info.name}.{name}"] = (value.pattern, int(value.flags) & ~int(regex.UNICODE) & ~re.UNICODE)
    return found


def _corpus_lines() -> list[str]:
    from crashscope.ingest import _COMBINED

    select = re.compile(_COMBINED)
    lines: set[str] = set()
    files = sorted((ROOT / "tests" / "data" / "real").glob("*/log.txt")) + sorted((ROOT / "fixtures" / "recorded").glob("*/**/*.out"))
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            if line.isascii() and line.isprintable() and len(line) < 2000 and select.search(line):
                lines.add(line)
    return sorted(lines)


MODULE_PATTERNS = _module_patterns()


@pytest.fixture(scope="module")
def corpus_lines() -> list[str]:
    lines = _corpus_lines()
    assert len(lines) > 2000, "the corpus gives too few lines to compare the engines on"
    return lines


def _same(a: re.Match | regex.Match | None, b: re.Match | regex.Match | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.span() == b.span() and a.groups() == b.groups() and a.groupdict() == b.groupdict()


def test_most_module_patterns_take_the_stdlib_engine() -> None:
    std = [n for n, (p, f) in MODULE_PATTERNS.items() if isinstance(compile_pattern(p, f), re.Pattern)]
    assert len(MODULE_PATTERNS) > 300
    assert len(std) >= 0.95 * len(MODULE_PATTERNS)


@pytest.mark.parametrize(
    "pattern, text, want",
    [
        (r"[[:digit:]]+", "ab 123", "123"),  # a POSIX class to regex; a nested-set warning to re
        (r"\p{Lu}+", "abCD", "CD"),  # \p classes: regex only
        (r"(?<=ab|abc)d", "abcd", "d"),  # variable-width lookbehind: regex only
        (r"a(?i)B", "aB", "aB"),  # a global flag mid-pattern: re refuses it
        (r"(?P<code>\d+) x|y (?P<code>\d+)", "y 12", "y 12"),  # a group name reused across alternatives
    ],
)
def test_what_re_refuses_goes_to_regex(pattern: str, text: str, want: str) -> None:
    rx = compile_pattern(pattern)
    assert isinstance(rx, regex.Pattern)
    m = rx.search(text)
    assert m is not None and m.group(0) == want


def test_flags_keep_their_meaning() -> None:
    rx = compile_pattern(r"^rank\d$", regex.IGNORECASE | regex.MULTILINE)
    assert isinstance(rx, re.Pattern) and rx.flags & re.IGNORECASE and rx.flags & re.MULTILINE
    assert rx.findall("RANK1\nrank2") == ["RANK1", "rank2"]
    asc = compile_pattern(r"\w+", regex.ASCII)  # regex.ASCII (128) is not re.ASCII (256)
    assert isinstance(asc, re.Pattern) and asc.flags & re.ASCII
    assert isinstance(compile_pattern(r"x", regex.VERSION1), regex.Pattern)  # regex's own flag


@pytest.mark.parametrize("name", sorted(MODULE_PATTERNS))
def test_module_pattern_matches_as_regex_does(name: str, corpus_lines: list[str]) -> None:
    pattern, flags = MODULE_PATTERNS[name]
    std = compile_pattern(pattern, flags)
    if not isinstance(std, re.Pattern) or isinstance(pattern, bytes):
        return
    ref = regex.compile(pattern, flags)
    for line in corpus_lines[:LINES_PER_PATTERN]:
        assert _same(std.search(line), ref.search(line)), line
        assert _same(std.match(line), ref.match(line)), line


def test_catalog_entries_match_as_regex_does(corpus_lines: list[str]) -> None:
    entries = catalogs.load().entries
    assert len(entries) > 100
    checked = 0
    for e in entries:
        std = compile_pattern(e.pattern)
        if not isinstance(std, re.Pattern):
            continue
        ref = regex.compile(e.pattern)
        for text in (*e.hit, *e.miss):
            assert _same(std.search(text), ref.search(text)), (e.catalog, e.name, text)
        checked += 1
    # (the rest reuse a group name across alternatives, as ``code`` in an entry's several
    # texts: regex only)
    assert checked >= 0.8 * len(entries)
