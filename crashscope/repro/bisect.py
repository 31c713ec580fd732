"""Isolation: the full group first, then sub-groups and pairs until a unit (a node under srun,
a rank locally) or a link between two units is named.

1. The full group at the suspect size and the sweep. ``ok`` -> cleared.
2. Halving: split the bad group in two (plan order) and run each half; a bad half becomes the
   group, until two units are left. When both halves pass but the whole failed, the fault needs
   both halves (a link between them): the pairs are drawn across them.
3. Pairs: each remaining suspect with a reference (a unit that passed in an earlier run,
   else a healthy reference of the plan, else any other unit). A bad pair whose reference passes
   with another suspect names the suspect; a bad pair of two units that both pass with a
   reference names the link. When no third unit exists (two units in all), the full run's own
   evidence (the rank that hung, exited, returned wrong data or was late) names it.

The same algorithm drives srun node groups (each unit = a node with its GPUs) and local ranks.
Verdict: ``confirmed`` (reproduced and a unit or link named), ``cleared`` (the full group
passed), ``inconclusive`` (failed but nothing could be named consistently, e.g. every run
failed, which points at the environment rather than one node).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from crashscope.repro.launch import Group, run_group
from crashscope.repro.plan import Plan

MAX_RUNS = 24


@dataclasses.dataclass
class Settings:
    launcher: str = "local"
    backend: str = "gloo"
    iters: int = 10
    warmup: int = 2
    timeout: float = 60.0
    sweep: list[float] = dataclasses.field(default_factory=lambda: [0.25, 4.0])
    inject: list[str] = dataclasses.field(default_factory=list)
    slow_factor: float = 4.0
    slow_skew: float = 0.05
    min_busbw: float | None = None  # GB/s: below is slow
    results: Path | None = None
    port: int = 0
    master_addr: str | None = None


def sweep_sizes(nbytes: int, factors: list[float]) -> list[int]:
    out = [nbytes]
    for f in factors:
        s = max(1, int(nbytes * f))
        if s not in out:
            out.append(s)
    return out


class Isolation:
    def __init__(self, plan: Plan, s: Settings, progress: Callable[[str], None] | None = None):
        self.plan, self.s = plan, s
        self.runs: list[dict[str, Any]] = []
        self.good: set[int] = set()
        self.progress = progress or (lambda _m: None)
        self.root = Path(s.results) if s.results else Path(tempfile.mkdtemp(prefix="crashscope-repro-"))

    def group(self, ids: list[int], sizes: list[int]) -> Group:
        p, s = self.plan, self.s
        return Group(op=p.op, sizes=sizes, dtype=p.dtype, unit_ids=ids, unit_names=[p.units[i] for i in ids], per_unit=p.per_unit,
                     iters=s.iters, warmup=s.warmup, timeout=s.timeout, backend=s.backend, launcher=s.launcher, inject=list(s.inject),
                     env=dict(p.nccl_env), port=s.port, slow_skew=s.slow_skew, slow_factor=s.slow_factor, master=s.master_addr)

    def run(self, ids: list[int], purpose: str, sizes: list[int] | None = None) -> dict[str, Any]:
        ids = sorted(ids)
        for r in self.runs:  # the same group twice tells nothing new
            if r["unit_ids"] == ids and (sizes is None or r["purpose"] == purpose):
                return r
        g = self.group(ids, sizes or [self.plan.bytes])
        self.progress(f"run {len(self.runs) + 1}: {purpose}: {', '.join(g.unit_names)}")
        rec = run_group(g, self.root / f"run{len(self.runs) + 1:02d}")
        rec["purpose"] = purpose
        rec["unit_ids"] = ids
        self._judge(rec)
        if rec["status"] == "ok" and len(ids) > 1:
            self.good.update(ids)
        self.runs.append(rec)
        return rec

    def _judge(self, rec: dict[str, Any]) -> None:
        """ok runs can still be slow: below --min-busbw, or slow_factor below the best busbw seen."""
        if rec["status"] != "ok" or rec.get("busbw") is None or rec["nranks"] < 2:
            return
        best = max((r["busbw"] for r in self.runs if r.get("busbw") and r["status"] == "ok" and r["bytes"] == rec["bytes"]), default=None)
        why = None
        if self.s.min_busbw is not None and rec["busbw"] < self.s.min_busbw:
            why = f"busbw {rec['busbw']:.3g} GB/s below --min-busbw {self.s.min_busbw:g}"
        elif best and rec["busbw"] * self.s.slow_factor < best:
            why = f"busbw {rec['busbw']:.3g} GB/s, {best / rec['busbw']:.1f}x below the best group's {best:.3g}"
        if why:
            rec["status"] = "slow"
            rec["error"] = why

    def blamed(self, rec: dict[str, Any]) -> list[str]:
        """The units a failed run itself points at (stuck, exited, wrong data, late)."""
        out: list[str] = []
        for k in ("stuck", "exited", "invalid", "late"):
            out += [u for u in rec.get(k) or [] if u not in out]
        if not out and rec["status"] == "error":
            out = [u for u in rec.get("errored") or []]
        return out

    def reference_for(self, u: int, exclude: set[int]) -> list[int]:
        names = self.plan.units
        refs = [i for i in sorted(self.good) if i != u and i not in exclude]
        refs += [i for i, n in enumerate(names) if n in self.plan.reference_units and i != u and i not in exclude and i not in refs]
        refs += [i for i in range(len(names)) if i != u and i not in exclude and i not in refs]
        return refs

    def investigate(self) -> dict[str, Any]:
        t0 = time.monotonic()
        p = self.plan
        all_ids = list(range(len(p.units)))
        full = self.run(all_ids, "full group", sweep_sizes(p.bytes, self.s.sweep))
        bad_units: list[str] = []
        bad_links: list[list[str]] = []
        if full["status"] == "ok":
            return self._verdict("cleared", [], [], full, time.monotonic() - t0)
        hinted = [p.units.index(u) for u in self.blamed(full) if u in p.units]
        group = all_ids
        cross: tuple[list[int], list[int]] | None = None
        while len(group) > 2 and len(self.runs) < MAX_RUNS:
            half = len(group) // 2
            # keep the units the full run blamed together in the first half tried
            order = sorted(group, key=lambda i: (i not in hinted, i)) if hinted else group
            a, b = sorted(order[:half]), sorted(order[half:])
            if self.bad(self.run(a, "half")):
                group = a
                continue
            if self.bad(self.run(b, "half")):
                group = b
                continue
            cross = (a, b)
            break
        if cross is None:
            suspects = sorted(group, key=lambda i: (i not in hinted, p.units[i] not in p.implicated_units, i))
            pairs_with: dict[int, bool] = {}
            for u in suspects:
                for ref in self.reference_for(u, set(group)):
                    rec = self.run([u, ref], "pair")
                    if not self.bad(rec):
                        pairs_with[u] = False
                        break
                    if self._ref_passes(ref, u):
                        pairs_with[u] = True
                        break
                    # the reference itself fails: try another
                    if len(self.runs) >= MAX_RUNS:
                        break
            bad_units = [p.units[u] for u, b in pairs_with.items() if b]
            if not bad_units and len(group) == 2 and all(pairs_with.get(u) is False for u in group):
                bad_links.append([p.units[group[0]], p.units[group[1]]])
            if not pairs_with and len(group) <= 2 and len(p.units) <= 2:
                bad_units = [p.units[i] for i in hinted]  # no third unit: the full run's own evidence
        else:
            a, b = cross
            for u in a:
                for v in b:
                    if len(self.runs) >= MAX_RUNS:
                        break
                    if self.bad(self.run([u, v], "pair across halves")):
                        bad_links.append([p.units[u], p.units[v]])
        if bad_units or bad_links:
            if bad_units and len(bad_units) == len(p.units):
                return self._verdict("inconclusive", [], [], full, time.monotonic() - t0, why="every unit fails: the environment, not one unit")
            return self._verdict("confirmed", bad_units, bad_links, full, time.monotonic() - t0)
        return self._verdict("inconclusive", [], [], full, time.monotonic() - t0,
                             why="the full group failed but no smaller group did the same")

    @staticmethod
    def bad(rec: dict[str, Any]) -> bool:
        return rec["status"] != "ok"

    def _ref_passes(self, ref: int, not_with: int) -> bool:
        """Whether ``ref`` passed some run without ``not_with`` (else run it with another unit)."""
        if any(r["status"] == "ok" and ref in r["unit_ids"] and not_with not in r["unit_ids"] and len(r["unit_ids"]) > 1 for r in self.runs):
            return True
        for other in self.reference_for(ref, {not_with}):
            return not self.bad(self.run([ref, other], "reference check"))
        return False

    def _verdict(self, verdict: str, units: list[str], links: list[list[str]], full: dict[str, Any], seconds: float,
                 why: str | None = None) -> dict[str, Any]:
        p = self.plan
        ranks: list[int] = []
        for u in units:
            ranks += p.ranks_of(u)
        nodes = units if p.unit_kind == "node" else []
        per_unit = {}
        for i, u in enumerate(p.units):
            if u in units:
                per_unit[u] = "bad"
            elif any(r["status"] == "ok" and i in r["unit_ids"] for r in self.runs):
                per_unit[u] = "ok"
            else:
                per_unit[u] = "untested"
        out: dict[str, Any] = {
            "verdict": verdict,
            "implicated": {"nodes": nodes, "ranks": sorted(ranks)},
            "links": [{"between": l, "status": "bad"} for l in links],
            "units": per_unit,
            "unit_kind": p.unit_kind,
            "runs": [_public(r) for r in self.runs],
            "seconds": round(seconds, 3),
            "results_dir": str(self.root),
        }
        if why:
            out["reason"] = why
        return out


def _public(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("purpose", "op", "bytes", "dtype", "backend", "units", "ranks", "nranks", "time", "algbw", "busbw", "status", "error",
            "stuck", "exited", "errored", "late", "invalid", "sizes", "wall_s")
    return {k: r.get(k) for k in keep}
