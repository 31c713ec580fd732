"""Record real PyTorch Flight Recorder dumps (torch 2.13, gloo, CPU) for crashscope's fixtures.

Runs a 4-rank job under the real ``torchrun`` (``--standalone``, 127.0.0.1, ``LOGLEVEL=INFO`` so the
agent's own lines are there) with ``TORCH_FR_BUFFER_SIZE=2000`` and
``TORCH_FR_DUMP_TEMP_FILE=<job>/fr/nccl_trace_rank_``. Every step does one all_reduce on a
tensor-parallel subgroup (``new_group([0,1])`` / ``new_group([2,3])`` with ``group_desc``) and one on
the default group, so the dumps hold two process groups with their own sequence numbers.

gloo has no watchdog that dumps by itself, so each rank dumps on its own exception path and on
SIGTERM/SIGCONT (the signals torchrun's agent and this script send when peers fail), with the
torch 2.13 APIs ``torch._C._distributed_c10d._dump_fr_trace()`` (pickle) and
``_dump_fr_trace_json()`` (JSON), written to ``<prefix><rank>`` and ``<prefix><rank>.json``.

Scenarios (``--scenario``):
  * ``hang``: rank ``--fault-rank`` stops itself (SIGSTOP) right before its tensor-parallel
    all_reduce of step ``--fault-step``; its peers time out (``--timeout`` s) and dump; this script
    then resumes it with SIGCONT and its handler dumps (standing in for the dump NCCL's watchdog
    writes on a peer's dump signal). All four dumps are present.
  * ``hang_nodump``: as ``hang``, but the stopped rank is SIGKILLed instead: its dump is missing.
  * ``mismatch_op``: the faulty rank calls all_gather where its peers call all_reduce (default PG).
  * ``mismatch_size``: the faulty rank all_reduces 7 elements where its peers reduce 3.
  * ``clean``: every rank completes and dumps at the end.

Usage: python benchmarks/lab/fr_record.py --scenario hang --out fixtures/recorded_fr/hang_rank2
(The output directory gets torchrun.log, fr/ and truth.json; nothing else.)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SCENARIOS = ("hang", "hang_nodump", "mismatch_op", "mismatch_size", "clean")


# -- the worker (one rank, started by torchrun) ------------------------------------------------

def _dump(rank: int, why: str) -> None:
    import torch

    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return
    try:
        data = torch._C._distributed_c10d._dump_fr_trace()
        with open(f"{prefix}{rank}", "wb") as f:
            f.write(data)
        text = torch._C._distributed_c10d._dump_fr_trace_json()  # bytes in torch 2.13
        with open(f"{prefix}{rank}.json", "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        logging.getLogger("train").error("Flight Recorder trace dumped to %s%d (%d bytes; %s)", prefix, rank, len(data), why)
    except Exception as e:  # the dump must never hide the real error
        logging.getLogger("train").error("Flight Recorder dump failed: %r", e)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s - %(levelname)s - [rank {rank}/{world}] %(name)s - %(message)s")
    log = logging.getLogger("train")
    pid_dir = Path(args.pid_dir)
    (pid_dir / f"rank{rank}.pid").write_text(str(os.getpid()))

    def on_signal(signum, _frame):  # noqa: ANN001
        _dump(rank, f"on {signal.Signals(signum).name}")
        os._exit(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGCONT, on_signal)
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=args.timeout))
    log.info("initialized process group backend=gloo rank=%d world_size=%d timeout=%ss pid=%d host=%s",
             rank, world, args.timeout, os.getpid(), socket.gethostname())
    timeout = dt.timedelta(seconds=args.timeout)  # new_group's default is 30 min, not the default PG's
    tp_groups = [dist.new_group([0, 1], timeout=timeout, group_desc="TENSOR_PARALLEL_GROUP"),
                 dist.new_group([2, 3], timeout=timeout, group_desc="TENSOR_PARALLEL_GROUP")]
    tp = tp_groups[rank // 2]
    faulty = rank == args.fault_rank
    try:
        for step in range(1, args.steps + 1):
            x = torch.full((4,), float(rank))
            if faulty and step == args.fault_step and args.scenario in ("hang", "hang_nodump"):
                log.info("step %d: about to all_reduce on the tensor-parallel group", step)
                os.kill(os.getpid(), signal.SIGSTOP)  # stopped from here on; SIGCONT's handler dumps
            dist.all_reduce(x, group=tp)
            stats = torch.tensor([float(step), 1.0, 2.0])
            if faulty and step == args.fault_step and args.scenario == "mismatch_op":
                out = [torch.zeros_like(stats) for _ in range(world)]
                dist.all_gather(out, stats)
            elif faulty and step == args.fault_step and args.scenario == "mismatch_size":
                dist.all_reduce(torch.ones(7))
            else:
                dist.all_reduce(stats)
            log.info("step %d loss %.4f", step, float(x.sum()) / (4 * world))
            time.sleep(args.step_sleep)
        log.info("training finished after %d iterations", args.steps)
        _dump(rank, "at the end of the run")
        dist.destroy_process_group()
    except BaseException as e:
        log.error("rank %d failed: %s: %s", rank, type(e).__name__, e)
        _dump(rank, "on the exception path")
        raise


# -- the recorder (starts torchrun, injects the fault from outside when needed) ---------------

def record(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "fr").mkdir(exist_ok=True)
    pid_dir = Path(f"/tmp/crashscope-fr-pids-{os.getpid()}")
    pid_dir.mkdir(exist_ok=True)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=str(out / "fr" / "nccl_trace_rank_"),
               LOGLEVEL="INFO", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    port = 29500 + os.getpid() % 2000
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "--tee", "3",
           "--master-port", str(port), __file__, "--worker", "--scenario", args.scenario,
           "--fault-rank", str(args.fault_rank), "--fault-step", str(args.fault_step), "--steps", str(args.steps),
           "--timeout", str(args.timeout), "--step-sleep", str(args.step_sleep), "--pid-dir", str(pid_dir)]
    started = dt.datetime.now(dt.timezone.utc)
    fault_time = None
    with open(out / "torchrun.log", "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=out)
        if args.scenario in ("hang", "hang_nodump"):
            fault_time = _resume_or_kill(args, out, pid_dir, proc)
        rc = proc.wait(timeout=600)
    for p in pid_dir.glob("*.pid"):
        p.unlink()
    pid_dir.rmdir()
    _write_truth(args, out, started, fault_time, rc)
    return rc


def _resume_or_kill(args: argparse.Namespace, out: Path, pid_dir: Path, proc: subprocess.Popen) -> str | None:
    """Wait until the faulty rank has stopped itself and its peers have dumped, then resume it
    (its handler dumps) or kill it (no dump)."""
    pidfile = pid_dir / f"rank{args.fault_rank}.pid"
    peers = [r for r in range(4) if r != args.fault_rank]
    deadline = time.time() + 300
    pid = None
    stopped_at = None
    while time.time() < deadline and proc.poll() is None:
        if pid is None and pidfile.exists() and pidfile.read_text().strip():
            pid = int(pidfile.read_text())
        if pid is not None and stopped_at is None:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "?"
            if state == "T":
                stopped_at = dt.datetime.now(dt.timezone.utc)
        if stopped_at is not None and all((out / "fr" / f"nccl_trace_rank_{r}").exists() for r in peers):
            time.sleep(0.5)
            os.kill(pid, signal.SIGKILL if args.scenario == "hang_nodump" else signal.SIGCONT)
            break
        time.sleep(0.05)
    return stopped_at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if stopped_at else None


def _write_truth(args: argparse.Namespace, out: Path, started: dt.datetime, fault_time: str | None, rc: int) -> None:
    import torch

    r = args.fault_rank
    if args.scenario == "clean":
        cause, culprit, what = "none", {"nodes": [], "ranks": []}, "every rank completed"
    elif args.scenario.startswith("hang"):
        cause, culprit = "node_failure", {"nodes": [], "ranks": [r]}
        what = (f"rank {r} stopped (SIGSTOP) before its tensor-parallel all_reduce of step {args.fault_step}; "
                "labelled like the lab's sigstop scenarios (a stopped, unresponsive process)")
    else:
        cause, culprit = "software_error", {"nodes": [], "ranks": [r]}
        what = (f"rank {r} calls all_gather where its peers call all_reduce at step {args.fault_step}"
                if args.scenario == "mismatch_op" else
                f"rank {r} all_reduces 7 elements where its peers reduce 3 at step {args.fault_step}")
    truth = {
        "id": out.name,
        "scenario": args.scenario,
        "launcher": "torchrun",
        "cause": cause,
        "culprit": culprit,
        "first_failure": ({"rank": r, "time": fault_time, "tolerance_s": 30, "what": what} if fault_time else
                          ({"rank": r, "what": what} if cause != "none" else None)),
        "fault": what,
        "exit_code": rc,
        "recorded_with": {"torch": torch.__version__, "python": sys.version.split()[0], "backend": "gloo"},
        "notes": "recorded by benchmarks/lab/fr_record.py; one host, 127.0.0.1, CPU gloo",
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=SCENARIOS, required=True)
    ap.add_argument("--out")
    ap.add_argument("--fault-rank", type=int, default=2)
    ap.add_argument("--fault-step", type=int, default=6)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--step-sleep", type=float, default=0.05)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--pid-dir")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.out:
        ap.error("--out is required")
    sys.exit(0 if record(args) in (0, 1) else 0)


if __name__ == "__main__":
    main()
