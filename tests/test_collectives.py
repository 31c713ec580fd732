"""Hang localization and mismatches from real Flight Recorder dumps (``fixtures/recorded_fr``,
torch 2.13 gloo, ``benchmarks/lab/fr_record.py``), with every dump and with some missing, and
from the watchdog's PG status lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crashscope.analyses import collectives as col
from crashscope.ingest import ingest
from crashscope.testing import parse_text

ROOT = Path(__file__).resolve().parent.parent
FR = ROOT / "fixtures" / "recorded_fr"
HANGS = sorted(p for p in FR.glob("hang_rank*") if (p / "truth.json").exists())


def _truth(d: Path) -> dict:
    return json.loads((d / "truth.json").read_text())


def _findings(d: Path, world: int = 4) -> dict[str, object]:
    ev = ingest(d).events
    return {f.rule_id: f for f in col.flight_recorder(ev, world)}, ev


def _without(src: Path, tmp: Path, ranks: list[int]) -> Path:
    dst = tmp / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("truth.json"))
    for r in ranks:
        for f in (dst / "fr").glob(f"nccl_trace_rank_{r}*"):
            f.unlink()
    return dst


def test_there_are_hang_recordings_with_every_dump() -> None:
    assert len(HANGS) >= 2
    for d in HANGS:
        assert len(list((d / "fr").glob("nccl_trace_rank_?"))) == 4, d


@pytest.mark.parametrize("case", HANGS, ids=lambda p: p.name)
def test_hang_with_every_dump_names_the_rank_that_never_entered(case: Path, tmp_path: Path) -> None:
    want = _truth(case)["culprit"]["ranks"]
    found, ev = _findings(_without(case, tmp_path, []))
    f = found[col.HANG_ID]
    assert list(f.ranks) == want
    assert f.weight == col.HANG_WEIGHT and f.cause == "node_failure"
    assert "never entered collective #" in f.title
    assert col.missing_dumps(ev, 4) == []
    assert col.MISMATCH_ID not in found


@pytest.mark.parametrize("case", HANGS, ids=lambda p: p.name)
def test_a_peer_dump_missing_lowers_the_weight_and_is_named(case: Path, tmp_path: Path) -> None:
    want = _truth(case)["culprit"]["ranks"]
    for peer in sorted({0, 1, 2, 3} - set(want)):
        d = _without(case, tmp_path / f"no{peer}", [peer])
        found, ev = _findings(d)
        f = found[col.HANG_ID]
        assert list(f.ranks) == want, (peer, f.title)
        assert f.weight == col.HANG_PARTIAL_WEIGHT < col.HANG_WEIGHT
        assert f"rank(s) {peer}" in f.title
        assert col.missing_dumps(ev, 4) == [peer]
        assert f"dumps of 1 rank(s): {peer}" in (col.missing_line(ev, 4) or "")


@pytest.mark.parametrize("case", HANGS, ids=lambda p: p.name)
def test_the_culprits_own_dump_missing_still_names_it_weaker(case: Path, tmp_path: Path) -> None:
    want = _truth(case)["culprit"]["ranks"]
    found, ev = _findings(_without(case, tmp_path, want))
    f = found[col.HANG_ID]
    assert list(f.ranks) == want and f.weight == col.NO_DUMP_WEIGHT
    assert col.missing_dumps(ev, 4) == want


def test_recorded_without_the_stopped_ranks_dump() -> None:
    d = FR / "hang_nodump_rank1"
    found, ev = _findings(d)
    assert list(found[col.HANG_ID].ranks) == [1] and found[col.HANG_ID].weight == col.NO_DUMP_WEIGHT
    assert col.missing_dumps(ev, 4) == [1]


def test_report_confidence_drops_and_missing_names_the_dump(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    case = HANGS[0]
    want = _truth(case)["culprit"]["ranks"]
    peer = min({0, 1, 2, 3} - set(want))
    full, _, _ = analyze(_without(case, tmp_path / "all", []))
    part, _, _ = analyze(_without(case, tmp_path / "part", [peer]))
    assert full.cause == part.cause == "node_failure"
    assert full.implicated.ranks == part.implicated.ranks == want
    assert part.confidence < full.confidence
    assert not any("Flight Recorder" in m for m in full.missing)
    assert any(f"Flight Recorder dumps of 1 rank(s): {peer}" in m for m in part.missing)


@pytest.mark.parametrize("case", ["mismatch_op_rank0", "mismatch_size_rank3"])
def test_mismatch_names_the_odd_rank(case: str, tmp_path: Path) -> None:
    d = FR / case
    want = _truth(d)["culprit"]["ranks"]
    found, _ = _findings(_without(d, tmp_path, []))
    f = found[col.MISMATCH_ID]
    assert list(f.ranks) == want and f.cause == "software_error"
    assert ("op" if "op" in case else "sizes") + " differ" in f.title
    # without the odd rank's dump nothing differs: no other rank is blamed for a mismatch
    found, _ = _findings(_without(d, tmp_path / "odd_gone", want))
    assert col.MISMATCH_ID not in found


def test_clean_run_gives_no_finding() -> None:
    found, ev = _findings(FR / "clean")
    assert found == {} and col.missing_dumps(ev, 4) == []


def test_lab_recordings_under_torch_distributed_debug_are_not_mismatches() -> None:
    # srun runs of the lab set TORCH_DISTRIBUTED_DEBUG: the default PG and the debug wrapper's
    # helper PG are both named ('', '') in gloo's dumps and must not be matched as one group
    d = ROOT / "fixtures" / "recorded" / "sigstop_rank0_srun"
    found, ev = _findings(d)
    assert col.MISMATCH_ID not in found
    assert col.missing_dumps(ev, 4) == [0] and list(found[col.HANG_ID].ranks) == [0]


def _watchdog_lines() -> str:
    # ProcessGroupNCCL templates (shared/reference/pytorch.md 2.3): the waiting ranks' timeout and
    # PG status; the stuck rank's dump-signal line with its own status
    out = []
    for r in (0, 1, 3):
        out.append(f"[rank{r}]:[E1201 10:10:41.160918398 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
                   "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=13, OpType=ALLREDUCE, NumelIn=1024, "
                   "NumelOut=1024, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.")
        out.append(f"[rank{r}]:[E1201 10:10:41.161005534 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  "
                   "failure detected by watchdog at work sequence id: 13 PG status: last enqueued work: 13, last completed work: 12")
    out.append("[rank2]:[E1201 10:10:43.000000001 ProcessGroupNCCL.cpp:1614] [PG ID 0 PG GUID 0(default_pg) Rank 2] Received a dump "
               "signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL "
               "work: 12, last completed NCCL work: 12.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes "
               "used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, "
               "didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the "
               "communications library (e.g. NCCL), etc.")
    return "\n".join(out) + "\n"


def test_watchdog_status_names_the_rank_stuck_outside() -> None:
    from crashscope.sources.base import ParseOptions

    df, _ = parse_text("pytorch", _watchdog_lines(), options=ParseOptions(year=2026))
    (f,) = col.watchdog_stuck_outside(df, 4)
    assert f.ranks == (2,) and f.cause == "node_failure"
    assert "#13" in f.title and "2026-12-01T10:00:40.953" in f.title  # 10:10:41 minus 600047 ms


def test_watchdog_all_waiting_names_nobody() -> None:
    lines = "\n".join(ln for ln in _watchdog_lines().splitlines() if not ln.startswith("[rank2]"))
    df, _ = parse_text("pytorch", lines)
    assert col.watchdog_stuck_outside(df, 4) == []


def test_hang_named_every_time_across_the_recordings(tmp_path: Path) -> None:
    """The closing measurement: with every dump, the rank that never entered is named N/N."""
    named = 0
    for d in HANGS:
        found, _ = _findings(d)
        named += list(found[col.HANG_ID].ranks) == _truth(d)["culprit"]["ranks"]
    assert named == len(HANGS)


# --- Nsight Systems traces: who never launched the collective its peers wait in ---------------

def _nsys_fixture():  # type: ignore[no-untyped-def]
    import importlib.util

    path = Path(__file__).resolve().parent / "data" / "nsys" / "nsys_fixture.py"
    spec = importlib.util.spec_from_file_location("nsys_fixture", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.mark.parametrize("stuck, seed", [(0, 3), (5, 4), (7, 5)])
def test_traces_name_the_rank_that_never_launched_the_collective(tmp_path: Path, stuck: int, seed: int) -> None:
    """Real NCCL semantics on the real export schema: the stuck rank's last AllReduce is
    the previous step's (completed); every peer launched the next one, which never ends."""
    from crashscope.timeline import build_timeline

    nf = _nsys_fixture()
    job = nf.plan_job(nodes=2, gpus_per_node=4, seed=seed, steps=6)
    for r, steps in job["plan"].items():
        if r == stuck:
            steps.pop()  # never reached the last step's collective
        else:
            steps[-1]["hung"] = True  # launched it; it never completed
    nf.write_job(tmp_path, job, hosts=["node001", "node002"], epoch_ns=1_789_600_000_000_000_000)
    tl = build_timeline(ingest(tmp_path))
    (f,) = col.trace_never_launched(tl.events, tl.world_size)
    assert f.ranks == (stuck,) and f.hosts == (f"node00{stuck // 4 + 1}",)
    assert f.cause == "node_failure" and f.weight == col.TRACE_HANG_WEIGHT
    assert "never launched NCCL call #6" in f.title and f.evidence[0].file.endswith(".sqlite")


def test_traces_of_a_healthy_or_merely_cut_capture_name_nobody(tmp_path: Path) -> None:
    from crashscope.timeline import build_timeline

    nf = _nsys_fixture()
    job = nf.plan_job(nodes=1, gpus_per_node=4, seed=9, steps=5)
    nf.write_job(tmp_path, job, hosts=["node001"], epoch_ns=1_789_600_000_000_000_000)
    tl = build_timeline(ingest(tmp_path))
    assert col.trace_never_launched(tl.events, tl.world_size) == []  # every last call completed
    # one rank's last kernel alone left in flight (the fixture's hung_rank): no peer waits on anyone
    job = nf.plan_job(nodes=1, gpus_per_node=4, seed=9, steps=5, hung_rank=2)
    d = tmp_path / "one"
    nf.write_job(d, job, hosts=["node001"], epoch_ns=1_789_600_000_000_000_000)
    tl = build_timeline(ingest(d))
    assert col.trace_never_launched(tl.events, tl.world_size) == []


# --- the dump's initiator versus the ranks notified by its signal ------------------------------

_TAIL = ("and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last completed NCCL work: {comp}."
         "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
         "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this "
         "can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. "
         "NCCL), etc. ")


def _signal_lines(initiator: int, notified: list[int], *, own_log: bool = True) -> str:
    """ProcessGroupNCCL's lines around a dump on timeout (torch 2.4+ ProcessGroupNCCL.cpp): the
    initiator's watchdog timeout, its ``First PG on this rank to signal dumping`` and its monitor's
    ``from this local rank``; each notified rank's ``Observed flight recorder dump signal`` and
    ``from  rank N`` (two spaces: the message is built as ``from `` + `` rank N``)."""
    pre = "[rank{r}]:[E1201 13:5{m}:{s:02d}.1{r}0000000 ProcessGroupNCCL.cpp:{ln}] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
    out = []
    if own_log:
        r = initiator
        out.append(pre.format(r=r, m=2, s=10, ln=632) + "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
                   "OpType=ALLREDUCE, NumelIn=3, NumelOut=3, Timeout(ms)=5000) ran for 5012 milliseconds before timing out.")
        out.append(pre.format(r=r, m=2, s=10, ln=2271) + " failure detected by watchdog at work sequence id: 7 PG status: "
                   "last enqueued work: 7, last completed work: 6")
        out.append(pre.format(r=r, m=2, s=10, ln=2106) + "First PG on this rank to signal dumping.")
        out.append(pre.format(r=r, m=2, s=11, ln=1746) + "Received a dump signal due to a collective timeout from this local rank "
                   + _TAIL.format(enq=7, comp=6))
    for r in notified:
        out.append(pre.format(r=r, m=2, s=12, ln=1794) + "Observed flight recorder dump signal from another rank via TCPStore.")
        out.append(pre.format(r=r, m=2, s=12, ln=1858) + f"Received a dump signal due to a collective timeout from  rank {initiator} "
                   + _TAIL.format(enq=7, comp=6))
    return "\n".join(out) + "\n"


def test_dump_origin_names_the_initiator_and_the_notified() -> None:
    from crashscope.sources.base import ParseOptions

    df, _ = parse_text("pytorch", _signal_lines(1, [0, 3]), options=ParseOptions(year=2026))
    o = col.dump_origin(df)
    assert o.initiator == 1 and "collective timed out" in o.initiator_how
    assert sorted(o.notified) == [0, 3] and all(by == 1 for by, _ in o.notified.values())
    ev = o.evidence(dumped={0, 1, 3}, expected={0, 1, 2, 3})
    assert ev[0].rank == 1 and "fired first" in ev[0].message
    assert "rank(s) 2 logged no dump signal" in ev[0].message  # the one that never answered
    assert [e.rank for e in ev[1:]] == [0, 3] and all("notified" in e.message for e in ev[1:])
    # the initiator's own log missing: the notified ranks name it
    df2, _ = parse_text("pytorch", _signal_lines(1, [0, 3], own_log=False), options=ParseOptions(year=2026))
    o2 = col.dump_origin(df2)
    assert o2.initiator == 1 and "named by 2 notified" in o2.initiator_how and 1 not in o2.notified


def test_dump_origin_the_earliest_own_watchdog_is_the_initiator() -> None:
    from crashscope.sources.base import ParseOptions

    # rank 3 timed out on its own too, a second later than rank 0: rank 0 initiated
    lines = _signal_lines(0, [1]) + _signal_lines(3, [], own_log=True).replace("13:52:10", "13:52:11")
    df, _ = parse_text("pytorch", lines, options=ParseOptions(year=2026))
    o = col.dump_origin(df)
    assert o.initiator == 0 and sorted(o.self_fired) == [0, 3] and sorted(o.notified) == [1]
    assert "rank(s) 3 timed out on their own later" in o.evidence(set(), {0, 1, 2, 3})[0].message
    # no dump-signal line at all (TORCH_NCCL_DUMP_ON_TIMEOUT off): no silence is read into it
    only_timeouts = "\n".join(ln for ln in lines.splitlines() if "dump signal" not in ln)
    df3, _ = parse_text("pytorch", only_timeouts, options=ParseOptions(year=2026))
    o3 = col.dump_origin(df3)
    assert o3.initiator == 0 and not o3.notified and "logged no dump signal" not in o3.evidence(set(), {0, 1, 2, 3})[0].message


def test_hang_evidence_says_who_initiated_and_whose_dump_is_missing(tmp_path: Path) -> None:
    case = FR / "hang_rank2"
    want = _truth(case)["culprit"]["ranks"]
    d = _without(case, tmp_path, [1])
    # rank 0 waited in the collective and its watchdog fired; ranks 1 and 3 dumped on its signal;
    # the stopped rank 2 never answered it
    (d / "rank_signals.log").write_text(_signal_lines(0, [1, 3]))
    found, ev = _findings(d)
    f = found[col.HANG_ID]
    assert list(f.ranks) == want and f.weight == col.HANG_PARTIAL_WEIGHT
    assert "rank 0's watchdog fired first and signalled the dump; rank(s) 1,3 were notified by its signal" in f.title
    origin = next(e for e in f.evidence if "fired first" in e.message)
    assert origin.rank == 0
    assert "no dump here from rank(s) 1, which got the signal" in origin.message
    assert "rank(s) 2 logged no dump signal" in origin.message
    assert any(e.rank == 1 and "notified" in e.message for e in f.evidence)
    assert col.missing_dumps(ev, 4) == [1]


def test_watchdog_finding_names_the_initiator() -> None:
    from crashscope.sources.base import ParseOptions

    df, _ = parse_text("pytorch", _watchdog_lines(), options=ParseOptions(year=2026))
    (f,) = col.watchdog_stuck_outside(df, 4)
    assert "rank 0's watchdog fired first and signalled the dump; rank(s) 2 were notified by its signal" in f.title
    assert f.evidence[0].rank == 2 and f.evidence[1].rank == 0 and "fired first" in f.evidence[1].message
