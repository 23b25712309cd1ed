"""Running an experiment: the one place where configs become objects (REFERENCE §5).

* ``builders`` — model, optimizer, data, metrics, EMA, the step function -> ``Trainer``;
* ``wiring`` — checkpoint manager, recovery and preemption, summary managers ->
  ``Controller``; ``params.yaml``;
* ``experiment`` — ``run_experiment``: the mode, run from start to end.
"""

from torchgarden.modes import MODES, check_mode
from torchgarden.train_lib.builders import create_trainer, maybe_create_best_ckpt_exporter
from torchgarden.train_lib.experiment import check_resume_compatible, run_experiment
from torchgarden.train_lib.wiring import serialize_config

__all__ = [
    "MODES",
    "check_mode",
    "check_resume_compatible",
    "create_trainer",
    "maybe_create_best_ckpt_exporter",
    "run_experiment",
    "serialize_config",
]
