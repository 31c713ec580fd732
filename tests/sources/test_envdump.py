"""The envdump source: env / printenv / export -p output, per rank, secrets dropped at parse
time (coreutils env prints NAME=value; bash's export -p prints declare -x NAME="value")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from crashscope.sources.envdump import SOURCE, is_secret, kept
from crashscope.testing import parse_text

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "envdump"
SECRETS = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "secret-value-1234",
           "0123456789abcdef0123456789abcdef01234567", "SLURM_JWT", "HF_TOKEN", "TORCH_HUB_TOKEN", "WANDB_API_KEY")


def _settings(text: str, name: str = "env.txt", **kw) -> dict[str, tuple[str, int | None, str | None]]:
    df, w = parse_text("envdump", text, name, **kw)
    assert not w
    out = {}
    for r in df.iter_rows(named=True):
        a = json.loads(r["attrs"])
        assert r["kind"] == "net_config" and a["transport"] == "env" and a["origin"] == "envdump"
        out[a["setting"]] = (a["value"], r["rank"], r["host"])
    return out


def test_printenv_keeps_the_communication_keys_per_rank_and_drops_secrets() -> None:
    text = (GOLDEN / "printenv_rank4.txt").read_text()
    s = _settings(text)
    assert s["NCCL_IB_TIMEOUT"] == ("14", 4, "node002")  # RANK=4 (torchrun), SLURMD_NODENAME
    assert s["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == ("1", 4, "node002")
    assert {"HOME", "PATH", "SLURM_JWT", "WANDB_API_KEY"}.isdisjoint(s)
    df, _ = parse_text("envdump", text, "env.txt")
    blob = df.write_json()
    for secret in SECRETS:
        assert secret not in blob


def test_export_p_values_are_unquoted_and_tokens_never_kept() -> None:
    s = _settings((GOLDEN / "export_p.txt").read_text(), "export.txt", rank_hint=7)
    assert s["NCCL_IB_HCA"] == ("=mlx5_0,mlx5_1", 0, "node001")  # SLURM_PROCID without torchrun: the rank
    assert s["NCCL_ALGO"][0] == "Ring,Tree" and s["CUDA_HOME"][0] == "/usr/local/cuda-12.4"
    assert "TORCH_HUB_TOKEN" not in s and "HF_TOKEN" not in s


def test_a_kept_key_with_a_token_shaped_value_is_dropped() -> None:
    s = _settings("NCCL_DEBUG=INFO\nNCCL_CUSTOM=ghp_0123456789abcdefghijABCDEFGHIJ012345\nCUDA_HOME=/usr/local/cuda\n")
    assert set(s) == {"NCCL_DEBUG", "CUDA_HOME"}
    assert is_secret("SLURM_JWT", "x") and is_secret("NCCL_IB_PASSWORD", "x") and not is_secret("NCCL_IB_PKEY", "0x8001")
    assert kept("RANK") and kept("NCCL_IB_GID_INDEX") and not kept("HOME") and not kept("NCCLX")


def test_interleaved_srun_tasks_keep_their_own_rank() -> None:
    s_df, _ = parse_text("envdump", (GOLDEN / "srun_label.txt").read_text(), "job.out")
    gid = {(r["rank"], r["host"]): json.loads(r["attrs"])["value"] for r in s_df.iter_rows(named=True)
           if json.loads(r["attrs"])["setting"] == "NCCL_IB_GID_INDEX"}
    assert gid == {(0, "node001"): "3", (1, "node002"): "0"}


def test_sniff_claims_env_dumps_only() -> None:
    assert SOURCE.sniff((GOLDEN / "printenv_rank4.txt").read_text(), "printenv") >= 0.8
    assert SOURCE.sniff("JobId=14 JobName=train\n   UserId=alice(1000) GroupId=alice(1000)\n   JobState=FAILED Reason=NonZeroExitCode\n", "x") == 0
    assert SOURCE.sniff("HOME=/home/a\nPATH=/bin\nSHELL=/bin/bash\n", "env") == 0  # nothing of ours in it


def test_no_secret_reaches_any_view_of_the_report(tmp_path: Path) -> None:
    from crashscope.pipeline import analyze
    from crashscope.report.render import RENDERERS

    job = tmp_path / "job"
    (job / "node002").mkdir(parents=True)
    shutil.copy(GOLDEN / "printenv_rank4.txt", job / "node002" / "env-rank4.txt")
    report, _, _ = analyze(job)
    assert "envdump" in json.dumps(report.sources)
    for name, render in RENDERERS.items():
        out = render(report)
        for secret in SECRETS[:4]:
            assert secret not in out, name


def test_a_job_script_s_unexpanded_exports_are_not_values_in_force() -> None:
    s = _settings("export MASTER_ADDR=127.0.0.1\nexport MASTER_PORT=$((20000 + SLURM_JOB_ID * 7 % 20000))\n"
                  "export TORCH_FR_DUMP_TEMP_FILE=$PWD/fr/nccl_trace_rank_\nexport NCCL_DEBUG=INFO\n", "job.sh")
    assert {k: v for k, (v, _, _) in s.items()} == {"MASTER_ADDR": "127.0.0.1", "NCCL_DEBUG": "INFO"}
