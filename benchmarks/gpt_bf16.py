"""Tokens/s and model FLOPs utilisation of a GPT-style decoder trained through a Task.

A GPT-2-small-shaped decoder (12 layers, 12 heads, width 768, context 1024, vocabulary
50304, tied embeddings) is trained on random tokens staged on the device, through a
torchgarden ``Task`` and ``Trainer``, in bfloat16 autocast with float32 weights and an
AdamW update, once eagerly and once with ``runtime.enable_xla`` (the whole step as one
``torch.compile`` graph). MFU = (6·N + 12·L·H·Q·T) FLOPs per token × tokens/s / peak,
with N the parameters without position embeddings (nanoGPT's estimate).

Usage (GPU):
    .venv/bin/python benchmarks/gpt_bf16.py [--peak-tflops 989]
Smoke run on a CPU:
    .venv/bin/python benchmarks/gpt_bf16.py --device cpu --layers 2 --width 64 --heads 2 \\
        --context 64 --vocab 512 --batch 4 --steps 3 --warmup 2
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import _common
import torch
import torch.nn.functional as F
from torch import nn

H100_BF16_DENSE_TFLOPS = 989.0  # H100 SXM, dense bfloat16 tensor-core peak.


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4× GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    """Token + position embeddings, ``layers`` blocks, final norm, tied output head."""

    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _task(args: argparse.Namespace, params: Any) -> Any:
    from torchgarden import Task, data

    class LanguageModelTask(Task):
        """Next-token prediction on random tokens that live on the device."""

        def build_model(self) -> nn.Module:
            return GPT(args.vocab, args.context, args.width, args.layers, args.heads)

        def build_inputs(self, data_params: Any, input_context: Any = None) -> Any:
            generator = torch.Generator().manual_seed(0)
            tokens = torch.randint(
                args.vocab, (args.batch * 8, args.context + 1), generator=generator
            ).to(args.device)
            dataset = data.ArrayDataset(tokens[:, :-1], tokens[:, 1:])
            return data.build_dataloader(dataset, data_params, input_context=input_context)

        def build_losses(self, labels: Any, model_outputs: Any, aux_losses: Any = None) -> Any:
            return F.cross_entropy(model_outputs.flatten(0, 1), labels.flatten())

    return LanguageModelTask(params)


def _trainer(args: argparse.Namespace, compiled: bool) -> Any:
    from torchgarden.config import (
        DataConfig,
        ExperimentConfig,
        OptimizationConfig,
        RuntimeConfig,
        TaskConfig,
        TrainerConfig,
    )
    from torchgarden.train_lib import create_trainer

    params = ExperimentConfig(
        task=TaskConfig(train_data=DataConfig(is_training=True, global_batch_size=args.batch)),
        trainer=TrainerConfig(
            optimizer_config=OptimizationConfig.from_dict(
                {
                    # fused on a GPU, as the hand-written loops build their AdamW.
                    "optimizer": {"type": "adamw", "adamw": {
                        "weight_decay_rate": 0.1, "fused": args.device != "cpu"}},
                    "learning_rate": {"type": "constant", "constant": {"learning_rate": 3e-4}},
                }
            ),
        ),
        runtime=RuntimeConfig(
            device=args.device, seed=0, mixed_precision_dtype="bfloat16",
            matmul_precision="high", enable_xla=compiled,
        ),
    )
    return create_trainer(params, _task(args, params.task), train=True, evaluate=False)


def _flops_per_token(model: nn.Module, args: argparse.Namespace) -> float:
    params = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    head_dim = args.width // args.heads
    return 6.0 * params + 12.0 * args.layers * args.heads * head_dim * args.context


def _measure(args: argparse.Namespace, compiled: bool) -> dict[str, float]:
    trainer = _trainer(args, compiled)
    device = args.device
    warm = float(_common.timed(lambda: trainer.train(args.warmup), device))
    seconds = float(_common.timed(lambda: trainer.train(args.steps), device))
    logs = trainer.train(1)
    tokens_per_s = args.steps * args.batch * args.context / seconds
    flops = _flops_per_token(trainer.unwrapped_model, args) * tokens_per_s
    result = {
        "warmup_s": warm,
        "step_ms": seconds / args.steps * 1e3,
        "tokens_per_s": tokens_per_s,
        "tflops": flops / 1e12,
        "mfu": flops / (args.peak_tflops * 1e12),
        "loss": float(logs["training_loss"]),
        "params_m": sum(p.numel() for p in trainer.unwrapped_model.parameters()) / 1e6,
        "whole_step_graph": float(type(trainer.step_fn).__name__ == "CompiledTrainStep"),
    }
    if device != "cpu":
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
        torch.cuda.reset_peak_memory_stats()
    return result


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_DENSE_TFLOPS)
    parser.add_argument("--modes", default="eager,compiled", help="comma-separated")
    args = parser.parse_args(argv)
    _common.print_header(
        f"GPT decoder L{args.layers} H{args.heads} d{args.width} T{args.context} "
        f"V{args.vocab} batch {args.batch}, bf16 autocast, AdamW", "gpt_bf16.py", argv
    )
    results = {}
    for mode in args.modes.split(","):
        try:
            results[mode] = _measure(args, compiled=mode == "compiled")
        except Exception as error:  # Report and go on with the other mode.
            print(f"  {mode} FAILED: {type(error).__name__}: {str(error)[:300]}", flush=True)
            continue
        print(f"  {mode}: " + ", ".join(f"{k}={v:.4g}" for k, v in results[mode].items()),
              flush=True)
    print()
    _common.print_table(
        ["mode", "ms/step", "tokens/s", "TFLOP/s", "MFU", "warm-up s", "final loss"],
        [
            (mode, f"{r['step_ms']:.1f}", f"{r['tokens_per_s']:,.0f}", f"{r['tflops']:.1f}",
             f"{r['mfu']:.1%}", f"{r['warmup_s']:.1f}", f"{r['loss']:.3f}")
            for mode, r in results.items()
        ],
    )
    print(f"MFU against {args.peak_tflops:.0f} TFLOP/s peak.")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
