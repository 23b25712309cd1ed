"""(f) Model Garden's in-graph training loop in TensorFlow versus torchgarden's compiled path.

Model Garden's trainers (Orbit ``StandardTrainer`` with ``use_tf_function`` and
``use_tf_while_loop``) run ``steps_per_loop`` steps inside one ``tf.function``:
``for _ in tf.range(num_steps): train_step(next(iterator))``. This script reproduces
that loop with Keras on the workloads of ``digits_mlp.py`` (scikit-learn's 8×8 digits,
80 % split, Adam(3e-3, epsilon=1e-7), batch 64, one thread): the digits MLP 64-128-10
and Model Garden's benchmark model 64-256-256-10.

Run from torchgarden's environment with ``--tf-python`` (a TensorFlow interpreter, not a
torchgarden dependency), it alternates processes: per round and model, in a random
order, one TensorFlow process (``--worker``, this file) and one torchgarden process
(``digits_mlp.py --only e``), each timing its own steps with the wall clock, and prints
the medians side by side. TensorFlow's input pipeline runs on its own thread, so the
CPU clock would charge it and the wall clock is compared.

Usage:
    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu scikit-learn
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/model_garden_tf.py \
        --tf-python /tmp/tfenv/bin/python [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402


def _digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """80 % of scikit-learn's digits, stratified like torchgarden's ``train`` split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    keep = []
    for label in range(10):
        members = np.flatnonzero(y == label)
        held_out = int(round(0.2 * len(members)))
        keep.extend(rng.permutation(members)[held_out:])
    keep = np.sort(np.asarray(keep))
    return x[keep], y[keep]


def _runner(
    tf: Any, steps_per_loop: int, x: np.ndarray, y: np.ndarray, clock: Any,
    hidden: tuple[int, ...] = (128,),
) -> Any:
    """Returns ``run(num_steps) -> seconds`` for a fresh model each call."""

    def run(num_steps: int) -> float:
        keras = tf.keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((1, 8, 8)), keras.layers.Flatten(),
             *(keras.layers.Dense(h, activation="relu") for h in hidden),
             keras.layers.Dense(10)]
        )
        optimizer = keras.optimizers.Adam(learning_rate=3e-3, epsilon=1e-7)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        train_loss = keras.metrics.Mean()
        dataset = (
            tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
            .batch(64, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        )
        iterator = iter(dataset)

        def train_step(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(features, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            train_loss.update_state(loss)

        @tf.function
        def loop(iterator, num_steps):  # Orbit's use_tf_while_loop=True.
            for _ in tf.range(num_steps):
                train_step(next(iterator))

        loop(iterator, tf.constant(steps_per_loop))  # Trace (not timed).
        calls = num_steps // steps_per_loop
        start = clock()
        for _ in range(calls):
            loop(iterator, tf.constant(steps_per_loop))
        float(train_loss.result())  # Read once, as Orbit's controller does.
        return clock() - start

    return run


def _worker(args: argparse.Namespace) -> dict[str, list[float]]:
    """In the TensorFlow environment: per-step wall seconds of each repeat."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x, y = _digits()
    hidden = tuple(int(h) for h in args.hidden.split(","))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    run = _runner(tf, 100, x, y, clock, hidden)
    per_step = []
    for _ in range(args.repeats):
        per_step.append((run(args.long) - run(args.short)) / (args.long - args.short))
    return {"(f) Model Garden loop, steps_per_loop=100": per_step,
            "tensorflow": [float(v) for v in tf.__version__.split(".")[:2]]}


def _driver(args: argparse.Namespace) -> None:
    """In torchgarden's environment: alternate TensorFlow and torchgarden processes."""
    here = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(args.seed)
    results: dict[tuple[str, str], list[float]] = {}
    print("== (f) Model Garden's in-graph loop (TensorFlow) vs (e) torchgarden enable_xla")
    print(f"reproduce: cd {os.path.dirname(here)} && OMP_WAIT_POLICY=PASSIVE {sys.executable} "
          f"benchmarks/model_garden_tf.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}")
    print(f"machine: load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the start")
    common = ["--repeats", str(args.repeats), "--short", str(args.short), "--long", str(args.long)]
    for round_index in range(args.rounds):
        jobs = [(model, side) for model in args.models.split(";") for side in ("tf", "torch")]
        for model, side in rng.sample(jobs, len(jobs)):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                if side == "tf":
                    command = [args.tf_python, os.path.abspath(__file__), "--worker",
                               "--hidden", model, "--json", out.name, *common]
                else:
                    command = [sys.executable, os.path.join(here, "digits_mlp.py"), "--only", "e",
                               "--hidden", model, "--clock", "wall", "--json", out.name, *common]
                env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "TF_CPP_MIN_LOG_LEVEL": "2"}
                subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                with open(out.name, encoding="utf-8") as f:
                    values = next(v for k, v in json.load(f).items() if k.startswith("("))
            results.setdefault((model, side), []).extend(values)
            print(f"  round {round_index + 1}/{args.rounds} 64-{model.replace(',', '-')}-10 "
                  f"{side:<5} " + ", ".join(f"{v * 1e6:.1f}" for v in values) + " us/step",
                  flush=True)
    print(f"machine: load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end")
    print(f"\nsteps/s, wall clock, median over {args.rounds} rounds x {args.repeats} repeats:")
    print("| model | (f) Model Garden loop (TF) | (e) torchgarden enable_xla | (e) / (f) |")
    print("|---|---|---|---|")
    for model in args.models.split(";"):
        tf_rate = 1 / statistics.median(results[(model, "tf")])
        torch_rate = 1 / statistics.median(results[(model, "torch")])
        print(f"| 64-{model.replace(',', '-')}-10 | {tf_rate:.0f} | {torch_rate:.0f} | "
              f"{torch_rate / tf_rate:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf-python", default="", help="TensorFlow interpreter (driver)")
    parser.add_argument("--worker", action="store_true", help="time TensorFlow here")
    parser.add_argument("--models", default="128;256,256",
                        help="hidden sizes of each model, ';'-separated")
    parser.add_argument("--hidden", default="128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--short", type=int, default=1000)
    parser.add_argument("--long", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="wall")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    if args.worker:
        result = _worker(args)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f)
        return
    if not args.tf_python:
        parser.error("--tf-python PATH (a Python with tensorflow-cpu and scikit-learn) is "
                     "required; see the usage above.")
    _driver(args)


if __name__ == "__main__":
    main(sys.argv[1:])
