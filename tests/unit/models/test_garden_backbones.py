"""Model Garden backbones (``task.model.backbone``) built by transformers: sizes, parameter
counts (the numbers docs/models.md prints), forward shapes, norm settings and refusals."""

from __future__ import annotations

import math
import pathlib
import re

import pytest
import torch

from torchgarden.config.errors import ConfigError
from torchgarden.models.backbones import Backbone, NormActivation
from torchgarden.models.garden import (
    KERNEL_INITIALIZERS,
    DropoutDropPath,
    GardenClassifier,
    build_garden_backbone,
    library_settings,
)

pytest.importorskip("transformers")

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "models.md"


def _backbone(spec: dict) -> Backbone:
    backbone = Backbone.from_dict(spec)
    backbone.validate()
    return backbone


def _classifier(spec: dict, input_size=(224, 224, 3), num_classes=1001, **head) -> GardenClassifier:
    backbone = _backbone(spec)
    return GardenClassifier(build_garden_backbone(backbone, NormActivation(),
                                                  input_size=input_size),
                            num_classes=num_classes, **head)


def _documented_counts() -> dict[tuple[str, str], int]:
    """``(type, model) -> parameters`` from the table in docs/models.md."""
    rows = re.findall(r"^\| `(\w+)` ([\w-]+) \| [\d.]+ \| [\w -]+ \| ([\d,]+) \|$",
                      DOC.read_text(encoding="utf-8"), flags=re.M)
    return {(kind, model): int(count.replace(",", "")) for kind, model, count in rows}


_RESNET_RS = {"stem_type": "v1", "replace_stem_max_pool": True, "resnetd_shortcut": True,
              "se_ratio": 0.25}
_SPECS = {  # "rs-50": Model Garden's ResNet-RS options on ResNet-50
    "resnet": lambda m: {"type": "resnet", "resnet": {"model_id": int(m.removeprefix("rs-")),
                                                      **(_RESNET_RS if "rs" in m else {})}},
    "dilated_resnet": lambda m: {"type": "dilated_resnet", "dilated_resnet": {
        "model_id": int(m), "output_stride": 8, "multigrid": [1, 2, 4]}},
    "vit": lambda m: {"type": "vit", "vit": {"model_name": m}},
    "mobilenet": lambda m: {"type": "mobilenet", "mobilenet": {"model_id": m}},
    "efficientnet": lambda m: {"type": "efficientnet",
                               "efficientnet": {"model_id": m, "se_ratio": 0.25}},
}


def test_docs_list_every_family_and_model_gardens_resnet_counts():
    counts = _documented_counts()
    assert {kind for kind, _ in counts} == set(_SPECS)
    assert ("resnet", "50") in counts and ("vit", "vit-b16") in counts
    # Model Garden's published ResNet-50 / 101 / 152 sizes (MODEL_GARDEN.md), in millions.
    for model, published in (("34", 21.8), ("50", 25.6), ("101", 44.6), ("152", 60.2),
                             ("rs-50", 35.7)):  # ResNet-RS-50: the paper's count
        assert round(counts["resnet", model] / 1e6, 1) == published
    # Dilation turns strides into dilation rates: not one parameter more or less.
    for model in ("50", "101"):
        assert counts["dilated_resnet", model] == counts["resnet", model]


@pytest.mark.parametrize("kind, model", sorted(_documented_counts()))
def test_parameter_count_equals_the_documented_one(kind, model):
    with torch.device("meta"):  # sizes only: no memory, no initialisation work
        classifier = _classifier(_SPECS[kind](model))
    assert sum(p.numel() for p in classifier.parameters()) == _documented_counts()[kind, model]


def test_resnet_widths_and_depths_follow_model_id_and_depth_multiplier():
    backbone = _backbone({"type": "resnet", "resnet": {"model_id": 101, "depth_multiplier": 0.5}})
    model_type, settings = library_settings(backbone, NormActivation(activation="swish"),
                                            input_size=(64, 64, 3))
    assert model_type == "resnet"
    assert settings["layer_type"] == "bottleneck" and settings["depths"] == [3, 4, 23, 3]
    assert settings["hidden_sizes"] == [128, 256, 512, 1024]
    assert settings["embedding_size"] == 32 and settings["hidden_act"] == "swish"
    backbone.resnet.scale_stem = False
    assert library_settings(backbone, NormActivation(), input_size=(64, 64, 3))[1][
        "embedding_size"] == 64


@pytest.mark.parametrize("activation, module", [("swish", torch.nn.SiLU),
                                                 ("relu6", torch.nn.ReLU6)])
def test_every_resnet_activation_is_norm_activations(activation, module):
    """transformers applies hidden_act at the stem and block ends only; Model Garden's ResNet
    has its activation after every batch norm but a block's last: all are ``activation``."""
    backbone = _backbone({"type": "resnet", "resnet": {"model_id": 50, "depth_multiplier": 0.25}})
    built = build_garden_backbone(backbone, NormActivation(activation=activation),
                                  input_size=(32, 32, 3))
    found = [type(m) for m in built.modules()
             if isinstance(m, (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.SiLU))]
    assert found == [module] * (1 + 3 * 16)  # the stem, then 3 per bottleneck block


def test_vit_sizes_come_from_model_name_as_in_model_garden():
    backbone = _backbone({"type": "vit", "vit": {"model_name": "vit-l16", "patch_size": 8,
                                                "representation_size": 768}})
    _, settings = library_settings(backbone, NormActivation(), input_size=(384, 384, 3))
    assert (settings["hidden_size"], settings["patch_size"], settings["intermediate_size"],
            settings["num_attention_heads"], settings["num_hidden_layers"]) == (
        1024, 16, 4096, 16, 24)
    assert settings["image_size"] == [384, 384] and settings["pooler_output_size"] == 768


@pytest.mark.parametrize("spec, input_size", [
    ({"type": "resnet", "resnet": {"model_id": 18}}, (32, 32, 3)),
    ({"type": "resnet", "resnet": {"model_id": 50, "depth_multiplier": 0.25}}, (32, 48, 1)),
    ({"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV2",
                                         "filter_size_scale": 0.35}}, (32, 32, 3)),
    ({"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV1",
                                         "filter_size_scale": 0.25}}, (32, 32, 3)),
    ({"type": "efficientnet", "efficientnet": {"model_id": "b0", "se_ratio": 0.25}},
     (32, 32, 3)),
    ({"type": "vit", "vit": {"model_name": "tiny", "hidden_size": 16, "patch_size": 4,
                             "representation_size": 8,
                             "transformer": {"mlp_dim": 32, "num_heads": 2, "num_layers": 1}}},
     (16, 24, 3)),
])
def test_forward_gives_one_logit_per_class(spec, input_size):
    torch.manual_seed(0)
    model = _classifier(spec, input_size=input_size, num_classes=7).eval()
    height, width, channels = input_size
    logits = model(torch.randn(2, channels, height, width))
    assert logits.shape == (2, 7) and torch.isfinite(logits).all()


def test_batch_norm_takes_model_gardens_momentum_and_epsilon():
    backbone = _backbone({"type": "resnet", "resnet": {"model_id": 18}})
    norm = NormActivation(norm_momentum=0.9, norm_epsilon=1e-5)
    built = build_garden_backbone(backbone, norm, input_size=(32, 32, 3))
    norms = [m for m in built.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(m.momentum == pytest.approx(0.1) and m.eps == 1e-5 for m in norms)


def test_kernel_initializer_and_head_batch_norm():
    spec = {"type": "resnet", "resnet": {"model_id": 18, "depth_multiplier": 0.25}}
    zeros = _classifier(spec, input_size=(32, 32, 3), num_classes=5, kernel_initializer="zeros")
    assert torch.equal(zeros(torch.randn(2, 3, 32, 32)), torch.zeros(2, 5))
    uniform = _classifier(spec, input_size=(32, 32, 3), num_classes=5, add_head_batch_norm=True)
    weight = uniform.classifier.weight
    assert weight.abs().max() <= 0.05 and weight.std() > 0.02  # Keras RandomUniform(-.05, .05)
    assert isinstance(uniform.head_norm, torch.nn.BatchNorm2d)


def test_variance_scaling_matches_keras_standard_deviations():
    torch.manual_seed(0)
    he = KERNEL_INITIALIZERS["he_normal"](torch.empty(2000, 500))
    assert he.std().item() == pytest.approx(math.sqrt(2 / 500), rel=0.03)
    glorot = KERNEL_INITIALIZERS["glorot_uniform"](torch.empty(300, 100))
    assert glorot.abs().max().item() <= math.sqrt(6 / 400)


def test_vit_original_init_false_draws_kernels_with_std_002():
    torch.manual_seed(0)
    spec = {"type": "vit", "vit": {"model_name": "vit-ti16", "original_init": False}}
    built = build_garden_backbone(_backbone(spec), NormActivation(), input_size=(32, 32, 3))
    fc1 = built.model.layers[0].mlp.fc1 if hasattr(built.model, "layers") else None
    weight = fc1.weight if fc1 is not None else next(
        m.weight for m in built.model.modules() if isinstance(m, torch.nn.Linear))
    assert weight.std().item() == pytest.approx(0.02 * 0.8796, rel=0.05)
    assert built.model.embeddings.cls_token.abs().sum() == 0


@pytest.mark.parametrize("spec, key, words", [
    ({"resnet": {"se_ratio": 1.5}}, "resnet.se_ratio", "must be in [0, 1]"),
    ({"resnet": {"stem_type": "v2"}}, "resnet.stem_type", "is not one of"),
    ({"resnet": {"replace_stem_max_pool": True, "scale_stem": False,
                 "depth_multiplier": 1.5}}, "resnet.replace_stem_max_pool", "set scale_stem"),
    ({"resnet": {"bn_trainable": False}}, "resnet.bn_trainable", "frozen batch norm"),
    ({"resnet": {"model_id": 51}}, "resnet.model_id", "is not one of"),
    ({"type": "spinenet"}, "type", "SpineNet"),
    ({"type": "dilated_resnet", "dilated_resnet": {"se_ratio": -0.1}},
     "dilated_resnet.se_ratio", "must be in [0, 1]"),
    ({"type": "dilated_resnet", "dilated_resnet": {"model_id": 34}},
     "dilated_resnet.model_id", "is not one of"),
    ({"type": "mobilenet", "mobilenet": {"model_id": "MobileNetV3Large"}},
     "mobilenet.model_id", "MobileNetV3Large"),
    ({"type": "efficientnet"}, "efficientnet.se_ratio", "squeeze-and-excitation ratio"),
    ({"type": "vit", "vit": {"pooler": "gap"}}, "vit.pooler", "class token"),
    ({"type": "vit", "vit": {"layer_scale_init_value": 0.1}},
     "vit.layer_scale_init_value", "LayerScale"),
])
def test_what_no_library_builds_is_refused_naming_the_key(spec, key, words):
    spec = {"type": "resnet", **spec}
    with pytest.raises(ConfigError) as info:
        _backbone(spec)
    message = str(info.value)
    assert message.startswith(key) and words in message and "\n" not in message
    assert info.value.key == key


def test_options_of_an_unused_block_are_not_refused():
    _backbone({"type": "vit", "resnet": {"se_ratio": 0.25}, "vit": {"model_name": "vit-s16"}})


def test_vit_stochastic_depth_grows_linearly_over_the_blocks():
    spec = {"type": "vit", "vit": {"model_name": "tiny", "hidden_size": 8, "patch_size": 4,
                                   "init_stochastic_depth_rate": 0.3, "transformer": {
                                       "mlp_dim": 16, "num_heads": 2, "num_layers": 3}}}
    built = build_garden_backbone(_backbone(spec), NormActivation(), input_size=(8, 8, 3))
    rates = [m.rate for m in built.modules() if isinstance(m, DropoutDropPath)]
    assert rates == pytest.approx([0.1, 0.2, 0.3])


def test_drop_path_drops_whole_examples_in_training_only():
    torch.manual_seed(0)
    layer = DropoutDropPath(torch.nn.Dropout(0.0), 0.25)
    out = layer(torch.ones(4000, 3))
    kept = out[:, 0] != 0
    assert torch.equal(out[kept], torch.full_like(out[kept], 1 / 0.75))
    assert torch.all(out[~kept] == 0) and (~kept).float().mean().item() == pytest.approx(0.25,
                                                                                         abs=0.03)
    assert torch.equal(layer.eval()(torch.ones(5, 3)), torch.ones(5, 3))


def test_resnet_stochastic_depth_per_stage_keeps_the_state_dict_keys():
    spec = {"type": "resnet", "resnet": {"model_id": 18, "depth_multiplier": 0.125}}
    plain = build_garden_backbone(_backbone(spec), NormActivation(), input_size=(16, 16, 3))
    spec["resnet"]["stochastic_depth_drop_rate"] = 0.5
    dropped = build_garden_backbone(_backbone(spec), NormActivation(), input_size=(16, 16, 3))
    rates = [m.rate for m in dropped.modules() if isinstance(m, DropoutDropPath)]
    assert rates == pytest.approx([0.2] * 2 + [0.3] * 2 + [0.4] * 2 + [0.5] * 2)
    assert list(plain.state_dict()) == list(dropped.state_dict())


def test_resnet_rs_options_build_model_gardens_stem_and_shortcuts():
    from torchgarden.models.dilated_resnet import SameAvgPool2d

    backbone = _backbone({"type": "resnet", "resnet": {
        "model_id": 50, "stem_type": "v1", "replace_stem_max_pool": True,
        "resnetd_shortcut": True, "se_ratio": 0.25}})
    model = build_garden_backbone(backbone, NormActivation(), input_size=(64, 64, 3)).model
    stem = [layer.convolution for layer in model.embedder.embedder]
    assert [(c.kernel_size, c.stride, c.out_channels) for c in stem] == [
        ((3, 3), (2, 2), 32), ((3, 3), (1, 1), 32), ((3, 3), (1, 1), 64)]
    pool = model.embedder.pooler.convolution
    assert (pool.kernel_size, pool.stride, pool.out_channels) == ((3, 3), (2, 2), 64)
    firsts = [stage.layers[0].shortcut for stage in model.encoder.stages]
    assert [(s[0].stride, s[1].convolution.stride) for s in firsts] == [
        (1, (1, 1)), (2, (1, 1)), (2, (1, 1)), (2, (1, 1))]
    assert all(isinstance(s[0], SameAvgPool2d) for s in firsts)
    out = model(torch.zeros(1, 3, 64, 64)).last_hidden_state
    assert out.shape == (1, 2048, 2, 2)


def test_same_average_pool_is_keras_same_padding():
    from torchgarden.models.dilated_resnet import SameAvgPool2d

    x = torch.arange(9.0).view(1, 1, 3, 3)
    # Stride 1: the last row and column average only the pixels inside the image.
    assert SameAvgPool2d(2, 1)(x).tolist() == [[[[2.0, 3.0, 3.5], [5.0, 6.0, 6.5],
                                                 [6.5, 7.5, 8.0]]]]
    # Stride 2 on 3 pixels: one padded column and row at the end, as TensorFlow pads.
    assert SameAvgPool2d(2, 2)(x).tolist() == [[[[2.0, 3.5], [6.5, 8.0]]]]
