"""``torchgarden export --format hf``: transformers loads it in a process where torchgarden
cannot be imported, and its outputs equal torchgarden's eval."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

import torchgarden as tg
from torchgarden.checkpoint import load_model_weights
from torchgarden.cli.main import main

pytest.importorskip("transformers")
CONSUMER = pathlib.Path(__file__).with_name("hf_consumer.py")
VIT = ("task.model.name=transformers/vit,task.model.library_config.patch_size=2,"
       "task.model.library_config.hidden_size=16,task.model.library_config.num_hidden_layers=1,"
       "task.model.library_config.num_attention_heads=2,"
       "task.model.library_config.intermediate_size=32,trainer.train_steps=4,"
       "trainer.steps_per_loop=2,trainer.summary_interval=2,trainer.checkpoint_interval=2,"
       "task.train_data.global_batch_size=16")


def train(model_dir: str, extra: str = "") -> None:
    assert main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--params_override", VIT + extra]) == 0


def eval_logits(model_dir: str, inputs: torch.Tensor) -> torch.Tensor:
    """torchgarden's eval of the latest checkpoint on ``inputs``."""
    params = tg.ExperimentConfig.from_yaml(f"{model_dir}/params.yaml")
    task = tg.get_task(params.task)
    model = task.build_model()
    load_model_weights(model, model_dir)
    model.eval()
    with torch.no_grad():
        return model(inputs)


def consume(hf_dir: pathlib.Path, reference: pathlib.Path, *base: str) -> float:
    done = subprocess.run([sys.executable, "-I", str(CONSUMER), str(hf_dir), str(reference),
                           *base], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["max_abs_diff"]


def test_hf_export_loads_without_torchgarden_and_matches_eval(tmp_path, capsys):
    model_dir, output = str(tmp_path / "run"), tmp_path / "export"
    train(model_dir)
    assert main(["export", "--model_dir", model_dir, "--output", str(output),
                 "--format", "hf"]) == 0
    assert "hf" in capsys.readouterr().out
    manifest = json.loads((output / "export.json").read_text())
    assert manifest["formats"] == {"hf": "hf"}
    assert {"hf/config.json", "hf/model.safetensors"} <= set(manifest["files"])
    assert manifest["verification"]["hf"]["max_abs_diff"] < 1e-5
    inputs = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    reference = tmp_path / "reference.pt"
    torch.save({"inputs": inputs, "logits": eval_logits(model_dir, inputs)}, reference)
    assert consume(output / "hf", reference) < 1e-5


def test_hf_export_of_a_model_without_transformers_is_one_line_exit_2(tmp_path, capsys):
    model_dir, output = str(tmp_path / "run"), tmp_path / "export"
    assert main(["train", "--experiment", "image_classification", "--model_dir", model_dir,
                 "--params_override", "trainer.train_steps=2,trainer.steps_per_loop=2,"
                 "trainer.summary_interval=2,trainer.checkpoint_interval=2"]) == 0
    capsys.readouterr()
    assert main(["export", "--model_dir", model_dir, "--output", str(output),
                 "--format", "hf"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--format hf writes a transformers model" in err
    assert "safetensors,pt2,onnx" in err and not output.exists()


@pytest.mark.slow
def test_lora_run_checkpoints_adapters_and_exports_merged_or_in_peft_layout(tmp_path, capsys):
    pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from torchgarden.models.lora import adapt_model

    base = tmp_path / "base"
    torch.manual_seed(0)
    transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=8, patch_size=2, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_channels=1, num_labels=10)).save_pretrained(base)
    model_dir = str(tmp_path / "run")
    train(model_dir, f",task.model.pretrained_path={base},task.model.adapter.type=lora,"
          "task.model.adapter.r=4,task.model.adapter.target_modules=[q_proj,v_proj],"
          "task.model.adapter.modules_to_save=[classifier]")
    assert "LoRA trains" in capsys.readouterr().out
    state = torch.load(f"{model_dir}/ckpt-4/state.pt", weights_only=True)
    assert state["model"] and all("lora_" in k or "modules_to_save" in k for k in state["model"])
    params = tg.ExperimentConfig.from_yaml(f"{model_dir}/params.yaml")
    task = tg.get_task(params.task)
    model, item = adapt_model(task.build_model(), params.task)
    item.load_state_dict(state["model"])
    model.eval()
    inputs = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    reference = tmp_path / "reference.pt"
    with torch.no_grad():
        torch.save({"inputs": inputs, "logits": model(inputs)}, reference)
    for merge, extra in (("--merge_adapters", ()), ("--no-merge_adapters", (str(base),))):
        output = tmp_path / merge
        assert main(["export", "--model_dir", model_dir, "--output", str(output), "--format",
                     "hf", merge]) == 0
        files = set(json.loads((output / "export.json").read_text())["files"])
        assert ("hf/adapter_model.safetensors" in files) == bool(extra)
        assert consume(output / "hf", reference, *extra) < 1e-5
