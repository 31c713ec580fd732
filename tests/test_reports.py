"""Golden snapshots of every view for every fixture scenario (update: --update-goldens).

The JSON view must also keep the contract of shared/taxonomy.md in update mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crashscope.pipeline import analyze
from crashscope.report.model import Report
from crashscope.report.render import render_json, render_markdown, render_terminal
from crashscope.schema import CAUSES

ROOT = Path(__file__).resolve().parent.parent
JOBS = sorted(p for p in (ROOT / "fixtures" / "jobs").iterdir() if p.is_dir()) if (ROOT / "fixtures" / "jobs").is_dir() else []
GOLDEN = Path(__file__).parent / "golden" / "reports"
CONTRACT_KEYS = ["schema_version", "job", "cause", "confidence", "alternatives", "implicated", "first_failure", "evidence", "actions", "warnings", "sources"]


def _stable(report) -> None:  # type: ignore[no-untyped-def]
    # Run-dependent facts (wall time, absolute paths) are not part of a snapshot.
    report.analysis = {k: v for k, v in report.analysis.items() if k not in ("seconds", "root", "stage_seconds")}


def _check_contract(d: dict) -> None:
    assert all(k in d for k in CONTRACT_KEYS)
    assert d["cause"] in CAUSES
    assert isinstance(d["implicated"]["nodes"], list) and isinstance(d["implicated"]["ranks"], list) and isinstance(d["implicated"]["gpus"], list)
    for e in d["evidence"]:
        assert e["file"] and (e["line"] is None or e["line"] >= 1)
    for s in d["sources"]:
        assert s["kind"]


@pytest.mark.parametrize("job", JOBS, ids=[j.name for j in JOBS])
def test_report_views_match_goldens(job: Path, update_goldens: bool) -> None:
    report, _, _ = analyze(job)
    _stable(report)
    views = {
        "json": render_json(report),
        "md": render_markdown(report),
        "txt": render_terminal(report, width=100, color=False),
    }
    _check_contract(json.loads(views["json"]))
    # The typed report round-trips: its JSON read back is the same report, and renders the same.
    back = Report.from_dict(json.loads(views["json"]))
    assert back == report
    assert render_json(back) == views["json"] and render_terminal(back, width=100, color=False) == views["txt"]
    for ext, text in views.items():
        path = GOLDEN / f"{job.name}.{ext}"
        if update_goldens or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            continue
        assert text == path.read_text(), f"{path} differs; if intended: pytest tests/test_reports.py --update-goldens"


def test_evidence_points_at_real_lines() -> None:
    for job in JOBS:
        report, _, _ = analyze(job)
        for e in report.evidence:
            # Whole-file sources (CSV rows, JSON, nvidia-smi -q) describe a row or block in
            # their own words; line sources quote the line.
            if "!" in e.file or e.line is None or e.source not in ("nccl", "pytorch", "slurm", "kernel") or e.kind == "root_cause_report":
                continue
            lines = (job / e.file).read_text(errors="replace").splitlines()
            assert e.message.strip()[:30] in lines[e.line - 1], (job.name, e.file, e.line)
