"""The one result object every view (terminal, JSON, Markdown, HTML, tickets, the epilog)
renders. Field names of the contract part are exactly those of ``shared/taxonomy.md``."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Callable

SCHEMA_VERSION = "1"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _list(v: Any) -> list[Any]:
    """A JSON array as a list; anything else (a report file may hold anything) as []."""
    return list(v) if isinstance(v, (list, tuple)) else []


@dataclass(kw_only=True)
class EventRef:
    """A reference to one log line: ``file:line``, when (ISO UTC), on which node, rank and
    GPU (PCI bus id, index), from which source and of which kind, and the line's message.
    Each place of the report writes the keys it has always written (:meth:`to_dict` with
    that place's keys), so the JSON is unchanged; what a place does not write is None."""

    file: str | None = None
    line: int | None = None
    time: str | None = None
    node: str | None = None
    rank: int | None = None
    gpu: str | None = None
    gpu_index: int | None = None
    source: str | None = None
    kind: str | None = None
    message: str | None = None

    def to_dict(self, keys: tuple[str, ...]) -> dict[str, Any]:
        return {k: getattr(self, k) for k in keys}

    @staticmethod
    def ref_fields(d: dict[str, Any]) -> dict[str, Any]:
        """The :class:`EventRef` fields of a JSON mapping (``gpu``: a PCI id string, or the
        evidence form ``{"pci", "index"}``)."""
        gpu = d.get("gpu")
        out: dict[str, Any] = {
            "file": _str(d.get("file")), "line": _int(d.get("line")), "time": _str(d.get("time")), "node": _str(d.get("node")),
            "rank": _int(d.get("rank")), "source": _str(d.get("source")), "kind": _str(d.get("kind")), "message": _str(d.get("message")),
        }
        if isinstance(gpu, dict):
            out["gpu"], out["gpu_index"] = _str(gpu.get("pci")), _int(gpu.get("index"))
        else:
            out["gpu"], out["gpu_index"] = _str(gpu), _int(d.get("gpu_index"))
        return out

    @classmethod
    def from_dict(cls, d: Any) -> EventRef | None:
        return cls(**cls.ref_fields(d)) if isinstance(d, dict) else None


# The keys each place writes, in its order.
FIRST_FAILURE_KEYS = ("time", "node", "rank", "source", "message", "file", "line")
SYMPTOM_FIRST_KEYS = ("time", "node", "rank", "file", "line", "message")
EVENT_ROW_KEYS = ("time", "time_quality", "node", "rank", "gpu", "source", "kind", "severity", "message", "file", "line")


@dataclass(kw_only=True)
class EventRow(EventRef):
    """One timeline event as ``anomalies`` (with ``count``: how many lines of that kind and
    text) and ``timeline_excerpt`` write it: the reference plus the stamp's quality and the
    severity."""

    time_quality: str | None = None
    severity: str | None = None
    count: int | None = None

    def to_dict(self, keys: tuple[str, ...] = EVENT_ROW_KEYS) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in keys}
        if self.count is not None:
            d["count"] = self.count
        return d

    @classmethod
    def from_dict(cls, d: Any) -> EventRow | None:
        if not isinstance(d, dict):
            return None
        return cls(time_quality=_str(d.get("time_quality")), severity=_str(d.get("severity")), count=_int(d.get("count")), **cls.ref_fields(d))


@dataclass(kw_only=True)
class EvidenceItem(EventRef):
    """One line behind the verdict: the rule that matched it, for which cause, in which role."""

    rule: str
    cause: str
    file: str = ""
    message: str = ""
    role: str = "cause"  # cause | symptom | context
    # The lines around ``line`` in ``file`` ([{"line": n, "text": ...}], the evidence line
    # included), read back by the analysis for the HTML view; empty when not readable.
    context: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        gpu = None if self.gpu is None and self.gpu_index is None else {"pci": self.gpu, "index": self.gpu_index}
        return {"rule": self.rule, "cause": self.cause, "time": self.time, "node": self.node, "rank": self.rank,
                "file": self.file, "line": self.line, "message": self.message, "gpu": gpu, "role": self.role,
                "source": self.source, "kind": self.kind, "context": [dict(c) for c in self.context]}

    @classmethod
    def from_dict(cls, d: Any) -> EvidenceItem | None:
        if not isinstance(d, dict):
            return None
        ref = cls.ref_fields(d)
        ref["file"] = ref["file"] or ""
        ref["message"] = ref["message"] or ""
        ctx = [c for c in _list(d.get("context")) if isinstance(c, dict)]
        return cls(rule=str(d.get("rule") or ""), cause=str(d.get("cause") or "unknown"), role=str(d.get("role") or "cause"), context=ctx, **ref)


CO_OCCURRING_KEYS = ("cause", "rule", "nodes", "time", "file", "line", "score")


@dataclass(kw_only=True)
class CoOccurring(EventRef):
    """Another cause seen in the correlation window: its rule, nodes and score, and the
    first line (``file:line``, ``time``) of its finding."""

    cause: str
    rule: str
    nodes: list[str] = field(default_factory=list)
    score: float = 0.0

    def to_dict(self, keys: tuple[str, ...] = CO_OCCURRING_KEYS) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in keys}
        d["nodes"] = list(self.nodes)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> CoOccurring | None:
        if not isinstance(d, dict):
            return None
        score = d.get("score")
        return cls(cause=str(d.get("cause") or "unknown"), rule=str(d.get("rule") or ""), nodes=_list(d.get("nodes")),
                   score=score if isinstance(score, (int, float)) and not isinstance(score, bool) else 0.0, **cls.ref_fields(d))


@dataclass(kw_only=True)
class RankActivity(EventRef):
    """One rank's span (``Report.activity.ranks``): a reference to its last line of its own
    (``time`` is when it was written, JSON ``last``) and the time of its first (``first``)."""

    first: str | None = None

    def to_dict(self, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "first": self.first, "last": self.time, "kind": self.kind, "file": self.file, "line": self.line}

    @classmethod
    def from_dict(cls, d: Any) -> RankActivity | None:
        if not isinstance(d, dict):
            return None
        ref = cls.ref_fields(d)
        ref["time"] = _str(d.get("last"))
        return cls(first=_str(d.get("first")), **ref)


@dataclass
class HostActivity:
    """One host's facts (``Report.activity.hosts``): versions per component, GPUs seen,
    serious clock-slowdown reasons, Xids, the ranks it ran and their time span."""

    node: str
    versions: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    throttle: list[str] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    first: str | None = None
    last: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "versions": dict(self.versions), "gpus": self.gpus, "throttle": list(self.throttle),
                "xids": list(self.xids), "ranks": list(self.ranks), "first": self.first, "last": self.last}

    @classmethod
    def from_dict(cls, d: Any) -> HostActivity | None:
        if not isinstance(d, dict) or not isinstance(d.get("node"), str):
            return None
        raw = d.get("versions")
        versions = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(raw, dict) else {}
        return cls(node=d["node"], versions=versions, gpus=_int(d.get("gpus")) or 0, throttle=[t for t in _list(d.get("throttle")) if isinstance(t, str)],
                   xids=[x for x in _list(d.get("xids")) if _int(x) is not None], ranks=[x for x in _list(d.get("ranks")) if _int(x) is not None],
                   first=_str(d.get("first")), last=_str(d.get("last")))


@dataclass
class Activity:
    """Per rank and per host, from the timeline (the HTML view's picture and host table)."""

    ranks: list[RankActivity] = field(default_factory=list)
    hosts: list[HostActivity] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # A list of hosts, not a mapping by name: host names are values, so the string pass (redaction) maps them.
        return {"ranks": [r.to_dict() for r in self.ranks], "hosts": [h.to_dict() for h in self.hosts]}

    @classmethod
    def from_dict(cls, d: Any) -> Activity | None:
        if not isinstance(d, dict) or not d:
            return None
        return cls(ranks=[r for r in (RankActivity.from_dict(x) for x in _list(d.get("ranks"))) if r is not None],
                   hosts=[h for h in (HostActivity.from_dict(x) for x in _list(d.get("hosts"))) if h is not None])


@dataclass
class Implicated:
    """The culprit: nodes, ranks and GPUs (``{"node", "index", "pci"?}``)."""

    nodes: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "ranks": list(self.ranks), "gpus": [dict(g) if isinstance(g, dict) else g for g in self.gpus]}

    @classmethod
    def from_dict(cls, d: Any) -> Implicated:
        d = d if isinstance(d, dict) else {}
        return cls(nodes=_list(d.get("nodes")), ranks=_list(d.get("ranks")), gpus=_list(d.get("gpus")))


@dataclass
class SymptomGroup:
    """One collapsed symptom: the same kind and signature on many ranks, its first line,
    and the expected ranks that did not report it (the hang suspects)."""

    kind: str
    signature: str
    count: int = 0
    ranks: str = ""  # compressed, "0-3,5"
    n_ranks: int = 0
    hosts: list[str] = field(default_factory=list)
    first: EventRef = field(default_factory=EventRef)
    missing_ranks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "signature": self.signature, "count": self.count, "ranks": self.ranks, "n_ranks": self.n_ranks,
                "hosts": list(self.hosts), "first": self.first.to_dict(SYMPTOM_FIRST_KEYS), "missing_ranks": list(self.missing_ranks)}

    @classmethod
    def from_dict(cls, d: Any) -> SymptomGroup | None:
        if not isinstance(d, dict):
            return None
        return cls(kind=str(d.get("kind") or ""), signature=str(d.get("signature") or ""), count=_int(d.get("count")) or 0,
                   ranks=str(d.get("ranks") or ""), n_ranks=_int(d.get("n_ranks")) or 0, hosts=_list(d.get("hosts")),
                   first=EventRef.from_dict(d.get("first")) or EventRef(), missing_ranks=_list(d.get("missing_ranks")))


@dataclass
class HostSummary:
    """What one host contributed (``Coverage.hosts``): events, sources, ranks, time span."""

    events: int = 0
    sources: list[str] = field(default_factory=list)
    ranks: int = 0
    first: str | None = None
    last: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "sources": list(self.sources), "ranks": self.ranks, "first": self.first, "last": self.last}

    @classmethod
    def from_dict(cls, d: Any) -> HostSummary:
        d = d if isinstance(d, dict) else {}
        return cls(events=_int(d.get("events")) or 0, sources=_list(d.get("sources")), ranks=_int(d.get("ranks")) or 0,
                   first=_str(d.get("first")), last=_str(d.get("last")))


@dataclass
class Coverage:
    """How much of the job was read: files (recognized, unrecognized, unreadable), bytes,
    events, per host (keyed by host name, ``"?"`` for lines of no host), ranks seen of expected."""

    files: int = 0
    recognized: int = 0
    unrecognized: int = 0
    unreadable: int = 0
    bytes: int = 0
    events: int = 0
    hosts: dict[str, HostSummary] = field(default_factory=dict)
    ranks_seen: int = 0
    ranks_expected: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "recognized": self.recognized, "unrecognized": self.unrecognized, "unreadable": self.unreadable,
                "bytes": self.bytes, "events": self.events, "hosts": {h: s.to_dict() for h, s in self.hosts.items()},
                "ranks_seen": self.ranks_seen, "ranks_expected": self.ranks_expected}

    @classmethod
    def from_dict(cls, d: Any) -> Coverage | None:
        if not isinstance(d, dict) or not d:
            return None
        raw = d.get("hosts")
        hosts: dict[Any, Any] = raw if isinstance(raw, dict) else {}
        return cls(**{k: _int(d.get(k)) or 0 for k in ("files", "recognized", "unrecognized", "unreadable", "bytes", "events", "ranks_seen")},
                   hosts={str(h): HostSummary.from_dict(v) for h, v in hosts.items()}, ranks_expected=_int(d.get("ranks_expected")))


_ATOMS = frozenset((str, int, float, bool, type(None)))


def _copy(v: Any) -> Any:
    """``copy.deepcopy`` of a report field's plain data (dicts, lists, strings, numbers),
    walked directly: deepcopy's bookkeeping cost ~0.3 s on a 16,384-rank report's 37k file
    records. Anything else (a tuple, an object) is deepcopy's."""
    t = type(v)
    if t in _ATOMS:
        return v
    if t is dict:
        return {k: _copy(x) for k, x in v.items()}
    if t is list:
        return [_copy(x) for x in v]
    return copy.deepcopy(v)


@dataclass
class Report:
    job: dict[str, Any]
    cause: str = "unknown"
    confidence: float = 0.0
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    implicated: Implicated = field(default_factory=Implicated)
    first_failure: EventRef | None = None
    evidence: list[EvidenceItem] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    # Beyond the contract: what a person needs to trust or question the verdict.
    summary: str = ""
    missing: list[str] = field(default_factory=list)  # data whose absence lowers confidence
    coverage: Coverage | None = None  # None (JSON {}) until an analysis fills it
    symptoms: list[SymptomGroup] = field(default_factory=list)
    anomalies: list[EventRow] = field(default_factory=list)
    co_occurring: list[CoOccurring] = field(default_factory=list)
    classifier: dict[str, Any] | None = None
    clock: dict[str, Any] = field(default_factory=dict)
    timeline_excerpt: list[EventRow] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)  # tool version, bytes, seconds, root
    # The layer-by-layer check (GPU/driver parity, fabric, storage, scheduler, node-to-node,
    # GPU health): one row per layer, see docs/layers.md.
    layers: list[dict[str, Any]] = field(default_factory=list)
    # Added after the analysis by other commands: `crashscope repro` (the re-run of the suspect
    # collective) and the fleet history (earlier jobs that implicated the same culprit).
    repro: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    # Per rank and per host, from the timeline (the HTML view's picture and host table):
    # {"ranks": [{rank, node, first, last, kind, file, line}], "hosts": [{node, versions,
    # gpus, throttle, xids, first, last, ranks}]}.
    activity: Activity | None = None  # None (JSON {}) until an analysis fills it

    @property
    def fingerprint(self) -> str:
        """What makes two reports "the same incident" for tickets and the fleet history:
        the cause and the culprit (nodes, else GPUs, else ranks), order-free."""
        return fingerprint_of(self.cause, self.implicated)

    def to_dict(self) -> dict[str, Any]:
        ordered: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "first_failure":
                ordered[f.name] = v.to_dict(FIRST_FAILURE_KEYS) if v is not None else None
            elif f.name in ("coverage", "activity"):
                ordered[f.name] = v.to_dict() if v is not None else {}
            elif f.name in ("implicated",):
                ordered[f.name] = v.to_dict()
            elif f.name in ("evidence", "symptoms", "anomalies", "timeline_excerpt", "co_occurring"):
                ordered[f.name] = [x.to_dict() for x in v]
            else:
                ordered[f.name] = _copy(v)
        ordered["fingerprint"] = self.fingerprint
        return ordered

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        """The report a :meth:`to_dict` (or a report JSON file) describes; unknown keys are
        ignored, missing ones take their defaults, so older and newer reports load:
        ``Report.from_dict(r.to_dict()) == r``."""
        typed = ("evidence", "implicated", "first_failure", "coverage", "symptoms", "anomalies", "timeline_excerpt", "co_occurring", "activity")
        names = {f.name for f in fields(cls)}
        kw = {k: copy.deepcopy(v) for k, v in d.items() if k in names and k not in typed}
        kw.setdefault("job", {})
        evidence = [e for e in (EvidenceItem.from_dict(x) for x in _list(d.get("evidence"))) if e is not None]
        symptoms = [s for s in (SymptomGroup.from_dict(x) for x in _list(d.get("symptoms"))) if s is not None]
        anomalies, excerpt = ([e for e in (EventRow.from_dict(x) for x in _list(d.get(k))) if e is not None] for k in ("anomalies", "timeline_excerpt"))
        co = [c for c in (CoOccurring.from_dict(x) for x in _list(d.get("co_occurring"))) if c is not None]
        return cls(evidence=evidence, symptoms=symptoms, anomalies=anomalies, timeline_excerpt=excerpt, co_occurring=co, activity=Activity.from_dict(d.get("activity")), implicated=Implicated.from_dict(d.get("implicated")),
                   first_failure=EventRef.from_dict(d.get("first_failure")), coverage=Coverage.from_dict(d.get("coverage")), **kw)

    def map_strings(self, fn: Callable[[str], str]) -> Report:
        """A copy with ``fn`` applied to every string value (the hook for redaction)."""
        from crashscope.report.safe import map_strings

        return map_strings(self, fn)  # type: ignore[no-any-return]


def fingerprint_of(cause: str, implicated: Implicated | dict[str, list[Any]] | None) -> str:
    import hashlib

    imp = implicated.to_dict() if isinstance(implicated, Implicated) else implicated or {}
    culprit: list[str] = sorted(str(n) for n in imp.get("nodes") or [])
    if not culprit:
        culprit = sorted(
            str(g.get("serial") or g.get("pci_bus_id") or g) if isinstance(g, dict) else str(g) for g in imp.get("gpus") or []
        )
    if not culprit:
        culprit = [f"rank{r}" for r in sorted(str(r) for r in imp.get("ranks") or [])]
    text = cause + "|" + ",".join(culprit)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]
