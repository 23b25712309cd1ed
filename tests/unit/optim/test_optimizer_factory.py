"""build_optimizer: Keras-to-torch mapping, implementation choice, registry, LR helpers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.optim import (
    build_optimizer,
    get_learning_rate,
    register_optimizer,
    set_learning_rate,
)
from torchgarden.optim import factory as factory_module


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def _train(model: nn.Module, optimizer, steps: int = 3) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 4, generator=generator)
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_sgd_matches_hand_built_torch_sgd_bitwise(make_config):
    config = make_config("sgd", momentum=0.9, nesterov=True, weight_decay=1e-3)
    model = _model()
    built = build_optimizer(config, model)
    # The default is torch's own implementation (no fused/foreach keyword), as a user writes it.
    assert built.defaults["fused"] is None
    reference_model = _model()
    reference = torch.optim.SGD(
        reference_model.parameters(),
        lr=0.1,
        momentum=0.9,
        nesterov=True,
        weight_decay=1e-3,
    )
    for ours, theirs in zip(_train(model, built), _train(reference_model, reference)):
        assert torch.equal(ours, theirs)


def test_adam_matches_hand_built_torch_adam_bitwise(make_config):
    config = make_config("adam", beta_1=0.8, beta_2=0.99, epsilon=1e-6, amsgrad=True)
    model = _model()
    built = build_optimizer(config, model)
    assert built.defaults["fused"] is None
    reference_model = _model()
    reference = torch.optim.Adam(
        reference_model.parameters(), lr=0.1, betas=(0.8, 0.99), eps=1e-6, amsgrad=True
    )
    for ours, theirs in zip(_train(model, built), _train(reference_model, reference)):
        assert torch.equal(ours, theirs)


def test_fused_false_gives_torch_default_implementation(make_config):
    model = _model()
    built = build_optimizer(make_config("adam", fused=True), model, fused=False)
    # Not passed on as fused=False, which would also turn off torch's foreach on CUDA.
    assert built.defaults["fused"] is None
    assert built.defaults["foreach"] is None
    reference_model = _model()
    reference = torch.optim.Adam(reference_model.parameters(), lr=0.1, eps=1e-7)
    for ours, theirs in zip(_train(model, built), _train(reference_model, reference)):
        assert torch.equal(ours, theirs)


def test_rmsprop_and_adagrad_map_keras_names(make_config):
    rmsprop = build_optimizer(
        make_config("rmsprop", rho=0.8, momentum=0.5, centered=True), _model()
    )
    assert isinstance(rmsprop, torch.optim.RMSprop)
    assert rmsprop.defaults["alpha"] == 0.8
    assert rmsprop.defaults["momentum"] == 0.5
    assert rmsprop.defaults["centered"] is True
    assert rmsprop.defaults["eps"] == 1e-7
    adagrad = build_optimizer(make_config("adagrad", initial_accumulator_value=0.25), _model())
    first = adagrad.param_groups[0]["params"][0]
    assert torch.equal(adagrad.state[first]["sum"], torch.full_like(first, 0.25))


def test_fused_true_for_optimizer_without_fused_kernel_is_an_error(make_config):
    with pytest.raises(ValueError, match=r"optimizer\.rmsprop\.fused is True"):
        build_optimizer(make_config("rmsprop", fused=True), _model())


def test_fused_true_on_a_device_without_the_kernel_is_an_error(make_config):
    model = nn.Linear(2, 2, device="meta")
    with pytest.raises(ValueError, match=r"fused adagrad runs on \['cpu'\].*\['meta'\]"):
        build_optimizer(make_config("adagrad", fused=True), model)


def test_adamw_excludes_named_parameters_from_weight_decay(make_config):
    config = make_config("adamw", weight_decay_rate=0.01, exclude_from_weight_decay=["bias"])
    model = _model()
    optimizer = build_optimizer(config, model)
    decayed, excluded = optimizer.param_groups
    assert decayed["weight_decay"] == 0.01
    assert excluded["weight_decay"] == 0.0
    assert [p.shape for p in excluded["params"]] == [torch.Size([3]), torch.Size([2])]
    # A bias with zero gradient keeps its value; a decayed weight shrinks by lr * wd.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert torch.equal(model[0].bias, before[1])
    assert torch.allclose(model[0].weight, before[0] * (1 - 0.1 * 0.01))


def test_exclusion_needs_parameter_names(make_config):
    config = make_config("adamw", exclude_from_weight_decay=["bias"])
    with pytest.raises(ValueError, match="needs parameter names"):
        build_optimizer(config, list(_model().parameters()))
    named = build_optimizer(config, _model().named_parameters())
    assert len(named.param_groups) == 2


def test_params_can_be_groups_and_frozen_parameters_are_skipped(make_config):
    model = _model()
    model[0].weight.requires_grad_(False)
    optimizer = build_optimizer(make_config("sgd"), model)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == 3
    groups = [{"params": [model[2].weight], "lr": 0.5}, {"params": [model[2].bias]}]
    grouped = build_optimizer(make_config("sgd"), groups)
    assert [g["lr"] for g in grouped.param_groups] == [0.5, 0.1]


def test_bad_params_are_reported(make_config):
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(make_config("sgd"), nn.ReLU())
    with pytest.raises(TypeError, match="only tensors"):
        build_optimizer(make_config("sgd"), [torch.zeros(1), {"params": []}])


def test_initial_lr_is_schedule_at_step_zero_unless_given(make_config):
    config = make_config(
        "sgd",
        lr=("constant", {"learning_rate": 1.0}),
        warmup=("linear", {"warmup_steps": 10, "warmup_learning_rate": 0.01}),
    )
    assert get_learning_rate(build_optimizer(config, _model())) == 0.01
    assert get_learning_rate(build_optimizer(config, _model(), lr=0.3)) == 0.3


def test_unknown_optimizer_type_names_the_key_and_closest_choice(make_config):
    config = make_config("adamww")
    with pytest.raises(ValueError) as error:
        build_optimizer(config, _model())
    message = str(error.value)
    assert "trainer.optimizer_config.optimizer.type is 'adamww'" in message
    assert "'rmsprop'" in message
    assert "Did you mean 'adamw'?" in message


def test_register_optimizer_adds_a_type_with_clipping():
    calls = []

    @register_optimizer("test_plain_sgd")
    def _build(config, param_groups, *, lr):
        calls.append(config.scale)
        return torch.optim.SGD(param_groups, lr=lr * config.scale)

    from types import SimpleNamespace as NS

    try:
        config = NS(
            optimizer=NS(type="test_plain_sgd", test_plain_sgd=NS(scale=2.0, clipvalue=0.5)),
            learning_rate=NS(type="constant", constant=NS(learning_rate=0.25)),
            warmup=NS(type=None),
        )
        param = nn.Parameter(torch.zeros(2))
        optimizer = build_optimizer(config, [param])
        assert calls == [2.0]
        param.grad = torch.tensor([3.0, -0.1])
        optimizer.step()
        assert torch.equal(param.detach(), torch.tensor([-0.25, 0.05]))
        with pytest.raises(ValueError, match="already registered"):
            register_optimizer("test_plain_sgd")(_build)
    finally:
        factory_module._OPTIMIZERS.pop("test_plain_sgd", None)


def test_set_and_get_learning_rate_float_and_tensor():
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD(
        [{"params": [param]}, {"params": [nn.Parameter(torch.zeros(1))]}], lr=0.1
    )
    set_learning_rate(optimizer, 0.5)
    assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.5]
    tensor_lr = torch.optim.Adam([param], lr=torch.tensor(0.1))
    held = tensor_lr.param_groups[0]["lr"]
    set_learning_rate(tensor_lr, 0.25)
    assert tensor_lr.param_groups[0]["lr"] is held
    assert get_learning_rate(tensor_lr) == 0.25
