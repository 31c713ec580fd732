"""`crashscope epilog`, `crashscope shard` and `crashscope collect` (see crashscope/epilog and
docs/epilog.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

CONFIG_HELP = "Configuration file (default: $CRASHSCOPE_CONFIG, else /etc/crashscope/config.toml)."


def register(app: typer.Typer) -> None:
    from crashscope.cli import EXIT_HELP

    @app.command("epilog", epilog=EXIT_HELP)
    def epilog_cmd(
        controller: bool = typer.Option(False, "--controller", help="Run as EpilogSlurmctld (merge the nodes' shards)."),
        config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Slurm Epilog / EpilogSlurmctld: always exits 0 within the budget (budget_s); see docs/epilog.md.

        Example:
            Epilog=/usr/local/sbin/crashscope-epilog   (runs: crashscope epilog)
            EpilogSlurmctld=/usr/local/sbin/crashscope-epilog-ctld   (runs: crashscope epilog --controller)
        """
        from crashscope.epilog import run_epilog

        try:
            run_epilog(controller=controller, config_path=str(config) if config else None)
        finally:
            os._exit(0)  # nothing (not even a broken stdout at exit) may turn this into a failure

    @app.command("shard", epilog=EXIT_HELP)
    def shard_cmd(
        job: str = typer.Option(..., "--job", help="Slurm job id."),
        node: Optional[str] = typer.Option(None, "--node", help="This node's Slurm name (default: $SLURMD_NODENAME, else the host name)."),
        config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Build this node's shard for a finished job (what `collect --srun` runs on each node).

        Example:
            srun -w node[001-004] --ntasks-per-node=1 crashscope shard --job 123456
        """
        from crashscope.config import load_config
        from crashscope.epilog.merge import log_roots
        from crashscope.epilog.node import build_shard
        from crashscope.epilog.slurmjob import job_after_the_fact, safe_job_id, safe_node_name
        from crashscope.errors import UsageError

        cfg = load_config(config)
        if not safe_job_id(job):
            raise UsageError(f"not a Slurm job id: {job!r}")
        name = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
        if not safe_node_name(name):
            raise UsageError(f"not a usable node name: {name!r}")
        info = job_after_the_fact(job, 10.0)
        path = build_shard(info, name, cfg, cfg.budget_s, log_roots(cfg, info, name))
        typer.echo(str(path))

    @app.command("collect", epilog=EXIT_HELP)
    def collect_cmd(
        job: str = typer.Argument(..., help="Slurm job id."),
        srun: bool = typer.Option(False, "--srun", help="Build missing shards first with one `srun -w <nodes> crashscope shard` step."),
        config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
        timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds for the srun step and the merge each."),
    ) -> None:
        """Merge a job's shards (and its stdout/stderr) into <reports_dir>/<jobid>/report.*.

        Example:
            crashscope collect 123456
            crashscope collect 123456 --srun   # build the missing nodes' shards first
        """
        from crashscope.config import load_config
        from crashscope.epilog.merge import merge
        from crashscope.epilog.slurmjob import find_tool, job_after_the_fact, run_tool, safe_job_id
        from crashscope.errors import UsageError
        from crashscope.hostlist import compress
        from crashscope.shards import shard_dirs

        cfg = load_config(config)
        if not safe_job_id(job):
            raise UsageError(f"not a Slurm job id: {job!r}")
        info = job_after_the_fact(job, 15.0)
        job_dir = Path(cfg.spool_dir) / job
        have = {d.name[:-6] for d in shard_dirs(job_dir)}
        missing = [n for n in info.nodes if n not in have]
        if srun and missing:
            exe = find_tool("srun")
            if exe is None:
                raise UsageError("--srun: no srun found")
            argv = [exe, "-w", compress(missing), "-N", str(len(missing)), "--ntasks-per-node=1", "-J", f"crashscope-shard-{job}",
                    sys.executable, "-m", "crashscope", "shard", "--job", job]
            if config:
                argv += ["--config", str(config)]
            env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
            for k in ("SLURM_CONF", "CRASHSCOPE_CONFIG"):
                if os.environ.get(k):
                    env[k] = os.environ[k]
            rc, out, err = run_tool(argv, timeout, env)
            typer.echo(f"srun shard step on {compress(missing)}: {err or f'exit {rc}'}", err=True)
        result = merge(info, cfg, timeout, force=True)
        if result is None:
            raise UsageError("another merge holds the lock")
        for p in result.written:
            typer.echo(p)
        for w in result.warnings:
            typer.echo(f"warning: {w}", err=True)
        typer.echo(f"cause: {result.report.cause} ({result.report.confidence:.2f})", err=True)
