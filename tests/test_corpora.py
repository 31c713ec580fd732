"""One test per recorded incident and per real public incident: the verdict is scored
against the case's truth (``crashscope/evaluation.py``).

Misses we know about are listed, with the reason, in ``tests/data/known_misses.json``;
they run as strict xfails, so a fix that makes one pass fails the test until the entry is
removed. A confident-wrong verdict (>= 0.8 on the wrong cause) is never allowed."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from crashscope.evaluation import CONFIDENT, Case, analyze_case, load_cases, score
from crashscope.report.model import Report
from crashscope.report.render import render_markdown

ROOT = Path(__file__).resolve().parent.parent
CORPORA = {"recorded": ROOT / "fixtures" / "recorded", "recorded_fr": ROOT / "fixtures" / "recorded_fr", "real": ROOT / "tests" / "data" / "real"}
KNOWN = json.loads((ROOT / "tests" / "data" / "known_misses.json").read_text(encoding="utf-8"))
CASES = [c for corpus, root in CORPORA.items() for c in load_cases(root, corpus)]


_BY_PATH = {c.path: c for c in CASES}


@lru_cache(maxsize=None)
def _report(path: Path) -> dict:
    return analyze_case(_BY_PATH[path])


def _check(case: Case, aspect: str, ok: bool | None, detail: str) -> None:
    known = KNOWN.get(f"{case.corpus}/{case.id}", {}).get(aspect)
    if ok is None:
        assert known is None, f"{case.corpus}/{case.id}: known miss on {aspect!r} listed but the truth has no {aspect}"
        return
    if known:
        if ok:
            pytest.fail(f"{case.corpus}/{case.id}: {aspect} is now right; remove it from tests/data/known_misses.json")
        pytest.xfail(f"known miss: {known}")
    assert ok, f"{case.corpus}/{case.id}: {aspect} wrong: {detail}"


def test_corpora_present():
    assert len([c for c in CASES if c.corpus == "real"]) >= 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.corpus}/{c.id}")
def test_never_confident_and_wrong(case: Case):
    s = score(case, _report(case.path))
    assert not s.confident_wrong, f"{case.id}: {s.cause} at {s.confidence} but the truth is {case.cause}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.corpus}/{c.id}")
def test_cause(case: Case):
    s = score(case, _report(case.path))
    _check(case, "cause", s.cause_ok, f"got {s.cause} ({s.confidence}), truth {case.cause}")


@pytest.mark.parametrize("case", [c for c in CASES if c.nodes or c.ranks or c.first_failure], ids=lambda c: f"{c.corpus}/{c.id}")
def test_culprit(case: Case):
    rep = _report(case.path)
    s = score(case, rep)
    imp = rep["implicated"]
    _check(case, "node", s.node_ok, f"got {imp['nodes']}, truth {list(case.nodes)}")
    _check(case, "rank", s.rank_ok, f"got {imp['ranks']}, truth {list(case.ranks)}")
    _check(case, "first_failure", s.first_ok, f"got {rep.get('first_failure')}, truth {case.first_failure}")


# A placeholder for a value no file gave: "None", a lone "?", "key=?". Log text (in backticks, or in a
# fenced block: the first failure's message) is data and may hold anything (spur-546: 'Reason=None').
_PLACEHOLDER = re.compile(r"\bNone\b|(?<![\w?])\?(?![\w?])|=\?")


def _outside_fences(md: str) -> list[str]:
    lines, fenced = [], False
    for ln in md.splitlines():
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(ln)
    return lines


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.corpus}/{c.id}")
def test_markdown_prints_no_placeholder(case: Case):
    md = render_markdown(Report.from_dict(_report(case.path)))
    bad = [ln for ln in _outside_fences(md) if _PLACEHOLDER.search(re.sub(r"`[^`]*`", "", ln))]
    assert not bad, bad[:3]


def test_known_misses_name_existing_cases():
    ids = {f"{c.corpus}/{c.id}" for c in CASES}
    stale = sorted(set(KNOWN) - ids)
    assert not stale, f"known_misses.json lists cases that do not exist: {stale}"
    assert CONFIDENT == 0.8
