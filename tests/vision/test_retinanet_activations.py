"""RetinaNet builds what Model Garden's keys name: ``norm_activation.activation`` in the FPN
and head, ``use_separable_conv`` as Keras' separable convs, and a MobileNet backbone with
Model Garden's endpoints; the modules built are checked, not only the config."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgarden as tg
from torchgarden.config import ConfigError
from torchgarden.vision.pyramid import SeparableConv2d, l2_kernels

pytest.importorskip("transformers")


def _model(**model):
    params = tg.get_experiment("retinanet")
    params.override({"task": {"model": model}})
    return tg.get_task(params.validate().task).build_model()


def _types(modules):
    return [type(m) for m in modules if not isinstance(m, (nn.Conv2d, nn.BatchNorm2d,
                                                           SeparableConv2d))]


@pytest.mark.parametrize("name, module", [
    ("relu", nn.ReLU), ("relu6", nn.ReLU6), ("swish", nn.SiLU), ("hard_swish", nn.Hardswish),
    ("hard_sigmoid", nn.Hardsigmoid), ("gelu", nn.GELU), ("mish", nn.Mish),
    ("linear", nn.Identity)])
def test_the_head_and_pyramid_are_built_with_the_named_activation(name, module):
    model = _model(norm_activation={"activation": name}, head={"num_convs": 3})
    assert _types(model.head.cls_tower) == _types(model.head.box_tower) == [module] * 3
    assert type(model.fpn.activation) is module


def test_gelu_is_model_gardens_tanh_approximation_in_the_head_and_exact_before_p7():
    model = _model(norm_activation={"activation": "gelu"})
    assert model.head.cls_tower[2].approximate == "tanh"  # tf_utils' gelu (a function)
    assert model.fpn.activation.approximate == "none"  # the Keras layer: tf.nn.gelu


def test_the_per_level_norm_towers_apply_the_activation():
    model = _model(norm_activation={"activation": "relu6"}, head={"norm_per_level": True},
                   min_level=2, max_level=3, backbone_channels=[16, 32, 64]).eval()
    head = model.head
    with torch.no_grad():
        for conv in head.cls_tower[0::2]:
            conv.weight.fill_(0.1)
    x = torch.randn(1, 64, 4, 4) * 10
    expected = x
    for i, conv in enumerate(head.cls_tower[0::2]):
        expected = torch.clamp(head.cls_norms["3"][i](conv(expected)), 0, 6)
    cls_outputs, _ = head({"3": x})
    torch.testing.assert_close(cls_outputs["3"], head.cls_logits(expected))
    assert expected.max() == 6.0  # the clamp took effect: relu6, not relu


def test_the_pyramid_activation_sits_between_p6_and_p7():
    model = _model(backbone={"type": "resnet", "resnet": {"model_id": 18,
                                                         "depth_multiplier": 0.125}},
                   norm_activation={"activation": "relu6"}, min_level=3, max_level=7)
    calls = []
    model.fpn.activation.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[-1]))
    model.eval()(torch.zeros(1, 3, 128, 128))
    assert calls == [2]  # on P6 (2x2 at 128 px) only: before the conv that makes P7


def test_separable_convs_are_kerass_and_carry_no_l2_penalty():
    plain = _model()
    model = _model(decoder={"fpn": {"use_separable_conv": True}},
                   head={"use_separable_conv": True})
    for conv in (model.fpn.lateral["2"], model.fpn.smooth["4"], model.head.cls_tower[0],
                 model.head.cls_logits, model.head.box_deltas):
        depthwise, pointwise = conv
        assert isinstance(conv, SeparableConv2d) and depthwise.bias is None
        assert depthwise.groups == depthwise.in_channels and pointwise.kernel_size == (1, 1)
    assert model.head.cls_logits.bias[0].item() == pytest.approx(-math.log(99))
    separable = {id(c) for m in model.modules() if isinstance(m, SeparableConv2d) for c in m}
    kernels = {id(w) for w in l2_kernels(model)}
    assert kernels and not kernels & {id(c.weight) for m in model.modules()
                                      if isinstance(m, SeparableConv2d) for c in m}
    assert len(separable) == 2 * (2 * 3 + 2 * 2 + 2)  # FPN 3 lateral + 3 smooth, 2x2 tower, 2
    images = torch.zeros(2, 3, 64, 64)
    shapes = {k: v.shape for k, v in model.eval()(images)["cls_outputs"].items()}
    assert shapes == {k: v.shape for k, v in plain.eval()(images)["cls_outputs"].items()}


def test_a_model_garden_mobilenetv2_gives_its_endpoints_and_keeps_its_relu6():
    model = _model(backbone={"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV2"}},
                   norm_activation={"activation": "swish"}, min_level=3, max_level=7)
    assert model.backbone.channels == {"2": 24, "3": 32, "4": 96, "5": 320}
    backbone_acts = {type(m) for m in model.backbone.modules()
                     if isinstance(m, (nn.ReLU, nn.ReLU6, nn.SiLU))}
    assert backbone_acts == {nn.ReLU6}  # Model Garden's MobileNet blocks: relu6 always
    assert type(model.head.cls_tower[2]) is nn.SiLU
    depthwise = [m for m in model.backbone.modules()
                 if isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1]
    kernels = {id(w) for w in l2_kernels(model)}
    assert depthwise and not kernels & {id(m.weight) for m in depthwise}
    outputs = model.train()(torch.zeros(2, 3, 64, 64))
    assert sorted(outputs["cls_outputs"], key=int) == ["3", "4", "5", "6", "7"]


def test_a_resnet_backbone_takes_the_activation_transformers_has():
    model = _model(backbone={"type": "resnet", "resnet": {"model_id": 18,
                                                         "depth_multiplier": 0.125}},
                   norm_activation={"activation": "swish"}, min_level=3, max_level=5)
    # Every activation of Model Garden's ResNet, transformers' inner-block ReLUs included.
    assert sum(isinstance(m, nn.SiLU) for m in model.backbone.modules()) == 1 + 2 * 8
    assert not any(isinstance(m, nn.ReLU) for m in model.backbone.modules())
    with pytest.raises(ConfigError, match=r"^task.model.norm_activation.activation: "
                                          r"'hard_swish' needs a resnet backbone"):
        _model(backbone={"type": "resnet"}, norm_activation={"activation": "hard_swish"})
