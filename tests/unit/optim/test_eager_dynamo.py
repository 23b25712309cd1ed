"""torch.optim without torch._dynamo: the same updates, and torch's own wrappers back once
Dynamo is imported. Each case runs in a fresh process (the test process has Dynamo loaded)."""

from __future__ import annotations

import json
import subprocess
import sys

# Trains 5 steps of clipped AdamW and clipped SGD (step hooks) on a fixed problem, prints
# the weights, whether Dynamo was loaded, then imports it and reports torch's wrappers.
_SCRIPT = """
import json, sys
import torch
if {dynamo_first}:
    import torch._dynamo
from torchgarden.config import OptimizationConfig
from torchgarden.optim import build_optimizer
from torch.optim import optimizer as torch_optimizer

def train(kind, extra):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    config = OptimizationConfig().override({{
        "optimizer": {{"type": kind, kind: extra}},
        "learning_rate": {{"type": "constant", "constant": {{"learning_rate": 0.1}}}}}})
    optimizer = build_optimizer(config, model)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)
    return [p.detach().flatten().tolist() for p in model.parameters()]

weights = {{"adamw": train("adamw", {{"weight_decay_rate": 0.01, "gradient_clip_norm": 0.5}}),
           "sgd": train("sgd", {{"momentum": 0.9, "global_clipnorm": 0.5}})}}
loaded_while_training = "torch._dynamo" in sys.modules
import torch._dynamo
use_grad = torch_optimizer._use_grad_for_differentiable(lambda self: None).__code__
own_steps = all(  # Hooked for step hooks (AdamW, SGD: built) or not (Adam).
    (cls.step.__wrapped__ if getattr(cls.step, "hooked", False) else cls.step).__code__
    is use_grad for cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD))
no_marks = not any(hasattr(getattr(v, "__wrapped__", None), "__dynamo_disable")
                   and getattr(v.__wrapped__, "__dynamo_disable") is v.__wrapped__
                   for v in vars(torch_optimizer.Optimizer).values())
weights_after = train("adamw", {{"weight_decay_rate": 0.01, "gradient_clip_norm": 0.5}})
print(json.dumps({{"weights": weights, "loaded": loaded_while_training, "own_steps": own_steps,
                  "no_marks": no_marks, "after": weights_after}}))
"""


def _run(dynamo_first: bool) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(dynamo_first=dynamo_first)],
        capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_optimizers_train_without_loading_dynamo_and_match_torchs_own_steps():
    deferred, torch_own = _run(dynamo_first=False), _run(dynamo_first=True)
    assert deferred["loaded"] is False  # Built, stepped, saved and loaded without Dynamo.
    assert torch_own["loaded"] is True
    # Clipping hooks, momentum and Adam's state: bitwise the same updates as torch's path.
    assert deferred["weights"] == torch_own["weights"]
    assert deferred["weights"]["adamw"] != deferred["weights"]["sgd"]


def test_importing_dynamo_puts_torchs_wrappers_back():
    deferred = _run(dynamo_first=False)
    assert deferred["own_steps"] and deferred["no_marks"]
    # Classes hooked for step hooks (built before the import) step through torch's own code.
    assert deferred["after"] == deferred["weights"]["adamw"]
