"""The one result object every view (terminal, JSON, Markdown, HTML, tickets, the epilog)
renders. Field names of the contract part are exactly those of ``shared/taxonomy.md``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

SCHEMA_VERSION = "1"


@dataclass
class EvidenceItem:
    rule: str
    cause: str
    time: str | None
    node: str | None
    rank: int | None
    file: str
    line: int | None
    message: str
    gpu: dict[str, Any] | None = None
    role: str = "cause"  # cause | symptom | context
    source: str | None = None
    kind: str | None = None
    # The lines around ``line`` in ``file`` ([{"line": n, "text": ...}], the evidence line
    # included), read back by the analysis for the HTML view; empty when not readable.
    context: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    job: dict[str, Any]
    cause: str = "unknown"
    confidence: float = 0.0
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    implicated: dict[str, list[Any]] = field(default_factory=lambda: {"nodes": [], "ranks": [], "gpus": []})
    first_failure: dict[str, Any] | None = None
    evidence: list[EvidenceItem] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    # Beyond the contract: what a person needs to trust or question the verdict.
    summary: str = ""
    missing: list[str] = field(default_factory=list)  # data whose absence lowers confidence
    coverage: dict[str, Any] = field(default_factory=dict)
    symptoms: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    co_occurring: list[dict[str, Any]] = field(default_factory=list)
    classifier: dict[str, Any] | None = None
    clock: dict[str, Any] = field(default_factory=dict)
    timeline_excerpt: list[dict[str, Any]] = field(default_factory=list)
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
    activity: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """What makes two reports "the same incident" for tickets and the fleet history:
        the cause and the culprit (nodes, else GPUs, else ranks), order-free."""
        return fingerprint_of(self.cause, self.implicated)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        ordered = {"schema_version": SCHEMA_VERSION}
        ordered.update(d)
        ordered["fingerprint"] = self.fingerprint
        return ordered

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        """The report a :meth:`to_dict` (or a report JSON file) describes; unknown keys are
        ignored, missing ones take their defaults, so older and newer reports load."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and k != "evidence"}
        ev_names = {f.name for f in fields(EvidenceItem)}
        evidence = []
        for e in d.get("evidence") or []:
            if isinstance(e, dict):
                item = {k: v for k, v in e.items() if k in ev_names}
                item.setdefault("rule", "")
                item.setdefault("cause", "unknown")
                item.setdefault("file", "")
                item.setdefault("message", "")
                for k in ("time", "node", "rank", "line"):
                    item.setdefault(k, None)
                evidence.append(EvidenceItem(**item))
        kw.setdefault("job", {})
        return cls(evidence=evidence, **kw)

    def map_strings(self, fn: Callable[[str], str]) -> Report:
        """A copy with ``fn`` applied to every string value (the hook for redaction)."""
        from crashscope.report.safe import map_strings

        return map_strings(self, fn)  # type: ignore[no-any-return]


def fingerprint_of(cause: str, implicated: dict[str, list[Any]] | None) -> str:
    import hashlib

    imp = implicated or {}
    culprit: list[str] = sorted(str(n) for n in imp.get("nodes") or [])
    if not culprit:
        culprit = sorted(
            str(g.get("serial") or g.get("pci_bus_id") or g) if isinstance(g, dict) else str(g) for g in imp.get("gpus") or []
        )
    if not culprit:
        culprit = [f"rank{r}" for r in sorted(str(r) for r in imp.get("ranks") or [])]
    text = cause + "|" + ",".join(culprit)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]
