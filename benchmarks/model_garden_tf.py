"""Contender (f): Model Garden's in-graph training loop on the digits MLP, in TensorFlow.

Model Garden's trainers (Orbit ``StandardTrainer`` with ``use_tf_function`` and
``use_tf_while_loop``) run ``steps_per_loop`` steps inside one ``tf.function``:
``for _ in tf.range(num_steps): train_step(next(iterator))``. This script reproduces
that loop with Keras on the same workload as ``digits_mlp.py`` (scikit-learn's 8×8
digits, 80 % split, Flatten-Dense(128, relu)-Dense(10), Adam(3e-3, epsilon=1e-7),
batch 64, one thread), so torchgarden's compiled path can be compared with it on the
same machine. It needs TensorFlow, which is not a torchgarden dependency: run it with
an interpreter from a separate environment.

Usage:
    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu scikit-learn
    /tmp/tfenv/bin/python benchmarks/model_garden_tf.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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
    tf: Any, steps_per_loop: int, x: np.ndarray, y: np.ndarray, clock: Any
) -> Any:
    """Returns ``run(num_steps) -> seconds`` for a fresh model each call."""

    def run(num_steps: int) -> float:
        keras = tf.keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((1, 8, 8)), keras.layers.Flatten(),
             keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)]
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


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--short", type=int, default=2000)
    parser.add_argument("--long", type=int, default=6000)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: process time (all threads, tf.data's included); wall")
    args = parser.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("== (f) Model Garden's in-graph loop (Orbit tf.range) in TensorFlow, digits MLP")
    print(f"tensorflow {tf.__version__}, keras {tf.keras.__version__}, 1 thread")
    print(f"reproduce: cd {here} && OMP_WAIT_POLICY=PASSIVE {sys.executable} "
          f"benchmarks/model_garden_tf.py {' '.join(argv or [])}".rstrip(), flush=True)
    x, y = _digits()
    contenders = {
        "(f) Model Garden loop, steps_per_loop=100": _runner(tf, 100, x, y, clock),
        "(f) tf.function step, steps_per_loop=1": _runner(tf, 1, x, y, clock),
    }
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for repeat in range(args.repeats):
        for name, run in contenders.items():
            t_short, t_long = run(args.short), run(args.long)
            per_step = (t_long - t_short) / (args.long - args.short)
            results[name].append(per_step)
            print(f"  repeat {repeat + 1}/{args.repeats} {name:<42} {per_step * 1e6:8.1f} us/step",
                  flush=True)
    rates = {name: 1.0 / statistics.median(values) for name, values in results.items()}
    print()
    print(f"steps/s ({args.clock} clock), median of {args.repeats}:")
    print("| loop | steps/s | ms/step |")
    print("|---|---|---|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:.0f} | {1e3 / rate:.3f} |")
    return rates


if __name__ == "__main__":
    main(sys.argv[1:])
