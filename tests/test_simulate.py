"""The fault simulator: determinism, planted evidence at the truth's file:line, layouts,
confounders, real-format shapes (checked with the reference regexes), scale, and the
checked-in corpus regenerating byte for byte."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import regex

from crashscope.simulate import CAUSES, CONFOUNDER_NAMES, LAYOUTS, simulate
from crashscope.simulate.corpus import generate_corpus
from crashscope.simulate.layout import Router

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "jobs"


def files_of(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def check_evidence(out: Path, truth: dict) -> None:
    for e in truth["evidence"]:
        lines = (out / e["file"]).read_text(encoding="utf-8").split("\n")
        assert lines[e["line"] - 1] == e["text"], e
        assert e["message"] and e["message"] in e["text"], e
        assert e["cause"] == truth["cause"]


# -- determinism ------------------------------------------------------------------------------

def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = simulate(tmp_path / "a", cause="gpu_hardware", nodes=2, gpus_per_node=4, seed=5, confounder_rate=1.0)
    b = simulate(tmp_path / "b", cause="gpu_hardware", nodes=2, gpus_per_node=4, seed=5, confounder_rate=1.0)
    assert a == b
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    c = simulate(tmp_path / "c", cause="gpu_hardware", nodes=2, gpus_per_node=4, seed=6, confounder_rate=1.0)
    assert files_of(tmp_path / "a") != files_of(tmp_path / "c")
    assert c["seed"] == 6


# -- every cause, every layout ------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cause", CAUSES)
def test_cause_plants_evidence(tmp_path: Path, cause: str, layout: str) -> None:
    truth = simulate(tmp_path, cause=cause, nodes=2, gpus_per_node=2, seed=CAUSES.index(cause) * 10 + LAYOUTS.index(layout), layout=layout)
    assert set(truth) >= {"schema_version", "job", "cause", "implicated", "first_failure", "evidence", "confounders", "layout", "seed", "options"}
    assert truth["schema_version"] == "1" and truth["cause"] == cause and truth["layout"] == layout
    assert truth["job"]["ranks"] == 4 and truth["job"]["nodes"] == ["node001", "node002"]
    assert set(truth["implicated"]) == {"nodes", "ranks", "gpus"}
    assert truth["evidence"], "every scenario plants at least one line"
    check_evidence(tmp_path, truth)
    if cause == "none":
        assert truth["first_failure"] is None
    else:
        ff = truth["first_failure"]
        assert set(ff) >= {"time", "node", "rank", "source", "message"} and ff["time"].endswith("Z")
    on_disk = json.loads((tmp_path / "truth.json").read_text())
    assert on_disk == json.loads(json.dumps(truth))


@pytest.mark.parametrize("variant", ["79", "48", "94", "95", "74", "119", "64"])
def test_every_xid_variant(tmp_path: Path, variant: str) -> None:
    truth = simulate(tmp_path, cause="gpu_hardware", variant=variant, nodes=2, gpus_per_node=2, seed=3)
    check_evidence(tmp_path, truth)
    assert f"): {variant}, " in truth["first_failure"]["message"]
    assert truth["implicated"]["gpus"] and truth["implicated"]["gpus"][0]["node"] == truth["implicated"]["nodes"][0]


@pytest.mark.parametrize("cause,variant", [("oom", "cuda"), ("oom", "host"), ("driver_drift", "cuda_insufficient"),
                                           ("driver_drift", "nccl_mismatch"), ("storage_stall", "rank0_save"),
                                           ("storage_stall", "sharded"), ("fabric_timeout", "link_down"),
                                           ("software_error", "ValueError")])
def test_variants(tmp_path: Path, cause: str, variant: str) -> None:
    truth = simulate(tmp_path, cause=cause, variant=variant, nodes=2, gpus_per_node=2, seed=4)
    assert truth["options"]["variant"] == variant
    check_evidence(tmp_path, truth)


def test_cascade_victims_time_out(tmp_path: Path) -> None:
    truth = simulate(tmp_path, cause="software_error", nodes=2, gpus_per_node=4, seed=2, layout="per_rank",
                     kill_on_bad_exit=False, confounders=[])
    culprit = truth["implicated"]["ranks"][0]
    node = culprit // 4
    timed_out = [r for r in range(8) if "Watchdog caught collective operation timeout" in (tmp_path / f"logs/rank{r}.log").read_text()]
    # ranks on the other node time out (until their agent SIGTERMs the rest); the culprit does not
    assert culprit not in timed_out
    assert set(range((1 - node) * 4, (2 - node) * 4)) & set(timed_out)
    agent = (tmp_path / f"logs/torchrun.node00{node + 1}.log").read_text()
    assert "Root Cause (first observed failure):" in agent and f"rank      : {culprit} (local_rank: {culprit % 4})" in agent


def test_node_failure_logs_end_mid_line(tmp_path: Path) -> None:
    truth = simulate(tmp_path, cause="node_failure", nodes=2, gpus_per_node=2, seed=1, layout="per_rank", confounders=[])
    dead = truth["implicated"]["nodes"][0]
    ranks = truth["implicated"]["ranks"]
    ends = [(tmp_path / f"logs/rank{r}.log").read_bytes() for r in ranks]
    assert any(b and not b.endswith(b"\n") for b in ends)
    out = next(tmp_path.glob("slurm-*.out")).read_text()
    assert "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***" in out
    assert f"error: Nodes {dead} not responding, setting DOWN" in (tmp_path / "slurm/slurmctld.log").read_text()


def test_preemption_all_nodes_one_instant(tmp_path: Path) -> None:
    simulate(tmp_path, cause="preemption", nodes=4, gpus_per_node=2, seed=8, confounders=[], sacct_json=False)
    out = next(tmp_path.glob("slurm-*.out")).read_text()
    banners = [ln for ln in out.splitlines() if "DUE TO PREEMPTION" in ln and "*** STEP" in ln]
    assert len(banners) == 4
    assert "|PREEMPTED|" in (tmp_path / "slurm/sacct.txt").read_text()


# -- layouts ------------------------------------------------------------------------------------

def test_layout_files(tmp_path: Path) -> None:
    for layout in LAYOUTS:
        d = tmp_path / layout
        t = simulate(d, cause="fabric_timeout", nodes=2, gpus_per_node=2, seed=1, layout=layout, confounders=[])
        names = set(files_of(d))
        assert f"slurm-{t['job']['id']}.out" in names and "truth.json" in names
        if layout == "per_rank":
            assert {f"logs/rank{r}.log" for r in range(4)} <= names and "logs/torchrun.node001.log" in names
        elif layout == "nccl_debug_file":
            assert any(regex.fullmatch(r"nccl/nccl\.node00\d\.\d+\.log", n) for n in names)
        elif layout == "per_node":
            assert {"node001/train.log", "node002/train.log", "node001/nvidia-smi-q.txt"} <= names
        else:
            text = (d / f"slurm-{t['job']['id']}.out").read_text()
            assert regex.search(r"(?m)^1: \[default1\]:", text)
            assert "nodes/node001/gpu-telemetry.csv" in names


def _owner_by_scan(router: Router, path: str) -> int | None:
    """The plain reference for Router.owner: every host tried in order."""
    for n, h in enumerate(router.hosts):
        if path.startswith((f"{h}/", f"nodes/{h}/", f"nccl/nccl.{h}.")) or path == f"logs/torchrun.{h}.log":
            return n
    if path.startswith("logs/rank"):
        return int(path[len("logs/rank"):-4]) // router.gpus_per_node
    return None


def test_owner_lookup_matches_the_host_scan(tmp_path: Path) -> None:
    for layout in LAYOUTS:
        d = tmp_path / layout
        simulate(d, cause="node_failure", nodes=3, gpus_per_node=2, seed=2, layout=layout, confounders=[])
        hosts = ["node001", "node002", "node003"]
        router = Router(layout, "1", hosts, 2)
        paths = sorted(files_of(d))
        assert any(_owner_by_scan(router, p) is not None for p in paths)
        for path in paths:
            assert router.owner(path) == _owner_by_scan(router, path), path
    # names where two hosts could match one path: the first host in order wins, as in the scan
    router = Router("nccl_debug_file", "1", ["n.1", "n", "nodes", "a"], 8)
    for path in ("nccl/nccl.n.1.77.log", "nccl/nccl.n.5.log", "nodes/a/x", "nodes/n/x", "logs/torchrun.n.1.log",
                 "logs/rank17.log", "slurm/slurmctld.log", "a", "nodes/", "nccl/nccl.zz.1.log"):
        assert router.owner(path) == _owner_by_scan(router, path), path


# -- confounders --------------------------------------------------------------------------------

def test_confounder_toggles(tmp_path: Path) -> None:
    none = simulate(tmp_path / "none", cause="fabric_timeout", nodes=2, gpus_per_node=2, seed=3, confounders=[], layout="per_rank")
    assert none["confounders"] == [] and none["options"]["confounders"] == []
    allc = simulate(tmp_path / "all", cause="fabric_timeout", nodes=2, gpus_per_node=2, seed=3, confounders=list(CONFOUNDER_NAMES),
                    layout="per_rank")
    assert len(allc["confounders"]) == len(CONFOUNDER_NAMES)
    check_evidence(tmp_path / "all", allc)
    d = tmp_path / "all"
    assert any("tqdm==4.66.1" in p.read_text() for p in d.glob("nodes/*/pip-freeze.txt"))
    kern = "".join(p.read_text() for p in d.glob("nodes/*/*") if "kernel" in p.name or "dmesg" in p.name)
    assert "): 63, " in kern and "): 45, " in kern and "nfs: server fs01 OK" in kern
    assert "REQUEST_KILL_JOB" in (d / "slurm/slurmctld.log").read_text()
    missing = [c for c in allc["confounders"] if c.endswith("missing")][0].split()[0]
    assert not (d / missing).exists()
    with pytest.raises(ValueError):
        simulate(tmp_path / "bad", cause="oom", confounders=["nope"])


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        simulate(tmp_path, cause="unknown")
    with pytest.raises(ValueError):
        simulate(tmp_path, cause="oom", layout="flat")


# -- real formats: the reference regexes match what we write -------------------------------------

NCCL_RE = regex.compile(r"(?:\[(?P<ts>[^\]]+)\] )?(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>\d+)\] )?(?:(?P<file>[\w./+-]+\.(?:cc|cu|h|cpp|c)):(?P<line>\d+) (?:\((?P<func>[^)]*)\) )?)?NCCL (?P<level>INFO|WARN|TRACE|CALL) (?P<msg>.*)$")
C10_RE = regex.compile(r"^(?:\[rank(?P<rank>\d+)\]:)?\[(?P<sev>[FEWIV])(?:(?P<mmdd>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d{9}) )?\s*(?P<file>[^:\]\s]+):(?P<line>\d+)\] (?P<msg>.*)$")
XID_RE = regex.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<xid>\d+),\s*(?:pid=(?P<pid>'<unknown>'|\d+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<msg>.*)$")
BANNER_RE = regex.compile(r"\*\*\* (?P<kind>JOB|STEP) (?P<id>[\d_.+a-z]+) ON (?P<node>\S+) (?:CANCELLED AT (?P<t>\S+)(?: DUE (?:TO|to) (?P<why>[^*]+?))?|FAILED \(non-zero exit code or other failure mode\)|UNCORRECTABLE MEMORY ERROR AT (?P<t2>\S+)) \*\*\*")


@pytest.mark.parametrize("stack", range(5))
def test_lines_match_reference_regexes(tmp_path: Path, stack: int) -> None:
    simulate(tmp_path, cause="gpu_hardware", variant="48", nodes=2, gpus_per_node=2, seed=stack, stack=stack, layout="per_rank",
             kill_on_bad_exit=False, confounders=[])
    seen = {"nccl": 0, "c10": 0, "xid": 0, "banner": 0}
    for p in tmp_path.rglob("*.log"):
        for ln in p.read_text().splitlines():
            if " NCCL INFO " in ln or " NCCL WARN " in ln:
                m = NCCL_RE.search(ln)
                assert m, ln
                if m["level"] == "WARN":
                    assert (m["ts"] is not None) == (stack >= 3), ln  # 2.26+ stamps WARN lines
                seen["nccl"] += 1
            if "ProcessGroupNCCL.cpp:" in ln and not ln.startswith(("  what()", "NCCL error in")):
                assert C10_RE.match(ln), ln
                seen["c10"] += 1
    for p in tmp_path.rglob("*"):
        if p.is_file() and ("dmesg" in p.name or "kernel" in p.name):
            for ln in p.read_text().splitlines():
                if "Xid" in ln:
                    assert XID_RE.search(ln), ln
                    seen["xid"] += 1
    out = next(tmp_path.glob("slurm-*.out")).read_text()
    seen["banner"] = sum(1 for ln in out.splitlines() if "***" in ln and BANNER_RE.search(ln))
    assert all(seen[k] for k in ("nccl", "c10", "xid")), seen


def test_times_and_zones_recorded(tmp_path: Path) -> None:
    t = simulate(tmp_path, cause="storage_stall", nodes=2, gpus_per_node=2, seed=12, timezone="America/Chicago", layout="per_node")
    assert t["options"]["timezone"] == "America/Chicago"
    assert t["options"]["clock_skew_s"] and all(2 <= abs(v) <= 6 for v in t["options"]["clock_skew_s"].values())
    coll = json.loads((tmp_path / "node001/collect.json").read_text())
    assert coll["timezone"] == "America/Chicago" and coll["utc_offset"] in ("-06:00", "-05:00")
    assert "Time zone: America/Chicago (C" in (tmp_path / "node001/timedatectl.txt").read_text()
    assert regex.search(r"(?m)^btime \d{10}$", (tmp_path / "node001/proc-stat.txt").read_text())


# -- scale ---------------------------------------------------------------------------------------

def test_1024_ranks(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    truth = simulate(tmp_path, cause="fabric_timeout", nodes=128, gpus_per_node=8, seed=1, nccl_info_volume=4, layout="slurm_out")
    elapsed = time.perf_counter() - t0
    assert truth["job"]["ranks"] == 1024 and len(truth["job"]["nodes"]) == 128
    check_evidence(tmp_path, truth)
    assert elapsed < 60, elapsed


# -- the checked-in corpus ------------------------------------------------------------------------

def test_corpus_regenerates_identically(tmp_path: Path) -> None:
    names = generate_corpus(tmp_path)
    assert FIXTURES.is_dir(), "run: crashscope simulate fixtures/jobs --corpus"
    assert sorted(names) == sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    for name in names:
        assert files_of(tmp_path / name) == files_of(FIXTURES / name), name


def test_corpus_covers_every_cause() -> None:
    causes = {json.loads((d / "truth.json").read_text())["cause"] for d in FIXTURES.iterdir() if d.is_dir()}
    assert causes == set(CAUSES)
    sample = json.loads((FIXTURES / "sample_fabric_timeout" / "truth.json").read_text())
    assert sample["job"]["ranks"] == 32 and sample["cause"] == "fabric_timeout"
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < 6_000_000
    readme = (FIXTURES.parent / "README.md").read_text()
    assert "crashscope simulate fixtures/jobs --corpus" in readme
    for d in FIXTURES.iterdir():
        assert f"`{d.name}`" in readme, f"{d.name} missing from fixtures/README.md"



def test_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crashscope.cli import app

    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "j"), "--cause", "oom", "--nodes", "2", "--gpus-per-node", "2",
                                   "--seed", "3", "--no-confounders", "--variant", "host"])
    assert res.exit_code == 0, res.output
    truth = json.loads((tmp_path / "j" / "truth.json").read_text())
    assert truth["cause"] == "oom" and truth["options"]["variant"] == "host" and truth["confounders"] == []
    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "k"), "--cause", "bogus"])
    assert res.exit_code == 2
    assert os.path.isdir(tmp_path / "j")


# -- dump on timeout and Flight Recorder dumps (traces=True) -----------------------------------------

def test_traces_write_the_dump_signal_and_flight_recorder_dumps(tmp_path: Path) -> None:
    """torch >= 2.4 stacks: the first watchdog that fires signals the dump, the live ranks answer,
    and (with the drawn TORCH_FR_BUFFER_SIZE) each leaves a JSON dump in which the rank stuck in
    I/O never entered the collective its peers wait in; the analyses name both."""
    from crashscope.analyses import collectives as col
    from crashscope.pipeline import load_timeline

    truth = simulate(tmp_path / "t", cause="storage_stall", nodes=2, gpus_per_node=4, seed=1, stack=3, traces=True,
                     confounders=[], variant="rank0_save")
    d = tmp_path / "t"
    dumps = sorted(d.rglob("nccl_trace_rank_*.json"))
    assert dumps, "this seed draws the Flight Recorder on"
    obj = json.loads(dumps[0].read_text())
    assert obj["pg_status"]["0"]["last_enqueued_collective"].isdigit()  # nlohmann writes the status as strings
    assert list(obj) == sorted(obj)
    tl = load_timeline(d).timeline
    origin = col.dump_origin(tl.events)
    assert origin.initiator is not None and origin.initiator not in truth["implicated"]["ranks"]
    assert set(truth["implicated"]["ranks"]) <= set(origin.notified)  # the stuck rank's monitor thread still answers
    (hang,) = [f for f in col.flight_recorder(tl.events, tl.world_size) if f.rule_id == col.HANG_ID]
    assert list(hang.ranks) == truth["implicated"]["ranks"]
    assert f"rank {origin.initiator}'s watchdog fired first" in hang.title


def test_traces_are_off_by_default_and_old_stacks_write_none(tmp_path: Path) -> None:
    simulate(tmp_path / "a", cause="storage_stall", nodes=2, gpus_per_node=2, seed=1, stack=3)
    simulate(tmp_path / "b", cause="storage_stall", nodes=2, gpus_per_node=2, seed=1, stack=0, traces=True)  # torch 2.1
    for d in (tmp_path / "a", tmp_path / "b"):
        assert not list(d.rglob("nccl_trace_rank_*"))
        assert not any(b"dump signal" in v for v in files_of(d).values())


def test_a_dead_node_leaves_no_dump_and_no_answer(tmp_path: Path) -> None:
    from crashscope.analyses import collectives as col
    from crashscope.pipeline import load_timeline

    for seed in range(1, 12):
        d = tmp_path / f"n{seed}"
        truth = simulate(d, cause="node_failure", nodes=2, gpus_per_node=2, seed=seed, stack=3, traces=True, confounders=[])
        origin = col.dump_origin(load_timeline(d).timeline.events)
        dead = set(truth["implicated"]["ranks"])
        assert not dead & (set(origin.notified) | set(origin.self_fired)), seed
        assert not [p for p in d.rglob("nccl_trace_rank_*") if int(p.name.split("_")[-1].split(".")[0]) in dead], seed
