"""A restarted compiled run reuses the compiled step its model_dir keeps (issue 24)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

from torchgarden.compile import CompiledTrainStep
from torchgarden.compile.cache import load_traced_step, step_key
from torchgarden.train_lib.model_dir import COMPILE_CACHE_SUBDIR

RUN = (
    "import json, sys, torch\n"
    "from torchgarden.cli.main import main\n"
    "status = main(['train', '--experiment', 'image_classification', '--mode', 'train',\n"
    "               '--model_dir', sys.argv[1], '--params_override', sys.argv[2]])\n"
    "counters = torch._dynamo.utils.counters\n"
    "print(json.dumps({'status': status, 'compiled': counters['aot_autograd']['total'],\n"
    "                  'traced': counters['stats']['unique_graphs']}))\n"
)
OVERRIDE = ("trainer.steps_per_loop=2,trainer.summary_interval=2,runtime.enable_xla=true,"
            "runtime.steps_per_graph=2,trainer.train_steps=")


def _train(model_dir, steps):
    done = subprocess.run([sys.executable, "-c", RUN, str(model_dir), f"{OVERRIDE}{steps}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result, done.stderr


def _weights(model_dir, step):
    state = torch.load(os.path.join(model_dir, f"ckpt-{step}", "state.pt"),
                       weights_only=True)
    return dict(state["model"])


@pytest.mark.slow
def test_a_resumed_compiled_run_neither_traces_nor_compiles(tmp_path):
    first, _ = _train(tmp_path / "run", 4)
    assert first["status"] == 0 and first["traced"] == first["compiled"] == 1
    cache = tmp_path / "run" / COMPILE_CACHE_SUBDIR
    assert len(list(cache.glob("step-*.bin"))) == 1
    # The model_dir copied to a new path: only its files can tell the step.
    shutil.copytree(tmp_path / "run", tmp_path / "moved")
    resumed, _ = _train(tmp_path / "moved", 8)
    assert resumed["status"] == 0
    assert resumed["traced"] == resumed["compiled"] == 0  # Nothing traced, nothing compiled.
    whole, _ = _train(tmp_path / "whole", 8)  # The same 8 steps without a restart.
    assert whole["status"] == 0
    resumed_weights, whole_weights = _weights(tmp_path / "moved", 8), _weights(
        tmp_path / "whole", 8)
    assert resumed_weights.keys() == whole_weights.keys()
    assert all(torch.equal(resumed_weights[k], whole_weights[k]) for k in whole_weights)


def _bound_step(lr_betas):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), betas=lr_betas)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()

    class Task:  # What step_key reads of a task: its class (for its source).
        pass

    step = CompiledTrainStep(Task(), model, optimizer)
    step._bind()
    arguments = (step, step._params, step._buffers, step._states, step._scalars(None, 1),
                 [], torch.zeros(()), [])
    return step, arguments


def test_the_artifact_key_follows_what_the_graph_was_traced_from():
    step, arguments = _bound_step((0.9, 0.999))
    key = ((), True, True, True)
    same = step_key(*_bound_step((0.9, 0.999)), key)
    assert step_key(step, arguments, key) == same
    assert step_key(*_bound_step((0.8, 0.999)), key) != same  # A hyperparameter.
    assert step_key(step, arguments, ((), True, True, False)) != same  # Metrics' place.
    step.model[0].weight.data = step.model[0].weight.data.t().contiguous().t()
    strided = (step, list(step.model.parameters()), *arguments[2:])
    assert step_key(step, strided, key) != same  # A stride.


def test_a_damaged_artifact_costs_a_compile_not_the_run(tmp_path, caplog):
    (tmp_path / "step-abc.bin").write_bytes(b"not a compiled function")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert load_traced_step(str(tmp_path), "abc", object()) is None
    assert f"compiled step {tmp_path / 'step-abc.bin'} not used" in caplog.text
    assert load_traced_step(str(tmp_path), "absent", object()) is None
