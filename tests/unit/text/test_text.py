"""The language-model data and metrics: corpus split, packing, baselines, BPB, throughput, FLOPs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torchgarden import text


def _tree(tmp_path, count=40):
    for i in range(count):
        folder = tmp_path / ("pkg" if i % 2 else "lib") / f"m{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.py").write_text(f"x_{i} = {i}\n" * 3)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("left out\n")
    return tmp_path


def test_split_is_by_file_deterministic_and_disjoint(tmp_path):
    root = _tree(tmp_path)
    train = text.read_corpus(str(root), split="train", validation_percent=25)
    val = text.read_corpus(str(root), split="validation", validation_percent=25)
    assert train.num_files + val.num_files == 40  # tests/ is left out.
    assert 0 < val.num_files < 20
    again = text.read_corpus(str(root), split="validation", validation_percent=25)
    assert np.array_equal(val.data, again.data)
    val_text = bytes(val.data).decode()
    assert not any(line in val_text for line in bytes(train.data).decode().splitlines())


def test_the_standard_library_is_found_and_split():
    root = text.python_stdlib_root()
    val = text.read_corpus(root, split="validation", validation_percent=5)
    assert val.num_files > 20 and len(val.data) > 100_000
    assert text.split_of("json/decoder.py", 5.0) == text.split_of("json/decoder.py", 5.0)


def test_pack_bytes_makes_shifted_windows():
    data = np.arange(11, dtype=np.uint8)
    dataset = text.pack_bytes(data, seq_length=3)
    assert len(dataset) == 3
    inputs, targets = dataset[1]
    assert inputs.tolist() == [3, 4, 5] and targets.tolist() == [4, 5, 6]
    with pytest.raises(ValueError, match="cannot fill one window"):
        text.pack_bytes(data[:3], seq_length=3)


def test_unigram_bits_per_byte_is_add_one_cross_entropy():
    train = np.array([65, 65, 65, 66], dtype=np.uint8)  # counts+1: A=4, B=2, others 1.
    total = 4 + 2 + 254
    expected = -(math.log2(4 / total) + math.log2(2 / total)) / 2
    assert text.unigram_bits_per_byte(train, np.array([65, 66], np.uint8)) == pytest.approx(
        expected)


def test_bits_per_byte_is_cross_entropy_in_bits():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]]]))
    metric = text.BitsPerByte()
    metric.update_state(torch.tensor([[0, 2]]), {"logits": logits})
    assert float(metric.result()) == pytest.approx((1 + 2) / 2)


def test_throughput_counts_tokens_after_the_first_step(monkeypatch):
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(text.metrics.time, "perf_counter", lambda: next(clock))
    metric = text.Throughput(flops_per_token=1e6, peak_flops=1e10)
    for _ in range(3):
        metric.update_state(torch.zeros(4, 8))
    logs = metric.result()  # 2 counted steps of 32 tokens in 2 seconds.
    assert float(logs["tokens_per_second"]) == pytest.approx(32.0)
    assert float(logs["mfu"]) == pytest.approx(32.0 * 1e6 / 1e10)
    metric.reset_states()
    assert float(metric.result()["tokens_per_second"]) == 0.0


def test_flops_per_token_counted_matches_the_palm_formula():
    models = pytest.importorskip("torchgarden.models")
    pytest.importorskip("transformers")
    layers, width, length = 2, 64, 32
    build = lambda: models.build_causal_lm(  # noqa: E731
        "transformers/gpt2", vocab_size=256, max_length=length,
        settings={"n_layer": layers, "n_embd": width, "n_head": 4})
    counted = text.flops_per_token(build, length)
    matmul_params = layers * 12 * width * width + 256 * width  # blocks + tied lm_head.
    assert counted == pytest.approx(6 * matmul_params + 12 * layers * width * length, rel=0.02)


def test_peak_flops_of_a_cpu_is_measured_and_positive():
    assert text.peak_flops(torch.device("cpu")) > 1e8
