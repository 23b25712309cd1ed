"""examples/language_model_generate.py: a short language_model run, then greedy bytes."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import language_model_generate as example  # noqa: E402


@pytest.mark.slow
def test_trains_then_continues_the_prompt(tmp_path):
    result = example.main(str(tmp_path / "run"), steps=20, prompt="import ")
    assert result["text"].startswith("import ")
    assert len(result["text"]) > len("import ") + 10  # 48 new bytes, decoded.
    assert "bits_per_byte" in result["eval_logs"]
    again = example.main(str(tmp_path / "run"), steps=20, prompt="import ")  # Restores.
    assert again["text"] == result["text"]
