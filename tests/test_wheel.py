"""The wheel ships the rules: build it, install it into a fresh venv, analyze the sample job
from a directory outside the repository, and check the rules were loaded.

An editable install (``pip install -e .``) reads ``rules/`` of the checkout and hides a
wheel without rules (every job ``unknown``, no warning); this test is what catches that.
Dependencies come from the environment running the tests (a ``.pth`` file in the fresh venv
points at their site-packages), so nothing is downloaded but the build backend, which pip
takes from its cache or PyPI (``--no-build-isolation`` is the fallback when offline).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "fixtures" / "jobs" / "sample_fabric_timeout"


def _rule_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT / "rules")) for p in (ROOT / "rules").rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build from a copy of the sources, so the checkout gets no build/ or egg-info."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "crashscope", src / "crashscope", ignore=ignore)
    shutil.copytree(ROOT / "rules", src / "rules", ignore=ignore)
    dist = tmp / "dist"
    base = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(dist), str(src)]
    res = _run(base)
    if res.returncode != 0:  # offline: build with the setuptools already installed
        res = _run([*base[:4], "--no-build-isolation", *base[4:]])
    assert res.returncode == 0, res.stderr[-3000:]
    wheels = list(dist.glob("crashscope-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_rules_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(n[len("crashscope/_rules/"):] for n in names if n.startswith("crashscope/_rules/") and not n.endswith("/"))
    assert shipped == _rule_files()
    assert "crashscope/data/classifier.json" in names
    for p in sorted((ROOT / "crashscope" / "catalogs").glob("*.yaml")) if (ROOT / "crashscope" / "catalogs").is_dir() else []:
        assert f"crashscope/catalogs/{p.name}" in names, p.name
    assert "crashscope/py.typed" in names
    for t in sorted((ROOT / "crashscope" / "report" / "templates").glob("*.j2")):  # the HTML view's templates
        assert f"crashscope/report/templates/{t.name}" in names, t.name
    assert not any("__pycache__" in n for n in names)


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import polars

    env_dir = tmp_path_factory.mktemp("venv") / "v"
    res = _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)])
    assert res.returncode == 0, res.stderr
    py = env_dir / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = Path(polars.__file__).resolve().parents[1]  # where this environment keeps the dependencies
    (site / "zz_crashscope_test_deps.pth").write_text(f"{deps}\n")
    res = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q", "--python", str(py), str(wheel)])
    if res.returncode != 0:  # older pip without --python: unpack the wheel (it is pure Python)
        zipfile.ZipFile(wheel).extractall(site)
        (env_dir / "bin" / "crashscope").write_text(f"#!{py}\nimport sys\nfrom crashscope.cli import main\nsys.exit(main())\n")
        (env_dir / "bin" / "crashscope").chmod(0o755)
    return env_dir


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CRASHSCOPE_RULES", "VIRTUAL_ENV", "PYTHONHOME")}
    env["COLUMNS"] = "100"
    return env


def test_installed_wheel_analyzes_the_sample_job_with_rules(venv: Path, tmp_path: Path) -> None:
    py = str(venv / "bin" / "python")
    where = _run([py, "-c", "import crashscope, crashscope.engine.load as l; print(crashscope.__file__); print(l.DEFAULT_RULES_DIR)"], cwd=tmp_path, env=_clean_env())
    assert where.returncode == 0, where.stderr
    pkg, rules_dir = where.stdout.split()
    assert Path(pkg).resolve().is_relative_to(venv.resolve()), pkg  # the wheel, not the checkout
    assert Path(rules_dir).resolve().is_relative_to(venv.resolve()), rules_dir

    exe = str(venv / "bin" / "crashscope")
    listed = _run([exe, "rules", "list"], cwd=tmp_path, env=_clean_env())
    assert listed.returncode == 0, listed.stderr
    n_rules = len(listed.stdout.splitlines())
    assert n_rules == len([f for f in _rule_files() if f.endswith((".yaml", ".yml")) and not Path(f).name.startswith("_")])

    res = _run([exe, "analyze", str(SAMPLE), "--format", "json"], cwd=tmp_path, env=_clean_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert "no detection rules" not in res.stderr and "warning" not in res.stderr, res.stderr
    report = json.loads(res.stdout)
    assert report["cause"] not in ("unknown", "none")
    assert report["cause"] == "fabric_timeout"
    assert report["evidence"] and all(e["rule"] for e in report["evidence"])
    assert not any("no detection rules" in w for w in report["warnings"])
    assert not list(tmp_path.iterdir())  # nothing written to the working directory

    html = _run([exe, "analyze", str(SAMPLE), "--format", "html"], cwd=tmp_path, env=_clean_env())
    assert html.returncode == 0, html.stderr[-2000:]
    assert html.stdout.lstrip().lower().startswith("<!doctype html") and "fabric_timeout" in html.stdout and "<svg" in html.stdout

    term = _run([exe, "analyze", str(SAMPLE)], cwd=tmp_path, env=_clean_env())
    assert term.returncode == 0 and term.stdout.startswith("crashscope: fabric_timeout"), term.stderr[-2000:]
    assert _run([exe, "--version"], cwd=tmp_path, env=_clean_env()).stdout.startswith("crashscope ")
