"""A hand-written training loop with torchgarden's metrics, losses and summaries.

Mirrors the custom-training-loop tutorial: "Using the GradientTape" (epochs over a
dataset in batches: forward, loss, gradients, optimizer update), "Low-level handling of
metrics" (``update_state`` after each batch, ``result()`` at the end of the epoch,
``reset_states()`` before the next, a validation pass each epoch) and "Speeding-up your
training step with tf.function" (the step compiled into a graph).

No Task, Trainer or Controller: autograd replaces the gradient tape
(``loss.backward()`` + ``optimizer.step()``), ``torch.compile`` replaces ``tf.function``,
and a ``summary.SummaryManager`` writes the per-epoch values to TensorBoard.
``torch.compile`` takes tens of seconds to compile on a CPU, so it is off unless
``compile_step=True`` (``--compile`` on the command line).

Run: ``python examples/hand_written_loop.py [--compile]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchgarden import data, losses, metrics, summary


def main(model_dir: str | None = None, epochs: int = 3,
         compile_step: bool = False) -> dict[str, Any]:
    """Trains an MLP on the 8x8 digits for ``epochs`` epochs.

    Args:
        model_dir: Where the ``train`` and ``validation`` summaries go. Defaults to a new
            temporary directory.
        epochs: Passes over the training set. Defaults to 3.
        compile_step: Compile the train step with ``torch.compile``. Defaults to False.

    Returns:
        ``model_dir``, the trained ``model`` and one ``history`` entry per epoch (step,
        loss, train/validation accuracy and how many examples each metric counted).
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="tg_hand_written_loop_")
    torch.manual_seed(0)
    x_train, y_train = data.load_digits_arrays("train")
    x_val, y_val = data.load_digits_arrays("validation")
    train_dataset = DataLoader(TensorDataset(x_train, y_train), batch_size=64, shuffle=True,
                               generator=torch.Generator().manual_seed(0))
    val_dataset = DataLoader(TensorDataset(x_val, y_val), batch_size=256)

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = losses.SparseCategoricalCrossentropy(from_logits=True)
    train_acc_metric = metrics.SparseCategoricalAccuracy()
    val_acc_metric = metrics.SparseCategoricalAccuracy()
    train_summaries = summary.SummaryManager(os.path.join(model_dir, "train"))
    val_summaries = summary.SummaryManager(os.path.join(model_dir, "validation"))

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)  # forward; autograd records what the loss needs
        loss_value = loss_fn(y, logits)
        optimizer.zero_grad(set_to_none=True)
        loss_value.backward()  # the gradient tape's gradient(loss, weights)
        optimizer.step()  # apply_gradients
        train_acc_metric.update_state(y, logits)
        return loss_value.detach()

    step_fn = torch.compile(train_step) if compile_step else train_step
    history: list[dict[str, float]] = []
    global_step = 0
    for epoch in range(epochs):
        start_time = time.time()
        model.train()
        loss_sum = torch.zeros(())
        for x_batch, y_batch in train_dataset:
            loss_sum += step_fn(x_batch, y_batch)
            global_step += 1
        train_acc = float(train_acc_metric.result())  # one host sync per epoch
        train_count = float(train_acc_metric.count)
        train_acc_metric.reset_states()  # the next epoch starts from zero

        model.eval()
        with torch.no_grad():  # the validation pass changes nothing
            for x_batch, y_batch in val_dataset:
                val_acc_metric.update_state(y_batch, model(x_batch))
        val_acc = float(val_acc_metric.result())
        val_count = float(val_acc_metric.count)
        val_acc_metric.reset_states()

        loss = float(loss_sum) / len(train_dataset)
        train_summaries.write_summaries({"loss": loss, "accuracy": train_acc}, step=global_step)
        val_summaries.write_summaries({"accuracy": val_acc}, step=global_step)
        print(f"epoch {epoch}: loss {loss:.4f}, training acc {train_acc:.4f}, validation acc "
              f"{val_acc:.4f}, time taken {time.time() - start_time:.2f}s")
        history.append({"step": global_step, "loss": loss, "train_accuracy": train_acc,
                        "train_count": train_count, "val_accuracy": val_acc,
                        "val_count": val_count})
    train_summaries.close()
    val_summaries.close()
    return {"model_dir": model_dir, "model": model, "history": history}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="compile the train step")
    main(compile_step=parser.parse_args().compile)
