"""One contract over every registered source (pygments' test_basic_api idea)."""

from __future__ import annotations

import importlib
import pkgutil
import random

import polars as pl
import pytest
import regex

import crashscope.sources as registry
from crashscope.schema import EVENT_SCHEMA, SOURCE_NAMES
from crashscope.sources import SOURCES
from crashscope.sources.base import FileSource, LineSource
from crashscope.testing import parse_text

IDS = [s.name for s in SOURCES]


def test_every_module_is_registered_and_named_in_the_schema() -> None:
    modules = {m.name for m in pkgutil.iter_modules(registry.__path__) if m.name != "base"}
    registered = {type(s).__module__.rsplit(".", 1)[-1] for s in SOURCES}
    assert modules == registered, "a module in crashscope/sources is missing from SOURCES (or the reverse)"
    assert sorted(s.name for s in SOURCES) == list(SOURCE_NAMES)
    assert all(type(s).__module__.rsplit(".", 1)[-1] == s.name for s in SOURCES), "a source's name is its module's name"


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_metadata(src) -> None:  # type: ignore[no-untyped-def]
    assert src.name and src.description
    assert isinstance(src, (LineSource, FileSource))
    assert importlib.import_module(type(src).__module__).__doc__, "module docstring with real sample lines"
    if isinstance(src, LineSource):
        regex.compile(src.prefilter)
        pl.Series(["x"]).str.contains(src.prefilter)  # must compile in Rust's regex too


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_empty_input_gives_empty_frame_with_schema(src) -> None:  # type: ignore[no-untyped-def]
    df, warnings = parse_text(src.name, b"")
    assert df.schema == EVENT_SCHEMA
    assert df.height == 0
    assert src.sniff("", "empty.log") == 0


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_never_raise(src, seed: int) -> None:  # type: ignore[no-untyped-def]
    rnd = random.Random(seed)
    blob = bytes(rnd.getrandbits(8) for _ in range(20_000))
    df, _ = parse_text(src.name, blob)
    assert df.schema == EVENT_SCHEMA
    score = src.sniff(blob.decode("utf-8", "replace"), "blob.bin")
    assert 0.0 <= score < 0.5


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_truncated_golden_inputs_never_raise_and_times_are_utc(src) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    cases = sorted((Path(__file__).parent / "golden" / src.name).glob("*"))
    cases = [c for c in cases if ".expected." not in c.name and c.is_file()]
    if not cases:
        pytest.skip(f"no golden inputs for {src.name} yet")
    for case in cases:
        data = case.read_bytes()
        for cut in (len(data) // 3, len(data) // 2, len(data) - 7):
            df, _ = parse_text(src.name, data[: max(cut, 0)])
            assert df.schema == EVENT_SCHEMA
        df, _ = parse_text(src.name, data)
        assert df["time"].dtype == pl.Datetime("ns", "UTC")
        assert df["line"].null_count() == 0 or src.name in ("sacct", "gpu_csv", "nvidia_smi", "versions", "torchelastic")


def test_chatter_never_hides_an_event_line() -> None:
    """Lines dropped as NCCL chatter before the prefilter must never be lines a source
    parses: checked on every golden input and every rule example."""
    from pathlib import Path

    import yaml

    from crashscope.ingest import CHATTER, _COMBINED

    rx = regex.compile(_COMBINED)
    lines: list[str] = []
    root = Path(__file__).parent
    for case in (root / "golden").glob("*/*"):
        if case.is_file() and ".expected." not in case.name:
            lines += case.read_text(errors="replace").splitlines()
    for rule in (root.parent / "rules").rglob("*.yaml"):
        doc = yaml.safe_load(rule.read_text()) or {}
        for tier in ("hit", "miss"):
            for ex in (doc.get("tests") or {}).get(tier) or []:
                lines += [str(x) for x in ex.get("lines") or []]
    hits = [ln for ln in lines if rx.search(ln)]
    assert len(hits) > 500
    offenders = [ln for ln in hits if any(c in ln for c in CHATTER)]
    assert not offenders, offenders[:5]


def test_launcher_prefixes_name_the_rank_and_leave_the_program_line():
    from crashscope.sources.base import split_prefix
    # mpirun --tag-output (Open MPI 4: no space; 5 / PRRTE: one space), horovodrun, srun -l, torchrun
    cases = {
        "[1,3]<stderr>:Traceback (most recent call last):": (None, None, 3, "Traceback (most recent call last):"),
        "[1,3]<stdout>: RuntimeError: x": (None, None, 3, "RuntimeError: x"),
        "[2]<stdout>:  File \"a.py\", line 3, in f": (None, None, 2, " File \"a.py\", line 3, in f"),
        "[1,2]<stdout>:[rank5]: x": (None, None, 5, "x"),
        " 3: [default1]:[rank9]:hi": (3, 1, 9, "hi"),
        "[1,3] <stdout>: not a tag": (None, None, None, "[1,3] <stdout>: not a tag"),
        # pdsh "<host>: " (DeepSpeed's multi-node launcher) before a torch tag; an all-digit
        # label stays srun's task id; a host with no torch tag after it is left alone
        "100.83.191.29: [rank14]: RuntimeError: x": (None, None, 14, "RuntimeError: x"),
        "worker-1: [default3]:[rank9]: hi": (None, 3, 9, "hi"),
        "12: [rank0]: x": (12, None, 0, "x"),
        "node04: Traceback (most recent call last):": (None, None, None, "node04: Traceback (most recent call last):"),
        "a b: [rank1]: x": (None, None, None, "a b: [rank1]: x"),
    }
    for line, (task, lr, rank, rest) in cases.items():
        p, text = split_prefix(line)
        assert (p.task, p.local_rank, p.rank, text) == (task, lr, rank, rest), line
    hosts = {"100.83.191.29: [rank14]: RuntimeError: x": "100.83.191.29", "worker-1: [default3]:[rank9]: hi": "worker-1",
             "12: [rank0]: x": None, "node04: Traceback (most recent call last):": None}
    for line, host in hosts.items():
        assert split_prefix(line)[0].host == host, line


def test_pdsh_host_prefix_places_the_event_on_that_host() -> None:
    from crashscope.testing import parse_text

    lines = ["worker-3: [rank14]: Traceback (most recent call last):",
             'worker-3: [rank14]:   File "/app/train.py", line 9, in <module>',
             "worker-3: [rank14]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    for source in ("pytorch", "catalog"):
        df, _ = parse_text(source, "\n".join(lines) + "\n", name="deepspeed.log")
        exc = df.filter(df["kind"] == "exception") if source == "pytorch" else df
        assert exc.height and set(exc["host"].to_list()) == {"worker-3"}, (source, exc.select("kind", "host", "rank").to_dicts())


def test_ms_swift_end_of_main_is_a_run_end() -> None:
    # swift/llm/base.py SwiftPipeline.main(): logged once self.run() has returned
    df, _ = parse_text("applog", "[INFO:swift] End time of running main: 2025-09-11 16:19:22.473503\n", "train.log")
    ends = df.filter(pl.col("kind") == "run_end")
    assert ends.height == 1
    assert ends["attrs"].str.json_path_match("$.framework").to_list() == ["ms-swift"]
    # the start of main is no end
    df, _ = parse_text("applog", "[INFO:swift] Start time of running main: 2025-09-11 15:46:34.473503\n", "train.log")
    assert df.filter(pl.col("kind") == "run_end").height == 0


def test_kernel_indented_dmesg_keeps_its_stamp_and_times_an_nfs_stall() -> None:
    """A console excerpt pasted with indentation is still dmesg: the monotonic stamp is read,
    and the NFS recovery carries how long the stall lasted (first 'not responding' to 'OK')."""
    import json

    from crashscope.testing import parse_text

    lines = ["    [  959.792370] nfs: server 192.168.16.10 not responding, still trying",
             "    [ 1003.793368] nfs: server 192.168.16.10 not responding, still trying",
             "    [ 1917.894851] nfs: server 192.168.16.10 OK",
             "[ 2000.000001] nfs: server other OK"]
    df, warns = parse_text("kernel", "\n".join(lines) + "\n", name="dmesg.txt")
    rec = df.filter(df["kind"] == "storage_recovered")
    attrs = [json.loads(a) for a in rec["attrs"].to_list()]
    assert [a.get("stall_seconds") for a in attrs] == [958.1, None], attrs  # 'other' never stalled
    assert attrs[0]["mono"] == "1917.894851"
    assert rec["message"].to_list()[0] == "nfs: server 192.168.16.10 OK"


def test_kernel_hung_task_with_a_redacted_pid_is_still_a_hung_task() -> None:
    import json

    from crashscope.testing import parse_text

    lines = ["INFO: task python:XXXX blocked for more than 120 seconds.",
             "Call Trace:",
             " [<ffffffffc041afe9>] ? jbd2_log_wait_commit+0xa9/0x130 [jbd2]",
             "INFO: task kworker/3:1:212 blocked for more than 122 seconds."]
    df, warns = parse_text("kernel", "\n".join(lines) + "\n", name="dmesg.txt")
    hung = [json.loads(a) for a in df.filter(df["kind"] == "hung_task")["attrs"].to_list()]
    assert [(h["comm"], h.get("pid"), h.get("pid_redacted"), h["subsystem"]) for h in hung] == [
        ("python", None, "XXXX", "localfs"), ("kworker/3:1", 212, None, "other")], hung
    assert not [w for w in warns if "not understood" in w.message]
