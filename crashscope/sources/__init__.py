"""The registry of input sources. Adding a source: one module here and one line below."""

from __future__ import annotations

import fnmatch

from crashscope.sources import gpu_csv, kernel, nccl, nvidia_smi, pytorch, sacct, slurm, torchelastic, versions
from crashscope.sources import catalog
from crashscope.sources import applog
from crashscope.sources import flight_recorder
from crashscope.sources import dcgm
from crashscope.sources import envdump
from crashscope.sources import nsys
from crashscope.sources import apt_history
from crashscope.sources import nccl_ras
from crashscope.sources.base import FileSource, LineSource, Source

SOURCES: tuple[Source, ...] = (
    nccl.SOURCE,
    pytorch.SOURCE,
    torchelastic.SOURCE,
    slurm.SOURCE,
    sacct.SOURCE,
    kernel.SOURCE,
    nvidia_smi.SOURCE,
    gpu_csv.SOURCE,
    versions.SOURCE,
    catalog.SOURCE,
    applog.SOURCE,
    flight_recorder.SOURCE,
    dcgm.SOURCE,
    envdump.SOURCE,
    nsys.SOURCE,
    apt_history.SOURCE,
    nccl_ras.SOURCE,
)

LINE_SOURCES: tuple[LineSource, ...] = tuple(s for s in SOURCES if isinstance(s, LineSource))

# Name hints only break ties and lift weak content scores; content decides.
NAME_HINT_BONUS = 0.05


def get_source(name: str) -> Source:
    for s in SOURCES:
        if s.name == name:
            return s
    raise KeyError(f"unknown source {name!r}; known: {', '.join(s.name for s in SOURCES)}")


def sniff_scores(head: str, name: str) -> list[tuple[float, Source]]:
    """Every source's confidence for a file, best first. A source that raises scores 0."""
    scores = []
    for s in SOURCES:
        try:
            score = float(s.sniff(head, name))
        except Exception:  # a buggy sniffer must not stop the ingest
            score = 0.0
        if score > 0 and any(fnmatch.fnmatch(name, g) for g in s.filename_hints):
            score = min(1.0, score + NAME_HINT_BONUS)
        scores.append((max(0.0, min(1.0, score)), s))
    scores.sort(key=lambda p: -p[0])
    return scores


__all__ = ["SOURCES", "LINE_SOURCES", "FileSource", "LineSource", "Source", "get_source", "sniff_scores"]
