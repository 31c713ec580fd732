"""`crashscope repro --launcher srun` through the throw-away real Slurm of tests/slurm_cluster.py
(two ``slurmd -N`` nodes n1, n2 on this host): the plan from a recorded incident's report
(fixtures/recorded/iptables_rank2_srun, a real srun job on n1/n2), run with srun, names the
node of the injected slow rank."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crashscope.repro import torch_available

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "fixtures" / "recorded" / "iptables_rank2_srun"


@pytest.mark.slurm
@pytest.mark.skipif(not torch_available(), reason="torch is not installed (pip install 'crashscope[repro]')")
def test_srun_repro_names_the_injected_node(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        cluster = request.getfixturevalue("slurm_cluster")
    except pytest.FixtureLookupError:
        pytest.skip("no slurm_cluster fixture (tests/slurm_cluster.py through tests/conftest.py)")
    from typer.testing import CliRunner

    from crashscope.cli import app

    runner = CliRunner()
    report = tmp_path / "report.json"
    res = runner.invoke(app, ["analyze", str(RECORDED), "--format", "json", "-o", str(report)])
    assert res.exit_code == 0, res.output
    rep = json.loads(report.read_text())
    assert rep["job"]["nodes"] == ["n1", "n2"] and rep["implicated"]["nodes"] == ["n2"]

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    results = tmp_path / "results"  # one host: every "node" sees it
    # rank 2 is the first rank on n2 (2 ranks per node, block layout); n1/n2 do not resolve: rendezvous on 127.0.0.1
    res = runner.invoke(app, ["repro", str(report), "--launcher", "srun", "--backend", "gloo", "--bytes", "65536",
                              "--iters", "4", "--warmup", "1", "--sweep", "none", "--timeout", "20", "--master-addr", "127.0.0.1",
                              "--inject", "2:delay=0.3", "--results", str(results), "--update-report", "--format", "json"])
    assert res.exit_code == 1, res.output
    d = json.loads(res.stdout)
    assert d["verdict"] == "confirmed" and d["implicated"]["nodes"] == ["n2"] and d["implicated"]["ranks"] == [2, 3]
    full = d["runs"][0]
    assert full["units"] == ["n1", "n2"] and full["nranks"] == 4 and full["status"] == "slow" and full["late"] == ["n2"]
    # the workers really ran as Slurm tasks on both nodes
    tasks = [json.loads((results / "run01" / f"rank{r}.json").read_text()) for r in range(4)]
    assert sorted(t["orig_rank"] for t in tasks) == [0, 1, 2, 3]
    assert sorted(t["via"] for t in tasks) == ["slurm:n1", "slurm:n1", "slurm:n2", "slurm:n2"]
    assert {t["orig_rank"]: t["via"] for t in tasks}[2] == "slurm:n2"
    assert json.loads(report.read_text())["repro"]["verdict"] == "confirmed"
    assert os.environ["SLURM_CONF"] == str(cluster.conf)
