"""The prepared GPU check (issue 26): one command, one JSON and one markdown table.

On one GPU, in this order, each part timed and bounded, a failed part recorded and the
others still run:

1. ``tests``: every ``gpu``-marked test (``pytest -m gpu`` on ``_GPU_TESTS``);
2. ``gpt2``: GPT-2 small (124 M parameters: 12 layers, width 768, context 1024, vocabulary
   50304, tied embeddings), bf16 autocast, AdamW, ``torch.compile``: tokens/s and MFU of a
   torchgarden ``Trainer`` (``runtime.enable_xla``) beside a hand-written nanoGPT-style loop
   (``torch.compile(model)``, fused AdamW) on the same model, data and settings, their
   ratio; the host syncs in torchgarden's step path (``torch.cuda.set_sync_debug_mode``
   raises inside the measured loop); the checkpoint save and verified restore of the
   GPT-2 state (GB/s); peak GPU memory;
3. ``resnet50``: ResNet-50 (``torchvision/resnet50`` through torchgarden's model names),
   channels-last, bf16, SGD with momentum, on synthetic 224×224 images already on the GPU:
   images/s of torchgarden beside a hand-written loop; then a real JPEG pipeline (the
   ``image_classification`` experiment's ``folder`` source, decoded by loader workers):
   images/s and the data-wait fraction.

Usage (one GPU; ``make gpu-check`` runs this after installing what it needs):
    python benchmarks/gpu_check.py --out runs/gpu_check
CPU smoke run (tiny sizes; what ``tests/e2e/test_gpu_check.py`` runs):
    .venv/bin/python benchmarks/gpu_check.py --tiny --device cpu --out runs/gpu_check_cpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import gpt_bf16
import torch
import torch.nn.functional as F

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_GPU_TESTS = ("tests/gpu", "tests/unit/data/test_gpu.py",
              "tests/unit/checkpoint/test_checkpoint_gpu.py")  # every gpu-marked test file


def _rate(step: Callable[[], Any], steps: int, device: str) -> float:
    """Seconds per call of ``step`` over ``steps`` calls, the device work included."""
    sync = torch.cuda.synchronize if device != "cpu" else lambda: None
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps


def _race(trainer: Any, hand_written: Callable[[], Any], args: argparse.Namespace
          ) -> dict[str, float]:
    """Median seconds per step of ``trainer.train(steps)`` and of ``steps`` hand-written
    steps, timed in interleaved rounds (a slow moment of the machine hits both), each
    warmed up (compiled) first."""
    contenders = {"torchgarden": lambda: trainer.train(args.steps),
                  "hand_written": lambda: [hand_written() for _ in range(args.steps)]}
    for _ in range(args.warmup):
        for run in contenders.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            seconds[name].append(_rate(run, 1, args.device) / args.steps)
    return {name: sorted(values)[len(values) // 2] for name, values in seconds.items()}


# ------------------------------------------------------------------------------ tests
def check_tests(args: argparse.Namespace) -> dict[str, Any]:
    """Runs ``pytest -m gpu``; returns the counts of its summary line."""
    junit = os.path.join(args.out, "gpu_tests.xml")
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *_GPU_TESTS]
    done = subprocess.run(command, cwd=_ROOT, capture_output=True, text=True,
                          timeout=args.tests_timeout)
    import xml.etree.ElementTree as ElementTree
    suite = ElementTree.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = [case.get("name") for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {**counts, "failed": failed, "exit_code": done.returncode,
            "tail": done.stdout.strip().splitlines()[-1:]}


# ------------------------------------------------------------------------------- GPT-2
def _gpt_args(args: argparse.Namespace) -> argparse.Namespace:
    size = dict(layers=2, heads=2, width=64, context=64, vocab=512, batch=4) if args.tiny \
        else dict(layers=12, heads=12, width=768, context=1024, vocab=50304, batch=args.gpt_batch)
    return argparse.Namespace(device=args.device, **size)


def _hand_written_gpt(gpt: argparse.Namespace) -> Callable[[], torch.Tensor]:
    """nanoGPT's loop: the forward and its loss compiled together (nanoGPT's ``model(x, y)``
    returns the loss), bf16 autocast, gradients clipped at global norm 1.0 (nanoGPT's
    ``grad_clip`` and Model Garden adamw's default), fused AdamW."""
    torch.manual_seed(0)
    model = gpt_bf16.GPT(gpt.vocab, gpt.context, gpt.width, gpt.layers, gpt.heads).to(gpt.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                                  fused=gpt.device != "cpu")

    @torch.compile
    def forward_loss(batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast(torch.device(gpt.device).type, dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())

    tokens = torch.randint(gpt.vocab, (gpt.batch * 8, gpt.context + 1),
                           generator=torch.Generator().manual_seed(0)).to(gpt.device)
    position = [0]

    def step() -> torch.Tensor:
        start = position[0] % 8 * gpt.batch
        position[0] += 1
        loss = forward_loss(tokens[start:start + gpt.batch])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _host_syncs(trainer: Any, steps: int, device: str) -> str:
    """"0" when ``steps`` steps run with sync debugging raising, else the first sync."""
    if device == "cpu":
        return "n/a (cpu)"
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.train(steps)
    except RuntimeError as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if "torchgarden" in
                  f.filename] or traceback.extract_tb(error.__traceback__)
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno} {frames[-1].line}"
        return f"sync at {where}: {str(error).splitlines()[0][:160]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return "0"


def _checkpoint_speed(trainer: Any, out: str) -> dict[str, float]:
    """GB/s of a synchronous save and of a verified restore of the trainer's state."""
    from torchgarden.checkpoint import Checkpoint, CheckpointManager, load_state

    state = {"model": trainer.unwrapped_model, "optimizer": trainer.optimizer}
    directory = tempfile.mkdtemp(prefix="ckpt_", dir=out)
    manager = CheckpointManager(Checkpoint(**state), directory, max_to_keep=1)
    start = time.perf_counter()
    path = manager.save(1, check_interval=False)
    save_s = time.perf_counter() - start
    size = sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)
    start = time.perf_counter()
    load_state(path, verify_files=True)
    restore_s = time.perf_counter() - start
    return {"checkpoint_gb": size / 1e9, "save_gb_per_s": size / 1e9 / save_s,
            "restore_gb_per_s": size / 1e9 / restore_s}


def check_gpt2(args: argparse.Namespace) -> dict[str, Any]:
    """GPT-2 small: torchgarden against the hand-written loop, syncs, checkpoint, memory."""
    from torchgarden.text import peak_flops

    gpt = _gpt_args(args)
    peak = peak_flops(torch.device(args.device))
    trainer = gpt_bf16._trainer(
        argparse.Namespace(**vars(gpt), steps=args.steps), compiled=True
    )
    hand = _hand_written_gpt(gpt)
    flops = gpt_bf16._flops_per_token(trainer.unwrapped_model, gpt)
    tokens = gpt.batch * gpt.context
    seconds = _race(trainer, hand, args)
    result: dict[str, Any] = {"params_m": sum(p.numel() for p in
                                              trainer.unwrapped_model.parameters()) / 1e6}
    for name, step in seconds.items():
        result[f"{name}_tokens_per_s"] = tokens / step
        result[f"{name}_mfu"] = flops * tokens / step / peak if peak else None
    result["ratio"] = result["torchgarden_tokens_per_s"] / result["hand_written_tokens_per_s"]
    result["host_syncs_per_step"] = _host_syncs(trainer, args.steps, args.device)
    result.update(_checkpoint_speed(trainer, args.out))
    if args.device != "cpu":
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return result


# ----------------------------------------------------------------------------- ResNet-50
def _resnet_task(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Any:
    from torchgarden import Task, data
    from torchgarden.models import build_image_classifier

    class SyntheticImages(Task):
        """ResNet-50, channels-last, on images that already live on the device."""

        def build_model(self) -> torch.nn.Module:
            model = build_image_classifier(args.resnet_name, num_classes=1000,
                                           input_size=tuple(images.shape[1:]))
            return model.to(memory_format=torch.channels_last)

        def build_inputs(self, data_params: Any, input_context: Any = None) -> Any:
            dataset = data.ArrayDataset(images, labels)
            return data.build_dataloader(dataset, data_params, input_context=input_context)

        def build_losses(self, labels: Any, model_outputs: Any, aux_losses: Any = None) -> Any:
            logits = getattr(model_outputs, "logits", model_outputs)
            return F.cross_entropy(logits.float(), labels)

    return SyntheticImages


def _resnet_trainer(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor):
    from torchgarden.config import ExperimentConfig, OptimizationConfig
    from torchgarden.train_lib import create_trainer

    params = ExperimentConfig.from_dict({
        "task": {"train_data": {"is_training": True, "global_batch_size": args.resnet_batch}},
        "trainer": {"optimizer_config": OptimizationConfig.from_dict({
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.1}},
        }).as_dict()},
        "runtime": {"device": args.device, "seed": 0, "mixed_precision_dtype": "bfloat16",
                    "enable_xla": not args.no_compile},
    })
    task = _resnet_task(args, images, labels)(params.task)
    return create_trainer(params, task, train=True, evaluate=False)


def _hand_written_resnet(args: argparse.Namespace, images: torch.Tensor,
                         labels: torch.Tensor) -> Callable[[], torch.Tensor]:
    from torchgarden.models import build_image_classifier

    torch.manual_seed(0)
    model = build_image_classifier(args.resnet_name, num_classes=1000,
                                   input_size=tuple(images.shape[1:]))
    model = model.to(args.device, memory_format=torch.channels_last)
    forward = model if args.no_compile else torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    position = [0]
    batches = images.shape[0] // args.resnet_batch

    def step() -> torch.Tensor:
        start = position[0] % batches * args.resnet_batch
        position[0] += 1
        x = images[start:start + args.resnet_batch]
        with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16):
            output = forward(x)
        logits = getattr(output, "logits", output)
        loss = F.cross_entropy(logits.float(), labels[start:start + args.resnet_batch])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _jpeg_pipeline(args: argparse.Namespace, size: int) -> dict[str, float]:
    """Images/s and data-wait of the folder source (JPEG decode in loader workers)."""
    from PIL import Image

    from torchgarden import get_experiment, get_task
    from torchgarden.train_lib import create_trainer

    root = tempfile.mkdtemp(prefix="jpegs_", dir=args.out)
    generator = torch.Generator().manual_seed(0)
    for index in range(args.jpeg_images):
        folder = os.path.join(root, f"class_{index % 10}")
        os.makedirs(folder, exist_ok=True)
        pixels = torch.randint(0, 256, (size + 32, size + 32, 3), generator=generator)
        Image.fromarray(pixels.to(torch.uint8).numpy()).save(
            os.path.join(folder, f"{index}.jpg"), quality=90)
    params = get_experiment("image_classification")
    data = {"source": "folder", "input_path": root, "global_batch_size": args.resnet_batch,
            "num_workers": args.workers, "pin_memory": args.device != "cpu"}
    params.override({
        "task": {"model": {"name": args.resnet_name, "num_classes": 10,
                           "input_size": [size, size, 3]},
                 "train_data": data, "validation_data": {**data, "is_training": False}},
        "trainer": {"steps_per_loop": args.steps},
        "runtime": {"device": args.device, "mixed_precision_dtype": "bfloat16"},
    })
    trainer = create_trainer(params, get_task(params.task), train=True, evaluate=False)
    trainer.train(args.warmup)
    waited = trainer.data_wait_seconds
    seconds = _rate(lambda: trainer.train(args.steps), 1, args.device)
    return {"jpeg_images_per_s": args.steps * args.resnet_batch / seconds,
            "jpeg_data_wait_fraction": (trainer.data_wait_seconds - waited) / seconds,
            "jpeg_workers": args.workers}


def _synthetic_resnet(args: argparse.Namespace, size: int) -> dict[str, Any]:
    """Images/s of torchgarden and of a hand-written loop on images already on the device."""
    count = args.resnet_batch * 4
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(count, 3, size, size, generator=generator).to(
        args.device, memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (count,), generator=generator).to(args.device)
    trainer = _resnet_trainer(args, images, labels)
    hand = _hand_written_resnet(args, images, labels)
    seconds = _race(trainer, hand, args)
    result = {f"{name}_images_per_s": args.resnet_batch / step for name, step in seconds.items()}
    result["ratio"] = result["torchgarden_images_per_s"] / result["hand_written_images_per_s"]
    result["host_syncs_per_step"] = _host_syncs(trainer, args.steps, args.device)
    return result


def check_resnet50(args: argparse.Namespace) -> dict[str, Any]:
    """ResNet-50 images/s: torchgarden against a hand-written loop, then a JPEG pipeline."""
    size = 32 if args.tiny else 224
    result = _synthetic_resnet(args, size)  # its GPU memory is freed before the JPEG part
    return {**result, **_jpeg_pipeline(args, size)}


# ------------------------------------------------------------------------------- report
_TARGETS = {  # (part, key): (comparison, target) from issue 26
    ("gpt2", "ratio"): (">=", 0.98), ("gpt2", "torchgarden_mfu"): (">=", 0.45),
    ("gpt2", "host_syncs_per_step"): ("==", "0"), ("resnet50", "ratio"): (">=", 0.98),
    ("resnet50", "jpeg_data_wait_fraction"): ("<=", 0.05),
    ("resnet50", "host_syncs_per_step"): ("==", "0"), ("tests", "failures"): ("==", 0),
}


def _verdict(value: Any, comparison: str, target: Any) -> str:
    if value is None or isinstance(value, str) and value.startswith("n/a"):
        return "n/a"
    met = {">=": lambda: value >= target, "<=": lambda: value <= target,
           "==": lambda: value == target}[comparison]()
    return "met" if met else "MISSED"


def markdown(report: dict[str, Any]) -> str:
    """The report as one markdown table (part, figure, value, target, verdict)."""
    lines = [f"# GPU check: {report['device_name']} (torch {report['torch']})", "",
             "| part | figure | value | target | verdict |", "| --- | --- | --- | --- | --- |"]
    for part, values in report["parts"].items():
        if "error" in values:
            lines.append(f"| {part} | error | {values['error']} | | FAILED |")
            continue
        for key, value in values.items():
            comparison, target = _TARGETS.get((part, key), ("", None))
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            verdict = _verdict(value, comparison, target) if comparison else ""
            goal = "" if target is None else f"{comparison} {target}"
            lines.append(f"| {part} | {key} | {shown} | {goal} | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="runs/gpu_check")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU smoke run)")
    parser.add_argument("--parts", default="tests,gpt2,resnet50")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gpt-batch", type=int, default=16)
    parser.add_argument("--resnet-batch", type=int, default=128)
    parser.add_argument("--resnet-name", default="torchvision/resnet50")
    parser.add_argument("--jpeg-images", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--tests-timeout", type=float, default=240.0)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.set_float32_matmul_precision("high")
    report: dict[str, Any] = {
        "device_name": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
        "torch": torch.__version__, "argv": argv if argv is not None else sys.argv[1:],
        "parts": {},
    }
    checks = {"tests": check_tests, "gpt2": check_gpt2, "resnet50": check_resnet50}
    for part in args.parts.split(","):
        start = time.perf_counter()
        try:
            report["parts"][part] = checks[part](args)
        except Exception as error:  # record it; the other parts still run
            report["parts"][part] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            traceback.print_exc()
        report["parts"][part]["seconds"] = round(time.perf_counter() - start, 1)
        print(f"{part}: {json.dumps(report['parts'][part], default=str)}", flush=True)
        with open(os.path.join(args.out, "gpu_check.json"), "w") as f:  # after every part
            json.dump(report, f, indent=2, default=str)
        with open(os.path.join(args.out, "gpu_check.md"), "w") as f:
            f.write(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
