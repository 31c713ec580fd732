"""Timeline stage: identity resolution, kernel clock conversion, skew, interpolation,
symptom collapsing."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from crashscope.ingest import IngestResult
from crashscope.timeline import build_timeline
from tests.factories import SEC, T0, make_event


def _tl(frames: list[pl.DataFrame], **kw):  # type: ignore[no-untyped-def]
    ev = pl.concat(frames, how="vertical")
    return build_timeline(IngestResult(root=Path("."), events=ev, files=[]), **kw)


def _timeout(rank: int, host: str, t: float, seq: int = 5012) -> pl.DataFrame:
    return make_event(
        kind="collective_timeout", source="pytorch", host=host, rank=rank, t=t, file=f"{host}/rank{rank}.log", line=10,
        message=f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE) ran for 600047 milliseconds",
        attrs={"seq": seq, "op": "ALLREDUCE", "pg_id": 0, "timeout_ms": 600000},
    )


def test_nccl_pid_maps_to_rank_and_xid_lands_on_that_rank() -> None:
    init = make_event(kind="comm_init", source="nccl", host="node002", pid=4242, gpu="0000:3b:00.0", gpu_index=3, severity="info",
                      attrs={"phase": "complete", "rank": 11, "nranks": 16, "comm_id": "0xabc"}, file="node002/out.log", line=5)
    sub = make_event(kind="comm_init", source="nccl", host="node002", pid=4242, severity="info",
                     attrs={"phase": "complete", "rank": 1, "nranks": 2}, file="node002/out.log", line=6)
    warn = make_event(kind="network_error", source="nccl", host="node002", pid=4242, file="node002/out.log", line=9, t=30)
    xid = make_event(kind="xid", source="kernel", host="node002", gpu="0000:3b:00.0", severity="critical", attrs={"xid": 79}, file="node002/dmesg", line=1, t=10)
    tl = _tl([init, sub, warn, xid])
    by_kind = {r["kind"]: r for r in tl.events.iter_rows(named=True)}
    assert by_kind["network_error"]["rank"] == 11  # the world communicator's rank, not the 2-rank sub-comm's
    assert by_kind["xid"]["rank"] == 11  # PCI id -> rank that used that GPU
    assert tl.world_size == 16


def test_symptoms_collapse_with_missing_ranks() -> None:
    frames = [_timeout(r, f"node{r // 4 + 1:03d}", 600 + r * 0.01) for r in range(16) if r != 9]
    tl = _tl(frames, expected_ranks=16)
    g = tl.groups[0]
    assert g.kind == "collective_timeout" and g.count == 15
    assert g.missing_ranks == [9]
    assert g.first_rank == 0 and g.first_line == 10
    assert "seq=5012" in g.signature


def test_clock_skew_is_estimated_and_corrected() -> None:
    frames = []
    for r in range(16):
        host = f"node{r // 4 + 1:03d}"
        skew = 7.0 if host == "node003" else 0.0
        frames.append(_timeout(r, host, 600 + skew))
    xid = make_event(kind="xid", source="kernel", host="node003", t=500 + 7.0, attrs={"xid": 79}, file="node003/dmesg", line=3)
    tl = _tl(frames + [xid])
    assert abs(tl.skew_s["node003"] - 7.0) < 0.01
    row = tl.events.filter(pl.col("kind") == "xid").row(0, named=True)
    assert row["time_quality"] == "aligned"
    assert abs(row["time"].timestamp() - (T0 / SEC + 500)) < 1e-6
    assert any("node003" in w and "+7.0 s" in w for w in tl.warnings)


def test_dmesg_monotonic_stamps_are_converted_with_boot_epoch() -> None:
    boot = T0 / SEC - 10_000
    # One kernel line with both clocks (journal JSON) gives the boot epoch for the host.
    pair = make_event(kind="xid", source="kernel", host="node004", time=int((boot + 100) * SEC), attrs={"mono": 100.0, "xid": 63}, file="node004/journal.json", line=1)
    raw = make_event(kind="xid", source="kernel", host="node004", time=None, time_quality="missing", attrs={"mono": 9123.5, "boot": 0, "xid": 79}, file="node004/dmesg.txt", line=2)
    other = make_event(kind="xid", source="kernel", host="node005", time=None, time_quality="missing", attrs={"mono": 5.0, "boot": 0, "xid": 79}, file="node005/dmesg.txt", line=2)
    tl = _tl([pair, raw, other])
    r = tl.events.filter(pl.col("file") == "node004/dmesg.txt").row(0, named=True)
    assert r["time_quality"] == "aligned"
    assert abs(r["time"].timestamp() - (boot + 9123.5)) < 1e-3
    assert any("node005/dmesg.txt" in w and "boot" in w for w in tl.warnings)


def test_btime_converts_dmesg() -> None:
    boot = T0 // SEC - 3600
    bt = make_event(kind="boot", source="versions", host="node006", time=boot * SEC, attrs={"btime": boot}, file="node006/proc_stat", line=1, severity="info")
    raw = make_event(kind="xid", source="kernel", host="node006", time=None, time_quality="missing", attrs={"mono": 60.25, "boot": 0, "xid": 48}, file="node006/dmesg", line=7)
    tl = _tl([bt, raw])
    r = tl.events.filter(pl.col("kind") == "xid").row(0, named=True)
    assert abs(r["time"].timestamp() - (boot + 60.25)) < 1e-3


def test_unstamped_lines_are_interpolated_within_their_file() -> None:
    a = make_event(kind="network_error", source="nccl", t=100, file="f.log", line=10)
    b = make_event(kind="nccl_error", source="nccl", time=None, time_quality="missing", file="f.log", line=11)
    c = make_event(kind="nccl_error", source="nccl", time=None, time_quality="missing", file="g.log", line=1)
    tl = _tl([a, b, c])
    rb = tl.events.filter((pl.col("file") == "f.log") & (pl.col("line") == 11)).row(0, named=True)
    assert rb["time_quality"] == "estimated" and rb["time"].timestamp() == T0 / SEC + 100
    rc = tl.events.filter(pl.col("file") == "g.log").row(0, named=True)
    assert rc["time"] is None and rc["time_quality"] == "missing"


def test_host_from_file_name_of_known_host() -> None:
    a = make_event(kind="xid", source="kernel", host="node007", file="node007/dmesg", line=1)
    b = make_event(kind="nccl_error", source="nccl", host=None, file="logs/nccl.node007.1234.log", line=1)
    tl = _tl([a, b])
    assert set(tl.events["host"].to_list()) == {"node007"}


def test_job_year_ignores_a_stray_old_stamp() -> None:
    from crashscope.timeline import job_year_month as _job_year_month

    jan = int(datetime(2027, 1, 3, 10, tzinfo=timezone.utc).timestamp()) * SEC
    dec = int(datetime(2026, 12, 20, 10, tzinfo=timezone.utc).timestamp()) * SEC
    frames = [make_event(time=dec, source="kernel", kind="xid")] + [make_event(time=jan + i * SEC, source="slurm", kind="job_state") for i in range(3)]
    assert _job_year_month(pl.concat(frames)) == (2027, 1)


def test_yearless_stamps_across_new_year_from_either_side() -> None:
    from crashscope.sources.base import FileInfo, ParseContext, ParseOptions

    def date(ref_year: int, ref_month: int, month: int) -> int:
        ctx = ParseContext(FileInfo("f", "f"), "kernel", ParseOptions(year=ref_year, month=ref_month))
        return datetime.fromtimestamp(ctx.yearless_ns(month, 15, 12, 0, 0) / SEC, timezone.utc).year

    assert date(2026, 12, 1) == 2027 and date(2026, 12, 12) == 2026  # job started in December
    assert date(2027, 1, 12) == 2026 and date(2027, 1, 1) == 2027  # reference month is January
    assert date(2026, 6, 11) == 2026


def test_a_message_that_names_its_rank_gives_the_event_that_rank():
    from crashscope.timeline import _subject_ranks
    from tests.factories import make_events

    ev = make_events(
        dict(source="pytorch", kind="exception", message="RuntimeError: DDP expects same model across all ranks, but Rank 3 has 2247 params, while rank 0 has inconsistent 0 params."),
        dict(source="nccl", kind="nccl_error", message="init.cc:497 NCCL WARN Duplicate GPU detected : rank 6 and rank 0 both on CUDA device 17"),
        dict(source="pytorch", kind="exception", rank=1, message="RuntimeError: Parameters which did not receive grad for rank 3: w"),
        dict(source="pytorch", kind="exception", message="RuntimeError: rank 3 is fine"),
    )
    assert _subject_ranks(ev)["rank"].to_list() == [3, 6, 1, None]  # a prefix's rank is kept


def test_year_less_stamps_of_a_past_job_are_dated_in_one_pass(tmp_path) -> None:
    """A 2024 job: its c10 lines print no year; the Slurm lines that carry one date them.
    One reading (no second ingest), and a December line of a January job falls in the year before."""
    from crashscope.pipeline import analyze

    (tmp_path / "slurm-77.out").write_text(
        "[2024-01-03T10:00:00.000] error: *** JOB 77 ON node001 CANCELLED AT 2024-01-03T10:05:00 ***\n"
        "slurmstepd: error: *** JOB 77 ON node001 CANCELLED AT 2024-01-03T10:05:00 ***\n"
    )
    (tmp_path / "rank0.log").write_text(
        "[rank0]:[E0103 10:04:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.\n"
        "[rank0]:[E1231 23:59:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.\n"
    )
    calls = []
    import crashscope.pipeline as mod

    real = mod.ingest
    monkey = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    mod.ingest = monkey
    try:
        _, tl, _ = analyze(tmp_path, use_classifier=False)
    finally:
        mod.ingest = real
    assert len(calls) == 1
    c10 = tl.events.filter(pl.col("file") == "rank0.log").sort("line")
    years = {(line, t.year) for line, t in c10.select("line", "time").iter_rows() if t is not None}
    assert years == {(1, 2024), (2, 2023)}, years


def test_one_world_size_for_the_timeline_and_the_rule_engine() -> None:
    """A subgroup's communicator (nranks 2) must not shrink a job whose ranks reach 15."""
    from crashscope.engine.evaluate import infer_expected_ranks
    from crashscope.schema import world_size

    ev = pl.concat([
        make_event(kind="comm_init", source="nccl", rank=0, attrs={"nranks": 2}),
        make_event(kind="collective_timeout", source="pytorch", rank=15),
    ])
    assert world_size(ev) == 16 == infer_expected_ranks(ev)
    assert _tl([make_event(kind="comm_init", source="nccl", rank=0, attrs={"nranks": 32})]).world_size == 32


def _app_line(rank: int, node: str, t: float, line: int, text: str) -> pl.DataFrame:
    # what applog emits for "2026-.. - INFO - [rank R/4] [nX] train - step ..." (stamp stripped)
    return make_event(kind="train_step", source="applog", host=None, rank=rank, t=t, file=f"logs/rank{rank}.log", line=line,
                      message=f"- [rank {rank}/4] [{node}] train - {text}", severity="info")


def _nodelist(nodes: list[str]) -> pl.DataFrame:
    return make_event(kind="job_state", source="slurm", host=None, t=900, file="scontrol_show_job.txt", line=1,
                      message="scontrol: JobId=4 JobState=FAILED", attrs={"state": "failed", "nodes": nodes})


def test_a_rank_is_on_the_job_node_its_own_log_header_names() -> None:
    """Under torchrun srun's task ids are node indices and the agent says `localhost`: the rank's
    own logging header ("[rank 1/4] [n1]", "node=n1") is what ties it to a node."""
    frames = [_nodelist(["n1", "n2"])]
    for r, node in enumerate(["n1", "n1", "n2", "n2"]):
        frames += [_app_line(r, node, 10 + i, i + 1, f"step {i} loss 0.6") for i in range(4)]
    # a rank whose lines name a node only once in five, and another job node in passing: no guess
    frames += [make_event(kind="log_error", source="applog", host=None, rank=5, t=20 + i, file="logs/rank5.log", line=i + 1,
                          message="connection to [n2] lost" if i == 0 else "retrying", severity="error") for i in range(5)]
    # host=vm is the machine (not in the NodeList), node=n2 is the Slurm node
    frames.append(make_event(kind="activity", source="applog", host=None, rank=6, t=30, file="logs/rank6.log", line=1,
                             message="started pid=7 node=n2 host=vm rank=6", severity="info"))
    tl = _tl(frames)
    host = dict(tl.events.filter(pl.col("source") == "applog").group_by("rank").agg(pl.col("host").first()).iter_rows())
    assert host[0] == "n1" and host[1] == "n1" and host[2] == "n2" and host[3] == "n2"
    assert host[5] is None
    assert host[6] == "n2"


def _agent(kind: str, task: int, t: float, line: int, **attrs) -> pl.DataFrame:  # type: ignore[no-untyped-def]
    msg = ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default" if kind == "job_step"
           else "Received 15 death signal, shutting down workers")
    a = {"action": "launcher_start", "launcher": "torchrun"} if kind == "job_step" else {"signal": "SIGTERM", "direction": "received"}
    return make_event(kind=kind, source="pytorch", host=None, t=t, file="slurm-7.out", line=line, message=msg,
                      attrs={**a, "agent_pid": 100 + task, "srun_task": task, **attrs}, severity="warning")


def _torchrun_job(skews: list[float], signals: bool = True) -> list[pl.DataFrame]:
    nodes = [f"n{i + 1}" for i in range(len(skews))]
    frames = [_nodelist(nodes), make_event(kind="process_exit", source="slurm", host="n1", t=400, file="slurm-7.out", line=90,
                                           message="srun: error: n1: task 0: Exited with exit code 1",
                                           attrs={"hosts": ["n1"], "tasks": [0], "exitcode": 1}, local_rank=None)]
    for i, s in enumerate(skews):
        frames.append(_agent("job_step", i, 10 + 0.02 * i + s, 1 + i))
        if signals:
            frames.append(_agent("signal", i, 400.5 + 0.01 * i + s, 50 + i))
    # a torchrun worker's traceback line, so the job reads as a torchrun job
    frames.append(make_event(kind="exception", source="pytorch", host=None, rank=0, local_rank=0, t=399, file="slurm-7.out", line=80,
                             message="RuntimeError: boom"))
    return frames


def test_launcher_lines_land_on_their_node_by_srun_task() -> None:
    """Under torchrun the `srun -l` label of an agent's line is its node: srun's own error line
    names task 0's node, the NodeList order the others' (one task per node)."""
    tl = _tl(_torchrun_job([0.0, 0.0, 0.0, 0.0]))
    starts = tl.events.filter(pl.col("kind") == "job_step").sort("line")
    assert starts["host"].to_list() == ["n1", "n2", "n3", "n4"]


def _task_step(task: int, line: int, **kw) -> pl.DataFrame:  # type: ignore[no-untyped-def]
    # an application line behind srun -l's "N: " label (applog keeps N as attrs.srun_task)
    return make_event(kind="train_step", source="applog", host=None, t=10 + line, file="slurm-7.out", line=line,
                      message="step 5 loss 2.0", attrs={"step": 5, "srun_task": task}, **kw)


def test_srun_task_is_the_rank_under_plain_srun() -> None:
    """srun with one task per rank: SLURM_PROCID is the rank (the task label becomes the rank)."""
    tl = _tl([_nodelist(["n1", "n2"]), _task_step(0, 1), _task_step(3, 2)])
    assert tl.events.filter(pl.col("kind") == "train_step")["rank"].to_list() == [0, 3]


def test_a_line_number_label_is_no_srun_task_without_slurm() -> None:
    """ctest numbers a test's output lines "91: " as srun -l does; with nothing from Slurm in
    the files the label is nobody's rank."""
    tl = _tl([_task_step(91, 1)])
    assert tl.events.filter(pl.col("kind") == "train_step")["rank"].to_list() == [None]


def test_srun_task_is_a_node_under_torchrun() -> None:
    """Under torchrun a task is a node's agent: an unprefixed rank line behind "1: " is on the
    job's second node, with no rank from its task."""
    frames = _torchrun_job([0.0, 0.0]) + [_task_step(1, 60)]
    step = _tl(frames).events.filter(pl.col("kind") == "train_step")
    assert step["rank"].to_list() == [None] and step["host"].to_list() == ["n2"]


def test_srun_task_is_no_rank_when_the_step_had_fewer_tasks_than_ranks() -> None:
    """Slurm recorded a step of 2 tasks on 2 nodes, NCCL's world has 16 ranks: one launcher
    per node (any launcher), so a task names the node, not a rank."""
    step = make_event(kind="job_state", source="sacct", host=None, file="sacct.txt", line=2, message="7.0 COMPLETED",
                      attrs={"state": "FAILED", "nodes": ["n1", "n2"], "ntasks": 2})
    init = make_event(kind="comm_init", source="nccl", host="n1", pid=10, file="nccl.log", line=1, message="Init COMPLETE",
                      attrs={"rank": 0, "nranks": 16})
    ev = _tl([step, init, _task_step(0, 1), _task_step(1, 2)]).events.filter(pl.col("kind") == "train_step")
    assert ev["rank"].to_list() == [None, None] and ev["host"].to_list() == ["n1", "n2"]


def test_clock_skew_from_launcher_start_and_step_signal() -> None:
    """Two anchors (every agent starts, every agent gets the step's SIGTERM) agree that n3 is
    5.2 s behind: its events are shifted and the offset is reported."""
    tl = _tl(_torchrun_job([0.0, 0.0, -5.2, 0.0]))
    assert abs(tl.skew_s["n3"] + 5.2) < 0.1
    assert all(abs(tl.skew_s[h]) < 0.1 for h in ("n1", "n2", "n4"))
    n3 = tl.events.filter(pl.col("host") == "n3")
    assert set(n3["time_quality"].cast(pl.String).to_list()) == {"aligned"}
    start = n3.filter(pl.col("kind") == "job_step")["time"][0]
    assert abs((start - datetime.fromtimestamp((T0 + 10.04 * SEC) / SEC, timezone.utc)).total_seconds()) < 0.2
    assert any("clock of n3 is -5.2 s" in w for w in tl.warnings)


def test_a_single_anchor_reports_skew_but_does_not_shift() -> None:
    """One anchor alone (only the agents' start) is weak evidence: the offset is reported and
    flagged, the timeline is left as the clocks wrote it."""
    tl = _tl(_torchrun_job([0.0, 0.0, 0.0, 4.5], signals=False))
    assert abs(tl.skew_s["n4"] - 4.5) < 0.1
    assert "aligned" not in tl.events["time_quality"].cast(pl.String).to_list()
    assert any("clock of n4 may be +4.5 s" in w and "not shifted" in w for w in tl.warnings)


def test_the_sample_jobs_planted_skew_is_found_and_corrected() -> None:
    """fixtures/jobs/sample_fabric_timeout: node002's clock is 5.216 s behind (truth.json). After
    the correction the node002 symptom no longer precedes the node001 cable error."""
    import json

    from crashscope.pipeline import load_timeline

    root = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "sample_fabric_timeout"
    planted = json.loads((root / "truth.json").read_text())["options"]["clock_skew_s"]
    tl = load_timeline(root).timeline  # the job's zone (America/Chicago) applied, as analyze does
    assert set(h for h, o in tl.skew_s.items() if abs(o) >= 2.0) == set(planted) == {"node002"}
    assert abs(tl.skew_s["node002"] - planted["node002"]) < 0.3
    ev = tl.events
    cable = ev.filter(pl.col("message").str.contains("Cable error", literal=True))["time"].min()
    closed = ev.filter(pl.col("message").str.contains("Connection closed by remote peer", literal=True) & (pl.col("host") == "node002"))["time"].min()
    assert cable is not None and closed is not None and closed > cable


@pytest.mark.parametrize("seed", [2, 3, 5])
def test_simulated_skew_is_found_on_the_planted_host_only(tmp_path: Path, seed: int) -> None:
    from crashscope.ingest import ingest
    from crashscope.simulate import simulate

    truth = simulate(tmp_path / "job", cause="fabric_timeout", nodes=4, gpus_per_node=2, seed=seed, layout="slurm_out")
    planted = truth["options"]["clock_skew_s"]
    tl = build_timeline(ingest(tmp_path / "job"))
    shifted = {w.split()[2] for w in tl.warnings if w.startswith("clock of") and "were shifted" in w}
    assert shifted == set(planted)
    for h, o in planted.items():
        assert abs(tl.skew_s[h] - o) < 0.5


def test_a_kernel_oom_kill_of_a_pid_a_rank_stated_lands_on_that_rank() -> None:
    """The rank's log says `started pid=27519 node=n2 ... rank=3` (applog keeps the one pid a
    rank states on its activity); dmesg's `Killed process 27519` names no rank and no node."""
    frames = [_nodelist(["n1", "n2"])]
    for r, node in enumerate(["n1", "n1", "n2", "n2"]):
        frames += [_app_line(r, node, 10 + i, i + 1, f"step {i} loss 0.6") for i in range(3)]
        frames.append(make_event(kind="activity", source="applog", host=None, rank=r, t=13, file=f"logs/rank{r}.log", line=4,
                                 message=f"last time-stamped line of this file: - [rank {r}/4] [{node}] train - step 2 loss 0.6",
                                 attrs={"lines": 4, "pid": 27516 + r}, severity="info"))
    frames.append(make_event(kind="host_oom", source="kernel", host=None, rank=None, pid=27519, t=20, file="dmesg.txt", line=81,
                             message="Memory cgroup out of memory: Killed process 27519 (python)", severity="critical"))
    tl = _tl(frames)
    kill = tl.events.filter(pl.col("kind") == "host_oom").row(0, named=True)
    assert kill["rank"] == 3 and kill["host"] == "n2"


def test_one_host_spelled_in_two_cases_is_one_host() -> None:
    # srun's 'error: Orion-01-01: task 4' and the step banner's 'orion-01-01' are the same node.
    frames = [_timeout(r, "orion-01-01" if r % 2 else "Orion-01-01", 600 + r) for r in range(4)]
    frames += [_timeout(4, "GPU-N7", 610), _timeout(5, "GPU-N7", 611), _timeout(6, "gpu-n8", 612)]
    tl = _tl(frames)
    assert tl.hosts == ["GPU-N7", "gpu-n8", "orion-01-01"]  # lower case wins where a file has it; distinct hosts stay
    assert set(tl.events["host"].to_list()) == {"GPU-N7", "gpu-n8", "orion-01-01"}


def _step(nodes: list[str], tasks: int, **attrs: object) -> pl.DataFrame:
    return make_event(kind="job_state", source="sacct", host=None, severity="info", file="sacct.json", line=None,
                      message="sacct: StepId=18.0 State=COMPLETED",
                      attrs={"format": "json", "job_id": "18", "step": "0", "state": "COMPLETED", "nodes": nodes, "ntasks": tasks, **attrs})


def _step_line(rank: int, host: str | None = None, **kw: object) -> pl.DataFrame:
    return make_event(kind="train_step", source="applog", severity="info", host=host, rank=rank, t=float(rank),
                      file=f"logs/rank{rank}.log", message=f"step 10 loss 0.5 (rank {rank})",
                      attrs={"framework": "plain", "step": 10}, **kw)


def _hosts(tl) -> dict[int, str | None]:  # type: ignore[no-untyped-def]
    ev = tl.events.filter(pl.col("kind") == "train_step")
    return dict(zip(ev["rank"].to_list(), ev["host"].to_list()))


def test_the_steps_block_layout_names_the_node_of_ranks_no_line_ties_to_one() -> None:
    # fixtures/recorded/cpu_starve_mild_rank3_srun: sacct --json step 0, tasks 4 on n[1-2], "Block"
    lines = [_step_line(r) for r in range(4)]
    assert _hosts(_tl([*lines, _step(["n1", "n2"], 4, distribution="Block")])) == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    # scontrol's NtasksPerN: 3 per node
    six = [_step_line(r) for r in range(6)]
    assert _hosts(_tl([*six, _step(["n1", "n2"], 6, tasks_per_node=3)]))[3] == "n2"
    # a rank whose node a line names agrees: still inferred for the others
    agree = _tl([_step_line(0, "n1"), *lines[1:], _step(["n1", "n2"], 4)])
    assert _hosts(agree) == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}


@pytest.mark.parametrize("why,frames", [
    ("cyclic", lambda L: [*L, _step(["n1", "n2"], 4, distribution="Cyclic")]),
    ("a known rank elsewhere", lambda L: [_step_line(0, "n2"), *L[1:], _step(["n1", "n2"], 4)]),
    ("not one task per rank", lambda L: [*L, _step(["n1", "n2"], 2)]),
    ("torchrun", lambda L: [*[_step_line(r, local_rank=r % 2) for r in range(4)], _step(["n1", "n2"], 4)]),
    ("two layouts", lambda L: [*L, _step(["n1", "n2"], 4), _step(["n2", "n1"], 4)]),
])
def test_no_layout_is_inferred_when_slurm_does_not_say_it(why: str, frames) -> None:  # type: ignore[no-untyped-def]
    hosts = _hosts(_tl(frames([_step_line(r) for r in range(4)])))
    assert hosts[1] is None and hosts[3] is None, why


def test_a_catalog_cause_read_in_a_generic_error_line_stays_beside_it() -> None:
    # NVIDIA/pyxis#61: slurmstepd's 'error: pyxis: ... enroot-switchroot: failed to execute: ...'
    line = "slurmstepd: error: pyxis:     enroot-switchroot: failed to execute: /bin/bash: No such file or directory"
    generic = make_event(kind="log_error", source="slurm", host=None, file="slurm-77.out", line=3, message=line, attrs={"daemon": "slurmstepd"})

    def catalog(role: str) -> pl.DataFrame:
        return make_event(kind="log_error", source="catalog", host=None, file="slurm-77.out", line=3, message=line,
                          attrs={"catalog": "container", "name": "enroot_exec_missing", "cause": "software_error", "role": role})
    kept = _tl([generic, catalog("cause")]).events
    assert sorted(kept["source"].cast(pl.String).to_list()) == ["catalog", "slurm"]
    # a catalog reading that names no cause is the same fact as the source's own: one event
    assert _tl([generic, catalog("context")]).events["source"].cast(pl.String).to_list() == ["slurm"]


def test_a_catalog_cause_in_a_net_plugin_warn_the_nccl_source_reads_generically_stays() -> None:
    # aws-ofi-nccl's WARN: the NCCL source reads "NET/OFI ..." as a network_error of error_type "other"
    msg = "NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0"

    def nccl(error_type: str) -> pl.DataFrame:
        return make_event(kind="network_error", source="nccl", host="ip-10-0-7-21", file="rank4.log", line=9, message=msg,
                          attrs={"transport": "ofi", "error_type": error_type})

    cat = make_event(kind="network_error", source="catalog", host=None, file="rank4.log", line=9, message=msg,
                     attrs={"catalog": "nccl", "name": "ofi_request_completed_with_error", "cause": "fabric_timeout", "role": "cause"})
    assert sorted(_tl([nccl("other"), cat]).events["source"].cast(pl.String).to_list()) == ["catalog", "nccl"]
    # a line the source parsed itself (an IB completion with its status) keeps only the source's event
    assert _tl([nccl("completion"), cat]).events["source"].cast(pl.String).to_list() == ["nccl"]


def test_a_catalog_cause_gives_way_to_a_source_reading_of_the_same_cause() -> None:
    # NCCL's IB retry-exceeded completion: the NCCL source reads status 12, which
    # nccl-ib-completion-error reads as fabric_timeout, the catalog's cause: one fact, one event
    msg = "NET/IB : Got completion from peer 10.10.1.7<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
    src = make_event(kind="network_error", source="nccl", host="node001", file="rank3.log", line=9, message=msg,
                     attrs={"transport": "ib", "error_type": "completion", "status": 12})
    cat = make_event(kind="network_error", source="catalog", host=None, file="rank3.log", line=9, message=msg,
                     attrs={"catalog": "nccl", "name": "ib_completion_retry_exceeded", "cause": "fabric_timeout", "role": "cause"})
    assert _tl([src, cat]).events["source"].cast(pl.String).to_list() == ["nccl"]
    # the same text echoed in another file (a DistBackendError's "Last error:") is the same fact too
    echo = make_event(kind="network_error", source="catalog", host=None, file="launcher.log", line=2, message=msg,
                      attrs={"catalog": "nccl", "name": "ib_completion_retry_exceeded", "cause": "fabric_timeout", "role": "cause"})
    assert _tl([src, echo]).events["source"].cast(pl.String).to_list() == ["nccl"]
    # a catalog reading of another cause on that line is not the same reading: it stays
    other = make_event(kind="network_error", source="catalog", host=None, file="rank3.log", line=9, message=msg,
                       attrs={"catalog": "x", "name": "y", "cause": "node_failure", "role": "cause"})
    assert sorted(_tl([src, other]).events["source"].cast(pl.String).to_list()) == ["catalog", "nccl"]


def test_a_catalog_cause_in_a_warn_the_nccl_source_has_no_parser_for_stays() -> None:
    # NCCL graph/topo.h ncclTopoIdToNetDev's WARN: the NCCL source's fallback reads it as an
    # nccl_error with no error_type and no failed call; the catalog's cause stays beside it
    msg = "Could not find NET with id 0"
    base = dict(kind="nccl_error", source="nccl", host="node07", file="log.txt", line=3, message=msg)
    cat = make_event(kind="nccl_error", source="catalog", host=None, file="log.txt", line=3, message=msg,
                     attrs={"catalog": "nccl", "name": "nccl_topo_net_id_not_found", "cause": "software_error", "role": "cause"})
    warn = make_event(**base, attrs={"file": "graph/topo.h", "line_in_src": 230})
    assert sorted(_tl([warn, cat]).events["source"].cast(pl.String).to_list()) == ["catalog", "nccl"]
    # a WARN the source read as a failed system call keeps only the source's event
    call = make_event(**base, attrs={"call": "ibv_modify_qp", "errno_text": "Invalid argument"})
    assert _tl([call, cat]).events["source"].cast(pl.String).to_list() == ["nccl"]
    # a catalog reading that names no cause gives way to any reading of the line
    ctx = make_event(kind="nccl_error", source="catalog", host=None, file="log.txt", line=3, message=msg,
                     attrs={"catalog": "nccl", "name": "n", "cause": None, "role": "symptom"})
    assert _tl([call, ctx]).events["source"].cast(pl.String).to_list() == ["nccl"]


def _srun_exit(line: int, host: str, task: int, **attrs: object) -> pl.DataFrame:
    what = f"Exited with exit code {attrs['exitcode']}" if "exitcode" in attrs else "Terminated"
    return make_event(kind="process_exit", source="slurm", host=host, rank=None, time=None, file="slurm-2.out", line=line,
                      message=f"srun: error: {host}: task {task}: {what}", attrs={"hosts": [host], "tasks": [task], **attrs})


def _bare_exception(line: int, **kw: object) -> pl.DataFrame:
    return make_event(kind="exception", source="pytorch", file="slurm-2.out", line=line, host=None, rank=None, time=None,
                      message="ValueError: batch 3 has shape (7, 3), expected (8, 3)", attrs={"type": "ValueError"}, **kw)


def test_unlabelled_traceback_is_the_one_task_that_exited_with_an_error_code() -> None:
    # srun without -l: the traceback says no rank; srun's exit record of the one task that exited 1 does
    tl = _tl([_bare_exception(4), _srun_exit(5, "n2", 1, exitcode=1), _srun_exit(7, "n1", 0, signal="SIGTERM")])
    exc = tl.events.filter(pl.col("kind") == "exception").row(0, named=True)
    assert (exc["host"], exc["rank"]) == ("n2", 1)


@pytest.mark.parametrize("case", ["two_failed_tasks", "far_away", "torchrun_tag"])
def test_unlabelled_traceback_stays_unplaced_when_srun_does_not_single_out_a_task(case: str) -> None:
    if case == "two_failed_tasks":
        frames = [_bare_exception(4), _srun_exit(5, "n2", 1, exitcode=1), _srun_exit(6, "n1", 0, exitcode=1)]
    elif case == "far_away":
        frames = [_bare_exception(4), _srun_exit(900, "n2", 1, exitcode=1)]
    else:  # a torchrun worker's "[default0]:" traceback in merged output may be another node's
        frames = [_bare_exception(4, local_rank=0), _srun_exit(5, "n2", 1, exitcode=1)]
    exc = _tl(frames).events.filter(pl.col("kind") == "exception").row(0, named=True)
    assert (exc["host"], exc["rank"]) == (None, None), exc


def _step_terminate(line: int) -> pl.DataFrame:
    return make_event(kind="job_step", source="slurm", host=None, rank=None, time=None, file="slurm-2.out", line=line,
                      message="srun: launch/slurm: _step_signal: Terminating StepId=2.0", attrs={"action": "terminate", "step": "2.0"})


def test_tasks_srun_stopped_after_signalling_the_step_do_not_hide_the_one_that_failed_first() -> None:
    # srun -K: n2's task exits 1, srun signals the step, n1's task then exits 1 too (recorded:
    # enospc_other_torchrun); only the exits before the signal are failures of their own
    frames = [_bare_exception(4), _srun_exit(5, "n2", 1, exitcode=1), _step_terminate(6), _srun_exit(9, "n1", 0, exitcode=1)]
    exc = _tl(frames).events.filter(pl.col("kind") == "exception").row(0, named=True)
    assert (exc["host"], exc["rank"]) == ("n2", 1)


def _root_cause(line: int, rank: int) -> pl.DataFrame:
    return make_event(kind="root_cause_report", source="pytorch", host="localhost", rank=rank, local_rank=0, time=None,
                      file="slurm-2.out", line=line, message=f"ChildFailedError root cause: rank {rank} (local_rank 0) exitcode 1",
                      attrs={"root": True, "host": "localhost", "rank": rank, "local_rank": 0, "exitcode": 1})


def _rank_line(rank: int) -> pl.DataFrame:
    return make_event(kind="exception", source="pytorch", host=None, rank=rank, time=None, file="slurm-2.out", line=2,
                      message="RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 2043072 vs 2043024",
                      attrs={"type": "RuntimeError", "uncaught": True})


def test_torchruns_root_cause_lands_on_the_node_of_the_task_that_failed_first() -> None:
    # torchrun per node: the agent prints its summary ("host : localhost") and exits 1; srun's
    # record of that task comes next, then the step is signalled
    frames = [_rank_line(2), _root_cause(40, 2), _srun_exit(50, "n2", 1, exitcode=1), _step_terminate(51),
              _srun_exit(90, "n1", 0, exitcode=1)]
    ev = _tl(frames).events
    assert set(ev.filter(pl.col("rank") == 2)["host"].to_list()) == {"n2"}


def test_two_root_causes_before_the_first_failed_task_name_no_node() -> None:
    # both agents' workers failed; their summaries come in either order (iptables_rank1_nodebug_torchrun)
    frames = [_rank_line(2), _root_cause(40, 2), _root_cause(60, 1), _srun_exit(70, "n2", 1, exitcode=1), _step_terminate(71)]
    ev = _tl(frames).events
    assert ev.filter(pl.col("rank").is_in([1, 2]))["host"].null_count() == ev.filter(pl.col("rank").is_in([1, 2])).height


def test_each_agents_root_cause_lands_on_the_node_of_the_task_srun_records_next() -> None:
    # srun without -K: each agent prints its summary and exits 1, srun records each exit after
    # draining that agent's output (recorded: enospc_third_torchrun, rank 0 on n2, rank 2 on n1)
    frames = [_rank_line(2), _root_cause(40, 0), _srun_exit(50, "n2", 1, exitcode=1), _root_cause(80, 2),
              _srun_exit(90, "n1", 0, exitcode=1)]
    ev = _tl(frames).events
    assert set(ev.filter(pl.col("rank") == 0)["host"].to_list()) == {"n2"}
    assert set(ev.filter(pl.col("rank") == 2)["host"].to_list()) == {"n1"}


def test_both_summaries_before_both_records_name_no_node() -> None:
    # collmismatch_rank2_third_torchrun: both agents printed before srun recorded either exit
    frames = [_rank_line(2), _root_cause(40, 0), _root_cause(60, 3), _srun_exit(70, "n2", 1, exitcode=1),
              _srun_exit(71, "n1", 0, exitcode=1)]
    ev = _tl(frames).events
    assert ev.filter(pl.col("rank").is_in([0, 3]))["host"].null_count() == ev.filter(pl.col("rank").is_in([0, 3])).height


def test_a_task_that_died_of_a_signal_is_the_first_failure_and_its_faulthandler_lines_are_its_own() -> None:
    # segv_rank3_srun: Python's faulthandler prints no rank; srun says 'task 3: Segmentation fault'
    fh = make_event(kind="process_exit", source="catalog", file="slurm-2.out", line=4, host=None, rank=None, time=None,
                    message="Fatal Python error: Segmentation fault", attrs={"catalog": "signals", "name": "sigsegv", "signal": "SIGSEGV"})
    segv = make_event(kind="process_exit", source="slurm", host="n2", rank=None, time=None, file="slurm-2.out", line=20,
                      message="srun: error: n2: task 3: Segmentation fault", attrs={"hosts": ["n2"], "tasks": [3], "signal": "SIGSEGV"})
    frames = [fh, segv, _step_terminate(21), _srun_exit(23, "n2", 2, signal="SIGTERM"), _srun_exit(24, "n1", 0, signal="SIGTERM")]
    row = _tl(frames).events.filter(pl.col("source") == "catalog").row(0, named=True)
    assert (row["host"], row["rank"]) == ("n2", 3)


def test_a_ranks_statement_of_its_host_places_it_on_that_node() -> None:
    # train_fourth.py under srun torchrun (exception_rank2_fourth_torchrun): '[rank 2] hostname=n2 local_rank=0 ...'
    # once at its start; its traceback behind '[rank2]:' names no node and the agents' summaries say 'localhost'
    def ident(rank: int, host: str) -> pl.DataFrame:
        return make_event(kind="identity", source="applog", severity="info", host=None, rank=rank, time=None, file="slurm-2.out",
                          line=1 + rank, message=f"hostname={host} local_rank={rank % 2}", attrs={"host": host})
    exc = make_event(kind="exception", source="pytorch", host=None, rank=2, t=10.0, file="slurm-2.out", line=80,
                     message="RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x128 and 256x128)", attrs={"type": "RuntimeError"})
    tl = _tl([_step(["n1", "n2"], 2), *[ident(r, "n1" if r < 2 else "n2") for r in range(4)], exc])
    row = tl.events.filter(pl.col("kind") == "exception").row(0, named=True)
    assert row["host"] == "n2"
    # a host that is no node of the job (the machine's name) places nothing
    tl = _tl([_step(["n1", "n2"], 2), ident(2, "vm"), exc])
    assert tl.events.filter(pl.col("kind") == "exception")["host"].to_list() == [None]
