"""Grade a class's returned notebooks with nbgrader's autograde, then write a class report.

    python tools/grade.py SUBMISSIONS [--course build/course] [--out build/grades] [--cell-timeout 300]

SUBMISSIONS is either nbgrader's layout (``STUDENT/ASSIGNMENT/NN_x.ipynb``), one folder per student
(``STUDENT/NN_x.ipynb``), or a flat folder of ``STUDENT.ipynb`` files (which notebook each one is,
is read from its nbgrader cell ids). The course (``make student``) holds the source versions and
the gradebook; it is only read.

Each student is graded alone, in a scratch copy of the course (deleted afterwards), by
``nbgrader autograde`` in its own process, offline, in a fresh kernel (tools/grade_kernel.py) with a
time limit per cell and one for the whole student. A submission that hangs, crashes its kernel,
deletes or writes files outside its scratch folder or prints megabytes gets its builds graded 0 with
the reason, and the next student is graded as if it had not existed.

Writes to --out: ``report.csv`` (a row per student and build: points, status, the check's message),
``report.md`` (the same as tables, and per build the share of the class that passed and the most
common failure message), and ``autograded/STUDENT/ASSIGNMENT/NN_x.ipynb`` (what nbgrader executed,
the feedback to hand back).
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import student as student_edition  # noqa: E402 (tools/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
MAX_SUBMISSION_BYTES = 64 << 20
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class Row:
    student: str
    notebook: str
    build: str  # what the student wrote, e.g. "merge_pair"
    check: str
    points: float
    max_points: float
    status: str  # passed, failed, not submitted, not graded
    message: str  # the check's own message (first line), or why it was not graded


def _grade_cells(nb) -> list[tuple[str, str, float]]:
    """(grade_id, build name, points) of every graded test cell, in order."""
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            m = re.match(r"\s*(\w+)\((.*)\)\s*$", cell.source)
            build = m.group(2) if m else meta["grade_id"]
            out.append((meta["grade_id"], build, float(meta.get("points", 0))))
    return out


def _sources(course: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in sorted((course / "source").glob("*/*.ipynb"))}


def _which(path: Path, sources: dict[str, Path], ids: dict[str, set[str]]) -> str | None:
    """The assignment a returned notebook belongs to: by its file name, else by its nbgrader cell ids."""
    if path.stem in sources:
        return path.stem
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        mine = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.get("cells", [])}
    except (OSError, ValueError, AttributeError):
        return None
    best = max(ids, key=lambda a: len(ids[a] & mine), default=None)
    return best if best and len(ids[best] & mine) >= len(ids[best]) // 2 else None


def collect(submissions: Path, sources: dict[str, Path]) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """student -> {assignment: notebook}, and the files that could not be placed (with why)."""
    ids = {a: {c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(p, 4).cells}
           for a, p in sources.items()}
    found: dict[str, dict[str, Path]] = collections.defaultdict(dict)
    skipped = []
    for path in sorted(submissions.rglob("*.ipynb")):
        rel = path.relative_to(submissions)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        student = rel.parts[0] if len(rel.parts) > 1 else path.stem
        if not STUDENT_ID.match(student):
            skipped.append(f"{rel}: a student id is letters, digits, '_', '.', '-'")
            continue
        assignment = _which(path, sources, ids)
        if assignment is None:
            skipped.append(f"{rel}: not one of the course's notebooks")
            continue
        found[student][assignment] = path
    return dict(found), skipped


def _kernelspec(scratch: Path, work: Path, cpu_s: int) -> None:
    folder = scratch / "jupyter" / "kernels" / "python3"
    folder.mkdir(parents=True)
    env = {"TN_GRADE_SCRATCH": str(work), "TMPDIR": str(work / "tmp"), "HOME": str(work / "home"),
           "MPLCONFIGDIR": str(work / "mpl"), "IPYTHONDIR": str(work / "ipython"),
           "XDG_CACHE_HOME": str(work / "cache"), "PYTHONDONTWRITEBYTECODE": "1", "TN_GRADE_CPU_S": str(cpu_s)}
    for key in ("tmp", "home", "mpl", "ipython", "cache"):
        (work / key).mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, str(ROOT / "tools" / "grade_kernel.py"), "-f", "{connection_file}"],
            "display_name": "Python 3 (graded)", "language": "python", "env": env}
    (folder / "kernel.json").write_text(json.dumps(spec))


def _kill_kernels(work: Path) -> None:
    for pidfile in work.glob("kernel-*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


def _first_line(text: str, limit: int = 300) -> str:
    text = ANSI.sub("", text).strip()
    line = text.split("\n", 1)[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error(cell) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            if out.get("ename") in ("KeyboardInterrupt", "CellTimeoutError"):  # only the grader interrupts
                return "CellTimeoutError: the cell ran past its time limit and was interrupted"
            if out.get("ename") == "NotImplementedError" and not out.get("evalue"):
                return "NotImplementedError: not done (the stub is as it was handed out)"
            return _first_line(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}")
    return None


def _why_failed(log: str) -> str:
    for pattern, reason in [("DeadKernelError", "the kernel died (crashed or was killed)"),
                            ("Kernel died", "the kernel died (crashed or was killed)"),
                            ("UnresponsiveKernelError", "the kernel stopped answering"),
                            ("CellTimeoutError", "a cell ran past its time limit")]:
        if pattern in log:
            return reason
    tail = [ln for ln in ANSI.sub("", log).strip().split("\n") if ln.strip()][-1:]
    return "nbgrader could not grade it" + (f": {_first_line(tail[0], 200)}" if tail else "")


def grade_student(student: str, notebooks: dict[str, Path], course: Path, out: Path,
                  cell_timeout: int, student_timeout: int) -> list[Row]:
    """Autograde one student's notebooks in a scratch copy of the course; the rows of the report."""
    from nbgrader.api import Gradebook, MissingEntry

    sources = _sources(course)
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix=f"grade-{student}-"))
    try:
        work = scratch / "work"  # the only folder the student's code may write in
        shutil.copytree(course / "source", scratch / "course" / "source")
        shutil.copy(course / "gradebook.db", scratch / "course" / "gradebook.db")
        _kernelspec(scratch, work, student_timeout)
        env = {**student_edition.tool_env(), "JUPYTER_PATH": str(scratch / "jupyter"),
               "JUPYTER_DATA_DIR": str(scratch / "jupyter"), "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
               "JUPYTER_CONFIG_DIR": str(scratch / "config"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT)}
        for assignment, path in sorted(notebooks.items()):
            src = sources[assignment]
            cells = _grade_cells(nbformat.read(src, 4))
            reason = None
            if path.stat().st_size > MAX_SUBMISSION_BYTES:
                reason = f"the returned notebook is over {MAX_SUBMISSION_BYTES >> 20} MB"
            else:
                dest = scratch / "course" / "submitted" / student / assignment / src.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest)
                log_path = scratch / f"{assignment}.log"
                cmd = [*student_edition.nbgrader_cmd(), "autograde", assignment, "--student", student, "--force",
                       f"--CourseDirectory.root={scratch / 'course'}", f"--Execute.timeout={cell_timeout}",
                       "--Execute.execute_retries=0", "--Execute.startup_timeout=120"]
                with open(log_path, "wb") as log:
                    proc = subprocess.Popen(cmd, cwd=scratch / "course", env=env, stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
                    try:
                        proc.wait(timeout=student_timeout)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        reason = f"grading ran past {student_timeout} s"
                    except BaseException:  # stopped (Ctrl-C, SIGTERM): stop this student's grading too
                        os.killpg(proc.pid, signal.SIGKILL)
                        raise
                _kill_kernels(work)
                with open(log_path, "rb") as log:  # the end of the log only: a student may print megabytes
                    log.seek(max(0, log_path.stat().st_size - 20000))
                    log_text = log.read().decode("utf-8", "replace")
                graded = scratch / "course" / "autograded" / student / assignment / src.name
                if reason is None and (proc.returncode != 0 or not graded.exists()):
                    reason = _why_failed(log_text)
            if reason is not None:
                rows += [Row(student, assignment, build, gid.removeprefix("test-"), 0.0, pts, "not graded", reason)
                         for gid, build, pts in cells]
                continue
            nb = nbformat.read(graded, 4)
            by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
            solution_errors = {}  # the error of the student's own cell just above each test
            last = None
            for c in nb.cells:
                meta = c.metadata.get("nbgrader", {})
                if meta.get("solution"):
                    last = _error(c)
                elif meta.get("grade"):
                    solution_errors[meta["grade_id"]] = last
            with Gradebook(f"sqlite:///{scratch / 'course' / 'gradebook.db'}") as gb:
                for gid, build, pts in cells:
                    try:
                        grade = gb.find_grade(gid, src.stem, assignment, student)
                        score = float(grade.score)
                    except MissingEntry:
                        score = 0.0
                    message = _error(by_id[gid]) if gid in by_id else "the test cell is missing"
                    if score >= pts:
                        status, message = "passed", ""
                    else:
                        status = "failed"
                        own = solution_errors.get(gid)
                        if own and own != message:
                            message = f"{message} (your cell above: {own})"
                        message = message or "no error, but nbgrader gave no points"
                    rows.append(Row(student, assignment, build, gid.removeprefix("test-"), score, pts, status,
                                    message))
            keep = out / "autograded" / student / assignment
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(graded, keep / src.name)
    finally:
        _kill_kernels(scratch / "work")
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def not_submitted(students: list[str], found: dict[str, dict[str, Path]], course: Path) -> list[Row]:
    """A row per build of every notebook someone in the class returned and this student did not."""
    sources = _sources(course)
    wanted = sorted({a for nbs in found.values() for a in nbs})
    rows = []
    for s in students:
        for a in wanted:
            if a not in found.get(s, {}):
                rows += [Row(s, a, build, gid.removeprefix("test-"), 0.0, pts, "not submitted", "")
                         for gid, build, pts in _grade_cells(nbformat.read(sources[a], 4))]
    return rows


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report(rows: list[Row], out: Path, notes: list[str]) -> str:
    """Write report.csv and report.md; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "report.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "notebook", "build", "check", "points", "max_points", "status", "message"])
        for r in rows:
            w.writerow([r.student, r.notebook, r.build, r.check, r.points, r.max_points, r.status, r.message])
    students = sorted({r.student for r in rows})
    md = ["# Class report", ""]
    md += ["| student | points | of |", "| --- | ---: | ---: |"]
    for s in students:
        mine = [r for r in rows if r.student == s]
        md.append(f"| {s} | {sum(r.points for r in mine):g} | {sum(r.max_points for r in mine):g} |")
    md += ["", "## Per build", "", "| notebook | build | passed | most common failure |", "| --- | --- | ---: | --- |"]
    builds = list(dict.fromkeys((r.notebook, r.build, r.check) for r in rows))
    for nb, build, check in builds:
        mine = [r for r in rows if (r.notebook, r.build, r.check) == (nb, build, check)]
        passed = sum(r.status == "passed" for r in mine)
        # the checks' own messages first; "not graded" reasons only where no check failed
        failures = collections.Counter(r.message for r in mine if r.status == "failed") or \
            collections.Counter(r.message for r in mine if r.status == "not graded")
        common = failures.most_common(1)
        text = f"{_md_escape(common[0][0])} ({common[0][1]}×)" if common else ""
        md.append(f"| {nb} | `{build}` | {passed}/{len(mine)} ({100 * passed / len(mine):.0f}%) | {text} |")
    md += ["", "## Per student and build", ""]
    for s in students:
        md += [f"### {s}", "", "| notebook | build | points | status | message |", "| --- | --- | ---: | --- | --- |"]
        for r in (r for r in rows if r.student == s):
            md.append(f"| {r.notebook} | `{r.build}` | {r.points:g}/{r.max_points:g} | {r.status} | "
                      f"{_md_escape(r.message)} |")
        md.append("")
    if notes:
        md += ["## Files not graded", ""] + [f"- {_md_escape(n)}" for n in notes] + [""]
    text = "\n".join(md)
    (out / "report.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--course", type=Path, default=ROOT / "build" / "course")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "grades")
    parser.add_argument("--cell-timeout", type=int, default=300, help="seconds one cell may run")
    parser.add_argument("--student-timeout", type=int, default=3600, help="seconds one notebook may take")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the scratch folders are still removed
    if not args.submissions.is_dir():
        parser.error(f"SUBMISSIONS: {args.submissions} is not a folder")
    if not (args.course / "gradebook.db").exists():
        parser.error(f"--course: {args.course} has no gradebook; run `make student` first")
    sources = _sources(args.course)
    found, skipped = collect(args.submissions, sources)
    if not found:
        parser.error(f"SUBMISSIONS: no returned notebook of this course in {args.submissions}")
    shutil.rmtree(args.out / "autograded", ignore_errors=True)
    rows = []
    for student, notebooks in sorted(found.items()):
        start = time.monotonic()
        rows += grade_student(student, notebooks, args.course, args.out, args.cell_timeout, args.student_timeout)
        print(f"graded {student} ({', '.join(sorted(notebooks))}) in {time.monotonic() - start:.0f} s", flush=True)
    rows += not_submitted(sorted(found), found, args.course)
    rows.sort(key=lambda r: (r.student, r.notebook))
    report(rows, args.out, skipped)
    print(f"class report: {args.out / 'report.md'} and {args.out / 'report.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
