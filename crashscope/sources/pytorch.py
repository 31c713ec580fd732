"""PyTorch distributed: c10d watchdog/errors, desync, torchrun agent, ChildFailedError, tracebacks, CUDA OOM.

Sample lines (job stdout/stderr, possibly behind ``srun -l`` / Ray's ``(<actor> pid=N, ip=A)`` /
torchrun ``[defaultN]:`` prefixes, ``sources.base.split_prefix``)::

    [rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation
        timeout: WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000)
        ran for 600047 milliseconds before timing out.

``[rank3]:`` is the global rank (absent before ~2.3/2.4 and before init_process_group); ``E`` the
severity; ``0917 04:21:41`` the rank's local time without year (some builds print the month
unpadded: ``E318``); the 9-digit fraction is CLOCK_MONOTONIC ns, NOT wall-clock, so only the
seconds are used. Older builds print ``[E ProcessGroupNCCL.cpp:475] `` (no time at all).
Inside the message ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` / ``[PG 0 (default_pg) Rank 3]`` /
``[PG 0 Rank 3]`` / ``[Rank 3]`` name the process group and the rank *within that PG*; it is used
as the event rank only without a ``[rankN]:`` prefix and when the PG is id 0 / ``default_pg``.

    W0917 04:31:44.718000 90211 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 90233 closing signal SIGTERM

torchrun agent (glog-style, >=2.4; local time, ms; 90211 = agent pid). Also the 2.1-2.3
``[2024-07-25 06:36:18,293] torch.distributed.elastic...: [WARNING] msg`` and <=2.0
``WARNING:torch.distributed.elastic...:msg`` (no time) shapes.

Kinds and attrs (all ``pg_*`` keys present only when the line names a PG):

* collective_timeout: seq, op, numel_in, numel_out, timeout_ms, ran_ms, tensor_shape (<=1.12),
  pg_id, pg_guid, pg_desc, pg_rank
* watchdog_error: what (failure_detected | ops_failed | taking_down | watchdog_terminated |
  nccl_error | terminate | stack_trace), seq, last_enqueued, last_completed, exception,
  exception_type (terminate), nccl_result, nccl_version, nccl_enum, nccl_file, pg_*
* heartbeat_timeout: what (heartbeat_monitor | watchdog_stuck | dump_signal), seconds,
  last_enqueued, last_completed, pg_*
* desync_report: reporting_rank, seq, op, lagging_ranks (never joined), joined_not_finished,
  finished_not_joined, lag_seq, suspects (the ranks the report names as lagging: never joined,
  else still inside the oldest last collective, else finished it and never joined the next),
  snapshot ([{seq, state, op, ranks}] from "Snapshot of ranks' latest states"),
  mismatched_seq / mismatched_ops / mismatched_ranks (ranks started different collectives at one
  sequence number; mismatched_ranks: the smallest such group when it is the only smallest, else all)
* collective_mismatch: detail, ranks, seqs, ops
* exception: type, text, frames_top ("file:line in func" of the innermost frame), frames,
  chained (types of earlier exceptions in the chain), nccl_result, nccl_version, uncaught (the
  traceback came behind torch's ``[rankN]:`` excepthook prefix: the rank died of it),
  ray_actor_death (a traceback a Ray process printed behind Ray's ``(<name> pid=N)`` worker-log
  prefix within a few lines of its own report of a dead actor, ``_RAY_DEATH``: the driver or
  Train controller reprinting that death, not its program's error; a truncated one is a warning),
  c10d_op (the torch.distributed collective the program called: the outermost distributed_c10d.py frame) and
  c10d_call (the source line under the frame that called it, ``dist.all_gather(parts, lt)``)
* cuda_error: error;  cuda_oom: tried_bytes, device, free_bytes, total_bytes
* version: component "nccl", version (from ``NCCL error ... NCCL version X``; once per file and rank)
* signal: signal, pid, direction (sent|received), agent_pid, srun_task (the ``srun -l`` label of the
  agent's line: under torchrun the task is the node, not a rank)
* process_exit: exitcode, signal (when negative), local_rank, pid, binary, agent_pid, srun_task
* job_step: action ``launcher_start``, launcher ``torchrun``, agent_pid, srun_task: torchrun's start
  banner (``torch/distributed/run.py``: "Setting OMP_NUM_THREADS environment variable for each
  process to be 1 in default", logged once per agent when it starts more than one worker); every
  node's agent of one srun step starts at the same moment, so the timeline uses it as a clock anchor
* root_cause_report: root, time_text, host, rank, local_rank, exitcode, signal, pid, error_file,
  traceback (first line), error (last exception line of a multi-line traceback), name
* collective_enter: seq, op, shape, dtypes, pg_rank: ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s
  ``[rank3]:[I1201 11:41:19.659608352 ProcessGroupWrapper.cpp:710] [Rank 3] Running collective:
  CollectiveFingerPrint(SequenceNumber=6, OpType=ALLREDUCE, TensorShape=[919296], TensorDtypes=Float, ...)``,
  one line per rank per collective, logged as the rank enters it (before the wrapper's monitored
  barrier). Bounded: the last ``MAX_ENTERS`` of a file (a warning says how many were seen). The
  order of these lines in one merged stdout is the ranks' order of arrival
  (``analyses/stragglers.py``); the event rank is the ``[rankN]:`` prefix, else the ``[Rank N]``
  of the message (the process-group rank, the global one in the default group)

Application lines (Megatron-LM iteration and checkpoint lines, every trainer's progress) are the
``applog`` source's, not this one's.

A line with no launcher prefix and no header of its own, right after a line this source read
that had a logging header with a rank field (``2026-12-01 12:11:47,696 - ERROR - [rank 1/4] ...``,
read as ``applog.HeaderReader`` reads it) or continued one, is that record's next line and gets
its rank and time: ``logger.error("rank %d failed: %s", rank, exc)`` prints gloo's
``... Please check rank 0 logs for faulty rank.`` / `` Original exception: `` / ``[...unbound_buffer.cc:78]
Timed out waiting 30000ms for recv operation to complete`` on three lines, the header on the first only.
A line no source selects in between breaks the chain (its content is not known).
"""

from __future__ import annotations

import signal as _signal
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

import regex

from crashscope.patterns import compile_pattern
from crashscope.schema import Kind, Severity
from crashscope.sources.applog import HeaderReader
from crashscope.sources.base import LineSource, feed_guarded, ParseContext, iso_to_ns, split_prefix
from crashscope.sources.base import lazy_compile

# --- prefilter -----------------------------------------------------------------------------
# Every line a block needs must be selected here. Literal-heavy; valid Rust and Python regex.
# Ray's "(<name> pid=N[, ip=A])" worker-log prefix (sources/base.py _PREFIX), then one of _RAY_DEATH's texts
_RAY_DEATH_LINE = (r"\((?:[^\s()]+ )?pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\)\S* ?(?:The actor died unexpectedly before finishing"
                   r"|The actor (?:is dead|died) because|Graceful shutdown of backend failed)")
_PREFILTER_PARTS = (
    r"Watchdog caught collective operation timeout",
    r"failure detected by watchdog",
    r"Some NCCL operations have failed",
    r"To avoid data inconsistency",
    r"watchdog thread terminated with exception",
    r"NCCL error",
    r"terminate called after throwing",
    r"what\(\): ",
    r"Heartbeat monitor timed out",
    r"watchdog got stuck for",
    r"Received a dump signal",
    r"Stack trace of the failed collective",
    r"Timeout at collective: ",
    r"To our best knowledge",
    r"joined but didn't finish collective",
    r"but didn't join collective",
    r"Snapshot of ranks' latest states",
    r"#\d+ (?:started|finished) ranks:",
    r"\[[\d, ]*\] (?:started|finished) \w+\s*$",
    r"Detected mismatch between collectives",
    r"Traceback \(most recent call last\)",
    # a Ray process's report of a dead actor behind Ray's worker-log prefix (_RAY_DEATH)
    _RAY_DEATH_LINE,
    r"File \"[^\"]*\", line \d",
    r"above exception",
    r"(?:Error|Exception|Interrupt|SystemExit)(?::|\s*$)",
    r"CUDA error: ",
    r"CUDA out of memory",
    # torch <= 1.5 _check_driver: "AssertionError: " with the message on the next line
    r"^The NVIDIA driver on your system is too old",
    r"closing signal SIG",
    r"forcefully exit",
    r"death signal, shutting down workers",
    r"Setting OMP_NUM_THREADS environment variable for each process",
    r"failed \(exitcode: ",
    r"Root Cause \(first observed failure\)",
    r"Failures:",
    r"NO_OTHER_FAILURES",
    r"(?:time      |host      |rank      |exitcode  |error_file|traceback ): ",
    r"={30}",
    r"failed to pass monitoredBarrier",
    r"Connection closed by peer",
    r"Application timeout caused pair closure",
    r"(?:Read|Write) error \[?[0-9A-Fa-f.:]+\]?:\d+: ",
    r"Timed out waiting \d+ ?ms for (?:recv|send) operation",
    r"Running collective: CollectiveFingerPrint\(",
    # DDP's unused-parameter error names the raising rank on a line of its own (reducer.cpp)
    r"did not receive grad for rank \d",
    # torch.multiprocessing.spawn: the child's traceback follows this banner
    r"-- Process \d+ terminated with the following error",
    # ProcessGroupGloo::monitoredBarrier on ranks != 0: c10::str(error, "\n Original exception: \n", e.what()):
    # the line between a logging record's first line and the gloo error it continues
    r"^ Original exception: ",
    # the source line Python prints under a traceback frame that calls a torch.distributed
    # collective ("    dist.all_gather(parts, lt)"): which collective, and on which group
    r"^(?:\s*\d{1,7}: )?(?:\[[\w,]+\]: ?)*\s{4}(?:[\w.]+ ?= ?|return )?[\w.]*\b(?:all_reduce|all_gather|reduce_scatter|broadcast|barrier|all_to_all|reduce|gather|scatter)\w*\(",
)

# --- peer failures as the survivors see them ------------------------------------------------
# gloo (third_party/gloo/gloo/transport/tcp/pair.cc, unbound_buffer.cc) raises plain
# RuntimeErrors on the ranks that were waiting for a peer: "Connection closed by peer" when
# the peer process exited (crash, kill), "Timed out waiting ...ms" when it is alive but absent
# (hung, stopped, cut off), "Read error ... Connection reset by peer" when the link broke.
# With TORCH_DISTRIBUTED_DEBUG=DETAIL, rank 0's monitoredBarrier names the missing ranks.
# They are symptoms that point at a peer, never a cause on the rank that prints them.
# ProcessGroupNCCL before PG-prefixed logs (torch < 2.2): "[Rank 1] Watchdog caught ..."
# names the default group's rank, i.e. the global rank.
_OLD_RANK_PREFIX = lazy_compile(r"^\s*\[Rank (?P<rank>\d{1,7})\] ")
_GLOO_TIMEOUT = lazy_compile(r"Timed out waiting (?P<ms>\d+) ?ms for (?P<op>recv|send) operation to complete|(?P<closure>Application timeout caused pair closure)")
_GLOO_CLOSED = lazy_compile(r"Connection closed by peer(?: \[?(?P<peer>[0-9A-Fa-f.:]+?)\]?:(?P<port>\d+))?")
_GLOO_IO = lazy_compile(r"(?P<what>Read|Write) error \[?(?P<peer>[0-9A-Fa-f.:]+?)\]?:(?P<port>\d+): (?P<err>Connection reset by peer|Broken pipe|Connection timed out|No route to host)")
_MONITORED_BARRIER = lazy_compile(r"Ranks? (?P<ranks>\d+(?:\s*,\s*\d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms")

# --- line shapes ---------------------------------------------------------------------------
_C10 = lazy_compile(
    r"""^\[(?P<sev>[FEWIV])
        (?:(?P<md>\d{3,4})\ (?P<hms>\d\d:\d\d:\d\d)\.\d{6,9}\ +|\ )   # time (month may be unpadded) or old " "
        (?P<file>[^:\]\s]+):(?P<line>\d+)\]\ ?(?P<msg>.*)$""",
    regex.VERBOSE,
)
# glog / torch._logging: torchrun agent >=2.4, glog-built libtorch
_GLOG = lazy_compile(
    r"""^(?P<sev>[DIWEFC])(?P<md>\d{4})\ (?P<hms>\d\d:\d\d:\d\d)\.(?P<us>\d{6})\ +(?P<pid>\d+)\ 
        (?P<path>[^\s:\]]+):(?P<line>\d+)\]\ (?P<msg>.*)$""",
    regex.VERBOSE,
)
# python logging, torch 2.1-2.3 elastic: [2024-07-25 06:36:18,293] torch.distributed...: [WARNING] msg
_PYLOG_TS = lazy_compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] (?P<name>torch\.[\w.]+): \[(?P<lvl>[A-Z]+)\] (?P<msg>.*)$"
)
# python logging.basicConfig default, torch <=2.0: WARNING:torch.distributed...:msg
_PYLOG_BASIC = lazy_compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<name>torch\.[\w.]+):(?P<msg>.*)$")

_PG_PREFIX = lazy_compile(
    r"""\[(?:PG\ ID\ (?P<id>\d+)\ PG\ GUID\ (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]*)\))?\ |   # >=2.4
           PG\ (?P<id2>\d+)\ (?:\((?P<desc2>[^)]*)\)\ )?)?                                    # ~2.3
        Rank\ (?P<rank>\d+)\]""",
    regex.VERBOSE,
)
_WORK = lazy_compile(
    r"""WorkNCCL\((?:SeqNum=(?P<seq>\d+),\ )?OpType=(?P<op>\w+)
        (?:,\ NumelIn=(?P<nin>-?\d+),\ NumelOut=(?P<nout>-?\d+))?
        (?:,\ TensorShape=\[(?P<shape>[^\]]*)\])?
        (?:,\ Timeout\(ms\)=(?P<tmo>\d+))?\)
        (?:\ ran\ for\ (?P<ran>\d+)\ milliseconds)?""",
    regex.VERBOSE,
)
_FAILURE_DETECTED = lazy_compile(
    r"failure detected by watchdog at work sequence id: (?P<seq>-?\d+)\s+PG status: "
    r"last enqueued work: (?P<enq>-?\d+), last completed work: (?P<comp>-?\d+)"
)
_NCCL_ERR = lazy_compile(
    r"""NCCL\ error(?:\ in:\ (?P<file>[^\s,]+?):(?P<line>\d+),\ |:\ )
        (?P<result>.*?),\ NCCL\ version\ (?P<ver>\d+\.\d+\.\d+[\w.+-]*)""",
    regex.VERBOSE,
)
_NCCL_ENUM = lazy_compile(r"^(?P<enum>nccl[A-Z]\w*): (?P<desc>.*)$")
_STUCK = lazy_compile(r"watchdog got stuck for (?P<sec>\d+) seconds")
_DUMP_SIGNAL = lazy_compile(r"Last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<comp>-?\d+)")
_TERMINATE = lazy_compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = lazy_compile(r"^\s*what\(\):\s+(?P<what>.*)$")

_DESYNC_TIMEOUT = lazy_compile(r"^\s*- \[(?P<rank>\d+)\] Timeout at collective: (?P<op>[^,]*), #(?P<seq>\d+)")
_DESYNC_MISSING = lazy_compile(r"ranks \[(?P<ranks>[\d, ]*)\] are the lagging ranks that caused this timeout")
_DESYNC_JOINED = lazy_compile(r"\[(?P<ranks>[\d, ]*)\] joined but didn't finish collective #(?P<seq>\d+)")
_DESYNC_FINISHED = lazy_compile(r"\[(?P<ranks>[\d, ]*)\] finished collective #(?P<seq>\d+), but didn't join collective #(?P<next>\d+)")
_DESYNC_HEADER = lazy_compile(r"^\s*- To our best knowledge, the lagging/dead/mismatched ranks")
# TraceUtils.h dumpSnapshot(): "\n\t - Snapshot of ranks' latest states:", per sequence number
# "\n\t   #{seq} started ranks:" / "... finished ranks:", then "\n\t     [{ranks}] started {col}"
# per collective name (each rank's last trace-start key in the store, and whether its end key
# has the same seq).
_P2P_OPS = frozenset({"SEND", "RECV", "RECVANYSOURCE"})  # c10d opTypeToString (Types.hpp / Utils.hpp)
_DESYNC_SNAPSHOT = lazy_compile(r"^\s*- Snapshot of ranks' latest states:")
_DESYNC_SEQ = lazy_compile(r"^\s*#(?P<seq>\d+) (?P<state>started|finished) ranks:\s*$")
_DESYNC_STATE = lazy_compile(r"^\s*\[(?P<ranks>[\d, ]*)\] (?P<state>started|finished) (?P<op>[\w.:-]+)\s*$")

_MISMATCH = lazy_compile(r"Detected mismatch between collectives on ranks")
# The fingerprint nests parentheses two deep (TensorOptions(dtype=float (default), ...)):
# read its leading fields instead of matching its body.
# A fingerprint without tensors (a barrier's, or the peer's as the wrapper decodes it) prints no
# comma before OpType: "CollectiveFingerPrint(SequenceNumber=32OpType=BARRIER)" (recorded, torch 2.13.0).
_MISMATCH_RANK = lazy_compile(r"Rank (?P<rank>\d+) is running (?:inconsistent )?collective: (?:CollectiveFingerPrint\((?P<body>(?:SequenceNumber=\d+,? ?)?OpType=\w+(?:, TensorShape=\[[^\]]*\])?))?")
# TORCH_DISTRIBUTED_DEBUG=DETAIL, ProcessGroupWrapper::runCollectiveChecks (torch/csrc/distributed/c10d/
# ProcessGroupWrapper.cpp): LOG(INFO) << "[Rank " << getRank() << "] " << "Running collective: " << finger_print,
# before the monitored barrier that waits for every rank of the group. The fingerprint prints
# "CollectiveFingerPrint(SequenceNumber=S, OpType=OP, TensorShape=[..], TensorDtypes=.., TensorDeviceTypes=..)",
# or, without input tensors (barrier, alltoall, coalesced ops), "CollectiveFingerPrint(SequenceNumber=SOpType=OP)"
# (no separator: that is how c10::str joins them). getRank() is the rank in the process group.
_ENTER = lazy_compile(
    r"""\[Rank\ (?P<pg_rank>\d+)\]\ Running\ collective:\ CollectiveFingerPrint\(
        SequenceNumber=(?P<seq>\d+),?\ ?OpType=(?P<op>\w+)
        (?:,\ TensorShape=\[(?P<shape>[^\]]*)\])?
        (?:,\ TensorDtypes=(?P<dtypes>[^,)]*))?""",
    regex.VERBOSE,
)
MAX_ENTERS = 40_000  # collective_enter events kept per file: the last ones (one line per rank and collective)
_FP_SEQ = lazy_compile(r"SequenceNumber=(?P<seq>\d+)")
_FP_OP = lazy_compile(r"OpType=(?P<op>\w+)")
_FP_SHAPE = lazy_compile(r"TensorShape=(?P<shape>\[[^\]]*\])")

_TB_START = lazy_compile(r"^Traceback \(most recent call last\):\s*$")
# torch/multiprocessing/spawn.py ProcessRaisedException: "\n\n-- Process %d terminated with the following
# error:\n" + the child's traceback; %d is the spawn index i of fn(i, *args), the process's local rank.
_SPAWN_BANNER = lazy_compile(r"^-- Process (?P<idx>\d{1,6}) terminated with the following error:\s*$")
# torch/csrc/distributed/c10d/reducer.cpp: "Parameter indices which did not receive grad for rank "
# << process_group_->getRank() << ": ..." (and "Parameters which ..." with TORCH_DISTRIBUTED_DEBUG):
# a line of the rank's own "Expected to have finished reduction ..." RuntimeError.
_NO_GRAD_RANK = lazy_compile(r"^Parameter(?:s| indices) which did not receive grad for rank (?P<rank>\d{1,7}):")
_TB_FRAME = lazy_compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*?))?\s*$')
_TB_CHAIN = lazy_compile(r"^(?:During handling of the above exception, another exception occurred:|The above exception was the direct cause of the following exception:)\s*$")
_EXC_LINE = lazy_compile(
    r"""^(?P<type>(?:[A-Za-z_]\w*\.)*
          (?:[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failure|Timeout)|KeyboardInterrupt|SystemExit|StopIteration))
        (?::\ ?(?P<text>.*?)|)\s*$""",
    regex.VERBOSE,
)
# exception types worth an event even when no traceback header was seen (torch raises them re-printed)
_STANDALONE_EXC = lazy_compile(r"(?:^|\.)(?:Dist\w*Error|ChildFailedError|OutOfMemoryError)$")
_RANK_EXC = lazy_compile(r"(?:Error|Exception)$")

_CUDA_ERROR = lazy_compile(r"CUDA error: (?P<error>.+?)\s*$")
_OOM = lazy_compile(r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ ?[KMGTP]?i?B)")
_OOM_NEW = lazy_compile(r"GPU (?P<dev>\d+) has a total capa\w* of (?P<total>[\d.]+ ?[KMGTP]?i?B) of which (?P<free>[\d.]+ ?[KMGTP]?i?B) is free")
_OOM_OLD = lazy_compile(r"\(GPU (?P<dev>\d+); (?P<total>[\d.]+ ?[KMGTP]?i?B) total capacity;.*?(?P<free>[\d.]+ ?[KMGTP]?i?B) free")
_SIZE = lazy_compile(r"(?P<num>[\d.]+) ?(?P<unit>[KMGTP]?)(?P<i>i?)B")

_AGENT_CLOSING = lazy_compile(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG\w+)")
# The agent's close(): a worker still alive after the SIGTERM grace period is SIGKILLed by torchrun
# itself. pytorch/pytorch torch/distributed/elastic/multiprocessing/api.py, SubprocessContext._close
# and MultiprocessContext._close: torch 2.x logs "Unable to shutdown process %s via %s, forcefully
# exiting via %s" (the Signals member: "Signals.SIGTERM", or "15" where str(IntEnum) is its number,
# Python >= 3.11); torch 1.x an f-string "... forcefully exitting via ..." ("15" / "9");
# torch/multiprocessing/spawn.py ProcessContext.join: "... via SIGTERM , forcefully exiting via SIGKILL".
_AGENT_FORCED = lazy_compile(
    r"Unable to shutdown process (?P<pid>\d+) via (?:Signals\.)?(?P<sig>SIG\w+|\d{1,2}) ?, "
    r"forcefully exit{1,2}ing via (?:Signals\.)?(?P<kill>SIG\w+|\d{1,2})"
)
_AGENT_FAILED = lazy_compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\) of (?:binary: |fn: )?(?P<bin>.*?)\s*$"
)
# torch <= 2.5 logs the Signals member ("Received Signals.SIGTERM death signal"), later ones its number
# ("Received 15 death signal", torch/distributed/elastic/agent/server/api.py: e.sigval)
_AGENT_DEATH = lazy_compile(r"Received (?:Signals\.)?(?P<sig>SIG\w+|\d{1,2}) death signal, shutting down workers")
# torch/distributed/run.py config_from_args(): logger.warning("\n*****...\nSetting OMP_NUM_THREADS environment
# variable for each process to be %s in default, to avoid your system being overloaded, ...") (torch 1.9 - 2.13)
_AGENT_START = lazy_compile(r"^\s*Setting OMP_NUM_THREADS environment variable for each process to be \d+ in default")

_RC_ROOT = lazy_compile(r"^Root Cause \(first observed failure\):\s*$")
_RC_FAILURES = lazy_compile(r"^Failures:\s*$")
_RC_NONE = lazy_compile(r"^\s+<NO_OTHER_FAILURES>\s*$")
_RC_IDX = lazy_compile(r"^\[(?P<idx>\d+)\]:\s*$")
_RC_FIELD = lazy_compile(r"^  (?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<val>.*?)\s*$")
_RC_BORDER = lazy_compile(r"^={20,}\s*$")
_RC_RANK = lazy_compile(r"^(?P<rank>-?\d+) \(local_rank: (?P<lr>-?\d+)\)")
_RC_EXIT = lazy_compile(r"^(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")

_SEV = {"F": Severity.CRITICAL, "C": Severity.CRITICAL, "E": Severity.ERROR, "W": Severity.WARNING,
        "I": Severity.INFO, "V": Severity.DEBUG, "D": Severity.DEBUG}
_LVL = {"DEBUG": Severity.DEBUG, "INFO": Severity.INFO, "WARNING": Severity.WARNING, "ERROR": Severity.ERROR,
        "CRITICAL": Severity.CRITICAL}

_MAX_TB_GAP = 400  # lines between two lines of one prefixed traceback (other ranks interleave)
# What a Ray process prints about an actor that died, right before the traceback it reprints
# of that death: ray-project/ray python/ray/exceptions.py ActorDiedError (BASE_ERROR_MSG "The
# actor died unexpectedly before finishing this task.", its fields, then the death cause: "The
# actor is dead because its worker process has died", "The actor died because its node has
# died", src/ray/gcs/gcs_actor_manager.cc), and Ray Train's "Graceful shutdown of backend
# failed. This is expected if one of the workers has crashed." (python/ray/train/v2/_internal/
# callbacks/backend_setup.py BackendSetupCallback: logged in `except RayActorError` (and
# RayTaskError) with exc_info=True, test_worker_group.py
# test_backend_setup_callback_swallows_shutdown_failure), whose traceback is that error's.
_RAY_DEATH = lazy_compile(
    r"The actor died unexpectedly before finishing|The actor (?:is dead|died) because|Graceful shutdown of backend failed"
    r"|ray\.exceptions\.(?:RayActorError|ActorDiedError|ActorUnavailableError)\b"
)
_OTHER_PARTS = lazy_compile("|".join(f"(?:{p})" for p in _PREFILTER_PARTS if p is not _RAY_DEATH_LINE))
_RAY_DEATH_BEFORE = 12  # lines from the death report (its fields, its cause lines) to the traceback
_MAX_TB_GAP_BARE = 8  # same without prefix: code and ^^^ lines only
_PID_MAX = 4_194_304  # torch<=2.3 glog field is a thread id, not a pid


def _ranks(text: str) -> list[int]:
    return [int(x) for x in regex.findall(r"\d+", text)]


def _size_bytes(text: str | None) -> int | None:
    if not text:
        return None
    m = _SIZE.search(text)
    if not m:
        return None
    mult = {"": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}[m.group("unit")]
    base = 1024 if m.group("i") or m.group("unit") else 1000
    try:
        # decimal arithmetic via string split keeps integer bytes exact for printed values
        whole, _, frac = m.group("num").partition(".")
        num = int(whole or 0) * 10 ** len(frac) + int(frac or 0)
        return num * base**mult // 10 ** len(frac)
    except ValueError:
        return None


def _signame(code: int) -> str | None:
    if code >= 0:
        return None
    try:
        return _signal.Signals(-code).name
    except ValueError:
        return None


@dataclass
class _Ev:
    kind: Kind
    line: int
    message: str
    severity: Severity
    attrs: dict[str, Any]
    time: int | None = None
    tq: Any = None
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    gpu_index: int | None = None


_C10D_FRAME = lazy_compile(r"/torch/distributed/distributed_c10d\.py:\d+ in (?P<func>\w+)$")


def _c10d_call(tb: "_Tb") -> dict[str, Any]:
    """The torch.distributed collective a traceback's program called: the outermost frame in
    torch/distributed/distributed_c10d.py (the API function the program called; all_gather_object
    calls all_gather inside) and the source line of the frame that called into torch.distributed
    (``dist.all_gather(parts, lt)``), which says whether a ``group`` was passed."""
    for i, f in enumerate(tb.frames):
        if m := _C10D_FRAME.search(f):
            out: dict[str, Any] = {"c10d_op": m.group("func")}
            j = next((k for k in range(i) if "/torch/distributed/" in tb.frames[k]), i)  # c10d_logger's wrapper
            if j > 0 and (j - 1) in tb.code:
                out["c10d_call"] = tb.code[j - 1]
            return out
    return {}


@dataclass
class _Tb:
    """An open Python traceback for one launcher prefix."""

    start: int
    last: int
    frames: list[str] = field(default_factory=list)
    chained: list[str] = field(default_factory=list)
    exc: _Ev | None = None  # set when the exception line was seen; emitted unless a chain follows
    awaiting_chain: bool = False
    spawn: int | None = None  # the mp.spawn process index of the banner right above it
    ident: dict[str, Any] | None = None  # the logging record it is part of (rank, time), when one
    headed: bool = False  # opened by "Traceback (most recent call last):", not by a frame
    ray_death: bool = False  # a Ray process's traceback right after its report of a dead actor (_RAY_DEATH)
    code: dict[int, str] = field(default_factory=dict)  # frame index -> the source line printed under it


@dataclass
class _Rc:
    """An open ChildFailedError block."""

    last: int
    root: bool = False
    entry: dict[str, Any] | None = None
    entry_line: int = 0
    in_tb: bool = False


@dataclass
class _Desync:
    line: int
    last: int
    attrs: dict[str, Any]
    rank: int | None
    time: int | None
    tq: Any
    local_rank: int | None
    snap_seq: int | None = None  # the "#N started ranks:" line the snapshot rows below belong to


def _task(prefix) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The ``srun -l`` task label of a launcher's line, when it had one."""
    return {"srun_task": prefix.task} if prefix.task is not None else {}


def _shown(raw: str) -> str:
    """What a terminal shows of a line carriage returns overwrote (a tqdm bar left
    unterminated before the traceback printed after it: ``45%|####| 90/200 [..]\\rTraceback``):
    the launcher's prefix and the text after the last ``\\r``."""
    body = raw.rstrip("\r\n")
    if "\r" not in body:
        return raw
    _, rest = split_prefix(body)
    last = body.rsplit("\r", 1)[1]
    return (body[: len(body) - len(rest)] + last) if last.strip() else raw


class PytorchSource(LineSource):
    name = "pytorch"
    description = "PyTorch distributed: c10d watchdog/errors, desync, torchrun agent, ChildFailedError, tracebacks, CUDA OOM"
    filename_hints = ("*.out", "*.err", "*.log")

    prefilter = "|".join(f"(?:{p})" for p in _PREFILTER_PARTS)

    def sniff(self, head: str, name: str) -> float:
        strong = ("ProcessGroupNCCL.cpp:", "Watchdog caught collective operation timeout",
                  "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                  "Root Cause (first observed failure)", "torch/distributed/elastic/")
        if any(s in head for s in strong):
            return 0.9
        medium = ("torch.distributed", "[rank0]:", "torch.OutOfMemoryError", "CUDA out of memory")
        if any(s in head for s in medium):
            return 0.6
        if "Traceback (most recent call last):" in head and "torch" in head:
            return 0.4
        return 0.0

    # -------------------------------------------------------------------------------------
    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        p = _Parser(ctx)
        feed_guarded(ctx, lines, p.line, p.finish)
        for ev in sorted(p.events, key=lambda e: e.line):
            task = p.line_task.get(ev.line)
            if task is not None and "srun_task" not in ev.attrs:
                ev.attrs["srun_task"] = task  # SLURM_PROCID; the timeline decides whether it is a rank
            ctx.emit(ev.kind, ev.line, ev.message, severity=ev.severity, time=ev.time, time_quality=ev.tq,
                     host=ev.host, rank=ev.rank, local_rank=ev.local_rank, pid=ev.pid, gpu_index=ev.gpu_index,
                     attrs=ev.attrs or None)


# A separator rule (torchelastic's ChildFailedError table opens with one): no message words.
_RULE_LINE = compile_pattern(r"^\s*[=\-*_#~+]{3,}\s*$")


class _Parser:
    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.events: list[_Ev] = []
        self.tb: dict[tuple, _Tb] = {}
        # a chain line ("The above exception was the direct cause ...") right after an exception
        # printed on its own: (its line, the exception's type), for the traceback that follows
        self.chain_pending: dict[tuple, tuple[int, str]] = {}
        self.rc: dict[tuple, _Rc] = {}
        self.desync: _Desync | None = None
        self.last_ev_for_line: dict[int, _Ev] = {}  # event a following continuation line may enrich
        self.by_line: dict[int, list[_Ev]] = {}
        self.prev_n = -10
        self.versions: set[tuple] = set()
        self.enters: deque[_Ev] = deque(maxlen=MAX_ENTERS)  # bounded: the last ones count (who is slow now)
        self.enters_seen = 0
        self.headers = HeaderReader(ctx)
        self.cont: tuple[int, dict[str, Any]] | None = None  # (line, identity) of the record the next line may continue
        self.ident: dict[str, Any] | None = None  # the current line's record identity (its own header's or inherited)
        self.spawn: tuple[int, int] | None = None  # (line, index) of the last mp.spawn "-- Process N terminated" banner
        self.line_task: dict[int, int] = {}  # line -> its srun --label task id
        self.line_host: dict[int, str] = {}  # line -> the pdsh host prefix it had
        self.ray_death: dict[int, int] = {}  # Ray worker pid -> the line of its last report of a dead actor
        self.line_pid: dict[int, int] = {}  # line -> the Ray worker pid its prefix named

    # -- helpers ---------------------------------------------------------------------------
    def add(self, ev: _Ev) -> _Ev:
        if ev.host is None and self.line_host:
            ev.host = self.line_host.get(ev.line)
        if ev.pid is None and self.line_pid:
            ev.pid = self.line_pid.get(ev.line)
        self.events.append(ev)
        self.last_ev_for_line[ev.line] = ev
        self.by_line.setdefault(ev.line, []).append(ev)
        return ev

    def yearless(self, md: str, hms: str, ns: int = 0) -> tuple[int | None, Any]:
        month, day = int(md[:-2]), int(md[-2:])
        hh, mm, ss = (int(x) for x in hms.split(":"))
        t = self.ctx.yearless_ns(month, day, hh, mm, ss, ns)
        return t, (self.ctx.local_quality() if t is not None else None)

    # -- main dispatch -----------------------------------------------------------------------
    def line(self, n: int, raw: str) -> None:
        """One line, with the identity of the logging record it starts or continues: a line
        with no launcher prefix and no header of its own right after a line that had one (or
        continued one) is the same record's next line (``logger.error("...: %s", exc)`` where
        the exception text spans lines, such as gloo's "... Original exception: \\n[...] Timed
        out waiting 30000ms for recv operation to complete")."""
        if "\r" in raw:
            raw = _shown(raw)
        prefix, text = split_prefix(raw)
        if prefix.task is not None:
            self.line_task[n] = prefix.task
        if prefix.host is not None:
            self.line_host[n] = prefix.host
        if prefix.pid is not None:
            self.line_pid[n] = prefix.pid
        ident: dict[str, Any] | None = None
        if prefix.task is None and prefix.local_rank is None and prefix.rank is None:
            starts, rank, t, tq = self.headers.read(text.rstrip("\r\n"))
            if starts:
                ident = {"rank": rank, "time": t, "tq": tq} if rank is not None else None
            elif self.cont is not None and self.cont[0] == n - 1:
                ident = self.cont[1]
        self.ident = ident
        try:
            self._line(n, raw)
        finally:
            self.cont = (n, ident) if ident is not None else None
            self.ident = None

    def _line(self, n: int, raw: str) -> None:
        prefix, text = split_prefix(raw)
        text = text.rstrip("\r\n")
        # Ray's "(<name> pid=N)" prefix: one worker's lines are one stream among the driver's
        key = (prefix.task, prefix.local_rank, prefix.rank, prefix.pid)
        prev_n, self.prev_n = self.prev_n, n
        if prefix.ray is not None and _RAY_DEATH.search(text):
            self.ray_death[prefix.pid or 0] = n
            if not _OTHER_PARTS.search(raw):
                return  # here for _RAY_DEATH_LINE alone: nothing else to read in it
        if text.startswith(("-- Process ", "Parameter")):
            if sm := _SPAWN_BANNER.match(text):
                self.spawn = (n, int(sm.group("idx")))
                return
            if gm := _NO_GRAD_RANK.match(text):
                self._no_grad_rank(n, key, int(gm.group("rank")))
                return

        # continuation of a multi-line NCCL error message ("ncclSystemError: ...")
        m = _NCCL_ENUM.match(text.strip())
        if m and n - 1 == prev_n:
            targets = [ev for ev in self.by_line.get(n - 1, ()) if "nccl_result" in ev.attrs]
            tb = self.tb.get(key)
            if tb is not None and tb.exc is not None and tb.exc.line == n - 1 and "nccl_result" in tb.exc.attrs:
                targets.append(tb.exc)
                tb.last = n
            if targets:
                for ev in targets:
                    ev.attrs["nccl_enum"] = m.group("enum")
                return

        if self.desync is not None:
            if self._desync_line(n, text):
                return
            self._flush_desync()

        if self._rc_line(n, key, text, prefix):
            return
        if self._tb_line(n, key, text, prefix):
            return
        self._message_line(n, text, prefix)

    def finish(self) -> None:
        self.events.extend(self.enters)
        if self.enters_seen > MAX_ENTERS:
            self.ctx.warn(f"pytorch: kept the last {MAX_ENTERS} of {self.enters_seen} 'Running collective' lines")
        self._flush_desync()
        for key in list(self.tb):
            self._close_tb(key, truncated=True)
        for key in list(self.rc):
            self._close_rc(key)

    # -- c10 / glog / python-logging prefixed and bare messages --------------------------------
    def _message_line(self, n: int, text: str, prefix) -> None:
        rank, local_rank = prefix.rank, prefix.local_rank
        time = tq = None
        sev = None
        pid = None
        msg = text
        if m := _C10.match(text):
            msg, sev = m.group("msg"), _SEV[m.group("sev")]
            if m.group("md"):
                time, tq = self.yearless(m.group("md"), m.group("hms"))
        elif m := _GLOG.match(text):
            msg, sev = m.group("msg"), _SEV[m.group("sev")]
            time, tq = self.yearless(m.group("md"), m.group("hms"), int(m.group("us")) * 1000)
            pid = int(m.group("pid"))
            if pid > _PID_MAX:
                pid = None
        elif m := _PYLOG_TS.match(text):
            msg, sev = m.group("msg"), _LVL.get(m.group("lvl"), Severity.INFO)
            time, tq = iso_to_ns(m.group("ts"), self.ctx)
        elif m := _PYLOG_BASIC.match(text):
            msg, sev = m.group("msg"), _LVL.get(m.group("lvl"), Severity.INFO)

        pg: dict[str, Any] = {}
        if pm := _PG_PREFIX.search(msg):
            pg_id = pm.group("id") or pm.group("id2")
            desc = pm.group("desc") if pm.group("desc") is not None else pm.group("desc2")
            pg["pg_rank"] = int(pm.group("rank"))
            if pg_id is not None:
                pg["pg_id"] = int(pg_id)
            if pm.group("guid"):
                pg["pg_guid"] = pm.group("guid")
            if desc:
                pg["pg_desc"] = desc
            if rank is None and (pg.get("pg_id") == 0 or desc == "default_pg"):
                rank = pg["pg_rank"]

        if rank is None and (om := _OLD_RANK_PREFIX.match(msg)):
            rank = int(om.group("rank"))
        if self.ident is not None:
            rank = rank if rank is not None else self.ident["rank"]
            if time is None:
                time, tq = self.ident["time"], self.ident["tq"]
        base = dict(line=n, time=time, tq=tq, rank=rank, local_rank=local_rank)
        short = msg.strip()
        if sev is not None and "Running collective: " in msg and (cm := _ENTER.search(msg)):
            self._enter(cm, msg, sev, base)
            return

        # bare exception lines (no traceback header seen for this prefix); the c10 line is the
        # canonical watchdog record, so its re-raised text is not parsed again as a timeout
        if sev is None and (em := _EXC_LINE.match(text)):
            self._exception_specials(n, em.group("type"), em.group("text") or "", base)
            # A lone final line on a "[rankN]:" prefix is a rank's uncaught exception whose
            # traceback header was cut (tail'ed or rotated logs, a pasted excerpt).
            lone_on_rank = prefix.rank is not None and _RANK_EXC.search(em.group("type"))
            # At the start of a line with a message: the last line of a traceback whose frames
            # were cut (a pasted excerpt, a tail), which is how most incident reports quote it.
            lone_at_start = text[:1].isalpha() and bool(em.group("text")) and _RANK_EXC.search(em.group("type"))
            if _STANDALONE_EXC.search(em.group("type")) or lone_on_rank or lone_at_start:
                attrs = {"type": em.group("type"), "text": em.group("text") or ""}
                if wm := _WORK.search(attrs["text"]):
                    attrs.update(self._work_attrs(wm))
                self._nccl_attrs(attrs["text"], attrs, base)
                self.add(_Ev(Kind.EXCEPTION, message=short, severity=Severity.ERROR, attrs=attrs, **base))
            return

        # the C++ runtime's last words; what() repeats the exception text of the c10 line
        if tm := _TERMINATE.match(short):
            self.add(_Ev(Kind.WATCHDOG_ERROR, message=short, severity=Severity.CRITICAL,
                         attrs={"what": "terminate", "exception_type": tm.group("type")}, **base))
            return
        if wm := _WHAT.match(text):
            what = wm.group("what")
            prev = self.last_ev_for_line.get(n - 1)
            if prev is not None and prev.attrs.get("what") == "terminate":
                prev.attrs["exception"] = what
                if pm := _PG_PREFIX.search(what):
                    prev.attrs.setdefault("pg_rank", int(pm.group("rank")))
                    if prev.rank is None and (pm.group("id") or pm.group("id2")) == "0":
                        prev.rank = int(pm.group("rank"))
                if ww := _WORK.search(what):
                    prev.attrs.update(self._work_attrs(ww))
                self._nccl_attrs(what, prev.attrs, base)
            self._cuda_error(n, what, base)
            return

        if sev in (None, Severity.ERROR, Severity.CRITICAL) and self._peer_failure(msg, base):
            return
        # watchdog / c10d catalogue
        if "Watchdog caught collective operation timeout" in msg and "terminated with exception" not in msg:
            attrs = dict(pg)
            if wm := _WORK.search(msg):
                attrs.update(self._work_attrs(wm))
            else:
                self.ctx.warn("pytorch: collective timeout without WorkNCCL(...)", n, text)
            self.add(_Ev(Kind.COLLECTIVE_TIMEOUT, message=short, severity=sev or Severity.ERROR, attrs=attrs, **base))
            return
        if fm := _FAILURE_DETECTED.search(msg):
            attrs = dict(pg, what="failure_detected", seq=int(fm.group("seq")),
                         last_enqueued=int(fm.group("enq")), last_completed=int(fm.group("comp")))
            self.add(_Ev(Kind.WATCHDOG_ERROR, message=short, severity=sev or Severity.ERROR, attrs=attrs, **base))
            return
        if "Heartbeat monitor timed out" in msg or "watchdog got stuck for" in msg or "Received a dump signal" in msg:
            attrs = dict(pg)
            if sm := _STUCK.search(msg):
                attrs.update(what="watchdog_stuck", seconds=int(sm.group("sec")))
            elif "Heartbeat monitor timed out" in msg:
                attrs["what"] = "heartbeat_monitor"
            else:
                attrs["what"] = "dump_signal"
            if dm := _DUMP_SIGNAL.search(msg):
                attrs.update(last_enqueued=int(dm.group("enq")), last_completed=int(dm.group("comp")))
            self.add(_Ev(Kind.HEARTBEAT_TIMEOUT, message=short, severity=sev or Severity.ERROR, attrs=attrs, **base))
            return
        if _MISMATCH.search(msg) and not _EXC_LINE.match(msg):
            self._mismatch(n, msg, base, sev)
            return
        if dm := _DESYNC_TIMEOUT.match(msg):
            self._start_desync(n, dm, base)
            return

        watch = None
        if "Some NCCL operations have failed" in msg:
            watch = "ops_failed"
        elif "To avoid data inconsistency" in msg:
            watch = "taking_down"
        elif "watchdog thread terminated with exception" in msg:
            watch = "watchdog_terminated"
        elif "Stack trace of the failed collective" in msg:
            watch = "stack_trace"
        if watch is not None or (_NCCL_ERR.search(msg) and (sev is not None or msg.startswith("NCCL error"))):
            attrs = dict(pg, what=watch or "nccl_error")
            if watch == "watchdog_terminated":
                attrs["exception"] = msg.split("terminated with exception:", 1)[1].strip()
                # the exception is often the collective timeout itself: keep its WorkNCCL facts
                if wm := _WORK.search(msg):
                    attrs.update(self._work_attrs(wm))
            self._nccl_attrs(msg, attrs, base)
            severity = Severity.CRITICAL if watch == "taking_down" else (sev or Severity.ERROR)
            if watch == "stack_trace":
                severity = sev or Severity.INFO
            self.add(_Ev(Kind.WATCHDOG_ERROR, message=short, severity=severity, attrs=attrs, **base))
            self._cuda_error(n, msg, base)
            return

        # torchrun agent
        if am := _AGENT_CLOSING.search(msg):
            apid = pid
            self.add(_Ev(Kind.SIGNAL, message=short, severity=sev or Severity.WARNING, pid=int(am.group("pid")),
                         attrs={"signal": am.group("sig"), "pid": int(am.group("pid")), "direction": "sent",
                                **({"agent_pid": apid} if apid else {}), **_task(prefix)}, **base))
            return
        if am := _AGENT_FORCED.search(msg):
            # The launcher killing its own worker after the grace period: that worker's later
            # "exitcode: -9" is this kill, not the OOM killer's (attrs.forced, keyed on the pid).
            first, kill = am.group("sig"), am.group("kill")
            attrs = {"signal": kill if not kill.isdigit() else (_signame(-int(kill)) or kill),
                     "after": first if not first.isdigit() else (_signame(-int(first)) or first),
                     "pid": int(am.group("pid")), "direction": "sent", "forced": True,
                     **({"agent_pid": pid} if pid else {}), **_task(prefix)}
            self.add(_Ev(Kind.SIGNAL, message=short, severity=sev or Severity.WARNING, pid=int(am.group("pid")),
                         attrs=attrs, **base))
            return
        if am := _AGENT_FAILED.search(msg):
            code = int(am.group("code"))
            attrs = {"exitcode": code, "local_rank": int(am.group("lr")), "pid": int(am.group("pid")),
                     "binary": am.group("bin")}
            if sig := _signame(code):
                attrs["signal"] = sig
            if pid:
                attrs["agent_pid"] = pid
            attrs.update(_task(prefix))
            b = dict(base, local_rank=int(am.group("lr")))
            self.add(_Ev(Kind.PROCESS_EXIT, message=short, severity=Severity.ERROR if code else Severity.INFO,
                         pid=int(am.group("pid")), attrs=attrs, **b))
            return
        if am := _AGENT_DEATH.search(msg):
            sig = am.group("sig")
            attrs = {"signal": sig if not sig.isdigit() else (_signame(-int(sig)) or sig), "direction": "received"}
            if pid:
                attrs["agent_pid"] = pid
            attrs.update(_task(prefix))
            self.add(_Ev(Kind.SIGNAL, message=short, severity=sev or Severity.WARNING, pid=pid, attrs=attrs, **base))
            return
        if time is not None and _AGENT_START.match(msg):
            attrs = {"action": "launcher_start", "launcher": "torchrun", **({"agent_pid": pid} if pid else {}), **_task(prefix)}
            self.add(_Ev(Kind.JOB_STEP, message=short, severity=Severity.INFO, pid=pid, attrs=attrs, **base))
            return

        if "CUDA error: " in msg:
            self._cuda_error(n, msg, base)
        elif "CUDA out of memory" in msg:
            self._oom(n, msg, base)

    # -- helpers for kinds -------------------------------------------------------------------
    @staticmethod
    def _work_attrs(wm) -> dict[str, Any]:
        a: dict[str, Any] = {"op": wm.group("op")}
        for k, g in (("seq", "seq"), ("numel_in", "nin"), ("numel_out", "nout"), ("timeout_ms", "tmo"), ("ran_ms", "ran")):
            if wm.group(g) is not None:
                a[k] = int(wm.group(g))
        if wm.group("shape") is not None:
            a["tensor_shape"] = wm.group("shape")
        return a

    def _nccl_attrs(self, msg: str, attrs: dict[str, Any], base: dict[str, Any]) -> None:
        nm = _NCCL_ERR.search(msg)
        if not nm:
            return
        attrs["nccl_result"] = nm.group("result")
        attrs["nccl_version"] = nm.group("ver")
        if nm.group("file"):
            attrs["nccl_file"] = nm.group("file").rsplit("/", 1)[-1]
        if em := _NCCL_ENUM.search(msg.split(nm.group(0), 1)[-1].strip()):
            attrs["nccl_enum"] = em.group("enum")
        vkey = (nm.group("ver"), base.get("rank"), base.get("local_rank"))
        if vkey not in self.versions:
            self.versions.add(vkey)
            self.add(_Ev(Kind.VERSION, message=f"NCCL version {nm.group('ver')}", severity=Severity.INFO,
                         attrs={"component": "nccl", "version": nm.group("ver")}, **base))

    def _cuda_error(self, n: int, msg: str, base: dict[str, Any]) -> None:
        if cm := _CUDA_ERROR.search(msg):
            self.add(_Ev(Kind.CUDA_ERROR, message=msg.strip(), severity=Severity.ERROR,
                         attrs={"error": cm.group("error")}, **base))

    def _oom(self, n: int, msg: str, base: dict[str, Any]) -> None:
        om = _OOM.search(msg)
        if not om:
            self.ctx.warn("pytorch: CUDA OOM line without 'Tried to allocate'", n, msg)
            return
        attrs: dict[str, Any] = {"tried_bytes": _size_bytes(om.group("tried"))}
        dev = None
        if dm := (_OOM_NEW.search(msg) or _OOM_OLD.search(msg)):
            dev = int(dm.group("dev"))
            attrs.update(device=dev, total_bytes=_size_bytes(dm.group("total")), free_bytes=_size_bytes(dm.group("free")))
        self.add(_Ev(Kind.CUDA_OOM, message=msg.strip(), severity=Severity.ERROR, attrs=attrs, gpu_index=dev, **base))

    def _enter(self, m, msg: str, sev: Severity, base: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
        """One rank entering one collective (DETAIL). Not ``add``: kept in a bounded deque."""
        attrs: dict[str, Any] = {"seq": int(m.group("seq")), "op": m.group("op"), "pg_rank": int(m.group("pg_rank"))}
        if m.group("shape") is not None:
            attrs["shape"] = m.group("shape")
        if m.group("dtypes"):
            attrs["dtypes"] = m.group("dtypes")
        self.enters_seen += 1
        # the fingerprint's device options are long and say nothing here: cut after the dtypes
        message = msg[: m.end()].strip() + (", ...)" if m.group("shape") is not None else ")")
        self.enters.append(_Ev(Kind.COLLECTIVE_ENTER, message=message, severity=sev, attrs=attrs, **base))

    def _peer_failure(self, text: str, base: dict[str, Any]) -> bool:
        """Emit the symptom a survivor's gloo/c10d error describes; True when it was one."""
        short = text.strip()
        if bm := _MONITORED_BARRIER.search(text):
            lagging = [int(r) for r in regex.findall(r"\d+", bm.group("ranks"))]
            self.add(_Ev(Kind.DESYNC_REPORT, message=short, severity=Severity.ERROR,
                         attrs={"lagging_ranks": lagging, "via": "monitoredBarrier", "timeout_ms": int(bm.group("ms"))}, **base))
            return True
        if tm := _GLOO_TIMEOUT.search(text):
            attrs = {"transport": "gloo"}
            if tm.group("closure"):
                attrs["wait"] = "pair closed on timeout"
            else:
                attrs.update(wait=tm.group("op"), timeout_ms=int(tm.group("ms")))
            self.add(_Ev(Kind.COLLECTIVE_TIMEOUT, message=short, severity=Severity.ERROR, attrs=attrs, **base))
            return True
        cm = _GLOO_CLOSED.search(text)
        im = None if cm else _GLOO_IO.search(text)
        if cm or im:
            m = cm or im
            attrs: dict[str, Any] = {"transport": "gloo", "status": "closed" if cm else m.group("err"), "role": "peer"}
            if m.group("peer"):
                attrs["peer"] = f"{m.group('peer')}:{m.group('port')}"
            self.add(_Ev(Kind.NETWORK_ERROR, message=short, severity=Severity.ERROR, attrs=attrs, **base))
            return True
        return False

    def _exception_specials(self, n: int, typ: str, text: str, base: dict[str, Any]) -> None:
        line = f"{typ}: {text}"
        self._peer_failure(text, base)
        if "CUDA out of memory" in text:
            self._oom(n, line, base)
        elif "CUDA error: " in text:
            self._cuda_error(n, line, base)
        if _MISMATCH.search(text):
            self._mismatch(n, text, base, Severity.ERROR)

    def _mismatch(self, n: int, msg: str, base: dict[str, Any], sev) -> None:
        ranks, seqs, ops = [], [], []  # ops[i] is ranks[i]'s (None where its fingerprint says none)
        for rm in _MISMATCH_RANK.finditer(msg):
            ranks.append(int(rm.group("rank")))
            body = rm.group("body") or ""
            if sm := _FP_SEQ.search(body):
                seqs.append(int(sm.group("seq")))
            om = _FP_OP.search(body)
            # the shape too: the same op on a differently shaped tensor is a mismatch as well
            shape = _FP_SHAPE.search(body) if om else None
            ops.append(om.group("op") + (shape.group("shape") if shape else "") if om else None)
        if not any(ops):
            ops = []
        detail = msg.split("Collectives differ in the following aspects:", 1)
        attrs: dict[str, Any] = {"detail": (detail[1] if len(detail) > 1 else msg).strip(), "ranks": ranks}
        if seqs:
            attrs["seqs"] = seqs
        if ops:
            attrs["ops"] = ops
        if base["rank"] is None and ranks:
            # ProcessGroupWrapper: "Rank " << getRank() << " is running collective: ..., but Rank " << i
            # << " is running ...": the first rank named is the reporting process's own.
            base = dict(base, rank=ranks[0])
        self.add(_Ev(Kind.COLLECTIVE_MISMATCH, message=msg.strip(), severity=sev or Severity.ERROR, attrs=attrs, **base))

    # -- desync report (multi-line, continuation lines are adjacent) ---------------------------
    def _start_desync(self, n: int, dm, base: dict[str, Any]) -> None:
        self._flush_desync()
        attrs = {"reporting_rank": int(dm.group("rank")), "op": dm.group("op"), "seq": int(dm.group("seq")),
                 "lagging_ranks": [], "joined_not_finished": [], "finished_not_joined": []}
        rank, time, tq, lr = base["rank"], base["time"], base["tq"], base["local_rank"]
        # continuation of the c10 timeout line just above: inherit its rank and time
        if (prev := self.last_ev_for_line.get(n - 1)) is not None and prev.kind == Kind.COLLECTIVE_TIMEOUT:
            rank = rank if rank is not None else prev.rank
            time, tq = (time, tq) if time is not None else (prev.time, prev.tq)
            lr = lr if lr is not None else prev.local_rank
        self.desync = _Desync(n, n, attrs, rank, time, tq, lr)

    def _desync_line(self, n: int, text: str) -> bool:
        d = self.desync
        assert d is not None
        if n != d.last + 1:
            return False
        if m := _DESYNC_MISSING.search(text):
            d.attrs["lagging_ranks"] = _ranks(m.group("ranks"))
        elif m := _DESYNC_JOINED.search(text):
            d.attrs["joined_not_finished"] = _ranks(m.group("ranks"))
            d.attrs["lag_seq"] = int(m.group("seq"))
        elif m := _DESYNC_FINISHED.search(text):
            d.attrs["finished_not_joined"] = _ranks(m.group("ranks"))
            d.attrs["lag_seq"] = int(m.group("seq"))
        elif m := _DESYNC_SEQ.match(text):
            d.snap_seq = int(m.group("seq"))
        elif (m := _DESYNC_STATE.match(text)) and d.snap_seq is not None:
            snap = d.attrs.setdefault("snapshot", [])
            if len(snap) < 64:
                snap.append({"seq": d.snap_seq, "state": m.group("state"), "op": m.group("op"), "ranks": _ranks(m.group("ranks"))[:1024]})
        elif not (_DESYNC_HEADER.match(text) or _DESYNC_SNAPSHOT.match(text)):
            return False
        d.last = n
        return True

    def _flush_desync(self) -> None:
        d, self.desync = self.desync, None
        if d is None:
            return
        a = d.attrs
        # analyzeMissingRanks(): ranks that never joined any collective; analyzeLaggingRanks(): the
        # ranks whose last trace is the lowest sequence number, those still inside it and those that
        # finished it and never started the next. With both, the ones inside it held the others
        # up (the others' end keys say the collective completed for them).
        culprits = a["lagging_ranks"] or a["joined_not_finished"] or a["finished_not_joined"]
        a["suspects"] = culprits
        # The trace keys hold each rank's own count of collectives on this process group, which
        # advance together in a correct program: ranks that started different collectives at one
        # count issued them in different orders (what ProcessGroupWrapper calls a mismatch).
        # Point-to-point work shares the counter (a send on one rank is a recv on its peer): not compared.
        started: dict[int, dict[str, list[int]]] = {}
        for row in a.get("snapshot", ()):
            if row["state"] == "started" and row["op"] not in _P2P_OPS:
                started.setdefault(row["seq"], {}).setdefault(row["op"], []).extend(row["ranks"])
        for seq, ops in sorted(started.items()):
            if len(ops) > 1:
                a["mismatched_seq"], a["mismatched_ops"] = seq, {op: sorted(r) for op, r in sorted(ops.items())}
                # the odd ones out when one collective has fewer ranks than every other
                sizes = sorted(len(r) for r in ops.values())
                a["mismatched_ranks"] = sorted(next(r for r in ops.values() if len(r) == sizes[0])) if sizes[0] < sizes[1] \
                    else sorted(r for rs in ops.values() for r in rs)
                break
        msg = f"desync report: timeout at collective {a['op']} #{a['seq']}; lagging ranks {culprits}"
        if "mismatched_ops" in a:
            msg += f"; at #{a['mismatched_seq']} ranks started different collectives: " + ", ".join(
                f"{op} {r}" for op, r in a["mismatched_ops"].items())
        self.add(_Ev(Kind.DESYNC_REPORT, line=d.line, message=msg, severity=Severity.ERROR, attrs=a,
                     time=d.time, tq=d.tq, rank=d.rank, local_rank=d.local_rank))

    # -- python tracebacks -----------------------------------------------------------------
    def _tb_line(self, n: int, key: tuple, text: str, prefix) -> bool:
        tb = self.tb.get(key)
        # without a launcher prefix the lines of one traceback are near each other (code and
        # caret lines between frames); with one, other ranks' lines interleave
        gap = _MAX_TB_GAP if any(k is not None for k in key) else _MAX_TB_GAP_BARE
        if tb is not None and n - tb.last > gap:
            self._close_tb(key, truncated=tb.exc is None)
            tb = None
        if _TB_START.match(text):
            if tb is not None and tb.awaiting_chain:
                tb.awaiting_chain = False
                tb.frames = []
                tb.last = n
                return True
            if tb is not None:
                self._close_tb(key, truncated=tb.exc is None, superseded=True)
            spawn = self.spawn[1] if self.spawn is not None and 0 < n - self.spawn[0] <= 2 else None
            self.tb[key] = _Tb(start=n, last=n, ident=self.ident, spawn=spawn, headed=True)
            if prefix.ray is not None and 0 < n - self.ray_death.get(prefix.pid or 0, -_RAY_DEATH_BEFORE - 1) <= _RAY_DEATH_BEFORE:
                self.tb[key].ray_death = True
            pend = self.chain_pending.pop(key, None)
            if pend is not None and 0 < n - pend[0] <= 2:
                # The traceback of the exception raised while handling the one printed above
                # it, whose own traceback was not pasted: CPython prints a chain cause first,
                # then the chain line, then the later exception's traceback (Lib/traceback.py
                # TracebackException.format, _cause_message / _context_message). Cut short, its
                # missing exception line is no new failure: the exception above is its cause.
                self.tb[key].chained.append(pend[1])
            return True
        if tb is None:
            if _TB_CHAIN.match(text):
                prev = next((e for e in reversed(self.events[-4:]) if e.kind == Kind.EXCEPTION
                             and 0 < n - e.line <= 2 and not e.attrs.get("truncated")), None)
                if prev is not None:
                    self.chain_pending[key] = (n, str(prev.attrs.get("type") or ""))
                    return True
                return False
            if not _TB_FRAME.match(text):
                return False
            # Frames with no header before them: a traceback whose first line was cut
            # (a tail'ed log, a pasted excerpt). Opened here; its exception closes it.
            tb = self.tb[key] = _Tb(start=n, last=n, ident=self.ident)
        if tb.exc is not None:
            if _TB_CHAIN.match(text):
                tb.chained.append(tb.exc.attrs["type"])
                tb.exc = None
                tb.awaiting_chain = True
                tb.last = n
                return True
            if (n == tb.last + 1 and not tb.exc.attrs.get("text") and tb.exc.message.endswith(":")
                    and text.strip() and not _TB_FRAME.match(text) and not _TB_START.match(text)
                    and not _RULE_LINE.match(text)):
                # Python prints "Type: " + str(exc); a message that starts with a newline
                # (torch <= 1.5's multi-line asserts) puts its first words on the next line.
                tb.exc.attrs["text"] = text.strip()
                tb.exc.message = f"{tb.exc.message} {text.strip()}"
                tb.last = n
                return True
            self._close_tb(key)
            return False
        if tb.awaiting_chain:
            self._close_tb(key, truncated=True)
            return False
        if fm := _TB_FRAME.match(text):
            f = f"{fm.group('file')}:{fm.group('line')}"
            if fm.group("func"):
                f += f" in {fm.group('func')}"
            tb.frames.append(f)
            tb.last = n
            return True
        if tb.frames and n == tb.last + 1 and text.startswith("    ") and (c := text.strip()) and len(tb.code) < 64:
            # the frame's source line (CPython's traceback prints it indented under the frame)
            tb.code[len(tb.frames) - 1] = c[:240]
            tb.last = n
            return True
        if em := _EXC_LINE.match(text):
            typ, etext = em.group("type"), em.group("text") or ""
            rank, lr = prefix.rank, prefix.local_rank
            attrs: dict[str, Any] = {"type": typ, "text": etext}
            if tb.frames:
                attrs["frames_top"] = tb.frames[-1]
                attrs["frames"] = len(tb.frames)
                attrs.update(_c10d_call(tb))
            if tb.chained:
                attrs["chained"] = list(tb.chained)
            if tb.ray_death:
                attrs["ray_actor_death"] = True
            if prefix.rank is not None:
                # "[rankN]: Traceback ...": torch's sys.excepthook, set by init_process_group
                # (torch 2.13.0 torch/distributed/distributed_c10d.py init_process_group, lines 1921-1938: `excepthook_prefix =
                # f"[rank{get_rank()}]"`), prefixes a traceback only when nothing caught the exception:
                # that rank's process died of it.
                attrs["uncaught"] = True
            if tb.spawn is not None:
                attrs["spawn_process"] = tb.spawn
                lr = lr if lr is not None else tb.spawn
            base = dict(line=n, time=None, tq=None, rank=rank, local_rank=lr)
            if rank is None and tb.ident is not None:
                # the traceback a logging record printed (logger.exception): the record's rank and time
                base.update(rank=tb.ident["rank"], time=tb.ident["time"], tq=tb.ident["tq"])
            if (pm := _PG_PREFIX.search(etext)) and base["rank"] is None:
                pg_id = pm.group("id") or pm.group("id2")
                if pg_id == "0" or "(default_pg)" in pm.group(0):
                    base["rank"] = int(pm.group("rank"))
            if wm := _WORK.search(etext):
                attrs.update(self._work_attrs(wm))
            self._nccl_attrs(etext, attrs, base)
            tb.exc = _Ev(Kind.EXCEPTION, message=text.strip(), severity=Severity.ERROR, attrs=attrs, **base)
            tb.last = n
            self._exception_specials(n, typ, etext, base)
            return True
        return False  # some other line (a c10 log, a desync line) in the middle; keep the block open

    def _no_grad_rank(self, n: int, key: tuple, rank: int) -> None:
        """The rank DDP's unused-parameter error names: the raising exception's rank (the
        open traceback's of this prefix, else the last exception event a few lines up)."""
        tb = self.tb.get(key)
        cands = [tb.exc] if tb is not None and tb.exc is not None else []
        cands += [e for e in reversed(self.events[-8:]) if e.kind == Kind.EXCEPTION]
        for ev in cands:
            if 0 < n - ev.line <= 12:
                if ev.rank is None:
                    ev.rank = rank
                ev.attrs.setdefault("unused_params_rank", rank)
                return

    def _close_tb(self, key: tuple, truncated: bool = False, superseded: bool = False) -> None:
        tb = self.tb.pop(key, None)
        if tb is None:
            return
        if tb.exc is not None:
            self.add(tb.exc)
        elif truncated:
            self.ctx.warn("pytorch: traceback without a final exception line (truncated?)", tb.start, "")
            if tb.headed and not tb.chained and (tb.frames or not superseded):
                # Its exception line never arrived: srun --kill-on-bad-exit signals the step as
                # soon as one task exits, and the task's last stderr lines can be lost on the way
                # (recorded, Slurm 22.05: sometimes one frame survives, sometimes only the header).
                # The frames, if any, still say where a Python process died. Frames with no
                # header are a cut excerpt, and a bare header followed by another header is two
                # processes' tracebacks interleaved: too little to say more.
                rank, lr = key[2], key[1]
                if rank is None and tb.ident is not None:
                    rank = tb.ident["rank"]
                top = tb.frames[-1] if tb.frames else ""
                where = f"after {len(tb.frames)} frame(s), innermost {top}" if tb.frames else "after its header line"
                self.add(_Ev(Kind.EXCEPTION, line=tb.last, severity=Severity.WARNING if tb.ray_death else Severity.ERROR,
                             message=f"traceback cut off {where}; its exception line is missing"
                             + ("; a Ray process's reprint of a dead actor's error" if tb.ray_death else ""),
                             attrs={"type": "", "text": "", "truncated": True, "frames_top": top,
                                    "frames": len(tb.frames), "frames_all": tb.frames[-8:],
                                    **({"uncaught": True} if key[2] is not None else {}),
                                    **({"ray_actor_death": True} if tb.ray_death else {})},
                             time=tb.ident["time"] if tb.ident else None, tq=tb.ident["tq"] if tb.ident else None,
                             rank=rank, local_rank=lr if lr is not None else tb.spawn))

    # -- ChildFailedError summary ------------------------------------------------------------
    def _rc_line(self, n: int, key: tuple, text: str, prefix) -> bool:
        rc = self.rc.get(key)
        if rc is not None and n - rc.last > 50:
            self._close_rc(key)
            rc = None
        if _RC_FAILURES.match(text) or _RC_ROOT.match(text):
            if rc is None:
                rc = self.rc[key] = _Rc(last=n)
                # the ChildFailedError traceback line before us is done
                if key in self.tb:
                    self._close_tb(key)
            else:
                self._close_entry(rc, prefix)
            rc.root = bool(_RC_ROOT.match(text))
            rc.last = n
            return True
        if rc is None:
            return False
        rc.last = n
        if _RC_NONE.match(text):
            return True
        if m := _RC_IDX.match(text):
            self._close_entry(rc, prefix)
            rc.entry = {"root": rc.root, "idx": int(m.group("idx"))}
            rc.entry_line = n
            return True
        if _RC_BORDER.match(text):
            self._close_rc(key)
            return True
        field = _RC_FIELD.match(text)
        if field and field.group("key") == "time" and (rc.entry is None or "time_text" in rc.entry):
            # "time" opens each entry; the "[N]:" index line before it is not prefiltered
            # (it looks like every launcher-prefixed line).
            self._close_entry(rc, prefix)
            rc.entry = {"root": rc.root}
            rc.entry_line = n
        if rc.entry is None:
            return False
        if m := field:
            k, v = m.group("key"), m.group("val")
            e = rc.entry
            rc.in_tb = False
            if k == "time":
                e["time_text"] = v
            elif k == "host":
                e["host"] = v
            elif k == "rank":
                if rm := _RC_RANK.match(v):
                    e["rank"], e["local_rank"] = int(rm.group("rank")), int(rm.group("lr"))
                else:
                    self.ctx.warn("pytorch: ChildFailedError rank field unparsed", n, text)
            elif k == "exitcode":
                if xm := _RC_EXIT.match(v):
                    e["exitcode"], e["pid"] = int(xm.group("code")), int(xm.group("pid"))
                    if sig := _signame(e["exitcode"]):
                        e["signal"] = sig
                else:
                    self.ctx.warn("pytorch: ChildFailedError exitcode field unparsed", n, text)
            elif k == "error_file":
                e["error_file"] = None if v == "<N/A>" else v
            elif k == "traceback":
                e["traceback"] = v
                rc.in_tb = v.startswith("Traceback")
            return True
        if rc.in_tb and text.startswith("  "):
            # py_callstack indented by two: frames and the final exception line
            inner = text[2:]
            if em := _EXC_LINE.match(inner):
                rc.entry["error"] = inner.strip()
                self._exception_specials(n, em.group("type"), em.group("text") or "",
                                         dict(line=n, time=None, tq=None, rank=rc.entry.get("rank"),
                                              local_rank=rc.entry.get("local_rank")))
            return True
        return False

    def _close_entry(self, rc: _Rc, prefix) -> None:
        e, rc.entry = rc.entry, None
        if e is None:
            return
        time = tq = None
        if e.get("time_text"):
            time, tq = iso_to_ns(e["time_text"], self.ctx)
            if time is None:
                self.ctx.warn("pytorch: ChildFailedError time unparsed", rc.entry_line, e["time_text"])
        host = e.get("host")
        attrs = dict(e)
        if host:
            attrs["host"] = host.split(".", 1)[0] if not regex.fullmatch(r"[\d.]+", host) else host
        label = "root cause" if e["root"] else "failure"
        msg = (f"ChildFailedError {label}: rank {e.get('rank')} (local_rank {e.get('local_rank')}) exitcode "
               f"{e.get('exitcode')} pid {e.get('pid')} on {host}: {e.get('traceback', '')}")
        self.add(_Ev(Kind.ROOT_CAUSE_REPORT, line=rc.entry_line, message=msg, severity=Severity.ERROR, attrs=attrs,
                     time=time, tq=tq, host=host, rank=e.get("rank"), local_rank=e.get("local_rank"), pid=e.get("pid")))

    def _close_rc(self, key: tuple) -> None:
        rc = self.rc.pop(key, None)
        if rc is not None:
            self._close_entry(rc, None)


SOURCE = PytorchSource()
