"""Where each simulated line goes: topology (hosts, ranks, PCI ids) and file layouts.

Logical streams (what a process prints) are routed to files by the layout:

* ``slurm_out``      one ``slurm-{job}.out``: torchrun per node under ``srun -l``, so worker
                     lines read ``{task}: [default{lr}]:...`` and agent lines ``{task}: ...``.
* ``per_rank``       ``logs/rank{r}.log`` per rank, ``logs/torchrun.{host}.log`` per agent.
* ``nccl_debug_file`` as ``per_rank`` but NCCL lines go to ``nccl/nccl.{host}.{pid}.log``
                     (``NCCL_DEBUG_FILE=nccl.%h.%p.log``).
* ``per_node``       ``{host}/train.log`` per node (torchrun ``[default{lr}]:`` prefixes) and
                     the node's system files in the same ``{host}/`` directory.

The batch output ``slurm-{job}.out`` (srun and slurmstepd lines) and ``slurm/`` (sacct,
slurmctld.log) exist in every layout.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Callable

LAYOUTS = ("slurm_out", "per_rank", "nccl_debug_file", "per_node")

# 8-GPU HGX baseboard bus ids, one per GPU slot, and a NIC next to each GPU.
GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
NIC_BUSES = ("17", "29", "39", "5c", "99", "aa", "b9", "da")


def gpu_bus(slot: int) -> str:
    return GPU_BUSES[slot % 8] if slot < 8 else f"{(0x18 + slot * 0x11) % 0xff:02x}"


def pci_full(slot: int) -> str:
    return f"0000:{gpu_bus(slot)}:00.0"


def pci_xid(slot: int) -> str:
    return f"0000:{gpu_bus(slot)}:00"


def pci_smi(slot: int) -> str:
    return f"00000000:{gpu_bus(slot).upper()}:00.0"


def nic_pci(slot: int) -> str:
    return f"0000:{NIC_BUSES[slot % 8]}:00.0"


@dataclass
class Rec:
    t: float
    seq: int
    text: str | Callable[[], str]
    n: int = 1  # number of lines in text
    tag: dict | None = None  # evidence item to locate once written
    node: int | None = None  # the node that printed it (its death drops later records)


@dataclass
class Router:
    layout: str
    job_id: str
    hosts: list[str]
    gpus_per_node: int
    pids: dict[int, int] = field(default_factory=dict)

    def node_dir(self, n: int) -> str:
        return self.hosts[n] if self.layout == "per_node" else f"nodes/{self.hosts[n]}"

    def slurm_out(self) -> str:
        return f"slurm-{self.job_id}.out"

    def route(self, stream: tuple) -> tuple[str, str]:
        """(path, prefix) for a logical stream."""
        kind = stream[0]
        lay = self.layout
        width = len(str(len(self.hosts) - 1))
        if kind in ("rank", "nccl"):
            r = stream[1]
            n, lr = divmod(r, self.gpus_per_node)
            if lay == "slurm_out":
                return self.slurm_out(), f"{n:>{width}}: [default{lr}]:"
            if lay == "per_node":
                return f"{self.hosts[n]}/train.log", f"[default{lr}]:"
            if lay == "nccl_debug_file" and kind == "nccl":
                return f"nccl/nccl.{self.hosts[n]}.{self.pids[r]}.log", ""
            return f"logs/rank{r}.log", ""
        if kind == "agent":
            n = stream[1]
            if lay == "slurm_out":
                return self.slurm_out(), f"{n:>{width}}: "
            if lay == "per_node":
                return f"{self.hosts[n]}/train.log", ""
            return f"logs/torchrun.{self.hosts[n]}.log", ""
        if kind == "slurm":
            return self.slurm_out(), ""
        if kind == "ctld":
            return "slurm/slurmctld.log", ""
        if kind == "file":
            return stream[1], ""
        if kind == "node":  # a node-local file: ("node", n, name)
            return f"{self.node_dir(stream[1])}/{stream[2]}", ""
        raise ValueError(stream)

    def owner(self, path: str) -> int | None:
        """Node index whose death cuts this file, or None for shared files.

        The host is read out of the path and looked up (``host_index``): a scan of every
        host per file made writing a 2,048-node job quadratic (``{h}/``, ``nodes/{h}/``,
        ``nccl/nccl.{h}.``, ``logs/torchrun.{h}.log``; the first host in order wins, as
        before, should two of them match one path)."""
        index = self.host_index
        found: list[int] = []
        head, sep, rest = path.partition("/")
        if sep:
            if head in index:  # {h}/...
                found.append(index[head])
            if head == "nodes":  # nodes/{h}/...
                h, sep2, _ = rest.partition("/")
                if sep2 and h in index:
                    found.append(index[h])
        if path.startswith("nccl/nccl."):  # nccl/nccl.{h}.{pid}.log: any prefix of the rest ending before a dot
            rest = path[len("nccl/nccl."):]
            dot = rest.find(".")
            while dot >= 0:
                if rest[:dot] in index:
                    found.append(index[rest[:dot]])
                dot = rest.find(".", dot + 1)
        if path.startswith("logs/torchrun.") and path.endswith(".log"):
            h = path[len("logs/torchrun."):-4]
            if h in index:
                found.append(index[h])
        if found:
            return min(found)
        if path.startswith("logs/rank"):
            r = int(path[len("logs/rank"):-4])
            return r // self.gpus_per_node
        return None

    @functools.cached_property
    def host_index(self) -> dict[str, int]:
        """Host name -> node index (the first one, should a name repeat)."""
        index: dict[str, int] = {}
        for n, h in enumerate(self.hosts):
            index.setdefault(h, n)
        return index


class Sink:
    """Collects records per stream, then writes every file in large buffered blocks."""

    def __init__(self, router: Router):
        self.router = router
        self.files: dict[str, list[Rec]] = {}
        self.seq = 0
        self.cutoff: dict[int, float] = {}  # node -> time after which its own files stop
        self.skip: set[str] = set()
        self.dups: list[tuple[tuple, float, int]] = []  # (stream, time, copies): repeat the first record at/after time

    def add(self, stream: tuple, t: float, text: str, n: int | None = None, tag: dict | None = None) -> None:
        path, prefix = self.router.route(stream)
        kind = stream[0]
        node = stream[1] // self.router.gpus_per_node if kind in ("rank", "nccl") else (stream[1] if kind in ("agent", "node") else None)
        self.seq += 1
        if callable(text):  # a large block built only when its file is written (keeps memory flat);
            make = text    # it returns a list of pieces that are written one after the other
            text = (lambda: [prefix + "".join(make()).replace("\n", "\n" + prefix)]) if prefix else make
        elif prefix:
            text = prefix + text.replace("\n", "\n" + prefix)
        self.files.setdefault(path, []).append(Rec(t, self.seq, text, n if n is not None else text.count("\n") + 1, tag, node))

    def touch(self, stream: tuple) -> None:
        """Make sure a stream's file exists (stdout redirection creates it even if nothing is printed)."""
        path, _ = self.router.route(stream)
        self.files.setdefault(path, [])

    def lines(self, stream: tuple, t: float, lines: list[str], tag: dict | None = None) -> None:
        self.add(stream, t, "\n".join(lines), len(lines), tag)

    def static(self, path: str, content: str) -> None:
        self.seq += 1
        self.files.setdefault(path, []).append(Rec(0.0, self.seq, content.rstrip("\n"), content.count("\n")))

    def write(self, out: str) -> list[dict]:
        """Write every file; return the tagged evidence items with file/line/text filled in."""
        found = []
        for path in sorted(self.files):
            if path in self.skip:
                continue
            recs = self.files[path]
            recs.sort(key=lambda r: (r.t, r.seq))
            for stream, tdup, copies in self.dups:
                if self.router.route(stream)[0] == path:
                    i = next((i for i, r in enumerate(recs) if r.t >= tdup and r.tag is None), None)
                    if i is not None:
                        recs[i + 1:i + 1] = [Rec(recs[i].t, recs[i].seq, recs[i].text, recs[i].n, None, recs[i].node) for _ in range(copies)]
            if self.cutoff:
                recs = [r for r in recs if r.node is None or r.t <= self.cutoff.get(r.node, r.t)]
            owner = self.router.owner(path)
            cut = self.cutoff.get(owner) if owner is not None else None
            process_log = path.startswith(("logs/", "nccl/")) or path.endswith("train.log")
            full = os.path.join(out, path)
            os.makedirs(os.path.dirname(full) or out, exist_ok=True)
            line = 1
            chunks: list[str] = []
            size = 0
            with open(full, "w", encoding="utf-8", newline="\n", buffering=1 << 20) as fh:
                for i, r in enumerate(recs):
                    if r.tag is not None:
                        off = r.tag.pop("_offset", 0)
                        first = r.text.split("\n")[off] if off else r.text.split("\n", 1)[0]
                        r.tag.update(file=path, line=line + off, text=first)
                        if not r.tag.get("message"):
                            r.tag["message"] = first
                        found.append(r.tag)
                    if callable(r.text):
                        fh.write("".join(chunks))
                        chunks.clear()
                        size = 0
                        for piece in r.text():
                            fh.write(piece)
                        fh.write("\n")
                        line += r.n
                        continue
                    text = r.text
                    if cut is not None and process_log and i == len(recs) - 1 and r.n == 1 and len(text) > 20:
                        chunks.append(text[: len(text) // 2])  # the host died mid-write
                    else:
                        chunks.append(text)
                        chunks.append("\n")
                    size += len(text)
                    line += r.n
                    if size > (4 << 20):
                        fh.write("".join(chunks))
                        chunks.clear()
                        size = 0
                fh.write("".join(chunks))
        return found
