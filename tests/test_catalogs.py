"""The catalogs of real error texts, the matcher, its PREFILTER and the catalog source.

Every entry's hit examples must match it and its miss examples must not; the PREFILTER
(literals only) must accept every hit example in polars (Rust regex) and Python regex;
a hit must survive every envelope real pastes put around it, and a line cut right after
the key text.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import regex

from crashscope import catalogs
from crashscope.catalogs import CatalogError, build, match_text
from crashscope.schema import CAUSES, KINDS
from crashscope.sources.base import FileInfo, ParseContext, ParseOptions
from crashscope.sources.catalog import SOURCE, parse_envelope

CATS = catalogs.load()
ENTRIES = CATS.entries


def _names(text: str) -> list[str]:
    return [h.name for h in match_text(text)]


def _cases(tier: str) -> list:
    return [pytest.param(e, ex, id=f"{e.catalog}:{e.name}:{i}") for e in ENTRIES for i, ex in enumerate(getattr(e, tier))]


# -- the data ------------------------------------------------------------------------------

def test_every_catalog_file_loads_and_cites_its_sources() -> None:
    files = sorted(p.name for p in Path(catalogs.__file__).parent.glob("*.yaml"))
    assert files == sorted(f"{c}.yaml" for c in CATS.sources), "one catalog per file, named after the file"
    expected = {"cuda", "nccl", "ibverbs", "xid", "errno", "signals", "oom", "scheduler"}
    assert expected <= set(CATS.sources)
    for cat, srcs in CATS.sources.items():
        assert srcs and all(len(s) > 10 for s in srcs), cat
    for e in ENTRIES:
        assert e.kind in KINDS and (e.cause is None or e.cause in CAUSES)
        assert e.role in ("cause", "symptom", "context")
        assert e.hit, e.name


@pytest.mark.parametrize(
    "doc, why",
    [
        ("catalog: x\nentries: [{name: a, texts: [b], kind: xid, severity: error, cause: null, role: symptom, hit: [b]}]\n", "sources"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, texts: [b], kind: nope, severity: error, cause: null, role: symptom, hit: [b]}]\n", "kind"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, texts: [b], kind: xid, severity: error, cause: flood, role: cause, hit: [b]}]\n", "cause"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, texts: [b], kind: xid, severity: error, cause: null, role: cause, hit: [b]}]\n", "must name its cause"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, patterns: ['b+'], kind: xid, severity: error, cause: null, role: symptom, hit: [b]}]\n", "keys"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, texts: [b], kind: xid, severity: error, cause: null, role: symptom}]\n", "hit example"),
        ("catalog: x\nsources: [s]\nentries: [{name: a, texts: [b], kind: xid, severity: error, cause: null, role: symptom, hit: [b], typo: 1}]\n", "unknown field"),
    ],
)
def test_malformed_catalogs_are_refused(doc: str, why: str) -> None:
    with pytest.raises(CatalogError, match=why):
        build([("bad.yaml", doc)])


def test_names_are_unique_within_a_catalog_and_across_files_catalogs_are_unique() -> None:
    doc = "catalog: x\nsources: [s]\nentries:\n" + "".join(
        "  - {name: a, texts: [b], kind: xid, severity: error, cause: null, role: symptom, hit: [b]}\n" for _ in range(2)
    )
    with pytest.raises(CatalogError, match="duplicate"):
        build([("d.yaml", doc)])
    ok = doc.split("  - ")[0] + "  - " + doc.split("  - ")[1]
    with pytest.raises(CatalogError, match="defined twice"):
        build([("a.yaml", ok), ("b.yaml", ok)])


# -- the matcher ---------------------------------------------------------------------------

@pytest.mark.parametrize("entry, line", _cases("hit"))
def test_hit_examples_match(entry, line: str) -> None:  # type: ignore[no-untyped-def]
    assert entry.name in _names(line), f"{entry.catalog}:{entry.name} missed {line!r}"


@pytest.mark.parametrize("entry, line", _cases("miss"))
def test_miss_examples_do_not_match(entry, line: str) -> None:  # type: ignore[no-untyped-def]
    assert entry.name not in _names(line), f"{entry.catalog}:{entry.name} matched its miss example {line!r}"


def test_match_reports_the_number_found_and_the_span() -> None:
    line = "node001:2718:3140 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
    (hit,) = [h for h in match_text(line) if h.catalog == "nccl"]
    assert (hit.name, hit.code, hit.cause, hit.role) == ("ib_completion_retry_exceeded", 12, "fabric_timeout", "cause")
    assert hit.attrs["status"] == 12 and hit.attrs["vendor_err"] == 129 and hit.attrs["peer"] == "10.10.1.7<51234>"
    assert line[hit.span[0]:hit.span[1]].startswith("Got completion from peer")
    other = [h.name for h in match_text(line.replace("error 12,", "error 4,"))]
    assert "ib_completion_error_other" in other and "ib_completion_retry_exceeded" not in other
    xid = match_text("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python3, DBE")
    assert [(h.name, h.code, h.attrs["pci"]) for h in xid] == [("xid_memory_error", 48, "0000:3b:00")]
    assert [h.name for h in match_text("NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=python3")] == ["xid_preemptive_cleanup"]


def test_matching_is_case_sensitive_for_fixed_texts() -> None:
    assert "cudaErrorECCUncorrectable" in _names("CUDA error: uncorrectable ECC error encountered")
    assert _names("cuda error: UNCORRECTABLE ecc ERROR ENCOUNTERED") == []
    assert "ESTALE" in _names("OSError: [Errno 116] Stale file handle")
    assert "ESTALE" not in _names("TESTALERT raised")


def test_short_api_strings_need_their_envelope() -> None:
    assert "cudaErrorMemoryAllocation" in _names("RuntimeError: CUDA error: out of memory")
    assert "cudaErrorMemoryAllocation" not in _names("the planner ran out of memory budget")
    assert "cudaErrorUnknown" not in _names("unknown error in the config parser")


# -- the prefilter -------------------------------------------------------------------------

ALL_HITS = sorted({h for e in ENTRIES for h in e.hit})


def test_prefilter_accepts_every_hit_in_polars_and_python() -> None:
    pf = catalogs.PREFILTER
    assert pf == SOURCE.prefilter
    py = regex.compile(pf)
    missed_py = [h for h in ALL_HITS if not py.search(h)]
    assert not missed_py, missed_py[:5]
    s = pl.Series("l", ALL_HITS)
    missed_rust = s.filter(~s.str.contains(pf)).to_list()
    assert not missed_rust, missed_rust[:5]


def test_prefilter_is_literals_and_skips_chatter() -> None:
    # Literals in trie form only: besides escapes, just "(?:", ")", "|" (and "?" after ")").
    unescaped = regex.sub(r"\\.", "", catalogs.PREFILTER).replace("(?:", "").replace(")?", ")")
    assert not set(unescaped) & set("[]{}*+?^$."), "the prefilter must stay a union of literals"
    trie = regex.compile(catalogs.PREFILTER)
    assert all(trie.fullmatch(a) for a in CATS.anchors), "the trie spells every anchor"
    chatter = [
        "node004:51001:51102 [0] NCCL INFO Channel 00/0 : 8[0] -> 16[0] [send] via NET/IB/0/GDRDMA",
        "node001:2718:2718 [3] NCCL INFO NCCL version 2.18.5+cuda12.2",
        "node001:2718:2718 [3] NCCL INFO cudaDriverVersion 12020",
        "node004:51001:51001 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.4<0>",
        "node004:51001:51001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.4<0>",
        "node012:880:880 [1] NCCL INFO comm 0x55d1c0a3f2e0 rank 9 nranks 32 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x6a1f3e29c0d4b711 - Init COMPLETE",
        "node012:880:880 [1] NCCL INFO Using network IB",
        "[rank0]: step 1200 loss 2.3141 lr 3.0e-4 tokens/s 812345",
    ]
    s = pl.Series("l", chatter)
    assert s.str.contains(catalogs.PREFILTER).sum() == 0


def test_literal_trie_is_the_union_of_its_words() -> None:
    from crashscope.catalogs import _literal_trie

    words = ["ab", "abc", "b(x)", "a.b", "zz"]
    t = _literal_trie(words)
    rx, rust = regex.compile(t), pl.Series("l", words + ["a", "ax", "abd", "bx", "z", "a-b"])
    assert [bool(rx.fullmatch(w)) for w in rust.to_list()] == [True] * 5 + [False] * 6
    assert rust.str.contains(f"^(?:{t})$").to_list() == [True] * 5 + [False] * 6


# -- envelopes -----------------------------------------------------------------------------

ENVELOPES = {
    "mpirun": lambda t: f"[1,2]<stderr>:{t}",
    "k8s_cri": lambda t: f"2024-05-01T10:00:00.123Z stdout F {t}",
    "journald": lambda t: f"Jun 17 20:18:08 host kernel: {t}",
    "python_logging": lambda t: f"2024-05-01 10:00:00,123 - trainer - ERROR - {t}",
    "grep_r": lambda t: f"path/file.log:{t}",
    "grep_rn": lambda t: f"logs/node002/rank9.log:1042:{t}",
    "tqdm_cr": lambda t: f" 41%|####1     | 410/1000 [05:12<07:30, 1.31it/s]\r 41%|####1     | 411/1000 [05:13<07:29]\r{t}",
    "srun_torchrun": lambda t: f" 3: [default1]:[rank9]:{t}",
}
ONE_HIT_EACH = [pytest.param(e, e.hit[0], id=f"{e.catalog}:{e.name}") for e in ENTRIES]


@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
def test_every_entry_matches_behind_every_envelope(envelope: str) -> None:
    wrap = ENVELOPES[envelope]
    missed = [f"{e.catalog}:{e.name}" for e in ENTRIES if e.name not in _names(wrap(e.hit[0]))]
    assert not missed, f"{envelope}: {missed}"
    s = pl.Series("l", [wrap(e.hit[0]) for e in ENTRIES])
    assert s.str.contains(catalogs.PREFILTER).all(), envelope


@pytest.mark.parametrize("entry, line", ONE_HIT_EACH)
def test_a_line_cut_right_after_the_key_text_still_matches(entry, line: str) -> None:  # type: ignore[no-untyped-def]
    m = entry.rx.search(line)
    assert m is not None
    cut = line[: m.end()]
    assert entry.name in _names(cut), f"cut line {cut!r}"
    for t in (k for k in entry.keys if k in line):
        end = line.index(t) + len(t)
        if entry.rx.search(line[:end]):  # literal texts: the text alone is the whole key
            assert entry.name in _names(line[:end])


def test_cut_nccl_completion_keeps_its_status() -> None:
    line = "NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with error 12"
    (h,) = [h for h in match_text(line) if h.catalog == "nccl"]
    assert h.name == "ib_completion_retry_exceeded" and "vendor_err" not in h.attrs


# -- the source ----------------------------------------------------------------------------

def _parse(lines: list[str], **info) -> pl.DataFrame:  # type: ignore[no-untyped-def]
    ctx = ParseContext(FileInfo("job/x.log", "x.log", **info), "catalog", ParseOptions(year=2026))
    SOURCE.parse_lines(list(enumerate(lines, 1)), ctx)
    assert not ctx.warnings
    return ctx.frame()


def test_source_never_claims_files() -> None:
    assert SOURCE.sniff("RuntimeError: CUDA error: out of memory\n" * 50, "slurm-1.out") == 0.0


def test_source_emits_one_event_per_hit_with_catalog_attrs() -> None:
    df = _parse(["[1,5]<stderr>:RuntimeError: CUDA error: uncorrectable ECC error encountered", "nothing here"])
    assert df.height == 1
    row = df.row(0, named=True)
    attrs = json.loads(row["attrs"])
    assert {k: attrs[k] for k in ("catalog", "name", "code", "cause", "role")} == {
        "catalog": "cuda", "name": "cudaErrorECCUncorrectable", "code": 214, "cause": "gpu_hardware", "role": "cause"}
    assert (row["kind"], row["severity"], row["rank"], row["line"], row["source"]) == ("cuda_error", "critical", 5, 1, "catalog")
    assert row["message"] == "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def test_source_reads_time_host_rank_from_common_envelopes() -> None:
    df = _parse([
        "2024-05-01T10:00:00.123Z stdout F NVRM: Xid (PCI:0000:9a:00): 95, pid=1, name=python3, Uncontained: FBHUB.",
        "Jun 17 20:18:08 node003 kernel: mlx5_core 0000:17:00.0: Port module event: module 0, Cable unplugged",
        "2026-06-17T20:18:09.5+00:00 node004 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        " 3: [default1]:[rank9]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        "logs/rank9.log:12:node002:51001:51187 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<4000> with error 12",
        "[2026-03-02 14:05:11] node004:51001:51187 [0] misc/socket.cc:63 NCCL WARN socketProgress: Connection closed by remote peer node007<43210>",
    ])
    rows = df.to_dicts()
    assert rows[0]["time"].isoformat() == "2024-05-01T10:00:00.123000+00:00" and rows[0]["time_quality"] == "exact"
    assert rows[0]["gpu"] == "0000:9a:00.0" and rows[0]["kind"] == "xid"
    assert rows[1]["host"] == "node003" and rows[1]["time"].isoformat().startswith("2026-06-17T20:18:08")
    assert rows[1]["time_quality"] == "estimated"  # year-less local stamp, zone not known
    assert rows[2]["host"] == "node004" and rows[2]["gpu"] == "0000:2b:00.0" and rows[2]["time_quality"] == "exact"
    assert (rows[3]["rank"], rows[3]["local_rank"]) == (9, 1)
    assert rows[4]["host"] == "node002" and rows[4]["pid"] == 51001 and rows[4]["message"].startswith("NCCL WARN NET/IB")
    assert rows[5]["host"] == "node004" and rows[5]["time"] is not None


def test_tqdm_glued_line_gives_the_hit_segment_as_message() -> None:
    df = _parse(["epoch 3:  41%|####1 | 410/1000\repoch 3:  41%|####1 | 411/1000\rTERM_RUNLIMIT: job killed after reaching LSF run time limit."])
    assert df["message"].to_list() == ["TERM_RUNLIMIT: job killed after reaching LSF run time limit."]


def test_a_slurm_daemon_stamp_and_level_are_no_syslog_host() -> None:
    # slurmd/slurmstepd log_msg(): "[%s] error: %s" with an ISO stamp in brackets, then the plugin's own prefix
    ctx = ParseContext(FileInfo("x", "x"), "catalog")
    env = parse_envelope("[2025-07-18T15:06:29.684] error: pyxis:     nvidia-container-cli: ldcache error: process failed", ctx)
    assert env.host is None and env.time is not None
    # a bare RFC 3339 stamp (rsyslog's high-precision format) is followed by the host
    assert parse_envelope("2026-06-17T20:18:09.5+00:00 node004 kernel: NVRM: GPU 0000:2b:00.0: x", ctx).host == "node004"


def test_envelope_parser_keeps_unknown_text() -> None:
    ctx = ParseContext(FileInfo("x", "x"), "catalog")
    env = parse_envelope("free text: nothing to strip", ctx)
    assert env.body == "free text: nothing to strip" and env.time is None and env.host is None


def test_ingest_finds_catalog_texts_behind_envelopes(tmp_path: Path) -> None:
    from crashscope.ingest import ingest

    (tmp_path / "pod.log").write_text(
        "2024-05-01T10:00:00.123Z stdout F step 10 loss 2.1\n"
        + "node004:51001:51102 [0] NCCL INFO Channel 00/0 : 8[0] -> 16[0] [send] via NET/IB/0/GDRDMA\n" * 50
        + "2024-05-01T10:00:05.000Z stderr F [1,2]<stderr>:RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    ev = ingest(tmp_path).events
    cat = ev.filter(pl.col("source") == "catalog")
    assert cat.height == 1
    row = cat.row(0, named=True)
    assert row["line"] == 52 and row["rank"] == 2 and json.loads(row["attrs"])["name"] == "cudaErrorECCUncorrectable"


def test_every_shipped_pattern_compiles():
    """load() defers compiling (a cost per process); the same files, validated, must build."""
    from importlib import resources

    root = resources.files("crashscope.catalogs")
    files = [(f"crashscope/catalogs/{p.name}", p.read_text(encoding="utf-8")) for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".yaml")]
    built = build(files, validate=True)
    assert len(built.entries) == len(CATS.entries)
    assert all(e.rx.pattern == e.pattern for e in CATS.entries)


SEFF = (
    "Job ID: 4242\nCluster: perlmutter\nUser/Group: u1/g1\nState: {state} (exit code {code})\nNodes: 2\n"
    "Cores per node: 128\nCPU Utilized: 10:00:00\nCPU Efficiency: 2.00% of 20-00:00:00 core-walltime\n"
    "Job Wall-clock time: 01:52:10\nMemory Utilized: 80.00 GB\nMemory Efficiency: 16.00% of 500.00 GB (250.00 GB/node)\n"
)


@pytest.mark.parametrize(
    ("name", "text", "cause"),
    [
        # seff's summary of the accounting record (SchedMD/slurm contribs/seff/seff) is the job's final state
        ("seff.txt", SEFF.format(state="COMPLETED", code=0), "none"),
        ("seff.txt", SEFF.format(state="TIMEOUT", code=0), "time_limit"),
        ("seff.txt", SEFF.format(state="NODE_FAIL", code=1), "node_failure"),
        ("seff.txt", SEFF.format(state="FAILED", code=1), "unknown"),
        # a launcher's or platform's success record makes a run with no failure 'none' ...
        ("driver.log", "(RayTrainWorker pid=123) epoch 9 loss 0.12\n------------------------------------------\n"
         "Job 'raysubmit_kd8Ck2Z3UrS2jbzD' succeeded\n------------------------------------------\n", "none"),
        ("describe.txt", "Events:\n  Type    Reason     Age   From            Message\n"
         "  Normal  Completed  12s   job-controller  Job completed\n", "none"),
        # ... but not one that failed
        ("driver.log", "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
         "Job 'raysubmit_kd8Ck2Z3UrS2jbzD' succeeded\n", "gpu_hardware"),
    ],
)
def test_scheduler_records_decide_the_outcome(tmp_path: Path, name: str, text: str, cause: str) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause


@pytest.mark.parametrize(
    ("name", "text", "cause"),
    [
        # libnvidia-container's requirement check inside a kubelet event (NVIDIA/libnvidia-container src/cli/configure.c)
        ("describe.txt", "  Warning  Failed  3s  kubelet  Error: failed to create containerd task: OCI runtime create failed: "
         "error running hook #0: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: requirement error: "
         "unsatisfied condition: cuda>=12.4, please update your driver to a newer version, or use an earlier cuda container: unknown\n", "driver_drift"),
        # an architecture requirement is a GPU model mismatch, not driver drift
        ("describe.txt", "stderr: nvidia-container-cli: requirement error: unsatisfied condition: arch>=8.0\n", "unknown"),
        # nvidia-docker 1.0's own check
        ("run.log", "nvidia-docker | 2016/04/21 21:41:35 Error: unsupported CUDA version: driver 7.0 < image 7.5\n", "driver_drift"),
        # enroot: the image lacks the program it is asked to run (NVIDIA/enroot bin/enroot-switchroot.c) ...
        ("enroot.log", "$ enroot start distroless python3 train.py\n"
         "enroot-switchroot: failed to execute: python3: No such file or directory\n", "software_error"),
        # ... a mount that forbids exec is not the image's fault
        ("enroot.log", "enroot-switchroot: failed to execute: /bin/sh: Permission denied\n", "unknown"),
        # the TPU runtime's program-load OOM (openxla/xla docs/errors/error_0101.md)
        ("train.log", "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error loading program 'jit_train_step': Attempting to reserve "
         "51.43G at the bottom of memory. That was not possible. There are 46.61G free, 0B reserved, and 46.61G reservable.\n", "oom"),
        # aws-ofi-nccl's fi_av_insert failure as the Last error of a DistBackendError
        ("rank0.log", "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
         "internal error - please report this issue to the NCCL developers, NCCL version 2.21.5\n[rank0]: ncclInternalError: Internal check failed.\n"
         "[rank0]: Last error:\n[rank0]: NET/OFI CM: Unable to insert remote address into address vector for device. RC: No route to host\n", "fabric_timeout"),
    ],
)
def test_container_runtime_and_plugin_texts_name_the_cause(tmp_path: Path, name: str, text: str, cause: str) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause


EXIT_WARN = ("[rank0]:[W1207 11:02:40.112233445 ProcessGroupNCCL.cpp:1521] Warning: WARNING: destroy_process_group() was not called "
             "before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown "
             "(function operator())\n")


@pytest.mark.parametrize(
    ("name", "text", "cause", "at_most"),
    [
        # PyTorch's exit-time warning: the process reached interpreter exit and nothing failed ...
        ("train.out", "step 100 loss 1.93\n" + EXIT_WARN, "none", 0.5),
        # ... but an uncaught exception exits the same way, its traceback first
        ("train.out", "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/w/train.py\", line 9, in <module>\n"
         "[rank0]:     main()\n[rank0]: KeyError: 'labels'\n" + EXIT_WARN, "software_error", 0.79),
        # Horovod's shutdown on a surviving rank is a symptom: no cause without the other rank's error ...
        ("horovod.log", "[1,0]<stderr>:tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut down. This was caused by "
         "an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. "
         "If the shutdown was caused by an exception, you should see the exception in the log before the first shutdown message.\n", "unknown", 0.5),
        # ... Ray's ActorDiedError for a worker process that died, with Ray's list of guesses (not an observed SIGKILL) ...
        ("driver.log", "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n\tclass_name: RayTrainWorker\n"
         "\tactor_id: 0a1b2c3d4e5f60718293a4b501000000\n\tip: 10.0.3.17\nThe actor is dead because its worker process has died. Worker exit type: "
         "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
         "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called.\n", "unknown", 0.5),
        # ... and torchelastic's agent failing to reach its rendezvous store
        ("agent.log", "Traceback (most recent call last):\n  File \"/opt/conda/bin/torchrun\", line 33, in <module>\n    sys.exit(main())\n"
         "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n", "unknown", 0.5),
        # the nv:: CUDA_CHECK helper's "<file>:<line>: CUDA error <n>: <string>" names the error
        ("worker-3.log", "terminate called after throwing an instance of 'nv::CudaException'\n"
         "  what():  src/hashtable/nv_hashtable.cu:88: CUDA error 2: out of memory\n", "oom", 0.79),
    ],
)
def test_launcher_symptoms_and_exit_records(tmp_path: Path, name: str, text: str, cause: str, at_most: float) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause
    assert report.confidence <= at_most


def test_hydra_banner_gives_its_host_and_rank_to_the_signal_line() -> None:
    # pmodels/mpich pmiserv_cb.c: "PID %d RUNNING AT %s" then "EXIT CODE: %d" (the signal);
    # later Hydra: "RANK %d PID %d RUNNING AT %s" then "KILLED BY SIGNAL: %d (%s)"
    old = _parse([
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES", "=   PID 92248 RUNNING AT fzh-desktop",
        "=   EXIT CODE: 9", "=   CLEANING UP REMAINING PROCESSES"])
    new = _parse(["=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES", "=   RANK 2 PID 5492 RUNNING AT gn59", "=   KILLED BY SIGNAL: 9 (Killed)"])
    for df, host, rank in ((old, "fzh-desktop", None), (new, "gn59", 2)):
        (sig,) = [r for r in df.to_dicts() if json.loads(r["attrs"])["catalog"] == "signals"]
        assert (sig["host"], sig["rank"], json.loads(sig["attrs"])["name"]) == (host, rank, "sigkill")
    # a signal line that is not the banner's next line, or not the banner's wording, stays unplaced
    far = _parse(["=   PID 92248 RUNNING AT fzh-desktop", "something else", "=   EXIT CODE: 9"])
    other = _parse(["=   PID 92248 RUNNING AT fzh-desktop", "/var/spool/slurmd/job123/slurm_script: line 12: 44120 Killed   python train.py"])
    for df in (far, other):
        (sig,) = [r for r in df.to_dicts() if json.loads(r["attrs"])["catalog"] == "signals"]
        assert sig["host"] is None


@pytest.mark.parametrize(
    ("name", "text", "cause"),
    [
        # cudaErrorContained (driver_types.h 226) under a torchrun rank prefix: moderate GPU-hardware evidence, not a code bug
        ("rank5.log", "[rank5]: Traceback (most recent call last):\n[rank5]:   File \"/app/train.py\", line 88, in step\n"
         "[rank5]:     loss.item()\n[rank5]: RuntimeError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error\n",
         "gpu_hardware"),
        # NVLS multicast set-up refused by the driver (transport/nvls.cc CUCHECK), NCCL 2.26 time stamp prefix
        ("nccl.log", "[2025-04-06 22:31:56] ccw-gpu-128:3485254:3487188 [0] transport/nvls.cc:598 NCCL WARN Cuda failure 1 'invalid argument'\n",
         "driver_drift"),
        # the same text from another transport is not the fabric manager's
        ("nccl.log", "node5:100:200 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 1 'invalid argument'\n", "unknown"),
        # aws-ofi-nccl: an error completion read off the CQ, behind a Kubernetes CRI prefix
        ("pod.log", "2024-11-28T07:42:11.527Z stderr F algo-1:17779:17852 [6] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7f00aa01 "
         "completed with error. RC: 5. Error: Input/output error. Completed length: 0, Request: { dev: 0, size: 0 }\n", "fabric_timeout"),
        # libfabric EFA's own record of a failed send (rxr_cq.c), newer form with the addresses
        ("efa.log", "libfabric:4321:1700000000::efa:cq:rxr_cq_write_tx_error():250<warn> rxr_cq_write_tx_error: err: 5, "
         "prov_err: Unreachable remote (7) our address: fe80::1, peer address fe80::2\n", "fabric_timeout"),
        # aws-ofi-nccl MR registration refused (EINVAL) with the host prefix; the locked-memory limit (ENOMEM) is not driver drift
        ("nccl.log", "ip-10-1-2-3:79:120 [3] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 3. "
         "RC: -22, Error: Invalid argument\n", "driver_drift"),
        ("nccl.log", "ip-10-1-2-3:79:120 [3] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 3. "
         "RC: -12, Error: Cannot allocate memory\n", "unknown"),
        # the fabric manager's precheck in a journalctl -u export with a host
        ("fm.log", "Mar 04 09:12:01 gpu-b200-07 nvidia-fabricmanager-start.sh[2211]: Kernel module \"ib_umad\" has not been loaded, "
         "fabric manager cannot be started\n", "driver_drift"),
        # lspci -D (domain) output of a lost GPU among healthy ones
        ("lspci.txt", "0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
         "0000:2a:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev ff)\n", "gpu_hardware"),
        # rdma link with the netdev column; an ACTIVE port is nothing
        ("rdma.txt", "link mlx5_3/1 state DOWN physical_state DISABLED netdev ibp12s0\n", "fabric_timeout"),
        ("rdma.txt", "link mlx5_3/1 state ACTIVE physical_state LINK_UP netdev ibp12s0\n", "unknown"),
        # ENETUNREACH when NCCL moves a RoCE QP to RTR (no route to the remote GID)
        ("nccl.log", "hostA:10:20 [1] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error No route to host\n", "fabric_timeout"),
    ],
)
def test_fabric_and_gpu_state_texts_name_the_cause(tmp_path: Path, name: str, text: str, cause: str) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause, (report.cause, report.confidence, [e.rule for e in report.evidence])
    assert report.confidence < 0.8 or cause == "unknown"


@pytest.mark.parametrize(
    ("name", "text", "cause", "node"),
    [
        # aws-ofi-nccl's completion error with an unreachable-peer errno (EHOSTUNREACH) under mpirun's tag
        ("mpi.out", "[1,4]<stderr>:ip-10-0-7-21:61:140 [4] nccl_net_ofi_sendrecv.cpp:412 NCCL WARN NET/OFI Request 0x7f3a2c0150e0 "
         "completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0, Request: {dev: 0, size: 0}\n", "fabric_timeout", None),
        # ... the RDMA protocol's form with the request's sequence number, behind a pod-log stamp
        ("pod.log", "2025-03-02T11:20:14.881223Z stderr F ip-10-0-7-21:61:140 [4] nccl_net_ofi_rdma.cpp:1620 NCCL WARN NET/OFI Request "
         "0x7f3a2c0150e0 seq 12 completed with error. RC: 110. Error: 13 (Unresponsive receiver). Completed length: 0\n", "fabric_timeout", None),
        # libfabric's EFA provider: the peer's EFA device did not answer (prov_errno 13), behind a pod-log stamp
        ("worker-1.log", "2025-03-02T11:20:14.881223Z stderr F libfabric:88:1740914414::efa:cq:efa_rdm_txe_handle_error():735<warn> err: 5, "
         "message: Unresponsive receiver. This error is typically caused by a peer hardware failure or (13)\n", "fabric_timeout", None),
        # UCX's fatal-signal report names the host in its '[host:pid:thread:tid]' prefix
        ("rank7.log", "[gpu-a17:40412:0:40519] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x10)\n",
         "software_error", "gpu-a17"),
        # Open MPI's report: the header names the host, the 'Signal:' line the signal
        ("mpi.err", "[node-b03:07781] *** Process received signal ***\n[node-b03:07781] Signal: Segmentation fault (11)\n"
         "[node-b03:07781] Signal code: Address not mapped (1)\n", "software_error", "node-b03"),
    ],
)
def test_part_m_fabric_completion_and_signal_report_texts(tmp_path: Path, name: str, text: str, cause: str, node: str | None) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause
    if node is not None:
        assert report.implicated.nodes == [node]


@pytest.mark.parametrize(
    ("name", "text", "cause", "node"),
    [
        # ROCr's VM fault report under torchrun's '[rankN]:' prefix, with the amdgpu kernel line in a dmesg
        ("rank3.log", "[rank3]: Memory access fault by GPU node-9 (Agent handle: 0x5611d2c3e4f0) on address 0x7f0a11200000. "
         "Reason: Page not present or supervisor privilege.\n", "software_error", None),
        ("dmesg.txt", "[812345.112233] amdgpu 0000:c1:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:40 vmid:1 "
         "pasid:32770, for process python pid 4411 thread python pid 4411)\n", "unknown", None),
        # ... with an ECC reason it is the GPU's memory
        ("rank3.log", "[rank3]: Memory access fault by GPU node-9 (Agent handle: 0x5611d2c3e4f0) on address 0x7f0a11200000. "
         "Reason: DRAM ECC failure.\n", "gpu_hardware", None),
        # the HIP runtime's queue abort behind an srun --label prefix
        ("job.err", "3: :0:rocdevice.cpp            :3020: 2611850318 us: [pid:88123 tid:0x7fa1d3fff640] Callback: Queue "
         "0x7fa02c200000 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
         "beyond the largest legal address. code: 0x29\n", "software_error", None),
        # NCCL's topology lookup of its own net device, with the full WARN prefix
        ("nccl.log", "gpu-r12:2211:2290 [5] graph/topo.h:269 NCCL WARN Could not find NET with id 3\n", "software_error", None),
        # pyxis in a slurmd.log (Slurm 23+ stamps with the step id), and enroot's runtime path in pyxis's log dump
        ("slurmd.log", "[2024-05-02T08:11:42.310] [4411.0] error: pyxis: couldn't mkdir /run/pyxis/4242: Permission denied\n",
         "software_error", None),
        ("slurm-4411.out", "slurmstepd: error: pyxis: printing contents of log file ...\n"
         "slurmstepd: error: pyxis:     mkdir: cannot create directory '/run/user/4242': Permission denied\n", "software_error", None),
        # Moab's hard memory limit in a Torque job mail; the exec host is the job's node
        ("job.mail", "PBS Job Id: 88123.sched01\nJob Name:   train\nExec host:  gpu-3-7/0-7\njob deleted\n"
         "job 88123 exceeded JOBMEM usage hard limit (65012 > 64000)\n", "oom", "gpu-3-7"),
        # ... the soft limit is a warning
        ("job.mail", "job 88123 exceeded MEM usage soft limit\n", "unknown", None),
    ],
)
def test_part_o_rocm_nccl_topology_pyxis_and_moab_texts(tmp_path: Path, name: str, text: str, cause: str, node: str | None) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause, (report.cause, report.confidence, [e.rule for e in report.evidence])
    assert report.confidence < 0.8 or cause == "unknown"
    if node is not None:
        assert report.implicated.nodes == [node]


@pytest.mark.parametrize(
    ("name", "text", "cause", "nodes"),
    [
        # sinfo's partition row: a node the controller lost ('*' = not responding), in a job's stderr copy
        ("slurm-4711.err", "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
         "gpu          up 2-00:00:00      1  down* gpu-a07\n"
         "gpu          up 2-00:00:00      3  alloc gpu-a[04-06]\n", "node_failure", ["gpu-a07"]),
        # sinfo -N -l behind grep -r's path prefix; an idle node is nothing
        ("nodes.txt", "notes/sinfo.txt:gpu-b11      1     gpu*       idle*   64   2:32:1 515000        0      1   (null) Not responding\n"
         "notes/sinfo.txt:gpu-b12      1     gpu*        idle   64   2:32:1 515000        0      1   (null) none\n",
         "node_failure", ["gpu-b11"]),
        # the node lifecycle controller's condition as kubectl describe node prints it (no node in the row)
        ("describe-node.txt", "Conditions:\n  Type             Status    LastHeartbeatTime                 LastTransitionTime"
         "                Reason              Message\n  ----             ------    -----------------                 ------------------"
         "                ------              -------\n  Ready            Unknown   Tue, 03 Mar 2026 10:14:07 +0000   Tue, 03 Mar 2026 "
         "10:15:12 +0000   NodeStatusUnknown   Kubelet stopped posting node status.\n", "node_failure", []),
        # kubectl get nodes (ROLES column, cordoned) behind a pod-log stamp
        ("kubectl.log", "2026-03-03T10:20:01.000Z stdout F gpu-node-3   NotReady,SchedulingDisabled   worker   12d   v1.29.4\n"
         "2026-03-03T10:20:01.000Z stdout F gpu-node-4   Ready                         worker   12d   v1.29.4\n",
         "node_failure", ["gpu-node-3"]),
        # HTCondor's event 024 for a partitionable slot
        ("job.log", "024 (12116473.013.000) 05/13 01:11:20 Job reconnection failed\n    Job not found at execution machine\n"
         "    Can not reconnect to slot1_1@exec-17.example.org, rescheduling job\n...\n", "node_failure", ["exec-17"]),
        # HTCondor's XML event log: an eviction is context (the record does not say why), a job terminated is nothing
        ("job.xml", "<c>\n    <a n=\"MyType\"><s>JobEvictedEvent</s></a>\n    <a n=\"EventTypeNumber\"><i>4</i></a>\n</c>\n", "unknown", None),
        # Kueue's eviction of a preempted workload as kubectl describe workload prints its condition
        ("workload.txt", "  Conditions:\n    Last Transition Time:  2025-02-04T19:06:25Z\n"
         "    Message:               Preempted to accommodate a workload (UID: 2daed6fd-11aa-4c2e-9b1f-5e63deb5a001, JobUID: "
         "5e63deb5-22bb-4d3f-8c2e-2daed6fd0002) due to reclamation within the cohort; preemptor path: /gpu/cq-high; preemptee path: "
         "/gpu/cq-low\n    Reason:                Preempted\n    Type:                  Evicted\n", "preemption", None),
        # Nextflow's exit status 140 under its Slurm executor: time-limit context only
        ("nextflow.log", "Error executing process > 'ALIGN (sample_7)'\n\nCaused by:\n"
         "  Process `ALIGN (sample_7)` terminated with an error exit status (140)\n", "unknown", None),
    ],
)
def test_part_n_node_state_tables_and_batch_event_logs(tmp_path: Path, name: str, text: str, cause: str,
                                                        nodes: list[str] | None) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause, (report.cause, report.confidence, [e.rule for e in report.evidence])
    assert report.confidence < 0.8
    if nodes is not None:
        assert [n.split(".")[0] for n in report.implicated.nodes] == nodes
    if cause == "unknown":  # the context is read (a failure with only context is 0.3, nothing read is 0.0)
        assert report.confidence > 0


@pytest.mark.parametrize(
    ("name", "text", "cause", "node"),
    [
        # Slurm's node reason with scontrol's "[user@time]" note but no "Reason=" (a ticket quoting it)
        ("ticket.txt", "Node: gpu-b07\nAnything Else: Not responding [slurm@2026-03-02T02:00:55]\n", "node_failure", None),
        # ... and sinfo -R's row: the node is the last column
        ("sinfo-R.txt", "REASON               USER      TIMESTAMP           NODELIST\n"
         "Not responding       slurm     2026-03-02T02:00:55 gpu-b07\n", "node_failure", "gpu-b07"),
        # libnvidia-container's NVML init failure inside the OCI runtime's hook error
        ("ci.log", "docker: Error response from daemon: OCI runtime create failed: container_linux.go:380: starting container "
         "process caused: process_linux.go:545: container init caused: Running hook #0:: error running hook: exit status 1, "
         "stdout: , stderr: nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown.\n",
         "driver_drift", None),
        # ... a different NVML init error is not the version mismatch
        ("ci.log", "stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.\n", "unknown", None),
        # Slurm's gpu/nvml plugin finding the GPU gone
        ("slurm-91.err", "slurmstepd: error: NVML: Failed to get usage(15): GPU is lost\n", "gpu_hardware", None),
        # NCCL's bootstrap receiving more than it posted (srun -l label)
        ("train.log", "3: gpu-c11:5120:5301 [1] bootstrap.cc:77 NCCL WARN Message truncated : received 1024 bytes instead of 256\n"
         "3: gpu-c11:5120:5301 [1] NCCL INFO bootstrap.cc:554 -> 3\n", "software_error", None),
        # Ray's raylet aborting on a RAY_CHECK
        ("raylet.out", "[2025-03-02 10:14:07,123 C 4411 4460] (raylet) node_manager.cc:1722:  Check failed: worker != nullptr \n"
         "[2025-03-02 10:14:07,124 E 4411 4460] logging.cc:108: Stack trace: \n", "software_error", None),
        # TensorFlow's POSIX file system closing a file on a FUSE mount that went away
        ("train.log", "2026-03-02 10:14:07.645844: E tensorflow/core/platform/default/posix_file_system.cc:56] close() failed: "
         "Transport endpoint is not connected\n", "storage_stall", None),
        # Lightning's checkpoint write failing with ENOTCONN (no path): the FUSE mount under the checkpoint
        ("train.log", "Traceback (most recent call last):\n"
         "  File \"/opt/conda/lib/python3.11/site-packages/lightning/fabric/utilities/cloud_io.py\", line 89, in _atomic_save\n"
         "    f.write(bytesbuffer.getvalue())\n"
         "OSError: [Errno 107] Transport endpoint is not connected\n", "storage_stall", None),
        # ... the same error from a socket call is neither storage nor a bug (a socket not connected)
        ("train.log", "Traceback (most recent call last):\n"
         "  File \"/opt/conda/lib/python3.11/socket.py\", line 501, in shutdown\n"
         "OSError: [Errno 107] Transport endpoint is not connected\n", "unknown", None),
        # SkyPilot 0.1's spot controller
        ("controller.log", "(train-spot pid=8812) I 06-01 03:12:09 controller.py:100] The cluster is preempted.\n"
         "(train-spot pid=8812) I 06-01 03:12:09 spot_state.py:99] === Recovering... ===\n", "preemption", None),
    ],
)
def test_part_p_node_reasons_nvml_clients_nccl_truncation_ray_check_and_fuse_texts(
        tmp_path: Path, name: str, text: str, cause: str, node: str | None) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause, (report.cause, report.confidence, [e.rule for e in report.evidence])
    assert report.confidence < 0.8
    if node is not None:
        assert report.implicated.nodes == [node]


@pytest.mark.parametrize(
    ("name", "text", "cause"),
    [
        # aws-ofi-nccl's current log_cq_error form (include/nccl_ofi_platform.h): FI_EHOSTUNREACH,
        # which EFA returns when the security group drops the packets: the fabric
        ("nccl.log", "ip-10-1-2-3:4242:4300 [1] NCCL WARN NET/OFI Request 0x7f00aa01b2c0 ({ dev: 0, size: 1048576, state: PENDING, "
         "type: SEND }) completed with error: err: 113, flags: 2048, prov_errno: 15, strerror: Unreachable remote - never received "
         "a response, len: 0\n", "fabric_timeout"),
        # ... FI_ENOTCONN (EFA: the peer's QP is gone, its process exited): what a survivor sees, no cause
        ("nccl.log", "ip-10-1-2-3:4242:4300 [1] nccl_net_ofi_rdma.cpp:1620 NCCL WARN NET/OFI Request 0x7f00aa01b2c0 seq 12 completed "
         "with error. RC: 107. Flags: 0. Error: 9 (Bad queue pair (QP) number (QP does not exist or is in error state)). "
         "Completed length: 0, Request: {dev: 1, size: 0}\n", "unknown"),
        # libfabric EFA's own record with ECONNABORTED (a remote abort): a symptom too
        ("job.err", "libfabric:4321:1700000000::efa:cq:rxr_cq_write_tx_error():227<warn> rxr_cq_write_tx_error: err: 103, "
         "prov_err: Receiver connection aborted (8)\n", "unknown"),
        # a bare ENOTCONN from a socket call names no cause; on a path it is a dead FUSE mount
        ("rank3.log", "[rank3]: ConnectionError: [Errno 107] Transport endpoint is not connected\n", "unknown"),
        ("rank3.log", "[rank3]: OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/ckpt/step_100'\n", "storage_stall"),
    ],
)
def test_peer_gone_errnos_are_symptoms_and_fabric_errnos_causes(tmp_path: Path, name: str, text: str, cause: str) -> None:
    from crashscope.pipeline import analyze

    (tmp_path / name).write_text(text)
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause
