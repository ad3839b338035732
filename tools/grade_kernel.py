"""The kernel a submission is graded in: an IPython kernel that may only touch its scratch folder.

    python tools/grade_kernel.py -f CONNECTION_FILE   (tools/grade.py writes the kernelspec)

Environment: ``TN_GRADE_SCRATCH`` is the only folder the student's code may write, rename or delete
in; ``TN_GRADE_OUTPUT_BYTES`` caps what the kernel prints (default 1 MB, then one "output cut" line).

Containment, before any student code runs:
- an audit hook (PEP 578) refuses writing, deleting, renaming or chmod-ing outside the scratch folder,
  starting processes (subprocess, os.system, exec, fork) and network connections other than loopback;
- resource limits: CPU seconds (``TN_GRADE_CPU_S``), the size of any file written, no core dumps;
- printed output is cut after ``TN_GRADE_OUTPUT_BYTES``, so a huge print cannot fill the notebook.

An audit hook cannot be removed from Python. It is not a security boundary against a student who
reaches for ctypes or native code on purpose: grade an untrusted class as an unprivileged user or in
a container too (README, "Teaching with these notebooks").
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_EVENTS = {"os.remove", "os.rmdir", "os.rename", "os.replace", "os.truncate", "os.chmod", "os.chown",
               "os.symlink", "os.link", "os.mkdir", "shutil.rmtree", "shutil.move", "os.utime"}
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                  "os.forkpty", "pty.spawn", "os.kill", "os.killpg"}


def _inside(path, root: str) -> bool:
    if isinstance(path, int):  # a file descriptor already open
        return True
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == root or real.startswith(root + os.sep)


def make_hook(root: str):
    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(m in mode for m in "wax+")) or (flags or 0) & WRITE_FLAGS
            if path is not None and writes and not _inside(path, root):
                raise PermissionError(f"graded in a sandbox: writing {path} is refused")
        elif event in PATH_EVENTS:
            paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
            for p in paths:
                if not _inside(p, root):
                    raise PermissionError(f"graded in a sandbox: {event} {p} is refused")
        elif event in PROCESS_EVENTS:
            if event in ("os.kill", "os.killpg") and args and args[0] == os.getpid() and args[1] == 2:
                return  # SIGINT to itself: how a kernel interrupt arrives
            raise PermissionError(f"graded in a sandbox: {event} is refused")
        elif event == "socket.connect":
            address = args[1]
            host = address[0] if isinstance(address, tuple) else address
            if not (isinstance(host, str) and (host.startswith("127.") or host in ("::1", "localhost"))):
                raise PermissionError(f"graded offline: connecting to {address} is refused")
    return hook


class CappedStream:
    """A kernel output stream that passes on at most ``budget[0]`` characters, then one line saying so."""

    def __init__(self, stream, budget: list[int]):
        self._stream, self._budget, self._cut = stream, budget, False

    def write(self, text: str) -> int:
        if self._budget[0] > 0:
            piece = text[: self._budget[0]]
            self._budget[0] -= len(piece)
            self._stream.write(piece)
        elif not self._cut:
            self._cut = True
            self._stream.write("\n[grader: output cut here, it passed the limit]\n")
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main() -> None:
    root = os.path.realpath(os.environ["TN_GRADE_SCRATCH"])
    cpu = int(os.environ.get("TN_GRADE_CPU_S", "900"))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))  # the biggest file it may write
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    (Path(root) / f"kernel-{os.getpid()}.pid").write_text(str(os.getpid()))  # tools/grade.py kills leftovers

    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    budget = [int(os.environ.get("TN_GRADE_OUTPUT_BYTES", str(1 << 20)))]
    sys.stdout, sys.stderr = CappedStream(sys.stdout, budget), CappedStream(sys.stderr, budget)
    sys.addaudithook(make_hook(root))
    app.start()


if __name__ == "__main__":
    main()
