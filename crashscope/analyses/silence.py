"""Who stopped first: the ranks that fell silent while their peers failed waiting for them.

In a synchronous job every rank waits for every other in each collective. When one rank
hangs (stopped, stuck in the kernel, its GPU wedged) or dies without a word (SIGKILL, a
node that went away), the others report the loss: gloo's ``Timed out waiting ...ms`` (peer
alive but absent) or ``Connection closed by peer`` (peer exited), NCCL's watchdog timeout,
PyTorch's monitoredBarrier naming the ranks that did not arrive. The rank that stopped
says nothing. So the suspects are the ranks that were seen in the logs and reported no
failure of their own while at least one peer reported losing a peer; when every rank of
one node is silent, the node is the suspect. The verdict weighs this like a rule finding,
below the 0.8 line: silence tells where, not why (kernel log, GPU and I/O data tell why).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

import polars as pl

from crashscope.engine.model import Evidence, Finding
from crashscope.schema import Kind, one_of
from crashscope.sources.applog import TRAINING_ENDED
from crashscope.timeline import attrs_of, slurm_task_hosts, under_torchrun

RULE_ID = "silent-ranks"
RANK_WEIGHT = 0.5  # one rank silent among reporting peers on its node
NODE_WEIGHT = 0.6  # every rank of a node silent while other nodes report
NAMED_WEIGHT = 0.55  # named by rank 0's monitoredBarrier / desync report
MAX_EVIDENCE = 10

# What a survivor prints when it lost a peer: the trigger of this analysis.
PEER_LOSS_KINDS = (
    Kind.COLLECTIVE_TIMEOUT.value,
    Kind.NETWORK_ERROR.value,
    Kind.WATCHDOG_ERROR.value,
    Kind.DESYNC_REPORT.value,
    Kind.HEARTBEAT_TIMEOUT.value,
    Kind.NCCL_ERROR.value,
)
# Lines that are about a rank but not written by it (the launcher, the scheduler).
NOT_OWN_KINDS = (
    Kind.PROCESS_EXIT.value,
    Kind.SIGNAL.value,
    Kind.ROOT_CAUSE_REPORT.value,
    Kind.JOB_CANCEL.value,
    Kind.JOB_STATE.value,
    Kind.JOB_STEP.value,
    Kind.NODE_STATE.value,
    Kind.IDENTITY.value,  # a rank's statement of its host (printed once, at its start): no sign of where it stopped
)
NOT_OWN_SOURCES = ("slurm", "sacct", "kernel", "versions", "nvidia_smi", "gpu_csv", "nsys", "dcgm")
BAD = ("error", "critical")


def silent_ranks(events: pl.DataFrame, world: int | None) -> list[Finding]:
    ev = events.filter(pl.col("rank").is_not_null())
    if ev.height == 0:
        return []
    own = ev.filter(
        ~one_of("kind", NOT_OWN_KINDS) & ~one_of("source", NOT_OWN_SOURCES)
    )
    bad = own.filter(one_of("severity", BAD))
    loss = bad.filter(one_of("kind", PEER_LOSS_KINDS))
    if loss.height == 0:
        return []
    seen = set(int(r) for r in own["rank"].unique().to_list()) | _exited_ranks(events)
    reporters = set(int(r) for r in bad["rank"].unique().to_list())
    cut = _isolated_coordinator(loss, own, seen)
    if cut is not None:
        return [_cut_off_finding(ev, own, loss, *cut)]
    # A rank that first spoke well after its peers had all timed out was not waiting with them:
    # it was silent when they gave up (stopped and resumed, or not in the collective at all).
    reports = events.filter(pl.col("kind") == Kind.ROOT_CAUSE_REPORT.value)
    late = _late_closers(loss, seen, reports)
    reporters -= late
    if late:  # where and when the late rank stopped: from the ranks' own lines, not torchrun's summary of them
        own, loss = _own_words(own, reports), _own_words(loss, reports)
    mutual = None if late else _mutual_timeout(loss, seen, events, world, own)
    if mutual is not None:
        return [mutual]
    named = _named_lagging(loss)
    # The barrier knows who did not arrive; without it, the ranks that said nothing.
    silent = sorted(named) if named else sorted(seen - reporters)
    if not silent or len(silent) > max(1, len(seen | named) // 2) or not (reporters - set(silent)):
        return []
    host_of = _host_of(ev)
    # Where a silent rank stopped: its last line before the peers first reported the loss
    # (a rank resumed late, or named by the barrier, writes more afterwards).
    t_loss = loss["time"].drop_nulls().min()
    last = _last_own_event(own, silent, t_loss)
    # A rank with no line of its own (its log died with it): the line that names it (the
    # launcher's exit record, the barrier report) is the evidence.
    naming = events.filter(pl.col("kind").is_in([Kind.PROCESS_EXIT.value, Kind.DESYNC_REPORT.value])).with_columns(
        pl.col("time").dt.epoch("ns").alias("_t")
    )
    for r in silent:
        if r in last:
            continue
        for row in naming.iter_rows(named=True):
            a = attrs_of(row["attrs"])
            if row["rank"] == r or r in (a.get("tasks") or []) or r in (a.get("lagging_ranks") or []):
                last[r] = dict(row, rank=r)
                break
    silent = [r for r in silent if r in last]
    # A silent rank wrote nothing that names its node; srun's exit record of its task does.
    for r, h in slurm_task_hosts(events).items():
        host_of.setdefault(r, h)
    ranks_on: dict[str, set[int]] = defaultdict(set)
    for r in seen:
        if host_of.get(r):
            ranks_on[host_of[r]].add(r)
    # Whole nodes gone quiet (all their ranks silent, other nodes still talking).
    dead_nodes = sorted(h for h, rs in ranks_on.items() if rs and rs <= set(silent) and len(ranks_on) > 1)
    order = sorted(silent, key=lambda r: (last[r]["_t"] is None, last[r]["_t"] or 0, r))
    peers = sorted(reporters - set(silent))
    if dead_nodes:
        ranks = sorted(r for h in dead_nodes for r in ranks_on[h])
        hosts, weight = dead_nodes, NODE_WEIGHT
        title = f"Every rank of {', '.join(dead_nodes)} fell silent while the ranks of other nodes reported losing them"
    else:
        first = order[0]
        # No silent rank's last line has a time (a script that prints no stamps): which stopped
        # first is not known, so every silent rank is a suspect, not the lowest-numbered one.
        # (order puts dated ranks first: the first has no time only when none has one.)
        undated = last[first]["_t"] is None
        ranks = sorted(order) if undated else sorted(r for r in order if last[r]["_t"] == last[first]["_t"])
        hosts = sorted({host_of[r] for r in ranks if host_of.get(r)})
        weight = NAMED_WEIGHT if set(ranks) & named else RANK_WEIGHT
        if undated and len(ranks) > 1 and not set(ranks) & named:
            title = (f"Ranks {', '.join(map(str, ranks))} stopped without an error while {len(peers)} peer rank(s) failed "
                     "waiting; their lines carry no time, so which of them stopped first is not known")
        elif set(ranks) & named:
            title = f"Rank {', '.join(map(str, ranks))} stopped answering: the barrier named it as the rank that did not arrive, while {len(peers)} peer rank(s) failed waiting"
        elif set(ranks) <= late:
            title = (f"Rank {', '.join(map(str, ranks))} fell silent while {len(peers)} peer rank(s) timed out waiting for it, "
                     "and read their closed connections only seconds after they gave up: it was not waiting in the "
                     "collective (stopped and resumed, or elsewhere)")
        else:
            title = f"Rank {', '.join(map(str, ranks))} stopped without an error while {len(peers)} peer rank(s) failed waiting for it"
    cause = "node_failure"
    ended = not dead_nodes and all(_says_training_ended(last[r]) for r in ranks)
    if ended:
        # The suspect's last words say its training loop was over while its peers were still in
        # theirs: it did not hang or die, it ran out of work first (an uneven data shard, a
        # rank-dependent stopping condition) and left the collectives its peers went on calling.
        cause = "software_error"
        title = (f"Rank {', '.join(map(str, ranks))} ended its training ('{_line_text(last[ranks[0]])[:120]}') while "
                 f"{len(peers)} peer rank(s) were still training and failed waiting for it: the ranks ran different "
                 "amounts of work")
    elif not dead_nodes and _timed_out_too(loss, ranks, t_loss):
        # The suspect was alive and waiting as well: it timed out on its peers while they
        # timed out on it. Both sides up, the path between them gone: cut off, not hung.
        cause = "fabric_timeout"
        title = (
            f"Rank {', '.join(map(str, ranks))} was cut off from its peers: it and they timed out waiting "
            "for each other at the same time, and the others named it as the rank that did not arrive"
        )
    rows = [last[r] for r in order if r in ranks] + [last[r] for r in order if r not in ranks]
    if late & set(ranks):  # the late close itself: when the rank spoke again
        closes = loss.filter(pl.col("rank").is_in(sorted(late & set(ranks))) & pl.col("time").is_not_null()).sort("time")
        rows[len(ranks):len(ranks)] = [dict(r, _t=_ns(r["time"])) for r in closes.group_by("rank", maintain_order=True).first().iter_rows(named=True)]
    evidence = tuple(_evidence(r) for r in rows[:MAX_EVIDENCE])
    times = [r["_t"] for r in rows if r["_t"] is not None and r["rank"] in ranks]
    explanation = (
        "The silent ranks' own logs end with no error while their peers report a lost peer "
        "(timeouts, connection closed, ranks missing from a barrier): the silent ranks stopped "
        "first (hung, stopped, or killed with their node). Silence says where, not why: read "
        "their node's kernel log (Xid, hung tasks, NFS, OOM killer) and the scheduler's record."
    ) if not ended else (
        "A rank that says its training finished, while its peers are still stepping and then fail "
        "waiting on it, ran fewer steps than they did: every rank must issue the same collectives, "
        "so unequal shards (or a stopping test that only some ranks pass) leave the others waiting "
        "in a collective the finished rank never joins."
    )
    return [
        Finding(
            rule_id=RULE_ID, title=title, cause=cause, role="cause", status="stable", weight=weight,
            first_time=min(times) if times else None, count=len(silent), hosts=tuple(hosts), ranks=tuple(ranks),
            gpus=(), evidence=evidence, explanation=explanation,
            actions=(
                "Look at the silent ranks' node: kernel log (dmesg/journal) around the evidence time, `sinfo -R`, the GPU (nvidia-smi -q), and whether the processes were killed (sacct, srun/torchrun exit lines).",
                "Drain and check that node before retrying the job on it.",
            ) if not ended else (
                "Give every rank the same number of steps: a DistributedSampler with drop_last, an equal per-rank step count, or DDP's join() context manager (torch.distributed.algorithms.Join) for uneven inputs.",
                "Check any early-stopping or end-of-data test that runs on one rank only; broadcast its decision to all ranks.",
            ),
        )
    ]


PARTITION_SLACK_S = 10.0  # the two sides' timeouts fire within this of each other
CUT_WEIGHT = 0.5  # one rank cut off, read from who waited on whom (no rank was silent)
# ProcessGroupGloo::monitoredBarrier (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp): ranks != 0
# send to rank 0 and wait for its reply; when that fails they raise "Rank N successfully reached
# monitoredBarrier, but received errors while waiting for send/recv from rank 0. ..."; rank 0 waits
# for every other rank and raises "Ranks a, b, c failed to pass monitoredBarrier in T ms".
_REACHED_BARRIER = "successfully reached monitoredBarrier"


LATE_CLOSE_S = 1.0  # a live rank waiting on a pair sees its peer's close within milliseconds


def _own_words(loss: pl.DataFrame, reports: pl.DataFrame | None) -> pl.DataFrame:
    """``loss`` without the lines of torchrun's failure summary (``ChildFailedError``: a
    ``[n]:`` block per failed rank, ``time : ...`` then the rank's error.json traceback):
    torchrun's agent prints them when it reports, so their time is the agent's, not when
    the rank spoke. A block runs from its report line to the next report in that file (the
    last one 200 lines on); the blocks of a file are contiguous, so a line is inside one
    when it is before the end of the block of the nearest report line above it."""
    if reports is None or reports.height == 0 or loss.height == 0:
        return loss
    starts = (reports.select("file", pl.col("line").cast(pl.Int64).alias("_a"))
              .filter(pl.col("file").is_not_null() & pl.col("_a").is_not_null()).unique().sort("file", "_a"))
    if starts.height == 0:
        return loss
    blocks = starts.with_columns(pl.col("_a").shift(-1).over("file").fill_null(pl.col("_a") + 200).alias("_b")).sort("_a")
    lines = (loss.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"), "file", pl.col("line").cast(pl.Int64).alias("_l"))
             .filter(pl.col("file").is_not_null() & pl.col("_l").is_not_null())
             .with_columns((pl.col("_l") - 1).alias("_k")).sort("_k"))
    # the nearest report line strictly above (a < line, i.e. a <= line - 1) in the same file
    hit = lines.join_asof(blocks.rename({"_a": "_k"}), on="_k", by="file", strategy="backward", check_sortedness=False)
    inside = hit.filter(pl.col("_b").is_not_null() & (pl.col("_l") < pl.col("_b")))["_p"]
    if inside.len() == 0:
        return loss
    return loss.with_row_index("_p").filter(~pl.col("_p").is_in(inside.implode())).drop("_p")


def _late_closers(loss: pl.DataFrame, seen: set[int], reports: pl.DataFrame | None = None) -> set[int]:
    """Ranks whose first word was gloo's ``Connection closed by peer`` more than
    :data:`LATE_CLOSE_S` after every other rank of the job had timed out waiting.

    A gloo timeout is raised by the waiting rank itself (``unbound_buffer.cc`` waitRecv /
    waitSend), which first closes every pair of its process (``signalException``); a peer
    blocked on one of those pairs reads the close at once (``pair.cc`` ``Connection closed by
    peer``), milliseconds after the timeout (every recorded cut-link run: within 0.2 s, some
    before the timeout's own line). A rank that was waiting in the same collective would also
    have timed out by then (its wait began with theirs). So a rank that reads the close seconds
    later was not in a wait at all while its peers gave up on it: stopped (SIGSTOP, a hung
    kernel call) and resumed, or outside the collective. It is the one they waited for. Only
    without a barrier report (which names the late rank itself) and only when the rest of the
    job, more than half of it, timed out together."""
    if loss.filter(pl.col("kind") == Kind.DESYNC_REPORT.value).height:
        return set()
    first: dict[int, dict[str, Any]] = {}
    for row in _own_words(loss, reports).filter(pl.col("rank").is_not_null() & pl.col("time").is_not_null()).sort(["time", "file", "line"]).iter_rows(named=True):
        first.setdefault(int(row["rank"]), row)
    if set(first) != seen or len(first) < 3:
        return set()
    a = {r: attrs_of(row["attrs"]) for r, row in first.items()}
    if any(x.get("transport") != "gloo" for x in a.values()):
        return set()
    timed = [r for r, row in first.items() if row["kind"] == Kind.COLLECTIVE_TIMEOUT.value]
    closed = [r for r, row in first.items() if row["kind"] == Kind.NETWORK_ERROR.value and a[r].get("status") == "closed"]
    if len(timed) + len(closed) != len(first) or len(timed) * 2 <= len(first):
        return set()
    wave = [first[r]["time"] for r in timed]
    if (max(wave) - min(wave)).total_seconds() > PARTITION_SLACK_S:
        return set()
    return {r for r in closed if (first[r]["time"] - max(wave)).total_seconds() > LATE_CLOSE_S}


def _isolated_coordinator(loss: pl.DataFrame, own: pl.DataFrame, seen: set[int]) -> tuple[int, str, list[dict[str, Any]]] | None:
    """The barrier's coordinator named every other rank as missing while those ranks say they
    reached the barrier and could not exchange with it: they were there, it heard none of them.
    The one rank that could not talk to anyone is the one cut off (both sides alive and waiting)."""
    d = loss.filter((pl.col("kind") == Kind.DESYNC_REPORT.value) & pl.col("rank").is_not_null())
    for row in d.sort("time", nulls_last=True).iter_rows(named=True):
        a = attrs_of(row["attrs"])
        if a.get("via") != "monitoredBarrier":
            continue
        coord = int(row["rank"])
        lagging = {r for r in a.get("lagging_ranks") or [] if isinstance(r, int)}
        if coord in lagging or len(lagging) < 2 or not (seen - {coord}) <= lagging:
            continue
        said = own.filter(pl.col("rank").is_in(sorted(lagging)) & pl.col("message").str.contains(_REACHED_BARRIER, literal=True))
        reached = sorted(set(int(r) for r in said["rank"].to_list()))
        if len(reached) * 2 < len(lagging) or len(reached) < 2:
            continue
        why = (f"rank {coord}'s monitoredBarrier named every other rank ({', '.join(map(str, sorted(lagging)))}) as missing, "
               f"while rank(s) {', '.join(map(str, reached))} said they reached the barrier and could not exchange with rank {coord}")
        rows = [row] + [said.filter(pl.col("rank") == r).row(0, named=True) for r in reached[:2]]
        return coord, why, rows
    return None


MUTUAL_RULE_ID = "mutual-timeout"
MUTUAL_WEIGHT = 0.4  # says what (the data stopped between live ranks), not where


def _mutual_timeout(loss: pl.DataFrame, seen: set[int], events: pl.DataFrame | None = None,
                    world: int | None = None, own: pl.DataFrame | None = None) -> Finding | None:
    """Every rank of the job reported, at the same moment, that gloo gave up waiting
    (``Timed out waiting Nms``), or that a peer closed the pair on its own timeout
    (``Connection closed by peer`` right after: gloo's signalException closes every pair of a
    process that timed out). A gloo timeout is raised by the waiting rank itself, so every rank
    was alive and inside a collective: none died, none hung outside one. Data that stops
    between live ranks is the network's (``fabric_timeout``) unless the ranks were in different
    collectives (a desync; Flight Recorder dumps or DETAIL fingerprints show that, and outweigh
    this). gloo's texts name no peer; where the ring allreduce's waits show the broken link
    (:func:`_ring_link`), its receiving end is the suspect, at this finding's weight (it is the
    cut end whenever the cut rank lost its network before it received the segment it waits for;
    not when it had that segment and waited to pass it on)."""
    if len(seen) < 3 or loss.filter(pl.col("kind") == Kind.DESYNC_REPORT.value).height:
        return None
    if events is not None and events.filter(pl.col("kind") == Kind.COLLECTIVE.value).height:
        from crashscope.analyses.collectives import _entries, _mismatch

        if _mismatch(_entries(events)):
            return None  # the dumps show the ranks in different collectives: a desync, not the network
    ranked = loss.filter(pl.col("rank").is_not_null())
    # Lines with no time of their own (per-task output files of a script that prints no stamps): each
    # rank's first loss line in its file's order; that they fell together cannot be checked then, but a
    # gloo timeout still says its rank was alive and waiting inside a collective.
    undated = ranked.filter(pl.col("time").is_not_null()).height == 0
    first: dict[int, dict[str, Any]] = {}
    for row in (ranked if undated else ranked.filter(pl.col("time").is_not_null())).sort(["time", "file", "line"]).iter_rows(named=True):
        first.setdefault(int(row["rank"]), row)
    if set(first) != seen:
        return None
    a = {r: attrs_of(row["attrs"]) for r, row in first.items()}
    if any(x.get("transport") != "gloo" for x in a.values()):
        return None
    timed = [r for r, row in first.items() if row["kind"] == Kind.COLLECTIVE_TIMEOUT.value]
    closed = [r for r, row in first.items() if row["kind"] == Kind.NETWORK_ERROR.value and a[r].get("status") == "closed"]
    if len(timed) + len(closed) != len(first) or len(timed) * 2 < len(first):
        return None
    t = [row["time"] for row in first.values()]
    if not undated and (max(t) - min(t)).total_seconds() > PARTITION_SLACK_S:
        return None
    # The waits began one timeout before they ended: that is when the data stopped.
    began = [first[r]["time"] - timedelta(milliseconds=float(a[r]["timeout_ms"])) for r in timed
             if isinstance(a[r].get("timeout_ms"), (int, float)) and first[r]["time"] is not None]
    link = _ring_link(first, a, events) if events is not None and world == len(first) else None
    order = sorted(first, key=lambda r: (r not in (link or ()), r))  # the link's two ends first
    rows = [dict(first[r], _t=_ns(first[r]["time"])) for r in order]
    ms = max((float(a[r]["timeout_ms"]) for r in timed if isinstance(a[r].get("timeout_ms"), (int, float))), default=None)
    title = (f"All {len(first)} ranks timed out waiting for each other" + (" (their lines carry no time)" if undated else " at the same moment")
             + (f" (gloo, {ms / 1000:.0f} s)" if ms else "") + ": every rank was alive inside a collective and the data "
             "between them stopped")
    where = ("gloo's texts name no peer, so which link is not known.")
    action = ""
    hosts: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    first_time = _ns(min(began)) if began else rows[0]["_t"]
    if link is not None:
        recv_r, send_r = link
        host_of = _host_of(events.filter(pl.col("rank").is_in(list(link)) & pl.col("host").is_not_null())) if events is not None else {}
        ends = [f"rank {r}" + (f" ({h})" if (h := first[r].get("host") or host_of.get(r)) else "") for r in (recv_r, send_r)]
        node = first[recv_r].get("host") or host_of.get(recv_r)
        ranks, hosts = (recv_r,), ((node,) if node else ())
        title += f", on the link between {ends[0]} and {ends[1]}; the receiving end, {ends[0]}, is the suspect"
        where = (f"In gloo's ring allreduce rank {send_r} sends to rank {recv_r} (gloo/allreduce.cc: send to rank-1, receive "
                 f"from rank+1); rank {send_r} timed out on that send and rank {recv_r} on that receive in the same all_reduce "
                 "(the Flight Recorder dumps). A send is written only once the receiver's ready-to-receive notice has "
                 "arrived, and completes when written, delivered or not (gloo/transport/tcp/pair.cc), so that connection "
                 f"carried nothing for the whole timeout between two live processes: the break is at one of its ends. A rank "
                 "cut off before it received the segment it waits for never gets its notices through, so the rank that "
                 "sends to it blocks on that send while it blocks on its receive: the break is at the receiving end, "
                 f"rank {recv_r}. The other end is the cut one only if it lost its network after it had received its "
                 f"segment and before rank {recv_r}'s notice for it arrived; the texts are the same, so rank {recv_r} is a "
                 f"suspect, not a finding (rank {send_r} next).")
        action = f"Start with rank {recv_r}'s network path, then rank {send_r}'s ({ends[0]} <-> {ends[1]}): "
        if own is not None:
            # where the suspect stopped: its last line before the waits gave up (the data stopped after it)
            t_loss = loss["time"].drop_nulls().min()
            calm = own.filter(~one_of("severity", BAD) & (pl.col("time") < t_loss))
            last = _last_own_event(calm, [recv_r]).get(recv_r)
            if last is not None and last["_t"] is not None and last["_t"] < rows[0]["_t"]:
                rows.insert(0, last)
                first_time = last["_t"] if first_time is None else min(first_time, last["_t"])
    evidence = tuple(_evidence(r) for r in rows[:MAX_EVIDENCE])
    return Finding(
        rule_id=MUTUAL_RULE_ID, title=title, cause="fabric_timeout", role="cause", status="stable", weight=MUTUAL_WEIGHT,
        first_time=first_time, count=len(first), hosts=hosts, ranks=ranks, gpus=(),
        evidence=evidence,
        explanation=(
            "A gloo timeout is raised by the rank that was waiting, so each of these ranks was alive and in a "
            "collective; none died and none hung outside one (that rank would have said nothing). Data that stops "
            "between live ranks points at the network; ranks in different collectives (a desync) would too, which "
            "Flight Recorder dumps or TORCH_DISTRIBUTED_DEBUG=DETAIL show. " + where
        ),
        actions=(
            action + "Check the nodes' network around the time the waits began (one timeout before the errors): interface errors and link state (ip -s link, ethtool -S), firewall rules, the switch; rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (monitoredBarrier names the rank that did not arrive) and TORCH_FR_BUFFER_SIZE set.",
        ),
    )


def _ring_link(first: dict[int, dict[str, Any]], a: dict[int, dict[str, Any]], events: pl.DataFrame) -> tuple[int, int] | None:
    """The one connection gloo's ring allreduce shows broken, as (receiver, sender), or None.

    gloo's ring (``gloo/allreduce.cc`` ``ring()``): rank r receives from r+1 and sends to r-1;
    at iteration i it posts segment i's recv and send and then waits for segment i-2's, recv
    first (``waitRecv``, ``unbound_buffer.cc`` "for recv operation"), then send (``waitSend``,
    "for send operation"); segment i of r's send is segment i of r-1's recv. A send is written
    only when the receiver's ``NOTIFY_RECV_READY`` arrives and completes once written
    (``transport/tcp/pair.cc``). So when rank x timed out on its send to x-1 and x-1 on its recv
    from x in the same all_reduce, either x-1 had posted the recv x waited for (its notice never
    arrived) or x had already written the segment x-1 waited for (it never arrived): the pair
    x-1 <-> x carried nothing for the whole timeout between two live processes. The texts are
    the same whichever end lost its network; :func:`_mutual_timeout` names the receiving end x-1
    as the suspect (a rank cut before it received the segment it waits for blocks its sender's
    first send, so the one R-then-S boundary of the ring sits at the cut rank). Only when: every rank 0..n-1 (n >= 3) of a job of n ranks
    reported (with some ranks' logs missing, rank 0's ring neighbour is not rank n-1); each
    rank's last Flight Recorder entry is the same all_reduce (group and sequence number; other
    collectives' rings run the other way or are not rings); no rank printed "Application timeout
    caused pair closure" (with two all_reduces in flight, DDP's buckets, each rank waits on them
    in the same order and reports the first one's own timeout, unless the other timed out first
    and closed its pairs: then that text, and the reported waits may be of different ops); and
    exactly one such send/recv pair exists."""
    n = len(first)
    if n < 3 or set(first) != set(range(n)):
        return None
    if any(x.get("wait") == "pair closed on timeout" for x in a.values()):
        return None
    from crashscope.analyses.collectives import _entries

    last: dict[int, dict[str, Any]] = {}
    for e in _entries(events):
        if e["_t"] is not None and (e["rank"] not in last or e["_t"] > last[e["rank"]]["_t"]):
            last[e["rank"]] = e
    if set(last) != set(first) or len({(e["pg"], e["seq"]) for e in last.values()}) != 1:
        return None
    if any(str(e["op"]).rsplit(":", 1)[-1] != "all_reduce" for e in last.values()):
        return None
    pairs = [((x - 1) % n, x) for x in range(n)
             if first[x]["kind"] == Kind.COLLECTIVE_TIMEOUT.value and a[x].get("wait") == "send"
             and first[(x - 1) % n]["kind"] == Kind.COLLECTIVE_TIMEOUT.value and a[(x - 1) % n].get("wait") == "recv"]
    return pairs[0] if len(pairs) == 1 else None


def _cut_off_finding(ev: pl.DataFrame, own: pl.DataFrame, loss: pl.DataFrame, rank: int, why: str,
                     rows: list[dict[str, Any]]) -> Finding:
    host = _host_of(ev).get(rank)
    t_loss = loss["time"].drop_nulls().min()
    last = _last_own_event(own, [rank], t_loss).get(rank)
    ev_rows = ([last] if last is not None else []) + [dict(r, _t=_ns(r["time"])) for r in rows]
    evidence = tuple(_evidence(r) for r in ev_rows[:MAX_EVIDENCE])
    title = f"Rank {rank} was cut off from its peers: {why}"
    return Finding(
        rule_id=RULE_ID, title=title, cause="fabric_timeout", role="cause", status="stable", weight=CUT_WEIGHT,
        first_time=last["_t"] if last is not None else (evidence[0].time if evidence else None), count=1,
        hosts=tuple(h for h in (host,) if h), ranks=(rank,), gpus=(), evidence=evidence,
        explanation=(
            "Every rank was alive and waiting (each reported its own timeout), so none had died or hung; what the "
            "waits say is where the data stopped: at this rank. Its network path (interface, link, firewall, "
            "switch port) is the suspect. The barrier texts name no peer address, so this is read from who "
            "waited on whom."
        ),
        actions=(
            "Check the named rank's node network: interface errors and link state (ip -s link, ethtool), firewall rules, the switch port; run a point-to-point test between it and its ring neighbours.",
        ),
    )


def _ns(t: Any) -> int | None:
    return int(t.timestamp() * 1_000_000_000) if t is not None else None



def _line_text(row: dict[str, Any]) -> str:
    msg = str(row.get("message") or "")
    return msg.split(": ", 1)[1] if msg.startswith("last time-stamped line of") and ": " in msg else msg


def _says_training_ended(row: dict[str, Any]) -> bool:
    return row.get("kind") != Kind.PROCESS_EXIT.value and bool(TRAINING_ENDED.search(_line_text(row)))  # its last line, while its peers still trained


def _timed_out_too(loss: pl.DataFrame, ranks: list[int], t_loss: Any) -> bool:
    """Did the suspect ranks themselves time out waiting (not fail later on a closed
    connection, as a resumed rank does) within seconds of their peers' first report?"""
    if t_loss is None:
        return False
    own = loss.filter(
        pl.col("rank").is_in(ranks) & (pl.col("kind") == Kind.COLLECTIVE_TIMEOUT.value) & pl.col("time").is_not_null()
    )
    if own.height == 0:
        return False
    dt = abs((own["time"].min() - t_loss).total_seconds())
    return dt <= PARTITION_SLACK_S


def _exited_ranks(events: pl.DataFrame) -> set[int]:
    """Ranks the launcher saw exit (srun's ``task 3: Killed``, torchrun's failed worker):
    they existed even when their own log was lost with them."""
    ex = events.filter(pl.col("kind") == Kind.PROCESS_EXIT.value)
    out = set(int(r) for r in ex["rank"].drop_nulls().to_list())
    if not under_torchrun(events):
        for a in ex.filter(pl.col("source") == "slurm")["attrs"].drop_nulls().to_list():
            out.update(t for t in (attrs_of(a).get("tasks") or [])[:100_000] if isinstance(t, int))
    return out


def _named_lagging(loss: pl.DataFrame) -> set[int]:
    """Ranks named by a monitoredBarrier / desync report as not having arrived."""
    d = loss.filter(pl.col("kind") == Kind.DESYNC_REPORT.value)
    out: set[int] = set()
    for a in d["attrs"].drop_nulls().to_list():
        for r in attrs_of(a).get("lagging_ranks") or []:
            if isinstance(r, int) and 0 <= r < 10_000_000:
                out.add(r)
    return out


def _host_of(ev: pl.DataFrame) -> dict[int, str]:
    m: dict[int, Counter[str]] = defaultdict(Counter)
    for r, h in ev.filter(pl.col("host").is_not_null()).select("rank", "host").iter_rows():
        m[int(r)][h] += 1
    return {r: c.most_common(1)[0][0] for r, c in m.items()}


def _last_own_event(own: pl.DataFrame, ranks: list[int], before: Any = None) -> dict[int, dict[str, Any]]:
    d = own.filter(pl.col("rank").is_in(ranks))
    if before is not None:
        early = d.filter(pl.col("time") <= before)
        # ranks with nothing before the loss keep their overall last line
        d = pl.concat([early, d.filter(~pl.col("rank").is_in(early["rank"].unique().implode()))])
    d = d.with_columns(pl.col("time").dt.epoch("ns").alias("_t")).sort(["_t", "line"], nulls_last=False)
    return {int(row["rank"]): row for row in d.group_by("rank", maintain_order=True).last().iter_rows(named=True)}


def _evidence(r: dict[str, Any]) -> Evidence:
    return Evidence(
        time=r["_t"], host=r["host"], rank=r["rank"], gpu=r["gpu"], gpu_index=r["gpu_index"], file=r["file"] or "",
        line=r["line"], source=str(r["source"]), kind=str(r["kind"]), message=r["message"] or "",
    )




SCHEDULER_ENDS = ("NODE_FAIL", "TIMEOUT", "PREEMPTED", "REQUEUED", "DEADLINE", "OUT_OF_MEMORY", "BOOT_FAIL")


def _step_kill_requested(events: pl.DataFrame) -> bool:
    """sacct shows a step CANCELLED with its requester (``CANCELLED by <uid>``; ``--json``:
    ``kill_request_user``): slurmctld saves the requester of a step's kill only when the signal
    is SIGKILL (``stepmgr.c``), as ``scancel <job>.<step>`` sends; srun's kill after a bad exit
    (``SIG_TERM_KILL``) leaves none. Then the tasks' SIGKILL was asked for, not the node's doing.
    Not when the scheduler ended the job itself (a failed node's steps are killed by slurmctld,
    whose uid is then the requester)."""
    st = events.filter((pl.col("kind") == Kind.JOB_STATE.value) & (pl.col("source") == "sacct"))
    rows = [attrs_of(raw) for raw in st["attrs"].drop_nulls().to_list()[:100_000]]
    if any(a.get("state") in SCHEDULER_ENDS for a in rows):
        return False
    for a in rows:
        if a.get("step") is not None and a.get("state") == "CANCELLED" and (
                a.get("state_by_uid") is not None or a.get("kill_request_user")):
            return True
    return False


def _aborted_before_any_exit(events: pl.DataFrame) -> list[dict[str, Any]]:
    """The job output's step-end lines that came before any task's exit line in that file:
    slurmstepd's ``*** STEP <id> ON <node> CANCELLED AT <t> ***`` banner and srun's ``Job step
    aborted: Waiting up to N seconds for job step to finish.`` (srun answering the
    controller's end of the step). srun prints each task's exit as it learns of it, so when
    it ends the step itself after a bad exit (``--kill-on-bad-exit``) the exit comes first,
    then ``_step_signal: Terminating StepId``, then the banners; when the controller ends it
    (scancel, a time limit, preemption, a failed node) the banner and the abort come first."""
    sl = events.filter((pl.col("source") == "slurm") & pl.col("file").is_not_null() & pl.col("line").is_not_null())
    ends = sl.filter((pl.col("kind") == Kind.JOB_CANCEL.value)
                     | ((pl.col("kind") == Kind.JOB_STEP.value) & pl.col("attrs").str.contains('"action":"abort_wait"', literal=True)))
    if ends.height == 0:
        return []
    exits = sl.filter(pl.col("kind") == Kind.PROCESS_EXIT.value).group_by("file").agg(pl.col("line").min().alias("_x"))
    # only a file that shows both says which came first (a pasted banner alone says nothing)
    early = ends.join(exits, on="file", how="inner").filter(pl.col("line") < pl.col("_x"))
    return list(early.sort("line").iter_rows(named=True))


STEP_CANCEL_WEIGHT = 0.5  # who cancelled and why is in sacct or slurmctld's log, not here


def step_cancelled(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """The controller ended the step before any task failed and no banner says why (no ``DUE
    TO TIME LIMIT``/``PREEMPTION``/``NODE FAILURE``, no ``CANCELLED BY``): it was cancelled
    from outside the job (``scancel``, an administrator, the scheduler). The taxonomy's
    preemption: the scheduler ended the job, not the job itself."""
    early = _aborted_before_any_exit(events)
    banners = [r for r in early if r["kind"] == Kind.JOB_CANCEL.value]
    if not banners:
        return []
    cancels = events.filter(pl.col("kind") == Kind.JOB_CANCEL.value)["attrs"].drop_nulls().to_list()
    if any(attrs_of(a).get("reason") not in (None, "CANCELLED") for a in cancels[:10_000]):
        return []  # a banner that says why: its own rule reads it
    first = banners[0]
    ev = Evidence(
        time=None if first["time"] is None else int(first["time"].timestamp() * 1_000_000_000), host=first["host"],
        rank=None, gpu=None, gpu_index=None, file=first["file"] or "", line=first["line"], source=str(first["source"]),
        kind=str(first["kind"]), message=first["message"] or "",
    )
    return [
        Finding(
            rule_id="step-cancelled", title="The step was cancelled from outside the job before any task failed",
            cause="preemption", role="cause", status="stable", weight=STEP_CANCEL_WEIGHT, first_time=ev.time, count=1,
            hosts=(), ranks=(), gpus=(), evidence=(ev,),
            explanation=(
                "slurmstepd printed the step's cancel banner (no reason given) before srun reported any task's exit: "
                "the controller ended the step (scancel, an administrator, the scheduler), and the tasks were killed "
                "by it. sacct (`State` CANCELLED by <uid>) or slurmctld's log says who."
            ),
            actions=("Check who cancelled the job: `sacct -j <job> -o JobID,State,Reason` and slurmctld's log; resubmit if it was not on purpose.",),
        )
    ]


KILLED_WEIGHT = 0.45  # below any OOM-killer or hardware line, which say why
TERMINATING = ("SIGTERM", "SIGINT", "SIGHUP")


def first_killed(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """The first task to die was SIGKILLed while no rank had reported anything: the
    launcher (srun, torchrun) then terminated the rest, before any of them could time out.
    The killed task's node is where it happened: its processes were killed from outside
    (the kernel's OOM killer, an admin, the node going away). An OOM line, when collected,
    outweighs this and says why."""
    # The kernel's OOM report (whatever source read its lines: the catalog reads dmesg's
    # "invoked oom-killer" and "oom-kill:" lines too) is no rank's complaint: it is the kill
    # itself, said by the kernel (mm/oom_kill.c sends the victim SIGKILL), and says why.
    own_bad = events.filter(
        one_of("severity", BAD)
        & ~one_of("kind", NOT_OWN_KINDS)
        & ~one_of("source", NOT_OWN_SOURCES)
        & (pl.col("kind") != Kind.LOG_ERROR.value)
        & (pl.col("kind") != Kind.HOST_OOM.value)
    )
    # In a file's line order: an exit line after another was written after it, whatever
    # time it was given (an unstamped line takes a stamp before it; slurmstepd's banner has
    # whole seconds, so srun's later lines can seem earlier than the ones above them).
    exits = (
        events.filter(pl.col("kind") == Kind.PROCESS_EXIT.value)
        .sort(["file", "line"], nulls_last=True)
        .with_columns(pl.col("time").cum_max().over("file").alias("_in_order"))
        .sort(["_in_order", "file", "line"], nulls_last=True)
        .drop("_in_order")
    )
    if exits.height == 0:
        return []
    first = exits.row(0, named=True)
    a = attrs_of(first["attrs"])
    if a.get("signal") != "SIGKILL" or _step_kill_requested(events) or _aborted_before_any_exit(events):
        return []
    t0 = first["time"]
    # Ranks that complained before the kill had seen trouble first: not this pattern. A line
    # after the kill's in the same file was written after it, whatever time it was given (an
    # unstamped line takes the one before it, and slurmstepd's banner has whole seconds).
    after_in_file = (pl.col("file") == first["file"]) & (pl.col("line") > (first["line"] or 0))
    if t0 is not None and own_bad.filter(pl.col("time").is_not_null() & (pl.col("time") < t0) & ~after_in_file.fill_null(False)).height:
        return []
    hosts = [h for h in (a.get("hosts") or ([first["host"]] if first["host"] else [])) if isinstance(h, str)]
    if not hosts:
        return []
    host_of = _host_of(events.filter(pl.col("rank").is_not_null()))
    if under_torchrun(events) or not a.get("tasks"):
        ranks = sorted(r for r, h in host_of.items() if h in hosts)
    else:
        ranks = sorted(t for t in a.get("tasks") or [] if isinstance(t, int))
    # The OOM killer takes one process: one task killed while tasks beside it on the same node
    # lived on (or with no word on what else ran there) says where to look, not that the node
    # failed. Then it is a symptom: the first failure and the suspect, no cause.
    on_host = {r for r, h in host_of.items() if h in hosts}
    alone = not under_torchrun(events) and bool(a.get("tasks")) and len(ranks) < 2 and not (on_host and on_host <= set(ranks))
    later = [attrs_of(x).get("signal") for x in exits["attrs"].drop_nulls().to_list()[1:]]
    if alone:
        title = (
            f"Task {', '.join(str(r) for r in ranks)} on {', '.join(hosts)} was the first to die, killed by SIGKILL, before "
            f"any rank reported an error; one killed task does not say why: the OOM killer, an administrator or a limit"
        )
    else:
        title = (
            f"The processes on {', '.join(hosts)} were the first to die, killed by SIGKILL, "
            f"before any rank reported an error; the launcher then stopped the others"
            + (" (SIGTERM)" if any(s in TERMINATING for s in later) else "")
        )
    ev = Evidence(
        time=None if t0 is None else int(t0.timestamp() * 1_000_000_000),
        host=hosts[0], rank=ranks[0] if ranks else None, gpu=None, gpu_index=None, file=first["file"] or "",
        line=first["line"], source=str(first["source"]), kind=str(first["kind"]), message=first["message"] or "",
    )
    return [
        Finding(
            rule_id="first-killed", title=title, cause="node_failure", role="symptom" if alone else "cause", status="stable",
            weight=KILLED_WEIGHT,
            first_time=ev.time, count=1, hosts=tuple(hosts), ranks=tuple(ranks), gpus=(), evidence=(ev,),
            explanation=(
                "A SIGKILL that nobody in the job sent: the kernel's OOM killer, an administrator, or the node "
                "failing. Without the node's kernel log or the scheduler's OOM record this cannot be told apart."
            ),
            actions=(
                "Check the node's kernel log for the OOM killer (`Out of memory: Killed process`) and `sacct -j <job> -o JobID,State,MaxRSS,ReqMem`; if none, check the node's health (sinfo -R, IPMI SEL).",
            ),
        )
    ]


AGENT_RULE_ID = "silent-agent"
AGENT_WEIGHT = 0.45  # where, not why: the node's kernel log or the scheduler says why
# What an agent prints once its workers fail or it is told to stop: its own end.
AGENT_END_KINDS = (Kind.ROOT_CAUSE_REPORT.value, Kind.PROCESS_EXIT.value, Kind.SIGNAL.value, Kind.JOB_CANCEL.value)


def silent_agent(events: pl.DataFrame, world: int | None) -> list[Finding]:
    """One launcher's console said nothing after its start while the ranks of the other
    launchers lost their peers: its node's processes died without a word (the node went
    away, or everything on it was killed).

    Per-node consoles (one ``torchrun`` per node, each to its own file or pod log): when a
    worker fails, its agent prints the exit (``failed (exitcode: ...)``), the signals it sends
    and the ``ChildFailedError`` table; a surviving node's workers lose their peers and its
    agent prints the same. A console with torchrun's start banner and then nothing of the
    kind, while another's ranks report losing peers, is the node that stopped. A clean run
    prints nothing at its end either, so the trigger is the others' peer loss, not the quiet."""
    kind = pl.col("kind")
    starts = events.filter((kind == Kind.JOB_STEP.value) & pl.col("attrs").str.contains('"launcher_start"', literal=True))
    files = starts.get_column("file").drop_nulls().unique().to_list()
    if len(files) < 2 or events.filter(kind == Kind.JOB_CANCEL.value).height:
        return []
    bad = one_of("severity", BAD)
    loss = events.filter(one_of("kind", PEER_LOSS_KINDS) & bad & pl.col("file").is_in(files)).sort("time", "file", "line", nulls_last=True)
    if loss.height == 0:
        return []
    t_loss = loss.get_column("time").drop_nulls().min()
    silent: list[dict[str, Any]] = []
    for f in sorted(files):
        own = events.filter(pl.col("file") == f)
        if own.filter(one_of("kind", AGENT_END_KINDS) | bad).height:
            continue
        last = own.filter(pl.col("time").is_not_null()).sort("time", "line").tail(1).to_dicts()
        if not last or (t_loss is not None and last[0]["time"] >= t_loss):
            continue
        silent.append(last[0])
    if not silent or len(silent) == len(files):
        return []
    theirs = events.filter(pl.col("file").is_in([r["file"] for r in silent]))
    hosts = sorted(theirs.get_column("host").drop_nulls().unique().to_list())
    ranks = sorted(int(x) for x in theirs.get_column("rank").drop_nulls().unique().to_list())
    first_loss = loss.row(0, named=True)
    evidence = tuple(_evidence({**r, "_t": _ns(r["time"])}) for r in [*silent[:MAX_EVIDENCE], first_loss])
    names = ", ".join(r["file"] for r in silent[:5])
    return [
        Finding(
            rule_id=AGENT_RULE_ID,
            title=f"The launcher of {names} printed nothing after its start while the other nodes' ranks lost their peers",
            cause="node_failure", role="cause", status="stable", weight=AGENT_WEIGHT,
            first_time=_ns(t_loss), count=len(silent), hosts=tuple(hosts), ranks=tuple(ranks), gpus=(), evidence=evidence,
            explanation=(
                "An agent whose workers fail prints their exit and the ChildFailedError table, as the surviving agents did; "
                "this one printed nothing: its node's processes died without a word (the node went away, lost power or "
                "network, or everything on it was killed)."
            ),
            actions=(
                "Check that node's state and kernel log around the loss (sinfo -R / kubectl describe node, journalctl -k, IPMI SEL) "
                "and whether it was rebooted; drain it before resubmitting.",
            ),
        )
    ]
