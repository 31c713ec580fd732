"""Checkpoint and data I/O timing: every checkpoint save's start, end and duration per rank,
the save still running when the job died, the data loader's wait where the trainer logs
it, and the outliers that point at storage.

Inputs are the ranks' own log lines as ``sources/applog.py`` reads them (checkpoint events:
Megatron-LM ``saving checkpoint at iteration N to DIR`` / ``successfully saved checkpoint
from iteration N to DIR``, DeepSpeed ``[Torch] Checkpoint TAG is about to be saved!`` /
``is ready now!`` and ``Saving model checkpoint: PATH``, torchtitan ``Finished saving the
checkpoint in S seconds``, NeMo async saves, HF Trainer ``Saving model checkpoint to DIR``,
Lightning; a save without an end line gets an implied end at the next step, flagged
``implied``), and the storage kernel lines of ``sources/kernel.py`` (``nfs: server X not
responding``, Lustre, ``task ... blocked for more than N seconds``). Data-loader wait:
``data_time: S`` in a progress line (mmengine ``LoggerHook``, detectron2
``CommonMetricPrinter``: ``time: 0.4301  data_time: 0.0105``).

Outliers: a save at least ``SLOW_FACTOR`` x the job's median save (and ``MIN_SLOW_S``
longer), or one rank's save of a step at least ``RANK_FACTOR`` x the median of the other
ranks' saves of that step. Findings are ``context`` (storage evidence for the verdict's
window and the storage layer, never a cause alone: the storage rules decide).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import polars as pl

from crashscope.patterns import compile_pattern
from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind, one_of

RULE_ID = "checkpoint-io"
WEIGHT = 0.3
SLOW_FACTOR = 10.0
RANK_FACTOR = 5.0
MIN_SLOW_S = 10.0
MIN_SAVES = 3
STORAGE_AROUND_S = 120.0
STORAGE_KINDS = (Kind.STORAGE_ERROR.value, Kind.HUNG_TASK.value)
_DATA_TIME = compile_pattern(r"\bdata_time: (?P<s>\d+(?:\.\d+)?)")


def _ns(t: Any) -> int | None:
    return int(t.timestamp() * 1_000_000_000) if t is not None else None


def _ev(r: dict[str, Any]) -> Evidence:
    return Evidence(time=_ns(r["time"]), host=r["host"], rank=r["rank"], gpu=r["gpu"], gpu_index=r["gpu_index"],
                    file=r["file"] or "", line=r["line"], source=str(r["source"]), kind=str(r["kind"]), message=r["message"] or "")


def saves(events: pl.DataFrame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(completed saves, saves still open at the end), each {rank, host, step, start, end,
    duration_s, framework, implied, start_ev, end_ev}; per (file, rank) in line order."""
    ck = events.filter(pl.col("kind") == Kind.CHECKPOINT.value).sort(["file", "line"], nulls_last=True)
    done: list[dict[str, Any]] = []
    open_: dict[tuple, dict[str, Any]] = {}
    for r in ck.iter_rows(named=True):
        try:
            a = json.loads(r["attrs"]) if r["attrs"] else {}
        except ValueError:
            continue
        key = (r["file"], r["rank"], r["local_rank"], r["host"])
        step = a.get("iteration", a.get("step"))
        if a.get("phase") == "start":
            open_[key] = {"rank": r["rank"], "host": r["host"], "step": step, "start": _ns(r["time"]), "end": None,
                          "duration_s": None, "framework": a.get("framework"), "implied": False, "start_ev": _ev(r), "end_ev": None}
            continue
        if a.get("phase") != "end":
            continue
        s = open_.pop(key, None)
        end = _ns(r["time"])
        if s is None:
            s = {"rank": r["rank"], "host": r["host"], "step": step, "start": None, "end": end, "duration_s": None,
                 "framework": a.get("framework"), "implied": False, "start_ev": None, "end_ev": None}
        s["end"], s["end_ev"], s["implied"] = end, _ev(r), bool(a.get("implied"))
        if a.get("duration_s") is not None:
            s["duration_s"] = float(a["duration_s"])
        elif s["start"] is not None and end is not None and end >= s["start"]:
            s["duration_s"] = (end - s["start"]) / 1e9
        if s["step"] is None:
            s["step"] = step
        done.append(s)
    return _dedupe(done), _dedupe(list(open_.values()))


def _dedupe(ss: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One save seen twice (a rank's own log and the job output that echoes it, with or
    without the rank): an unidentified copy goes when an identified save of that step began
    that second, and a second copy of the same rank's save goes (the first file's is kept)."""
    def key(s: dict[str, Any]) -> tuple:
        t = s["start"] if s["start"] is not None else s["end"]
        return (s["step"], s["framework"], t // 1_000_000_000 if t is not None else None)

    known = {key(s) for s in ss if s["rank"] is not None}
    out, anon, ranked = [], set(), set()
    for s in ss:
        k = key(s)
        if s["rank"] is None:
            if k in known or k in anon:
                continue
            anon.add(k)
        else:
            if (s["rank"], k) in ranked:
                continue
            ranked.add((s["rank"], k))
        out.append(s)
    return out


def data_wait(events: pl.DataFrame) -> dict[str, Any] | None:
    """The data loader's wait per step where the trainer logs it: median and the worst."""
    st = events.filter((pl.col("kind") == Kind.TRAIN_STEP.value) & pl.col("message").str.contains("data_time: ", literal=True))
    vals = []
    for r in st.iter_rows(named=True):
        m = _DATA_TIME.search(r["message"] or "")
        if m:
            vals.append((float(m.group("s")), r))
    if not vals:
        return None
    worst = max(vals, key=lambda p: p[0])
    return {"median_s": round(statistics.median(v for v, _ in vals), 4), "max_s": worst[0], "samples": len(vals),
            "max_at": {"file": worst[1]["file"], "line": worst[1]["line"], "rank": worst[1]["rank"]}}


def summary(events: pl.DataFrame) -> dict[str, Any]:
    """Everything the storage layer shows about checkpoint and data I/O."""
    done, still = saves(events)
    durs = [s["duration_s"] for s in done if s["duration_s"] is not None and not s["implied"]]
    med = statistics.median(durs) if durs else None
    out: dict[str, Any] = {
        "saves": len(done), "median_s": round(med, 3) if med is not None else None,
        "max_s": round(max(durs), 3) if durs else None,
        "outliers": [_row(s) for s, _ in outliers(done)],
        "in_progress": [_row(s, events) for s in still],
        "data_wait": data_wait(events),
    }
    return out


def _row(s: dict[str, Any], events: pl.DataFrame | None = None) -> dict[str, Any]:
    d = {k: s[k] for k in ("rank", "host", "step", "framework", "implied")}
    d["duration_s"] = round(s["duration_s"], 3) if s["duration_s"] is not None else None
    ev = s["start_ev"] or s["end_ev"]
    d["file"], d["line"] = (ev.file, ev.line) if ev else (None, None)
    if events is not None and s["start"] is not None:
        last = _last_time(events)
        d["running_s"] = round((last - s["start"]) / 1e9, 3) if last is not None and last >= s["start"] else None
    return d


def _last_time(events: pl.DataFrame) -> int | None:
    t = events.filter(pl.col("time").is_not_null())["time"].max() if events.height else None
    return _ns(t) if t is not None else None


def outliers(done: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Saves much slower than the job's others, each with the reason."""
    real = [s for s in done if s["duration_s"] is not None and not s["implied"]]
    out: list[tuple[dict[str, Any], str]] = []
    seen: set[int] = set()
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for s in real:
        if s["step"] is not None:
            by_step.setdefault(s["step"], []).append(s)
    for step, ss in by_step.items():
        if len(ss) < 3:
            continue
        for s in ss:
            others = [o["duration_s"] for o in ss if o is not s]
            m = statistics.median(others)
            if id(s) not in seen and s["duration_s"] >= RANK_FACTOR * max(m, 0.001) and s["duration_s"] - m >= MIN_SLOW_S:
                out.append((s, f"{s['duration_s']:.1f} s on rank {s['rank']} while the other ranks' save of step {step} took {m:.1f} s"))
                seen.add(id(s))
    if len(real) >= MIN_SAVES:
        med = statistics.median(s["duration_s"] for s in real)
        for s in real:
            if id(s) not in seen and s["duration_s"] >= SLOW_FACTOR * max(med, 0.001) and s["duration_s"] - med >= MIN_SLOW_S:
                out.append((s, f"{s['duration_s']:.1f} s, {s['duration_s'] / max(med, 0.001):.0f}x the job's median save ({med:.1f} s)"))
                seen.add(id(s))
    return out


def _storage_around(events: pl.DataFrame, start: int | None, end: int | None) -> list[Evidence]:
    if start is None:
        return []
    lo = start - int(STORAGE_AROUND_S * 1e9)
    hi = (end if end is not None else (_last_time(events) or start)) + int(STORAGE_AROUND_S * 1e9)
    st = events.filter(one_of("kind", STORAGE_KINDS) & pl.col("time").is_not_null())
    rows = [r for r in st.iter_rows(named=True) if lo <= _ns(r["time"]) <= hi]  # type: ignore[operator]
    return [_ev(r) for r in rows[:4]]


def checkpoint_io(events: pl.DataFrame, world: int | None) -> list[Finding]:
    done, still = saves(events)
    out: list[Finding] = []
    for s, why in outliers(done):
        ev = [e for e in (s["start_ev"], s["end_ev"]) if e] + _storage_around(events, s["start"], s["end"])
        out.append(_finding(f"Slow checkpoint save (step {s['step']}): {why}", ev, s))
    last = _last_time(events)
    for s in still:
        if s["start"] is None:
            continue
        running = (last - s["start"]) / 1e9 if last is not None else None
        ev = [s["start_ev"]] + _storage_around(events, s["start"], None)
        where = f"rank {s['rank']}" if s["rank"] is not None else (s["host"] or "a rank")
        out.append(_finding(
            f"Checkpoint save of step {s['step']} on {where} was still running when the job ended"
            + (f" ({running:.0f} s after it began)" if running is not None else ""), ev, s))
    return out


def _finding(title: str, evidence: list[Evidence], s: dict[str, Any]) -> Finding:
    hosts = tuple(sorted({e.host for e in evidence if e.host}))
    ranks = (s["rank"],) if s["rank"] is not None else ()
    return Finding(
        rule_id=RULE_ID, title=title, cause="storage_stall", role="context", status="stable", weight=WEIGHT,
        first_time=min((e.time for e in evidence if e.time is not None), default=None), count=1, hosts=hosts,
        ranks=ranks, gpus=(), evidence=tuple(evidence[:6]),
        explanation=("A checkpoint save much slower than the job's others, or one rank's save much slower than the "
                     "other ranks' save of the same step, is the storage (or that node's path to it) stalling; the "
                     "storage kernel lines around it say which server."),
        actions=("Check the checkpoint file system's health and that node's mount around that time (nfsstat, "
                 "lctl/lfs check servers, the hung-task stacks); time one save by hand on that node.",),
    )


UNFINISHED_SAVE_RULES = ("pytorch-checkpoint-save-unfinished", RULE_ID)
KILLED_FIRST_RULE = "first-killed"


def saves_cut_by_kill(findings: list[Finding]) -> set[int]:
    """The unfinished-save findings (ids) that a SIGKILL explains: every rank of the save was among
    the first processes to die, killed before any rank reported an error (``first-killed``).

    A save that hangs on storage leaves its rank alive and blocked (in ``open()`` or ``write()``)
    until its peers give up on it: they report their timeouts first, and only then does the launcher
    kill it (the lab's FIFO checkpoints: no ``first-killed`` in any of them). A rank SIGKILLed
    while its peers were still waiting without complaint was not stuck for a timeout: the kill
    (its node going away, the OOM killer) ended the save, and the save says nothing of the storage
    (``nodekill_n1_ckpt_info_torchrun``: n1 killed 3 s into rank 0's 10 s write)."""
    killed = [set(f.ranks) for f in findings if f.rule_id == KILLED_FIRST_RULE and f.status == "stable" and f.ranks]
    if not killed:
        return set()
    return {
        id(f) for f in findings
        if (f.rule_id == UNFINISHED_SAVE_RULES[0] or (f.rule_id == RULE_ID and "still running" in f.title))
        and f.ranks and any(set(f.ranks) <= k for k in killed)
    }


# What a rank raises from a collective it was waiting in (gloo/NCCL timeouts, a closed pair, an exception).
OWN_ERROR_KINDS = (Kind.EXCEPTION.value, Kind.COLLECTIVE_TIMEOUT.value, Kind.NETWORK_ERROR.value, Kind.WATCHDOG_ERROR.value)


def saves_outlived(findings: list[Finding], events: pl.DataFrame) -> set[int]:
    """The unfinished-save findings (ids) whose every rank raised an error of its own afterwards.

    A save with no end line (nanoGPT prints none: ``saving checkpoint to out``, then ``torch.save``,
    then the next step) is still running only if its rank said nothing more: a rank blocked in
    ``torch.save`` (``open()``/``write()`` on a hung mount) is in no collective and raises nothing
    until it is killed. A rank that then raised a collective's error (``Connection closed by peer``,
    a timeout) or an exception of its own had left the save: its peers' failure was something else
    (``exception_rank1_other_torchrun``: rank 0 saved at iteration 20, went into the step and read
    rank 1's close)."""
    own = events.filter(
        pl.col("kind").cast(pl.String).is_in(OWN_ERROR_KINDS) & pl.col("severity").cast(pl.String).is_in(["error", "critical"])
        & pl.col("rank").is_not_null() & ~pl.col("source").cast(pl.String).is_in(["slurm", "sacct", "kernel"])
    )
    if own.height == 0:
        return set()
    out = set()
    for f in findings:
        if f.rule_id != UNFINISHED_SAVE_RULES[0] or not f.ranks or not f.evidence:
            continue
        start = f.evidence[0]
        later = own.filter(pl.col("rank").is_in(list(f.ranks)))
        if start.time is not None:
            later = later.filter(pl.col("time").is_null() | (pl.col("time").dt.epoch("ns") > start.time))
        if set(int(r) for r in later["rank"].to_list()) >= set(f.ranks):
            out.add(id(f))
    return out

