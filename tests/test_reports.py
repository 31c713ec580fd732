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


def test_json_dumps_is_json_with_indent() -> None:
    """report.json's writer (C-encoded flat containers, Python above them) gives exactly
    ``json.dumps(indent=2, ensure_ascii=False)``'s text: nesting, empty containers, tuples,
    keys json converts, str/int subclasses, floats json spells its own way, hostile text."""
    import enum

    from crashscope.report.safe import json_dumps

    class Name(str, enum.Enum):
        A = "a\u202eb"

    class Num(enum.IntEnum):
        X = 3

    values = [{}, [], (), {"a": {}}, [[]], [{}], 1, -0.0, 1e300, float("nan"), float("-inf"), "x", None, True,
              {"a": 1, "b": [1, 2.5, {"c": None, "d": [True, False]}], "e": {"f": "g\n\"h\u2028\x1b[31m", "k": (1, 2)}, "t": ()},
              {1: 2, "x": {2.5: [1], None: 3, True: {}}}, {"a": Name.A, "b": Num.X, "c": [Name.A, Num.X], Name.A: 1},
              [1, [2, [3, [4, {"z": [5, {}]}]]]], {"\u00e9\x00": ["\ud800", "\U0001F600", "\\", "/"]}, ({"a": (1, {"b": ()})},)]
    for v in values:
        assert json_dumps(v) == json.dumps(v, indent=2, ensure_ascii=False), v
    report, _, _ = analyze(ROOT / "fixtures" / "jobs" / "gpu_throttle_node001_gpu0")
    d = report.to_dict()
    assert json_dumps(d) == json.dumps(d, indent=2, ensure_ascii=False)
    with pytest.raises(TypeError):
        json_dumps({"a": [{"b": object()}]})


def test_context_of_a_progress_bar_line_is_what_the_terminal_showed_last() -> None:
    """tqdm redraws its bar with CRs in one line: the evidence context shows the last
    drawn text, and no CR (context is text, never terminal control)."""
    from crashscope.report.build import _context_text

    assert _context_text(b"\r  0%|          | 0/50 [00:00<?, ?it/s]\r 50%|#####     | 25/50\r") == " 50%|#####     | 25/50"
    assert _context_text(b"\r 10%|#| 5/50\rRuntimeError: CUDA error: out of memory") == "RuntimeError: CUDA error: out of memory"
    assert _context_text(b"plain line\r") == "plain line"
