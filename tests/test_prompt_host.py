"""A shell prompt pasted above a command's output names the host of that output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crashscope.bundle import host_hint_from_prompt
from crashscope.pipeline import analyze


@pytest.mark.parametrize(
    ("head", "host"),
    [
        ("root@node4:~# dmesg -T |grep NVRM\n[x] NVRM: Xid", "node4"),  # bash, Debian/Ubuntu PS1, root
        ("kgk2@bock:~$ cat /proc/driver/nvidia/version\n", "bock"),
        ("zeyer@cn-234 ~ % nvidia-smi\n", "cn-234"),  # zsh's default prompt
        ("[mlf@node21 1-overlapper]$ tail overlap.out\n", "node21"),  # RHEL's default PS1
        ("(base) alice@gpu-07.cluster.local:~/run$ python train.py\n", "gpu-07"),  # conda env, FQDN
        ("root@n1:~# dmesg\n...\nroot@n1:~# nvidia-smi\n", "n1"),
    ],
)
def test_a_prompt_names_the_host(head: str, host: str) -> None:
    assert host_hint_from_prompt(head) == host


@pytest.mark.parametrize(
    "head",
    [
        "root@n1:~# dmesg\nroot@n2:~# dmesg\n",  # two hosts: the file is not one host's
        "ssh root@node4 uptime\n",  # a command naming a host is not a prompt
        "mail john@example.com: $5 fee\n",
        "root@10.0.0.1:~# dmesg\n",  # an address, not a name
        "user@localhost:~$ ls\n",
        "NCCL INFO cudaDriverVersion 12020\n",
        # typed on a login node, about a job elsewhere (tests/data/real/xqtl-156: qacct's hostname is node55)
        "hs3163@csglogin:~$ qacct -j 2253236\nhostname     node55\n",
        "alice@login1:~$ sacct -j 42 -o JobID,State,NodeList\n",
        "root@login1:~# sudo -u bob /usr/bin/scontrol show job 42\n",
        "alice@login1:~$ ssh gpu-07 dmesg\n",
        "alice@login1:~$ cat run.log\nalice@login1:~$ kubectl logs trainer-0\n",
    ],
)
def test_no_host_without_one_prompt_host(head: str) -> None:
    assert host_hint_from_prompt(head) is None


def test_the_prompt_host_reaches_the_culprit(tmp_path: Path) -> None:
    """A pasted dmesg with the prompt above it: the Xid's node is the prompt's host."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "dmesg.txt").write_text(
        "root@node4:~# dmesg -T | grep NVRM\n"
        "[Tue Mar  5 10:01:02 2024] NVRM: Xid (PCI:0000:41:00): 79, pid=1234, GPU has fallen off the bus.\n"
    )
    report, _, _ = analyze(job)
    got = report.to_dict()
    assert got["cause"] == "gpu_hardware"
    assert got["implicated"]["nodes"] == ["node4"], json.dumps(got["implicated"])
