"""Library models by name: transformers classifiers, backbones and LMs; names; local weights."""

from __future__ import annotations

import pytest
import torch

from torchgarden.models import (
    build_backbone,
    build_causal_lm,
    build_image_classifier,
    load_pretrained,
    parse_model_name,
)
from torchgarden.models.names import require_library

pytest.importorskip("transformers")

_TINY_RESNET = {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1]}


@pytest.mark.parametrize("name, message", [
    ("transformers/google/vit-base-patch16-224", "names a hub checkpoint"),
    ("keras/resnet50", "expected '<library>/<model>'"),
    ("transformers/", "expected '<library>/<model>'"),
])
def test_bad_names_are_one_line_errors(name, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_model_name(name)
    assert "\n" not in str(info.value)


def test_settings_that_download_weights_are_refused():
    with pytest.raises(ValueError, match=r"library_config\.pretrained=True would download"):
        build_image_classifier("timm/resnet18", num_classes=3, input_size=(3, 8, 8),
                               settings={"pretrained": True})


def test_unknown_model_type_suggests_the_closest():
    with pytest.raises(ValueError, match="no model type 'rsenet'. Did you mean 'resnet'"):
        build_image_classifier("transformers/rsenet", num_classes=3, input_size=(1, 8, 8))


def test_transformers_resnet_and_vit_classify_grayscale_digits_shapes():
    resnet = build_image_classifier("transformers/resnet", num_classes=10,
                                    input_size=(1, 8, 8), settings=_TINY_RESNET)
    assert type(resnet.model).__name__ == "ResNetForImageClassification"
    assert resnet.model.config.num_channels == 1
    vit = build_image_classifier("transformers/vit", num_classes=10, input_size=(1, 8, 8),
                                 settings={"patch_size": 2, "hidden_size": 16,
                                           "num_hidden_layers": 1, "num_attention_heads": 2,
                                           "intermediate_size": 32})
    assert vit.model.config.image_size == 8
    for model in (resnet, vit):
        assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)


def test_a_model_that_cannot_run_on_the_inputs_fails_at_build_naming_the_config():
    with pytest.raises(ValueError, match=r"task.model: transformers/vit cannot run on inputs "
                                         r"\[1, 8, 8\].*task.model.library_config"):
        build_image_classifier("transformers/vit", num_classes=10, input_size=(1, 8, 8),
                               settings={"hidden_size": 16, "num_hidden_layers": 1,
                                         "num_attention_heads": 2, "intermediate_size": 32})


def test_backbone_levels_are_measured_strides():
    backbone = build_backbone("transformers/resnet",
                              settings={**_TINY_RESNET, "hidden_sizes": [8, 16, 24, 32],
                                        "depths": [1, 1, 1, 1]})
    features = backbone(torch.zeros(2, 3, 64, 64))
    assert backbone.channels == {"2": 8, "3": 16, "4": 24, "5": 32}
    assert {k: tuple(v.shape[-2:]) for k, v in features.items()} == {
        "2": (16, 16), "3": (8, 8), "4": (4, 4), "5": (2, 2)}


@pytest.mark.parametrize("model_type, settings, cls", [
    ("gpt2", {"n_layer": 1, "n_embd": 16, "n_head": 2}, "GPT2LMHeadModel"),
    ("llama", {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2,
               "num_key_value_heads": 1, "intermediate_size": 32}, "LlamaForCausalLM"),
    ("bert", {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2,
              "intermediate_size": 32}, "BertLMHeadModel"),
])
def test_causal_lms_take_vocab_and_length_from_the_task(model_type, settings, cls):
    model = build_causal_lm(f"transformers/{model_type}", vocab_size=256, max_length=32,
                            settings=settings)
    assert type(model.model).__name__ == cls
    assert model(torch.zeros(2, 32, dtype=torch.long)).shape == (2, 32, 256)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_pretrained_path_loads_local_weights(tmp_path, suffix):
    source = build_image_classifier("transformers/resnet", num_classes=4, input_size=(1, 8, 8),
                                    settings=_TINY_RESNET)
    path = str(tmp_path / f"weights{suffix}")
    if suffix == ".safetensors":
        source.model.save_pretrained(tmp_path)  # transformers' own file: model.safetensors
        path = str(tmp_path / "model.safetensors")
    else:
        torch.save(source.model.state_dict(), path)
    loaded = build_image_classifier("transformers/resnet", num_classes=4, input_size=(1, 8, 8),
                                    settings=_TINY_RESNET, pretrained_path=path)
    for (name, a), b in zip(source.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_tied_lm_weights_load_and_new_heads_need_ignore_mismatched_sizes(tmp_path):
    lm = build_causal_lm("transformers/gpt2", vocab_size=64, max_length=16,
                         settings={"n_layer": 1, "n_embd": 16, "n_head": 2})
    lm.model.save_pretrained(tmp_path)  # Writes the tied embedding once.
    again = build_causal_lm("transformers/gpt2", vocab_size=64, max_length=16,
                            settings={"n_layer": 1, "n_embd": 16, "n_head": 2},
                            pretrained_path=str(tmp_path / "model.safetensors"))
    assert torch.equal(again.model.lm_head.weight, lm.model.transformer.wte.weight)
    source = build_image_classifier("transformers/resnet", num_classes=4, input_size=(1, 8, 8),
                                    settings=_TINY_RESNET)
    path = tmp_path / "r.pt"
    torch.save(source.model.state_dict(), path)
    with pytest.raises(ValueError, match="differ in shape.*ignore_mismatched_sizes=true"):
        build_image_classifier("transformers/resnet", num_classes=7, input_size=(1, 8, 8),
                               settings=_TINY_RESNET, pretrained_path=str(path))
    target = torch.nn.Linear(2, 2)
    torch.save({"weight": torch.zeros(3, 2), "bias": torch.zeros(2)}, path)
    assert load_pretrained(target, str(path), ignore_mismatched_sizes=True) == ["weight"]
    assert torch.equal(target.bias, torch.zeros(2))


def test_a_library_that_fails_to_import_names_the_extra(monkeypatch):
    import importlib

    def broken(name):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ImportError, match="torchvision is installed but fails to import"):
        require_library("torchvision")
