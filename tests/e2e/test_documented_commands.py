"""Every command sequence the README and docs mark with ``<!-- test: sequence -->`` runs as
written, in order, in a fresh directory, through the installed ``torchgarden`` command.

Each marked ```bash block is one sequence. Its commands run one by one (a ``\\`` line
continues the command; ``cd`` changes the directory for the next ones); each must exit 0,
unless the line ends with ``# exit N``. The directory holds what a reader would have at
hand: the README's Python example saved where the README says (``runs/readme/``) and a
copy of ``examples/``. Afterwards nothing new is there outside ``runs/``: following the docs
writes nothing into the repository itself.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- test: sequence -->\s*```bash\n(.*?)```", re.S)
EXPECTED = re.compile(r"#\s*exit\s+(\d+)\s*$")


def sequences() -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        for index, block in enumerate(MARKER.findall(doc.read_text())):
            commands, pending = [], ""
            for line in block.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                pending += line.rstrip()
                if pending.endswith("\\"):
                    pending = pending[:-1] + " "
                    continue
                commands.append(pending.strip())
                pending = ""
            found.append((f"{doc.relative_to(ROOT)}#{index + 1}", commands))
    return found


SEQUENCES = sequences()


def test_the_readme_and_the_docs_mark_their_sequences():
    names = {name.split("#")[0] for name, _ in SEQUENCES}
    assert {"README.md", "docs/robustness.md", "docs/porting_from_model_garden.md"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("name,commands", SEQUENCES, ids=[name for name, _ in SEQUENCES])
def test_a_documented_sequence_runs_as_written(name, commands, tmp_path):
    readme = (ROOT / "README.md").read_text()
    script = tmp_path / re.search(r"Save it as `([^`]+)`", readme).group(1)
    script.parent.mkdir(parents=True)
    script.write_text(re.findall(r"```python\n(.*?)```", readme, re.S)[0])
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    examples = sorted(p.relative_to(tmp_path) for p in (tmp_path / "examples").rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TG_FAULT")}
    env.update(PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               OMP_NUM_THREADS="1")
    cwd = tmp_path
    for command in commands:
        expected = EXPECTED.search(command)
        code = int(expected.group(1)) if expected else 0
        if command.startswith("cd "):
            cwd = (cwd / command[3:].strip()).resolve()
            continue
        result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=600)
        print(f"$ {command}\n-> {result.returncode}\n{result.stderr[-300:]}")
        assert result.returncode == code, (
            f"{name}: `{command}` exited {result.returncode}:\n{result.stdout[-1500:]}\n"
            f"{result.stderr[-1500:]}")
        if code:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("torchgarden: error: "), result.stderr
    assert sorted(os.listdir(tmp_path)) == ["examples", "runs"], os.listdir(tmp_path)
    after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "examples").rglob("*")
                   if "__pycache__" not in p.parts)
    assert after == [p for p in examples if "__pycache__" not in p.parts], name
