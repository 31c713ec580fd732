"""Attribution: gather the findings (rules, cross-rank analyses, the classifier's opinion)
for one job and fill the report's verdict fields from :func:`crashscope.verdict.decide`."""

from __future__ import annotations

import logging

from crashscope.analyses import run_analyses
from crashscope.layers import apply_layers
from crashscope.report.model import Report
from crashscope.timeline import Timeline
from crashscope.verdict import CAUSE_TITLES, Verdict, _classifier, _this_job, decide, job_outcome, score_finding

log = logging.getLogger(__name__)

__all__ = ["CAUSE_TITLES", "attribute", "decide", "job_outcome", "score_finding"]


def attribute(report: Report, tl: Timeline, *, include_experimental: bool = False, use_classifier: bool = True) -> Verdict:
    """Fill the verdict fields of ``report`` from the timeline; returns the verdict."""
    from crashscope.engine.evaluate import evaluate

    ev = _this_job(tl.events, tl.job_id)
    try:
        findings = evaluate(ev, include_experimental=include_experimental, expected_ranks=tl.world_size)
    except Exception as exc:  # noqa: BLE001 - a rule bug must not cost the report
        log.exception("rule evaluation failed")
        report.warnings.append(f"rule evaluation failed ({type(exc).__name__}: {exc}); verdict from the timeline only")
        findings = []
    found, analysis_warnings = run_analyses(ev, tl.world_size)
    findings = findings + found
    report.warnings.extend(analysis_warnings)
    clf = _classifier(tl, findings) if use_classifier else None
    v = decide(findings, tl, classifier=clf, missing=report.missing)
    for name in ("cause", "confidence", "alternatives", "implicated", "first_failure", "evidence", "actions",
                 "co_occurring", "summary", "timeline_excerpt", "classifier", "missing"):
        setattr(report, name, getattr(v, name))
    try:
        apply_layers(report, ev, findings, tl.hosts)
    except Exception as exc:  # noqa: BLE001 - the layer check must not cost the verdict
        log.exception("layer check failed")
        report.warnings.append(f"layer check failed ({type(exc).__name__}: {exc})")
    return v
