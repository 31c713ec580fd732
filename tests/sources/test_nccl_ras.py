"""The nccl_ras source: NCCL RAS reports (``ncclras`` / port 28028 STATUS), monitor events and
the RAS lines of NCCL's own log. Lines are built from NVIDIA/nccl src/ras/client_support.cc's
format strings (rasClientRunComms, rasClientBreakDownErrors, rasClientsNotifyEvent) and
src/ras/peers.cc / rasnet.cc's INFO texts; the semantics from NCCL's troubleshooting/ras.rst."""

from __future__ import annotations

import json
from pathlib import Path

from crashscope.testing import parse_text

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "nccl_ras"
REAL = Path(__file__).resolve().parent.parent / "data" / "real"

SUMMARY = (
    "Job summary\n===========\n\n"
    "  Nodes  Processes         GPUs  Processes     GPUs\n"
    "(total)   per node  per process    (total)  (total)\n"
    "%7d  %9d  %11d  %9d  %7d\n\n"
)


def _events(text: str, name: str = "ncclras.txt") -> list[dict]:
    df, w = parse_text("nccl_ras", text, name)
    assert not w, w
    out = []
    for r in df.iter_rows(named=True):
        r["a"] = json.loads(r["attrs"]) if r["attrs"] else {}
        out.append(r)
    return out


def _ras(evs: list[dict], what: str) -> list[dict]:
    return [e for e in evs if e["a"].get("ras") == what]


def test_the_listed_minority_ahead_of_the_rest_is_no_laggard() -> None:
    # nccl#1911: 30 ranks at 640, the 2 listed ranks at 641 (ahead); nobody is implicated
    evs = _events((REAL / "nccl-1911" / "log.txt").read_text())
    assert not _ras(evs, "lagging") and not _ras(evs, "lagging_once")
    (ahead,) = _ras(evs, "ahead")
    assert ahead["rank"] is None and ahead["host"] is None
    assert ahead["a"]["ahead_ranks"] == [12, 13] and ahead["a"]["majority_launched"] == 640
    assert ahead["a"]["groups"] == [{"ranks": 30, "launched": 640}, {"ranks": 2, "launched": 641}]
    (row,) = _ras(evs, "comm")
    assert row["a"]["errors"] == "MISMATCH" and row["a"]["status"] == "RUNNING"


def test_a_listed_minority_behind_is_lagging_only_when_a_later_report_repeats_it() -> None:
    block = (
        "#0-0 (27a079b828ff1a75) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        "  26 ranks have launched up to operation 6650\n"
        "  6 ranks have launched up to operation 6649\n"
        "  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210\n"
        "  Rank 2 -- GPU 2 managed by process 483074 on node 172.16.64.210\n"
    )
    once = _events("Warnings\n========\n\n" + block)
    assert [e["rank"] for e in _ras(once, "lagging_once")] == [0, 2]  # the guide's example: normal in one snapshot
    assert not _ras(once, "lagging")
    e = _ras(once, "lagging_once")[0]
    assert e["host"] == "172.16.64.210" and e["pid"] == 483072 and e["gpu_index"] == 0
    assert e["a"]["behind_by"] == 1 and e["a"]["op"] == "AllReduce"
    twice = _events(SUMMARY % (4, 8, 1, 32, 32) + "Warnings\n========\n\n" + block + "\n" + SUMMARY % (4, 8, 1, 32, 32)
                    + "Warnings\n========\n\n" + block)
    assert [(e["rank"], e["a"]["report"]) for e in _ras(twice, "lagging")] == [(0, 2), (2, 2)]
    changed = _events("Warnings\n========\n\n" + block + "\nJob summary\n===========\nWarnings\n========\n\n"
                      + block.replace("6650", "6652").replace("6649", "6651"))
    assert not _ras(changed, "lagging")  # the counts moved on: not stuck


def test_dead_processes_fill_a_node_only_when_all_its_processes_are_dead() -> None:
    evs = _events((GOLDEN / "ncclras_dead_node.txt").read_text())
    dead = _ras(evs, "dead")
    assert [(e["host"], e["pid"], e["rank"], e["gpu_index"]) for e in dead] == [
        ("172.16.64.213", 3487984, 4, 0), ("172.16.64.213", 3487985, 5, 1)]  # ranks from the INCOMPLETE block
    assert all(e["a"]["whole_node"] and e["severity"] == "error" for e in dead)
    one_of_eight = _events(SUMMARY % (4, 8, 1, 32, 32) + "Errors\n======\n\nDEAD\n"
                           "  1 job process is considered dead (unreachable via the RAS network)\n"
                           "  Process 3487984 on node 172.16.64.213 managing GPU 5\n")
    (d,) = _ras(one_of_eight, "dead")
    assert d["a"]["whole_node"] is False and d["a"]["procs_per_node"] == 8
    assert [e["a"]["timeouts"] for e in _ras(evs, "timeout")] == [2]


def test_nccl_224_missing_ranks_status_errors_monitor_and_nccl_log_lines() -> None:
    evs = _events((GOLDEN / "ncclras_224_and_monitor.txt").read_text())
    missing = _ras(evs, "missing")
    assert [(e["a"]["what"], e["rank"], e["host"]) for e in missing] == [("process", None, "172.16.64.213"), ("rank", 21, None)]
    # "Communicator ranks have different collective operation counts" (2.24/2.25: no op name)
    assert {e["a"]["op"] for e in _ras(evs, "lagging_once")} == {"collective"}
    dead = _ras(evs, "dead")
    assert [(e["host"], e["a"].get("event"), e["a"].get("nccl_log")) for e in dead] == [
        ("172.16.64.245", "PEER_DEAD", None), ("172.16.64.245", None, True)]
    assert dead[0]["time"] is not None  # monitor lines carry their local stamp
    assert dead[1]["a"]["reporter"] == "node7" and dead[1]["a"]["peer"] == "172.16.64.245<46123>"
    assert not [e for e in evs if "PEER_NEW" in e["message"]]
    stuck = _events((GOLDEN / "ncclras_stuck_twice.txt").read_text())
    (err,) = _ras(stuck, "error")
    assert (err["rank"], err["a"]["result"], err["a"]["phase"]) == (3, "Remote process error", "async")
    (status,) = _ras(stuck, "status")
    assert (status["rank"], status["a"]["status"]) == (3, "ABORT")
    assert [e["rank"] for e in _ras(stuck, "lagging")] == [21]


def test_a_healthy_report_is_read_and_says_nothing_is_wrong() -> None:
    evs = _events((REAL / "nccl-1730" / "ras_and_rank118.log").read_text())
    assert [(e["a"]["ras"], e["severity"]) for e in evs] == [("comm", "info")]


def _verdict(tmp_path: Path, name: str, text: str) -> dict:
    from crashscope.pipeline import analyze

    job = tmp_path / name
    job.mkdir()
    (job / "ncclras.txt").write_text(text)
    return analyze(job)[0].to_dict()


def test_verdicts_read_the_report_as_nccl_means_it(tmp_path: Path) -> None:
    # every process of a node dead: node_failure, the node named, never a confident verdict (RAS says where, not why)
    d = _verdict(tmp_path, "a", (GOLDEN / "ncclras_dead_node.txt").read_text())
    assert d["cause"] == "node_failure" and d["confidence"] < 0.8
    assert d["implicated"]["nodes"] == ["172.16.64.213"] and d["implicated"]["ranks"] == [4, 5]
    # the same rank behind in two reports: unknown, the rank and its node named as where to look
    d = _verdict(tmp_path, "b", (GOLDEN / "ncclras_stuck_twice.txt").read_text())
    assert d["cause"] == "unknown" and d["implicated"]["ranks"] == [21] and d["implicated"]["nodes"] == ["172.16.64.213"]
    # nccl#1911: the listed ranks are ahead; nothing is implicated
    d = _verdict(tmp_path, "c", (REAL / "nccl-1911" / "log.txt").read_text())
    assert d["cause"] == "unknown" and not d["implicated"]["ranks"] and not d["implicated"]["nodes"]
