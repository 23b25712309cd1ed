"""examples/language_model_generate.py: the language_model experiment beats the unigram
baseline in 100 steps, then continues a prompt (greedy, so twice the same)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("transformers")

import language_model_generate as example  # noqa: E402


@pytest.mark.slow
def test_beats_the_unigram_baseline_then_continues_the_prompt(tmp_path):
    result = example.main(str(tmp_path / "run"), steps=100, prompt="import ")
    logs = result["eval_logs"]
    print(f"language_model 100 steps: {logs['bits_per_byte']:.3f} bits/byte, unigram "
          f"{logs['unigram_bits_per_byte']:.3f}; {result['text']!r}")
    assert logs["unigram_bits_per_byte"] > 4.3  # 4.62 on CPython 3.11.7's stdlib.
    assert logs["bits_per_byte"] < 4.0
    assert logs["bits_per_byte"] == pytest.approx(logs["validation_loss"] / math.log(2))
    assert result["text"].startswith("import ") and len(result["text"]) > len("import ") + 10
    assert example.generate(result["model"], "import ") == result["text"]  # Greedy: same.
