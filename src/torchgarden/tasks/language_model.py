"""The language-model task: next-byte prediction with a transformers causal LM."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, models, text
from torchgarden.core.task import Task
from torchgarden.experiments.language_model import (
    LanguageModelConfig,
    LanguageModelDataConfig,
)
from torchgarden.registry import register_task
from torchgarden.utils.logs import Logs

__all__ = ["LanguageModelTask"]

_logger = logging.getLogger("torchgarden")
VOCAB_SIZE = 256  # Byte-level tokens.


def _enable_activation_checkpointing(model: nn.Module) -> None:
    """transformers' per-block checkpointing (non-reentrant ``torch.utils.checkpoint``);
    transformers 5 renamed ``gradient_checkpointing_enable``. The key-value cache is
    turned off, as transformers would do (with a warning) at every forward pass."""
    model.config.use_cache = False
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@register_task(LanguageModelConfig)
class LanguageModelTask(Task):
    """Trains ``task.model`` to predict the next byte; reports bits per byte, the unigram
    baseline, tokens per second and MFU."""

    task_config: LanguageModelConfig

    def __init__(self, params: LanguageModelConfig, logging_dir: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(params, logging_dir, name)
        self._corpora: dict[str, text.Corpus] = {}
        self._flops_per_token = 0.0

    def _max_length(self) -> int:
        config = self.task_config
        return max(config.train_data.seq_length, config.validation_data.seq_length)

    def _build_lm(self) -> nn.Module:
        model_config = self.task_config.model
        return models.build_causal_lm(
            model_config.name, vocab_size=VOCAB_SIZE, max_length=self._max_length(),
            settings=model_config.library_config, pretrained_path=model_config.pretrained_path,
            ignore_mismatched_sizes=model_config.ignore_mismatched_sizes)

    def build_model(self) -> nn.Module:
        model_config = self.task_config.model
        model = self._build_lm()
        if model_config.activation_checkpointing:
            _enable_activation_checkpointing(model.model)
        # A weightless twin on the meta device; with its cache on, transformers skips a
        # data-dependent mask check that meta tensors cannot answer.
        twin = functools.partial(models.build_causal_lm, model_config.name,
                                 vocab_size=VOCAB_SIZE, max_length=self._max_length(),
                                 settings={**model_config.library_config, "use_cache": True})
        self._flops_per_token = text.flops_per_token(
            twin, self.task_config.train_data.seq_length)
        _logger.info("%s: %.1fM parameters, %.3g training FLOPs per token", model_config.name,
                     sum(p.numel() for p in model.parameters()) / 1e6, self._flops_per_token)
        return model

    def _corpus(self, params: LanguageModelDataConfig, split: str) -> text.Corpus:
        path = params.input_path if isinstance(params.input_path, str) else params.input_path[0]
        root = path or text.python_stdlib_root()
        key = f"{root}|{params.file_pattern}|{params.validation_percent}|{split}|{params.max_bytes}"
        if key not in self._corpora:
            self._corpora[key] = text.read_corpus(
                root, split=split, pattern=params.file_pattern,
                validation_percent=params.validation_percent, max_bytes=params.max_bytes)
        return self._corpora[key]

    def build_inputs(self, params: LanguageModelDataConfig, input_context: Any = None) -> Any:
        split = params.split or ("train" if params.is_training else "validation")
        corpus = self._corpus(params, split)
        _logger.info("%s split: %d files, %d bytes from %s", split, corpus.num_files,
                     len(corpus.data), corpus.root)
        if split == "validation":
            train = self._corpus(params, "train")
            self._unigram = text.unigram_bits_per_byte(train.data, corpus.data)
        return data.build_dataloader(text.pack_bytes(corpus.data, params.seq_length), params,
                                     input_context=input_context)

    @staticmethod
    def split_inputs(inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input ids, target ids)`` as ``int64`` (batches hold ``uint8`` bytes)."""
        features, labels = inputs
        return features.long(), labels.long()

    def build_losses(self, labels: torch.Tensor, model_outputs: Any,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        logits = text.logits_of(model_outputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss

    def build_metrics(self, training: bool = True) -> list[Any]:
        if training:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            peak = self.task_config.peak_flops or text.peak_flops(device)
            return [text.Throughput(self._flops_per_token, peak)]
        return [text.BitsPerByte()]

    def aggregate_logs(self, state: Any = None, step_logs: Logs | None = None) -> Any:
        return True  # The baseline is known in advance; reduce adds it once.

    def reduce_aggregated_logs(self, aggregated_logs: Any,
                               global_step: int | None = None) -> Logs:
        baseline = getattr(self, "_unigram", None)
        return {} if baseline is None else {"unigram_bits_per_byte": baseline}
