"""Cross-rank analyses: what no single log line says, only the job as a whole.

Rules (``rules/``) judge events; an analysis judges the absence or the shape of events
across ranks and hosts (a rank that fell silent while its peers timed out waiting for it,
a node whose ranks all stopped at once). Each analysis is a function
``(events, ctx) -> list[Finding]`` over the aligned timeline's events; its findings are
weighed by the verdict exactly like rule findings.
"""

from __future__ import annotations

import logging
from typing import Callable

import polars as pl

from crashscope.analyses import progress, silence
from crashscope.analyses import collectives
from crashscope.analyses import stragglers
from crashscope.analyses import checkpoint_io, nccl_env
from crashscope.analyses import lone_network
from crashscope.engine.model import Finding

log = logging.getLogger(__name__)

Analysis = Callable[[pl.DataFrame, int | None], list[Finding]]

ANALYSES: dict[str, Analysis] = {
    "silent-ranks": silence.silent_ranks,
    "first-killed": silence.first_killed,
    "silent-agent": silence.silent_agent,
    "step-cancelled": silence.step_cancelled,
    "throughput-collapse": progress.throughput_collapse,
    "fr-collectives": collectives.flight_recorder,
    "watchdog-stuck-outside": collectives.watchdog_stuck_outside,
    "tb-op-mismatch": collectives.traceback_op_mismatch,
    "nsys-never-launched": collectives.trace_never_launched,
    "stragglers": stragglers.stragglers,
    "nccl-env": nccl_env.nccl_env,
    "checkpoint-io": checkpoint_io.checkpoint_io,
    "lone-network-reset": lone_network.lone_network_reset,
}


def run_analyses(events: pl.DataFrame, world: int | None) -> tuple[list[Finding], list[str]]:
    """Every analysis over ``events``; a failing one costs a warning, never the report."""
    findings: list[Finding] = []
    warnings: list[str] = []
    for name, fn in ANALYSES.items():
        try:
            findings.extend(fn(events, world))
        except Exception as exc:  # noqa: BLE001 - an analysis bug must not cost the verdict
            log.exception("analysis %s failed", name)
            warnings.append(f"analysis {name} failed ({type(exc).__name__}: {exc})")
    return findings, warnings
