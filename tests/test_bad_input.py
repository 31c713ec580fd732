"""The bad-input set: each gives a warning naming the file, never a traceback, and
nothing is ever written into the input directory."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from crashscope.pipeline import analyze
from crashscope.ingest import ingest

NCCL_LINE = b"node001:2718:2718 [3] NCCL INFO NCCL version 2.18.5+cuda12.2\n"
WATCHDOG = (
    b"[rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
    b"WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.\n"
)


def _snapshot(root: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime)
    return out


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    (root / "node001").mkdir(parents=True)
    (root / "node001" / "rank3.log").write_bytes(NCCL_LINE + WATCHDOG)
    (root / "empty.log").write_bytes(b"")
    (root / "binary.bin").write_bytes(bytes(range(256)) * 64)
    (root / "latin1.log").write_bytes(b"caf\xe9 \xff\xfe " + WATCHDOG)
    (root / "truncated.log").write_bytes(WATCHDOG[: len(WATCHDOG) // 2])
    (root / "huge_line.log").write_bytes(b"x" * (3 * 1024 * 1024) + b"\n" + WATCHDOG)
    gz = gzip.compress(NCCL_LINE * 1000 + WATCHDOG)
    (root / "ends_early.log.gz").write_bytes(gz[: len(gz) // 2])
    (root / "ok.log.gz").write_bytes(gzip.compress(WATCHDOG))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = WATCHDOG
        info = tarfile.TarInfo("../../escape/rank5.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("evil_link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/shadow"
        tar.addfile(link)
    (root / "logs.tar.gz").write_bytes(buf.getvalue())
    os.symlink("/etc/passwd", root / "outside_link")
    os.symlink("loop_b", root / "loop_a")
    os.symlink("loop_a", root / "loop_b")
    os.symlink("node001/rank3.log", root / "inside_link.log")
    os.mkfifo(root / "pipe")
    unreadable = root / "secret.log"
    unreadable.write_bytes(WATCHDOG)
    unreadable.chmod(0)
    return root


def test_messy_directory_is_read_without_crashing(messy: Path) -> None:
    before = _snapshot(messy)
    report, tl, result = analyze(messy)
    assert _snapshot(messy) == before, "the input directory was modified"
    files = {f.file: f for f in result.files}
    warnings = "\n".join(report.warnings)
    assert "outside_link: symbolic link pointing outside" in warnings
    assert "pipe: not a regular file" in warnings
    assert "binary.bin: binary file" in warnings
    assert "ends_early.log.gz: compressed data ends early" in warnings
    assert "huge_line.log" in warnings and "longer than" in warnings
    assert "evil_link" in warnings
    assert "inside_link.log" not in files  # read once, through its target
    # The member of the tar is read in place under its archive name, never extracted.
    assert "logs.tar.gz!../../escape/rank5.log" in files
    assert not (messy.parent / "escape").exists()
    assert files["empty.log"].kind == "unrecognized"
    # Sources of the report list every file, including unreadable ones when not root.
    kinds = {s["file"]: s["kind"] for s in report.sources}
    if os.geteuid() != 0:
        assert kinds["secret.log"] == "unreadable"
    assert report.cause in ("unknown", "none") or report.cause


def test_watchdog_lines_survive_bad_neighbours(messy: Path) -> None:
    result = ingest(messy)
    per_file = {f.file: f.events for f in result.files}
    # Files whose watchdog line is intact still yield their events.
    for name in ("node001/rank3.log", "latin1.log", "huge_line.log", "ok.log.gz"):
        assert per_file.get(name, 0) >= 1, name


def test_single_file_and_missing_dir(tmp_path: Path) -> None:
    f = tmp_path / "one.log"
    f.write_bytes(WATCHDOG)
    report, _, result = analyze(f)
    assert [x.file for x in result.files] == ["one.log"]
    report, _, result = analyze(tmp_path / "nope")
    assert [x.kind for x in result.files] == ["unreadable"]
    assert any("No such file" in w for w in report.warnings)


def test_compressed_formats_and_nested_archives(tmp_path: Path) -> None:
    import bz2
    import lzma

    import zstandard

    root = tmp_path / "job"
    root.mkdir()
    (root / "a.log.zst").write_bytes(zstandard.ZstdCompressor().compress(WATCHDOG))
    (root / "b.log.bz2").write_bytes(bz2.compress(WATCHDOG))
    (root / "c.log.xz").write_bytes(lzma.compress(WATCHDOG))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:  # plain tar holding a gzip member
        data = gzip.compress(NCCL_LINE + WATCHDOG)
        info = tarfile.TarInfo("node003/rank7.log.gz")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (root / "bundle.tar").write_bytes(buf.getvalue())
    result = ingest(root)
    per_file = {f.file: f for f in result.files}
    for name in ("a.log.zst", "b.log.bz2", "c.log.xz", "bundle.tar!node003/rank7.log.gz"):
        assert per_file[name].events >= 1, name
    member = result.events.filter(result.events["file"] == "bundle.tar!node003/rank7.log.gz")
    assert sorted(set(member["line"].to_list())) == [1, 2]  # line numbers inside the decompressed member (several sources may read a line)
    assert set(member["host"].drop_nulls().to_list()) == {"node001", "node003"}  # NCCL's own host; the folder's for c10


def test_source_override(tmp_path: Path) -> None:
    (tmp_path / "weird.txt").write_bytes(WATCHDOG)
    result = ingest(tmp_path, overrides={"weird.txt": "pytorch"})
    (rec,) = result.files
    assert rec.kind == "pytorch" and rec.confidence == 1.0 and rec.events >= 1
