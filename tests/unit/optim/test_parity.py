"""The default optimizer equals a hand-written loop with torch's defaults, bit for bit.

Each case builds the optimizer through ``build_optimizer`` from a real
``OptimizationConfig`` and, separately, the same optimizer the way a new user would write
it (``torch.optim.SGD(model.parameters(), lr=..., momentum=...)``, no ``fused`` or
``foreach``), trains a fixed-seed 3-layer MLP on the same batches and compares every
parameter with ``torch.equal``. Fused kernels round differently (differences from the
first steps on this model, torch 2.13 CPU), so they are opt-in and only checked to be
used and close.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torchgarden.optim import build_optimizer

optimization = pytest.importorskip("torchgarden.config.optimization")

NUM_STEPS = 40
_SIZES = (12, 32, 24, 5)  # Weights (32, 12), (24, 32), (5, 24) and three biases.

# (config's optimizer block, constant lr, torch class, the same hyper-parameters in torch's
# spelling). Config defaults that differ from torch's (epsilon 1e-7, rho 0.9, adagrad's
# initial accumulator 0.1, adamw's rate 0.0) are spelled out on the torch side.
_CASES = [
    pytest.param({"type": "sgd"}, 0.1, torch.optim.SGD, {}, id="sgd"),
    pytest.param(
        {"type": "sgd", "sgd": {"momentum": 0.9}},
        0.1,
        torch.optim.SGD,
        {"momentum": 0.9},
        id="sgd-momentum",
    ),
    pytest.param(
        {"type": "sgd", "sgd": {"momentum": 0.9, "nesterov": True}},
        0.1,
        torch.optim.SGD,
        {"momentum": 0.9, "nesterov": True},
        id="sgd-nesterov",
    ),
    pytest.param(
        {"type": "sgd", "sgd": {"momentum": 0.9, "weight_decay": 1e-3}},
        0.1,
        torch.optim.SGD,
        {"momentum": 0.9, "weight_decay": 1e-3},
        id="sgd-momentum-weight_decay",
    ),
    pytest.param(
        {"type": "sgd", "sgd": {"weight_decay": 1e-3}},
        0.1,
        torch.optim.SGD,
        {"weight_decay": 1e-3},
        id="sgd-weight_decay",
    ),
    pytest.param({"type": "adam"}, 1e-2, torch.optim.Adam, {"eps": 1e-7}, id="adam"),
    pytest.param(
        {"type": "adam", "adam": {"beta_1": 0.8, "beta_2": 0.99, "amsgrad": True}},
        1e-2,
        torch.optim.Adam,
        {"betas": (0.8, 0.99), "eps": 1e-7, "amsgrad": True},
        id="adam-amsgrad",
    ),
    pytest.param(
        {"type": "adam", "adam": {"weight_decay": 1e-2}},
        1e-2,
        torch.optim.Adam,
        {"eps": 1e-7, "weight_decay": 1e-2},
        id="adam-weight_decay",
    ),
    pytest.param(
        {"type": "adamw"}, 1e-2, torch.optim.AdamW, {"eps": 1e-7, "weight_decay": 0.0}, id="adamw"
    ),
    pytest.param(
        {"type": "adamw", "adamw": {"weight_decay_rate": 0.05, "amsgrad": True}},
        1e-2,
        torch.optim.AdamW,
        {"eps": 1e-7, "weight_decay": 0.05, "amsgrad": True},
        id="adamw-weight_decay-amsgrad",
    ),
    pytest.param(
        {"type": "rmsprop"}, 1e-2, torch.optim.RMSprop, {"alpha": 0.9, "eps": 1e-7}, id="rmsprop"
    ),
    pytest.param(
        {
            "type": "rmsprop",
            "rmsprop": {"momentum": 0.9, "centered": True, "weight_decay": 1e-3},
        },
        1e-2,
        torch.optim.RMSprop,
        {"alpha": 0.9, "eps": 1e-7, "momentum": 0.9, "centered": True, "weight_decay": 1e-3},
        id="rmsprop-centered-momentum-weight_decay",
    ),
    pytest.param(
        {"type": "adagrad"},
        0.1,
        torch.optim.Adagrad,
        {"eps": 1e-7, "initial_accumulator_value": 0.1},
        id="adagrad",
    ),
    pytest.param(
        {"type": "adagrad", "adagrad": {"weight_decay": 1e-3}},
        0.1,
        torch.optim.Adagrad,
        {"eps": 1e-7, "initial_accumulator_value": 0.1, "weight_decay": 1e-3},
        id="adagrad-weight_decay",
    ),
]


def _config(optimizer: dict[str, Any], lr: float) -> Any:
    config = optimization.OptimizationConfig()
    config.override(
        {
            "optimizer": optimizer,
            "learning_rate": {"type": "constant", "constant": {"learning_rate": lr}},
        }
    )
    return config


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(_SIZES[:-1], _SIZES[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(16, _SIZES[0], generator=generator),
            torch.randint(0, _SIZES[-1], (16,), generator=generator),
        )
        for _ in range(NUM_STEPS)
    ]


def _train(model: nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """The hand-written loop: forward, loss, backward, step, zero_grad."""
    for x, y in _batches():
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _reference(torch_class: type, lr: float, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    model = _mlp()
    return _train(model, torch_class(model.parameters(), lr=lr, **kwargs))


@pytest.mark.parametrize(("optimizer", "lr", "torch_class", "torch_kwargs"), _CASES)
def test_default_optimizer_is_bitwise_equal_to_hand_written_loop(
    optimizer, lr, torch_class, torch_kwargs
):
    model = _mlp()
    built = build_optimizer(_config(optimizer, lr), model)
    assert type(built) is torch_class
    ours = _train(model, built)
    theirs = _reference(torch_class, lr, torch_kwargs)
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.equal(a, b), f"parameter {index}: max |diff| {(a - b).abs().max():.3g}"


def test_adamw_with_exclusions_equals_hand_written_param_groups():
    optimizer = {
        "type": "adamw",
        "adamw": {"weight_decay_rate": 0.05, "exclude_from_weight_decay": ["bias"]},
    }
    model = _mlp()
    ours = _train(model, build_optimizer(_config(optimizer, 1e-2), model))
    reference_model = _mlp()
    named = list(reference_model.named_parameters())
    groups = [
        {"params": [p for n, p in named if "bias" not in n]},
        {"params": [p for n, p in named if "bias" in n], "weight_decay": 0.0},
    ]
    theirs = _train(
        reference_model, torch.optim.AdamW(groups, lr=1e-2, eps=1e-7, weight_decay=0.05)
    )
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("fused", [None, False])
def test_default_passes_no_implementation_keyword_to_torch(fused):
    config = _config({"type": "adam", "adam": {"fused": fused}}, 1e-2)
    group = build_optimizer(config, _mlp()).param_groups[0]
    # None/None is what torch.optim.Adam(params) stores: torch resolves it per step
    # (for-loop on CPU, foreach on CUDA). fused=False would disable foreach on CUDA.
    assert group["fused"] is None
    assert group["foreach"] is None


_WITH_FUSED_KERNEL = {"sgd-momentum", "adam", "adamw-weight_decay-amsgrad", "adagrad"}
_FUSED_CASES = [case for case in _CASES if case.id in _WITH_FUSED_KERNEL]


@pytest.mark.parametrize(("optimizer", "lr", "torch_class", "torch_kwargs"), _FUSED_CASES)
def test_fused_true_uses_fused_kernel_and_stays_close_to_reference(
    optimizer, lr, torch_class, torch_kwargs
):
    kind = optimizer["type"]
    fused_config = {"type": kind, kind: {**optimizer.get(kind, {}), "fused": True}}
    model = _mlp()
    built = build_optimizer(_config(fused_config, lr), model)
    assert built.param_groups[0]["fused"] is True
    ours = _train(model, built)
    for a, b in zip(ours, _reference(torch_class, lr, torch_kwargs), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_keyword_overrides_the_config():
    config = _config({"type": "sgd", "sgd": {"momentum": 0.9, "fused": True}}, 0.1)
    assert build_optimizer(config, _mlp(), fused=False).param_groups[0]["fused"] is None
    plain = _config({"type": "sgd", "sgd": {"momentum": 0.9}}, 0.1)
    assert build_optimizer(plain, _mlp(), fused=True).param_groups[0]["fused"] is True
