"""A throw-away real Slurm cluster for the epilog tests: its own munged, slurmctld and two
``slurmd -N`` on 127.0.0.1, with crashscope as ``Epilog`` and ``EpilogSlurmctld``.

Written from /work/shared/tools/slurm-local.sh and benchmarks/lab/slurm.sh (configurations
known to work here: Debian 12 slurm-wlm 22.05.8, munge 0.5.15). Differences: private ports
(picked free), a private munged (own key and socket, ``AuthInfo=socket=``), everything under
a tmp directory, no slurmdbd (accounting off: sacct answers nothing, the epilog then relies
on scontrol and its environment), ``SlurmdParameters=config_overrides`` so each node can
offer more CPUs than the host has. Every daemon is stopped by its pid at teardown.

The Epilog wrappers record each run (job, node, start, end, exit status) in
``<base>/epilog-runs.log`` and pass crashscope's own exit status through (a crashscope that
failed would drain the node; the wrapper does not hide it). ``<base>/fault.<jobid>``, when it
exists, becomes ``CRASHSCOPE_EPILOG_FAULT`` for that job's epilogs, and
``<base>/etc/crashscope.<jobid>.toml`` its configuration (the hang test's shorter budget).

Skipped without root, without slurmctld/slurmd/munged, or when the cluster does not come up.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SBIN = "/usr/sbin"
JOB_USER = "csepilog"
BUDGET_S = 45  # two slurmd, their epilogs and other work share two cores here; a node has more
HANG_BUDGET_S = 10


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the real-Slurm epilog tests need root (slurmd runs the Epilog as root)"
    missing = [b for b in ("slurmctld", "slurmd", "munged") if not os.path.exists(os.path.join(SBIN, b))]
    missing += [b for b in ("sbatch", "scontrol", "sinfo", "scancel") if shutil.which(b) is None]
    if missing:
        return f"Slurm/munge not installed (missing {', '.join(missing)}; apt-get install slurmctld slurmd slurm-client munge)"
    return None


@dataclass
class Cluster:
    base: Path
    conf: Path
    user: str
    uid: int
    gid: int
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        p = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def sbatch(self, script: str, *options: str, fault: str | None = None) -> str:
        work = self.base / "work"
        path = work / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        os.chown(path, self.uid, self.gid)
        out = self.run("sbatch", "--parsable", f"--uid={self.uid}", f"--gid={self.gid}", f"--chdir={work}", *options, str(path))
        job = out.strip().split(";")[0]
        if fault:
            (self.base / f"fault.{job}").write_text(fault)
            cfg = (self.base / "etc" / "crashscope.toml").read_text().replace(f"budget_s = {BUDGET_S}", f"budget_s = {HANG_BUDGET_S}")
            (self.base / "etc" / f"crashscope.{job}.toml").write_text(cfg)
        return job

    def job_fields(self, job: str) -> dict[str, str]:
        from crashscope.epilog.slurmjob import parse_scontrol

        return parse_scontrol(self.run("scontrol", "show", "job", "-o", job, check=False))

    def wait_done(self, jobs: list[str], timeout: float = 240) -> dict[str, dict[str, str]]:
        """Wait until every job is in a final state and its epilogs have run."""
        t0 = time.monotonic()
        final = {}
        while time.monotonic() - t0 < timeout:
            for j in jobs:
                if j in final:
                    continue
                f = self.job_fields(j)
                state = f.get("JobState", "")
                if state and state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED"):
                    final[j] = f
            if len(final) == len(jobs) and self.epilogs_idle():
                return final
            time.sleep(0.5)
        raise TimeoutError(f"jobs not done after {timeout} s: {[j for j in jobs if j not in final]}")

    def epilogs_idle(self) -> bool:
        return "comp" not in self.run("sinfo", "-h", "-N", "-o", "%t", check=False)

    def node_states(self) -> dict[str, str]:
        from crashscope.epilog.slurmjob import parse_scontrol

        out = {}
        for line in self.run("scontrol", "show", "node", "-o").splitlines():
            f = parse_scontrol(line)
            out[f.get("NodeName", "?")] = f.get("State", "?") + (f" Reason={f['Reason']}" if f.get("Reason") else "")
        return out

    def epilog_runs(self) -> list[dict[str, str]]:
        runs = []
        p = self.base / "epilog-runs.log"
        if p.exists():
            for line in p.read_text().splitlines():
                job, who, start, end, rc = line.split()
                runs.append({"job": job, "who": who, "seconds": float(end) - float(start), "rc": rc})
        return runs


def _write_wrappers(base: Path, config: Path) -> tuple[Path, Path]:
    py = sys.executable
    paths = []
    for name, extra in (("epilog-node.sh", ""), ("epilog-ctld.sh", " --controller")):
        p = base / name
        who = '"${SLURMD_NODENAME:-controller}"' if not extra else "controller"
        p.write_text(f"""#!/bin/sh
# crashscope as Slurm's {'EpilogSlurmctld' if extra else 'Epilog'} (test wrapper: times each run, passes crashscope's exit status through)
start=$(date +%s.%N)
FAULT=""
CONFIG="{config}"
[ -f "{base}/fault.$SLURM_JOB_ID" ] && FAULT=$(cat "{base}/fault.$SLURM_JOB_ID")
[ -f "{base}/etc/crashscope.$SLURM_JOB_ID.toml" ] && CONFIG="{base}/etc/crashscope.$SLURM_JOB_ID.toml"
SLURM_CONF="{base}/etc/slurm.conf" CRASHSCOPE_CONFIG="$CONFIG" CRASHSCOPE_EPILOG_FAULT="$FAULT" "{py}" -I -B -m crashscope.epilog{extra} </dev/null >>"{base}/log/epilog.out" 2>&1
rc=$?
echo "$SLURM_JOB_ID {who} $start $(date +%s.%N) $rc" >> "{base}/epilog-runs.log"
exit $rc
""")
        p.chmod(0o755)
        paths.append(p)
    return paths[0], paths[1]


def _ensure_user() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(JOB_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", JOB_USER], check=True, capture_output=True)
        pw = pwd.getpwnam(JOB_USER)
    return pw.pw_uid, pw.pw_gid


def start_cluster(base: Path) -> Cluster:
    host = socket.gethostname().split(".")[0]
    for d in ("etc", "state", "log", "run", "spool/n1", "spool/n2", "munge", "reports", "cs-spool", "work"):
        (base / d).mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    uid, gid = _ensure_user()
    os.chown(base / "work", uid, gid)
    config = base / "etc" / "crashscope.toml"
    config.write_text(f'reports_dir = "{base}/reports"\nspool_dir = "{base}/cs-spool"\nbudget_s = {BUDGET_S}\n'
                      f'copy_to_workdir = true\nlog_dirs = ["{base}/work/logs/%j/%n"]\n')
    node_epilog, ctld_epilog = _write_wrappers(base, config)
    ctld_port, n1_port, n2_port = _free_ports(3)
    munge = base / "munge"
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    try:
        mu = pwd.getpwnam("munge")
        musr = (mu.pw_uid, mu.pw_gid)
    except KeyError:
        musr = (0, 0)
    for p in (munge, key):
        os.chown(p, *musr)
    munge.chmod(0o755)
    key.chmod(0o400)
    conf = base / "etc" / "slurm.conf"
    conf.write_text(f"""ClusterName=csepilog
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/munge.sock
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
Epilog={node_epilog}
EpilogSlurmctld={ctld_epilog}
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
MinJobAge=600
KillWait=2
InactiveLimit=0
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={n1_port} CPUs=16 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.1 Port={n2_port} CPUs=16 RealMemory=2000 State=UNKNOWN
PartitionName=low  Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=CANCEL
PartitionName=high Nodes=n[1-2] Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
""")
    cl = Cluster(base=base, conf=conf, user=JOB_USER, uid=uid, gid=gid)
    env = cl.env
    try:
        argv = [f"{SBIN}/munged", f"--socket={munge}/munge.sock", f"--key-file={key}", f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed", "--num-threads=2"]
        if musr != (0, 0):
            argv = ["runuser", "-u", "munge", "--"] + argv
        else:
            argv.append("--force")
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        if p.returncode != 0:
            raise RuntimeError(f"munged: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        _wait(lambda: (munge / "munged.pid").exists(), 10, "munged")
        cl.pids["munged"] = int((munge / "munged.pid").read_text())
        p = subprocess.run([f"{SBIN}/slurmctld", "-f", str(conf)], env=env, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"slurmctld: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        _wait(lambda: (base / "run" / "slurmctld.pid").exists(), 20, "slurmctld")
        cl.pids["slurmctld"] = int((base / "run" / "slurmctld.pid").read_text())
        for n in ("n1", "n2"):
            subprocess.run([f"{SBIN}/slurmd", "-f", str(conf), "-N", n], env=env, check=True, capture_output=True, timeout=30)
            _wait(lambda n=n: (base / "run" / f"slurmd.{n}.pid").exists(), 20, f"slurmd {n}")
            cl.pids[f"slurmd.{n}"] = int((base / "run" / f"slurmd.{n}.pid").read_text())
        _wait(lambda: cl.run("sinfo", "-h", "-N", "-p", "low", "-o", "%N %t", check=False).count(" idle") >= 2, 60, "both nodes idle")
    except BaseException:
        stop_cluster(cl)
        raise
    return cl


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not up after {timeout} s")


def stop_cluster(cl: Cluster) -> None:
    """SIGTERM every daemon started, by pid (slurmd and slurmctld first, munged last), then SIGKILL."""
    order = [k for k in ("slurmd.n1", "slurmd.n2", "slurmctld", "munged") if k in cl.pids]
    for tier in ([k for k in order if k != "munged"], [k for k in order if k == "munged"]):
        for k in tier:
            try:
                os.kill(cl.pids[k], signal.SIGTERM)
            except ProcessLookupError:
                pass
        for k in tier:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 15:
                try:
                    os.kill(cl.pids[k], 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(cl.pids[k], signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    why = skip_reason()
    if why:
        pytest.skip(why)
    import tempfile

    # not under pytest's 0700 tmp root: munged and the job user must reach their folders
    base = Path(tempfile.mkdtemp(prefix="cs-slurm-", dir="/tmp"))
    try:
        cl = start_cluster(base)
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        log = ""
        for f in ("log/slurmctld.log", "log/slurmd.n1.log", "munge/munged.log"):
            p = base / f
            if p.exists():
                log += f"\n{f}: " + " | ".join(p.read_text(errors="replace").splitlines()[-3:])
        pytest.skip(f"the throw-away Slurm cluster did not come up: {e}{log}")
    yield cl
    stop_cluster(cl)
    if not os.environ.get("CRASHSCOPE_KEEP_SLURM"):
        shutil.rmtree(base, ignore_errors=True)
