"""tools/grade_kernel.py's guards, in a child Python (an audit hook cannot be removed once added).

Needs no nbgrader: runs in `make unit`. The graded end-to-end run is tests/test_teachers.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import io, json, os, socket, subprocess, sys
    sys.path.insert(0, {tools!r})
    import grade_kernel
    work, outside = {work!r}, {outside!r}
    sys.addaudithook(grade_kernel.make_hook(os.path.realpath(work)))

    def refused(fn):
        try:
            fn()
        except PermissionError as err:
            return "sandbox" in str(err) or "offline" in str(err)
        return False

    with open(os.path.join(work, "inside.txt"), "w") as f:  # its own scratch folder: allowed
        f.write("ok")
    os.replace(os.path.join(work, "inside.txt"), os.path.join(work, "moved.txt"))
    os.remove(os.path.join(work, "moved.txt"))
    open(outside).read()  # reading is allowed
    results = {{
        "write outside": refused(lambda: open(outside, "a")),
        "os.open outside": refused(lambda: os.open(outside, os.O_WRONLY)),
        "remove outside": refused(lambda: os.remove(outside)),
        "rename outside": refused(lambda: os.rename(outside, os.path.join(work, "x"))),
        "escape by ..": refused(lambda: open(os.path.join(work, "..", "escaped.txt"), "w")),
        "subprocess": refused(lambda: subprocess.run(["true"])),
        "os.system": refused(lambda: os.system("true")),
        "network": refused(lambda: socket.create_connection(("192.0.2.1", 80), timeout=1)),
    }}
    budget = [10]
    buf = io.StringIO()
    capped = grade_kernel.CappedStream(buf, budget)
    capped.write("x" * 25)
    capped.write("y")
    results["output capped"] = buf.getvalue().startswith("x" * 10 + "\\n[grader: output cut") and "y" not in buf.getvalue()
    print(json.dumps(results))
""")


def test_the_kernel_guards_refuse_what_they_say(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    code = CHILD.format(tools=str(ROOT / "tools"), work=str(work), outside=str(outside))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(results.values()), results
    assert outside.read_text() == "keep me"
    assert not (tmp_path / "escaped.txt").exists()
