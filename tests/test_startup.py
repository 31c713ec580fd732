"""Start-up cost of a small run: the data cache (catalogs, shipped rules), pydantic-free
option coercion, and what a small ``analyze`` imports."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crashscope import catalogs, datacache
from crashscope.engine import load as rules_load

MINI = Path(__file__).parent / "data" / "mini_ib_job"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv(datacache.ENV_DIR, str(d))
    return d


def _entry(d: Path, name: str) -> Path:
    """The entry file of ``name``; ``catalogs`` and ``rules``: this checkout's one."""
    if name in ("catalogs", "rules"):
        (found,) = d.glob(f"{name}-*.pickle")
        return found
    return d / f"{name}.pickle"


# --- the cache itself ------------------------------------------------------------------


def test_put_get_round_trip_and_key(cache: Path) -> None:
    key = datacache.fingerprint(["a", b"b"])
    assert datacache.put("t", key, {"x": (1, 2)})
    assert datacache.get("t", key, ()) == {"x": (1, 2)}
    assert datacache.get("t", datacache.fingerprint(["a", b"c"]), ()) is None  # another key: a miss
    assert oct(cache.stat().st_mode & 0o777) == "0o700" and oct(_entry(cache, "t").stat().st_mode & 0o777) == "0o600"
    # length-prefixed parts: ["ab"] and ["a", "b"] are different keys
    assert datacache.fingerprint(["ab"]) != datacache.fingerprint(["a", "b"])
    # one entry per kind and folder
    assert datacache.entry_name("rules", "/a") != datacache.entry_name("rules", "/b")
    assert datacache.entry_name("rules", "/a") == datacache.entry_name("rules", "/a") != datacache.entry_name("catalogs", "/a")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_corrupted_entry_is_ignored_and_rebuilt(cache: Path, damage: str) -> None:
    key = datacache.fingerprint(["k"])
    datacache.put("t", key, list(range(1000)))
    p = _entry(cache, "t")
    data = p.read_bytes()
    p.write_bytes({"truncate": data[: len(data) // 2], "flip": data[:-10] + bytes(b ^ 0xFF for b in data[-10:]),
                   "empty": b"", "garbage": os.urandom(len(data))}[damage])
    assert datacache.get("t", key, ()) is None
    assert datacache.put("t", key, [1]) and datacache.get("t", key, ()) == [1]


def test_a_forged_entry_cannot_name_a_callable(cache: Path) -> None:
    """A well-formed entry (right header, right payload hash) that names os.system."""

    class Evil:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.system, ("echo pwned",))

    key = datacache.fingerprint(["k"])
    payload = pickle.dumps(Evil(), protocol=5)
    cache.mkdir(mode=0o700)
    _entry(cache, "t").write_bytes(datacache._MAGIC + key + hashlib.sha256(payload).digest() + payload)
    os.chmod(_entry(cache, "t"), 0o600)
    assert datacache.get("t", key, ()) is None
    # the classes a caller allows do load
    datacache.put("t", key, Path("/x"))
    assert datacache.get("t", key, {("pathlib", "PosixPath")}) == Path("/x")
    assert datacache.get("t", key, ()) is None


def test_links_and_writable_entries_are_not_read(cache: Path, tmp_path: Path) -> None:
    key = datacache.fingerprint(["k"])
    datacache.put("t", key, 1)
    p = _entry(cache, "t")
    os.chmod(p, 0o666)  # group/other writable: someone else could have written it
    assert datacache.get("t", key, ()) is None
    os.chmod(p, 0o600)
    target = tmp_path / "elsewhere.pickle"
    shutil.move(p, target)
    p.symlink_to(target)  # an entry that is a link: never followed
    assert datacache.get("t", key, ()) is None
    # a cache folder that is a link: neither read nor written through
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.environ[datacache.ENV_DIR] = str(link)
    assert not datacache.put("t", key, 1)
    assert list(real.iterdir()) == []
    assert datacache.get("t", key, ()) is None


def test_an_unusable_folder_falls_back_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(datacache.ENV_DIR, str(blocker / "cache"))
    assert not datacache.put("t", datacache.fingerprint(["k"]), 1)
    assert datacache.get("t", datacache.fingerprint(["k"]), ()) is None
    loaded = catalogs.load.__wrapped__()  # type: ignore[attr-defined]  # builds from the YAML
    assert loaded.entries
    for off in ("off", "0", ""):
        monkeypatch.setenv(datacache.ENV_DIR, off)
        assert datacache.cache_dir() is None and not datacache.put("t", b"k" * 32, 1)


def test_default_folder_is_the_xdg_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(datacache.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert datacache.cache_dir() == tmp_path / "crashscope"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # ignored, per the spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datacache.cache_dir() == tmp_path / "home" / ".cache" / "crashscope"


# --- what is cached: the same objects as a build --------------------------------------


def test_cached_catalogs_equal_a_fresh_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = catalogs.load.__wrapped__()  # type: ignore[attr-defined]
    assert _entry(cache, "catalogs").is_file()

    def no_build(*a: object, **kw: object) -> None:
        raise AssertionError("built again: the cache was not used")

    monkeypatch.setattr(catalogs, "build", no_build)
    second = catalogs.load.__wrapped__()  # type: ignore[attr-defined]
    assert second == first and second is not first
    assert second.prefilter == first.prefilter and second.anchor_entries == first.anchor_entries
    line = "NCCL WARN NET/IB : Got completion from peer 10.0.0.7<4000> with status=12 opcode=0 len=0 vendor err 129"
    assert catalogs.match_text(line, second) == catalogs.match_text(line, first) != []


def _rule_fields(r: object) -> list[tuple[str, object]]:
    return [(f.name, getattr(r, f.name)) for f in dataclasses.fields(r)]  # type: ignore[arg-type]


def test_cached_rules_equal_a_fresh_load(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = rules_load.load_rules()
    assert _entry(cache, "rules").is_file()
    monkeypatch.setattr(rules_load, "load_file", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("parsed again")))
    second = rules_load.load_rules()
    assert [_rule_fields(r) for r in second.rules] == [_rule_fields(r) for r in first.rules]
    assert second.issues == first.issues and second.files == first.files


def test_a_changed_rule_file_is_read_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "rules"
    shutil.copytree(rules_load.DEFAULT_RULES_DIR, shipped)
    monkeypatch.setattr(rules_load, "DEFAULT_RULES_DIR", shipped)
    monkeypatch.setattr(rules_load, "rule_dirs", lambda: [shipped])
    before = {r.id: r for r in rules_load.load_rules().rules}
    path = Path(next(iter(before.values())).path)
    path = path if path.is_absolute() else shipped / path.relative_to("rules")
    rid = before[next(iter(before))].id
    text = path.read_text()
    path.write_text(text.replace(f"id: {rid}", f"id: {rid}-changed", 1))
    after = {r.id for r in rules_load.load_rules().rules}
    assert f"{rid}-changed" in after and rid not in after
    path.write_text("id: [unclosed\n")  # broken YAML: an issue, as without a cache
    broken = rules_load.load_rules()
    assert any(i.check == "yaml" for i in broken.issues)


# --- option coercion without pydantic --------------------------------------------------


def test_plain_coercion_gives_what_typer_gives() -> None:
    import typer.main
    from typer._click.exceptions import BadParameter
    from typer._coercion import build_runtime_param

    from crashscope.cli import app
    from crashscope.cli._coerce import _Plain, install

    group = typer.main.get_command(app)
    install(group)
    samples = {"str": ["x", "", " a b ", "-"], "path": ["a/b", "/tmp", ".", "-", "rel/../x", "", "~/x", "a\x00b"], "enum": None}
    checked = 0
    todo = [group]
    while todo:
        cmd = todo.pop()
        todo.extend(getattr(cmd, "commands", {}).values())
        for p in cmd.params:
            rp = p._runtime_param
            assert isinstance(rp, _Plain), p.name
            if rp.leaf == "typer":
                continue
            real = build_runtime_param(p.type_descriptor)
            ann = p.type_descriptor.annotation
            leaf_ann = ann.__args__[0] if rp.many else ann
            values = [m.value for m in leaf_ann] + ["nope"] if rp.leaf == "enum" else samples[rp.leaf]
            for v in values:
                arg = [v, v] if rp.many else v
                try:
                    want = ("ok", real._coerce_value(arg, param=p, ctx=None))
                except BadParameter as e:
                    want = ("error", e.message)
                try:
                    got = ("ok", rp._coerce_value(arg, param=p, ctx=None))
                except BadParameter as e:
                    got = ("error", e.message)
                assert got == want, (cmd.name, p.name, v)
                checked += 1
    assert checked > 50


def test_small_analyze_imports_neither_pydantic_nor_yaml(tmp_path: Path) -> None:
    env = {**os.environ, datacache.ENV_DIR: str(tmp_path / "cache")}
    out = tmp_path / "r.json"
    code = (
        "import sys\nfrom crashscope.cli import main\n"
        f"sys.argv = ['crashscope', 'analyze', {str(MINI)!r}, '-f', 'json', '-o', {str(out)!r}, '--tz', 'UTC']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(','.join(m for m in ('pydantic', 'yaml', 'torch', 'sklearn', 'jinja2', 'httpx', 'zstandard', 'numpy', 'crashscope.redact') if m in sys.modules))\n"
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "pydantic" not in first.stdout, first.stdout  # the first run builds the cache (and imports yaml)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert second.stdout.strip() == "", f"a small analyze imported: {second.stdout}"
    assert out.is_file()


@pytest.mark.parametrize("config_redact", [False, True])
def test_redaction_decision_matches_the_redactor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_redact: bool) -> None:
    from crashscope.cli.analyze_cmd import redacting_wanted
    from crashscope.redact import redaction_wanted

    cfg = tmp_path / "config.toml"
    cfg.write_text(f"redact = {str(config_redact).lower()}\n")
    monkeypatch.setenv("CRASHSCOPE_CONFIG", str(cfg))
    job = tmp_path / "job"
    job.mkdir()
    for flag in (None, True, False):
        for map_path in (None, tmp_path / "map.json"):
            try:
                want: object = redaction_wanted(flag, map_path, [job])
            except Exception as e:  # --no-redact with a map: the same usage error
                want = type(e)
            try:
                got: object = redacting_wanted(flag, map_path, [job])
            except Exception as e:
                got = type(e)
            assert got == want, (flag, map_path)


def test_command_table_matches_what_each_module_registers() -> None:
    import typer.main

    from crashscope import cli

    seen: dict[str, str] = {}
    for module in cli.COMMAND_MODULES:
        for name in typer.main.get_command(cli.new_app((module,))).commands:  # type: ignore[attr-defined]
            seen[name] = module
    assert seen == cli.COMMANDS
    assert sorted(typer.main.get_command(cli.app).commands) == sorted(cli.COMMANDS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [["analyze", "--help"], ["rules", "list", "--help"], ["epilog", "--help"], ["analyze", "/nonexistent/dir"]])
def test_one_command_app_behaves_as_the_whole_app(args: list[str]) -> None:
    from typer.testing import CliRunner

    from crashscope import cli

    runner = CliRunner()
    whole = runner.invoke(cli.app, args)
    one = runner.invoke(cli.new_app((cli.COMMANDS[args[0]],)), args)
    assert (one.exit_code, one.output) == (whole.exit_code, whole.output)
