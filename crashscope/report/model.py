"""The one result object every view (terminal, JSON, Markdown, HTML, tickets, the epilog)
renders. Field names of the contract part are exactly those of ``shared/taxonomy.md``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        ordered = {"schema_version": SCHEMA_VERSION}
        ordered.update(d)
        return ordered
