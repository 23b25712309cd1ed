"""``StepPlan``: how the Trainer runs its steps, decided once before training.

Steps per call of the step function (the compiled in-graph loop), batches per optimizer
update, a loss check after every step, and the plan blow-up recovery replays under are
computed together from the config, the strategy and what needs the host between steps
(:meth:`StepPlan.build`), then frozen and handed to the Trainer. Nothing changes them
later; recovery switches the Trainer to the ``replay`` plan declared here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from torchgarden.callbacks.actions import LossBound  # The one blow-up rule (RecoveryAction).

__all__ = ["LossBound", "StepPlan"]


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """How the Trainer runs its steps.

    Attributes:
        steps_per_call: Steps one call of the step function runs (K, through its
            ``run_steps``: the compiled in-graph loop); 1 runs ``Trainer.train_step`` once
            per step.
        accumulation_steps: Batches per optimizer update (``trainer.gradient_accumulation_steps``).
        check_loss: ``(global_step, loss) -> bool`` after every step (one host sync each);
            True ends the loop early (blow-up recovery). None: no per-step check.
        replay: The plan blow-up recovery replays under (one step per call, the loss
            checked after every step); None: recovery does not replay.
    """

    steps_per_call: int = 1
    accumulation_steps: int = 1
    check_loss: Callable[[int, float], bool] | None = None
    replay: StepPlan | None = None

    def __post_init__(self) -> None:
        if self.accumulation_steps < 1:
            raise ValueError(
                f"gradient_accumulation_steps must be >= 1, got {self.accumulation_steps}.")
        if self.steps_per_call < 1:
            raise ValueError(f"steps_per_call must be >= 1, got {self.steps_per_call}.")
        if self.steps_per_call > 1 and self.check_loss is not None:
            raise ValueError("a loss check after every step needs one step per call "
                             f"(steps_per_call=1), got {self.steps_per_call}.")

    @classmethod
    def build(
        cls,
        *,
        steps_per_call: int = 1,
        accumulation_steps: int = 1,
        check_loss: Callable[[int, float], bool] | None = None,
        replay_check: Callable[[int, float], bool] | None = None,
        host_between_steps: Sequence[str] = (),
    ) -> StepPlan:
        """The plan, with one step per call when anything needs the host between steps.

        Args:
            steps_per_call: K wanted (what the step function can run per call).
            accumulation_steps: Batches per optimizer update.
            check_loss: The configured per-step loss check, or None.
            replay_check: The check recovery replays with; None: no replay plan.
            host_between_steps: What needs the host after every step (the weight EMA, an
                overridden ``train_step``): each forces one step per call.
        """
        if host_between_steps or check_loss is not None:
            steps_per_call = 1
        replay = None if replay_check is None else cls(1, accumulation_steps, replay_check)
        return cls(steps_per_call, accumulation_steps, check_loss, replay)
