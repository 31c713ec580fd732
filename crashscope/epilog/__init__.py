"""The Slurm epilog: every node parses its own logs into a shard, one merge writes the report.

``crashscope epilog`` is Slurm's node ``Epilog`` (every node of the job, as root, no PATH);
``crashscope epilog --controller`` is ``EpilogSlurmctld``. A failing node epilog drains the
node, so :func:`run_epilog` always returns 0 within the budget (``Config.budget_s``): the
work runs in a forked child in its own process group; the parent only waits, and at the
deadline kills the whole group (SIGKILL) and returns 0. ``SIGALRM`` backs the wait up; a
broken config runs on the defaults; any exception in the child is logged, never raised.

Modules: :mod:`.slurmjob` (environment, scontrol, sacct, the outcome), :mod:`.node` (the
node's shard), :mod:`.merge` (reports), :mod:`.userread` / :mod:`.userwrite` (the job
user's files, with the job user's privileges), :mod:`.secrets` (secret masking).

Test knob: ``CRASHSCOPE_EPILOG_FAULT`` = ``crash`` (an exception inside the work),
``hang`` (the work sleeps forever), ``hang-hard`` (it also ignores SIGTERM) exercises the
guarantees through a real slurmd.
"""

from __future__ import annotations

import sys

# Never write bytecode from the epilog: it runs as root with resource limits a full disk or
# a site sets, and a cut .pyc in the installed package breaks every later run (seen here:
# RLIMIT_FSIZE left a 4 KiB merge.cpython-311.pyc). The wrapper runs python -B as well.
sys.dont_write_bytecode = True

import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

GRACE_S = 0.5  # kept back from the budget for killing and reaping the worker
LOG_NAME = "epilog.log"


def _log(config_spool: str, line: str) -> None:
    """Append one line to ``<spool>/epilog.log`` (best effort: a full disk loses the line)."""
    try:
        os.makedirs(config_spool, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(config_spool, LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (line.replace("\n", "\\n")[:4000] + "\n").encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _process_age() -> float:
    """Seconds since this process started (the interpreter's and the CLI's start-up count
    against the budget too): ``/proc/self/stat`` field 22 against ``/proc/uptime``."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, min(60.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, IndexError):
        return 0.0


def run_epilog(*, controller: bool = False, config_path: str | None = None, env: dict[str, str] | None = None) -> int:
    """The epilog. Returns 0, always, within the budget (see the module doc)."""
    started = time.monotonic() - _process_age()
    budget, spool = 20.0, "/var/spool/crashscope"
    try:
        from crashscope.config import load_config_or_defaults

        config, cfg_warnings = load_config_or_defaults(config_path)
        budget, spool = float(config.budget_s), str(config.spool_dir)
    except BaseException as e:  # noqa: BLE001 - even an import error must not fail the epilog
        config, cfg_warnings = None, [f"configuration unavailable: {type(e).__name__}"]
    env = dict(os.environ if env is None else env)

    def on_alarm(signum, frame):  # type: ignore[no-untyped-def]
        os._exit(0)

    try:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(int(budget) + 2)
    except (ValueError, OSError):  # not the main thread (tests): the wait loop alone bounds it
        pass
    try:
        pid = os.fork()
    except OSError as e:
        _log(spool, f"{time.time():.3f} job={env.get('SLURM_JOB_ID')} cannot fork: {e}")
        return 0
    if pid == 0:  # the worker
        code = 0
        try:
            os.setpgid(0, 0)
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            _work(config, cfg_warnings, controller, env, started + budget - GRACE_S, spool)
        except BaseException as e:  # noqa: BLE001
            import traceback

            _log(spool, f"{time.time():.3f} job={env.get('SLURM_JOB_ID')} node={env.get('SLURMD_NODENAME')} internal error: "
                        + "".join(traceback.format_exception(type(e), e, e.__traceback__))[-3000:])
            code = 0
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    deadline = started + budget - GRACE_S
    while True:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        if time.monotonic() >= deadline:
            for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    target()
                except OSError:
                    pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            _log(spool, f"{time.time():.3f} job={env.get('SLURM_JOB_ID')} node={env.get('SLURMD_NODENAME') or 'controller'} "
                        f"budget of {budget:g} s spent: stopped, what was written stays")
            break
        time.sleep(0.02)
    try:
        signal.alarm(0)
    except (ValueError, OSError):
        pass
    return 0


def _work(config, cfg_warnings, controller, env, deadline, spool):  # type: ignore[no-untyped-def]
    fault = env.get("CRASHSCOPE_EPILOG_FAULT", "")
    if fault == "crash":
        raise RuntimeError("CRASHSCOPE_EPILOG_FAULT=crash: an exception inside crashscope")
    if fault in ("hang", "hang-hard"):
        if fault == "hang-hard":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    os.umask(0o077)
    from crashscope.config import Config
    from crashscope.epilog.slurmjob import job_info, safe_job_id, safe_node_name

    config = config or Config()
    left = lambda: deadline - time.monotonic()  # noqa: E731
    t0 = time.monotonic()
    job = job_info(env, max(1.0, min(10.0, left() * 0.25)))
    role = "controller" if controller else (job.node or env.get("SLURMD_NODENAME") or "node")
    seen = " ".join(f"{k}={job.scontrol[k]}" for k in ("JobState", "Reason", "ExitCode", "DerivedExitCode", "PreemptTime", "EndTime") if k in job.scontrol)
    line = (f"{time.time():.3f} job={job.job_id} {role} outcome={job.outcome} exit={job.exit_code}:{job.signal} "
            f"env_exit={env.get('SLURM_JOB_EXIT_CODE2') or env.get('SLURM_JOB_EXIT_CODE')} scontrol[{seen}]")
    if not safe_job_id(job.job_id) or (not controller and not safe_node_name(job.node or os.uname().nodename.split(".")[0])):
        _log(spool, line + " -> job id or node name unusable as a file name: nothing done")
        return
    if not job.failed and not config.on_success:
        _log(spool, line + " -> nothing to do")
        return
    from crashscope.epilog.merge import log_roots, merge, wait_for_shards
    from crashscope.shards import shard_dirs

    job_dir = config.spool_dir / job.job_id
    result = None
    if controller:
        reserve = max(6.0, 0.4 * config.budget_s)  # for the merge itself
        missing = wait_for_shards(job_dir, job.nodes, time.monotonic() + max(0.0, left() - reserve))
        result = merge(job, config, left(), extra_warnings=cfg_warnings)
        line += f" waited for {len(job.nodes) - len(missing)}/{len(job.nodes)} shards"
        if result is None:
            line += ", another merger holds the lock"
    else:
        node = job.node or os.uname().nodename.split(".")[0]
        from crashscope.epilog.merge import job_roots
        from crashscope.epilog.node import build_shard

        batch_host = job.batch_host or (job.nodes[0] if job.nodes else node)
        roots = log_roots(config, job, node) + (job_roots(job, config) if node == batch_host else [])
        build_shard(job, node, config, left() * 0.8, roots, job_files=node == batch_host)
        have = {d.name[:-6] for d in shard_dirs(job_dir)}
        # the last node to finish merges when it has some time left (else the controller or `collect` does)
        if job.nodes and all(n in have for n in job.nodes) and left() > 0.3 * config.budget_s:
            result = merge(job, config, left(), extra_warnings=cfg_warnings)
    if result is not None:
        line += f" merged cause={result.report.cause} written={len(result.written)} {' '.join(result.warnings)[:400]}"
    _log(spool, line + f" in {time.monotonic() - t0:.2f} s")


def main(argv: list[str] | None = None) -> None:
    """``python -m crashscope.epilog [--controller] [--config FILE]``: the smallest entry point."""
    code = 0
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        controller = "--controller" in args
        config_path = None
        if "--config" in args:
            i = args.index("--config")
            config_path = args[i + 1] if i + 1 < len(args) else None
        code = run_epilog(controller=controller, config_path=config_path)
    except BaseException:  # noqa: BLE001
        code = 0
    os._exit(code)
