"""Running an experiment: the one place where configs become objects (REFERENCE §5).

* ``builders`` — model, optimizer, data, metrics, EMA, the step function -> ``Trainer``;
* ``wiring`` — checkpoint manager, recovery and preemption, summary managers ->
  ``Controller``; ``params.yaml``;
* ``experiment`` — ``run_experiment``: the mode, run from start to end;
* ``model_dir``, ``run_lock``, ``resume``, ``recovery`` — what a run checks before it
  writes, the one-writer lock, resuming, and blow-up recovery.
"""

from torchgarden.modes import MODES, check_mode
from torchgarden.train_lib.builders import create_trainer, maybe_create_best_ckpt_exporter
from torchgarden.train_lib.experiment import NoCheckpointError, run_experiment
from torchgarden.train_lib.model_dir import ModelDirError
from torchgarden.train_lib.resume import check_resume_compatible
from torchgarden.train_lib.run_lock import ModelDirLockedError, RunLock
from torchgarden.train_lib.wiring import serialize_config

__all__ = [
    "MODES",
    "ModelDirError",
    "ModelDirLockedError",
    "NoCheckpointError",
    "RunLock",
    "check_mode",
    "check_resume_compatible",
    "create_trainer",
    "maybe_create_best_ckpt_exporter",
    "run_experiment",
    "serialize_config",
]
