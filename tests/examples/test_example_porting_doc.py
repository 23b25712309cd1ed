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
