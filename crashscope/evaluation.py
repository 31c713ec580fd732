"""Scoring verdicts against labelled corpora: recorded incidents and real public logs.

Two corpora of job directories carry their truth beside the logs:

* ``fixtures/recorded/<id>/truth.json``: a run of a real program (real Slurm, real
  torch.distributed) with a fault injected from outside (``docs/lab.md``): cause, culprit
  nodes and ranks, and the first failure (node, rank, time with a tolerance).
* ``tests/data/real/<id>/label.json``: a verbatim excerpt from a public incident thread,
  labelled from the thread's conclusion: cause and whatever culprit the excerpt shows.

The same scoring serves the tests (one test per case) and ``benchmarks/accuracy.py``.
A verdict is *confident-wrong* when its confidence is at least :data:`CONFIDENT` and its
cause is not the truth's: the one mistake the product must never make.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from crashscope.sources.base import short_host
from crashscope.verdict import CONFIDENT_LINE as CONFIDENT

# Causes that concern the whole job (the scheduler's decision, a clean run): a node named
# in the banner is where the message was printed, not a culprit, so no culprit is scored.
WHOLE_JOB_CAUSES = ("time_limit", "preemption", "none", "unknown")
TRUTH_FILES = {"recorded": "truth.json", "recorded_fr": "truth.json", "real": "label.json"}


@dataclass(frozen=True)
class Case:
    id: str
    corpus: str  # recorded | recorded_fr (Flight Recorder dumps, benchmarks/lab/fr_record.py) | real
    path: Path
    cause: str
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    first_failure: dict[str, Any] | None = None
    label: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Score:
    case: Case
    cause: str
    confidence: float
    cause_ok: bool
    node_ok: bool | None  # None: the truth names no node
    rank_ok: bool | None
    first_ok: bool | None

    @property
    def confident_wrong(self) -> bool:
        return not self.cause_ok and self.confidence >= CONFIDENT


def load_cases(root: Path, corpus: str) -> list[Case]:
    """Every case directory under ``root`` holding the corpus' truth file, by id."""
    name = TRUTH_FILES[corpus]
    cases = []
    for truth in sorted(Path(root).glob(f"*/{name}")):
        d = json.loads(truth.read_text(encoding="utf-8"))
        culprit = d.get("culprit") or {}
        cases.append(
            Case(
                id=str(d.get("id") or truth.parent.name),
                corpus=corpus,
                path=truth.parent,
                cause=str(d["cause"]),
                nodes=tuple(culprit.get("nodes") or ()),
                ranks=tuple(int(r) for r in culprit.get("ranks") or ()),
                first_failure=d.get("first_failure") if corpus.startswith("recorded") else None,
                label=d,
            )
        )
    return cases


def analyze_case(case: Case) -> dict[str, Any]:
    """The report (as a dict) on the case's logs alone: the truth file beside them would
    otherwise be read as one more log, and its quoted evidence line would be found."""
    from crashscope.pipeline import analyze

    with tempfile.TemporaryDirectory(prefix=f"crashscope-case-{case.id}-") as tmp:
        logs = Path(tmp) / case.id
        shutil.copytree(case.path, logs, symlinks=True, ignore=shutil.ignore_patterns(*TRUTH_FILES.values()))
        report, _, _ = analyze(logs)
        d = report.to_dict()
    d.get("analysis", {}).pop("root", None)
    return d


def score(case: Case, report: dict[str, Any]) -> Score:
    """Compare a report (the JSON contract as a dict) with a case's truth."""
    imp = report.get("implicated") or {}
    scored = case.cause not in WHOLE_JOB_CAUSES
    # Hosts are compared by short name, as crashscope reports them (torchrun prints FQDNs).
    node_ok = {short_host(n) for n in imp.get("nodes") or ()} == {short_host(n) for n in case.nodes} if case.nodes and scored else None
    rank_ok = set(imp.get("ranks") or ()) == set(case.ranks) if case.ranks and scored else None
    return Score(
        case=case,
        cause=str(report.get("cause")),
        confidence=float(report.get("confidence") or 0.0),
        cause_ok=report.get("cause") == case.cause,
        node_ok=node_ok,
        rank_ok=rank_ok,
        first_ok=_first_ok(case.first_failure, report.get("first_failure")),
    )


def _first_ok(want: dict[str, Any] | None, got: dict[str, Any] | None) -> bool | None:
    """Same node and rank as the truth says (where it says them), and a time within the
    truth's tolerance of the moment the fault happened."""
    if not want or not (want.get("node") or want.get("rank") is not None or want.get("time")):
        return None
    if not got:
        return False
    if want.get("node") and got.get("node") != want["node"]:
        return False
    if want.get("rank") is not None and got.get("rank") != want["rank"]:
        return False
    if want.get("time"):
        if not got.get("time"):
            return False
        dt = abs((_parse(got["time"]) - _parse(want["time"])).total_seconds())
        return dt <= float(want.get("tolerance_s", 30))
    return True


def _parse(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00"))


def summarize(scores: list[Score]) -> dict[str, Any]:
    """Totals of one corpus: cause, node, rank and first-failure accuracy where defined."""

    def rate(vals: Sequence[bool | None]) -> tuple[int, int]:
        got = [v for v in vals if v is not None]
        return sum(got), len(got)

    out: dict[str, Any] = {"cases": len(scores)}
    for key, vals in (
        ("cause", [s.cause_ok for s in scores]),
        ("node", [s.node_ok for s in scores]),
        ("rank", [s.rank_ok for s in scores]),
        ("first_failure", [s.first_ok for s in scores]),
    ):
        ok, n = rate(vals)
        out[key] = {"right": ok, "of": n}
    out["confident_wrong"] = sum(s.confident_wrong for s in scores)
    return out
