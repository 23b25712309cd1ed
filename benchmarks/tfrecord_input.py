"""(g) The classification input pipeline on TFRecord shards: torchgarden versus tf.data.

Issue 21, item 4: TFRecord -> JPEG decode -> Model Garden's random crop / resize / flip ->
normalize -> batch, in images per second, at 1 and 2 workers, against tf.data doing the
same work on the same files (TensorFlow in its own environment, as ``model_garden_tf.py``).

* torchgarden: ``data.tfrecord_input.build_tfrecord_loader`` with
  ``vision.classification_input.ClassificationRecord`` (Model Garden's training parser),
  ``num_workers`` DataLoader worker processes.
* tf.data: Model Garden's reader and parser as written in ``official/core/input_reader.py``
  and ``official/vision/dataloaders/classification_input.py``, in TensorFlow ops: file
  interleave, shuffle buffer, ``parse_single_example``, ``sample_distorted_bounding_box`` +
  ``decode_and_crop_jpeg`` (center crop when no crop fits), flip, bilinear resize,
  normalize, batch; ``num_parallel_calls`` = the worker count and a private thread pool of
  that many threads, so both sides get the same number of CPUs.

Both read the same shards (written here unless ``--data`` names them), with
``cycle_length`` 10, a 1000-record shuffle buffer, batches of 64 at 224x224. Each
measurement is a fresh process; per round the four contenders run in a random order; the
first batch (start-up) is not timed. The table gives the median images/s of the rounds,
their range, and CPU seconds per 1000 images (process and children: the workers' too).

Usage:
    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install 'tensorflow-cpu==2.21.*'
    .venv/bin/python benchmarks/tfrecord_input.py --tf-python /tmp/tfenv/bin/python \\
        [--rounds 5] [--images 2048] [--data /tmp/tfr_bench]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

BATCH, SIZE, CYCLE, BUFFER = 64, 224, 10, 1000
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _cpu_seconds() -> float:
    """CPU seconds of this process, its exited children and its live ones (the loader
    workers: ``/proc/<pid>/stat``, Linux)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # ppid; then utime, stime at 11, 12
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def write_data(folder: str, num_shards: int, per_shard: int) -> str:
    """ImageNet-like shards: JPEGs of 300..500 x 300..500 pixels, Model Garden's schema."""
    import numpy as np

    from torchgarden.data.tf_example import build_example
    from torchgarden.data.tfrecord import write_tfrecord
    from torchgarden.data.tfrecord_samples import encode_image

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for shard in range(num_shards):
        records = []
        for i in range(per_shard):
            h, w = (int(v) for v in rng.integers(300, 500, 2))
            y, x = np.mgrid[0:h, 0:w]
            base = np.stack([x * 255 // w, y * 255 // h, (x * y) % 255], -1)
            noise = rng.normal(0, 12, (h, w, 3))
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
            records.append(build_example({"image/encoded": encode_image(pixels),
                                          "image/class/label": (shard + i) % 1000}))
        write_tfrecord(os.path.join(folder, f"train-{shard:05d}-of-{num_shards:05d}"), records)
    return os.path.join(folder, "train-*")


def run_torchgarden(pattern: str, workers: int, images: int,
                    touch: bool = False) -> dict[str, float]:
    """Images/s of torchgarden's loader (first batch untimed); ``touch``: the consumer
    reads every batch (sums it), as a training step would."""
    import types

    import torch

    from torchgarden.data.context import InputContext
    from torchgarden.data.tfrecord_input import build_tfrecord_loader
    from torchgarden.vision.classification_input import ClassificationParser, ClassificationRecord

    torch.set_num_threads(1)
    params = types.SimpleNamespace(
        input_path=pattern, tfds_name="", is_training=True, seed=0,
        shuffle_buffer_size=BUFFER, cycle_length=CYCLE, block_length=1, drop_remainder=True,
        skip_bad_records=False, global_batch_size=BATCH, num_workers=workers,
        pin_memory=False, persistent_workers=False, prefetch_factor=None, deterministic=None,
        sharding=True)
    record = ClassificationRecord(ClassificationParser((SIZE, SIZE), is_training=True))
    loader = build_tfrecord_loader(params, record,
                                   input_context=InputContext(num_replicas=1, replica_id=0))

    def repeat():  # Epochs, as DataIterator runs them (tf.data's side repeats its files).
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            yield from loader
            epoch += 1

    def count(batch) -> int:
        if touch:
            float(batch[0].sum())
        return int(batch[0].shape[0])

    return _time_batches(repeat(), images, count)


def run_tf_data(pattern: str, workers: int, images: int,
                touch: bool = False) -> dict[str, float]:
    """Images/s of Model Garden's tf.data reader and classification parser."""
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(workers)
    tf.config.threading.set_intra_op_parallelism_threads(1)

    def parse(record):
        features = tf.io.parse_single_example(record, {
            "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
            "image/class/label": tf.io.FixedLenFeature((), tf.int64, default_value=-1)})
        encoded = features["image/encoded"]
        shape = tf.image.extract_jpeg_shape(encoded)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.08, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=10)
        top, left, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        crop = tf.image.decode_and_crop_jpeg(encoded, tf.stack([top, left, h, w]), channels=3)

        def center():
            side = tf.cast(0.875 * tf.cast(tf.minimum(shape[0], shape[1]), tf.float32),
                           tf.int32)
            window = tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])
            return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

        image = tf.cond(tf.reduce_all(tf.equal(tf.shape(crop), shape)), center, lambda: crop)
        image = tf.image.random_flip_left_right(image)
        image = tf.image.resize(image, (SIZE, SIZE), method="bilinear")
        image = (image - MEAN) / STD
        return image, features["image/class/label"]

    files = tf.data.Dataset.list_files(pattern, shuffle=True, seed=0).repeat()
    dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=CYCLE,
                               num_parallel_calls=workers, deterministic=True)
    dataset = dataset.shuffle(BUFFER, seed=0).map(parse, num_parallel_calls=workers)
    dataset = dataset.batch(BATCH, drop_remainder=True).prefetch(1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    options.autotune.enabled = False
    dataset = dataset.with_options(options)

    def count(batch) -> int:
        if touch:
            float(tf.reduce_sum(batch[0]))
        return int(batch[0].shape[0])

    return _time_batches(iter(dataset), images, count)


def _time_batches(iterator, images: int, count) -> dict[str, float]:
    count(next(iterator))  # start-up: workers, file opening, the first shuffle-buffer fill
    seen, wall, cpu = 0, time.perf_counter(), _cpu_seconds()
    while seen < images:
        seen += count(next(iterator))
    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    return {"images": seen, "wall": wall, "cpu": cpu}


def _measure(kind: str, workers: int, args: argparse.Namespace, pattern: str) -> dict:
    python = args.tf_python if kind == "tf.data" else sys.executable
    command = [python, os.path.abspath(__file__), "--worker", kind, "--workers", str(workers),
               "--images", str(args.images), "--pattern", pattern] + (
                   ["--touch"] if args.touch else [])
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src"))
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        raise SystemExit(f"{kind} x{workers} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tf-python", default="", help="a Python with TensorFlow 2.21")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--images", type=int, default=2048, help="timed images per run")
    parser.add_argument("--data", default="/tmp/tfr_bench", help="shard folder (written once)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--per-shard", type=int, default=128)
    parser.add_argument("--touch", action="store_true",
                        help="the consumer reads (sums) every batch, as a training step would")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--pattern", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run = run_tf_data if args.worker == "tf.data" else run_torchgarden
        print(json.dumps(run(args.pattern, args.workers, args.images, args.touch)))
        return
    pattern = os.path.join(args.data, "train-*")
    if not os.path.exists(os.path.join(args.data, f"train-00000-of-{args.shards:05d}")):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
        pattern = write_data(args.data, args.shards, args.per_shard)
    kinds = ["torchgarden"] + (["tf.data"] if args.tf_python else [])
    contenders = [(kind, workers) for kind in kinds for workers in (1, 2)]
    results: dict[tuple[str, int], list[dict]] = {c: [] for c in contenders}
    print(f"# {args.rounds} rounds x {len(contenders)} contenders, {args.images} timed images "
          f"each, batch {BATCH} at {SIZE}x{SIZE}{', consumer sums each batch' if args.touch else ''}"
          f"; load {os.getloadavg()[0]:.2f}")
    for _ in range(args.rounds):
        for contender in random.sample(contenders, len(contenders)):
            results[contender].append(_measure(*contender, args, pattern))
    print(f"{'pipeline':<13} {'workers':>7} {'images/s':>9} {'range':>17} {'CPU s/1k img':>13}")
    for (kind, workers), runs in results.items():
        rates = [r["images"] / r["wall"] for r in runs]
        cpu = statistics.median(1000 * r["cpu"] / r["images"] for r in runs)
        print(f"{kind:<13} {workers:>7} {statistics.median(rates):>9.1f} "
              f"{min(rates):>8.1f}-{max(rates):<8.1f} {cpu:>13.2f}")
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
