"""LAMB, LARS and Adafactor against their published update rules, on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from torchgarden.config.optimization import OptimizationConfig
from torchgarden.optim import LAMB, LARS, build_optimizer


def _param(values):
    return torch.nn.Parameter(torch.tensor(values, dtype=torch.float64))


def _step(optimizer, param, grad):
    param.grad = torch.tensor(grad, dtype=torch.float64)
    optimizer.step()
    return param.detach().tolist()


def test_lamb_first_step_is_trust_ratio_times_sign():
    # m_hat = g, v_hat = g**2 at t=1, so u = g / |g| = [1, 1] (eps=0); r = ||w|| / ||u||.
    w = _param([3.0, 4.0])
    opt = LAMB([w], lr=0.01, eps=0.0)
    ratio = 5.0 / math.sqrt(2.0)
    assert _step(opt, w, [0.6, 0.8]) == pytest.approx([3 - 0.01 * ratio, 4 - 0.01 * ratio])


def test_lamb_two_steps_with_weight_decay_follow_the_tf_addons_rule():
    w0, g1, g2 = [1.0, -2.0], [0.5, -1.0], [-0.25, 0.5]
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-6, 0.01
    w, m, v, expected = list(w0), [0.0, 0.0], [0.0, 0.0], []
    for t, g in enumerate((g1, g2), start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
        u = [(mi / (1 - b1**t)) / (math.sqrt(vi / (1 - b2**t)) + eps) + wd * wi
             for mi, vi, wi in zip(m, v, w)]
        ratio = math.hypot(*w) / math.hypot(*u)
        w = [wi - lr * ratio * ui for wi, ui in zip(w, u)]
        expected.append(list(w))
    param = _param(w0)
    opt = LAMB([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    assert _step(opt, param, g1) == pytest.approx(expected[0], rel=1e-12)
    assert _step(opt, param, g2) == pytest.approx(expected[1], rel=1e-12)


def test_lamb_without_layer_adaptation_is_plain_adam_like_step():
    w = _param([3.0, 4.0])
    opt = LAMB([{"params": [w], "layer_adaptation": False}], lr=0.01, eps=0.0)
    assert _step(opt, w, [0.6, -0.8]) == pytest.approx([2.99, 4.01])


def test_lars_classic_momentum_two_steps():
    # r = eeta * ||w|| / ||g||: 0.001 * 5 / 1 = 0.005, then 0.001 * ||w1|| / 1.
    w = _param([3.0, 4.0])
    opt = LARS([w], lr=1.0, momentum=0.9, eeta=0.001)
    assert _step(opt, w, [0.6, 0.8]) == pytest.approx([2.997, 3.996])
    r2 = 0.001 * math.hypot(2.997, 3.996)
    v2 = [0.9 * 0.003 + r2 * 0.6, 0.9 * 0.004 + r2 * 0.8]
    assert _step(opt, w, [0.6, 0.8]) == pytest.approx([2.997 - v2[0], 3.996 - v2[1]])


def test_lars_popular_nesterov_and_weight_decay():
    w0, g = [3.0, 4.0], [0.6, 0.8]
    wd, lr, mom, eeta = 0.1, 0.5, 0.9, 0.01
    g_wd = [gi + wd * wi for gi, wi in zip(g, w0)]  # [0.9, 1.2]
    velocity = g_wd
    update = [mom * vi + gi for vi, gi in zip(velocity, g_wd)]  # Nesterov look-ahead.
    ratio = eeta * 5.0 / math.hypot(*update)
    expected = [wi - lr * ratio * ui for wi, ui in zip(w0, update)]
    w = _param(w0)
    opt = LARS([w], lr=lr, momentum=mom, eeta=eeta, weight_decay=wd, nesterov=True,
               classic_momentum=False)
    assert _step(opt, w, g) == pytest.approx(expected, rel=1e-12)


def test_trust_ratio_is_one_for_zero_weights():
    w = _param([0.0, 0.0])
    opt = LARS([w], lr=1.0, momentum=0.0, eeta=0.001)
    assert _step(opt, w, [0.5, -0.5]) == pytest.approx([-0.5, 0.5])


def _built(kind, fields, model):
    config = OptimizationConfig.from_dict({"optimizer": {"type": kind, kind: fields},
                                           "learning_rate": {"type": "constant",
                                                             "constant": {"learning_rate": 0.01}}})
    return build_optimizer(config, model)


def test_lamb_config_excludes_names_by_regex_from_decay_and_adaptation():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    opt = _built("lamb", {"weight_decay_rate": 0.01,
                          "exclude_from_weight_decay": ["bias", r"^1\."]}, model)
    assert isinstance(opt, LAMB)
    groups = [(len(g["params"]), g["weight_decay"], g["layer_adaptation"])
              for g in opt.param_groups]
    # Exclusions also switch layer adaptation off (exclude_from_layer_adaptation unset).
    assert groups == [(1, 0.01, True), (3, 0.0, False)]


def test_lars_config_keeps_adaptation_list_separate_when_given():
    model = torch.nn.Linear(2, 2)
    opt = _built("lars", {"weight_decay_rate": 1e-4, "exclude_from_weight_decay": ["bias"],
                          "exclude_from_layer_adaptation": ["weight"]}, model)
    by_size = {len(g["params"][0].shape): (g["weight_decay"], g["layer_adaptation"])
               for g in opt.param_groups}
    assert by_size == {2: (1e-4, False), 1: (0.0, True)}


def test_adafactor_maps_to_torch_and_follows_the_paper_on_a_vector():
    # t=1: beta2_t = 1 - 1**-0.8 = 0, so v = g**2 and u = sign(g) (RMS 1, no clipping);
    # the step is max(eps2, RMS(w)) * min(lr, 1/sqrt(t)) = sqrt(12.5) * 0.01.
    model = torch.nn.Linear(2, 1, bias=False)
    opt = _built("adafactor", {"min_dim_size_to_factor": 1}, model)
    assert isinstance(opt, torch.optim.Adafactor)
    group = opt.param_groups[0]
    assert (group["beta2_decay"], group["d"], group["eps"][1]) == (-0.8, 1.0, 1e-3)
    assert group["eps"][0] == pytest.approx(1e-15)
    w = _param([3.0, 4.0])
    torch_opt = torch.optim.Adafactor([w], lr=0.01)
    alpha = math.sqrt(12.5) * 0.01
    assert _step(torch_opt, w, [0.6, -0.8]) == pytest.approx([3 - alpha, 4 + alpha])


@pytest.mark.parametrize("field, value", [("beta1", 0.9), ("factored", False),
                                          ("multiply_by_parameter_scale", False),
                                          ("step_offset", 10)])
def test_adafactor_settings_torch_cannot_honour_are_errors(field, value):
    with pytest.raises(ValueError, match=rf"optimizer\.adafactor\.{field} is"):
        _built("adafactor", {field: value}, torch.nn.Linear(2, 1))


def test_experimental_jit_compile_points_to_enable_xla():
    with pytest.raises(ValueError, match="runtime.enable_xla=true"):
        _built("sgd_experimental", {"jit_compile": True}, torch.nn.Linear(2, 1))


def test_adamw_experimental_uses_keras_defaults_with_global_clipnorm():
    model = torch.nn.Linear(2, 1)
    opt = _built("adamw_experimental", {"weight_decay": 0.004}, model)
    assert isinstance(opt, torch.optim.AdamW)
    assert opt.param_groups[0]["weight_decay"] == 0.004
    model.weight.grad = torch.full_like(model.weight, 10.0)
    model.bias.grad = torch.full_like(model.bias, 10.0)
    opt.step()  # Clipped to a global norm of 1.0 (Model Garden's default) before the update.
    assert float(torch.cat([model.weight.grad.flatten(), model.bias.grad]).norm()) == (
        pytest.approx(1.0, rel=1e-5))


def test_adamw_include_in_weight_decay_wins_over_exclusion_and_gradient_clip_norm():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    opt = _built("adamw", {"weight_decay_rate": 0.1, "exclude_from_weight_decay": [r"^1\."],
                           "include_in_weight_decay": [r"1\.weight"],
                           "gradient_clip_norm": 1.0, "global_clipnorm": None}, model)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] for p in g["params"]}
    assert decayed == {id(model[0].weight), id(model[0].bias), id(model[1].weight)}
    # Model Garden clips to gradient_clip_norm, then Keras to global_clipnorm: the smaller wins.
    for fields, expected in (({"gradient_clip_norm": 1.0, "global_clipnorm": 2.0}, 1.0),
                             ({"gradient_clip_norm": 3.0, "global_clipnorm": 2.0}, 2.0),
                             ({"gradient_clip_norm": 0.0}, 50.0), ({}, 1.0)):
        opt = _built("adamw", fields, model)
        for p in model.parameters():
            p.grad = torch.full_like(p, 10.0)  # 10 parameters: global norm sqrt(1000)
        opt.step()  # the clips run as step pre-hooks
        norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
        assert norm == pytest.approx(min(expected, 1000 ** 0.5), rel=1e-5), fields
