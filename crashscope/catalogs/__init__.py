"""Catalogs of real error texts, as data, and the matcher that finds them in any line.

Each ``crashscope/catalogs/*.yaml`` file is one catalog (CUDA runtime/driver errors,
NCCL results and WARNs, IB verbs completion statuses and mlx5 messages, NVIDIA Xid and
NVRM lines, errno texts, signals and exit codes, OOM texts, scheduler/cloud terminal
states). Every entry names a stable ``name``, an optional ``code``, the exact text(s)
(``texts``: literals, case-sensitive) and/or tight regexes (``patterns``, with the
literals every match contains in ``keys``), its ``kind`` (a ``Kind`` value), ``severity``,
``cause`` (a taxonomy label or null), ``role`` (cause|symptom|context) and hit/miss example
lines. ``docs/catalogs.md`` describes the format.

The matcher looks for the key texts *anywhere* in a line, so any envelope (mpirun
``[1,2]<stderr>:``, Kubernetes CRI, journald, Python logging, ``grep -r`` paths, tqdm
``\\r``-glued text) and a line cut right after the key text still match.

``PREFILTER`` is one regex of escaped literals only, in trie form (valid in Rust's
``regex`` crate, i.e. polars ``str.contains``, and in Python ``regex``): a superset filter
for the ingest.
``match_text(text)`` returns every hit as a ``CatalogHit``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import regex

from crashscope.patterns import compile_pattern
from crashscope.schema import CAUSES, KINDS, SEVERITIES

ROLES = ("cause", "symptom", "context")
_ENTRY_KEYS = {
    "name", "code", "codes", "texts", "strings", "bare", "patterns", "keys", "kind", "severity", "cause",
    "role", "description", "hit", "miss", "attrs",
}
_CATALOG_KEYS = {"catalog", "title", "sources", "notes", "wrap", "wrap_patterns", "entries"}


class CatalogError(ValueError):
    """A catalog file is malformed (raised at load; a test loads every catalog)."""


@dataclass(frozen=True, slots=True)
class Entry:
    catalog: str
    name: str
    code: int | None
    codes: tuple[int, ...]
    kind: str
    severity: str
    cause: str | None
    role: str
    description: str
    keys: tuple[str, ...]  # literals: every match contains at least one of them
    pattern: str  # texts escaped + patterns, one alternation
    attrs: dict[str, Any]  # constant attrs added to every hit
    hit: tuple[str, ...]
    miss: tuple[str, ...]

    @property
    def rx(self) -> Any:
        """The compiled pattern, compiled on first use: most entries never see a candidate
        line, and compiling all of them cost every process (and each ingest worker) 0.5 s."""
        return _compiled(self.pattern)


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> Any:
    return compile_pattern(pattern)


@dataclass(frozen=True, slots=True)
class CatalogHit:
    catalog: str
    name: str
    code: int | None
    kind: str
    severity: str
    cause: str | None
    role: str
    span: tuple[int, int]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:  # pragma: no cover - convenience
        return f"{self.catalog}:{self.name}"


@dataclass(frozen=True)
class Catalogs:
    """The loaded catalogs. ``prefilter`` (the anchors' trie, for the ingest's Rust scan) is
    all an import needs; the Python-side matcher (``quick``, ``anchor_entries``) is built on
    the first ``match_text``: building both at import cost every process ~0.12 s CPU."""

    entries: tuple[Entry, ...]
    sources: dict[str, tuple[str, ...]]  # catalog -> transcribed-from list
    anchors: tuple[str, ...]  # minimal literal set (no anchor contains another)
    prefilter: str

    @functools.cached_property
    def quick(self) -> Any:
        """The anchors' trie in the stdlib ``re``: a cheap reject for lines with no anchor,
        and (searched from each match's start + 1) every anchor occurrence."""
        return re.compile(self.prefilter)

    @functools.cached_property
    def anchor_entries(self) -> dict[str, tuple[int, ...]]:
        """Anchor -> the entries with a key containing it (keys joined by NUL, which no
        anchor holds: one substring test per entry)."""
        blobs = ["\0".join(e.keys) for e in self.entries]
        return {a: tuple(i for i, b in enumerate(blobs) if a in b) for a in self.anchors}


def _as_list(v: Any, where: str, what: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise CatalogError(f"{where}: {what} must be a string or a list of strings")
    return list(v)


def _entry(
    cat: str, raw: dict[str, Any], where: str, wrap: list[str], wrap_patterns: list[dict[str, str]], validate: bool = True
) -> Entry:
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: an entry must be a mapping")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise CatalogError(f"{where}: unknown field(s) {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not regex.fullmatch(r"[A-Za-z][\w.-]*", name):
        raise CatalogError(f"{where}: name {name!r} must be an identifier")
    where = f"{where} ({name})"
    texts = _as_list(raw.get("texts"), where, "texts")
    patterns = _as_list(raw.get("patterns"), where, "patterns")
    keys = _as_list(raw.get("keys"), where, "keys")
    # ``strings``: an API's error-string texts (cudaGetErrorString...). Short ones ("out of
    # memory") are only trusted inside the catalog's ``wrap`` templates ("CUDA error: {s}");
    # ``bare: true`` marks strings distinctive enough to match alone.
    strings = _as_list(raw.get("strings"), where, "strings")
    for s in strings:
        texts += [w.replace("{s}", s) for w in wrap]
        for wp in wrap_patterns:
            patterns.append(wp["pattern"].replace("{s}", regex.escape(s)))
            keys.append(wp["key"].replace("{s}", s))
        if raw.get("bare"):
            texts.append(s)
    if not texts and not patterns:
        raise CatalogError(f"{where}: needs texts or patterns")
    if patterns and not keys:
        raise CatalogError(f"{where}: patterns need keys (literals every match contains)")
    if any(not t for t in texts + keys):
        raise CatalogError(f"{where}: empty text or key")
    kind, severity, role, cause = raw.get("kind"), raw.get("severity"), raw.get("role"), raw.get("cause")
    if kind not in KINDS:
        raise CatalogError(f"{where}: kind {kind!r} is not a schema Kind")
    if severity not in SEVERITIES:
        raise CatalogError(f"{where}: severity {severity!r} unknown")
    if role not in ROLES:
        raise CatalogError(f"{where}: role {role!r} must be one of {ROLES}")
    if cause is not None and cause not in CAUSES:
        raise CatalogError(f"{where}: cause {cause!r} is not a taxonomy label")
    if role == "cause" and cause is None:
        raise CatalogError(f"{where}: a cause-role entry must name its cause")
    code = raw.get("code")
    if code is not None and not isinstance(code, int):
        raise CatalogError(f"{where}: code must be an integer")
    codes = raw.get("codes") or []
    if not isinstance(codes, list) or not all(isinstance(c, int) for c in codes):
        raise CatalogError(f"{where}: codes must be a list of integers")
    # Patterns first: where a pattern and a plain text match at the same place, the pattern's
    # captures (the ranks, the status) are what the hit should carry (leftmost alternative wins).
    pattern = "|".join([f"(?:{p})" for p in patterns] + [regex.escape(t) for t in texts])
    if validate:
        try:
            regex.compile(pattern)
        except regex.error as exc:
            raise CatalogError(f"{where}: bad pattern: {exc}") from exc
    hit = tuple(_as_list(raw.get("hit"), where, "hit"))
    miss = tuple(_as_list(raw.get("miss"), where, "miss"))
    if not hit:
        raise CatalogError(f"{where}: needs at least one hit example")
    attrs = raw.get("attrs") or {}
    if not isinstance(attrs, dict):
        raise CatalogError(f"{where}: attrs must be a mapping")
    return Entry(
        catalog=cat, name=name, code=code, codes=tuple(codes), kind=kind, severity=severity, cause=cause,
        role=role, description=str(raw.get("description") or "").strip(), keys=tuple(dict.fromkeys(texts + keys)),
        pattern=pattern, attrs=dict(attrs), hit=hit, miss=miss,
    )


def _minimal(keys: set[str]) -> list[str]:
    """Drop every key that contains another key (the shorter one already selects it)."""
    out: list[str] = []
    for k in sorted(keys, key=len):
        if not any(a in k for a in out):
            out.append(k)
    return sorted(out)


def parse_catalog(text: str, where: str, validate: bool = True) -> tuple[str, tuple[str, ...], list[Entry]]:
    import yaml  # here: a cached load() never needs it (0.03 s to import)

    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when built with it
    if not isinstance(doc, dict):
        raise CatalogError(f"{where}: a catalog file is a mapping")
    unknown = set(doc) - _CATALOG_KEYS
    if unknown:
        raise CatalogError(f"{where}: unknown top-level field(s) {sorted(unknown)}")
    cat = doc.get("catalog")
    if not isinstance(cat, str) or not cat:
        raise CatalogError(f"{where}: needs `catalog: <name>`")
    srcs = _as_list(doc.get("sources"), where, "sources")
    if not srcs:
        raise CatalogError(f"{where}: needs a `sources:` list (where the texts were transcribed from)")
    raw_entries = doc.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise CatalogError(f"{where}: needs a non-empty `entries:` list")
    wrap = _as_list(doc.get("wrap"), where, "wrap")
    wrap_patterns = doc.get("wrap_patterns") or []
    if not isinstance(wrap_patterns, list) or not all(isinstance(w, dict) and set(w) == {"pattern", "key"} for w in wrap_patterns):
        raise CatalogError(f"{where}: wrap_patterns is a list of {{pattern, key}}")
    entries = [_entry(cat, e, f"{where}: entries[{i}]", wrap, wrap_patterns, validate) for i, e in enumerate(raw_entries)]
    names = [e.name for e in entries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CatalogError(f"{where}: duplicate names {sorted(dup)}")
    return cat, tuple(srcs), entries


def build(files: list[tuple[str, str]], validate: bool = True) -> Catalogs:
    """Catalogs from (where, yaml text) pairs. ``validate`` compiles every entry's pattern
    now (tests, a site's own catalogs); the shipped set, validated by the tests, skips it."""
    entries: list[Entry] = []
    sources: dict[str, tuple[str, ...]] = {}
    for where, text in files:
        cat, srcs, es = parse_catalog(text, where, validate)
        if cat in sources:
            raise CatalogError(f"{where}: catalog {cat!r} defined twice")
        sources[cat] = srcs
        entries.extend(es)
    anchors = _minimal({k for e in entries for k in e.keys})
    return Catalogs(entries=tuple(entries), sources=sources, anchors=tuple(anchors), prefilter=_literal_trie(anchors))


_RX_META = set("\\.+*?()|[]{}^$#&-~")


def _esc(s: str) -> str:
    """Escape for Rust and Python alike: only ASCII punctuation gets a backslash (Rust
    rejects escapes of letters, digits and most non-ASCII)."""
    return "".join("\\" + c if c in _RX_META else c for c in s)


def _literal_trie(words: list[str]) -> str:
    """The literals as one trie-shaped alternation: ``Got (?:async event : |completion from
    peer)``. Same language as the flat union, but Python's backtracking engines try one
    branch per first character instead of one per literal (6x faster in ``regex`` on real
    log lines; Rust extracts the same literal set either way)."""
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        alts: list[str] = []
        end = False
        for ch in sorted(node):
            if ch == "":
                end = True
                continue
            run, child = _esc(ch), node[ch]
            while len(child) == 1 and "" not in child:
                ((c2, child),) = child.items()
                run += _esc(c2)
            alts.append(run + (emit(child) if set(child) != {""} else ""))
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and not end else "(?:" + "|".join(alts) + ")"
        return body + "?" if end else body

    return emit(trie)


# What a cached Catalogs may contain (crashscope.datacache unpickles nothing else).
_CACHE_CLASSES = frozenset({("crashscope.catalogs", "Catalogs"), ("crashscope.catalogs", "Entry")})


@functools.cache
def load() -> Catalogs:
    """The shipped catalogs. Built from the YAML once per content: the result is kept in the
    user's cache (:mod:`crashscope.datacache`), keyed by the YAML bytes and this module's
    source, which skips ~0.1 s of YAML parsing and trie building per process."""
    files = []
    root = resources.files("crashscope.catalogs")
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            files.append((f"crashscope/catalogs/{item.name}", item.read_text(encoding="utf-8")))
    if not files:
        raise CatalogError("no catalog files found in crashscope/catalogs/ (package data missing?)")
    from crashscope import datacache

    key = datacache.fingerprint([*datacache.source_of(__name__, "crashscope.schema"), *(p for f in files for p in f)])
    name = datacache.entry_name("catalogs", str(root))
    cached = datacache.get(name, key, _CACHE_CLASSES)
    if isinstance(cached, Catalogs):
        return cached
    # tests/test_catalogs.py builds the same files with validate=True
    cats = build(files, validate=False)
    datacache.put(name, key, cats)
    return cats


def _num(v: str) -> Any:
    if v.isdigit():
        return int(v)
    if v[:2] in ("0x", "0X"):
        try:
            return int(v, 16)
        except ValueError:
            return v
    return v


def match_text(text: str, catalogs: Catalogs | None = None) -> list[CatalogHit]:
    """Every catalog entry found anywhere in ``text`` (file order of entries)."""
    cats = catalogs or load()
    search = cats.quick.search
    m = search(text)
    if m is None:
        return []
    # Two minimal anchors never start at one position (one would be a prefix of the other,
    # which _minimal rules out), so searching again from each match's start + 1 (an
    # overlapped scan) finds every occurrence of each.
    found: set[str] = set()
    while m is not None:
        found.add(m.group())
        m = search(text, m.start() + 1)
    cand = sorted({i for a in found for i in cats.anchor_entries[a]})
    hits: list[CatalogHit] = []
    seen: set[tuple[str, str | None, str]] = set()
    for i in cand:
        e = cats.entries[i]
        m = e.rx.search(text)
        if m is None:
            continue
        attrs = dict(e.attrs)
        attrs.update({k: _num(v) for k, v in m.groupdict().items() if v is not None})
        code = e.code
        if code is None and isinstance(attrs.get("code"), int):
            code = attrs["code"]
        if e.codes and isinstance(code, int) and code not in e.codes:
            continue  # the number found is not one of this entry's codes
        # One hit per (catalog, cause, role) and line: "NVRM: Xid (...): 79, ..., GPU has fallen
        # off the bus." is one fact, not two. The first entry of the catalog file wins.
        key = (e.catalog, e.cause, e.role)
        if key in seen:
            continue
        seen.add(key)
        hits.append(CatalogHit(e.catalog, e.name, code, e.kind, e.severity, e.cause, e.role, m.span(), attrs))
    return hits


def prefilter() -> str:
    return load().prefilter


def __getattr__(name: str) -> Any:  # PREFILTER is computed on first use (loads the YAML once)
    if name == "PREFILTER":
        return load().prefilter
    raise AttributeError(name)


__all__ = ["CatalogHit", "CatalogError", "Catalogs", "Entry", "PREFILTER", "build", "load", "match_text", "prefilter"]
