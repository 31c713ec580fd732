"""The epilog without Slurm: the job's outcome from env/scontrol text, the watchdog (always 0,
within the budget, whatever happens inside), and safety as root against a user-owned
directory (tests that need root create a throw-away user and skip otherwise)."""

from __future__ import annotations

import json
import os
import pwd
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashscope.epilog import slurmjob
from crashscope.epilog.secrets import scrub
from crashscope.epilog.slurmjob import JobInfo, decide, expand_pattern, job_from_env, parse_scontrol

# scontrol show job -o during the epilog, Slurm 22.05 (measured with tests/slurm_cluster.py)
SCONTROL_PREEMPTED = ("JobId=7 JobName=job-1.sh UserId=csepilog(1002) GroupId=csepilog(1002) MCS_label=N/A Priority=1 "
                      "Nice=0 Account=(null) QOS=(null) JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 "
                      "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:07 TimeLimit=UNLIMITED TimeMin=N/A "
                      "SubmitTime=2026-12-01T14:09:58 EligibleTime=2026-12-01T14:09:58 StartTime=2026-12-01T14:09:59 "
                      "EndTime=2026-12-01T14:10:06 PreemptTime=2026-12-01T14:10:06 Partition=low AllocNode:Sid=vm:1 "
                      "NodeList=n[1-2] BatchHost=n1 NumNodes=2 CPUs/Task=10 WorkDir=/tmp/w StdOut=/tmp/w/slurm-7.out "
                      "Command=/tmp/w/my job.sh")


def test_scontrol_fields_keep_spaces_and_odd_keys():
    f = parse_scontrol(SCONTROL_PREEMPTED)
    assert f["JobState"] == "COMPLETING" and f["PreemptTime"] == "2026-12-01T14:10:06"
    assert f["AllocNode:Sid"] == "vm:1" and f["CPUs/Task"] == "10"
    assert f["Command"] == "/tmp/w/my job.sh"


def _job(**kw) -> JobInfo:  # type: ignore[no-untyped-def]
    j = JobInfo(job_id="7")
    for k, v in kw.items():
        setattr(j, k, v)
    return j


@pytest.mark.parametrize("kw, outcome", [
    ({"reason": "TimeLimit", "exit_code": 0, "signal": 15}, "time_limit"),
    ({"preempt_time": "2026-12-01T14:10:06", "exit_code": 0, "signal": 15}, "preempted"),
    ({"reason": "NonZeroExitCode", "exit_code": 1, "signal": 0}, "failed"),
    ({"exit_code": 0, "signal": 15}, "cancelled"),
    ({"exit_code": 0, "signal": 11}, "failed"),
    ({"exit_code": 0, "signal": 0, "derived_exit": 2}, "failed"),
    ({"exit_code": 0, "signal": 0}, "success"),
    ({"state": "NODE_FAIL"}, "failed"),
    ({}, "unknown"),
])
def test_outcome(kw, outcome):  # type: ignore[no-untyped-def]
    assert decide(_job(**kw)) == outcome


def test_preemption_from_scontrol_even_when_the_env_says_0():
    job = job_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"})
    slurmjob.add_scontrol(job, parse_scontrol(SCONTROL_PREEMPTED))
    assert (job.exit_code, job.signal) == (0, 15)
    assert decide(job) == "preempted"
    assert job.batch_host == "n1" and job.nodes == ["n1", "n2"] and job.uid == 1002
    assert job.start is not None and job.end - job.start == 7


def test_env_decoding_and_output_patterns():
    env = {"SLURM_JOB_ID": "123", "SLURM_JOB_EXIT_CODE": "256", "SLURM_JOB_DERIVED_EC": "9", "SLURM_JOB_NODELIST": "node[001-003]",
           "SLURM_JOB_USER": "alice", "SLURM_JOB_NAME": "pre train", "SLURMD_NODENAME": "node002"}
    job = job_from_env(env)
    assert (job.exit_code, job.signal, job.derived_exit, job.derived_signal) == (1, 0, 0, 9)
    assert job.nodes == ["node001", "node002", "node003"]
    assert expand_pattern("/s/%x/%u-%j-%5j-%N-%%j.out", job) == "/s/pre train/alice-123-00123-node001-%j.out"


def test_missing_scontrol_leaves_the_environment(monkeypatch):
    monkeypatch.setattr(slurmjob, "find_tool", lambda name, dirs=(): None)
    job = slurmjob.job_info({"SLURM_JOB_ID": "5", "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_WORK_DIR": "/w"}, 5)
    assert job.outcome == "failed" and job.stdout == "/w/slurm-5.out"
    assert any("no scontrol" in n for n in job.notes)


def test_ids_that_cannot_be_file_names_are_refused():
    assert slurmjob.safe_job_id("123") and slurmjob.safe_job_id("12_3") and slurmjob.safe_job_id("12+1")
    for bad in ("", "../etc", "1; touch /tmp/x", "1/2", "$(id)"):
        assert not slurmjob.safe_job_id(bad)
    assert slurmjob.safe_node_name("node-01.a") and not slurmjob.safe_node_name("../n1") and not slurmjob.safe_node_name(".x")


def test_secrets_from_environment_dumps_are_masked():
    text = ("WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567 HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345 "
            "url=https://bob:hunter2@example.org/x AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE MY_PASSWORD: 's3cr3t!' ok=1")
    out = scrub(text)
    for secret in ("0123456789abcdef0123456789abcdef01234567", "hf_abcdefghij", "hunter2", "AKIAIOSFODNN7EXAMPLE", "s3cr3t!"):
        assert secret not in out
    assert "ok=1" in out and "WANDB_API_KEY=" in out


# --- the watchdog --------------------------------------------------------------------------

def _epilog(tmp_path: Path, env_extra: dict[str, str], config: str | None = None, limit_fsize: int | None = None):  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.toml"
    cfg.write_text(config if config is not None else f'spool_dir = "{tmp_path}/spool"\nreports_dir = "{tmp_path}/reports"\nbudget_s = 3\n')
    env = {"PATH": "/usr/bin:/bin", "CRASHSCOPE_CONFIG": str(cfg), "SLURM_JOB_ID": "41", "SLURMD_NODENAME": "n1",
           "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_CONF": str(tmp_path / "no-slurm.conf"), **env_extra}

    def limits() -> None:
        if limit_fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_fsize, limit_fsize))

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-I", "-B", "-m", "crashscope.epilog"], env=env, capture_output=True, timeout=60, preexec_fn=limits)
    return p.returncode, time.monotonic() - t0


@pytest.mark.parametrize("fault", ["crash", "hang", "hang-hard"])
def test_a_crash_or_hang_inside_still_exits_0_within_the_budget(tmp_path, fault):  # type: ignore[no-untyped-def]
    rc, seconds = _epilog(tmp_path, {"CRASHSCOPE_EPILOG_FAULT": fault})
    assert rc == 0
    assert seconds < 3 + 1.5
    log = (tmp_path / "spool" / "epilog.log").read_text()
    assert ("internal error" in log) if fault == "crash" else ("budget of 3 s spent" in log)


def test_a_broken_config_runs_on_the_defaults_and_exits_0(tmp_path):  # type: ignore[no-untyped-def]
    rc, _ = _epilog(tmp_path, {"CRASHSCOPE_EPILOG_FAULT": "crash"}, config="budget_s = [oops\n")
    assert rc == 0


def test_writes_failing_midway_exit_0(tmp_path):  # type: ignore[no-untyped-def]
    # RLIMIT_FSIZE makes every write past 4 KiB fail (SIGXFSZ/EFBIG), like a disk filling up
    rc, seconds = _epilog(tmp_path, {}, limit_fsize=4096)
    assert rc == 0 and seconds < 4.5


def test_an_unwritable_spool_exits_0(tmp_path):  # type: ignore[no-untyped-def]
    rc, _ = _epilog(tmp_path, {}, config='spool_dir = "/proc/crashscope-no"\nreports_dir = "/proc/no"\nbudget_s = 3\n')
    assert rc == 0


# --- as root against a user-owned directory ---------------------------------------------------

@pytest.fixture(scope="module")
def job_user():  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root (the epilog's privilege drop)")
    name = "csepilogt"
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
        pw = pwd.getpwnam(name)
    return pw


@pytest.fixture
def open_tmp():  # type: ignore[no-untyped-def]
    """A folder the job user can reach (pytest's tmp root is 0700)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="cs-epilog-test-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


LEAK = "[rank0]: RuntimeError: ROOT-ONLY-CONTENT must not reach a report"


def _user_dir(tmp_path: Path, pw) -> Path:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o755)
    d = tmp_path / "job"
    d.mkdir()
    (d / "rank1.log").write_text("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    for p in (d, d / "rank1.log"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    return d


def test_a_hard_link_to_a_root_only_file_does_not_leak(open_tmp, job_user):  # type: ignore[no-untyped-def]
    from crashscope.epilog.userread import read_as_user
    from crashscope.ingest import ingest

    d = _user_dir(open_tmp, job_user)
    secret = open_tmp / "root-only.log"
    secret.write_text(LEAK + "\n")
    secret.chmod(0o600)
    os.link(secret, d / "rank0.log")
    # the hole is real: read as root, the linked file's content becomes an event
    assert any("ROOT-ONLY" in (m or "") for m in ingest(d).events["message"].to_list())
    ev, files, warnings = read_as_user([{"path": str(d), "prefix": "n1/logs/", "host": "n1"}], job_user.pw_uid, job_user.pw_gid, job_user.pw_name, 60)
    messages = ev["message"].to_list()
    assert not any("ROOT-ONLY" in (m or "") for m in messages)
    assert any("illegal memory access" in (m or "") for m in messages)  # the user's own file is read
    assert any("hard link" in w for w in warnings), warnings


def test_a_world_readable_hard_link_of_another_owner_is_refused_too(open_tmp, job_user):  # type: ignore[no-untyped-def]
    from crashscope.epilog.userread import read_as_user

    d = _user_dir(open_tmp, job_user)
    other = open_tmp / "other.log"
    other.write_text(LEAK + "\n")
    other.chmod(0o644)
    os.link(other, d / "rank0.log")
    ev, _files, warnings = read_as_user([{"path": str(d), "prefix": "", "host": None}], job_user.pw_uid, job_user.pw_gid, job_user.pw_name, 60)
    assert not any("ROOT-ONLY" in (m or "") for m in ev["message"].to_list())
    assert any("hard link to a file of uid 0" in w for w in warnings), warnings


def test_a_job_dir_that_is_a_symlink_to_an_unreadable_dir_does_not_leak(open_tmp, job_user):  # type: ignore[no-untyped-def]
    from crashscope.epilog.userread import read_as_user

    open_tmp.chmod(0o755)
    private = open_tmp / "private"
    private.mkdir(mode=0o700)
    (private / "rank0.log").write_text(LEAK + "\n")
    link = open_tmp / "jobdir"
    link.symlink_to(private)
    ev, _files, warnings = read_as_user([{"path": str(link), "prefix": "", "host": None}], job_user.pw_uid, job_user.pw_gid, job_user.pw_name, 60)
    assert ev.height == 0
    assert warnings and any("symbolic link" in w or "Permission denied" in w for w in warnings), warnings


def test_nothing_is_read_as_root_without_a_job_user(open_tmp):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root")
    from crashscope.epilog.userread import read_as_user

    (open_tmp / "rank0.log").write_text(LEAK + "\n")
    ev, _f, warnings = read_as_user([{"path": str(open_tmp), "prefix": "", "host": None}], None, None, None, 30)
    assert ev.height == 0 and "never read as root" in warnings[0]
    ev, _f, warnings = read_as_user([{"path": str(open_tmp), "prefix": "", "host": None}], 0, 0, "root", 30)
    assert ev.height == 0 and "ran as root" in warnings[0]


def test_a_planted_link_in_the_workdir_is_replaced_not_written_through(open_tmp, job_user):  # type: ignore[no-untyped-def]
    from crashscope.epilog.merge import write_workdir_as_user

    open_tmp.chmod(0o755)
    work = open_tmp / "work"
    work.mkdir()
    victim = open_tmp / "passwd"  # stands for /etc/passwd: root-owned, world-readable
    victim.write_text("root:x:0:0:root:/root:/bin/sh\n")
    out = work / "crashscope-9"
    out.mkdir()
    (out / "report.html").symlink_to(victim)
    for p in (work, out):
        os.chown(p, job_user.pw_uid, job_user.pw_gid)
    os.lchown(out / "report.html", job_user.pw_uid, job_user.pw_gid)
    job = JobInfo(job_id="9", uid=job_user.pw_uid, gid=job_user.pw_gid, user=job_user.pw_name, work_dir=str(work))
    warnings = write_workdir_as_user(job, {"report.html": "<p>report</p>", "report.json": "{}"}, 60)
    assert warnings == []
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/sh\n"
    st = os.lstat(out / "report.html")
    assert stat.S_ISREG(st.st_mode) and st.st_uid == job_user.pw_uid and stat.S_IMODE(st.st_mode) == 0o600
    # a crashscope-<job> folder that is itself a link to a root folder is refused
    (open_tmp / "rootdir").mkdir()
    os.symlink(open_tmp / "rootdir", work / "crashscope-10")
    job.job_id = "10"
    assert write_workdir_as_user(job, {"report.json": "{}"}, 60)
    assert list((open_tmp / "rootdir").iterdir()) == []


def test_reports_dir_private_to_the_job_user(open_tmp, job_user):  # type: ignore[no-untyped-def]
    from crashscope.epilog.merge import write_private

    d = open_tmp / "reports" / "9"
    written = write_private(d, {"report.json": json.dumps({"cause": "oom"})}, job_user.pw_uid, job_user.pw_gid)
    assert written == [str(d / "report.json")]
    st = os.stat(d)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (job_user.pw_uid, 0o700)
    fst = os.stat(d / "report.json")
    assert (fst.st_uid, stat.S_IMODE(fst.st_mode)) == (job_user.pw_uid, 0o600)
