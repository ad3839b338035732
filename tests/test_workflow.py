"""The CI workflow teachers copy: valid YAML, and every command it runs exists here."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "notebooks.yml"


def test_workflow_parses_and_runs_the_readme_commands():
    wf = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    job = wf["jobs"]["test"]
    assert job["runs-on"].startswith("ubuntu")
    versions = job["strategy"]["matrix"]["python-version"]
    requires = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text()).groups()
    assert all(tuple(int(p) for p in v.split(".")) >= tuple(int(p) for p in requires) for v in versions)
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    torch_pin = re.search(r"^torch==\S+", (ROOT / "requirements.txt").read_text(), re.MULTILINE).group()
    assert torch_pin in runs, "the workflow must install the same torch as requirements.txt"
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for target in re.findall(r"\bmake ([\w-]+)", runs):
        assert target in targets, f"the workflow runs `make {target}`, which the Makefile lacks"
