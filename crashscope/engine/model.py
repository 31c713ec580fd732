"""Value objects of the rule engine: rules as loaded from YAML, and the findings they yield.

A rule file (``rules/<cause_family>/<source>_<symptom>.yaml``) becomes one :class:`Rule`.
Its ``match`` block holds named :class:`Selection` s (per-event tests), a boolean
``condition`` over them, and optional cross-event constraints (:class:`Window`,
``min_ranks``, ``differs_across_hosts``, ``absent``, ``detector``). Evaluating a rule
over an events frame yields at most one :class:`Finding`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

STATUSES: tuple[str, ...] = ("experimental", "stable", "deprecated")
ROLES: tuple[str, ...] = ("cause", "symptom", "context")
CULPRITS: tuple[str, ...] = ("event", "minority", "absent_ranks", "earliest", "named_ranks", "none")
ATTR_OPS: tuple[str, ...] = ("equals", "in", "gte", "lte", "exists", "re", "contains")
SAME_KEYS: tuple[str, ...] = ("host", "gpu", "rank", "pid")
DIRECTIONS: tuple[str, ...] = ("before", "after", "any")


@dataclass(frozen=True, slots=True)
class AttrTest:
    """One test on ``attrs.<key>``: ``op`` is one of :data:`ATTR_OPS`."""

    key: str
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class Selection:
    """Per-event test; every listed field must hold (AND). Lists inside a field are OR."""

    name: str
    kinds: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    severity: tuple[str, ...] = ()
    attrs: tuple[AttrTest, ...] = ()
    message_re: tuple[str, ...] = ()  # any of them (searched, case-sensitive unless (?i))
    message_contains: tuple[str, ...] = ()  # any of them


@dataclass(frozen=True, slots=True)
class Window:
    """Keep (``within``) or drop (``not_within``) a matched event depending on whether an
    event of ``selection`` occurs ``seconds`` before/after it (None: any distance), on the
    same host/gpu/rank when ``same`` is set."""

    selection: str
    seconds: float | None = None
    direction: str = "any"
    same: str | None = None


@dataclass(frozen=True, slots=True)
class Example:
    """One inline test input: lines of one or more sources, parsed like the ingest does."""

    inputs: tuple[tuple[str, tuple[str, ...], str | None, int | None], ...]  # (source, lines, host_hint, rank_hint)
    expected_ranks: int | None = None


@dataclass(frozen=True, slots=True)
class BundleTest:
    path: str
    expect: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RuleTests:
    hit: tuple[Example, ...] = ()
    miss: tuple[Example, ...] = ()
    bundles: tuple[BundleTest, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    id: str
    title: str
    status: str
    description: str
    cause: str
    role: str
    weight: float
    severity: str
    sources: tuple[str, ...]
    kinds: tuple[str, ...]
    selections: Mapping[str, Selection]
    condition: str
    within: tuple[Window, ...] = ()
    not_within: tuple[Window, ...] = ()
    min_ranks: int | None = None
    min_fraction_of_ranks: float | None = None
    differs_across_hosts: str | None = None  # attrs key whose value must agree across hosts
    group_by: tuple[str, ...] = ()  # attrs keys or columns grouping the comparison (component, source)
    ranks_from: tuple[str, ...] = ()  # attrs keys holding rank lists, for culprit: named_ranks
    absent: str | None = None  # selection name: ranks that did NOT report it are the culprit
    detector: str | None = None  # name in evaluate.DETECTORS
    detector_args: Mapping[str, Any] = field(default_factory=dict)
    culprit: str = "event"
    explanation: str = ""
    actions: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    falsepositives: tuple[str, ...] = ()
    tests: RuleTests = field(default_factory=RuleTests)
    path: str = ""
    lines: Mapping[str, int] = field(default_factory=dict)  # dotted key -> 1-based line

    def line_of(self, key: str = "id") -> int:
        """Line of ``key`` (dotted) in the rule file, or of its closest parent, or 1."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return self.lines.get("id", 1)

    def where(self, key: str = "id") -> str:
        return f"{self.path}:{self.line_of(key)}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One event row that supports a finding."""

    time: int | None  # UTC ns
    host: str | None
    rank: int | None
    gpu: str | None
    gpu_index: int | None
    file: str
    line: int | None
    source: str
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    title: str
    cause: str  # taxonomy label
    role: str  # cause | symptom | context
    status: str  # experimental | stable
    weight: float  # 0..1: how strongly this rule alone supports the cause
    first_time: int | None  # earliest evidence time (UTC ns)
    count: int  # matching events (before capping evidence)
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    gpus: tuple[tuple[str, str | None, int | None], ...]  # culprit (host, pci, index)
    evidence: tuple[Evidence, ...]  # first N by time, then file/line
    explanation: str
    actions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Issue:
    """A problem found in a rule file. ``path:line: message (fix: ...)``."""

    path: str
    line: int
    rule_id: str | None
    check: str  # validator or loader check name
    severity: str  # error | warning
    message: str
    fix: str = ""

    def __str__(self) -> str:
        fix = f" Fix: {self.fix}" if self.fix else ""
        rid = f" [{self.rule_id}]" if self.rule_id else ""
        return f"{self.path}:{self.line}: {self.severity}: {self.check}{rid}: {self.message}.{fix}"
