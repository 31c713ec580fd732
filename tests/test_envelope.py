"""Line envelopes (crashscope/envelope.py): a program's lines read back through a log
collector are read as the program wrote them, line for line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from crashscope import envelope
from crashscope.ingest import ingest
from crashscope.pipeline import analyze

REAL = Path(__file__).resolve().parent / "data" / "real"

# one line of each envelope, as the collectors print them
WRAP = {
    "kubernetes CRI": lambda i, ln: f"2024-05-01T10:00:{i % 60:02d}.{i:09d}Z stderr F {ln}",
    "docker compose": lambda i, ln: f"trainer-1  | {ln}",
    "journal": lambda i, ln: f"May 01 10:00:{i % 60:02d} gpu-node-7 python3[4242]: {ln}",
    "grep": lambda i, ln: f"logs/worker-3.log:{i + 1}:{ln}",
}


def _wrap(name: str, text: str) -> str:
    return "".join(WRAP[name](i, ln) + "\n" for i, ln in enumerate(text.splitlines()))


@pytest.mark.parametrize("name", sorted(WRAP))
def test_each_envelope_is_found_and_taken_off_line_for_line(name: str) -> None:
    program = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\nRuntimeError: boom\n"
    wrapped = _wrap(name, program).encode()
    env = envelope.detect(wrapped)
    assert env is not None and env.name == name
    assert env.strip(wrapped) == program.encode()
    # the stream gives the same, across chunk boundaries, and keeps a line without the envelope
    mixed = wrapped + b"a line of its own\n" + WRAP[name](3, "tail").encode() + b"\n"
    out = envelope.EnvelopeStream(io.BytesIO(mixed), env, chunk=7).read()
    assert out == program.encode() + b"a line of its own\ntail\n"


def test_no_envelope_on_program_lines_or_a_few_wrapped_ones() -> None:
    assert envelope.detect(b"node001:2718:3140 [3] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n" * 5) is None
    assert envelope.detect(b"Traceback (most recent call last):\n  File \"a.py\", line 1\n") is None
    assert envelope.detect(b"trainer-1  | one\n" + b"plain\n" * 4) is None  # not on most lines
    assert envelope.detect(b"trainer-1  | only one line\n") is None


def test_a_line_longer_than_memory_should_hold_passes_through() -> None:
    env = envelope.ENVELOPES[1]
    data = b"trainer-1  | " + b"x" * 100 + b"\ntrainer-1  | end\n"
    assert envelope.EnvelopeStream(io.BytesIO(data), env, chunk=8, max_line=32).read() == b"x" * 100 + b"\nend\n"


@pytest.mark.parametrize("name", sorted(WRAP))
def test_a_real_traceback_behind_an_envelope_reads_as_without(name: str, tmp_path: Path) -> None:
    # tests/data/real/cutie-125: DDP's 'Expected to have finished reduction' error, pasted bare
    src = REAL / "cutie-125" / "log.txt"
    if not src.exists():
        src = next(p for p in (REAL / "cutie-125").iterdir() if p.name != "label.json")
    bare, wrapped = tmp_path / "bare", tmp_path / "wrapped"
    bare.mkdir()
    wrapped.mkdir()
    (bare / "train.log").write_text(src.read_text())
    (wrapped / "train.log").write_text(_wrap(name, src.read_text()))
    want, _, _ = analyze(bare)
    got, _, _ = analyze(wrapped)
    assert want.cause == "software_error"
    assert (got.cause, got.implicated.ranks) == (want.cause, want.implicated.ranks)
    assert got.first_failure is not None and want.first_failure is not None
    assert got.first_failure.line == want.first_failure.line  # the file's own line numbers
    (rec,) = ingest(wrapped).files
    assert rec.note == f"read inside a {name} line envelope"  # said in the coverage table


def test_a_kernel_journal_keeps_its_own_header(tmp_path: Path) -> None:
    # the journal's header is what the kernel source reads (host, time): not an envelope to it
    (tmp_path / "journal.txt").write_text(
        "May 01 10:00:01 gpu-node-7 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus.\n"
        "May 01 10:00:02 gpu-node-7 kernel: NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.\n"
    )
    report, _, _ = analyze(tmp_path)
    assert report.cause == "gpu_hardware" and report.implicated.nodes == ["gpu-node-7"]
