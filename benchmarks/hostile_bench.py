"""Hostile-input benchmark: time and peak RSS of ``crashscope analyze`` on the large cases
of issue 7 ("Tried with hostile inputs").

Cases (generated under --out, never inside the repository; kept for --reuse):

* ``longhost``: 50 MB of NCCL WARN lines whose host names are 50 KB each, every one distinct;
* ``warn100`` / ``warn400``: one NCCL WARN line (a flapping link) repeated to 100 / 400 MB;
* ``zstbomb``: a ~1 MB ``.zst`` of that WARN line expanding to 10 GB (--bomb-gb);
* ``growing``: a log whose sparse tail a background process keeps extending with
  ``truncate`` while crashscope reads it (the extender is stopped, by its pid, afterwards).

Each run is a subprocess ``python -m crashscope analyze DIR --format json``; its peak RSS
comes from ``os.wait4`` (the kernel's ru_maxrss of that child). A watchdog kills a run that
passes --timeout seconds or --rss-cap-mb of RSS (so a regression cannot take the machine
down); such a run is reported as ``killed``.

Usage:
    python benchmarks/hostile_bench.py                       # every case
    python benchmarks/hostile_bench.py --cases warn100 growing
    python benchmarks/hostile_bench.py --impl /tmp/old-tree  # measure another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# Real NCCL WARN line shape (NVIDIA/nccl src/transport/net_ib.cc, async thread; as in
# tests/golden/nccl/*): what a flapping IB port leaves in every rank's log.
WARN = b"node003:7002:7170 [1] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n"
CASES = ("longhost", "warn100", "warn400", "zstbomb", "growing")
MB = 1024 * 1024


def _repeat_file(path: Path, line: bytes, size: int) -> None:
    chunk = line * max(1, (4 * MB) // len(line))
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(chunk)
            written += len(chunk)


def gen_longhost(d: Path, size_mb: float = 50, host_kb: int = 50) -> None:
    d.mkdir(parents=True, exist_ok=True)
    target = int(size_mb * MB)
    with open(d / "rank0.log", "wb") as fh:
        i = written = 0
        while written < target:
            host = (f"n{i:08d}" + "x" * (host_kb * 1024)).encode()
            line = host + b":%d:%d [0] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n" % (1000 + i, 2000 + i)
            fh.write(line)
            written += len(line)
            i += 1


def gen_warn(d: Path, size_mb: float) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _repeat_file(d / "rank0.log", WARN, int(size_mb * MB))


def gen_zstbomb(d: Path, gb: float) -> None:
    import zstandard

    d.mkdir(parents=True, exist_ok=True)
    chunk = WARN * ((16 * MB) // len(WARN))
    target = int(gb * 1024 * MB)
    with open(d / "rank0.log.zst", "wb") as fh:
        with zstandard.ZstdCompressor(level=19).stream_writer(fh, closefd=False) as w:
            written = 0
            while written < target:
                w.write(chunk)
                written += len(chunk)


def start_grower(d: Path) -> subprocess.Popen:
    """A log with a real WARN line whose sparse tail grows by 256 MiB every 20 ms."""
    d.mkdir(parents=True, exist_ok=True)
    p = d / "rank0.log"
    p.write_bytes(WARN * 10)
    code = (
        "import os,sys,time\n"
        f"p={str(p)!r}\n"
        "s=os.path.getsize(p)\n"
        "while s < (1<<40):\n"
        "    s += 256<<20; os.truncate(p, s); time.sleep(0.02)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_analyze(d: Path, impl: Path | None, timeout: float, rss_cap_mb: float) -> dict[str, object]:
    env = dict(os.environ)
    cwd = None
    if impl is not None:
        env["PYTHONPATH"] = str(impl)
        cwd = str(impl)
    cmd = [sys.executable, "-m", "crashscope", "analyze", str(d), "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    killed = None
    # Drain pipes in threads so a chatty child cannot block.
    import threading

    out: dict[str, bytes] = {}

    def drain(name: str, fh) -> None:  # type: ignore[no-untyped-def]
        out[name] = fh.read()

    threads = [threading.Thread(target=drain, args=(n, f), daemon=True) for n, f in (("out", proc.stdout), ("err", proc.stderr))]
    for t in threads:
        t.start()
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        wall = time.perf_counter() - t0
        if wall > timeout:
            killed = f"timeout {timeout:.0f}s"
        elif _rss_mb(proc.pid) > rss_cap_mb:
            killed = f"RSS over {rss_cap_mb:.0f} MB"
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in threads:
        t.join(5)
    res: dict[str, object] = {"wall_s": round(wall, 2), "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "rc": proc.returncode}
    if killed:
        res["killed"] = killed
    try:
        report = json.loads(out.get("out", b"") or b"null")
        if isinstance(report, dict):
            res["cause"] = report.get("cause")
            warns = report.get("warnings") or []
            res["warnings"] = len(warns)
            res["warning_sample"] = [str(w)[:160] for w in warns[:4]]
    except ValueError:
        tail = (out.get("err", b"") or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
        res["stderr_tail"] = tail[0][:200] if tail else ""
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    ap.add_argument("--out", type=Path, default=Path("/tmp/crashscope-hostile"))
    ap.add_argument("--reuse", action="store_true", help="keep already generated inputs")
    ap.add_argument("--impl", type=Path, default=None, help="run crashscope from this source tree (PYTHONPATH)")
    ap.add_argument("--timeout", type=float, default=200.0, help="kill a run after this many seconds")
    ap.add_argument("--rss-cap-mb", type=float, default=4096.0, help="kill a run past this RSS")
    ap.add_argument("--bomb-gb", type=float, default=10.0, help="what the zstd bomb expands to")
    args = ap.parse_args(argv)
    results = {}
    for case in args.cases:
        d = args.out / case
        grower = None
        if case == "growing":
            import shutil

            shutil.rmtree(d, ignore_errors=True)
            grower = start_grower(d)
            time.sleep(0.2)
        elif not (args.reuse and d.exists()):
            import shutil

            shutil.rmtree(d, ignore_errors=True)
            t0 = time.perf_counter()
            if case == "longhost":
                gen_longhost(d)
            elif case == "warn100":
                gen_warn(d, 100)
            elif case == "warn400":
                gen_warn(d, 400)
            elif case == "zstbomb":
                gen_zstbomb(d, args.bomb_gb)
            print(f"generated {case} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        try:
            res = run_analyze(d, args.impl, args.timeout, args.rss_cap_mb)
        finally:
            if grower is not None:
                grower.kill()
                grower.wait()
        res["input_bytes"] = sum(f.stat().st_blocks * 512 for f in d.iterdir())
        if case == "growing":
            # sparse: its apparent size is what the reader faced, not its disk use
            res["apparent_bytes_at_end"] = sum(f.stat().st_size for f in d.iterdir())
            import shutil

            shutil.rmtree(d, ignore_errors=True)
        results[case] = res
        print(json.dumps({case: res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
