"""`crashscope repro`: re-run the suspect collective and isolate the bad node or link.

Only this command imports torch (in its workers and its local fork server, never in the CLI
process before a run starts); without the ``repro`` extra it says which pip command adds it.
Exit codes: 0 cleared, 1 confirmed, 3 inconclusive, 2 usage (also: torch missing).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

EXIT_CLEARED, EXIT_CONFIRMED, EXIT_INCONCLUSIVE = 0, 1, 3
REPRO_EXIT_HELP = ("\b\nExit codes:\n  0  cleared: the collective ran clean on the group\n"
                   "  1  confirmed: it failed again and a node, rank or link is named\n"
                   "  2  usage error (also: torch not installed)\n  3  inconclusive: it failed but nothing could be named")


def _gpu_count() -> int:
    """NVIDIA GPUs the driver lists (/proc/driver/nvidia/gpus/<pci>/), without importing torch."""
    try:
        return len(list(Path("/proc/driver/nvidia/gpus").iterdir()))
    except OSError:
        return 0


def _parse_inject(specs: list[str]) -> list[str]:
    from crashscope.errors import UsageError

    out = []
    for s in specs:
        who, sep, what = s.partition(":")
        ok = sep and who.isdigit() and (what in ("hang", "exit") or what.startswith("delay="))
        if ok and what.startswith("delay="):
            try:
                ok = float(what[6:]) >= 0
            except ValueError:
                ok = False
        if not ok:
            raise UsageError(f"--inject: expected RANK:delay=SECONDS, RANK:hang or RANK:exit, got {s!r}")
        out.append(s)
    return out


def _sweep(text: str) -> list[float]:
    from crashscope.errors import UsageError

    if text.strip().lower() in ("", "none", "0"):
        return []
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--sweep: expected factors like 0.25,4 or 'none', got {text!r}") from None
    if any(v <= 0 for v in vals):
        raise UsageError("--sweep: factors must be positive")
    return vals


def _load_report(path: Path) -> dict[str, Any]:
    from crashscope.errors import InputError

    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(64 << 20))
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read report {path}: {e}") from None
    if not isinstance(data, dict) or "cause" not in data:
        raise InputError(f"{path} is not a crashscope report (JSON with a 'cause')")
    return data


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.4g} {unit}"
    return f"{int(n)} B"


def _plan_text(plan: Any, settings: Any, cmds: list[Any]) -> str:
    from crashscope.report.safe import escape_controls as esc

    lines = [f"crashscope repro plan ({esc(plan.source)})",
             f"  collective: {plan.op}, {_human(plan.bytes)} ({plan.bytes} bytes, {plan.dtype}) x {settings.iters} timed calls"
             + (f", sweep x{', x'.join(f'{f:g}' for f in settings.sweep)}" if settings.sweep else ""),
             f"  {plan.unit_kind}s: {', '.join(esc(u) for u in plan.units)} ({plan.per_unit} rank(s) each; {plan.world} ranks)",
             f"  implicated: {', '.join(esc(u) for u in plan.implicated_units) or '-'}; references: {', '.join(esc(u) for u in plan.reference_units) or '-'}",
             f"  launcher {settings.launcher}, backend {settings.backend}, timeout {settings.timeout:g}s"]
    c = plan.collective or {}
    if c:
        lines.append(f"  from the log: OpType={esc(c.get('op_type'))} NumelIn={esc(c.get('numel_in'))} NumelOut={esc(c.get('numel_out'))}"
                     f" SeqNum={esc(c.get('seq'))} PG={esc(c.get('pg_desc') or c.get('pg_id') or '-')} at {esc(c.get('where') or '-')}")
    if plan.process_group.get("hosts"):
        lines.append(f"  process group: {len(plan.process_group.get('ranks') or [])} ranks on {', '.join(esc(h) for h in plan.process_group['hosts'])}")
    if plan.nccl_env:
        lines.append("  NCCL environment of the job (used with nccl): " + " ".join(f"{esc(k)}={esc(v)}" for k, v in plan.nccl_env.items()))
    for n in plan.notes:
        lines.append(f"  note: {esc(n)}")
    if settings.inject:
        lines.append(f"  inject (testing aid): {', '.join(settings.inject)}")
    lines.append("  then, if it fails or is slow: halves of the group, then pairs with references, until a unit or link is named")
    lines.append("commands of the full-group run:")
    for c in cmds:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(c.env.items()))
        lines.append("  " + (f"env {env} " if env else "") + shlex.join(c.argv))
    return "\n".join(lines) + "\n"


def _result_text(out: dict[str, Any]) -> str:
    from crashscope.report.safe import escape_controls as esc

    imp = out["implicated"]
    lines = [f"crashscope repro: {out['verdict']}"]
    named = [*imp.get("nodes", [])] or [f"rank {r}" for r in imp.get("ranks", [])]
    if named:
        lines.append(f"  named: {', '.join(esc(x) for x in named)}" + (f" (ranks {', '.join(str(r) for r in imp['ranks'])})" if imp.get("nodes") else ""))
    for link in out.get("links") or []:
        lines.append(f"  link: {esc(link['between'][0])} <-> {esc(link['between'][1])} {link['status']}")
    if out.get("reason"):
        lines.append(f"  {esc(out['reason'])}")
    lines.append(f"  {'purpose':<20} {'units':<28} {'bytes':>10} {'time(ms)':>9} {'algbw':>8} {'busbw':>8}  status")
    for r in out["runs"]:
        t = f"{r['time'] * 1e3:.3f}" if r.get("time") else "-"
        a = f"{r['algbw']:.3f}" if r.get("algbw") is not None else "-"
        b = f"{r['busbw']:.3f}" if r.get("busbw") is not None else "-"
        lines.append(f"  {esc(r['purpose']):<20} {esc(','.join(r['units']), 28):<28} {r.get('bytes') or r.get('requested_bytes') or 0:>10} {t:>9} {a:>8} {b:>8}  {r['status']}")
        if r.get("error"):
            lines.append(f"      {esc(r['error'], 300)}")
        for s in (r.get("sizes") or [])[1:]:
            lines.append(f"  {'  sweep':<20} {'':<28} {s['bytes']:>10} {s['time'] * 1e3:>9.3f} {s['algbw']:>8.3f} {s['busbw']:>8.3f}")
    lines.append(f"  {len(out['runs'])} run(s) in {out['seconds']:.1f}s; worker files: {esc(out.get('results_dir'))}")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("repro", epilog=REPRO_EXIT_HELP)
    def repro_cmd(
        source: Optional[Path] = typer.Argument(None, help="REPORT.json (from analyze --format json) or the job directory; omit for direct mode"),
        op: Optional[str] = typer.Option(None, "--op", help="all_reduce | all_gather | reduce_scatter | broadcast | all_to_all"),
        nbytes: Optional[int] = typer.Option(None, "--bytes", help="message size S in bytes (nccl-tests' size: the whole array)"),
        dtype: str = typer.Option("float32", "--dtype", help="element type (bf16, fp16, float32, ...); the log names only element counts"),
        nproc: Optional[int] = typer.Option(None, "--nproc", min=1, max=256, help="local processes (each one a rank)"),
        nodes: Optional[str] = typer.Option(None, "--nodes", help="nodes for srun, a Slurm hostlist (node[01-04])"),
        gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", min=1, max=64, help="ranks per node under srun (default: from the report, else 1)"),
        launcher: Optional[str] = typer.Option(None, "--launcher", help="local | torchrun | srun (default: srun with --nodes, else local)"),
        backend: str = typer.Option("auto", "--backend", help="auto | nccl | gloo (auto: nccl on GPUs, gloo on CPU)"),
        timeout: float = typer.Option(60.0, "--timeout", min=0.5, help="seconds for init and for each collective; no progress this long is a hang"),
        iters: int = typer.Option(10, "--iters", min=1, max=100000),
        warmup: int = typer.Option(2, "--warmup", min=0, max=1000),
        sweep: str = typer.Option("0.25,4", "--sweep", help="other sizes, as factors of the suspect size, for the full-group run ('none')"),
        inject: Optional[List[str]] = typer.Option(None, "--inject", help="testing aid: RANK:delay=SECONDS | RANK:hang | RANK:exit (repeatable)"),
        slow_factor: float = typer.Option(4.0, "--slow-factor", min=1.0, help="slow: this many times below the best group's busbw, or late by this many collective times"),
        min_busbw: Optional[float] = typer.Option(None, "--min-busbw", help="GB/s: a run below is slow"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the plan and the exact commands; run nothing"),
        fmt: str = typer.Option("text", "--format", help="text | json"),
        update_report: bool = typer.Option(False, "--update-report", help="write the verdict into REPORT.json (its 'repro' field)"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the report with the verdict here (.json/.md/.txt)"),
        results: Optional[Path] = typer.Option(None, "--results", help="folder for the workers' files (srun: on a file system all nodes see)"),
        port: int = typer.Option(0, "--port", min=0, max=65535, help="rendezvous port (default: a free one)"),
        master_addr: Optional[str] = typer.Option(None, "--master-addr", help="srun: rendezvous address (default: the first node's name)"),
    ) -> None:
        """Re-run the suspect collective on the implicated nodes and name the bad node or link.

        Examples:
            crashscope repro report.json --dry-run
            crashscope repro JOBDIR --launcher srun --update-report -o report.json
            crashscope repro --op all_reduce --bytes 67108864 --nproc 4 --format json
            crashscope repro --op all_gather --bytes 1048576 --nodes node[01-04] --gpus-per-node 8
        """
        from crashscope.errors import CrashscopeError, UsageError
        from crashscope.hostlist import expand_hosts
        from crashscope.repro import INSTALL_HINT, OPS, torch_available
        from crashscope.repro.bisect import Isolation, Settings, sweep_sizes
        from crashscope.repro.launch import LAUNCHERS, Group, commands, free_port
        from crashscope.repro.plan import direct_plan, plan_from_jobdir, plan_from_report

        if not dry_run and not torch_available():  # before anything else: the one thing to fix first
            raise CrashscopeError(f"repro needs torch: {INSTALL_HINT}")
        if fmt not in ("text", "json"):
            raise UsageError(f"--format: choose text or json, got {fmt!r}")
        if op is not None and op not in OPS:
            raise UsageError(f"--op: choose one of {', '.join(OPS)}, got {op!r}")
        node_list = expand_hosts(nodes) if nodes else None
        if nodes and not node_list:
            raise UsageError(f"--nodes: no node names in {nodes!r}")
        if nproc is not None and node_list:
            raise UsageError("--nproc and --nodes exclude each other")
        launcher = launcher or ("srun" if node_list else "local")
        if launcher not in LAUNCHERS:
            raise UsageError(f"--launcher: choose one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        if backend not in ("auto", "nccl", "gloo"):
            raise UsageError(f"--backend: choose auto, nccl or gloo, got {backend!r}")
        if (update_report or output) and source is None:
            raise UsageError("--update-report and --output need a REPORT.json or job directory")
        injects = _parse_inject(list(inject or []))

        report: dict[str, Any] | None = None
        report_file: Path | None = None
        jobdir: Path | None = None
        if source is None:
            if op is None or nbytes is None or (nproc is None and not node_list):
                raise UsageError("direct mode needs --op, --bytes and --nproc or --nodes (or give a REPORT.json or job directory)")
            plan = direct_plan(op, nbytes, dtype, nproc=nproc, nodes=node_list, gpus_per_node=gpus_per_node or 1)
        else:
            kw: dict[str, Any] = dict(op=op, nbytes=nbytes, dtype=dtype, launcher=launcher, gpus_per_node=gpus_per_node, nproc=nproc)
            if source.is_dir():
                jobdir = source
                plan, report = plan_from_jobdir(source, **kw)
            elif source.is_file():
                if update_report and source.suffix.lower() != ".json":
                    raise UsageError("--update-report needs a REPORT.json")
                report_file = source
                report = _load_report(source)
                plan = plan_from_report(report, **kw)
            else:
                raise UsageError(f"{source}: no such report or directory")
            if node_list:  # the command line's nodes replace the report's
                plan.units = node_list
                plan.unit_kind = "node"
                plan.implicated_units = [u for u in plan.implicated_units if u in node_list]
                plan.reference_units = [u for u in node_list if u not in plan.implicated_units]
        if launcher == "srun" and plan.unit_kind == "node":
            import re

            from crashscope.report.safe import escape_controls

            bad = [u for u in plan.units if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", u)]
            if bad:  # node names come from logs: never let one look like an option of srun
                raise UsageError(f"not a node name for srun -w: {escape_controls(bad[0], 80)!r} (give --nodes)")
        if update_report and report_file is None:
            raise UsageError("--update-report needs a REPORT.json (for a job directory, use --output)")
        if backend == "auto":
            if launcher == "srun":
                backend = "nccl"
            else:
                backend = "nccl" if 0 < plan.world <= _gpu_count() else "gloo"
        settings = Settings(launcher=launcher, backend=backend, iters=iters, warmup=warmup, timeout=timeout, sweep=_sweep(sweep),
                            inject=injects, slow_factor=slow_factor, min_busbw=min_busbw, results=results, port=port,
                            master_addr=master_addr)
        never_inside = [p for p in (jobdir, report_file if not update_report else None) if p is not None]
        sink = None
        if output is not None:
            from crashscope.report.output import SafeOutput

            sink = SafeOutput(output, never_inside=never_inside)  # fail now, not after the runs

        if dry_run:
            g = Group(op=plan.op, sizes=sweep_sizes(plan.bytes, settings.sweep), dtype=plan.dtype, unit_ids=list(range(len(plan.units))),
                      unit_names=list(plan.units), per_unit=plan.per_unit, iters=iters, warmup=warmup, timeout=timeout, backend=backend,
                      launcher=launcher, inject=injects, env=dict(plan.nccl_env), port=port or free_port(), master=master_addr)
            res_dir = str(results or "<results>/run01")
            cmds = commands(g, res_dir)
            if sink is not None:
                sink.discard()
            if fmt == "json":
                typer.echo(json.dumps({"plan": plan.to_dict(), "launcher": launcher, "backend": backend,
                                       "commands": [{"argv": c.argv, "env": c.env} for c in cmds]}, indent=2))
            else:
                sys.stdout.write(_plan_text(plan, settings, cmds))
            raise typer.Exit(0)

        if plan.world == 1:
            plan.notes.append("one rank: nothing crosses a link (busbw is 0 by the nccl-tests factor); a check of the GPU and the library only")

        def progress(msg: str) -> None:
            if fmt == "text":
                print(f"crashscope repro: {msg}", file=sys.stderr, flush=True)

        from crashscope.repro.launch import close_fork_server

        try:
            out = Isolation(plan, settings, progress=progress).investigate()
        finally:
            close_fork_server()
        out["plan"] = {"op": plan.op, "bytes": plan.bytes, "dtype": plan.dtype, "units": plan.units, "unit_kind": plan.unit_kind,
                       "per_unit": plan.per_unit, "launcher": launcher, "backend": backend, "source": plan.source,
                       "nccl_env": plan.nccl_env, "notes": plan.notes, "collective": plan.collective}
        from datetime import datetime, timezone

        from crashscope import __version__

        out["time"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out["crashscope"] = __version__
        if report is not None and (update_report or sink is not None):
            from crashscope.report.model import Report
            from crashscope.report.render import renderer_for

            rep = Report.from_dict(report)
            rep.repro = out
            if update_report and report_file is not None:
                from crashscope.report.output import SafeOutput

                with SafeOutput(report_file) as f:
                    f.write_text(json.dumps(rep.to_dict(), indent=2) + "\n")
            if sink is not None:
                _name, render = renderer_for(None, str(output))
                sink.write_text(render(rep))
        if fmt == "json":
            typer.echo(json.dumps(out, indent=2))
        else:
            sys.stdout.write(_result_text(out))
        raise typer.Exit({"cleared": EXIT_CLEARED, "confirmed": EXIT_CONFIRMED}.get(out["verdict"], EXIT_INCONCLUSIVE))
