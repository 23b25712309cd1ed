"""docs/porting_from_model_garden.md: excerpts are real lines of the examples; links resolve."""

from __future__ import annotations

import re


def test_every_code_excerpt_line_exists_in_an_example(examples_dir):
    doc = (examples_dir.parent / "docs" / "porting_from_model_garden.md").read_text()
    sources = "\n".join(path.read_text() for path in sorted(examples_dir.rglob("*.py")))
    source_lines = {line.strip() for line in sources.splitlines()}
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) >= 15
    missing = []
    for block in blocks:
        for line in (raw.strip() for raw in block.splitlines()):
            if not line or "..." in line or line in source_lines:
                continue
            # A signature may be shown without its type hints: its name must exist.
            signature = re.match(r"(def \w+\()", line)
            if signature and signature.group(1) in sources:
                continue
            missing.append(line)
    assert missing == []


def test_every_example_is_linked_and_every_link_exists(examples_dir):
    doc = (examples_dir.parent / "docs" / "porting_from_model_garden.md").read_text()
    linked = set(re.findall(r"\(\.\./examples/([\w/]+(?:\.py)?)\)", doc))
    for target in linked:
        assert (examples_dir / target).exists(), target
    examples = {p.name for p in examples_dir.glob("*.py")}
    assert examples <= linked


def test_the_launch_script_said_to_run_under_torchrun_ends_with_exit_worker(examples_dir):
    doc = (examples_dir.parent / "docs" / "porting_from_model_garden.md").read_text()
    section = doc[doc.index("### 2.3 The launch script"):doc.index("### 2.4")]
    assert "runs under `torchrun" in section
    excerpt = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    script = (examples_dir / "custom_launch_script.py").read_text()
    for text in (excerpt, script):
        assert text.rstrip().splitlines()[-1].strip().startswith("tg.distribute.exit_worker(0)")
