"""Started as root, drops to the job user before touching the directory (started by crashscope.epilog.merge.write_workdir_as_user): writes
the reports into ``<work_dir>/crashscope-<jobid>/``. Request on stdin (JSON
``{"dir": path, "texts": {name: text}}``). The directory is created 0700; a symlink in its
place is refused (``O_NOFOLLOW|O_DIRECTORY``); each file goes to a temporary name created
``O_CREAT|O_EXCL|O_NOFOLLOW`` and is renamed over the name, so a planted link at
``report.html`` is replaced, never written through."""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    from crashscope.epilog.userread import drop_privileges
    from crashscope.report.output import SafeOutput

    req = json.loads(sys.stdin.buffer.read(256 << 20))
    if req.get("uid") is not None and os.geteuid() == 0:
        drop_privileges(int(req["uid"]), int(req["gid"]), [int(g) for g in req.get("groups") or [req["gid"]]])
    d = req["dir"]
    os.umask(0o077)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # a planted link to elsewhere: ELOOP
    os.close(fd)
    for name, text in req["texts"].items():
        if "/" in name or name.startswith("."):
            continue
        with SafeOutput(os.path.join(d, name)) as out:
            out.write_text(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001
        print(f"{type(e).__name__}: {e}"[:400])
        sys.exit(1)
