"""Running an experiment: the one place where configs become objects (REFERENCE §5).

* ``experiment`` -- ``run_experiment``: validate -> lock -> build -> restore -> loop ->
  close (and ``run_experiment_with_multitask_eval``: train one task, evaluate several);
* ``builders`` -- model, optimizer, data, metrics, EMA, the step plan and the compiled
  step -> ``Trainer``;
* ``wiring`` -- the run's parts, checkpoint manager, recovery, preemption, summaries ->
  ``Controller``; ``params.yaml``;
* ``multitask`` -- multi-task trainers, the task sampler and the multi-task evaluator;
* ``model_dir``, ``run_lock``, ``resume``, ``recovery`` -- what a run checks before it
  writes, the one-writer lock, resuming, and blow-up recovery.

Names are loaded on first access: ``run_experiment`` checks the model_dir and takes its
lock before torch is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchgarden.utils.lazy import lazy_names

if TYPE_CHECKING:
    from torchgarden.modes import MODES, check_mode
    from torchgarden.train_lib.builders import create_trainer, maybe_create_best_ckpt_exporter
    from torchgarden.train_lib.experiment import run_experiment, run_experiment_with_multitask_eval
    from torchgarden.train_lib.model_dir import ModelDirError, NoCheckpointError
    from torchgarden.train_lib.resume import check_resume_compatible
    from torchgarden.train_lib.run_lock import ModelDirLockedError, RunLock
    from torchgarden.train_lib.wiring import serialize_config

__getattr__, __all__ = lazy_names(__name__, __file__)
