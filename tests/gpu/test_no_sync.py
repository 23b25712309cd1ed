"""On a GPU, the training step never waits for the device (issue 6, item 5).

``torch.cuda.set_sync_debug_mode("error")`` turns every host-device synchronisation that
PyTorch performs (``.item()``, blocking copies, ``synchronize``) into an error. The
Trainer's loops must run under it: the loss is summed on the device and read once per
loop by the Controller, outside ``Trainer.train``.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden import get_experiment, get_task
from torchgarden.train_lib import create_trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def cuda_toy(**runtime):
    params = get_experiment("toy_regression")
    params.override(
        {
            "task": {"hidden_size": 32},
            "trainer": {
                "optimizer_config": {
                    "optimizer": {"type": "adam"},
                    "learning_rate": {
                        "type": "cosine",
                        "cosine": {"initial_learning_rate": 0.01, "decay_steps": 100},
                    },
                },
            },
            "runtime": {"device": "cuda", **runtime},
        }
    )
    torch.manual_seed(0)
    return create_trainer(params, get_task(params.task), train=True, evaluate=False)


def train_without_syncs(trainer, num_steps):
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        logs = trainer.train(num_steps)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return logs


@pytest.mark.parametrize(
    "runtime",
    [{}, {"mixed_precision_dtype": "bfloat16"}],
    ids=["float32", "bfloat16"],
)
def test_default_train_loop_never_syncs(runtime):
    trainer = cuda_toy(**runtime)
    trainer.train(2)  # Lazy set-up (optimizer state, cuBLAS handles) may sync once.
    logs = train_without_syncs(trainer, 20)
    assert int(trainer.global_step) == 22
    assert logs["training_loss"].device.type == "cuda"
    assert math.isfinite(float(logs["training_loss"]))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["compiled", "cuda_graphs"])
def test_compiled_whole_step_never_syncs(mode):
    trainer = cuda_toy(enable_xla=True, compile_mode=mode)
    for _ in range(3):  # Compile, then CUDA-graph warm-up and recording.
        trainer.train(4)
    logs = train_without_syncs(trainer, 20)
    assert type(trainer.step_fn).__name__ == "CompiledTrainStep"
    assert int(trainer.global_step) == 32
    assert math.isfinite(float(logs["training_loss"]))


def test_throughput_and_data_wait_add_no_sync():
    from torchgarden.loop import ThroughputMeter

    trainer = cuda_toy()
    trainer.train(2)
    meter = ThroughputMeter(examples_per_step=32, tokens_per_example=8, flops_per_example=1e3,
                            peak_flops=1e12, data_wait=lambda: trainer.data_wait_seconds,
                            device=trainer.runtime.device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        meter.loop_begin()
        trainer.train(20)
        figures = meter.loop_end(20, 1.0)  # Allocator counters and host clocks only.
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert figures["memory/cuda_peak_gib"] > 0
    assert figures["throughput/examples_per_second"] == 640
    assert 0 <= figures["throughput/data_wait_fraction"] <= 1
