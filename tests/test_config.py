from pathlib import Path

import pytest

from crashscope.config import Config, ConfigError, load_config, load_config_or_defaults, parse_config


def test_defaults_without_any_file(monkeypatch, tmp_path):
    monkeypatch.delenv("CRASHSCOPE_CONFIG", raising=False)
    monkeypatch.setattr("crashscope.config.SYSTEM_CONFIG", tmp_path / "absent.toml")
    cfg = load_config()
    assert cfg == Config()
    assert cfg.budget_s == 20.0 and cfg.on_success is False and cfg.source is None


def test_values_and_ticket_table(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('reports_dir = "/r"\nbudget_s = 5\non_success = true\nrules = ["/site/rules"]\n'
                 '[ticket]\nto = "github"\nrepo = "org/inc"\n')
    cfg = load_config(p)
    assert cfg.reports_dir == Path("/r") and cfg.budget_s == 5.0 and cfg.on_success is True
    assert cfg.rules == (Path("/site/rules"),)
    assert cfg.ticket == {"to": "github", "repo": "org/inc"}
    assert cfg.source == p


def test_env_var_is_used(monkeypatch, tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("budget_s = 7\n")
    monkeypatch.setenv("CRASHSCOPE_CONFIG", str(p))
    assert load_config().budget_s == 7.0


@pytest.mark.parametrize("text, needle", [
    ("budgett_s = 3\n", "unknown key"),
    ("budget_s = true\n", "wrong type"),
    ("on_success = 1\n", "wrong type"),
    ("budget_s = 0\n", "between"),
    ("[ticket]\ntoken = 'x'\n", "environment"),
    ("[ticket]\nrepoo = 'x'\n", "unknown [ticket]"),
    ("this is = not toml =\n", "not valid TOML"),
])
def test_bad_files_are_one_clear_error(text, needle):
    with pytest.raises(ConfigError, match=None) as e:
        parse_config(text)
    assert needle in str(e.value)


def test_never_failing_loader_falls_back(tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes(b"\xff\xfe not utf8")
    cfg, warnings = load_config_or_defaults(p)
    assert cfg == Config() and warnings and "defaults used" in warnings[0]
    cfg, warnings = load_config_or_defaults(tmp_path / "missing.toml")
    assert cfg == Config() and "cannot read" in warnings[0]
