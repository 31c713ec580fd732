"""NCCL_DEBUG output (VERSION/WARN/INFO/TRACE lines, NCCL_DEBUG_FILE files).

NCCL writes to the process's stdout (or the ``NCCL_DEBUG_FILE`` file, one process per
file), so its lines usually sit behind ``srun --label``/torchrun prefixes or other text;
the NCCL prefix is searched anywhere in the line. Sample lines (2.18, then 2.26+ with
the default WARN-only timestamp, then master with ``({func})``)::

    node001:2718:2718 [3] NCCL INFO NCCL version 2.18.5+cuda12.2
    node001:2718:3140 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with error 12, ...
    [2026-03-02 14:05:11] node004:51001:51187 [0] misc/socket.cc:63 NCCL WARN socketProgress: Connection closed by remote peer node007<43210>
    [2026-09-14 08:12:44.100512] node012:880:1012 [1] transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError) NCCL WARN NET/IB: ...

Prefix fields: optional ``[ts] `` (>= 2.26, process-local time without zone, any
strftime format incl. ``%Nf`` sub-seconds; read as local time -> ``ctx.local_ns``), short
host, pid, tid, ``[dev]`` = the calling thread's CUDA ordinal (weak: proxy/bootstrap
threads often print ``[0]``), for WARN ``file:line`` and on master ``(func)``; TRACE lines
(``make TRACE=1`` builds) carry ``ms func:line`` instead. Bare VERSION-level lines are just
``NCCL version 2.18.5+cuda12.2``.

Only structured lines become events; INFO chatter (Channel/Ring/Tree/P2P/tuning) is kept
out by the prefilter. Kinds and attrs (every prefixed event also has ``tid`` and, where
present, ``srun_task``, ``trace_ms``; WARN-derived events have ``file``, ``line_in_src``,
``func``):

* version: ``component`` ("nccl" | "cuda_driver"), ``version``, ``cuda_build`` (nccl),
  ``raw`` (driver int, e.g. 12020), ``origin`` ("ras" for the ncclras banner).
* comm_init: ``phase`` (start | complete | topology), ``comm`` (pointer), ``rank`` and
  ``nranks`` (communicator-local, so the event's rank column stays empty), ``cuda_dev``,
  ``nvml_dev``, ``bus_id`` (raw hex), ``comm_id``, ``func``, ``init_rank`` (master
  ``[Rank r]``), split: ``parent``, ``color``, ``key``, ``split_count``; topology:
  ``nnodes``, ``local_ranks``, ``local_rank``, ``mnnvl``. gpu = PCI from busId,
  gpu_index = cudaDev.
* comm_abort: ``phase`` (start | complete), ``action`` (abort | destroy | revoke),
  ``comm``, ``rank``, ``nranks``, ``cuda_dev``, ``bus_id``, ``result``.
* net_config: ``transport`` (ib | socket | bootstrap | plugin | <network name>),
  ``devices`` (``mlx5_0:1/IB``...), ``hcas``, ``ifaces`` ([{name, ip, port}]),
  ``oob_iface``, ``oob_ip``, ``relaxed_ordering``, ``network``, ``plugin``,
  ``plugin_type``, ``plugin_api``, ``net_plugin_kind`` (internal | external: which network plugin
  NCCL runs on, from ``NET/Plugin: ... Using internal network plugin`` / ``Loaded net plugin`` /
  ``Plugin Path : .../libnccl-net.so``), ``plugin_missing``, ``plugin_path``.
  Settings in force: ``transport`` "env" with ``setting`` (``NCCL_IB_TIMEOUT``), ``value``
  (as printed, ``22``), ``origin`` (nccl_env: ``... set by environment to 22.``; nccl_net:
  socket.cc's ``NCCL_SOCKET_IFNAME set to eth0``); "gdr" with ``network``, ``gdr`` (bool),
  ``hca_index``, ``hcas`` (``NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'``);
  "channels" with ``coll_channels``, ``collnet_channels``, ``nvls_channels``,
  ``p2p_channels``, ``p2p_channels_per_peer``.
* network_error: ``transport`` (ib | socket | proxy | <NET/x name>), ``error_type``
  (completion | async_event | verbs_call | connection_closed | io | connect | accept |
  no_interface | truncated | proxy | other); IB completions: ``status``,
  ``status_name`` (IBV_WC_*), ``opcode``, ``opcode_name``, ``vendor_err``, ``len``,
  ``req_type``, ``peer`` (ip or name), ``peer_port``, ``hca``, ``local_gid``,
  ``remote_gid``; async: ``event``, ``event_code``, ``hca``, ``port``, ``object``;
  verbs: ``op``, ``errno_text``; sockets: ``op`` (recv | send | connect | accept),
  ``peer``, ``peer_port``, ``errno_text``, ``retries``, ``func``; proxy: ``op``,
  ``peer_rank``, ``retcode``.
* nccl_error: propagation stacks (consecutive ``file:line -> code`` INFO lines of one
  thread collapsed into one event at the innermost frame): ``code``, ``result``
  (ncclResult_t name), ``file``, ``line_in_src``, ``func``, ``errno_text``, ``frames``,
  ``outer_code``, ``async``, ``warn_line`` (the WARN of the same thread it unwinds
  from); version mismatch: ``rank``, ``version``, ``rank2``,
  ``version2`` (decoded "2.18.5"), ``version_code``/``version2_code``; other WARNs:
  ``file``, ``line_in_src``, ``func``, ``call``/``errno_text`` for ``Call to X failed``.
* cuda_error / cuda_oom: ``error`` (cudaGetErrorString text), ``code`` (driver API only),
  ``device`` (the prefix's [dev]).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

import regex

from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import LineSource, feed_guarded, ParseContext, epoch_ns, pci_from_nccl_busid, split_prefix
from crashscope.sources.base import lazy_compile

# Rust-regex and Python-regex compatible. Matches WARN lines and only the structured INFO
# payloads; "NCCL INFO Channel 00/0 : ..." and other chatter must not match.
PREFILTER = (
    r"NCCL WARN "
    r"|NCCL version \d[^ ]*\+cuda|NCCL version \d+\.\d+\.\d+ compiled"
    r"|NCCL INFO cudaDriverVersion "
    r"|- Init (?:START|COMPLETE)"
    r"|- (?:Abort|Destroy|Revoke) (?:START|COMPLETE)"
    r"|nNodes \d+ localRanks \d+ localRank"
    r"|NCCL INFO (?:NET/IB|NET/Socket) : Using"
    r"|NCCL INFO Bootstrap ?: Using"
    r"|NCCL INFO Using network "
    r"|NCCL INFO NET/Plugin ?: Loaded "
    r"|NCCL INFO NET/Plugin ?: (?:Could not find|Using internal|No plugin found)"
    r"|NCCL INFO Plugin Path : "
    r"|NCCL INFO NCCL_\w+ set (?:by environment )?to "
    r"|NCCL INFO NET/\w+ : GPU Direct RDMA (?:Enabled|Disabled) for HCA"
    r"|NCCL INFO \d+ coll channels, "
    r"|NCCL INFO [\w./+-]+\.(?:cc|cu|cpp|c|h):\d+ (?:\([^)]*\) )?-> \d"
)

_PREFIX = lazy_compile(
    r"""(?:\[(?P<ts>[^\]]{4,64})\]\ )?                     # default "[%F %T] " (>= 2.26)
        (?P<host>[^\s:\[\]]+)
        (?::(?P<pid>\d+):(?P<tid>\d+)[ ]                     # host:pid:tid
         |[ ](?=\[-?\d+\]\ ))                               # or the host alone, seen in the wild
        (?:\[(?P<dev>-?\d+)\]\ )?                           # absent on CALL lines
        (?:(?P<ms>\d+\.\d+)\ )?                             # TRACE: ms since logger init
        (?:(?|(?P<file>[^\s\[\]]+):(?P<sline>\d+)\          # WARN file:line / TRACE func:line
             |(?P<file>[^\s\[\]]+\.(?:cc|cu|cpp|c|h))\ (?P<sline>\d+)\ )  # very old: "file line"
           (?:\((?P<func>[^)\s]*)\)\ )?)?                   # master: (func)
        NCCL\ (?P<level>INFO|WARN|TRACE|CALL)(?:\ (?P<msg>.*))?$""",
    regex.VERBOSE,
)

# A WARN pasted without its "host:pid:tid [dev] " prefix (issue bodies, NCCL_DEBUG_FILE
# lines copied from a message): "[file:line ][(func) ]NCCL WARN <msg>", the file being a
# source path or, for net plugins (aws-ofi-nccl), the function name.
_BARE_WARN = lazy_compile(r"(?:^|\s)(?:(?P<file>[^\s\[\]]+):(?P<sline>\d+) (?:\((?P<func>[^)\s]*)\) )?)?NCCL WARN (?P<msg>.*)$")

_MISMATCHED_COLL = lazy_compile(r"Mismatched collective detected, please check your collective calls at and around rank (\d+)")

_BARE_VERSION = lazy_compile(
    r"NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>\d+\.\d+)"
    r"|NCCL version (?P<rver>\d+\.\d+\.\d+)(?P<rsuffix>\S*) compiled with CUDA (?P<rcuda>\d+\.\d+)"
)

# -- timestamps (NCCL_DEBUG_TIMESTAMP_FORMAT is any strftime; try the common shapes) --------
_TS_ISO = lazy_compile(
    r"""(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T\ _](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)
        (?:[.,](?P<frac>\d{1,9}))?
        (?:\ ?(?P<zone>Z|UTC|[+-]\d\d:?\d\d))?""",
    regex.VERBOSE,
)
_TS_SYSLOG = lazy_compile(
    r"""(?:[A-Z][a-z]{2}\ )?(?P<mon>[A-Z][a-z]{2})\ +(?P<d>\d{1,2})\ (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)
        (?:[.,](?P<frac>\d{1,9}))?(?:\ (?P<y>\d{4}))?""",
    regex.VERBOSE,
)
_TS_EPOCH = lazy_compile(r"(?P<s>1\d{9})(?:\.(?P<frac>\d{1,9}))?")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

# -- INFO payloads --------------------------------------------------------------------------
_VERSION = lazy_compile(r"NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>\d+\.\d+)")
_DRIVER = lazy_compile(r"cudaDriverVersion (?P<v>\d+)")
_INIT = lazy_compile(
    r"""(?:\[Rank\ (?P<irank>-?\d+)\]\ )?(?:(?P<func>\w+)\ )?
        comm\ (?P<comm>\S+)\ rank\ (?P<rank>-?\d+)\ nranks\ (?P<nranks>\d+)\ cudaDev\ (?P<cdev>-?\d+)
        (?:\ nvmlDev\ (?P<nvml>-?\d+))?\ busId\ (?P<bus>[0-9a-fA-F]+)
        (?:\ parent\ (?P<parent>\S+)(?:\ splitCount\ (?P<splitcount>\d+))?
           \ color\ (?P<color>-?\d+)\ key\ (?P<key>-?\d+))?     # ncclCommSplit
        (?:\ commId\ (?P<commid>0x[0-9a-fA-F]+))?
        \ ?-\ Init\ (?P<phase>START|COMPLETE)""",  # 2.23 split prints "key %d- Init"
    regex.VERBOSE,
)
_TOPO = lazy_compile(
    r"""comm\ (?P<comm>\S+)\ rank\ (?P<rank>-?\d+)\ nRanks\ (?P<nranks>\d+)\ nNodes\ (?P<nnodes>\d+)
        \ localRanks\ (?P<lranks>\d+)\ localRank\ (?P<lrank>-?\d+)(?:\ MNNVL\ (?P<mnnvl>\d+))?""",
    regex.VERBOSE,
)
_ABORT = lazy_compile(
    r"""comm\ (?P<comm>\S+)\ rank\ (?P<rank>-?\d+)\ n[Rr]anks\ (?P<nranks>\d+)\ cudaDev\ (?P<cdev>-?\d+)
        \ busId\ (?P<bus>[0-9a-fA-F]+)\ -\ (?P<action>Abort|Destroy|Revoke)\ (?P<phase>START|COMPLETE)
        (?:,\ result\ (?P<res>-?\d+))?""",
    regex.VERBOSE,
)
_NET_IB = lazy_compile(r"NET/IB : Using(?P<devs>.*?)\s*(?P<ro>\[RO\])?\s*;\s*OOB (?P<oobif>[^:\s]+):(?P<oob>\S+)")
_IB_DEV = lazy_compile(r"\[\d+\](?P<dev>(?P<hca>[^:\s\[]+):\d+\S*?/(?P<link>\w+))")
_NET_SOCK = lazy_compile(r"NET/Socket : Using(?P<ifs>.*)")
_BOOTSTRAP = lazy_compile(r"Bootstrap ?: Using(?P<ifs>.*)")
_IFACE = lazy_compile(r"(?:\[\d+\])?(?P<name>[^\s:\[\]]+):(?P<ip>[^\s<]+)<(?P<port>\d+)>")
_USING_NET = lazy_compile(r"Using network (?P<net>.+?)\s*$")
_PLUGIN = lazy_compile(r"NET/Plugin ?: Loaded (?P<type>net|coll|collnet) plugin (?P<name>.+?) \(v(?P<api>\d+)\)")
# No external net plugin: NCCL >= 2.23 src/plugin/net.cc "NET/Plugin: Could not find: %s. Using internal network plugin.";
# 2.19-2.22 "NET/Plugin: Using internal network plugin."; older "NET/Plugin : No plugin found (libnccl-net.so), using
# internal implementation". An external one: "NET/Plugin: Loaded net plugin <name> (v<api>)", NCCL >= 2.23 src/plugin/
# plugin_open.cc "Plugin Path : <path of the library dlopen'ed>".
_PLUGIN_INTERNAL = lazy_compile(r"NET/Plugin ?: (?:Could not find: (?P<lib>\S+?)\.? Using internal network plugin|Using internal network plugin|No plugin found(?: \((?P<lib2>[^)]*)\))?, using internal implementation)")
_PLUGIN_PATH = lazy_compile(r"Plugin Path : (?P<path>\S+)")
# The settings in force (src/misc/param.cc ncclLoadParam "%s set by environment to %lld.",
# socket.cc "NCCL_SOCKET_IFNAME set by environment to %s" / "NCCL_SOCKET_IFNAME set to %s",
# graph/paths.cc "%s set by environment to %s" for GDR levels, tuning.cc NCCL_ALGO/NCCL_PROTO;
# graph/topo.cc "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"; init.cc "%d coll channels, ...").
_ENV_SET = lazy_compile(r"(?P<key>NCCL_\w+) set (?P<by>by environment )?to (?P<val>.*?)\.?\s*$")
_GDR_HCA = lazy_compile(r"NET/(?P<net>\w+) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<n>\d+) '(?P<hca>[^']*)'")
_CHANNELS = lazy_compile(r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels, (?P<pp>\d+) p2p channels per peer")
_PROPAGATE = lazy_compile(
    r"""(?P<file>[\w./+-]+):(?P<line>\d+)\ (?:\((?P<func>[^)]*)\)\ )?->\ (?P<code>\d+)
        (?:\ \((?P<err>[^)]*)\))?(?P<async>\ \[Async\ thread\])?""",
    regex.VERBOSE,
)

# -- WARN payloads --------------------------------------------------------------------------
_IB_COMPLETION = lazy_compile(
    r"""NET/IB(?:/GIN)?\ ?:\ Got\ completion\ from\ peer\ (?P<peer>\S+)\ with\ (?:
          error\ (?P<st1>\d+),\ opcode\ (?P<op1>\d+),\ len\ (?P<len1>-?\d+),\ vendor\ err\ (?P<v1>\d+)   # <= 2.20
        | status=(?P<st2>\d+)\ opcode=(?P<op2>\d+)\ len=(?P<len2>-?\d+)\ vendor\ err\ (?P<v2>\d+)       # 2.21-2.30.4
        | status=(?P<sname>\w+)\((?P<st3>\d+)\)\ opcode=(?P<opname>\w+)\((?P<op3>\d+)\)\ vendor_err=(?P<v3>\d+)  # master
        )(?:\ \((?P<rtype>[^)]*)\))?(?P<rest>.*)""",
    regex.VERBOSE,
)
_LOCAL_GID = lazy_compile(r"localGid (?P<g>\S+)")
_REMOTE_GID = lazy_compile(r"remoteGids? ?(?P<g>\S+)")  # >= 2.23 prints " remoteGids" + gid, no space
_HCA = lazy_compile(r"\bhca (?P<h>\S+)")
_IB_ASYNC = lazy_compile(
    r"""NET/IB\ ?:\ (?:
          Got\ async\ event\ :\ (?P<ev0>.+)                                       # <= 2.20
        | (?P<hca>[^\s:]+):(?P<port>\d+)\ (?:
              Got\ async\ (?:error\ )?event\ ?:\ (?P<ev1>.+)                       # 2.21 / 2.23+
            | Got\ non-fatal\ async\ event:\ (?P<ev2>.+?)(?:\((?P<code>\d+)\))?$   # master
            | async\ fatal\ event(?:\ on\ (?P<obj>CQ|QP|SRQ)\b.*)?:\ (?P<ev3>[^:]+)$
            | unknown\ event\ type\ \((?P<code2>\d+)\)
          ))""",
    regex.VERBOSE,
)
_IBV_CALL = lazy_compile(
    r"""Call\ to\ (?P<fn>ibv_\w+)\ failed(?:\ with\ (?:
          error\ (?P<err>.+?)(?:\ errno\ (?P<errno>\d+))?               # ibvwrap macros
        | (?P<errno2>\d+)\ (?P<err2>[^,]+)(?:,\ (?P<qp>.*))?           # ibv_modify_qp + qpMsg
        ))?$""",
    regex.VERBOSE,
)
_SOCK_CLOSED = lazy_compile(r"(?:(?P<func>\w+)|Net ): Connection closed by remote peer (?P<peer>\S+)")
_SOCK_IO = lazy_compile(r"(?:(?P<func>\w+)|Net ): Call to (?P<op>recv|send)(?: from| to)? (?P<peer>\S+) failed : (?P<err>.+)")
_SOCK_CONNECT = lazy_compile(
    r"""(?:(?P<func>\w+)|Net\ ):\ [Cc]onnect\ to\ (?P<peer>\S+)\ (?:
          failed\ :\ (?P<err>.+)
        | returned\ (?P<err2>.+?),\ exceeded\ error\ retry\ count\ after\ (?P<n>\d+)\ attempts
        | returned\ (?P<err3>.+))""",
    regex.VERBOSE,
)
_SOCK_POLL = lazy_compile(r"(?P<func>ncclOsSocketPollConnect) to (?P<peer>\S+) failed with error (?P<err>.+)")
_SOCK_EXCEEDED = lazy_compile(r"(?P<func>\w+): exceeded (?P<what>retries|timeouts) \((?P<n>\d+)\)")
_SOCK_ACCEPT = lazy_compile(r"(?P<func>\w+): (?:Accept failed: (?P<err>.+)|exceeded error retry count after (?P<n>\d+) attempts, (?P<err2>.+))")
_SOCK_TRUNC = lazy_compile(r"NET/Socket ?: peer (?P<peer>\S+) message truncated")
_NO_IFACE = lazy_compile(r"Net : No interface found in the same subnet as remote address (?P<peer>\S+)")
_PROXY = lazy_compile(
    r"""\[(?:Proxy\ [Ss]ervice(?:\ UDS)?(?:\ (?P<tp>\d+))?|Proxy\ Progress|Service\ thread)\]\ (?P<what>.*)
      | (?P<func>ncclProxy\w+)\ call\ to\ tpRank\ .*failed\ :\ (?P<ret>-?\d+)""",
    regex.VERBOSE,
)
# A launcher's rank tag right before the NCCL prefix: OpenMPI ``--tag-output``
# ``[jobid,rank]<stdout>:`` (orte/mca/iof/base/iof_base_output.c; ``--timestamp-output`` puts
# ctime() or an ISO stamp in front), horovodrun's ``[rank]<stdout>:`` (horovod/runner/common/
# util/safe_shell_exec.py prefix_connection, asctime() in front), and the bare ``[rank]`` glued to
# the host that pastes of horovodrun output show. The MPI rank is the training rank there.
_RANK_TAG = lazy_compile(r"\[(?:(?P<job>\d{1,10}),)?(?P<rank>\d{1,7})\](?:<(?P<stream>stdout|stderr|stddiag)>:)?\s?$")
_PROXY_EXEC = lazy_compile(r"Failed to execute operation (?P<op>\S+) from rank (?P<rank>\d+), retcode (?P<ret>-?\d+)")
_PROXY_PROGRESS = lazy_compile(r"operation=(?P<op>\S+?), res=(?P<ret>-?\d+)")
_OTHER_NET = lazy_compile(r"NET/(?P<t>[A-Za-z]+)")
_CUDA = lazy_compile(r"Cuda failure (?:(?P<code>\d+) )?'(?P<err>[^']*)'?")
_MISMATCH = lazy_compile(r"Mismatched NCCL version detected : rank (?P<r1>\d+) version (?P<v1>\d+) rank (?P<r2>\d+) version (?P<v2>\d+)")
_ABORT_STATE = lazy_compile(r"Comm (?P<comm>\S+) is in abort state")
_SYSCALL = lazy_compile(r"Call to (?P<fn>\w+) failed ?: ?(?P<err>.+)")
_ERRORISH = lazy_compile(r"(?i)fail|error|abort|timeout|timed out|unable|cannot|could not|invalid|mismatch")

WC_STATUS = (
    "IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR",
)  # libibverbs enum ibv_wc_status order (NCCL's ibvcore.h)
WC_OPCODE = {0: "IBV_WC_SEND", 1: "IBV_WC_RDMA_WRITE", 2: "IBV_WC_RDMA_READ", 3: "IBV_WC_COMP_SWAP",
             4: "IBV_WC_FETCH_ADD", 5: "IBV_WC_BIND_MW", 128: "IBV_WC_RECV", 129: "IBV_WC_RECV_RDMA_WITH_IMM"}
NCCL_RESULT = ("ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
               "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout")

# Frames of one error stack further apart than this (in file lines) start a new stack.
_STACK_GAP = 400


def nccl_version_str(code: int) -> str:
    """NCCL_VERSION_CODE to "M.m.p": X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


# (module patterns, not regex.search(string, ...): its cache lookup was a tenth of an INFO line's parse)
_PEER = lazy_compile(r"(?P<a>.+?)<(?P<p>\d+)>[.,;:]?")
_ABORT_WORDS = lazy_compile(r"- (?:Abort|Destroy|Revoke) (?:START|COMPLETE)")
_ON_DEV = lazy_compile(r"on dev (?P<h>[^:\s,]+):(?P<p>\d+)")


def _split_peer(peer: str) -> tuple[str, int | None]:
    """``10.0.3.21<33811>`` / ``node007<43210>`` / ``fe80::1<4567>`` -> (addr, port)."""
    m = _PEER.fullmatch(peer)
    if m:
        return m.group("a"), int(m.group("p"))
    return peer.rstrip(".,;:"), None


class NcclSource(LineSource):
    name = "nccl"
    description = "NCCL_DEBUG output (VERSION/WARN/INFO/TRACE lines, NCCL_DEBUG_FILE files)"
    filename_hints = ("nccl*.log", "nccl*.txt", "*.nccl", "nccl_debug*", "nccl.*")
    prefilter = PREFILTER

    # -- sniff ----------------------------------------------------------------------------
    def sniff(self, head: str, name: str) -> float:
        lines = [ln for ln in head.splitlines()[:4000] if ln.strip()]
        if not lines:
            return 0.0
        n = 0
        for ln in lines:
            if "NCCL " not in ln:
                continue
            if _PREFIX.search(ln) or _BARE_VERSION.search(ln):
                n += 1
        if n == 0:
            return 0.0
        ratio = n / len(lines)
        if ratio >= 0.6:
            return 0.95
        # NCCL lines are a minority among srun/pytorch output: the file is mixed job output.
        return min(0.6, 0.3 + 0.5 * ratio)

    # -- parse ----------------------------------------------------------------------------
    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        stacks: dict[Any, Any] = {}  # (host, pid, tid) -> open error stack; "warn" -> last WARN lines
        ts_cache: dict[str, tuple[int | None, TimeQuality]] = {}
        feed_guarded(ctx, lines, lambda n, raw: self._line(n, raw, ctx, stacks, ts_cache))
        stacks.pop("warn", None)
        for st in stacks.values():
            self._flush_stack(st, ctx)
        ctx.rows.sort(key=lambda r: r["line"] or 0)  # stacks are emitted when they close

    def _line(self, lineno: int, raw: str, ctx: ParseContext, stacks: dict, ts_cache: dict) -> None:
        pre, text = split_prefix(raw)
        m = _PREFIX.search(text)
        if m is None:
            self._bare(lineno, text, pre, ctx, ts_cache)
            return
        level = m.group("level")
        msg = (m.group("msg") or "").rstrip()
        before = text[: m.start()]  # what precedes the NCCL prefix (its "[ts] " included)
        tag = _RANK_TAG.search(before[-40:]) if before else None
        if tag is not None and tag.group("job") is None and tag.group("stream") is None and not tag.group(0).endswith("]"):
            tag = None  # a bare "[N]" counts only glued to the host, as in pastes of horovodrun output
        if tag is not None:
            before = before[: len(before) - len(tag.group(0))]
        time, tq = self._time(before, m.group("ts"), ctx, ts_cache)
        base: dict[str, Any] = {
            "time": time,
            "time_quality": tq,
            "host": m.group("host"),
            "pid": _int(m.group("pid")),
            "gpu_index": _int(m.group("dev")),
            "rank": pre.rank if pre.rank is not None else (int(tag.group("rank")) if tag else None),
            "local_rank": pre.local_rank,
        }
        extra: dict[str, Any] = {"tid": _int(m.group("tid"))} if m.group("tid") else {}
        if pre.task is not None:
            extra["srun_task"] = pre.task
        if m.group("ms"):
            extra["trace_ms"] = m.group("ms")
        if level == "WARN":
            extra["file"] = m.group("file")
            extra["line_in_src"] = _int(m.group("sline"))
            if m.group("func"):
                extra["func"] = m.group("func")
            key = (m.group("host"), m.group("pid"), m.group("tid"))
            stacks.setdefault("warn", {})[key] = lineno
            if key in stacks:  # a new WARN starts a new error story on this thread
                self._flush_stack(stacks.pop(key), ctx)
            self._warn(lineno, raw, msg, base, extra, ctx)
        elif level in ("INFO", "TRACE"):
            if level == "TRACE" and m.group("file"):
                extra["func"] = m.group("file")
            self._info(lineno, raw, msg, base, extra, ctx, stacks, (m.group("host"), m.group("pid"), m.group("tid")))

    # -- helpers --------------------------------------------------------------------------
    def _emit(self, ctx: ParseContext, kind: Kind, lineno: int, msg: str, base: dict, extra: dict,
              attrs: dict, severity: Severity = Severity.INFO, **over: Any) -> None:
        a = {k: v for k, v in {**attrs, **extra}.items() if v is not None}
        kw = {**base, **over}
        ctx.emit(kind, lineno, msg, severity=severity, attrs=a, **kw)

    def _time(self, before: str, ts: str | None, ctx: ParseContext, cache: dict) -> tuple[int | None, TimeQuality]:
        """Time of a prefix: the ``[ts]`` group or a custom-format stamp right before the host.
        A zoned stamp a collector put in front of the line (``kubectl logs --timestamps``
        RFC 3339, journald) beats NCCL's own zone-less ``[ts]``, which is the process's local time."""
        if ts is not None and before.strip():
            outer = self._time(before, None, ctx, cache)
            if outer[1] == TimeQuality.EXACT:
                return outer
        cand = ts if ts is not None else before.rstrip()
        if not cand:
            return None, TimeQuality.MISSING
        if cand in cache:
            return cache[cand]
        r = self._parse_ts(cand, ctx)
        if len(cache) < 100_000:
            cache[cand] = r
        return r

    @staticmethod
    def _parse_ts(cand: str, ctx: ParseContext) -> tuple[int | None, TimeQuality]:
        # The stamp must end the candidate (it is glued to the host); custom formats may
        # wrap it in other brackets.
        tail = cand[-64:].rstrip(" ]>)|:-")
        for m in _TS_ISO.finditer(tail):
            if m.end() != len(tail):
                continue
            frac = m.group("frac") or ""
            ns = int((frac + "000000000")[:9]) if frac else 0
            y, mo, d, hh, mi, ss = (int(m.group(k)) for k in ("y", "mo", "d", "hh", "mi", "ss"))
            zone = m.group("zone")
            if zone:
                try:
                    if zone in ("Z", "UTC"):
                        tz = timezone.utc
                    else:
                        digits = zone[1:].replace(":", "")
                        off = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]))
                        tz = timezone(off if zone[0] == "+" else -off)
                    return epoch_ns(datetime(y, mo, d, hh, mi, ss, tzinfo=tz)) + ns, TimeQuality.EXACT
                except ValueError:
                    return None, TimeQuality.MISSING
            t = ctx.local_ns(y, mo, d, hh, mi, ss, ns)
            return (t, ctx.local_quality()) if t is not None else (None, TimeQuality.MISSING)
        for m in _TS_SYSLOG.finditer(tail):
            if m.end() != len(tail) or m.group("mon") not in _MONTHS:
                continue
            frac = m.group("frac") or ""
            ns = int((frac + "000000000")[:9]) if frac else 0
            args = (_MONTHS[m.group("mon")], int(m.group("d")), int(m.group("hh")), int(m.group("mi")), int(m.group("ss")), ns)
            t = ctx.local_ns(int(m.group("y")), *args) if m.group("y") else ctx.yearless_ns(*args)
            return (t, ctx.local_quality()) if t is not None else (None, TimeQuality.MISSING)
        m = _TS_EPOCH.fullmatch(tail.lstrip("[ "))
        if m:
            frac = m.group("frac") or ""
            return int(m.group("s")) * 1_000_000_000 + (int((frac + "000000000")[:9]) if frac else 0), TimeQuality.EXACT
        return None, TimeQuality.MISSING

    def _bare(self, lineno: int, text: str, pre: Any, ctx: ParseContext, ts_cache: dict) -> None:
        """Lines without a host:pid:tid prefix: VERSION-level banners, ncclras banner, and
        WARN lines pasted without their prefix (no host, pid or device)."""
        w = _BARE_WARN.search(text)
        if w is not None:
            time, tq = self._time(text[: w.start()], None, ctx, ts_cache)
            base = {"time": time, "time_quality": tq, "host": None, "pid": None, "gpu_index": None,
                    "rank": pre.rank, "local_rank": pre.local_rank}
            extra: dict[str, Any] = {"file": w.group("file"), "line_in_src": _int(w.group("sline")), "prefix": "none"}
            if w.group("func"):
                extra["func"] = w.group("func")
            if pre.task is not None:
                extra["srun_task"] = pre.task
            self._warn(lineno, text, w.group("msg").rstrip(), base, extra, ctx)
            return
        m = _BARE_VERSION.search(text)
        if m is None:
            ctx.warn("NCCL line without a host:pid:tid prefix", lineno, text)
            return
        time, tq = self._time(text[: m.start()], None, ctx, ts_cache)
        if m.group("ver"):
            attrs = {"component": "nccl", "version": m.group("ver"), "cuda_build": m.group("cuda")}
            if m.group("suffix"):
                attrs["suffix"] = m.group("suffix")
        else:
            attrs = {"component": "nccl", "version": m.group("rver"), "cuda_build": m.group("rcuda"), "origin": "ras"}
        if pre.task is not None:
            attrs["srun_task"] = pre.task
        ctx.emit(Kind.VERSION, lineno, m.group(0), time=time, time_quality=tq, attrs=attrs,
                 rank=pre.rank, local_rank=pre.local_rank)

    # -- INFO / TRACE payloads -------------------------------------------------------------
    def _info(self, lineno: int, raw: str, msg: str, base: dict, extra: dict, ctx: ParseContext,
              stacks: dict, key: tuple) -> None:
        if msg.startswith("NCCL version"):
            m = _VERSION.match(msg)
            if m is None:
                if "+cuda" in msg:
                    ctx.warn("unparsed NCCL version line", lineno, raw)
                return
            attrs = {"component": "nccl", "version": m.group("ver"), "cuda_build": m.group("cuda"),
                     "suffix": m.group("suffix") or None}
            self._emit(ctx, Kind.VERSION, lineno, msg, base, extra, attrs)
            return
        if msg.startswith("cudaDriverVersion"):
            m = _DRIVER.match(msg)
            if m is None:
                ctx.warn("unparsed cudaDriverVersion line", lineno, raw)
                return
            v = int(m.group("v"))
            attrs = {"component": "cuda_driver", "version": f"{v // 1000}.{v % 1000 // 10}", "raw": v}
            self._emit(ctx, Kind.VERSION, lineno, msg, base, extra, attrs)
            return
        if "- Init " in msg:
            m = _INIT.search(msg)
            if m is None:
                ctx.warn("unparsed NCCL Init START/COMPLETE line", lineno, raw)
                return
            attrs = {
                "phase": m.group("phase").lower(), "comm": m.group("comm"), "rank": int(m.group("rank")),
                "nranks": int(m.group("nranks")), "cuda_dev": int(m.group("cdev")), "nvml_dev": _int(m.group("nvml")),
                "bus_id": m.group("bus"), "comm_id": m.group("commid"), "func": m.group("func"),
                "init_rank": _int(m.group("irank")), "parent": m.group("parent"), "color": _int(m.group("color")),
                "key": _int(m.group("key")), "split_count": _int(m.group("splitcount")),
            }
            extra = {k: v for k, v in extra.items() if k != "func"}
            self._emit(ctx, Kind.COMM_INIT, lineno, msg, base, extra, attrs,
                       gpu=pci_from_nccl_busid(m.group("bus")), gpu_index=int(m.group("cdev")))
            return
        if " localRanks " in msg:
            m = _TOPO.search(msg)
            if m is None:
                ctx.warn("unparsed NCCL topology line", lineno, raw)
                return
            attrs = {"phase": "topology", "comm": m.group("comm"), "rank": int(m.group("rank")),
                     "nranks": int(m.group("nranks")), "nnodes": int(m.group("nnodes")),
                     "local_ranks": int(m.group("lranks")), "local_rank": int(m.group("lrank")),
                     "mnnvl": _int(m.group("mnnvl"))}
            self._emit(ctx, Kind.COMM_INIT, lineno, msg, base, extra, attrs)
            return
        if _ABORT_WORDS.search(msg):
            m = _ABORT.search(msg)
            if m is None:
                ctx.warn("unparsed NCCL Abort/Destroy line", lineno, raw)
                return
            action = m.group("action").lower()
            attrs = {"phase": m.group("phase").lower(), "action": action, "comm": m.group("comm"),
                     "rank": int(m.group("rank")), "nranks": int(m.group("nranks")), "cuda_dev": int(m.group("cdev")),
                     "bus_id": m.group("bus"), "result": _int(m.group("res"))}
            sev = Severity.INFO if action == "destroy" else Severity.WARNING
            self._emit(ctx, Kind.COMM_ABORT, lineno, msg, base, extra, attrs, severity=sev,
                       gpu=pci_from_nccl_busid(m.group("bus")), gpu_index=int(m.group("cdev")))
            return
        if self._net_config(lineno, raw, msg, base, extra, ctx):
            return
        m = _PROPAGATE.match(msg)
        if m:
            self._frame(lineno, msg, m, base, extra, ctx, stacks, key)

    def _net_config(self, lineno: int, raw: str, msg: str, base: dict, extra: dict, ctx: ParseContext) -> bool:
        attrs: dict[str, Any]
        if msg.startswith("NET/IB : Using"):
            m = _NET_IB.match(msg)
            if m is None:
                ctx.warn("unparsed NET/IB : Using line", lineno, raw)
                return True
            devs = list(_IB_DEV.finditer(m.group("devs")))
            oob_ip, _ = _split_peer(m.group("oob"))
            attrs = {"transport": "ib", "devices": [d.group("dev") for d in devs],
                     "hcas": sorted({d.group("hca") for d in devs}),
                     "link_layers": sorted({d.group("link") for d in devs}),
                     "relaxed_ordering": bool(m.group("ro")), "oob_iface": m.group("oobif"), "oob_ip": oob_ip}
        elif msg.startswith("NET/Socket : Using"):
            m = _NET_SOCK.match(msg)
            ifs = [{"name": i.group("name"), "ip": i.group("ip"), "port": int(i.group("port"))}
                   for i in _IFACE.finditer(m.group("ifs"))] if m else []
            attrs = {"transport": "socket", "ifaces": ifs, "devices": [i["name"] for i in ifs]}
        elif msg.startswith("Bootstrap"):
            m = _BOOTSTRAP.match(msg)
            if m is None:
                return False
            ifs = [{"name": i.group("name"), "ip": i.group("ip"), "port": int(i.group("port"))}
                   for i in _IFACE.finditer(m.group("ifs"))]
            attrs = {"transport": "bootstrap", "ifaces": ifs, "devices": [i["name"] for i in ifs]}
            if not ifs:
                attrs["raw"] = m.group("ifs").strip()
        elif msg.startswith("Using network"):
            m = _USING_NET.match(msg)
            if m is None:
                return False
            net = m.group("net")
            attrs = {"transport": {"IB": "ib", "Socket": "socket"}.get(net, net), "network": net}
        elif (m := _ENV_SET.match(msg)) is not None:
            attrs = {"transport": "env", "setting": m.group("key"), "value": m.group("val"),
                     "origin": "nccl_env" if m.group("by") else "nccl_net"}
        elif (m := _GDR_HCA.match(msg)) is not None:
            attrs = {"transport": "gdr", "network": m.group("net"), "gdr": m.group("state") == "Enabled",
                     "hca_index": int(m.group("n")), "hcas": [m.group("hca")]}
        elif (m := _CHANNELS.match(msg)) is not None:
            attrs = {"transport": "channels", "coll_channels": int(m.group("coll")), "collnet_channels": _int(m.group("collnet")),
                     "nvls_channels": _int(m.group("nvls")), "p2p_channels": int(m.group("p2p")),
                     "p2p_channels_per_peer": int(m.group("pp"))}
        elif msg.startswith("NET/Plugin"):
            m = _PLUGIN.match(msg)
            if m is not None:
                attrs = {"transport": "plugin", "plugin": m.group("name"), "plugin_type": m.group("type"),
                         "plugin_api": int(m.group("api"))}
                if m.group("type") == "net":
                    attrs["net_plugin_kind"] = "external"
            elif (m := _PLUGIN_INTERNAL.match(msg)) is not None:
                attrs = {"transport": "plugin", "plugin": "internal", "plugin_type": "net", "net_plugin_kind": "internal"}
                if lib := m.group("lib") or m.group("lib2"):
                    attrs["plugin_missing"] = lib
            else:
                return False
        elif msg.startswith("Plugin Path :"):
            m = _PLUGIN_PATH.match(msg)
            if m is None:
                return False
            attrs = {"transport": "plugin", "plugin_path": m.group("path")}
            if "-net" in m.group("path").rsplit("/", 1)[-1]:
                attrs["plugin_type"], attrs["net_plugin_kind"] = "net", "external"
        else:
            return False
        self._emit(ctx, Kind.NET_CONFIG, lineno, msg, base, extra, attrs)
        return True

    def _frame(self, lineno: int, msg: str, m: regex.Match, base: dict, extra: dict, ctx: ParseContext,
               stacks: dict, key: tuple) -> None:
        """One ``file:line -> code`` propagation frame; frames of a thread collapse to one event."""
        frame = f"{m.group('file')}:{m.group('line')}"
        code = int(m.group("code"))
        st = stacks.get(key)
        # A frame already in the open stack means a new failure is unwinding the same path.
        if st is not None and lineno - st["last"] <= _STACK_GAP and frame not in st["frames"] and len(st["frames"]) < 64:
            st["frames"].append(frame)
            st["outer_code"] = code
            st["last"] = lineno
            if m.group("err") and not st["attrs"].get("errno_text"):
                st["attrs"]["errno_text"] = m.group("err")
            return
        if st is not None:
            self._flush_stack(stacks.pop(key), ctx)
        attrs = {"code": code, "result": NCCL_RESULT[code] if code < len(NCCL_RESULT) else None,
                 "file": m.group("file"), "line_in_src": int(m.group("line")), "func": m.group("func"),
                 "errno_text": m.group("err"), "async": True if m.group("async") else None}
        wl = stacks.get("warn", {}).get(key)
        if wl is not None and lineno - wl <= _STACK_GAP:
            attrs["warn_line"] = wl  # the stack unwinds from this WARN of the same thread
        stacks[key] = {"line": lineno, "last": lineno, "msg": msg, "base": base, "extra": extra,
                       "attrs": attrs, "frames": [frame], "outer_code": code}

    def _flush_stack(self, st: dict, ctx: ParseContext) -> None:
        attrs = dict(st["attrs"])
        attrs["frames"] = st["frames"]
        attrs["outer_code"] = st["outer_code"]
        extra = {k: v for k, v in st["extra"].items() if k != "func"}
        sev = Severity.ERROR if attrs["code"] != 0 else Severity.DEBUG
        self._emit(ctx, Kind.NCCL_ERROR, st["line"], st["msg"], st["base"], extra, attrs, severity=sev)

    # -- WARN payloads ---------------------------------------------------------------------
    def _warn(self, lineno: int, raw: str, msg: str, base: dict, extra: dict, ctx: ParseContext) -> None:
        E, W = Severity.ERROR, Severity.WARNING
        net = Kind.NETWORK_ERROR
        if hm := _MISMATCHED_COLL.search(msg):  # NCCL 2.4 init.cc: the rank the check names
            extra["rank_hint"] = int(hm.group(1))
        if "Got completion from peer" in msg:
            m = _IB_COMPLETION.search(msg)
            if m is None:
                ctx.warn("unparsed NET/IB completion WARN (truncated?)", lineno, raw)
                self._emit(ctx, net, lineno, msg, base, extra, {"transport": "ib", "error_type": "completion"}, E)
                return
            st = int(m.group("st1") or m.group("st2") or m.group("st3"))
            op = int(m.group("op1") or m.group("op2") or m.group("op3"))
            peer, port = _split_peer(m.group("peer"))
            rest = m.group("rest") or ""
            lg, rg, hca = _LOCAL_GID.search(rest), _REMOTE_GID.search(rest), _HCA.search(rest)
            attrs = {
                "transport": "ib", "error_type": "completion", "status": st,
                "status_name": m.group("sname") or (WC_STATUS[st] if st < len(WC_STATUS) else None),
                "opcode": op, "opcode_name": m.group("opname") or WC_OPCODE.get(op),
                "vendor_err": int(m.group("v1") or m.group("v2") or m.group("v3")),
                "len": _int(m.group("len1") or m.group("len2")), "req_type": m.group("rtype"),
                "peer": peer, "peer_port": port, "hca": hca.group("h") if hca else None,
                "local_gid": lg.group("g") if lg else None, "remote_gid": rg.group("g") if rg else None,
            }
            self._emit(ctx, net, lineno, msg, base, extra, attrs, E)
            return
        if msg.startswith("NET/IB") and ("async" in msg or "event type" in msg):
            m = _IB_ASYNC.match(msg)
            if m:
                ev = (m.group("ev0") or m.group("ev1") or m.group("ev2") or m.group("ev3") or "unknown").strip()
                attrs = {"transport": "ib", "error_type": "async_event", "event": ev, "hca": m.group("hca"),
                         "port": _int(m.group("port")), "object": m.group("obj"),
                         "event_code": _int(m.group("code") or m.group("code2")),
                         "fatal": True if "fatal event" in msg and "non-fatal" not in msg else None}
                self._emit(ctx, net, lineno, msg, base, extra, attrs, W if m.group("ev2") else E)
                return
        m = _IBV_CALL.search(msg)
        if m:
            attrs = {"transport": "ib", "error_type": "verbs_call", "op": m.group("fn"),
                     "errno_text": m.group("err") or m.group("err2"), "errno": _int(m.group("errno") or m.group("errno2")),
                     "qp_state": m.group("qp")}
            if hca := _ON_DEV.search(msg):
                attrs.update(hca=hca.group("h"), port=int(hca.group("p")))
            self._emit(ctx, net, lineno, msg, base, extra, attrs, E)
            return
        if self._socket(lineno, msg, base, extra, ctx):
            return
        m = _PROXY.match(msg)
        if m:
            attrs: dict[str, Any] = {"transport": "proxy", "error_type": "proxy"}
            what = m.group("what") or ""
            pe, pp = _PROXY_EXEC.search(what), _PROXY_PROGRESS.search(what)
            if pe:
                attrs.update(op=pe.group("op"), peer_rank=int(pe.group("rank")), retcode=int(pe.group("ret")))
            elif pp:
                attrs.update(op=pp.group("op"), retcode=int(pp.group("ret")))
            elif m.group("ret"):
                attrs.update(op=m.group("func"), retcode=int(m.group("ret")))
            # proxy.cc WARN("[Proxy Service %d] ...", proxyState->tpRank, ...): the proxy thread's own
            # rank (the process it runs in); "from rank %d" is the local peer that asked it.
            tp = {"rank": int(m.group("tp"))} if m.group("tp") and base["rank"] is None else {}
            self._emit(ctx, net, lineno, msg, base, extra, attrs, E, **tp)
            return
        m = _CUDA.match(msg)
        if m:
            err = m.group("err")
            attrs = {"error": err, "code": _int(m.group("code")), "device": base["gpu_index"]}
            kind = Kind.CUDA_OOM if "out of memory" in err else Kind.CUDA_ERROR
            self._emit(ctx, kind, lineno, msg, base, extra, attrs, E)
            return
        m = _MISMATCH.search(msg)
        if m:
            v1, v2 = int(m.group("v1")), int(m.group("v2"))
            attrs = {"error_type": "version_mismatch", "rank": int(m.group("r1")), "version": nccl_version_str(v1),
                     "rank2": int(m.group("r2")), "version2": nccl_version_str(v2), "version_code": v1, "version2_code": v2}
            self._emit(ctx, Kind.NCCL_ERROR, lineno, msg, base, extra, attrs, E)
            return
        m = _OTHER_NET.match(msg)
        if m and m.group("t") not in ("Plugin",):
            t = m.group("t").lower()
            if "Got completion" in msg or "completion" in msg.lower():
                ctx.warn("unparsed NET completion WARN", lineno, raw)
            attrs = {"transport": t, "error_type": "other"}
            self._emit(ctx, net, lineno, msg, base, extra, attrs, E if _ERRORISH.search(msg) else W)
            return
        attrs = {}
        m = _ABORT_STATE.search(msg)
        if m:
            attrs = {"error_type": "abort_state", "comm": m.group("comm")}
        else:
            m = _SYSCALL.search(msg)
            if m:
                attrs = {"call": m.group("fn"), "errno_text": m.group("err")}
        self._emit(ctx, Kind.NCCL_ERROR, lineno, msg, base, extra, attrs, E if _ERRORISH.search(msg) else W)

    def _socket(self, lineno: int, msg: str, base: dict, extra: dict, ctx: ParseContext) -> bool:
        attrs: dict[str, Any] | None = None
        if m := _SOCK_CLOSED.search(msg):
            peer, port = _split_peer(m.group("peer"))
            attrs = {"error_type": "connection_closed", "op": "recv", "peer": peer, "peer_port": port,
                     "errno_text": "Connection closed by remote peer", "func": m.group("func")}
        elif m := _SOCK_IO.search(msg):
            peer, port = _split_peer(m.group("peer"))
            attrs = {"error_type": "io", "op": m.group("op"), "peer": peer, "peer_port": port,
                     "errno_text": m.group("err").strip(), "func": m.group("func")}
        elif m := _SOCK_CONNECT.search(msg):
            peer, port = _split_peer(m.group("peer"))
            err = m.group("err") or m.group("err2") or m.group("err3")
            attrs = {"error_type": "connect", "op": "connect", "peer": peer, "peer_port": port,
                     "errno_text": err.strip() if err else None, "retries": _int(m.group("n")), "func": m.group("func")}
        elif m := _SOCK_POLL.search(msg):
            peer, port = _split_peer(m.group("peer"))
            attrs = {"error_type": "connect", "op": "connect", "peer": peer, "peer_port": port,
                     "errno_text": m.group("err").strip(), "func": m.group("func")}
        elif m := _SOCK_EXCEEDED.search(msg):
            attrs = {"error_type": "connect", "op": "connect", "errno_text": f"exceeded {m.group('what')}",
                     "retries": int(m.group("n")), "func": m.group("func")}
        elif m := _SOCK_ACCEPT.search(msg):
            attrs = {"error_type": "accept", "op": "accept", "errno_text": (m.group("err") or m.group("err2") or "").strip() or None,
                     "retries": _int(m.group("n")), "func": m.group("func")}
        elif m := _SOCK_TRUNC.search(msg):
            peer, port = _split_peer(m.group("peer"))
            attrs = {"error_type": "truncated", "op": "recv", "peer": peer, "peer_port": port, "errno_text": "message truncated"}
        elif m := _NO_IFACE.search(msg):
            peer, port = _split_peer(m.group("peer"))
            attrs = {"error_type": "no_interface", "op": "connect", "peer": peer, "peer_port": port}
        if attrs is None:
            return False
        attrs["transport"] = "socket"
        if attrs.get("func") and "func" in extra:
            attrs["socket_func"] = attrs.pop("func")
        self._emit(ctx, Kind.NETWORK_ERROR, lineno, msg, base, extra, attrs, Severity.ERROR)
        return True


SOURCE = NcclSource()
