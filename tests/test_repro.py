"""`crashscope repro` without running collectives: busbw factors, the plan from a simulated job
and from a report, the exact argv of each launcher (--dry-run), usage errors, the no-torch
message, the views' Reproduction section."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crashscope.cli import app
from crashscope.repro import INSTALL_HINT, bandwidths, busbw_factor

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
runner = CliRunner()


@pytest.mark.parametrize(
    "op,n,factor",
    [
        ("all_reduce", 2, 1.0), ("all_reduce", 4, 6 / 4), ("all_reduce", 8, 14 / 8),  # 2(n-1)/n
        ("all_gather", 4, 3 / 4), ("reduce_scatter", 8, 7 / 8), ("all_to_all", 2, 1 / 2),  # (n-1)/n
        ("broadcast", 8, 1.0), ("reduce", 16, 1.0),
    ],
)
def test_busbw_factors_are_nccl_tests(op: str, n: int, factor: float) -> None:
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_bandwidths_by_hand() -> None:
    # 1 GB in 0.5 s on 4 ranks: algbw 2 GB/s; all_reduce busbw 2 * 2*3/4 = 3 GB/s
    assert bandwidths("all_reduce", 4, 10**9, 0.5) == pytest.approx((2.0, 3.0))
    assert bandwidths("all_gather", 8, 3 * 2**20, 0.001) == pytest.approx((3 * 2**20 / 0.001 / 1e9, 3 * 2**20 / 0.001 / 1e9 * 7 / 8))
    assert bandwidths("broadcast", 2, 100, 0) == (None, None)


def _work_items(root: Path) -> list[tuple[str, int]]:
    """(OpType, NumelIn) of every watchdog line in the job, read here independently of the plan."""
    out = []
    for p in root.rglob("*"):
        if p.is_file():
            for m in re.finditer(r"WorkNCCL\(SeqNum=\d+, OpType=(\w+), NumelIn=(\d+)", p.read_text(errors="replace")):
                out.append((m.group(1), int(m.group(2))))
    return out


@pytest.fixture(scope="module")
def simulated_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from crashscope.simulate import simulate

    out = tmp_path_factory.mktemp("job") / "fabric"
    simulate(out, cause="fabric_timeout", nodes=4, gpus_per_node=2, seed=5, confounders=[])
    truth = json.loads((out / "truth.json").read_text())
    # NCCL's own record of its environment (NCCL_DEBUG=INFO), one plain value and one path
    log = sorted((out).rglob("*.log"))[0]
    with open(log, "a", encoding="utf-8") as f:
        f.write("node001:2718:2718 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1\n")
        f.write("node001:2718:2718 [0] NCCL INFO NCCL_DEBUG_FILE set by environment to /tmp/nccl.%h.%p\n")
        f.write("node001:2718:2718 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0.\n")
    return out, truth


def test_plan_from_a_simulated_job(simulated_job: tuple[Path, dict]) -> None:
    from crashscope.repro.plan import plan_from_jobdir

    root, truth = simulated_job
    items = _work_items(root)
    assert items, "the simulator writes watchdog timeouts"
    optype, numel = max(set(items), key=items.count)
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
    plan, report = plan_from_jobdir(root, dtype="bf16")
    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before  # nothing written into the job
    assert optype == "ALLREDUCE" and plan.op == "all_reduce"
    assert plan.bytes == numel * 2 and plan.dtype == "bfloat16"
    assert plan.units == truth["job"]["nodes"] and plan.unit_kind == "node"
    assert plan.implicated_units == report["implicated"]["nodes"]
    assert set(plan.implicated_units) <= set(truth["implicated"]["nodes"]) and plan.implicated_units
    assert plan.reference_units == [n for n in truth["job"]["nodes"] if n not in plan.implicated_units]
    assert plan.process_group["ranks"] == list(range(8)) and plan.process_group["hosts"] == truth["job"]["nodes"]
    assert plan.nccl_env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "ib0"}  # the path is not carried
    assert plan.ranks_of(truth["job"]["nodes"][1]) == [2, 3]


def test_plan_from_a_report_file() -> None:
    from crashscope.repro.plan import plan_from_report

    rep = json.loads((GOLDEN / "fabric_timeout_ib_node002.json").read_text())
    quoted = [m for e in rep["evidence"] for m in re.findall(r"OpType=(\w+), NumelIn=(\d+)", e["message"])]
    assert quoted
    plan = plan_from_report(rep, launcher="srun")
    assert plan.op == "all_reduce" and plan.bytes == int(quoted[0][1]) * 4
    assert plan.units == rep["job"]["nodes"] and plan.per_unit == rep["job"]["ranks"] // len(rep["job"]["nodes"])
    assert plan.implicated_units == ["node002"] and plan.reference_units == ["node001"]
    assert plan.collective["pg_desc"] == "default_pg" and plan.collective["where"].startswith("logs/rank")
    assert plan.ranks_of("node002") == [4, 5, 6, 7]
    # all_gather's S is the gathered array (NumelOut), as nccl-tests counts it
    rep2 = json.loads(json.dumps(rep).replace("OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824",
                                              "OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=8192"))
    p2 = plan_from_report(rep2)
    assert p2.op == "all_gather" and p2.bytes == 8192 * 4


def test_nccl_env_lines() -> None:
    from crashscope.repro.plan import nccl_env_from_lines

    env = nccl_env_from_lines([
        "[2026-03-02 14:05:11] node004:51001:51001 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.",
        "node004:51001:51001 [0] NCCL INFO NCCL_ALGO set by environment to Ring",
        "node004:51001:51001 [0] NCCL INFO NCCL_ALGO set by environment to Tree",  # first wins
        "node004:51001:51001 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /etc/topo.xml",
        "node004:51001:51001 [0] NCCL INFO NCCL_NET set by environment to $(rm -rf ~)",
    ])
    assert env == {"NCCL_IB_GID_INDEX": "3", "NCCL_ALGO": "Ring"}


def _dry(args: list[str]) -> dict:
    res = runner.invoke(app, ["repro", *args, "--dry-run", "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_srun_argv_from_a_report() -> None:
    d = _dry([str(GOLDEN / "fabric_timeout_ib_node002.json"), "--launcher", "srun", "--port", "29555", "--results", "/shared/r"])
    assert d["backend"] == "nccl" and len(d["commands"]) == 1
    argv = d["commands"][0]["argv"]
    assert argv[:6] == ["srun", "-w", "node001,node002", "-N", "2", "--ntasks-per-node=4"]
    w = argv[argv.index("-m") + 1:]
    assert w[0] == "crashscope.repro.worker"
    opt = dict(zip(w[1::2], w[2::2]))
    assert opt["--master-addr"] == "node001" and opt["--master-port"] == "29555"
    assert opt["--op"] == "all_reduce" and opt["--sizes"].split(",")[0] == str(25165824 * 4)
    assert opt["--unit-names"] == "node001,node002" and opt["--per-unit"] == "4" and opt["--results"] == "/shared/r"


def test_srun_argv_direct_nodes_hostlist() -> None:
    d = _dry(["--op", "all_gather", "--bytes", "4096", "--nodes", "n[1-3]", "--gpus-per-node", "2", "--backend", "gloo",
              "--inject", "3:hang", "--port", "4000"])
    argv = d["commands"][0]["argv"]
    assert argv[:6] == ["srun", "-w", "n1,n2,n3", "-N", "3", "--ntasks-per-node=2"]
    assert argv[argv.index("--master-addr") + 1] == "n1" and argv[argv.index("--inject") + 1] == "3:hang"
    assert argv[argv.index("--backend") + 1] == "gloo"


def test_local_and_torchrun_argv() -> None:
    d = _dry(["--op", "broadcast", "--bytes", "1000", "--nproc", "4", "--sweep", "none", "--port", "4001"])
    assert d["backend"] == "gloo"
    assert [c["env"]["RANK"] for c in d["commands"]] == ["0", "1", "2", "3"]
    assert all(c["env"]["WORLD_SIZE"] == "4" and c["argv"][1:3] == ["-m", "crashscope.repro.worker"] for c in d["commands"])
    a = d["commands"][0]["argv"]
    assert a[a.index("--master-addr") + 1] == "127.0.0.1" and a[a.index("--sizes") + 1] == "1000"
    t = _dry(["--op", "all_reduce", "--bytes", "1000", "--nproc", "3", "--launcher", "torchrun"])
    argv = t["commands"][0]["argv"]
    assert argv[1:3] == ["-m", "torch.distributed.run"] and argv[argv.index("--nproc-per-node") + 1] == "3"


def test_hostile_node_names_never_reach_srun(tmp_path: Path) -> None:
    rep = json.loads((GOLDEN / "fabric_timeout_ib_node002.json").read_text())
    rep["job"]["nodes"] = ["node001", "--export=ALL,LD_PRELOAD=/tmp/x.so"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rep))
    res = runner.invoke(app, ["repro", str(p), "--launcher", "srun", "--dry-run"])
    assert res.exit_code == 2 and "not a node name" in res.output
    ok = runner.invoke(app, ["repro", str(p), "--launcher", "srun", "--nodes", "node001,node002", "--dry-run", "--format", "json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["commands"][0]["argv"][2] == "node001,node002"


def test_text_dry_run_names_the_plan() -> None:
    res = runner.invoke(app, ["repro", str(GOLDEN / "fabric_timeout_ib_node002.json"), "--dry-run"])
    assert res.exit_code == 0
    assert "OpType=ALLREDUCE NumelIn=25165824" in res.stdout and "implicated: node002; references: node001" in res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--op", "all_scan", "--bytes", "10", "--nproc", "2"],
        ["--op", "all_reduce", "--nproc", "2"],
        ["--op", "all_reduce", "--bytes", "10", "--nproc", "2", "--inject", "x:boom"],
        ["--op", "all_reduce", "--bytes", "10", "--nproc", "2", "--launcher", "mpirun"],
        ["--op", "all_reduce", "--bytes", "10", "--nproc", "2", "--nodes", "a,b"],
        ["--op", "all_reduce", "--bytes", "10", "--nproc", "2", "--dtype", "complex32"],
        ["--op", "all_reduce", "--bytes", "10", "--nproc", "2", "--update-report"],
        ["/no/such/report.json"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    res = runner.invoke(app, ["repro", *args, "--dry-run"])
    assert res.exit_code == 2, res.output


def _cli_without_torch(block: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    code = (f"import sys\n{block}\n"
            "from crashscope.cli import main\nsys.argv = ['crashscope'] + sys.argv[1:]\nmain()\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("block", [
    "sys.modules['torch'] = None",
    "import importlib.abc\n"
    "class NoTorch(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ModuleNotFoundError(\"No module named 'torch'\", name=name)\n"
    "        return None\n"
    "sys.meta_path.insert(0, NoTorch())",
])
def test_without_torch_says_the_pip_command(block: str) -> None:
    for args in (["--op", "all_reduce", "--bytes", "1024", "--nproc", "2"], [str(GOLDEN / "fabric_timeout_ib_node002.json")], []):
        res = _cli_without_torch(block, ["repro", *args])
        assert res.returncode == 2, res.stderr
        assert INSTALL_HINT in res.stderr and INSTALL_HINT == "pip install 'crashscope[repro]'"
        assert "Traceback" not in res.stderr
    # the plan needs no torch
    res = _cli_without_torch(block, ["repro", "--op", "all_reduce", "--bytes", "1024", "--nproc", "2", "--dry-run"])
    assert res.returncode == 0 and "crashscope.repro.worker" in res.stdout


def test_analyze_does_not_import_torch() -> None:
    code = ("import sys\nfrom crashscope.cli import app\n"
            f"app(['analyze', {str(ROOT / 'fixtures/jobs/healthy_2x2')!r}, '--format', 'json'], standalone_mode=False)\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.stderr.strip().endswith("NO-TORCH"), res.stderr[-500:]


def _repro_block(unit: str) -> dict:
    return {"verdict": "confirmed", "implicated": {"nodes": [unit], "ranks": [4]}, "links": [],
            "plan": {"op": "all_reduce", "bytes": 1024, "backend": "gloo"}, "time": "2026-12-01T00:00:00Z",
            "runs": [{"purpose": "full group", "units": ["node001", unit], "status": "hang", "busbw": None, "time": None,
                      "error": "no progress | stuck " + unit},
                     {"purpose": "pair", "units": ["node001", unit], "status": "slow", "busbw": 0.5, "time": 0.002, "error": None}]}


def test_views_show_the_reproduction_escaped() -> None:
    from crashscope.report.model import Report
    from crashscope.report.render import render_markdown, render_terminal

    rep = Report.from_dict(json.loads((GOLDEN / "fabric_timeout_ib_node002.json").read_text()))
    assert "Reproduction" not in render_terminal(rep, width=120)
    hostile = "node\x1b[31m002|*x*"
    rep.repro = _repro_block(hostile)
    term = render_terminal(rep, width=160)
    assert "Reproduction: confirmed" in term and "\x1b" not in term
    assert "pair node001," in term and "busbw 0.5 GB/s, 2 ms" in term
    md = render_markdown(rep)
    assert "## Reproduction (crashscope repro)" in md and "\x1b" not in md
    section = md.split("## Reproduction (crashscope repro)", 1)[1].split("\n## ", 1)[0]
    assert "|*x*" not in section  # Markdown structure characters from data are escaped
    back = Report.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back.repro == rep.repro
