"""crashscope as the Epilog and EpilogSlurmctld of a real (throw-away) Slurm: real jobs that
exit 1, lose a rank, are preempted, are scancel'd, hit their time limit and succeed each give
the right report (or none); a crashscope made to crash or hang inside the epilog leaves both
nodes idle. The cluster comes from tests/slurm_cluster.py (skips without root or Slurm).

All jobs are submitted at once (the time limit alone takes a minute or more), then checked.
Measurements (epilog wall time per run, verdicts, node states) go to
``$CRASHSCOPE_EPILOG_MEASURE`` when set.
"""

from __future__ import annotations

import json
import os
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

SECRET = "0123456789abcdef0123456789abcdef01234567"

RANK_PY = """\
import logging, os, signal, sys, time
rank = int(os.environ["SLURM_PROCID"]); node = os.environ["SLURMD_NODENAME"]; job = os.environ["SLURM_JOB_ID"]
logdir = os.path.join(os.environ["LOGROOT"], job, node)
os.makedirs(logdir, exist_ok=True)
logging.basicConfig(filename=os.path.join(logdir, f"rank{rank}.log"), level=logging.INFO,
                    format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
log = logging.getLogger("train")
mode = sys.argv[1]
log.info("rank %d of %s on %s starting", rank, os.environ["SLURM_NTASKS"], node)
if rank == 0:
    print("WANDB_API_KEY=" + os.environ["FAKE_KEY"], flush=True)  # a job that dumps its environment
for step in range(3):
    log.info("step %d loss %.4f", step, 1.0 / (step + 1))
    time.sleep(0.3)
done = os.path.join(os.environ["LOGROOT"], job, "rank0.pid")
if mode == "raise" and rank == 0:
    with open(done, "w") as f:
        f.write(str(os.getpid()))
if mode == "raise" and rank == 1:
    # Raise only once rank 0 has exited: srun --kill-on-bad-exit then has nobody left to
    # signal, and the traceback reaches the output whole. (With rank 0 still running, srun
    # can cut it anywhere, even before its first line: recorded as the fixture
    # exception_cut_rank1_kill_on_bad_exit_srun, read by the parser's cut-traceback path.)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            pid = int(open(done).read())
        except (OSError, ValueError):
            pid = 0
        if pid and not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.1)
    raise ValueError("batch 3 has shape (7, 3), expected (8, 3)")
if mode == "kill" and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if mode in ("kill", "sleep"):
    time.sleep(600)
"""


def _script(mode: str, *sbatch: str) -> str:
    opts = "\n".join(f"#SBATCH {o}" for o in sbatch)
    return f"""#!/bin/sh
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH -o slurm-%j.out
{opts}
export LOGROOT="$PWD/logs" FAKE_KEY={SECRET}
srun --kill-on-bad-exit=1 /usr/bin/python3 rank.py {mode}
"""


def _report(cl, job: str) -> dict | None:  # type: ignore[no-untyped-def]
    p = cl.base / "reports" / job / "report.json"
    return json.loads(p.read_text()) if p.exists() else None


def _wait_running(cl, job: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cl.job_fields(job).get("JobState") == "RUNNING":
            return
        time.sleep(0.3)
    raise TimeoutError(f"job {job} did not start")


@pytest.fixture(scope="module")
def jobs(slurm_cluster):  # type: ignore[no-untyped-def]
    cl = slurm_cluster
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the test jobs run /usr/bin/python3 as the job user")
    (cl.base / "work" / "rank.py").write_text(RANK_PY)
    t0 = time.monotonic()
    # One job at a time (two slurmd on two shared cores drop task launches when seven jobs
    # start at once); the time limit, which takes a minute or more, runs meanwhile.
    ids = {"time_limit": cl.sbatch(_script("sleep", "-p high", "-t 1"))}
    final: dict[str, dict[str, str]] = {}
    for name, mode, fault in (("exit1", "raise", None), ("lost_rank", "kill", None), ("crash", "raise", "crash"),
                              ("hang", "raise", "hang-hard")):
        ids[name] = cl.sbatch(_script(mode, "-p high"), fault=fault)
        final.update(cl.wait_done([ids[name]], timeout=120))
    ids["scancel"] = cl.sbatch(_script("sleep", "-p high"))
    _wait_running(cl, ids["scancel"])
    time.sleep(3)  # it logs a few steps first
    cl.run("scancel", ids["scancel"])
    final.update(cl.wait_done([ids["scancel"]], timeout=120))
    ids["victim"] = cl.sbatch(_script("sleep", "-p low", "-c 10"))
    _wait_running(cl, ids["victim"])
    time.sleep(3)
    ids["success"] = cl.sbatch(_script("ok", "-p high", "-c 10"))  # needs the victim's CPUs: preempts it
    final.update(cl.wait_done([ids["victim"], ids["success"], ids["time_limit"]], timeout=240))
    return {"cluster": cl, "ids": ids, "final": final, "seconds": time.monotonic() - t0}


EXPECTED = {"exit1": "software_error", "time_limit": "time_limit", "victim": "preemption", "scancel": "preemption"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_failed_job_gets_the_right_report(jobs, name):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"][name]
    rep = _report(cl, job)
    assert rep is not None, f"no report for {name} (job {job}, {jobs['final'][job].get('JobState')}); epilog log: {(cl.base / 'cs-spool' / 'epilog.log').read_text()[-2000:]}"
    assert rep["cause"] == EXPECTED[name], (name, rep["cause"], rep.get("summary"))
    assert rep["job"]["id"] == job and set(rep["job"]["nodes"]) >= {"n1", "n2"}
    assert {"n1.shard", "n2.shard", "_job.shard"} <= {p.name for p in (cl.base / "cs-spool" / job).iterdir()}


def test_exception_names_the_task_that_raised(jobs):  # type: ignore[no-untyped-def]
    """srun's output is not labelled: the traceback is tied to the one task srun says exited 1."""
    rep = _report(jobs["cluster"], jobs["ids"]["exit1"])
    assert rep is not None
    assert rep["implicated"]["nodes"] == ["n2"] and rep["implicated"]["ranks"] == [1], rep["implicated"]


def test_lost_rank_is_a_failure_naming_the_lost_task(jobs):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"]["lost_rank"]
    rep = _report(cl, job)
    assert rep is not None
    assert rep["cause"] != "none"
    assert "n2" in rep["implicated"]["nodes"] or 1 in rep["implicated"]["ranks"], rep["implicated"]


def test_success_gives_no_report(jobs):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"]["success"]
    assert jobs["final"][job].get("JobState") == "COMPLETED"
    assert not (cl.base / "reports" / job).exists()
    assert not (cl.base / "cs-spool" / job).exists()


def test_reports_private_to_the_job_user_and_copied_to_the_workdir(jobs):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"]["exit1"]
    d = cl.base / "reports" / job
    st = os.stat(d)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (cl.uid, 0o700)
    for name in ("report.json", "report.md"):
        fst = os.stat(d / name)
        assert (fst.st_uid, stat.S_IMODE(fst.st_mode)) == (cl.uid, 0o600)
        assert SECRET not in (d / name).read_text()
    w = cl.base / "work" / f"crashscope-{job}"
    assert os.stat(w / "report.json").st_uid == cl.uid
    assert json.loads((w / "report.json").read_text())["cause"] == "software_error"
    rep = json.loads((d / "report.json").read_text())
    files = {s["file"] for s in rep["sources"]}
    assert any(f.startswith("n1/logs/") for f in files) and any(f.startswith("n2/logs/") for f in files), files
    assert f"job/slurm-{job}.out" in files


@pytest.mark.parametrize("name", ["crash", "hang"])
def test_crash_or_hang_inside_crashscope_leaves_nodes_idle(jobs, name):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"][name]
    runs = [r for r in cl.epilog_runs() if r["job"] == job]
    assert {r["who"] for r in runs} == {"n1", "n2", "controller"}, runs
    assert all(r["rc"] == "0" for r in runs), runs
    if name == "hang":
        from slurm_cluster import HANG_BUDGET_S

        assert all(r["seconds"] < HANG_BUDGET_S + 3 for r in runs), runs
    states = cl.node_states()
    # The base state before any flag: IDLE+PLANNED is an idle node the backfill scheduler has
    # planned for a pending job (the next test's), not a node the epilog took out of service.
    assert all(s.split()[0].split("+")[0] in ("IDLE", "MIXED", "ALLOCATED") and "DRAIN" not in s for s in states.values()), states
    assert _report(cl, job) is None


def test_analyze_reads_the_spool_and_collect_rebuilds_a_shard_with_srun(jobs):  # type: ignore[no-untyped-def]
    cl, job = jobs["cluster"], jobs["ids"]["exit1"]
    spool = cl.base / "cs-spool" / job
    out = subprocess.run([sys.executable, "-m", "crashscope", "analyze", str(spool), "--format", "json"],
                         capture_output=True, text=True, timeout=120, env=cl.env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cause"] == "software_error"
    import shutil

    shutil.rmtree(spool / "n2.shard")
    env = {**cl.env, "CRASHSCOPE_CONFIG": str(cl.base / "etc" / "crashscope.toml")}
    out = subprocess.run([sys.executable, "-m", "crashscope", "collect", job, "--srun", "--timeout", "90"],
                         capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr
    assert (spool / "n2.shard" / "shard.json").is_file(), out.stderr
    rep = _report(cl, job)
    assert rep is not None and rep["cause"] == "software_error"
    assert any(s["file"].startswith("n2/logs/") for s in rep["sources"])


def test_zz_measurements(jobs):  # type: ignore[no-untyped-def]
    cl = jobs["cluster"]
    runs = cl.epilog_runs()
    normal = [r["seconds"] for r in runs if r["job"] not in (jobs["ids"]["hang"],)]
    summary = {
        "epilog_seconds": {"n": len(normal), "p50": round(statistics.median(normal), 2), "max": round(max(normal), 2)},
        "hang_runs": [r for r in runs if r["job"] == jobs["ids"]["hang"]],
        "jobs": {name: {"job": j, "state": jobs["final"][j].get("JobState"), "reason": jobs["final"][j].get("Reason"),
                        "cause": (_report(cl, j) or {}).get("cause"), "confidence": (_report(cl, j) or {}).get("confidence")}
                 for name, j in jobs["ids"].items()},
        "node_states": cl.node_states(),
        "wall_s_all_jobs": round(jobs["seconds"], 1),
    }
    if os.environ.get("CRASHSCOPE_EPILOG_MEASURE"):
        Path(os.environ["CRASHSCOPE_EPILOG_MEASURE"]).write_text(json.dumps(summary, indent=2))
    assert all(r["rc"] == "0" for r in runs)
