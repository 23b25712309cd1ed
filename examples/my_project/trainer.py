"""The project's Trainer: the base Trainer plus the global step in the train logs."""

from __future__ import annotations

from typing import Any

import torchgarden as tg


class ProjectTrainer(tg.Trainer):
    """Adds ``global_step`` to every train loop's logs (the guide's ``model_global_step``)."""

    def train_loop_end(self) -> dict[str, Any]:
        logs = super().train_loop_end()
        logs["global_step"] = int(self.global_step)
        return logs
