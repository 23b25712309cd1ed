"""A Trainer, a checkpoint manager and a Controller assembled in plain Python, no config.

``create_trainer`` builds the same objects from an ``ExperimentConfig``; here each one is
built by hand, the way a user who only wants the loop would: python
examples/trainer_without_config.py [MODEL_DIR]
"""

import sys

import torch

import torchgarden as tg
from torchgarden import checkpoint, metrics


class LineTask(tg.Task):
    """Fits y = 3x - 1 from noisy samples; batches are made here, no DataConfig needed."""

    def build_model(self):
        return torch.nn.Linear(1, 1)

    def build_inputs(self, params, input_context=None):
        generator = torch.Generator().manual_seed(0 if params == "train" else 1)
        x = torch.rand(512, 1, generator=generator) * 4 - 2
        y = 3 * x - 1 + 0.05 * torch.randn(512, 1, generator=generator)
        return [(x[i:i + 64], y[i:i + 64]) for i in range(0, 512, 64)]

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return torch.nn.functional.mse_loss(model_outputs, labels)

    def build_metrics(self, training=True):
        return [metrics.MeanAbsoluteError(name="mae")]


def main(model_dir: str) -> dict:
    torch.manual_seed(0)
    task = LineTask(tg.TaskConfig())
    model = task.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = tg.Trainer(task=task, model=model, optimizer=optimizer,
                         train_data=task.build_inputs("train"),
                         eval_data=task.build_inputs("validation"),
                         train_metrics=task.build_metrics(training=True),
                         eval_metrics=task.build_metrics(training=False))
    manager = checkpoint.CheckpointManager(trainer.checkpoint, model_dir, max_to_keep=2,
                                           checkpoint_interval=100)
    controller = tg.Controller(trainer=trainer, evaluator=trainer, global_step=trainer.global_step,
                               steps_per_loop=50, checkpoint_manager=manager)
    logs = controller.train_and_evaluate(train_steps=200, eval_interval=100)
    return {"eval_logs": logs, "weight": model.weight.item(), "bias": model.bias.item(),
            "trainer": trainer}


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "runs/trainer_without_config")["eval_logs"])
