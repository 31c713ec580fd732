"""Goodlog corpus (Sigma): no stable rule of role "cause" may fire on a healthy run.

Runs over ``fixtures/jobs/healthy_*`` (written by the simulator). A known, accepted match
goes into ``rules/_known_false_positives.yaml`` (``rule-id: [healthy_scenario, ...]``),
never into code.
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


def test_the_healthy_corpus_exists() -> None:
    assert len(HEALTHY) >= 2, "fixtures/jobs/healthy_* missing: regenerate with `crashscope simulate fixtures/jobs --corpus`"


@pytest.mark.parametrize("job", HEALTHY, ids=[p.name for p in HEALTHY])
def test_no_stable_cause_rule_fires_on_healthy_run(job: Path) -> None:
    from crashscope.ingest import ingest

    events = ingest(job).events
    rules = [r for r in load_rules().rules if r.status == "stable" and r.role == "cause"]
    known = _known_fps()
    fired = [f for f in evaluate(events, rules) if job.name not in known.get(f.rule_id, set())]
    assert not fired, "\n".join(
        f"{f.rule_id}: {e.file}:{e.line}: {e.message[:160]}" for f in fired for e in f.evidence[:3]
    )
