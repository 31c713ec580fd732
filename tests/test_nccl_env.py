"""The NCCL environment in force (crashscope/analyses/nccl_env.py) on real NCCL INFO lines.

Lines of several versions, verbatim from public logs, each with the version it came from:
2.5.6 (NVIDIA/nccl#529: NCCL_IB_DISABLE=1, socket transport), 2.22.3 (NVIDIA/nccl#1373:
NCCL_SOCKET_IFNAME, NET/IB over RoCE), 2.2x (NVIDIA/nccl#1814: NCCL_IB_TIMEOUT /
NCCL_IB_RETRY_CNT / NCCL_IB_TC), 2.1x (NVIDIA/nccl#1053: "NCCL_SOCKET_IFNAME set to lo",
GDR disabled on a socket), and lines built from the upstream format strings where a whole
job is needed (src/misc/param.cc "%s set by environment to %lld.", src/transport/net_ib.cc
"NET/IB : Using%s %s; OOB %s:%s", src/init.cc "Using network %s" and the Init COMPLETE line
of 2.19+, src/transport/net_ib.cc 2.21 "NET/IB : Got completion from peer %s with
status=%d opcode=%d len=%d vendor err %d (%s)")."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from crashscope.analyses import nccl_env
from crashscope.testing import parse_text

GOLDEN = Path(__file__).resolve().parent / "golden" / "nccl" / "env_settings.log"


def _events(text: str, name: str = "nccl.log") -> pl.DataFrame:
    df, w = parse_text("nccl", text, name)
    assert not w, w
    return df


def test_settings_lines_of_every_version_are_read() -> None:
    st = nccl_env.collect(_events(GOLDEN.read_text()))
    got = {(w.host, k): v for w in st.who.values() for k, (v, _) in w.settings.items()}
    assert got[("NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0", "NCCL_IB_DISABLE")] == "1"  # 2.5.6
    assert got[("node-001-b", "NCCL_SOCKET_IFNAME")] == "net2"  # 2.22.3
    assert got[("hostname-test", "NCCL_IB_TIMEOUT")] == "18" and got[("hostname-test", "NCCL_IB_RETRY_CNT")] == "15"
    assert got[("axa", "NCCL_SOCKET_IFNAME")] == "lo"
    nets = {w.host: w.network[0] for w in st.who.values() if w.network}
    assert nets["axa"] == "socket" and nets["node-001-b"] == "ib" and nets["NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0"] == "socket"
    assert {ll for w in st.who.values() for ll in w.link_layers} == {"RoCE"}
    assert st.ib_present


def test_ib_timeout_semantics() -> None:
    assert nccl_env.ib_timeout_s(22) == pytest.approx(17.18, abs=0.01)
    assert nccl_env.ib_timeout_s(18) == pytest.approx(1.07, abs=0.01)
    assert nccl_env.ib_timeout_s(14) == pytest.approx(0.0671, abs=0.0005)


def test_socket_on_an_ib_cluster_names_the_setting_to_change() -> None:
    """2.5.6's NCCL_IB_DISABLE=1 on one process while another of the job uses NET/IB."""
    lines = GOLDEN.read_text().splitlines()
    ev = _events("\n".join(lines[:4] + lines[6:8]) + "\n")
    probs = nccl_env.problems(nccl_env.collect(ev))
    assert [p["what"] for p in probs] == ["socket_on_ib"]
    acts = nccl_env.env_actions(ev, "fabric_timeout")
    assert len(acts) == 1 and "NCCL_IB_DISABLE=0" in acts[0]
    assert nccl_env.env_actions(ev, "software_error") == []  # not the verdict's business


def test_loopback_socket_ifname_is_named() -> None:
    lines = [ln for ln in GOLDEN.read_text().splitlines() if ln.startswith("axa:")]
    probs = nccl_env.problems(nccl_env.collect(_events("\n".join(lines) + "\n")))
    assert [p["what"] for p in probs] == ["socket_ifname"]
    assert "NCCL_SOCKET_IFNAME=lo" in probs[0]["title"]


def _job(tmp_path: Path, gid: dict[str, int], timeout: int = 20, fail: bool = True) -> Path:
    """A 2-node x 2-GPU NCCL 2.21 job; node002's IB completes with a retry-exceeded error."""
    ips = {"node001": "10.0.0.1", "node002": "10.0.0.2"}
    for n, (host, ip) in enumerate(ips.items()):
        d = tmp_path / "job" / host
        d.mkdir(parents=True)
        out = []
        for lr in range(2):
            rank, pid = 2 * n + lr, 1000 * (n + 1) + lr
            p = f"{host}:{pid}:{pid + 10} [{lr}]"
            out += [
                f"{p} NCCL INFO NCCL version 2.21.5+cuda12.4",
                f"{p} NCCL INFO NCCL_IB_GID_INDEX set by environment to {gid[host]}.",
                f"{p} NCCL INFO NCCL_IB_TIMEOUT set by environment to {timeout}.",
                f"{p} NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:{ip}<0>",
                f"{p} NCCL INFO Using network IB",
                f"{p} NCCL INFO ncclCommInitRank comm 0x55d1c0a3f2e{lr} rank {rank} nranks 4 cudaDev {lr} nvmlDev {lr} busId {lr + 1}b000 commId 0x6a1f3e29c0d4b711 - Init COMPLETE",
            ]
            if fail and host == "node002" and lr == 0:
                out += ["", f"{host}:{pid}:{pid + 20} [{lr}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<51234> "
                            "with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.2 remoteGid ::ffff:10.0.0.1",
                        f"{host}:{pid}:{pid + 20} [{lr}] NCCL INFO transport/net_ib.cc:1780 -> 6"]
        (d / "nccl.log").write_text("\n".join(out) + "\n")
    return tmp_path / "job"


def test_a_gid_index_that_differs_across_nodes_is_named_with_its_ranks(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(_job(tmp_path, {"node001": 3, "node002": 0}))
    assert report.cause == "fabric_timeout"
    fabric = next(r for r in report.layers if r["layer"] == "fabric")
    assert fabric["status"] == "failed"
    differs = fabric["nccl_env"]["differs"]
    assert differs == [{"setting": "NCCL_IB_GID_INDEX", "values": {"3": "ranks 0-1 on node001", "0": "ranks 2-3 on node002"}}]
    assert any("NCCL_IB_GID_INDEX=3 on every node" in a for a in report.actions)
    ctx = [e for e in report.to_dict()["layers"] if e["layer"] == "fabric"][0]
    assert json.dumps(ctx)


def test_a_fabric_timeout_under_a_low_ib_timeout_says_which_value_to_try(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(_job(tmp_path, {"node001": 3, "node002": 3}, timeout=14))
    assert report.cause == "fabric_timeout"
    act = [a for a in report.actions if "NCCL_IB_TIMEOUT=" in a]
    assert act and "NCCL_IB_TIMEOUT=22" in act[0] and "17.2 s" in act[0] and "instead of 14" in act[0]
    assert report.actions[0] == act[0]  # the setting to change comes before the generic advice
    fabric = next(r for r in report.layers if r["layer"] == "fabric")
    assert fabric["nccl_env"]["settings"]["NCCL_IB_TIMEOUT"] == {"14": "ranks 0-3 on node001, node002"}


def test_consistent_defaults_raise_nothing(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(_job(tmp_path, {"node001": 3, "node002": 3}, fail=False))
    fabric = next(r for r in report.layers if r["layer"] == "fabric")
    assert fabric["status"] == "ok" and fabric["nccl_env"]["differs"] == []
    assert "RoCE" in fabric["reason"]
    assert not [a for a in report.actions if "NCCL_IB" in a]


# -- package listings that name no host (version-drift-across-files) -----------------------------
# `pip freeze | grep nccl` on two machines, as NVIDIA/nccl#1267 pasted them (the problem node had
# nvidia-nccl-cu12 2.20.5, the others 2.19.3; both had nvidia-nccl-cu11 2.14.3).


def _listing_job(tmp_path: Path, listings: dict[str, str]) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    for name, text in listings.items():
        (job / name).write_text(text)
    return job


def test_a_package_at_two_versions_in_two_host_less_listings_is_drift_named_by_file(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    job = _listing_job(tmp_path, {
        "pip-a.txt": "nvidia-nccl-cu11==2.14.3\nnvidia-nccl-cu12==2.20.5\n",
        "pip-b.txt": "nvidia-nccl-cu11==2.14.3\nnvidia-nccl-cu12==2.19.3\n",
    })
    report, _, _ = analyze(job)
    assert report.cause == "driver_drift" and report.confidence < 0.8
    ev = [e for e in report.evidence if e.rule == nccl_env.FILE_DRIFT_RULE]
    assert {(e.file, e.line) for e in ev} == {("pip-a.txt", 2), ("pip-b.txt", 2)}
    assert "nvidia-nccl-cu12" in report.summary and "2.14.3" not in report.summary


@pytest.mark.parametrize("listings", [
    # the same versions everywhere
    {"pip-a.txt": "nvidia-nccl-cu12==2.19.3\n", "pip-b.txt": "nvidia-nccl-cu12==2.19.3\n"},
    # one file: two packages of one component are one environment, not drift
    {"pip-a.txt": "nvidia-nccl-cu11==2.14.3\nnvidia-nccl-cu12==2.20.5\n"},
])
def test_agreeing_or_single_listings_are_no_drift(tmp_path: Path, listings: dict[str, str]) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(_listing_job(tmp_path, listings))
    assert not [e for e in report.evidence if e.rule == nccl_env.FILE_DRIFT_RULE]
    assert report.cause != "driver_drift"


def test_a_listing_with_two_versions_of_one_package_is_not_one_environment() -> None:
    ev = pl.concat([
        parse_text("versions", "nvidia-nccl-cu12==2.20.5\nnvidia-nccl-cu12==2.19.3\n", "merged.txt")[0],
        parse_text("versions", "nvidia-nccl-cu12==2.19.3\n", "pip-b.txt")[0],
    ], how="diagonal_relaxed")
    assert nccl_env.file_version_drift(ev) == []
