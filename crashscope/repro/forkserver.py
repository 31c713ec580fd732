"""A fork server for local workers: imports torch once, then forks one worker per request.

``python -m crashscope.repro.forkserver`` reads JSON lines on standard input,
``{"argv": [...], "env": {...}, "log": PATH}`` (argv: the worker's arguments after
``-m crashscope.repro.worker``), forks, and answers ``{"pid": PID}``; when a worker ends it
writes ``{"exit": PID, "rc": RC}`` (``-SIGNAL`` when a signal ended it, as subprocess does).
Each worker calls ``setsid()`` first, so the launcher can kill its whole process group. When
standard input closes (the launcher ended, however), the server kills the groups of the
workers still running and exits: nothing outlives the command.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys


def _child(req: dict) -> None:
    os.setsid()
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(req.get("env") or {})
    code = 1
    try:
        from crashscope.repro import worker

        code = worker.main(list(req["argv"]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker writes its own error result
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    try:
        import torch  # noqa: F401 - the point of the server
        import torch.distributed  # noqa: F401
    except ImportError:
        pass  # the workers will say so in their results
    import crashscope.repro.worker  # noqa: F401

    out = sys.stdout
    children: set[int] = set()

    def say(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            children.discard(pid)
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            say({"exit": pid, "rc": rc})

    stdin = sys.stdin.buffer
    buf = b""
    try:
        while True:
            ready, _, _ = select.select([stdin], [], [], 0.02)
            reap()
            if not ready:
                continue
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                return 0
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(req)
                children.add(pid)
                say({"pid": pid})
    finally:
        for pid in list(children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:  # not yet in a session of its own
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for pid in list(children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


if __name__ == "__main__":
    sys.exit(main())
