#!/usr/bin/env python3
"""Check that each recording in fixtures/recorded/ is complete and that its fault really happened.

    python benchmarks/lab/check.py [DIR]      # exit 1 if any recording fails a check

Looks only at the recorded files (not at crashscope): required files present, truth.json well formed,
and per scenario the evidence that the injected fault took effect (e.g. the SIGSTOPped rank's log
ends in a progress line while its peers log timeouts; the OOM kill is in dmesg; the preempted job's
final JobState is PREEMPTED).
"""
import json
import re
import sys
from pathlib import Path

CAUSES = {"fabric_timeout", "storage_stall", "driver_drift", "preemption", "gpu_throttle", "gpu_hardware",
          "node_failure", "oom", "software_error", "time_limit", "unknown", "none"}
REQUIRED = ["truth.json", "job.sh", "sacct.txt", "sacct.json", "scontrol_show_job.txt", "ckpt_listing.txt",
            "slurm/slurmctld.log", "slurm/slurmd.n1.log", "slurm/slurmd.n2.log"]
ERR = " failed: "
PROG = re.compile(r"iteration\s+\d+/|step \d+ loss|\{'loss'")


def stamp(line):
    m = re.match(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})", line)
    if not m:
        return None
    y, mo, d, h, mi, se, ms = map(int, m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + se + ms / 1000


def check(d: Path) -> list[str]:
    bad = [f"missing {f}" for f in REQUIRED if not (d / f).is_file()]
    if bad:
        return bad
    t = json.loads((d / "truth.json").read_text())
    if t.get("program") == "train_other.py":
        return check_other(d, t)
    world = int(t.get("world_size") or 4)  # round 4 varies it (run.py world=3, 6)
    bad = [f"missing logs/rank{r}.log" for r in range(world) if not (d / f"logs/rank{r}.log").is_file()]
    if bad:
        return bad
    out = list(glob_one(d, "slurm-*.out", bad))
    if not out:
        return bad
    so = out[0].read_text(errors="replace")
    logs = {r: (d / f"logs/rank{r}.log").read_text(errors="replace") for r in range(world)}
    scon = (d / "scontrol_show_job.txt").read_text()
    state = re.search(r"JobState=(\S+)", scon)
    state = state.group(1) if state else None
    if t["cause"] not in CAUSES:
        bad.append(f"cause {t['cause']} not in taxonomy")
    if t["job_id"] not in (d / "sacct.txt").read_text():
        bad.append("job id not in sacct.txt")
    if json.loads((d / "sacct.json").read_text())["jobs"][0]["job_id"] != int(t["job_id"]):
        bad.append("sacct.json is about another job")
    if not (d / "slurm/slurmctld.log").read_text().strip():
        bad.append("no slurmctld lines in the window")
    k, ranks = t["scenario"], t["culprit"]["ranks"]
    peers = [r for r in range(world) if r not in ranks]
    ff = t["first_failure"]
    if k != "completed" and not (ff and ff.get("time")):
        bad.append("first_failure.time missing")
    if ranks and ff and ff["rank"] not in ranks:
        bad.append("first_failure.rank is not a culprit")
    for r in ranks:
        node = re.search(r"started pid=\d+ node=(\S+)", logs[r])
        if not node or node.group(1) not in t["culprit"]["nodes"]:
            bad.append(f"rank {r} did not run on the culprit node")

    def peers_failed():
        if not all(ERR in logs[r] for r in peers):
            bad.append("not every peer logged a failure")

    if k == "sigstop":
        peers_failed()
        if ERR in logs[ranks[0]]:
            bad.append("the stopped rank logged an error (it should have stayed stopped)")
    elif k == "sigstop_late_cont":
        peers_failed()
        if ERR not in logs[ranks[0]]:
            bad.append("the resumed rank never logged its error")
    elif k == "nodekill":
        if not re.search(r"task[s]? [\d\-,]+: Killed", so):
            bad.append("srun never reported a Killed task")
        if any(ERR in logs[r] for r in ranks):
            bad.append("a killed rank logged an error")
    elif k == "iptables":
        peers_failed()
        if "iptables DROP" not in (t["fault"] or "") or re.search(r"on the 0 TCP ports", t["fault"]):
            bad.append("no ports were dropped")
    elif k == "ckpt_fifo":
        if not re.search(r"^p\S+ .*model_optim_rng\.pt$", (d / "ckpt_listing.txt").read_text(), re.M):
            bad.append("no FIFO in the checkpoint listing")
        it = int(re.search(r"iter_(\d{7})", t["fault"]).group(1))
        if not re.search(r"saving checkpoint at iteration %d\b" % it, logs[0]):
            bad.append("rank 0 never began the blocked save")
        if re.search(r"successfully saved checkpoint at iteration %d\b" % it, logs[0]):
            bad.append("the blocked save finished")
        peers_failed()
    elif k == "oom" and "prlimit" in (t["fault"] or ""):
        if "DefaultCPUAllocator: can't allocate memory" not in logs[ranks[0]]:
            bad.append("the address-space-limited rank logged no allocation failure")
    elif k == "oom":
        dm = (d / "dmesg.txt").read_text() if (d / "dmesg.txt").exists() else ""
        pid = re.search(r"started pid=(\d+)", logs[ranks[0]]).group(1)
        if not re.search(r"Killed process %s\b" % pid, dm):
            bad.append("no OOM kill of the culprit's pid in dmesg")
    elif k == "cpu_starve":
        if "hard" in t["id"]:
            # either the peers timed out, or (recorded honestly in notes) the job crawled on until the lab
            # cancelled it
            if "lab ran scancel" not in t["notes"]:
                peers_failed()
        elif state != "COMPLETED":
            bad.append(f"mild starvation should complete, got {state}")
        # the culprit's gaps between progress lines: after the throttle at least twice the median before
        times = [tm for ln in logs[ranks[0]].splitlines() if PROG.search(ln) and (tm := stamp(ln))]
        # the job's end closes the last gap (a frozen rank logs nothing more after the throttle)
        end = t["window"]["end"]
        if "hard" in t["id"]:
            times.append(stamp(end[:10] + " " + end[11:19] + "," + end[20:23]))
        gaps = [b - a for a, b in zip(times, times[1:])]
        at = int(re.search(r"after iteration (\d+)", t["fault"]).group(1))
        before, after = sorted(gaps[2:at - 1]), gaps[at - 1:]
        if not before or not after or max(after) < 2 * before[len(before) // 2]:
            bad.append("steps did not slow down after throttling")
    elif k == "scancel":
        if state != "CANCELLED":
            bad.append(f"JobState {state}, expected CANCELLED")
    elif k == "scancel_step":
        if not re.search(r"\*\*\* STEP %s\.0 ON \S+ CANCELLED AT" % t["job_id"], so):
            bad.append("no STEP cancel banner of the job's step")
    elif k == "preempt_cancel":
        if state != "PREEMPTED":
            bad.append(f"JobState {state}, expected PREEMPTED")
    elif k == "preempt_requeue":
        if int(t.get("restarts") or 0) < 1:
            bad.append("job was not requeued")
    elif k == "timelimit":
        if state != "TIMEOUT":
            bad.append(f"JobState {state}, expected TIMEOUT")
        if "throttled" in (t["fault"] or "") and "a checkpoint write was in flight" not in t["notes"]:
            bad.append("no checkpoint write was in flight at the time limit")
    elif k == "exception":
        if "ValueError: Expected input batch_size" not in logs[ranks[0]]:
            bad.append("the culprit's ValueError is not in its log")
    elif k in ("shape", "collmismatch"):
        if ERR not in logs[ranks[0]]:
            bad.append("the culprit logged no error")
    elif k == "completed":
        if state != "COMPLETED" or not all("training finished" in logs[r] for r in range(world)):
            bad.append("did not complete on every rank")
    return bad


def check_other(d: Path, t: dict) -> list[str]:
    """Round 9's program (train_other.py): no rank logs, only rank 0 prints; a rank's own words are its
    per-task output file (srun -o slurm-%j-%t.out) or the lines torch's excepthook prefixed `[rankN]:`."""
    bad: list[str] = []
    outs = sorted(d.glob("slurm-*.out"))
    if not outs:
        return ["missing slurm-*.out"]
    so = "".join(p.read_text(errors="replace") for p in outs)
    world = int(t.get("world_size") or 4)

    def words(r: int) -> str:
        own = d / f"slurm-{t['job_id']}-{r}.out"
        text = own.read_text(errors="replace") if own.is_file() and "per task" in t.get("output", "") \
            and t["launcher"] == "srun" else ""
        return text + "".join(ln + "\n" for ln in so.splitlines() if ln.startswith(f"[rank{r}]:"))

    def died_of_exception(r: int) -> bool:
        return "Traceback (most recent call last)" in words(r)

    state = re.search(r"JobState=(\S+)", (d / "scontrol_show_job.txt").read_text())
    state = state.group(1) if state else None
    k, ranks = t["scenario"], t["culprit"]["ranks"]
    peers = [r for r in range(world) if r not in ranks]
    ff = t["first_failure"]
    if t["cause"] not in CAUSES:
        bad.append(f"cause {t['cause']} not in taxonomy")
    if k != "completed" and not (ff and ff.get("time")):
        bad.append("first_failure.time missing")
    if ranks and ff and ff["rank"] not in ranks:
        bad.append("first_failure.rank is not a culprit")
    for r in ranks:
        if t["rank_layout"].get(str(r)) not in t["culprit"]["nodes"]:
            bad.append(f"rank {r} did not run on the culprit node")
    if k in ("sigstop", "iptables", "ckpt_fifo") and not all(died_of_exception(r) for r in peers):
        bad.append("not every peer died of an exception")
    if k == "sigstop" and died_of_exception(ranks[0]):
        bad.append("the stopped rank raised (it should have stayed stopped)")
    elif k == "nodekill" and any(died_of_exception(r) for r in ranks):
        bad.append("a killed rank raised")
    elif k == "iptables" and ("iptables DROP" not in (t["fault"] or "") or "on the 0 TCP ports" in t["fault"]):
        bad.append("no ports were dropped")
    elif k == "ckpt_fifo":
        if not re.search(r"^p\S+ .*out/ckpt\.pt$", (d / "ckpt_listing.txt").read_text(), re.M):
            bad.append("no FIFO in the checkpoint listing")
        if "saving checkpoint to out" not in so:
            bad.append("rank 0 never began the blocked save")
    elif k == "oom" and "prlimit" in (t["fault"] or ""):
        if "can't allocate memory" not in words(ranks[0]):
            bad.append("the address-space-limited rank reported no allocation failure")
    elif k == "oom":
        dm = (d / "dmesg.txt").read_text() if (d / "dmesg.txt").exists() else ""
        pid = re.search(r"\(pid (\d+)\)", t["fault"]).group(1)
        if not re.search(r"Killed process %s\b" % pid, dm):
            bad.append("no OOM kill of the culprit's pid in dmesg")
    elif k in ("scancel", "timelimit", "completed"):
        want = {"scancel": "CANCELLED", "timelimit": "TIMEOUT", "completed": "COMPLETED"}[k]
        if state != want:
            bad.append(f"JobState {state}, expected {want}")
        if k == "completed" and "Traceback" in so:
            bad.append("a completed run printed a traceback")
    elif k == "exception" and "IndexError: index out of range in self" not in words(ranks[0]):
        bad.append("the culprit's IndexError is not in its output")
    return bad


def glob_one(d, pat, bad):
    got = sorted(d.glob(pat))
    if not got:
        bad.append(f"missing {pat}")
    return got


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "fixtures" / "recorded")
    fails = 0
    for d in sorted(p.parent for p in root.glob("*/truth.json")):
        bad = check(d)
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        t = json.loads((d / "truth.json").read_text())
        print(f"{'ok  ' if not bad else 'FAIL'} {d.name:36s} {t.get('job_state') or '-':10s} {size / 1024:6.0f} KiB"
              + (f"  {'; '.join(bad)}" if bad else ""))
        fails += bool(bad)
    print(f"{fails} of {len(list(root.glob('*/truth.json')))} recordings failed a check")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
