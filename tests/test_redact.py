"""Redaction: a seeded corpus. A copy of the sample job gets secrets of every kind, user
names, e-mail addresses, IP addresses and fully qualified host names planted in the lines
that reach the report (evidence, excerpt, symptoms) and in file names; analysed without
redaction every planted value is in the output (so this test can fail), analysed with
redaction none is in any view of RENDERERS (HTML attributes included), and the verdict is
unchanged."""

from __future__ import annotations

import html
import json
import re
import shutil
import stat
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crashscope.redact import Redactor, known_hosts, redact_report

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "sample_fabric_timeout"

# kind -> value; each is planted somewhere the report shows (see PLANT)
PLANTED: dict[str, str] = {
    "aws_access_key_id": "AKIAQ3EGRJ5OSTZVWX7Y",
    "aws_secret_access_key": "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",
    "gcp_private_key_body": "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC7",
    "gcp_private_key_id": "3f9a1c2e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90",
    "github_classic": "ghp_R2d2C3poLuk3Skyw4lk3rH4nS0lo1234abcd",
    "github_fine_grained": "github_pat_11ABCDEFG0jKlMnOpQrStU_vWxYz0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
    "huggingface": "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",
    "wandb_api_key": "8c1f0e2d3b4a59687766554433221100ffeeddcc",
    "slack_bot_token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack_webhook": "T0ABCDEF1/B0ABCDEF2/Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTcwMDAwMDAwMH0.Qm9vdHN0cmFwU2lnbmF0dXJlX3Rlc3Q",
    "bearer": "7fGh2Jk9Lm4Np6Qr8St0Uv1W",
    "url_password": "Pr3ttyS3cretPw!",
    "env_password": "hunter2hunter2",
    "env_token": "mlf_7c2d9e0a1b3f",
    "json_password": "CorrectHorseBattery9",
    "email": "alice.smith@acme-corp.example",
    "user_home": "alice",
    "user_mac_home": "bsmith",
    "user_env": "carol",
    "user_url": "deploy",
    "ipv4_planted": "172.31.44.201",
    "ipv4_fixture": "10.13.0.3",
    "ipv6": "2001:db8:85a3::8a2e:370:7334",
    "fqdn": "node001.hpc.acme-corp.example",
    "domain": "acme-corp.example",
    "host_1": "node001",
    "host_2": "node002",
    "host_3": "node003",
    "host_4": "node004",
}
P = PLANTED

# (file, line number, text appended to that line)
PLANT: list[tuple[str, int, str]] = [
    ("nodes/node001/journal-kernel-iso.log", 13, f" [seen by USER={P['user_env']} at /home/{P['user_home']}/.ssh, mail {P['email']}]"),
    ("slurm-9491422.out", 779, f" via {P['fqdn']} {P['ipv4_planted']} {P['ipv6']}"),
    ("slurm-9491422.out", 782, f" [env AWS_ACCESS_KEY_ID={P['aws_access_key_id']} aws_secret_access_key = {P['aws_secret_access_key']}]"),
    ("slurm-9491422.out", 783, f" HF_TOKEN={P['huggingface']} WANDB_API_KEY={P['wandb_api_key']}"),
    ("slurm-9491422.out", 786, f" (curl -H 'Authorization: Bearer {P['bearer']}' https://{P['user_url']}:{P['url_password']}@git.hpc.{P['domain']}/repo.git)"),
    ("slurm-9491422.out", 787, f" {P['github_classic']} {P['github_fine_grained']}"),
    ("slurm-9491422.out", 792, f" notify {P['slack_bot_token']} https://hooks.slack.com/services/{P['slack_webhook']}"),
    ("slurm-9491422.out", 793, f" session {P['jwt']}"),
    ("slurm-9491422.out", 794, f' {{"private_key_id": "{P["gcp_private_key_id"]}", "private_key": "-----BEGIN PRIVATE KEY-----\\n{P["gcp_private_key_body"]}\\n-----END PRIVATE KEY-----\\n"}}'),
    ("slurm-9491422.out", 795, f" DB_PASSWORD={P['env_password']} MLFLOW_TRACKING_TOKEN={P['env_token']} data /Users/{P['user_mac_home']}/data"),
    # on the cause's own evidence line, so it reaches the views whatever the excerpt window holds
    ("slurm-9491422.out", 779, f' config {{"password": "{P["json_password"]}"}}'),
]
# files whose names carry a value (listed in the report's sources)
PLANTED_FILES = [
    f"nodes/node002/env-{P['aws_access_key_id']}.txt",
    f"wandb-{P['wandb_api_key']}.log",
    f"home/{P['user_home']}/notes-{P['huggingface']}.txt",
    f"{P['fqdn']}-dmesg-copy.txt",
]


def build_corpus(out: Path) -> Path:
    shutil.copytree(FIXTURE, out, ignore=shutil.ignore_patterns("truth.json"))
    for rel, line, text in PLANT:
        p = out / rel
        lines = p.read_text(encoding="utf-8").split("\n")
        assert lines[line - 1].strip(), (rel, line)
        lines[line - 1] += text
        p.write_text("\n".join(lines), encoding="utf-8")
    for rel in PLANTED_FILES:
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("notes\n", encoding="utf-8")
    return out


class _Attrs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.values.extend(v for _, v in attrs if v)


def _views(report: Any) -> dict[str, str]:
    from crashscope.report.render import RENDERERS

    out = {}
    for name, fn in RENDERERS.items():
        out[name] = fn(report, width=200, color=False, full=True) if name == "terminal" else fn(report)
    return out


def _variants(name: str, text: str) -> list[str]:
    """The text as a reader would see it: escapes undone, wrapping removed."""
    vs = [text, html.unescape(text), re.sub(r"\\(.)", r"\1", text)]
    if name == "json":
        strings: list[str] = []

        def walk(o: Any) -> None:
            if isinstance(o, str):
                strings.append(o)
            elif isinstance(o, dict):
                for k, v in o.items():
                    strings.append(str(k))
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)

        walk(json.loads(text))
        vs.append("\n".join(strings))
    if name == "html":
        a = _Attrs()
        a.feed(text)
        vs.append("\n".join(a.values))
    vs += [re.sub(r"\s+", "", v) for v in vs]
    return vs


def _found(views: dict[str, str]) -> dict[str, list[str]]:
    """planted kind -> the views that show it (whole, or a 12-character start or end)."""
    hits: dict[str, list[str]] = {}
    for name, text in views.items():
        vs = _variants(name, text)
        for kind, value in PLANTED.items():
            needles = {value} | ({value[:12], value[-12:]} if len(value) >= 16 else set())
            if any(n in v for v in vs for n in needles):
                hits.setdefault(kind, []).append(name)
    return hits


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from crashscope.pipeline import analyze

    job = build_corpus(tmp_path_factory.mktemp("corpus") / "job")
    report, _, _ = analyze(job, tz="UTC")
    return job, report


def test_every_planted_value_reaches_the_unredacted_report(corpus: tuple[Path, Any]) -> None:
    _, report = corpus
    hits = _found(_views(report))
    missing = sorted(set(PLANTED) - set(hits))
    assert not missing, f"planted but not in any view (the corpus would prove nothing): {missing}"


def test_redacted_views_show_none_of_them(corpus: tuple[Path, Any]) -> None:
    from crashscope.report.render import RENDERERS

    _, report = corpus
    red, r = redact_report(report)
    views = _views(red)
    assert set(views) == set(RENDERERS)
    leaks = _found(views)
    print(f"\nredaction corpus: {len(PLANTED)} values planted, views {sorted(views)}, found in redacted output: {len(leaks)} {leaks}; placeholders {r.counts()}")
    assert leaks == {}


def test_redaction_keeps_the_verdict_and_the_contract(corpus: tuple[Path, Any]) -> None:
    _, report = corpus
    red, _ = redact_report(report)
    a, b = report.to_dict(), red.to_dict()
    assert b["cause"] == a["cause"] == "fabric_timeout"
    for k in ("schema_version", "confidence", "alternatives", "actions"):
        assert b[k] == a[k], k
    assert b["implicated"]["ranks"] == a["implicated"]["ranks"]
    assert len(b["implicated"]["nodes"]) == len(a["implicated"]["nodes"])
    assert [(e["rule"], e["cause"], e["role"], e["line"], e["time"], e["rank"], e["kind"], e["source"]) for e in b["evidence"]] == \
           [(e["rule"], e["cause"], e["role"], e["line"], e["time"], e["rank"], e["kind"], e["source"]) for e in a["evidence"]]
    assert (b["first_failure"] or {}).get("time") == (a["first_failure"] or {}).get("time")
    assert set(b) == set(a) and len(b["sources"]) == len(a["sources"])
    from crashscope.report.model import Report

    assert Report.from_dict(json.loads(json.dumps(b))).cause == "fabric_timeout"


def test_placeholders_are_stable_and_the_same_everywhere(corpus: tuple[Path, Any]) -> None:
    _, report = corpus
    red1, r1 = redact_report(report)
    red2, r2 = redact_report(report)
    assert red1.to_dict() == red2.to_dict() and r1.mapping == r2.mapping
    culprit = r1.redact("node001")
    assert r1.mapping["host"][culprit] == P["fqdn"]  # the map names a host by its longest name
    d = red1.to_dict()
    assert d["implicated"]["nodes"] == [culprit]
    assert culprit in d["summary"]
    assert culprit.startswith("host-") and r1.redact("node002").startswith("host-") and r1.redact("node002") != culprit
    # the node field, the file name and the message name the same placeholder
    ev = next(e for e in d["evidence"] if e["file"].startswith("nodes/"))
    assert ev["node"] == culprit and ev["file"].startswith(f"nodes/{culprit}/")
    assert any(f"remote peer {culprit}<" in e["message"] for e in d["evidence"])
    # the FQDN and its short name are one host; the per-host table is keyed by placeholder
    assert r1.redact(P["fqdn"]) == culprit
    assert set(d["coverage"]["hosts"]) - {"?"} <= set(r1.mapping["host"])
    # the same secret gets the same placeholder in two places (a log line and a file name)
    wandb_ph = next(p for p, v in r1.mapping["secret"].items() if v == P["wandb_api_key"])
    files = [s["file"] for s in d["sources"]]
    assert f"wandb-{wandb_ph}.log" in files
    # and every view of the redacted report reads the same culprit
    views = _views(red1)
    assert all(culprit in text for text in views.values())


def test_cli_redact_all_formats_and_map_file(corpus: tuple[Path, Any], tmp_path: Path) -> None:
    from crashscope.cli import app
    from crashscope.report.render import RENDERERS

    job, _ = corpus
    runner = CliRunner()
    outputs = {}
    for view in RENDERERS:
        res = runner.invoke(app, ["analyze", str(job), "--tz", "UTC", "--format", view, "--redact"])
        assert res.exit_code == 0, res.output
        outputs[view] = res.stdout
    leaks = _found(outputs)
    assert leaks == {}
    mp = tmp_path / "map.json"
    res = runner.invoke(app, ["analyze", str(job), "--tz", "UTC", "--format", "json", "--redact-map", str(mp)])
    assert res.exit_code == 0, res.output
    assert stat.S_IMODE(mp.stat().st_mode) == 0o600
    mapping = json.loads(mp.read_text())
    assert mapping["host"]["host-1"] in ("node001", P["fqdn"]) and P["wandb_api_key"] in mapping["secret"].values()
    assert _found({"json": res.stdout}) == {}  # --redact-map implies --redact
    inside = runner.invoke(app, ["analyze", str(job), "--redact-map", str(job / "map.json")])
    assert inside.exit_code == 2 and not (job / "map.json").exists()


def test_redactor_units() -> None:
    r = Redactor(hosts=["gpu-a07", "gpu-a08.cluster.example"])
    texts = [
        "gpu-a07 rank 17 and gpu-a08 at gpu-a08.cluster.example; nodelist gpu-a[07-08]",
        "TOKENIZERS_PARALLELISM=false NCCL_IB_TIMEOUT=22 KeyError: 'labels' step=5 tokens=4096",
        "commit 0123456789abcdef0123456789abcdef01234567 loopback 127.0.0.1 ::1 version 2.18.3",
    ]
    for t in texts:
        r.learn(t)
    a, b, c = (r.redact(t) for t in texts)
    assert a == "host-1 rank 17 and host-2 at host-2; nodelist host-[1-2]"
    assert b == texts[1]  # not secrets: a boolean, a number, an exception, counts
    assert c == texts[2]  # a commit hash, loopback addresses and a version stay
    assert r.redact("10.0.0.7:29500 and 10.0.0.7") == "ip-1:29500 and ip-1"
    assert known_hosts({"job": {"nodes": ["n[1-2]"]}, "evidence": [{"node": "x9"}], "coverage": {"hosts": {"z1": {}}}}) == ["n1", "n2", "x9", "z1"]


def test_hostile_strings_cost_little() -> None:
    import time

    r = Redactor(hosts=["node001"])
    t0 = time.monotonic()
    for s in ["a" * 20000, "A1" * 10000, "node001." * 3000, "x=1 " * 5000, "--k " * 5000, ":" * 20000, "/home/" * 3000]:
        r.learn(s)
        r.redact(s)
    assert time.monotonic() - t0 < 10


def test_trie_alternation_matches_as_the_sorted_alternation() -> None:
    """The host, user and domain patterns are written as a trie (crashscope.redact._alternation):
    on every text they match what the longest-first alternation of the same words matches,
    spans and groups alike: prefixes of one another (node1, node12, node1.hpc.acme.com),
    upper-case text under (?i), a word ending where a longer one goes on, and word lists
    the trie does not take (mixed case, non-ASCII) falling back to the alternation."""
    import random

    import regex

    from crashscope.redact import _alternation

    rng = random.Random(7)
    words = ["node1", "node12", "node123", "node1.hpc.acme.com", "n1", "gpu-a", "gpu-ab", "login.acme.com", "acme.com", "x-9"]
    words += [f"node{i:04d}" for i in range(0, 300, 3)]
    alphabet = ["node1", "NODE12", "2", "3", ".", ".hpc", ".acme", ".com", "-", "gpu-a", "b", " ", "/", "x-9", ".log", "Node0003", "acme", "n1"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    for ws, flags in ((words, "(?i)"), (words, ""), (["Node1", "node12"], "(?i)"), (["nöde1", "node12"], "(?i)")):
        ws = sorted(ws, key=len, reverse=True)
        tail = r")((?:\.[A-Za-z0-9-]+)*)(?![A-Za-z0-9-])"
        plain = regex.compile(flags + r"(?<![A-Za-z0-9-])(" + "|".join(regex.escape(w) for w in ws) + tail)
        trie = regex.compile(flags + r"(?<![A-Za-z0-9-])(" + _alternation(ws, bool(flags)) + tail)
        for t in texts:
            assert [(m.span(), m.groups()) for m in trie.finditer(t)] == [(m.span(), m.groups()) for m in plain.finditer(t)], (ws[:3], t)
    assert _alternation(["Node1", "node12"], True) == "Node1|node12"  # mixed case under (?i): the plain alternation
