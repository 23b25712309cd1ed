"""Pretrained weights from every local source: the tensors loaded equal the file's."""

from __future__ import annotations

import json
import os

import pytest
import torch

from torchgarden.checkpoint import CheckpointMismatchError, load_model_weights
from torchgarden.models import build_image_classifier, read_state_dict

transformers = pytest.importorskip("transformers")

TINY_VIT = {"image_size": 8, "patch_size": 2, "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 32, "num_channels": 1,
            "num_labels": 5}


def save_vit(directory, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(transformers.ViTConfig(**TINY_VIT))
    model.save_pretrained(directory, **kwargs)
    return model


def assert_loaded(model: torch.nn.Module, source: torch.nn.Module, skip: str = "classifier"):
    loaded = model.state_dict()
    for name, tensor in source.state_dict().items():
        if skip not in name:
            assert torch.equal(loaded[name], tensor), name


def test_a_hf_directory_gives_the_architecture_and_its_weights(tmp_path, capsys):
    source = save_vit(tmp_path / "vit")
    # No library_config: hidden size and depth come from config.json; the head is new.
    model = build_image_classifier("transformers/vit", num_classes=3, input_size=(1, 8, 8),
                                   pretrained_path=str(tmp_path / "vit"),
                                   ignore_mismatched_sizes=True)
    assert model.model.config.hidden_size == 16 and model.model.config.num_hidden_layers == 2
    assert model.model.classifier.out_features == 3
    assert_loaded(model.model, source)
    out = capsys.readouterr().out
    assert "loaded 38 tensors" in out and "skipped 2 (classifier.bias, classifier.weight" in out


def shard(directory) -> dict[str, torch.Tensor]:
    """Rewrites ``model.safetensors`` as two shards and an index, as transformers does for
    large models; returns the file's tensors."""
    from safetensors.torch import load_file, save_file

    state = load_file(directory / "model.safetensors")
    names = sorted(state)
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in parts.items():
        save_file({k: state[k] for k in keys}, directory / file, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: f for f, keys in parts.items() for k in keys}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    os.remove(directory / "model.safetensors")
    return state


def test_a_sharded_safetensors_set_loads_through_its_index(tmp_path):
    source = save_vit(tmp_path / "vit")
    saved = shard(tmp_path / "vit")
    state = read_state_dict(str(tmp_path / "vit" / "model.safetensors.index.json"))
    assert state.keys() == saved.keys()
    assert all(torch.equal(state[k], saved[k]) for k in saved)
    model = build_image_classifier("transformers/vit", num_classes=5, input_size=(1, 8, 8),
                                   pretrained_path=str(tmp_path / "vit"))
    assert_loaded(model.model, source, skip="<none>")


def test_init_checkpoint_reads_a_hf_directory_with_a_prefix_map_and_modules(tmp_path, capsys):
    source = save_vit(tmp_path / "vit")
    model = build_image_classifier("transformers/vit", num_classes=3, input_size=(1, 8, 8),
                                   settings={k: v for k, v in TINY_VIT.items()
                                             if k != "num_labels"})
    head = model.model.classifier.weight.clone()
    with pytest.raises(CheckpointMismatchError, match=r"none of its 40 tensors.*prefix_map: \{'': 'model.'\}"):
        load_model_weights(model, tmp_path / "vit")
    load_model_weights(model, tmp_path / "vit", prefixes=["model.vit"],
                       prefix_map={"": "model."}, report=True)
    assert_loaded(model.model, source)
    assert torch.equal(model.model.classifier.weight, head)
    assert "skipped 2 (model.classifier.weight, model.classifier.bias: outside" \
        in capsys.readouterr().out
    # Model Garden's 'all' restores everything (here: the head's shape clashes).
    with pytest.raises(CheckpointMismatchError, match="classifier.weight"):
        load_model_weights(model, tmp_path / "vit", prefixes=["all"], prefix_map={"": "model."})


def test_safetensors_and_state_dict_files(tmp_path):
    from safetensors.torch import load_file

    save_vit(tmp_path / "vit")
    saved = load_file(tmp_path / "vit" / "model.safetensors")
    torch.save(saved, tmp_path / "weights.pt")
    torch.save({"state_dict": saved, "step": 3}, tmp_path / "nested.pt")
    for path in ("vit/model.safetensors", "weights.pt", "nested.pt"):
        state = read_state_dict(str(tmp_path / path))
        assert state.keys() == saved.keys()
        assert all(torch.equal(state[k], saved[k]) for k in saved)


class Opaque:
    pass


def test_refusals_name_the_file_and_what_is_expected(tmp_path):
    torch.save({"weights": Opaque()}, tmp_path / "object.pt")
    with pytest.raises(ValueError, match="pickled Python objects"):
        read_state_dict(str(tmp_path / "object.pt"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError, match="neither a torchgarden checkpoint nor a Hugging Face"):
        read_state_dict(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        read_state_dict(str(tmp_path / "missing.safetensors"))
    save_vit(tmp_path / "vit")
    with pytest.raises(ValueError, match="holds a 'vit' model.*set it to transformers/vit"):
        build_image_classifier("transformers/resnet", num_classes=3, input_size=(1, 8, 8),
                               pretrained_path=str(tmp_path / "vit"))


def test_model_garden_spellings_of_init_checkpoint_are_accepted():
    from torchgarden.registry import get_experiment

    params = get_experiment("image_classification")
    params.override({"task": {"init_checkpoint": None, "init_checkpoint_modules": "all"}})
    params.validate()  # Model Garden's defaults: no checkpoint, every module.
    assert params.task.init_checkpoint is None
    params.override({"task": {"init_checkpoint": "/ckpt", "init_checkpoint_modules": "model"}})
    assert params.validate().task.init_checkpoint_modules == "model"
