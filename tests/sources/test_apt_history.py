"""apt_history source: which package changes are the GPU/fabric stack's."""

from __future__ import annotations

import json

import pytest

from crashscope.sources.apt_history import component
from crashscope.testing import parse_text


@pytest.mark.parametrize(
    ("package", "want"),
    [
        ("libnvidia-compute-535", "driver"),
        ("nvidia-driver-550", "driver"),
        ("nvidia-fabricmanager-535", "fabricmanager"),
        ("libnccl2", "nccl"),
        ("cuda-toolkit-12-4", "cuda"),
        ("linux-image-5.15.0-91-generic", "kernel"),
        # NVIDIA-named but outside what a training job loads
        ("nvidia-container-toolkit", None),
        ("libnvidia-container1", None),
        ("nvidia-docker2", None),
        ("nvidia-settings", None),
        ("cuda-keyring", None),
        ("openssl", None),
    ],
)
def test_component(package: str, want: str | None) -> None:
    assert component(package) == want


def test_a_container_toolkit_upgrade_is_no_gpu_stack_change() -> None:
    text = (
        "Start-Date: 2024-05-02  03:10:01\n"
        "Commandline: /usr/bin/unattended-upgrade\n"
        "Upgrade: nvidia-container-toolkit:amd64 (1.14.6-1, 1.15.0-1), libnvidia-container1:amd64 (1.14.6-1, 1.15.0-1),"
        " libnvidia-compute-535:amd64 (535.161.07-0ubuntu1, 535.171.04-0ubuntu1)\n"
        "End-Date: 2024-05-02  03:10:09\n"
    )
    df, _ = parse_text("apt_history", text, name="history.log", host_hint="node7")
    changed = [json.loads(a)["package"] for a in df.filter(df["kind"] == "log_error")["attrs"].to_list()]
    assert changed == ["libnvidia-compute-535"]
