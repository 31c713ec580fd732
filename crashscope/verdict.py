"""The verdict: from rule and analysis findings on the aligned timeline to one cause.

The symptom is not the cause. Watchdog timeouts, "connection closed by peer", SIGABRT
exits and Slurm's kill of the step are what every rank prints; the cause is the earliest
anomaly they follow from. So:

1. The failure instant ``t_fail`` is the earliest *symptom* (first collective timeout,
   first non-zero exit, first cancel banner), else the earliest cause finding, else the
   job's end.
2. Cause findings are scored by their rule weight and by *when* they happened relative to
   ``t_fail``: inside the correlation window (``WINDOW_BEFORE_S`` before to
   ``WINDOW_AFTER_S`` after) and before the symptoms counts fully; long before (an Xid
   from last week, an NFS hiccup that recovered) or long after (teardown noise) counts
   little. Timeless evidence (version drift) counts as in the window.
3. The trained classifier (if shipped) gives a second opinion from timeline features; the
   two are blended. Little evidence gives ``unknown`` with what is missing; a completed job
   with no failure signal gives ``none``.
4. Other causes seen in the window are reported as co-occurring, not hidden.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from crashscope.engine.model import Finding
from crashscope.report.model import CoOccurring, EventRef, EventRow, EvidenceItem, Implicated
from crashscope.schema import CAUSE_TITLES, CAUSES, Kind, one_of
from crashscope.timeline import Timeline, attrs_of, iso

log = logging.getLogger(__name__)

WINDOW_BEFORE_S = 600.0
WINDOW_AFTER_S = 300.0
OLD_EVIDENCE_FACTOR = 0.2  # evidence from before the window (recovered, unrelated)
LATE_EVIDENCE_FACTOR = 0.35  # evidence from after the window (teardown)
AFTER_SYMPTOM_FACTOR = 0.6  # in the window but after the first symptom
MIN_CAUSE_SCORE = 0.3  # below this the rules alone do not name a cause
CLASSIFIER_CORROBORATES = 0.6  # ... but with the classifier this sure of the same cause, they do
RULES_SHARE = 0.65  # blend: rules vs classifier
UNKNOWN_CONFIDENCE_CAP = 0.5
NO_SIGNAL_CONFIDENCE = 0.3  # neither failure nor success in the logs
DECISIVE_MARGIN = 0.15  # causes this close to the strongest weight count as decisive
CONFIDENT_LINE = 0.8  # a verdict at or above this must be right (evaluation.CONFIDENT)
CAP_BASE, CAP_SLOPE = 0.3, 0.65  # evidence_cap(w) = 0.3 + 0.65 w: 0.6 -> 0.69, 0.9 -> 0.885
RUN_END_CONFIDENCE = 0.75  # the program said it finished; no scheduler or exit record confirms it
PROGRESS_END_CONFIDENCE = 0.6  # its last iteration ran; the final save or teardown may still have failed
EXITED_CONFIDENCE = 0.5  # a process reached interpreter exit and printed no failure; its exit code is unknown
LOCATING_ANALYSES = ("first-killed", "silent-ranks")  # findings that say where a rank stopped
# Findings that say where a rank stopped or hung but not why; they name node_failure only
# for want of a reason. A finding that says why about the same rank (an Xid, a throttled
# GPU, an OOM kill) takes their vote; they stay as co-occurring.
WHERE_ONLY = ("fr-hang", "watchdog-stuck-outside", "nsys-never-launched", "silent-ranks", "first-killed", "nccl-ras-node-dead")
LOCATE_WITHIN_S = 120.0
DESYNC_SUSPECTS = "pytorch-desync-lagging-ranks"  # where a hang is when no rank's silence says it
# NCCL RAS's where (rules/unknown/nccl_ras_*.yaml): the processes its network lost, else the
# ranks that stayed behind across repeated reports; after the desync report, in this order
RAS_WHERE = ("nccl-ras-unresponsive", "nccl-ras-lagging-ranks")
SLOW_RUN_FINDINGS = ("throughput-collapse", "straggler-rank-slow-steps")  # incidents without an error
# The rank the others waited for (analyses/stragglers.py) makes a completed run an incident
# only when the run slowed from where that rank started to be last: in healthy jobs rank 0
# (logging, checkpoints, evaluation) is often last at every collective, and a rank that was
# last from the start with the pace unchanged is the job's shape, not a fault.
ARRIVAL_ORDER = "straggler-arrival-order"
ARRIVAL_SLOWDOWN = 1.5  # the run's median step (else collective) interval after a split over before it
ARRIVAL_MIN_INTERVALS = 4  # on each side of the split (and a fifth of the series)
SLOWED_NONE_CONFIDENCE = 0.6  # a completed run whose steps slowed ARRIVAL_SLOWDOWN x, with no finding to say why
# The time limit ended a run whose trainer had already said it finished (Megatron's '[after training is done]',
# HF Trainer's 'Training completed.'): the limit is what ended the job, but the time went to its exit (a hang at
# teardown: destroy_process_group, a profiler, a checkpoint finalizer), so 'time_limit' is no sure root cause.
TEARDOWN_OVERRUN_CONFIDENCE = 0.7
ARRIVAL_MAX_SERIES, ARRIVAL_MAX_SPLITS = 16, 64  # the slowdown's cost stays flat at thousands of ranks and steps
LONE_NETWORK = "lone-network-reset"  # analyses/lone_network.py: a reset and nothing else wrong
PEER_LOG_MISSING = "the peer's own log (the other end of the reset connection): did that process die?"
FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REQUEUED"}


@dataclass
class Verdict:
    """What :func:`decide` concludes; the report's verdict fields, nothing else."""

    cause: str = "unknown"
    confidence: float = 0.0
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    implicated: Implicated = field(default_factory=Implicated)
    first_failure: EventRef | None = None
    evidence: list[EvidenceItem] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    co_occurring: list[CoOccurring] = field(default_factory=list)
    summary: str = ""
    timeline_excerpt: list[EventRow] = field(default_factory=list)
    classifier: dict[str, Any] | None = None
    missing: list[str] = field(default_factory=list)  # as given, plus what the verdict found missing


def decide(findings: list[Finding], tl: Timeline, *, classifier: dict[str, Any] | None = None, missing: list[str] | None = None) -> Verdict:
    """The verdict from rule and analysis findings over the aligned timeline: a pure
    function (no I/O, no report), so every caller (CLI, epilog, tests) gets the same answer.

    ``classifier`` is the trained model's opinion (``{"model", "probabilities"}``) or None;
    ``missing`` the data whose absence lowers confidence (the report's ``missing``)."""
    v = Verdict(missing=list(missing or []))
    ev = _this_job(tl.events, tl.job_id)
    from crashscope.analyses.checkpoint_io import saves_cut_by_kill, saves_outlived  # saves that say nothing of storage
    from crashscope.analyses.collectives import missing_line  # absent Flight Recorder dumps lower confidence

    if (dumps_missing := missing_line(ev, tl.world_size)) and dumps_missing not in v.missing:
        v.missing.append(dumps_missing)
    deciding = [f for f in findings if f.status == "stable"]
    outcome = job_outcome(ev)
    hidden = hidden_step_failure(ev) if outcome == "COMPLETED" else None  # why COMPLETED is no success
    slowed = 0.0  # a completed run's slowdown, when the arrival order names who the others waited for
    symptoms = [f for f in deciding if f.role == "symptom"]
    causes = [f for f in deciding if f.role == "cause"]
    t_fail = _failure_time(symptoms, causes, ev)
    before_s = _window_before(ev)
    scored = sorted(((score_finding(f, t_fail, before_s), f) for f in causes), key=lambda p: (-p[0], p[1].first_time or 0))
    per_cause: dict[str, float] = defaultdict(float)
    best: dict[str, tuple[float, Any]] = {}
    cut = saves_cut_by_kill(deciding)  # nor does it explain the kill's where-only findings
    cut |= saves_outlived(deciding, ev)  # a rank that raised after its save had left it
    explained = {id(f) for f in _explained_where([p for p in scored if id(p[1]) not in cut], symptoms)} | cut
    for s, f in scored:
        if s <= 0 or id(f) in explained:
            continue
        # The strongest finding counts fully, corroborating ones a little (no vote stuffing).
        per_cause[f.cause] = min(1.0, per_cause[f.cause] + (s if f.cause not in best else 0.1 * s))
        best.setdefault(f.cause, (s, f))

    if outcome == "COMPLETED":
        # Slurm says it completed: only hard failure signals overrule it (stray Xids,
        # recovered NFS hiccups and old warnings do not). A run that crawled to the end
        # is an incident too.
        slowed = (_slowdown(ev) or 0.0) if any(f.rule_id == ARRIVAL_ORDER for f in causes) else 0.0
        failed = (
            _has_failure_events(ev, completed=True)
            or any(f.rule_id in SLOW_RUN_FINDINGS for f in causes)
            or slowed >= ARRIVAL_SLOWDOWN
            or hidden is not None
        )
    else:
        failed = bool(symptoms or causes) or outcome in FAILED_STATES or _has_failure_events(ev)
    clf = classifier
    v.classifier = clf

    if ev.height == 0:
        v.cause = "unknown"
        v.confidence = 0.0
        v.summary = "No recognizable log line was found, so nothing can be said about this job."
        return v
    if not failed and outcome in (None, "COMPLETED"):
        clean = _clean_exits(ev)
        finished = outcome == "COMPLETED" or clean or _run_finished(ev)
        last_step = None if finished else _final_step(ev)
        exited = not finished and last_step is None and _exited(ev)
        success = finished or last_step is not None or exited
        v.evidence = [_evidence(f, e) for f in deciding if f.role == "context" for e in f.evidence[:1]][:5]
        if success:
            v.cause = "none"
            v.confidence = (
                0.95 if outcome == "COMPLETED" else 0.8 if clean
                else PROGRESS_END_CONFIDENCE if last_step is not None else EXITED_CONFIDENCE if exited else RUN_END_CONFIDENCE
            )
            v.summary = (
                "The job completed normally." if outcome == "COMPLETED"
                else "Every process exited with code 0 and no failure signal was found." if clean
                else f"The trainer's progress reached its last iteration ({last_step}) and no failure signal was found; "
                "no exit status or scheduler record confirms the end." if last_step is not None
                else "A process reached its normal exit (PyTorch's exit-time process-group warning) and no failure "
                "signal was found; nothing says it exited 0 (an uncaught exception exits the same way, its traceback "
                "first)." if exited
                else "The run said it finished and no failure signal was found."
            )
            if last_step is not None or exited:
                v.missing.append("the job's exit status (sacct, the job's stdout/stderr, or the launcher's exit lines)")
            if (crawl := _slowdown(ev) or 0.0) >= ARRIVAL_SLOWDOWN:
                # It finished, but its own pace fell part-way: what one slow rank (a throttled GPU, a starved
                # host) does to a synchronous job, and what a clean run does not. Nothing here names the rank
                # (synchronous steps print one pace everywhere), so "none" stands, but not as a sure thing.
                v.confidence = min(v.confidence, SLOWED_NONE_CONFIDENCE)
                v.summary += (f" Its steps slowed {crawl:.1f}x part-way, as one slow rank slows them all; nothing in "
                              "these logs names one (TORCH_DISTRIBUTED_DEBUG=DETAIL's arrival order at the collectives would).")
            return v
        # "none" needs a success signal; logs that say neither are not a clean run.
        v.cause = "unknown"
        v.confidence = NO_SIGNAL_CONFIDENCE
        v.summary = (
            "No failure signal was found, but nothing says the job finished either (no exit status, "
            "no scheduler record): the logs may be cut, or the failing lines are in files that were not collected."
        )
        v.missing.append("the job's exit status (sacct, the job's stdout/stderr, or the launcher's exit lines)")
        return v

    blend_clf = clf
    if clf and clf.get("probabilities") and per_cause:
        clf_top = next(iter(clf["probabilities"]))
        if clf_top not in best and clf_top != "none":
            # Sure of a cause no line supports: these logs are unlike its (simulated)
            # training jobs, so its opinion is left out rather than diluting the rules'.
            blend_clf = None
            clf["ignored"] = f"its top cause {clf_top!r} has no supporting line in these logs"
    dist = _blend(per_cause, blend_clf)
    dist.pop("none", None)  # it failed: "none" is not an alternative
    # Only a cause with a line behind it can be the verdict: the classifier (trained on
    # simulated jobs) re-weighs the causes the rules and analyses found, it never names one
    # alone, since on logs unlike its training data it can be sure and wrong.
    supported = {c: p for c, p in dist.items() if c in best}
    top, p_top = max(supported.items(), key=lambda kv: kv[1]) if supported else ("unknown", 0.0)
    rules_top = max(per_cause.values()) if per_cause else 0.0
    clf_agrees = bool(blend_clf) and float(((blend_clf or {}).get("probabilities") or {}).get(top, 0.0)) >= CLASSIFIER_CORROBORATES
    if rules_top < MIN_CAUSE_SCORE and not clf_agrees:
        # Weak lines alone (a SIGKILL exit) name no cause, unless the classifier reads the
        # whole timeline the same way.
        top = "unknown"
    if top in ("none",) and failed:
        top = "unknown"

    v.alternatives = [
        {"cause": c, "probability": round(p, 3)} for c, p in sorted(dist.items(), key=lambda kv: -kv[1]) if c != top and p >= 0.01
    ][:4]
    hang_suspects = _hang_suspects(tl)
    if top == "unknown":
        v.cause = "unknown"
        v.confidence = round(min(UNKNOWN_CONFIDENCE_CAP, 1.0 - p_top if dist else 0.5), 3)
        first_down = None if hang_suspects else _first_observed_failure(ev)
        killed = [f for f in symptoms if f.rule_id == "first-killed" and f.hosts]
        # a process that exited or was killed first says where, before a report of who lagged
        lagging = [] if hang_suspects or first_down is not None or killed else [
            f for f in deciding if f.rule_id == DESYNC_SUSPECTS and f.ranks]
        ras = [] if hang_suspects or first_down is not None or killed or lagging else sorted(
            (f for f in deciding if f.rule_id in RAS_WHERE and (f.ranks or f.hosts)), key=lambda f: RAS_WHERE.index(f.rule_id))
        v.summary = _unknown_summary(symptoms, hang_suspects, v.missing, sorted(int(r) for r in lagging[0].ranks) if lagging else [],
                                     ras[0] if ras else None) + _completed_anyway(hidden)
        if hang_suspects:
            v.implicated = Implicated(nodes=sorted({h for h, _ in hang_suspects if h}), ranks=sorted({r for _, r in hang_suspects}))
        elif first_down is not None:
            # No cause, no hang suspect: the process torchelastic saw fail first is where to look.
            v.implicated = first_down
        elif killed:
            # ... or the one task that was killed first
            v.implicated = Implicated(nodes=sorted(killed[0].hosts), ranks=sorted(killed[0].ranks))
        elif lagging:
            # No rank's silence, exit or kill says where, but the process group's own desync
            # report (every rank's last collective, from the store) does.
            v.implicated = Implicated(nodes=sorted(lagging[0].hosts), ranks=sorted(int(r) for r in lagging[0].ranks))
        elif ras:
            # ... nor a desync report, but NCCL's RAS names the processes it lost or the ranks left behind
            v.implicated = Implicated(nodes=sorted(ras[0].hosts), ranks=sorted(int(r) for r in ras[0].ranks))
        v.evidence = [_evidence(f, e) for f in symptoms for e in f.evidence[:2]][:10]
        if symptoms:
            first = min((e for f in symptoms for e in f.evidence), key=lambda e: (e.time is None, e.time or 0, e.file, e.line or 0))
            v.first_failure = _first_failure(first)
        v.timeline_excerpt = _excerpt(ev, t_fail)
        return v

    primary = best[top][1] if top in best else None
    same = [f for _, f in scored if f.cause == top]
    if primary is not None and not primary.hosts:
        # Job-level statements (sacct NODE_FAIL) name no host; a corroborating finding may,
        # or, on a job with no real host names, the rank (torchrun's root-cause entry).
        located = next((f for f in same if f.hosts), None) or (
            None if primary.ranks else next((f for f in same if f.ranks and len(f.ranks) <= MAX_NAMED_RANKS), None)
        )
        if located is not None:
            primary = located
    borrowed = None
    if primary is not None and not primary.hosts and primary.first_time is not None:
        # A cause line that names no node (a dmesg without its host, an OOM kill by pid)
        # happened where a rank stopped at that moment: the who-stopped-first analyses say where.
        borrowed = next(
            (
                f for f in deciding
                if f.rule_id in LOCATING_ANALYSES and f.hosts and f.first_time is not None
                and abs(f.first_time - primary.first_time) <= LOCATE_WITHIN_S * 1e9
            ),
            None,
        )
    if borrowed is not None and top == "oom" and borrowed.rule_id == "first-killed" and (len(borrowed.ranks) != 1 or len(_oom_victims(same)) != 1):
        # The OOM killer's victim is the task srun saw SIGKILLed only when the kernel killed one
        # process and one task was SIGKILLed first: several kills, or several tasks in the
        # first kill, and nothing pairs a pid with a task.
        borrowed = None
    if borrowed is None and primary is not None and not primary.hosts and top == "oom":
        # An OOM kill by pid alone (no node, no rank) with no time to match: the kernel's OOM killer kills
        # with SIGKILL and srun names a task's terminating signal by strsignal(), "Killed" for SIGKILL (the
        # slurm source reads it as signal SIGKILL); when one process was OOM-killed and exactly one task was
        # SIGKILLed first, that task is the one.
        killed = [f for f in deciding if f.rule_id == "first-killed" and f.hosts and len(f.ranks) == 1 and f.first_time is None]
        if len(killed) == 1 and len(_oom_victims(same)) == 1:
            borrowed = killed[0]
    v.cause = top
    if primary is not None and primary.rule_id == LONE_NETWORK and PEER_LOG_MISSING not in v.missing:
        # A reset alone is a hypothesis: the peer's own log would say whether it died.
        v.missing.append(PEER_LOG_MISSING)
    coverage_penalty = 0.9 ** min(len(v.missing), 3)
    # However the votes fall, a verdict is only as sure as its most decisive line: a 0.6
    # rule (a lone traceback) cannot reach the 0.8 that promises the cause is right.
    # (the line's own weight: its timing already ranked the causes)
    strongest = max((float(f.weight) for f in same), default=0.0)
    v.confidence = round(max(0.0, min(0.99, p_top, evidence_cap(strongest)) * coverage_penalty), 3)
    if primary is not None:
        v.implicated = _implicated(borrowed or primary, ev)
        narrowed = _narrow_hosts(primary, same)
        if narrowed:
            v.implicated = _implicated(narrowed, ev)
        elif top == "driver_drift" and len(v.implicated.nodes) == 2:
            older = _older_host(ev, v.implicated.nodes) or _plugin_missing_host(ev, v.implicated.nodes)
            if older:
                v.implicated = _restrict(v.implicated, older, ev)
        if not v.implicated.nodes and (only := _single_job_node(ev)):
            # No line of the cause names a host, but the job ran on one (its NodeList, a
            # Torque mail's exec_host): that is where it happened.
            v.implicated = Implicated(nodes=[only], ranks=v.implicated.ranks, gpus=v.implicated.gpus)
            borrowed = borrowed or primary  # the first failure below gets the node too
        if not v.implicated.ranks:
            v.implicated = _ranks_from_launcher(v.implicated, primary, ev)
        if not v.implicated.ranks and top == "node_failure" and v.implicated.nodes:
            # The scheduler names the failed node, not its ranks; another finding of the same
            # cause on that node (its ranks fell silent) says which ranks died with it.
            on = set(v.implicated.nodes)
            died = sorted({int(r) for f in same if f.ranks and f.hosts and set(f.hosts) <= on for r in f.ranks})
            if 0 < len(died) <= MAX_NAMED_RANKS:
                v.implicated = Implicated(nodes=v.implicated.nodes, ranks=died, gpus=v.implicated.gpus)
        # The first failure is the earliest in-window evidence of the verdict's cause (an
        # mlx5 port event seconds before NCCL's completion error), on the implicated hosts.
        hosts = set(v.implicated.nodes)
        ranks = set(v.implicated.ranks)
        pool = [
            e for f in same for e in f.evidence
            if (e.time is None or _in_window(e.time, t_fail, before_s)) and (not hosts or e.host in hosts)
        ]
        # The culprit's own line, when the finding names ranks (the odd rank of a mismatch).
        pool = [e for e in pool if e.rank in ranks or e.rank is None] or pool if ranks else pool
        first = min(pool, key=_evidence_order) if pool else _earliest_evidence(primary)
        if first is not None:
            v.first_failure = _first_failure(first)
            if borrowed is not None and first.host is None and len(v.implicated.nodes) == 1:
                v.first_failure.node = v.implicated.nodes[0]
                if v.first_failure.rank is None and len(v.implicated.ranks) == 1:
                    v.first_failure.rank = v.implicated.ranks[0]
    elif hang_suspects:
        v.implicated = Implicated(nodes=sorted({h for h, _ in hang_suspects if h}), ranks=sorted({r for _, r in hang_suspects}))
    causes_ev = sorted(((f, e) for f in same for e in f.evidence[:5]), key=lambda p: _evidence_order(p[1]))
    symptom_ev = sorted(((f, e) for f in symptoms for e in f.evidence[:1]), key=lambda p: _evidence_order(p[1]))
    v.evidence = [_evidence(f, e) for f, e in causes_ev + symptom_ev][:25]
    actions: list[str] = []
    for f in same:
        for a in f.actions:
            if a not in actions:
                actions.append(a)
    v.actions = actions[:8]
    v.co_occurring = [
        CoOccurring(
            cause=f.cause,
            rule=f.rule_id,
            nodes=list(f.hosts),
            time=iso(f.first_time),
            file=f.evidence[0].file if f.evidence else None,
            line=f.evidence[0].line if f.evidence else None,
            score=round(s, 3),
        )
        for s, f in scored
        if f.cause != top and s >= 0.15 and _in_window(f.first_time, t_fail, before_s)
    ][:6]
    v.summary = _summary(top, primary, symptoms, tl) + _completed_anyway(hidden)
    if top == "time_limit" and primary is not None and (done := _finished_before(ev, primary)):
        v.confidence = min(v.confidence, TEARDOWN_OVERRUN_CONFIDENCE)
        v.summary += (f" The run had said it finished before the limit ({done}): the time went to its exit, not to "
                      "training (a hang at teardown), so the overrun is the thing to look at.")
        v.actions.insert(0, "The trainer finished before the limit: find what the processes did after it (py-spy dump of a "
                            "rank that will not exit; destroy_process_group, a profiler or a checkpoint finalizer that hangs).")
        v.actions = v.actions[:8]
    if outcome == "COMPLETED" and slowed >= ARRIVAL_SLOWDOWN:
        v.summary += f" The job completed, but its steps slowed {slowed:.1f}x: an incident without an error."
    v.timeline_excerpt = _excerpt(ev, (primary.first_time if primary and primary.first_time else t_fail))
    return v


def _explained_where(scored: list[tuple[float, Finding]], symptoms: Sequence[Finding] = ()) -> list[Finding]:
    """The where-only findings (``WHERE_ONLY``, cause node_failure) about a rank (else a
    host) that an in-window finding of another cause names too: that one says why.

    Also those about ranks that were all killed alone (``first-killed`` as a symptom: one
    SIGKILLed task whose node-mates lived on): such a rank fell silent because it was
    killed, which is no failure of its node, and the kill alone does not say why."""
    why = [f for s, f in scored if s >= MIN_CAUSE_SCORE and f.rule_id not in WHERE_ONLY and f.cause != "node_failure"]
    killed_alone = {r for f in symptoms if f.rule_id == "first-killed" for r in f.ranks}
    if not why and not killed_alone:
        return []
    out = []
    for s, f in scored:
        if s <= 0 or f.rule_id not in WHERE_ONLY or f.cause != "node_failure":
            continue
        if f.ranks and set(f.ranks) <= killed_alone:
            out.append(f)
            continue
        for g in why:
            same = set(f.ranks) & set(g.ranks) if f.ranks and g.ranks else set(f.hosts) & set(g.hosts)
            if same:
                out.append(f)
                break
    return out


def _this_job(ev: pl.DataFrame, job_id: str | None) -> pl.DataFrame:
    """Lines about other jobs (a user's scancel of another job in slurmctld.log, an OOM
    kill in another job's cgroup) are not evidence about this one."""
    if not job_id:
        return ev
    return ev.filter(pl.col("job_id").is_null() | (pl.col("job_id") == job_id) | pl.col("job_id").str.starts_with(job_id + "."))


def _window_before(ev: pl.DataFrame) -> float:
    """The cause precedes the timeouts by about the collective timeout: with a 30-minute
    Timeout(ms), evidence 25 minutes before the first timeout is not old."""
    to = ev.filter(pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value)
    if to.height == 0:
        return WINDOW_BEFORE_S
    ms = to.select(pl.col("attrs").str.json_path_match("$.timeout_ms").cast(pl.Float64, strict=False).max()).item()
    return max(WINDOW_BEFORE_S, (ms or 0) / 1000 + WINDOW_AFTER_S)


def score_finding(f: Any, t_fail: int | None, before_s: float = WINDOW_BEFORE_S) -> float:
    """Rule weight scaled by where the evidence sits relative to the failure."""
    w = float(f.weight)
    if f.first_time is None or t_fail is None:
        return w
    dt = (f.first_time - t_fail) / 1e9
    if dt < -before_s:
        # The latest evidence may still be in the window even if the first is old.
        last = max((e.time for e in f.evidence if e.time is not None), default=f.first_time)
        if (last - t_fail) / 1e9 >= -before_s:
            return w * AFTER_SYMPTOM_FACTOR
        return w * OLD_EVIDENCE_FACTOR
    if dt > WINDOW_AFTER_S:
        return w * LATE_EVIDENCE_FACTOR
    return w if dt <= 1.0 else w * AFTER_SYMPTOM_FACTOR


def _in_window(t: int | None, t_fail: int | None, before_s: float = WINDOW_BEFORE_S) -> bool:
    if t is None or t_fail is None:
        return True
    dt = (t - t_fail) / 1e9
    return -before_s <= dt <= WINDOW_AFTER_S


def _failure_time(symptoms: list[Any], causes: list[Any], ev: pl.DataFrame) -> int | None:
    times = [f.first_time for f in symptoms if f.first_time is not None]
    if times:
        return min(times)
    # No symptom: the earliest of the decisive causes (a checkpoint that never finished
    # because the node died mid-write is not when the failure happened).
    timed = [f for f in causes if f.first_time is not None]
    if timed:
        top = max(float(f.weight) for f in timed)
        return min(f.first_time for f in timed if float(f.weight) >= top - DECISIVE_MARGIN)
    t = ev["time"].drop_nulls()
    if t.len():
        from crashscope.timeline import _ns

        return _ns(t.max())
    return None


def job_outcome(ev: pl.DataFrame) -> str | None:
    """The job's final Slurm state: :func:`crashscope.slurm_state.final_state` (one rule, shared
    with the classifier's features)."""
    from crashscope.slurm_state import final_state

    return final_state(ev)


# Error events of these kinds mean the job (or a rank) failed even when no rule names a
# cause: the verdict is then "unknown", never "none".
FAILURE_KINDS = {
    Kind.COLLECTIVE_TIMEOUT.value, Kind.CUDA_OOM.value, Kind.HOST_OOM.value, Kind.JOB_CANCEL.value,
    Kind.ROOT_CAUSE_REPORT.value, Kind.CUDA_ERROR.value, Kind.WATCHDOG_ERROR.value, Kind.NCCL_ERROR.value,
    Kind.NETWORK_ERROR.value, Kind.HEARTBEAT_TIMEOUT.value, Kind.DESYNC_REPORT.value, Kind.COLLECTIVE_MISMATCH.value,
    Kind.HUNG_TASK.value, Kind.PCIE_ERROR.value, Kind.KERNEL_PANIC.value, Kind.SEGFAULT.value, Kind.XID.value,
    Kind.EXCEPTION.value,
}


# A job step srun ran (``123.0``, ``123.1``, heterogeneous ``123.0+1``): not ``batch``/``extern``/``interactive``.
_SRUN_STEP = re.compile(r"^\d+(\+\d+)?$")
STEP_FAILED_STATES = FAILED_STATES - {"REQUEUED"}


def hidden_step_failure(ev: pl.DataFrame) -> str | None:
    """What says a COMPLETED job's work failed anyway, or None.

    Slurm's job state and ExitCode are the batch script's (COMPLETED: the script exited 0), so a
    script that ends with ``echo "END TIME: $(date)"`` reads COMPLETED whatever its ``srun`` returned.
    The steps say otherwise: a step row that ended FAILED/CANCELLED/... or with a non-zero exit code,
    or the job's DerivedExitCode ("the highest exit code returned by the job's job steps (srun
    invocations)", sacct(1) and scontrol(1) of Slurm 22.05), and, in the ranks' own output, a
    traceback torch's excepthook printed (the ``uncaught`` exception of a rank that died of it)."""
    st = ev.filter(pl.col("kind") == Kind.JOB_STATE.value)
    for a, src in zip(st["attrs"].to_list(), st["source"].cast(pl.String).to_list()):
        d = attrs_of(a)
        step = d.get("step")
        dec = str(d.get("derived_exit_code") or "0:0")
        if step in (None, "") and dec.split(":")[0] not in ("", "0"):
            return f"its steps returned exit code {dec.split(':')[0]} ({src} DerivedExitCode {dec})"
        if isinstance(step, str) and _SRUN_STEP.match(step):
            state = str(d.get("state") or "").split()[0:1]
            code = str(d.get("exit_code") or "0:0")
            if (state and state[0].upper().rstrip("+") in STEP_FAILED_STATES) or code.split(":")[0] not in ("", "0"):
                told = " ".join(state) + (f" (exit code {code})" if code.split(":")[0] not in ("", "0") else "")
                return f"step {step} ended {told.strip() or 'with exit code ' + code} ({src})"
    exc = ev.filter((pl.col("kind") == Kind.EXCEPTION.value) & pl.col("attrs").str.contains(r'"uncaught":\s*true'))
    if exc.height:
        ranks = sorted({int(r) for r in exc["rank"].drop_nulls().to_list()})
        row = exc.sort(["time", "file", "line"], nulls_last=True).row(0, named=True)
        text = str(row["message"] or "")[:120].replace("`", "'")
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''}"
        return f"{who} died of an uncaught exception (`{text}`{' and others' if len(ranks) > 1 else ''})"
    return None


_OOM_VICTIM = re.compile(r"Killed process (\d+)")


def _oom_victims(findings: Sequence[Finding]) -> set[str]:
    """The pids the kernel's OOM killer named (``Out of memory: Killed process N (comm)``, mm/oom_kill.c)."""
    return {m.group(1) for f in findings for e in f.evidence if (m := _OOM_VICTIM.search(e.message or ""))}


def _completed_anyway(hidden: str | None) -> str:
    """The sentence a failed verdict on a COMPLETED job owes the reader: why Slurm's state is no success."""
    return f" Slurm recorded the job COMPLETED because its batch script exited 0, but {hidden}." if hidden else ""


def _has_failure_events(ev: pl.DataFrame, *, completed: bool = False) -> bool:
    kinds = set(FAILURE_KINDS)
    if completed:
        # Slurm says COMPLETED: a logged traceback, a stray Xid or a transient NCCL warning
        # does not undo that; only hard failure signals do.
        kinds = {Kind.COLLECTIVE_TIMEOUT.value, Kind.CUDA_OOM.value, Kind.HOST_OOM.value, Kind.JOB_CANCEL.value, Kind.ROOT_CAUSE_REPORT.value}
    bad = ev.filter(one_of("kind", kinds) & one_of("severity", ["error", "critical"]))
    if bad.height:
        return True
    exits = ev.filter(pl.col("kind") == Kind.PROCESS_EXIT.value)
    for a in exits["attrs"].drop_nulls().to_list():
        try:
            d = json.loads(a)
        except ValueError:
            continue
        code = d.get("exitcode")
        if (code not in (None, 0, "0")) or d.get("signal"):
            return True
    return False


def _slowdown(ev: pl.DataFrame) -> float | None:
    """How much the run slowed: the largest ratio of the median interval after a split over
    the median before it (each side at least ``ARRIVAL_MIN_INTERVALS`` intervals and a fifth
    of the series, the first two intervals skipped as warm-up), per progress series (a
    file's ``train_step`` lines of one rank: their stamps, per step when the line numbers
    its step), the median over the series. None when no series is long enough: then no
    slowdown is shown (the collectives' own stamps are often whole seconds, and their
    intervals hold the start-up and every checkpoint, so they are not used)."""
    series: list[list[float]] = []
    steps = ev.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("time").is_not_null() & pl.col("rank").is_not_null())
    if steps.height:
        by = ["file", "rank"]
        # the ranks of a synchronous job share one pace: a few series say it (thousands of ranks need not)
        keys = steps.select(by).unique().sort(by).head(ARRIVAL_MAX_SERIES)
        s = steps.join(keys, on=by, how="semi").select(
            "file", "rank", pl.col("time").dt.epoch("ns").alias("t"),
            pl.col("attrs").str.json_path_match("$.step").cast(pl.Int64, strict=False).alias("step"),
        ).sort([*by, "t"]).with_columns((pl.col("t").diff().over(by) / 1e9).alias("dt"), pl.col("step").diff().over(by).alias("ds"))
        s = s.with_columns(pl.when(pl.col("ds") > 0).then(pl.col("dt") / pl.col("ds")).when(pl.col("ds").is_null()).then(pl.col("dt")).alias("dt"))
        series = [x for x in s.filter(pl.col("dt").is_not_null()).group_by(by, maintain_order=True).agg("dt")["dt"].to_list()]
    ratios = [r for x in series if (r := _largest_jump(x)) is not None]
    return sorted(ratios)[len(ratios) // 2] if ratios else None


def _largest_jump(dts: list[float]) -> float | None:
    """The largest median(after) / median(before) over the splits of one interval series
    (warm-up skipped, each side long enough); with coarse stamps (whole seconds) many
    intervals are 0, so a side whose median is 0 counts by its mean."""
    x = [d for d in dts[2:] if d >= 0]
    m = max(ARRIVAL_MIN_INTERVALS, len(x) // 5)
    if len(x) < 2 * m:
        return None
    best = None
    step = max(1, (len(x) - 2 * m) // ARRIVAL_MAX_SPLITS)  # a long series: evenly spaced splits
    for i in range(m, len(x) - m + 1, step):
        b, a = _typical(x[:i]), _typical(x[i:])
        if b > 0 and (best is None or a / b > best):
            best = a / b
    return best


def _typical(x: list[float]) -> float:
    med = statistics.median(x)
    return med if med > 0 else sum(x) / len(x)


def evidence_cap(weight: float) -> float:
    """The highest confidence evidence of this (timing-scaled) weight allows: rules of
    weight 0.77 or more (an Xid 79, a time-limit banner, an IB completion error) can reach
    0.8; inferences (silence, a lone exception, a version difference) stay below it."""
    return CAP_BASE + CAP_SLOPE * max(0.0, min(1.0, weight))


def _clean_exits(ev: pl.DataFrame) -> bool:
    """Launcher exit records exist and every one says exit code 0 (no signal)."""
    exits = ev.filter(pl.col("kind") == Kind.PROCESS_EXIT.value)["attrs"].drop_nulls().to_list()
    codes = []
    for a in exits:
        try:
            d = json.loads(a)
        except ValueError:
            continue
        if d.get("signal"):
            return False
        codes.append(d.get("exitcode"))
    return bool(codes) and all(c in (0, "0") for c in codes)


# Progress lines whose total is the whole run's length: Megatron's "iteration N/M" (M is
# --train-iters, megatron/training/training.py training_log) and NeMo 2's ProgressPrinter
# ("iteration {n-1}/{max_steps-1}"). A tqdm bar's or an epoch's total is not.
RUN_TOTAL_FRAMEWORKS = ("megatron", "nemo")


def _final_step(ev: pl.DataFrame) -> str | None:
    """'N/N' when every rank's last progress line of a run-length counter (``RUN_TOTAL_FRAMEWORKS``)
    reached its total: the trainer ran its last iteration."""
    st = ev.filter(pl.col("kind") == Kind.TRAIN_STEP.value)
    if st.height == 0:
        return None
    st = st.with_columns(
        pl.col("attrs").str.json_path_match("$.framework").alias("_fw"),
        pl.col("attrs").str.json_path_match("$.step").cast(pl.Int64, strict=False).alias("_step"),
        pl.col("attrs").str.json_path_match("$.total").cast(pl.Int64, strict=False).alias("_total"),
    ).filter(pl.col("_fw").is_in(RUN_TOTAL_FRAMEWORKS) & (pl.col("_total") > 0) & pl.col("_step").is_not_null())
    if st.height == 0:
        return None
    last = st.with_columns(pl.col("rank").fill_null(-1)).group_by("rank").agg(pl.col("_step").last(), pl.col("_total").last())
    if not (last["_step"] >= last["_total"]).all():
        return None
    total = last.select(pl.col("_total").max().cast(pl.String)).item()
    return f"{total}/{total}"


def _finished_before(ev: pl.DataFrame, cause: Finding) -> str | None:
    """The trainer's own end-of-run record (a run_end success) that came before the cause's first line: earlier
    in the same file (or on its line, printed first: srun's banner glued after the trainer's last line), else
    earlier in time. Returns where it is ("megatron's end-of-run record, slurm.out:3"). (Within a file the line
    order is the truth: a line without a stamp gets its neighbour's time from the timeline.)"""
    ends = ev.filter(pl.col("kind") == Kind.RUN_END.value)
    if ends.height == 0 or not cause.evidence:
        return None
    first = cause.evidence[0]
    ends = ends.filter(pl.col("attrs").str.json_path_match("$.outcome").fill_null("success") == "success")
    fws = ends["attrs"].str.json_path_match("$.framework").fill_null("the trainer").to_list()
    for t, file, line, fw in zip(ends["time"].dt.epoch("ns").to_list(), ends["file"].to_list(), ends["line"].to_list(), fws):
        if file == first.file and line is not None and first.line is not None:
            before = line <= first.line
        else:
            before = t is not None and first.time is not None and t < first.time
        if before:
            return f"{fw}'s end-of-run record, {file}:{line}"
    return None


def _run_finished(ev: pl.DataFrame) -> bool:
    """A trainer or benchmark said it finished (applog's run_end, a catalog's success record)."""
    return _run_ends(ev, "success")


def _exited(ev: pl.DataFrame) -> bool:
    """A process reached interpreter exit (PyTorch's exit-time process-group warning): not
    killed, not aborted, but an uncaught exception exits the same way."""
    return _run_ends(ev, "exited")


def _run_ends(ev: pl.DataFrame, outcome: str) -> bool:
    ends = ev.filter(pl.col("kind") == Kind.RUN_END.value)
    if ends.height == 0:
        return False
    # a run_end without an outcome is a success record (applog and the catalogs always set one)
    got = ends["attrs"].str.json_path_match("$.outcome").fill_null("success")
    return bool((got == outcome).any())


def _blend(per_cause: dict[str, float], clf: dict[str, Any] | None) -> dict[str, float]:
    rules_total = sum(per_cause.values())
    rules = {c: v / rules_total for c, v in per_cause.items()} if rules_total > 0 else {}
    probs = (clf or {}).get("probabilities") or {}
    if not rules and not probs:
        return {}
    if not probs:
        # Rules alone: sharpen by absolute strength, leave the rest to "unknown".
        top = max(per_cause.values())
        return {c: v * min(1.0, 0.55 + 0.45 * top) for c, v in rules.items()}
    if not rules:
        return {c: p * 0.7 for c, p in probs.items()}
    causes = set(rules) | set(probs)
    return {c: RULES_SHARE * rules.get(c, 0.0) + (1 - RULES_SHARE) * float(probs.get(c, 0.0)) for c in causes}


def _classifier(tl: Timeline, findings: list[Any]) -> dict[str, Any] | None:
    try:
        from crashscope.classify.features import extract
        from crashscope.classify.model import default_model
    except ImportError:
        return None
    try:
        model = default_model()
        probs = model.predict_proba(extract(tl, findings))
    except Exception as exc:  # noqa: BLE001 - a missing/old model must not stop the report
        log.info("classifier unavailable: %s", exc)
        return None
    probs = {c: round(float(p), 4) for c, p in probs.items() if c in CAUSES}
    return {"model": getattr(model, "version", None), "probabilities": dict(sorted(probs.items(), key=lambda kv: -kv[1]))}


def _hang_suspects(tl: Timeline) -> list[tuple[str | None, int]]:
    """Ranks that did not report the timeout every other rank reported."""
    for g in tl.groups:
        if g.kind == Kind.COLLECTIVE_TIMEOUT.value and g.missing_ranks:
            # A rank that read a peer's close instead of timing out was alive in the collective;
            # one that said nothing at all is the likelier hang, when there is one.
            spoke = set(
                tl.events.filter(pl.col("rank").is_in(g.missing_ranks) & (pl.col("kind") == Kind.NETWORK_ERROR.value))
                .get_column("rank").to_list()
            )
            missing = [r for r in g.missing_ranks if r not in spoke] or list(g.missing_ranks)
            ev = tl.events.filter(pl.col("rank").is_in(missing) & pl.col("host").is_not_null())
            host_of = dict(ev.group_by("rank").agg(pl.col("host").mode().first()).iter_rows())
            return [(host_of.get(r), r) for r in missing[:64]]
    return []


def _implicated(f: Any, ev: pl.DataFrame) -> Implicated:
    gpus = []
    index_of = {}
    inv = ev.filter(pl.col("gpu").is_not_null() & pl.col("gpu_index").is_not_null() & pl.col("source").is_in(["nvidia_smi", "gpu_csv"]))
    for h, g, i in inv.select("host", "gpu", "gpu_index").unique().iter_rows():
        index_of[(h, g)] = i
    for host, pci, idx in f.gpus:
        idx = idx if idx is not None else index_of.get((host, pci))
        item: dict[str, Any] = {"node": host, "index": idx}
        if pci:
            item["pci"] = pci
        if item not in gpus:
            gpus.append(item)
    return Implicated(nodes=sorted(set(f.hosts)), ranks=sorted(set(int(r) for r in f.ranks)), gpus=gpus)


def _narrow_hosts(primary: Any, same: list[Any]) -> Any:
    """When the best finding cannot tell hosts apart (a 1-vs-1 version tie), a finding of
    the same cause that names a strict subset of them (the node whose ranks failed with
    "driver version is insufficient") picks the culprit."""
    if len(primary.hosts) < 2:
        return None
    hosts = set(primary.hosts)
    for f in same:
        if f is not primary and f.hosts and set(f.hosts) < hosts:
            return f
    return None


def _version_tuple(v: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def _older_host(ev: pl.DataFrame, hosts: list[str]) -> str | None:
    """Two hosts, two versions, no majority: the one left behind (older) is the suspect,
    as a node missed by an upgrade is the usual story."""
    vers = ev.filter((pl.col("kind") == Kind.VERSION.value) & pl.col("host").is_in(hosts)).select(
        "host", pl.col("attrs").str.json_path_match("$.component").alias("c"), pl.col("attrs").str.json_path_match("$.version").alias("v")
    ).drop_nulls().unique()
    for comp in ("driver", "cuda_driver", "nccl", "torch", "ofed", "cuda_runtime", "cuda_toolkit"):
        per = {h: v for h, c, v in vers.iter_rows() if c == comp}
        if len(per) == 2 and len(set(per.values())) == 2:
            return min(per, key=lambda h: _version_tuple(per[h]))
    return None


def _restrict(imp: Implicated, host: str, ev: pl.DataFrame) -> Implicated:
    on_host = set(ev.filter(pl.col("host") == host)["rank"].drop_nulls().to_list())
    return Implicated(nodes=[host], ranks=[r for r in imp.ranks if r in on_host], gpus=[g for g in imp.gpus if g.get("node") == host])


def _plugin_missing_host(ev: pl.DataFrame, hosts: list[str]) -> str | None:
    """Two hosts, one on NCCL's internal network plugin because it could not find the
    external one the other loads: the host missing the plugin is the suspect (like the
    older version, a node the installation missed)."""
    cfg = ev.filter((pl.col("kind") == Kind.NET_CONFIG.value) & pl.col("host").is_in(hosts)).select(
        "host", pl.col("attrs").str.json_path_match("$.net_plugin_kind").alias("k"), pl.col("attrs").str.json_path_match("$.plugin_missing").alias("m")
    )
    kinds: dict[str, set[str]] = defaultdict(set)
    missing = set()
    for h, k, m in cfg.iter_rows():
        if k:
            kinds[h].add(k)
        if m:
            missing.add(h)
    internal = [h for h in hosts if kinds.get(h) == {"internal"} and h in missing]
    external = [h for h in hosts if kinds.get(h) == {"external"}]
    return internal[0] if len(internal) == 1 and len(external) == 1 else None


def _ev_attrs(ev: pl.DataFrame, f: Any) -> list[dict[str, Any]]:
    """The attrs of the event rows behind a finding's evidence (by file and line)."""
    places = {(e.file, e.line) for e in f.evidence if e.line is not None}
    if not places:
        return []
    files = sorted({p[0] for p in places})
    rows = ev.filter(pl.col("file").is_in(files) & pl.col("line").is_in(sorted({p[1] for p in places}))).select("file", "line", "attrs")
    out = []
    for file, line, a in rows.iter_rows():
        if (file, line) in places and a:
            try:
                d = json.loads(a)
            except ValueError:
                continue
            if isinstance(d, dict):
                out.append(d)
    return out


MAX_NAMED_RANKS = 64


def _ranks_from_launcher(imp: Implicated, f: Any, ev: pl.DataFrame) -> Implicated:
    """Ranks the cause lines name through their launcher when the lines carry none:
    ``srun: error: <node>: task <n>: Out Of Memory`` names task n, which is the global rank
    when srun starts one task per rank (no torchrun in the job: under torchrun a task is a
    node); torch.multiprocessing.spawn's ``-- Process <i> terminated with the following
    error`` names the process index i, the rank in a job on one node."""
    rows = _ev_attrs(ev, f)
    if not rows:
        return imp
    from crashscope.timeline import under_torchrun

    ranks: set[int] = set()
    tasks = [t for d in rows for t in (d.get("tasks") or []) if isinstance(t, int) and not isinstance(t, bool)]
    if tasks and not any(d.get("spawn_process") is not None for d in rows) and not under_torchrun(ev):
        ranks.update(tasks)
    spawned = {d["spawn_process"] for d in rows if isinstance(d.get("spawn_process"), int)}
    if not ranks and len(spawned) == 1 and _one_node(ev):
        ranks.update(spawned)
    if not ranks or len(ranks) > MAX_NAMED_RANKS:
        return imp
    return Implicated(nodes=imp.nodes, ranks=sorted(ranks), gpus=imp.gpus)


def _single_job_node(ev: pl.DataFrame) -> str | None:
    """The job's one node, when the scheduler's node list names exactly one (a real name)."""
    from crashscope.timeline import NAMELESS_HOSTS, _job_nodes

    nodes = _job_nodes(ev)
    return nodes[0] if len(nodes) == 1 and nodes[0] and nodes[0] not in NAMELESS_HOSTS else None


def _one_node(ev: pl.DataFrame) -> bool:
    """Nothing in the logs names or implies a second node."""
    hosts = ev.filter(pl.col("host").is_not_null() & (pl.col("source") != "sacct"))["host"].unique()
    if hosts.len() > 1:
        return False
    from crashscope.timeline import _job_nodes

    return len(_job_nodes(ev)) <= 1


def _first_observed_failure(ev: pl.DataFrame) -> Implicated | None:
    """torchelastic's "Root Cause (first observed failure)": the earliest such entry's host
    and rank (several agents print one each; the earliest failed first)."""
    rc = ev.filter((pl.col("kind") == Kind.ROOT_CAUSE_REPORT.value) & (pl.col("attrs").str.json_path_match("$.root") == "true"))
    if rc.height == 0:
        return None
    first = rc.sort("time", "file", "line", nulls_last=True).row(0, named=True)
    if first["host"] is None and first["rank"] is None:
        return None
    return Implicated(nodes=[first["host"]] if first["host"] else [], ranks=[int(first["rank"])] if first["rank"] is not None else [])


LINE_SOURCES_FIRST = {"nccl": 0, "pytorch": 0, "kernel": 0, "slurm": 0}


def _evidence_order(e: Any) -> tuple:  # type: ignore[type-arg]
    """Earliest first; at the same instant a log line beats a structured record (an
    error.json repeating the traceback, a sacct row), as the line is what people open."""
    # At the same instant, the lowest rank: a node whose ranks all stopped at once is
    # reported by its first rank, whichever file happened to list it first.
    return (e.time is None, e.time or 0, LINE_SOURCES_FIRST.get(e.source, 1), e.rank is None, e.rank or 0, e.file, e.line or 0)


def _earliest_evidence(f: Any) -> Any:
    if not f.evidence:
        return None
    return min(f.evidence, key=_evidence_order)


def _first_failure(e: Any) -> EventRef:
    return EventRef(time=iso(e.time), node=e.host, rank=e.rank, source=e.source, message=e.message, file=e.file, line=e.line)


def _evidence(f: Any, e: Any) -> EvidenceItem:
    has_gpu = bool(e.gpu or e.gpu_index is not None)  # JSON "gpu": {"pci", "index"} or null
    return EvidenceItem(
        rule=f.rule_id, cause=f.cause, time=iso(e.time), node=e.host, rank=e.rank, file=e.file, line=e.line,
        message=e.message, gpu=e.gpu if has_gpu else None, gpu_index=e.gpu_index if has_gpu else None,
        role=f.role, source=e.source, kind=e.kind,
    )


def _excerpt(ev: pl.DataFrame, t: int | None) -> list[EventRow]:
    from crashscope.report.events import excerpt_around

    return excerpt_around(ev, t)


def _summary(cause: str, primary: Any, symptoms: list[Any], tl: Timeline) -> str:
    parts = [f"{CAUSE_TITLES.get(cause, cause)}"]
    if primary is not None:
        where = ", ".join(primary.hosts[:3])
        ranks = f" (rank {', '.join(str(r) for r in primary.ranks[:4])})" if primary.ranks else ""
        when = iso(primary.first_time)
        parts.append(f": {primary.title}" + (f" on {where}" if where else "") + ranks + (f" at {when}" if when else ""))
        peers = _link_peers(tl.events, primary.hosts) if cause == "fabric_timeout" else []
        if peers:
            parts.append(f" (peer {', '.join(peers[:3])}: check the link between them)")
    timeouts = next((g for g in tl.groups if g.kind == Kind.COLLECTIVE_TIMEOUT.value), None)
    if timeouts is not None:
        parts.append(f"; then {len(timeouts.ranks)} rank(s) timed out in {_known_parts(timeouts.signature)} (symptom)")
    elif symptoms:
        parts.append(f"; {len(symptoms)} symptom rule(s) followed")
    return "".join(parts) + "."


def _known_parts(signature: str) -> str:
    """A timeout signature without the fields no log gave ("seq=?"): the summary never prints a placeholder."""
    known = [p for p in signature.split() if not p.endswith("=?")]
    return " ".join(known) if known else "a collective"


def _link_peers(ev: pl.DataFrame, hosts: tuple[str, ...]) -> list[str]:
    """Hosts at the other end of the failing network connections of ``hosts``."""
    ne = ev.filter(
        (pl.col("kind") == Kind.NETWORK_ERROR.value) & pl.col("host").is_in(list(hosts)) & pl.col("attrs").str.contains('"peer_host"', literal=True)
    )
    peers = ne.select(pl.col("attrs").str.json_path_match("$.peer_host")).to_series().drop_nulls().to_list()
    return sorted({p for p in peers if p not in hosts})


def _unknown_summary(symptoms: list[Any], suspects: list[tuple[str | None, int]], missing: list[str], lagging: list[int] | None = None,
                     ras: Any = None) -> str:
    msg = "The job failed, but no root-cause evidence was found"
    if symptoms:
        msg += f" (only symptoms: {', '.join(sorted({f.title for f in symptoms})[:3])})"
    if suspects:
        msg += f"; ranks {', '.join(str(r) for _, r in suspects[:8])} never reported the collective timeout everyone else hit: they are the hang suspects"
    elif lagging:
        msg += (f"; PyTorch's desync report names rank{'s' if len(lagging) > 1 else ''} {', '.join(str(r) for r in lagging[:8])} as lagging "
                "(the oldest last collective): the hang suspects")
    elif ras is not None:
        where = [f"rank{'s' if len(ras.ranks) > 1 else ''} {', '.join(str(r) for r in sorted(ras.ranks)[:8])}"] if ras.ranks else []
        where += [f"node{'s' if len(ras.hosts) > 1 else ''} {', '.join(sorted(ras.hosts)[:4])}"] if ras.hosts else []
        what = ("as dead or not answering" if ras.rule_id == "nccl-ras-unresponsive"
                else "as behind their peers in repeated reports")
        msg += f"; NCCL's RAS report names {' on '.join(where)} {what}: where to look"
    if missing:
        msg += f". Missing: {'; '.join(missing[:3])}"
    return msg + "."
