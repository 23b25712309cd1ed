"""The toy regression task used by tests and the overhead benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgarden import data, metrics
from torchgarden.core.serving import InferenceStepModule, Serving
from torchgarden.core.task import Task
from torchgarden.experiments.toy import ToyRegressionConfig
from torchgarden.registry import register_task

__all__ = ["ToyRegressionTask"]


@register_task(ToyRegressionConfig)
class ToyRegressionTask(Task):
    """``y = x @ w + noise`` fitted with MSE; reports ``mean_absolute_error``."""

    task_config: ToyRegressionConfig

    def build_model(self) -> nn.Module:
        cfg = self.task_config
        if cfg.hidden_size:
            return nn.Sequential(
                nn.Linear(cfg.in_features, cfg.hidden_size),
                nn.ReLU(),
                nn.Linear(cfg.hidden_size, cfg.out_features),
            )
        return nn.Linear(cfg.in_features, cfg.out_features)

    def build_inputs(self, params: Any, input_context: Any = None) -> Any:
        cfg = self.task_config
        # One draw of 2N examples of the same linear map: the first half trains, the
        # second half validates.
        x, y = data.make_toy_regression(
            num_examples=2 * cfg.num_examples,
            in_features=cfg.in_features,
            out_features=cfg.out_features,
            noise=cfg.noise,
            seed=0,
        )
        half = slice(0, cfg.num_examples) if params.is_training else slice(cfg.num_examples, None)
        x, y = x[half], y[half]
        return data.build_dataloader(data.ArrayDataset(x, y), params, input_context=input_context)

    def build_losses(
        self, labels: torch.Tensor, model_outputs: torch.Tensor,
        aux_losses: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        loss = F.mse_loss(model_outputs, labels)
        if aux_losses:
            loss = loss + torch.stack([a.float() for a in aux_losses]).sum()
        return loss

    def build_metrics(self, training: bool = True) -> list[Any]:
        return [metrics.MeanAbsoluteError(name="mean_absolute_error")]

    def build_serving_module(self, model: nn.Module) -> Serving:
        """The default (``inference_step``) on float ``features [B, in_features]``."""
        features = torch.randn(2, self.task_config.in_features,
                               generator=torch.Generator().manual_seed(0))
        return Serving(module=InferenceStepModule(self, model), example_inputs=(features,),
                       input_names=("features",), output_names=("predictions",))
