"""Model Garden's "Customize launch script" as a script: python examples/custom_launch_script.py
--experiment my_project/regression --mode train_and_eval --model_dir DIR [--params_override ...]"""
import argparse

from my_project import registry_imports  # noqa: F401  (registers experiments and tasks)
from my_project.trainer import ProjectTrainer

import torchgarden as tg


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    tg.define_flags(parser)
    flags = parser.parse_args(argv)
    if not (flags.experiment and flags.mode and flags.model_dir):
        parser.error("--experiment, --mode and --model_dir are required")
    params = tg.parse_configuration(flags)  # defaults, --config_file, --params_override
    runtime = tg.setup_runtime(params.runtime)  # seed, device, precision, torchrun group
    task = tg.get_task(params.task, logging_dir=flags.model_dir)
    trainer = tg.create_trainer(params, task, train="train" in flags.mode, runtime=runtime,
                                evaluate="eval" in flags.mode, model_dir=flags.model_dir,
                                trainer_cls=ProjectTrainer)
    # run_experiment also writes model_dir/params.yaml once training has started.
    return tg.run_experiment(task=task, mode=flags.mode, params=params, trainer=trainer,
                             model_dir=flags.model_dir, runtime=runtime)[1]


if __name__ == "__main__":
    print(main())
    tg.distribute.exit_worker(0)  # Under torchrun: flush, then os._exit (docs/distributed.md).
