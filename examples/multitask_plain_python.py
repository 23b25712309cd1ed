"""Two tasks, one backbone, assembled in plain Python: no config, no registry.

The multi-task twin of ``trainer_without_config.py``: two ordinary single-task Tasks
(the digit and its parity, both ``ImageClassificationTask``), a ``MultiTaskBaseModel``
whose two sub-models share one MLP backbone, the interleaving trainer with a seeded
proportional ``TaskSampler``, a ``MultiTaskEvaluator`` and Orbit's ``Controller``. Every
constructor takes built objects, keyword-only. TensorBoard: ``train/<task>/`` and
``validation/<task>/`` under the model_dir.

Run: ``python examples/multitask_plain_python.py``
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from torch import nn

import torchgarden as tg
from torchgarden import multitask
from torchgarden.experiments import DigitParityConfig, ImageClassificationConfig
from torchgarden.experiments.image_classification import ImageClassificationDataConfig
from torchgarden.tasks import DigitParityTask, ImageClassificationTask


def digits_config(cls: type[ImageClassificationConfig]) -> ImageClassificationConfig:
    return cls(train_data=ImageClassificationDataConfig(is_training=True, global_batch_size=64,
                                                        seed=0),
               validation_data=ImageClassificationDataConfig(is_training=False,
                                                             global_batch_size=256,
                                                             drop_remainder=False))


def main(model_dir: str | None = None, train_steps: int = 300) -> dict[str, Any]:
    """Trains digits + parity on one backbone for ``train_steps`` steps.

    Returns:
        ``model_dir``, the trainer, the final eval logs and the steps each task trained.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_multitask_")
    torch.manual_seed(0)
    tasks = {"digits": ImageClassificationTask(digits_config(ImageClassificationConfig)),
             "parity": DigitParityTask(digits_config(DigitParityConfig))}
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU())
    model = multitask.MultiTaskBaseModel({
        "digits": nn.Sequential(backbone, nn.Linear(64, 10)),
        "parity": nn.Sequential(backbone, nn.Linear(64, 2)),
    })
    routines = [multitask.TaskRoutine(task_name=name, task_config=task.task_config,
                                      task_weight=weight)
                for (name, task), weight in zip(tasks.items(), (2.0, 1.0))]
    multi_task = multitask.MultiTask(multitask.MultiTaskConfig(task_routines=routines),
                                     tasks=tasks)
    trainer = multitask.MultiTaskInterleavingTrainer(
        multi_task=multi_task,
        multi_task_model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=3e-3),
        train_data={n: t.build_inputs(t.task_config.train_data) for n, t in tasks.items()},
        train_metrics={n: t.build_metrics(training=True) for n, t in tasks.items()},
        task_sampler=multitask.ProportionalTaskSampler(multi_task.task_weights, seed=0),
    )
    evaluator = multitask.MultiTaskEvaluator(
        eval_tasks=tasks, model=model, global_step=trainer.global_step,
        eval_data={n: t.build_inputs(t.task_config.validation_data) for n, t in tasks.items()},
        eval_metrics={n: t.build_metrics(training=False) for n, t in tasks.items()},
    )
    manager = tg.checkpoint.CheckpointManager(trainer.checkpoint, model_dir, max_to_keep=2,
                                             checkpoint_interval=100)
    controller = tg.Controller(trainer=trainer, evaluator=evaluator,
                               global_step=trainer.global_step, steps_per_loop=100,
                               checkpoint_manager=manager, summary_dir=f"{model_dir}/train",
                               eval_summary_dir=f"{model_dir}/validation")
    eval_logs = controller.train_and_evaluate(train_steps=train_steps, eval_interval=150)
    return {"model_dir": model_dir, "trainer": trainer, "eval_logs": eval_logs,
            "task_steps": dict(trainer.task_steps)}


if __name__ == "__main__":
    result = main()
    print({name: round(float(logs["accuracy"]), 4)
           for name, logs in result["eval_logs"].items()}, result["task_steps"])
