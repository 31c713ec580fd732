"""`crashscope repro`: re-run the suspect collective on the implicated nodes and isolate the
bad node or link (see ``docs/repro.md``).

This package is split so that only the worker imports torch:

* :mod:`crashscope.repro.plan`: what to run (from a report, a job directory or the command line);
* :mod:`crashscope.repro.launch`: the exact argv per launcher (local processes, torchrun, srun),
  running a group with a watchdog that kills the workers' process groups;
* :mod:`crashscope.repro.bisect`: the full run, then sub-group and pairwise runs until a node
  or link is named, and the verdict;
* :mod:`crashscope.repro.worker` (``python -m crashscope.repro.worker``): the torch.distributed
  program, the only module that imports torch.

Bus bandwidth factors are those of nccl-tests, ``doc/PERFORMANCE.md`` (NVIDIA/nccl-tests):
``busbw = algbw * factor`` with AllReduce ``2(n-1)/n``; ReduceScatter, AllGather and AlltoAll
``(n-1)/n``; Broadcast and Reduce ``1``. ``S`` (the size a run reports) is the size in bytes of
the whole array, which for AllGather and ReduceScatter is ``count_per_rank * sizeof(dtype) * n``.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'crashscope[repro]'"

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")

# name -> bytes per element (the names torch uses, plus the short forms people type)
DTYPES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2,
    "float16": 2, "fp16": 2, "half": 2,
    "float64": 8, "fp64": 8, "double": 8,
    "int32": 4, "int64": 8, "int8": 1, "uint8": 1,
}
CANONICAL_DTYPE = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                   "fp64": "float64", "double": "float64"}

# c10d OpType names (WorkNCCL(..., OpType=X, ...)) -> the op the worker re-runs.
OPTYPE_TO_OP: dict[str, str] = {
    "ALLREDUCE": "all_reduce", "ALLREDUCE_COALESCED": "all_reduce", "_ALLREDUCE_SPARSE": "all_reduce",
    "BARRIER": "all_reduce",  # a c10d NCCL barrier is an allreduce of one element
    "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather", "ALLGATHER_COALESCED": "all_gather",
    "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter",
    "BROADCAST": "broadcast",
    "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all",
}


def canonical_dtype(name: str) -> str:
    return CANONICAL_DTYPE.get(name, name)


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' correction factor from algorithm to bus bandwidth for ``n`` ranks."""
    if n <= 0:
        raise ValueError("n must be positive")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown op {op!r}")


def bandwidths(op: str, n: int, size_bytes: int, seconds: float) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (1e9 bytes, as nccl-tests prints) for ``size_bytes`` in ``seconds``."""
    if seconds <= 0:
        return None, None
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * busbw_factor(op, n)


def torch_available() -> bool:
    """Whether torch can be imported, without importing it (a ``sys.modules['torch'] = None``
    block or an import hook that refuses it both count as absent)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
