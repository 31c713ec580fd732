"""Goodlog corpus (Sigma): no stable rule of role "cause" may fire on a healthy run.

Runs over ``fixtures/jobs/healthy_*`` (written by the simulator). A known, accepted match
goes into ``rules/_known_false_positives.yaml`` (``rule-id: [healthy_scenario, ...]``),
never into code. Skipped while the fixtures or the ingest do not exist.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crashscope.engine import evaluate, load_rules
from crashscope.engine.load import REPO_ROOT

HEALTHY = sorted(p for p in (REPO_ROOT / "fixtures" / "jobs").glob("healthy_*") if p.is_dir())
KNOWN_FP_FILE = REPO_ROOT / "rules" / "_known_false_positives.yaml"


def _known_fps() -> dict[str, set[str]]:
    if not KNOWN_FP_FILE.exists():
        return {}
    data = yaml.safe_load(KNOWN_FP_FILE.read_text()) or {}
    return {str(k): set(v or ()) for k, v in data.items()}


@pytest.mark.parametrize("job", HEALTHY or [pytest.param(None, marks=pytest.mark.skip(reason="no fixtures/jobs/healthy_* yet"))],
                         ids=[p.name for p in HEALTHY] or None)
def test_no_stable_cause_rule_fires_on_healthy_run(job: Path) -> None:
    ingest = pytest.importorskip("crashscope.ingest").ingest
    events = ingest(job).events
    rules = [r for r in load_rules().rules if r.status == "stable" and r.role == "cause"]
    known = _known_fps()
    fired = [f for f in evaluate(events, rules) if job.name not in known.get(f.rule_id, set())]
    assert not fired, "\n".join(
        f"{f.rule_id}: {e.file}:{e.line}: {e.message[:160]}" for f in fired for e in f.evidence[:3]
    )
