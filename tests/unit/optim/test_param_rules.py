"""Per-parameter multipliers: visible in the param groups' lr and weight_decay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgarden.config import OptimizationConfig
from torchgarden.optim import (
    apply_param_rules,
    build_optimizer,
    get_learning_rate,
    set_learning_rate,
)
from torchgarden.optim.param_rules import layer_index


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)


def adamw(exclude: list[str]) -> OptimizationConfig:
    return OptimizationConfig().override({"optimizer": {"type": "adamw", "adamw": {
        "weight_decay_rate": 0.1, "exclude_from_weight_decay": exclude}}})


def by_name(optimizer, model) -> dict[str, dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: g for g in optimizer.param_groups for p in g["params"]}


def test_rules_compose_with_model_garden_exclusions_and_scale_the_schedule():
    model = Net()
    optimizer = build_optimizer(adamw(["bias"]), model, lr=0.01)
    summary = apply_param_rules(optimizer, model, rules=[("^head", 10.0, 0.5)])
    set_learning_rate(optimizer, 0.02)  # What the Trainer writes every step.
    groups = by_name(optimizer, model)
    assert groups["backbone.weight"]["lr"] == pytest.approx(0.02)
    assert groups["backbone.weight"]["weight_decay"] == pytest.approx(0.1)
    assert groups["backbone.bias"]["weight_decay"] == 0.0  # Excluded: stays 0.
    assert groups["head.weight"]["lr"] == pytest.approx(0.2)
    assert groups["head.weight"]["weight_decay"] == pytest.approx(0.05)
    assert groups["head.bias"]["lr"] == pytest.approx(0.2)
    assert groups["head.bias"]["weight_decay"] == 0.0
    assert get_learning_rate(optimizer) == pytest.approx(0.02)
    assert sum(g["num_params"] for g in summary) == 4
    assert {"head.weight"} <= {n for g in summary if g["lr_mult"] == 10.0 for n in g["names"]}


def test_first_matching_rule_wins_and_a_rule_matching_nothing_is_refused():
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.01)
    apply_param_rules(optimizer, model, rules=[("head.bias", 0.0, 0.0), ("head", 2.0, 1.0)])
    groups = by_name(optimizer, model)
    assert groups["head.bias"]["lr_mult"] == 0.0 and groups["head.weight"]["lr_mult"] == 2.0
    with pytest.raises(ValueError, match=r"param_rules\[0\].pattern: 'haed'.*'head'"):
        apply_param_rules(torch.optim.SGD(model.parameters(), lr=0.1), model,
                          rules=[("haed", 2.0, 1.0)])


@pytest.mark.parametrize("name, index", [
    ("vit.encoder.layer.11.output.dense.weight", 11), ("transformer.h.3.attn.c_attn.weight", 3),
    ("vit.layers.0.attention.q_proj.weight", 0), ("blocks.7.mlp.fc1.weight", 7),
    ("vit.embeddings.cls_token", None), ("classifier.weight", None)])
def test_layer_index_from_the_parameter_name(name, index):
    assert layer_index(name) == index


def test_layerwise_decay_of_a_transformers_vit():
    transformers = pytest.importorskip("transformers")
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=8, patch_size=2, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=16, num_channels=1, num_labels=3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    apply_param_rules(optimizer, model, rules=[("classifier", 2.0, 1.0)], layerwise_lr_decay=0.5)
    set_learning_rate(optimizer, 1.0)
    lr = {name: group["lr"] for name, group in by_name(optimizer, model).items()}
    assert lr["vit.embeddings.cls_token"] == pytest.approx(0.125)  # 0.5 ** (2 + 1 - 0)
    assert lr["vit.embeddings.patch_embeddings.projection.weight"] == pytest.approx(0.125)
    block0 = next(n for n in lr if layer_index(n) == 0)
    block1 = next(n for n in lr if layer_index(n) == 1)
    assert lr[block0] == pytest.approx(0.25) and lr[block1] == pytest.approx(0.5)
    assert lr["vit.layernorm.weight"] == pytest.approx(1.0)
    assert lr["classifier.weight"] == pytest.approx(2.0)  # The rule's multiplier on top.
    with pytest.raises(ValueError, match="no parameter name holds a layer index"):
        net = Net()
        apply_param_rules(torch.optim.SGD(net.parameters(), lr=0.1), net, layerwise_lr_decay=0.5)
