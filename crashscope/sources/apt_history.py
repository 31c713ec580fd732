"""Package-manager history of a node: apt's ``/var/log/apt/history.log`` and dpkg's
``/var/log/dpkg.log`` (Debian/Ubuntu), read for the packages of the GPU and fabric stack, so
that "the NVIDIA driver was upgraded under a running fleet" is a line in the timeline.

apt (apt-pkg/deb/dpkgpm.cc, ``pkgDPkgPM::WriteHistoryTag`` and ``Go()``) writes one block
per run, local time, two blanks between date and time::

    Start-Date: 2021-06-04  06:41:09
    Commandline: /usr/bin/unattended-upgrade
    Requested-By: alice (1000)
    Upgrade: libnvidia-common-460:amd64 (460.73.01-0ubuntu0.20.04.1, 460.80-0ubuntu0.20.04.2)
    Install: cuda-drivers-535:amd64 (535.154.05-1, automatic)
    Remove: nvidia-dkms-450:amd64 (450.119.04-0ubuntu0.20.04.1)
    End-Date: 2021-06-04  06:41:09

(``Install``/``Reinstall``/``Remove``/``Purge``: ``pkg:arch (version[, automatic])``;
``Upgrade``/``Downgrade``: ``pkg:arch (old, new)``; packages separated by ``), ``.)

dpkg (src/main/... ``log_action``, ``log_message("%s %s %s %s", action, pkg, old, new)``)
writes one line per action, local time::

    2021-06-04 06:41:09 upgrade libnvidia-common-460:amd64 460.73.01-0ubuntu0.20.04.1 460.80-0ubuntu0.20.04.2
    2021-06-04 06:41:09 install nvidia-fabricmanager-535:amd64 <none> 535.154.05-1
    2021-06-04 06:41:10 remove nvidia-dkms-450:amd64 450.119.04-0ubuntu0.20.04.1 <none>

Events: log_error, one per changed package of the GPU/fabric stack (NVIDIA driver and its
libraries, DKMS and kernel modules, fabric manager, CUDA, NCCL, cuDNN, DCGM, MLNX_OFED /
rdma-core, the Linux kernel image), attrs ``change`` (install, reinstall, upgrade,
downgrade, remove, purge), ``package``, ``component`` (driver, fabricmanager, cuda, nccl,
cudnn, dcgm, ofed, kernel), ``from`` / ``to`` (versions; absent when none), ``tool`` (apt
or dpkg) and, for apt, ``commandline`` and ``requested_by``. An upgrade, downgrade or
removal is a warning (the user-space libraries and the loaded kernel module may now
differ), an install is info. Other packages give no event. Times are the node's local
time (``--tz``).
"""

from __future__ import annotations

from typing import Any

from crashscope.schema import Kind, Severity
from crashscope.sources.base import FileSource, ParseContext, decode, lazy_compile

_START = lazy_compile(r"^Start-Date: (?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)\s+(?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)\s*$")
_FIELD = lazy_compile(r"^(?P<key>Commandline|Requested-By|Install|Reinstall|Upgrade|Downgrade|Remove|Purge|End-Date|Error): ?(?P<value>.*)$")
# one package of an apt list: name[:arch] (v) / (v, automatic) / (old, new)
_PKG = lazy_compile(r"(?P<pkg>[a-z0-9][a-z0-9+.~-]*)(?::(?P<arch>[a-z0-9-]+))? \((?P<v>[^()]*)\)")
_DPKG = lazy_compile(
    r"^(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d) "
    r"(?P<action>install|upgrade|remove|purge) (?P<pkg>[a-z0-9][a-z0-9+.~-]*)(?::(?P<arch>[a-z0-9-]+))? (?P<old>\S+) (?P<new>\S+)\s*$"
)
_DPKG_ANY = lazy_compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (?:startup|status|configure|trigproc|install|upgrade|remove|purge|conffile) ")

# package name -> component, first match wins (Debian/Ubuntu and NVIDIA's CUDA repository names);
# None: NVIDIA-named packages outside the driver stack (container runtime, desktop tools,
# the repository key), whose upgrades change nothing a training job loads
_COMPONENTS: tuple[tuple[Any, str | None], ...] = (
    (lazy_compile(r"^(?:nvidia-container|libnvidia-container|nvidia-docker|nvidia-prime|nvidia-settings|cuda-keyring)"), None),
    (lazy_compile(r"^(?:nvidia-fabricmanager|libnvidia-nscq|nvlsm)"), "fabricmanager"),
    (lazy_compile(r"^(?:datacenter-gpu-manager|libdcgm)"), "dcgm"),
    (lazy_compile(r"^(?:libnccl|nccl)"), "nccl"),
    (lazy_compile(r"^(?:libcudnn|cudnn)"), "cudnn"),
    (lazy_compile(r"^(?:nvidia-|libnvidia-|xserver-xorg-video-nvidia|cuda-drivers|libxnvctrl)"), "driver"),
    (lazy_compile(r"^(?:cuda-|libcuda|libcublas|libcufft|libcurand|libcusolver|libcusparse|libnpp|libnvjpeg)"), "cuda"),
    (lazy_compile(r"^(?:mlnx-|mlnx_ofed|ofed-|rdma-core|libibverbs|ibverbs-providers|librdmacm|infiniband-diags|ucx)"), "ofed"),
    (lazy_compile(r"^linux-(?:image|modules)-"), "kernel"),
)

_CHANGE = {"Install": "install", "Reinstall": "reinstall", "Upgrade": "upgrade", "Downgrade": "downgrade", "Remove": "remove", "Purge": "purge"}


def component(package: str) -> str | None:
    for rx, comp in _COMPONENTS:
        if rx.match(package):
            return comp
    return None


class AptHistorySource(FileSource):
    name = "apt_history"
    description = "apt history.log and dpkg.log package changes of the GPU/fabric stack"
    filename_hints = ("history.log*", "dpkg.log*", "*apt-history*", "*apt_history*")

    def sniff(self, head: str, name: str) -> float:
        # Every file's head is sniffed: a substring test and one anchored match reject the
        # others before any per-line work.
        if "Start-Date: " not in head and not _DPKG_ANY.match(head.lstrip()):
            return 0.0
        lines = [ln for ln in head.splitlines()[:200] if ln.strip()]
        if not lines:
            return 0.0
        starts = sum(1 for ln in lines if _START.match(ln))
        fields = sum(1 for ln in lines if _FIELD.match(ln))
        if starts and starts + fields >= 0.8 * len(lines):
            return 0.9
        dpkg = sum(1 for ln in lines if _DPKG_ANY.match(ln))
        if dpkg and dpkg >= 0.8 * len(lines):
            return 0.8
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        text, bad = decode(data)
        if bad:
            ctx.warn("invalid UTF-8 bytes replaced")
        block: dict[str, Any] = {}
        for n, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
            line = raw.rstrip()
            if not line:
                continue
            if m := _START.match(line):
                t = ctx.local_ns(*(int(m.group(k)) for k in ("y", "mo", "d", "hh", "mi", "ss")))
                block = {"time": t}
                continue
            if m := _DPKG.match(line):
                t = ctx.local_ns(*(int(m.group(k)) for k in ("y", "mo", "d", "hh", "mi", "ss")))
                old, new = m.group("old"), m.group("new")
                self._emit(ctx, n, line, m.group("action"), m.group("pkg"), None if old == "<none>" else old,
                           None if new == "<none>" else new, "dpkg", t, {})
                continue
            f = _FIELD.match(line)
            if not f:
                continue
            key, value = f.group("key"), f.group("value")
            if key == "Commandline":
                block["commandline"] = value[:200]
            elif key == "Requested-By":
                block["requested_by"] = value[:100]
            elif key in _CHANGE:
                for p in _PKG.finditer(value):
                    parts = [v.strip() for v in p.group("v").split(",")]
                    if key in ("Upgrade", "Downgrade"):
                        old, new = (parts + [""])[:2]
                    elif key in ("Remove", "Purge"):
                        old, new = parts[0], ""
                    else:
                        old, new = "", parts[0]
                    extra = {k: block[k] for k in ("commandline", "requested_by") if block.get(k)}
                    self._emit(ctx, n, line, _CHANGE[key], p.group("pkg"), old or None, new or None, "apt", block.get("time"), extra)
            elif key == "End-Date":
                block = {}

    @staticmethod
    def _emit(ctx: ParseContext, n: int, line: str, change: str, package: str, old: str | None, new: str | None,
              tool: str, time: int | None, extra: dict[str, Any]) -> None:
        comp = component(package)
        if comp is None:
            return
        attrs: dict[str, Any] = {"change": change, "package": package, "component": comp, "tool": tool, **extra}
        if old:
            attrs["from"] = old
        if new:
            attrs["to"] = new
        versions = " -> ".join(v for v in (old, new) if v)
        message = f"{tool} {change} {package} {versions}".strip() if tool == "apt" else line
        sev = Severity.INFO if change == "install" else Severity.WARNING
        ctx.emit(Kind.LOG_ERROR, n, message, severity=sev, time=time,
                 time_quality=ctx.local_quality() if time is not None else None, attrs=attrs)


SOURCE = AptHistorySource()
