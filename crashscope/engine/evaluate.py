"""Evaluate rules over an events frame (``crashscope.schema.EVENT_SCHEMA``).

Per rule: filter the frame by the rule's kinds and sources in polars, compute one boolean
column per selection, keep the rows where ``condition`` holds, then apply the cross-event
constraints in Python over the (small) matched set:

* ``within`` / ``not_within``: keep / drop a matched event if an event of another selection
  occurs within ``seconds`` before/after it (on the same host/gpu/rank; when either event
  lacks that column, "same" means the same file of the same host, i.e. the same process log; ``same: pid``
  compares the process each event is about, ``attrs.pid`` else the ``pid`` column, and needs both). Events without a
  time are ordered by line number when both come from the same file; otherwise the order is
  unknown, which satisfies neither ``within`` nor ``not_within``'s exclusion, unless the window
  asks for no order and no distance (``direction: any`` without ``seconds``).
* ``min_ranks`` / ``min_fraction_of_ranks``: the matches must cover that many distinct ranks.
* ``differs_across_hosts: <attrs key>`` (+ ``group_by``): per group, hosts whose value differs
  from the value most hosts report (the minority) are the culprits.
* ``absent: <selection>``: ranks in ``0..expected_ranks-1`` with no event of the selection.
* ``detector: <name>``: a named Python check from :data:`DETECTORS` for statistics YAML cannot
  express (one slow rank, one hot GPU).

``expected_ranks`` defaults to the largest ``nranks`` of ``comm_init`` events, else the
highest rank seen + 1.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import polars as pl
import regex

from crashscope.patterns import compile_pattern
from crashscope.engine import condition as cond
from crashscope.engine.model import AttrTest, Evidence, Finding, Rule, Selection, Window
from crashscope.schema import one_of

log = logging.getLogger(__name__)

MAX_EVIDENCE = 10
_VERSION_HEAD = compile_pattern(r"\d+(?:\.\d+)*")


@lru_cache(maxsize=1)
def default_rules() -> tuple[Rule, ...]:
    from crashscope.engine.load import default_rule_set

    return tuple(default_rule_set().rules)


def evaluate(
    events: pl.DataFrame,
    rules: Sequence[Rule] | None = None,
    *,
    include_experimental: bool = False,
    expected_ranks: int | None = None,
    max_evidence: int = MAX_EVIDENCE,
) -> list[Finding]:
    """Run rules over ``events`` and return their findings, earliest first.

    Args:
        events: a frame in ``EVENT_SCHEMA``.
        rules: rules to run; default every rule under ``rules/``.
        include_experimental: also run ``experimental`` rules (never ``deprecated``).
        expected_ranks: world size, for ``absent`` and ``min_fraction_of_ranks``.
        max_evidence: evidence rows kept per finding.
    """
    rules = default_rules() if rules is None else rules
    if events.height == 0:
        return []
    ctx = _Context(events, expected_ranks)
    active = [
        r for r in rules
        if r.status != "deprecated" and (r.status != "experimental" or include_experimental) and ctx.may_match(r)
    ]
    # Which rules' condition holds on some row, for every rule in one polars call (its plans
    # run together); only those go on to the per-rule work. One query per rule and step
    # cost more than the matching itself on small jobs.
    hits = pl.collect_all([events.lazy().filter(ctx.plan(r).pre).select(ctx.plan(r).cond.any()) for r in active])
    out = []
    for rule, hit in zip(active, hits):
        if not hit.item():
            continue
        f = evaluate_rule(rule, events, ctx=ctx, max_evidence=max_evidence)
        if f is not None:
            out.append(f)
    out.sort(key=lambda f: (f.first_time is None, f.first_time or 0, f.rule_id))
    return out


def cause_readings(events: pl.DataFrame, rules: Sequence[Rule] | None = None) -> pl.DataFrame:
    """Which causes the stable cause rules read each event as, by their per-event test
    alone (kinds, sources, selections and condition; no windows, counts or detectors):
    ``(row, cause)`` pairs, ``row`` being the event's position in ``events``. The timeline
    asks this of the lines a catalog text also matched, to tell whether the other source's
    reading of the line bears the catalog's cause."""
    empty = pl.DataFrame(schema={"row": pl.UInt32, "cause": pl.String})
    rules = default_rules() if rules is None else rules
    if events.height == 0:
        return empty
    ctx = _Context(events, None)
    active = [
        r for r in rules
        if r.status == "stable" and r.role == "cause" and not r.detector and not r.absent and not r.differs_across_hosts
        and ctx.may_match(r)
    ]
    if not active:
        return empty
    base = events.lazy().with_row_index("row")
    parts = pl.collect_all([base.filter(ctx.plan(r).pre & ctx.plan(r).cond).select("row", pl.lit(r.cause).alias("cause")) for r in active])
    return pl.concat(parts).unique() if parts else empty


@dataclass(frozen=True)
class _Plan:
    """A rule's per-event test as polars expressions: ``pre`` (its kinds and sources),
    ``columns`` (one boolean ``_s_<name>`` per selection) and ``cond`` (the condition over
    the selections, inlined, for a frame without those columns)."""

    pre: pl.Expr
    columns: tuple[pl.Expr, ...]
    cond: pl.Expr


class _Context:
    """Facts about the whole frame that several rules need, computed once."""

    def __init__(self, events: pl.DataFrame, expected_ranks: int | None):
        self.events = events
        self._expected = expected_ranks
        self._rank_hosts: dict[int, set[str]] | None = None
        self._pairs: dict[str, set[str | None]] | None = None
        self._codes: dict[str, dict[str, int] | None] = {}
        self._plans: dict[int, _Plan] = {}

    def plan(self, rule: Rule) -> _Plan:
        p = self._plans.get(id(rule))
        if p is None:
            pre = _one_of(self.events, "kind", sorted(rule_kinds(rule)), self)
            if rule.sources:
                pre = pre & _one_of(self.events, "source", list(rule.sources), self)
            sel = {n: selection_expr(s) for n, s in rule.selections.items()}
            node = cond.parse(rule.condition, set(rule.selections))
            p = _Plan(pre, tuple(e.alias(f"_s_{n}") for n, e in sel.items()), _cond_expr(node, sel))
            self._plans[id(rule)] = p
        return p

    def enum_codes(self, col: str) -> dict[str, int] | None:
        """category -> physical code of an Enum column (None: not an Enum); read once (each
        ``DataFrame.schema`` builds every Enum's categories anew)."""
        if col not in self._codes:
            dtype = self.events.schema.get(col)
            self._codes[col] = {c: i for i, c in enumerate(dtype.categories.to_list())} if isinstance(dtype, pl.Enum) else None
        return self._codes[col]

    @property
    def kind_sources(self) -> dict[str, set[str | None]]:
        """kind -> the sources it comes from in this frame, from one query: a rule whose
        kinds and sources meet no row needs no query of its own (most rules, most jobs)."""
        if self._pairs is None:
            m: dict[str, set[str | None]] = defaultdict(set)
            df = self.events.select(pl.col("kind").cast(pl.String), pl.col("source").cast(pl.String)).unique()
            for k, s in df.iter_rows():
                if k is not None:
                    m[k].add(s)
            self._pairs = m
        return self._pairs

    def may_match(self, rule: Rule) -> bool:
        """False when no row has one of the rule's kinds (and sources): its filter would be empty."""
        pairs = self.kind_sources
        sources = set(rule.sources)
        for k in rule_kinds(rule):
            srcs = pairs.get(k)
            if srcs and (not sources or not sources.isdisjoint(srcs)):
                return True
        return False

    @property
    def expected_ranks(self) -> int | None:
        if self._expected is None:
            self._expected = infer_expected_ranks(self.events)
        return self._expected

    @property
    def rank_hosts(self) -> dict[int, set[str]]:
        if self._rank_hosts is None:
            m: dict[int, set[str]] = defaultdict(set)
            df = self.events.filter(pl.col("rank").is_not_null() & pl.col("host").is_not_null()).select("rank", "host").unique()
            for r, h in df.iter_rows():
                m[r].add(h)
            self._rank_hosts = m
        return self._rank_hosts


def infer_expected_ranks(events: pl.DataFrame) -> int | None:
    from crashscope.schema import world_size

    return world_size(events)


# --- per-event selections ---------------------------------------------------------------------


def _attr_expr(t: AttrTest) -> pl.Expr:
    raw = pl.col("attrs").str.json_path_match(f"$.{t.key}")
    if t.op == "exists":
        return raw.is_not_null() if t.value in (True, None) else raw.is_null()
    if t.op in ("gte", "lte"):
        num = raw.cast(pl.Float64, strict=False)
        return (num >= float(t.value)) if t.op == "gte" else (num <= float(t.value))
    if t.op == "re":
        return raw.str.contains(str(t.value)).fill_null(False)
    if t.op == "contains":
        return raw.str.contains(str(t.value), literal=True).fill_null(False)
    values = t.value if t.op == "in" else [t.value]
    # string values in one is_in: the JSON path is read once, not once per value
    strs = [v for v in values if isinstance(v, str)]
    parts = ([(raw.is_in(strs)).fill_null(False)] if len(strs) > 1 else []) + [_equals(raw, v) for v in values if len(strs) <= 1 or not isinstance(v, str)]
    e = parts[0]
    for p in parts[1:]:
        e = e | p
    return e


def _equals(raw: pl.Expr, v: Any) -> pl.Expr:
    if isinstance(v, bool):
        return (raw.str.to_lowercase() == ("true" if v else "false")).fill_null(False)
    if isinstance(v, (int, float)):
        return (raw.cast(pl.Float64, strict=False) == float(v)).fill_null(False)
    return (raw == str(v)).fill_null(False)


def selection_expr(sel: Selection) -> pl.Expr:
    e = pl.lit(True)
    if sel.kinds:
        e = e & one_of("kind", sel.kinds)
    if sel.sources:
        e = e & one_of("source", sel.sources)
    if sel.severity:
        e = e & one_of("severity", sel.severity)
    for t in sel.attrs:
        e = e & _attr_expr(t)
    if sel.message_re:
        any_re = pl.lit(False)
        for pat in sel.message_re:
            any_re = any_re | pl.col("message").str.contains(pat).fill_null(False)
        e = e & any_re
    if sel.message_contains:
        e = e & pl.col("message").str.contains_any(list(sel.message_contains)).fill_null(False)
    return e.fill_null(False)


def _cond_expr(node: cond.Node, inline: dict[str, pl.Expr] | None = None) -> pl.Expr:
    """The condition over the ``_s_<name>`` columns, or over the selections' own
    expressions when ``inline`` maps names to them."""
    if isinstance(node, str):
        return inline[node] if inline is not None else pl.col(f"_s_{node}")
    op = node[0]
    if op == "not":
        return ~_cond_expr(node[1], inline)
    a, b = _cond_expr(node[1], inline), _cond_expr(node[2], inline)
    return (a & b) if op == "and" else (a | b)


def rule_kinds(rule: Rule) -> set[str]:
    kinds = set(rule.kinds)
    for s in rule.selections.values():
        kinds.update(s.kinds)
    return kinds


# --- one rule ---------------------------------------------------------------------------------


def evaluate_rule(
    rule: Rule,
    events: pl.DataFrame,
    *,
    expected_ranks: int | None = None,
    ctx: _Context | None = None,
    max_evidence: int = MAX_EVIDENCE,
) -> Finding | None:
    """Evaluate one rule; None when it does not fire."""
    ctx = ctx or _Context(events, expected_ranks)
    if not ctx.may_match(rule):
        return None
    plan = ctx.plan(rule)
    frame = events.filter(plan.pre)
    if frame.height == 0:
        return None
    frame = frame.with_row_index("_i").with_columns(pl.col("time").cast(pl.Int64).alias("_t"), *plan.columns)
    node = cond.parse(rule.condition, set(rule.selections))
    matched = frame.filter(_cond_expr(node))
    if matched.height == 0:
        return None
    # A detector without windows reads the matched frame itself: its rows as dicts and back
    # into a frame cost ~11 s for 737k telemetry rows at 16,384 ranks (gpu-temperature-outlier).
    whole = bool(rule.detector) and not rule.within and not rule.not_within
    if rule.differs_across_hosts and not rule.detector and not rule.within and not rule.not_within \
            and not _may_drift(matched, rule.differs_across_hosts, rule.group_by):
        return None  # what _drift would find, from the distinct values alone (most jobs: no drift)
    rows = [] if whole else _dicts(matched, rule)
    for w in rule.within:
        rows = _window(rows, frame, w, keep=True)
    for w in rule.not_within:
        rows = _window(rows, frame, w, keep=False)
    if not rows and not whole:
        return None

    hosts: list[str] | None = None
    ranks: list[int] | None = None
    if rule.detector:
        det = DETECTORS.get(rule.detector)
        if det is None:
            log.warning("rule %s: unknown detector %r", rule.id, rule.detector)
            return None
        res = det(matched if whole else pl.DataFrame(rows, schema=matched.schema), ctx, dict(rule.detector_args))
        if res is None:
            return None
        rows, hosts, ranks = res.rows, res.hosts, res.ranks
        if not rows:
            return None

    distinct_ranks = {r["rank"] for r in rows if r["rank"] is not None}
    if rule.min_ranks and len(distinct_ranks) < rule.min_ranks:
        return None
    if rule.min_fraction_of_ranks:
        n = ctx.expected_ranks
        if not n or len(distinct_ranks) / n < rule.min_fraction_of_ranks:
            return None

    if rule.differs_across_hosts:
        res2 = _drift(rows, rule.differs_across_hosts, rule.group_by)
        if res2 is None:
            return None
        rows, hosts = res2
    if rule.absent:
        n = ctx.expected_ranks
        reporting = {r["rank"] for r in frame.filter(pl.col(f"_s_{rule.absent}")).iter_rows(named=True) if r["rank"] is not None}
        if not n or not reporting:
            return None
        missing = sorted(set(range(n)) - reporting)
        if not missing:
            return None
        if rule.culprit == "absent_ranks":
            ranks = missing
            hosts = sorted({h for r in missing for h in ctx.rank_hosts.get(r, ())})

    if rule.culprit == "named_ranks":
        named = sorted({int(x) for r in rows for k in rule.ranks_from for x in _int_list(_attrs(r).get(k))})
        if named:
            ranks = named
            hosts = sorted({h for x in named for h in ctx.rank_hosts.get(x, ())})

    rows.sort(key=_sort_key)
    return _finding(rule, rows, hosts, ranks, max_evidence)


# What the per-rule work reads of a matched row (evidence, windows, culprits, attrs); a
# detector gets whole rows. Turning 24k rows' every column into Python objects (datetimes
# first) cost more than the rest of the rule.
_ROW_COLUMNS = ("_i", "_t", "host", "rank", "gpu", "gpu_index", "pid", "file", "line", "source", "kind", "message", "attrs")


def _dicts(matched: pl.DataFrame, rule: Rule) -> list[dict[str, Any]]:
    if rule.detector:
        return matched.to_dicts()
    keep = [*_ROW_COLUMNS, *(k for k in rule.group_by if k in matched.columns and k not in _ROW_COLUMNS)]
    return matched.select(keep).to_dicts()


def _one_of(events: pl.DataFrame, col: str, values: list[str], ctx: _Context | None = None) -> pl.Expr:
    """``col`` is one of ``values``: on an Enum column by its categories' codes (casting 700k
    rows to strings for each of 80 rules cost ~1.7 s at 16,384 ranks); a value the Enum does
    not know matches nothing, as it would as a string."""
    codes = (ctx or _Context(events, None)).enum_codes(col)
    if codes is not None:
        known = sorted({codes[v] for v in values if v in codes})
        return pl.col(col).to_physical().is_in(pl.Series(known, dtype=pl.UInt32).implode())
    return pl.col(col).cast(pl.String).is_in(values)


def _sort_key(r: dict[str, Any]) -> tuple:
    t = r["_t"]
    return (t is None, t or 0, r["file"] or "", r["line"] or 0)


def _order(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Seconds from a to b (b - a), 0.0 when only the line order is known but b follows a
    in the same file (sign kept via ±1e-9), None when unknown."""
    if a["_t"] is not None and b["_t"] is not None:
        return (b["_t"] - a["_t"]) / 1e9
    if a["file"] == b["file"] and a["line"] is not None and b["line"] is not None:
        return 1e-9 if b["line"] > a["line"] else (-1e-9 if b["line"] < a["line"] else 0.0)
    return None


def _about_pid(r: dict[str, Any]) -> int | None:
    """The process an event is about: ``attrs.pid`` (the worker torchrun signalled or reports on,
    a catalog text's ``(pid: N)``) before the ``pid`` column (which may be the logging agent's)."""
    v = _attrs(r).get("pid")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    return r.get("pid")


def _window(rows: list[dict[str, Any]], frame: pl.DataFrame, w: Window, *, keep: bool) -> list[dict[str, Any]]:
    cols = ["_i", "_t", "file", "line", "host", "gpu", "rank", *(["pid", "attrs"] if w.same == "pid" else [])]
    refs = frame.filter(pl.col(f"_s_{w.selection}")).select(cols).to_dicts()
    out = []
    for m in rows:
        hit = False
        for r in refs:
            if r["_i"] == m["_i"]:
                continue
            if w.same == "pid":
                # A pid names a process on one host only, and only when both events name it.
                pm, pr = _about_pid(m), _about_pid(r)
                if pm is None or pm != pr:
                    continue
                if (r["host"] != m["host"]) if (m["host"] is not None and r["host"] is not None) else (r["file"] != m["file"]):
                    continue
            elif w.same:
                if m[w.same] is not None and r[w.same] is not None:
                    if r[w.same] != m[w.same]:
                        continue
                elif (r["file"], r["host"]) != (m["file"], m["host"]):  # unknown rank/gpu: same log file
                    continue
            d = _order(m, r)
            if d is None:
                if w.direction == "any" and w.seconds is None:
                    hit = True  # neither order nor distance asked for: that the event exists is enough
                    break
                continue
            if w.direction == "after" and d < 0 or w.direction == "before" and d > 0:
                continue
            if w.seconds is not None and m["_t"] is not None and r["_t"] is not None and abs(d) > w.seconds:
                continue
            hit = True
            break
        if hit == keep:
            out.append(m)
    return out


def _group(r: dict[str, Any], group_by: tuple[str, ...]) -> str:
    a = _attrs(r)
    return "|".join(str(r[k]) if k in r and not k.startswith("_") else str(a.get(k)) for k in group_by)


def _drift_facts(key: str, group_by: tuple[str, ...], cols: list[str]) -> Callable[[dict[str, Any]], tuple[str, str | None]]:
    """A row's (group, normalized value) for :func:`_drift`. They depend on its attrs text
    and its group_by columns (``cols``) alone: each distinct combination is decoded once
    (30k version rows at 16,384 ranks hold ~15k distinct attrs)."""
    memo: dict[tuple[Any, ...], tuple[str, str | None]] = {}

    def facts(r: dict[str, Any]) -> tuple[str, str | None]:
        k = (r["attrs"], *(r[c] for c in cols))
        v = memo.get(k)
        if v is None:
            val = _attrs(r).get(key)
            norm = None
            if val is not None:
                m = _VERSION_HEAD.match(str(val).strip())
                norm = m.group(0) if m else str(val).strip()
            v = memo[k] = (_group(r, group_by), norm)
        return v

    return facts


def _may_drift(matched: pl.DataFrame, key: str, group_by: tuple[str, ...]) -> bool:
    """Whether :func:`_drift` over the rows of ``matched`` finds a group with two values:
    decided by the distinct (attrs, group_by columns) of the rows that name a host, without
    turning every row into a dict (47k version rows at 16,384 ranks: ~0.6 s)."""
    cols = [k for k in group_by if k in matched.columns and not k.startswith("_")]
    facts = _drift_facts(key, group_by, cols)
    first: dict[str, str] = {}
    for r in matched.filter(pl.col("host").is_not_null()).select("attrs", *cols).unique().to_dicts():
        g, norm = facts(r)
        if norm is not None and first.setdefault(g, norm) != norm:
            return True
    return False


def _drift(rows: list[dict[str, Any]], key: str, group_by: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]] | None:
    groups: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # group -> value -> hosts
    cols = [k for k in group_by if rows and k in rows[0] and not k.startswith("_")]
    facts = _drift_facts(key, group_by, cols)
    for r in rows:
        g, norm = facts(r)
        host = r["host"]
        if norm is None or host is None:
            continue
        groups[g][norm].add(host)
    culprit_hosts: set[str] = set()
    keep_groups: dict[str, set[str]] = {}
    for g, vals in groups.items():
        if len(vals) < 2:
            continue
        counts = Counter({v: len(h) for v, h in vals.items()})
        top = max(counts.values())
        majority = [v for v, c in counts.items() if c == top]
        # a tie has no majority: every host is suspect
        minority = [v for v in vals if v not in majority] if len(majority) == 1 else list(vals)
        hs = set().union(*(vals[v] for v in minority))
        culprit_hosts |= hs
        keep_groups[g] = hs | (vals[majority[0]] if len(majority) == 1 else set())
    if not culprit_hosts:
        return None
    out, seen_majority = [], set()
    for r in rows:
        g = facts(r)[0]
        if g not in keep_groups:
            continue
        if r["host"] in culprit_hosts:
            out.append(r)
        elif g not in seen_majority:  # one reference row of the majority per group
            seen_majority.add(g)
            out.append(r)
    return out, sorted(culprit_hosts)


def _int_list(v: Any) -> list[int]:
    if isinstance(v, bool) or v is None:
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, str):
        return [int(x) for x in regex.findall(r"\d+", v)]
    if isinstance(v, list):
        return [x for item in v for x in _int_list(item)]
    return []


def _attrs(r: dict[str, Any]) -> dict[str, Any]:
    if "_a" not in r:
        try:
            v = json.loads(r["attrs"]) if r["attrs"] else {}
        except (ValueError, TypeError):
            v = {}
        r["_a"] = v if isinstance(v, dict) else {}
    return r["_a"]


def _finding(rule: Rule, rows: list[dict[str, Any]], hosts: list[str] | None, ranks: list[int] | None, cap: int) -> Finding:
    if rule.culprit == "none":  # job-level evidence (scheduler decisions): nothing to implicate
        hosts, ranks, gpus = [], [], []
    elif rule.culprit == "earliest":
        # the earliest event names the culprit; a field it lacks comes from the next earliest
        # row that has it (a traceback line without a rank prefix, a WARN without a host)
        hosts = _uniq(r["host"] for r in rows)[:1] if hosts is None else hosts
        ranks = _uniq(r["rank"] for r in rows)[:1] if ranks is None else ranks
        gpus = _uniq((r["host"], r["gpu"], r["gpu_index"]) for r in rows if r["gpu"] is not None or r["gpu_index"] is not None)[:1]
    else:
        if hosts is None:
            hosts = _uniq(r["host"] for r in rows)
        if ranks is None:
            ranks = _uniq(r["rank"] for r in rows)
        host_set = set(hosts)
        gpus = _uniq(
            (r["host"], r["gpu"], r["gpu_index"])
            for r in rows
            if (r["gpu"] is not None or r["gpu_index"] is not None) and r["host"] in host_set
        )
    ev = tuple(
        Evidence(
            time=r["_t"], host=r["host"], rank=r["rank"], gpu=r["gpu"], gpu_index=r["gpu_index"],
            file=r["file"] or "", line=r["line"], source=str(r["source"]), kind=str(r["kind"]), message=r["message"] or "",
        )
        for r in rows[:cap]
    )
    times = [r["_t"] for r in rows if r["_t"] is not None]
    return Finding(
        rule_id=rule.id, title=rule.title, cause=rule.cause, role=rule.role, status=rule.status, weight=rule.weight,
        first_time=min(times) if times else None, count=len(rows), hosts=tuple(hosts), ranks=tuple(ranks),
        gpus=tuple(gpus), evidence=ev, explanation=rule.explanation, actions=rule.actions,
    )


def _uniq(it: Any) -> list[Any]:
    seen: dict[Any, None] = {}
    for x in it:
        if x is not None and x not in seen:
            seen[x] = None
    return list(seen)


# --- detectors: statistics YAML cannot express -------------------------------------------------


@dataclass
class DetectorResult:
    rows: list[dict[str, Any]]
    hosts: list[str] | None = None
    ranks: list[int] | None = None


Detector = Callable[[pl.DataFrame, _Context, dict[str, Any]], DetectorResult | None]


def _num(df: pl.DataFrame, key: str) -> pl.Series:
    return df["attrs"].str.json_path_match(f"$.{key}").cast(pl.Float64, strict=False)


def slow_rank(df: pl.DataFrame, ctx: _Context, args: dict[str, Any]) -> DetectorResult | None:
    """One rank's median ``train_step`` ``step_ms`` is ``factor`` (default 1.5) times the median
    of all ranks' medians, with at least ``min_ranks`` (3) ranks and ``min_steps`` (3) steps each.
    A straggler is usually a throttled or faulty GPU; all ranks of a synchronous job are
    otherwise equally fast, so a relative threshold needs no per-model tuning."""
    factor = float(args.get("factor", 1.5))
    min_steps = int(args.get("min_steps", 3))
    d = df.with_columns(_num(df, args.get("key", "step_ms")).alias("_v")).filter(pl.col("_v").is_not_null() & pl.col("rank").is_not_null())
    per = d.group_by("rank").agg(pl.col("_v").median().alias("med"), pl.len().alias("n")).filter(pl.col("n") >= min_steps)
    if per.height < int(args.get("min_ranks", 3)):
        return None
    overall = float(per["med"].median())  # type: ignore[arg-type]
    slow = per.filter(pl.col("med") > factor * overall)["rank"].to_list()
    if not slow or len(slow) > per.height // 2:
        return None
    rows = d.filter(pl.col("rank").is_in(slow)).drop("_v").to_dicts()
    return DetectorResult(rows, ranks=sorted(slow))


def hot_gpu(df: pl.DataFrame, ctx: _Context, args: dict[str, Any]) -> DetectorResult | None:
    """GPUs whose peak ``temperature`` is at least ``min_temp`` (default 85 °C) and ``delta``
    (default 10 °C) above the median peak of all GPUs (at least ``min_gpus``=2 GPUs seen).
    Data-centre GPUs start thermal slowdown near 85-90 °C; a GPU far hotter than its peers
    points to cooling, not to the workload."""
    key = args.get("key", "temperature")
    d = df.with_columns(_num(df, key).alias("_v")).filter(pl.col("_v").is_not_null())
    d = d.with_columns(pl.concat_str([pl.col("host").fill_null("?"), pl.col("gpu").fill_null(""), pl.col("gpu_index").cast(pl.String).fill_null("")], separator="|").alias("_g"))
    per = d.group_by("_g").agg(pl.col("_v").max().alias("peak"))
    if per.height < int(args.get("min_gpus", 2)):
        return None
    med = float(per["peak"].median())  # type: ignore[arg-type]
    hot = per.filter((pl.col("peak") >= float(args.get("min_temp", 85))) & (pl.col("peak") >= med + float(args.get("delta", 10))))["_g"].to_list()
    if not hot:
        return None
    rows = d.filter(pl.col("_g").is_in(hot)).sort("_v", descending=True).drop("_v", "_g").to_dicts()
    return DetectorResult(rows)


def odd_collective(df: pl.DataFrame, ctx: _Context, args: dict[str, Any]) -> DetectorResult | None:
    """The ranks whose collective differs from what most ranks ran. Each mismatch report
    says "Rank A is running <op>, but Rank B is running <op>" (attrs ``ranks``/``ops``);
    every rank reports its own side, so a vote over all reports leaves the odd ones out.
    A rank's own fingerprint is taken over what its peers' reports say of it: the peer's
    side is decoded from what the wrapper gathered, and a barrier-bound rank's came out as
    another op in a recorded torch 2.13.0 run (its own report said BARRIER, three peers'
    REDUCE). Without ops to compare, every named rank stays a culprit."""
    votes: dict[int, Counter[str]] = defaultdict(Counter)
    own: dict[int, str] = {}
    for a in df["attrs"].drop_nulls().to_list():
        d = _attrs({"attrs": a})
        for i, (r, op) in enumerate(zip(_int_list(d.get("ranks")), d.get("ops") or [])):
            if op is None:
                continue
            if i == 0:
                own.setdefault(r, str(op))
            votes[r][str(op)] += 1
    op_of = {r: own.get(r) or c.most_common(1)[0][0] for r, c in votes.items()}
    if len(set(op_of.values())) < 2:
        return DetectorResult(df.to_dicts())
    tally = Counter(op_of.values())
    top, n_top = tally.most_common(1)[0]
    if list(tally.values()).count(n_top) > 1:
        return DetectorResult(df.to_dicts())  # a tie names no side
    odd = sorted(r for r, op in op_of.items() if op != top)
    rows = sorted(df.to_dicts(), key=lambda r: (r["rank"] not in odd,))
    return DetectorResult(rows, hosts=sorted({h for r in odd for h in ctx.rank_hosts.get(r, ())}), ranks=odd)


DETECTORS: dict[str, Detector] = {"slow_rank": slow_rank, "hot_gpu": hot_gpu, "odd_collective": odd_collective}


# --- inline examples ------------------------------------------------------------------------


def example_events(example: Any) -> pl.DataFrame:
    """Parse an inline rule example (``tests.hit``/``tests.miss`` item) like the ingest does."""
    from crashscope.schema import EVENT_SCHEMA
    from crashscope.testing import parse_text

    frames = []
    for i, (source, lines, host, rank) in enumerate(example.inputs):
        df, _ = parse_text(source, "\n".join(lines) + "\n", name=f"example{i}.log", host_hint=host, rank_hint=rank)
        frames.append(df)
    return pl.concat(frames) if frames else pl.DataFrame(schema=EVENT_SCHEMA)


def run_example(rule: Rule, example: Any) -> tuple[pl.DataFrame, Finding | None]:
    events = example_events(example)
    if events.height == 0:
        return events, None
    return events, evaluate_rule(rule, events, expected_ranks=example.expected_ranks)
