"""Adversarial table, data group: files that are missing, truncated, hostile or wrong.

Every row is exit 2 with one line naming the file (and the array or key) and the fix,
found while the data is built, before the first write.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib

import numpy as np
import pytest
from table import DIGITS, SHORT, Case, digits_npz, digits_source, npz, run_case, write

USER_TASK = '''
"""A user project whose model outputs 3 values where the labels have 1."""
import dataclasses

import torch

from torchgarden import DataConfig, ExperimentConfig, Task, TaskConfig, TrainerConfig
from torchgarden import losses, register_experiment, register_task


@dataclasses.dataclass
class WideConfig(TaskConfig):
    width: int = 3


@register_task(WideConfig)
class WideTask(Task):
    def build_model(self):
        return torch.nn.Linear(4, self.task_config.width)

    def build_inputs(self, params, input_context=None):
        x = torch.randn(32, 4)
        return [(x[i:i + 8], x[i:i + 8].sum(1, keepdim=True)) for i in range(0, 32, 8)]

    def build_losses(self, labels, model_outputs, aux_losses=None):
        return losses.MeanSquaredError()(labels, model_outputs)


@register_experiment("user/wide")
def wide():
    return ExperimentConfig(
        task=WideConfig(train_data=DataConfig(is_training=True, global_batch_size=8)),
        trainer=TrainerConfig(train_steps=4, steps_per_loop=2, summary_interval=2).override(
            {"optimizer_config": {"optimizer": {"type": "sgd"},
                                  "learning_rate": {"type": "constant"}}}),
    )
'''


def source(data) -> callable:
    """argv training digits on the npz that ``data(tmp)`` writes."""
    return lambda d, t: [*DIGITS, "--model_dir", d, *digits_source(data(t))]


def with_x(x: np.ndarray, y=None) -> callable:
    return lambda t: npz(f"{t}/data.npz", x=x, y=np.zeros(len(x), dtype=np.int64) if y is None else y)


def images(count: int = 20) -> np.ndarray:
    return np.random.default_rng(0).random((count, 1, 8, 8), dtype=np.float32)


def poisoned(value: float) -> np.ndarray:
    x = images()
    x[7, 0, 2, 2] = value
    return x


def truncated_npz(tmp: str) -> str:
    path = digits_npz(tmp)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    return path


def huge_npz(tmp: str) -> str:
    """A member whose .npy header declares 64 TiB (as a compressed bomb would)."""
    path = f"{tmp}/data.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 20, 1, 8, 1 << 21)})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(1024))
        y = io.BytesIO()
        np.save(y, np.zeros(4, dtype=np.int64))
        archive.writestr("y.npy", y.getvalue())
    return path


def object_npz(tmp: str) -> str:
    path = f"{tmp}/data.npz"
    np.savez(path, x=np.array([{"a": 1}, None], dtype=object), y=np.zeros(2))
    return path


def png(width: int, height: int, pixels: bytes | None = None) -> bytes:
    """A grayscale PNG; ``pixels`` None makes a header-only bomb (no real data)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    raw = pixels if pixels is not None else b"\x00" * 16
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def image_folder(tmp: str, bad: bytes, name: str = "bad.png") -> str:
    root = f"{tmp}/images"
    for label in ("cat", "dog"):
        write(f"{root}/{label}/ok.png", png(8, 8, b"".join(b"\x00" + bytes(8) for _ in range(8))))
    write(f"{root}/dog/{name}", bad)
    return root


def folder(root) -> callable:
    return lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                         f"{SHORT},task.model.num_classes=2,task.train_data.source=folder,"
                         f"task.train_data.input_path={root(t)},task.train_data.global_batch_size=2"]


CASES = [
    Case("missing_npz_path", source(lambda t: f"{t}/missing.npz"),
         ("missing.npz", "task.train_data.input_path")),
    Case("input_path_glob_matching_nothing", source(lambda t: f"{t}/shards-*.npz"),
         ("task.train_data.input_path", "shards-*.npz", "does not exist")),
    Case("missing_image_folder",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},task.train_data.source=folder,"
                       f"task.train_data.input_path={t}/no_such_folder"],
         ("no_such_folder", "task.train_data.input_path")),
    Case("empty_image_folder",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},task.train_data.source=folder,task.train_data.input_path={t}"],
         ("empty_class", "holds no images", ".png"),
         setup=lambda d, t: os.makedirs(f"{t}/empty_class", exist_ok=True)),
    Case("empty_npz", source(lambda t: digits_npz(t, x_shape=(0, 1, 8, 8), labels=[])),
         ("data.npz", "empty")),
    Case("label_out_of_range", source(lambda t: digits_npz(t, labels=[12] + [1] * 19)),
         ("data.npz", "[1, 12]", "task.model.num_classes", "[0, 9]"), "existing"),
    Case("negative_label", source(lambda t: digits_npz(t, labels=[-1] + [1] * 19)),
         ("data.npz", "[-1, 1]")),
    Case("image_shape_vs_input_size", source(lambda t: digits_npz(t, x_shape=(20, 3, 8, 8))),
         ("data.npz", "[3, 8, 8]", "task.model.input_size=[8, 8, 3]")),
    Case("npz_without_the_image_key",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(npz(f"{t}/data.npz", x=np.zeros((4, 8, 8)), y=np.zeros(4)),
                                      ",task.train_data.x_key=images")],
         ("data.npz", "images")),
    Case("npz_key_typo",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(npz(f"{t}/data.npz", x=np.zeros((4, 8, 8)), y=np.zeros(4)),
                                      ",task.train_data.y_key=labels,task.train_data.x_key=x")],
         ("y_key='labels'", "available keys: ['x', 'y']")),
    Case("batch_larger_than_dataset",
         lambda d, t: [*DIGITS, "--model_dir", d,
                       *digits_source(digits_npz(t), ",task.train_data.global_batch_size=64")],
         ("task.train_data yields no batch", "20 examples", "data.npz", "global_batch_size=64",
          "drop_remainder=false")),
    Case("nan_in_the_images", source(with_x(poisoned(np.nan))),
         ("data.npz", "NaN or inf", "1 example(s)", "index 7")),
    Case("inf_in_the_images", source(with_x(poisoned(np.inf))), ("data.npz", "index 7")),
    Case("npz_truncated", source(truncated_npz),
         ("data.npz", "not a readable .npz archive", "truncated")),
    Case("npz_is_a_text_file", source(lambda t: write(f"{t}/data.npz", "x,y\n1,2\n")),
         ("data.npz", "not a readable .npz archive")),
    Case("npz_is_a_single_npy", source(lambda t: _npy(f"{t}/data.npz")),
         ("data.npz", "one .npy array")),
    Case("npz_declaring_64_tib", source(huge_npz),
         ("data.npz", "array 'x'", "GiB decoded", "half of this machine's memory")),
    Case("npz_of_python_objects", source(object_npz),
         ("data.npz", "Python objects", "never unpickles")),
    Case("npz_of_strings", source(with_x(np.array([["a"] * 64] * 20).reshape(20, 1, 8, 8))),
         ("data.npz", "array 'x' has dtype <U1", "numbers")),
    Case("npz_of_complex_numbers", source(with_x(images().astype(np.complex64))),
         ("data.npz", "complex64")),
    Case("one_hot_labels", source(with_x(images(), np.eye(10)[np.arange(20) % 10])),
         ("data.npz", "labels have shape (20, 10)", "argmax")),
    Case("column_labels", source(with_x(images(), np.zeros((20, 1), dtype=np.int64))),
         ("labels have shape (20, 1)", "reshape(-1)")),
    Case("fractional_labels", source(with_x(images(), np.full(20, 0.5))),
         ("data.npz", "label 0.5 at index 0", "whole number")),
    Case("string_labels", source(with_x(images(), np.array(["cat"] * 20))),
         ("data.npz", "array 'y' has dtype <U3", "integers")),
    Case("fewer_labels_than_images", source(with_x(images(), np.zeros(19, dtype=np.int64))),
         ("20 images but 19 labels",)),
    Case("second_input_path_is_read",
         lambda d, t: [*DIGITS, "--model_dir", d, *digits_source(
             digits_npz(t) + "," + digits_npz(t, labels=[11] * 20, name="more.npz"))],
         ("more.npz", "[11, 11]", "task.model.num_classes")),
    Case("png_decompression_bomb", folder(lambda t: image_folder(t, png(100_000, 100_000))),
         ("bad.png", "declares more pixels than are decoded safely", "10000000000")),
    Case("png_just_above_the_limit", folder(lambda t: image_folder(t, png(10_000, 10_000))),
         ("bad.png", "declares 10000x10000 pixels", "decompression bomb")),
    Case("truncated_png", folder(lambda t: image_folder(t, png(8, 8, bytes(72))[:40])),
         ("bad.png", "cannot decode image")),
    Case("text_file_named_png", folder(lambda t: image_folder(t, b"not an image")),
         ("bad.png", "cannot decode image")),
    Case("folders_with_other_classes",
         lambda d, t: [*DIGITS, "--model_dir", d, "--params_override",
                       f"{SHORT},task.model.num_classes=3,task.train_data.source=folder,"
                       f"task.train_data.input_path={image_folder(t, b'', 'x.txt')},"
                       f"{_other_folder(t)},task.train_data.global_batch_size=2"],
         ("class folders", "differ")),
    Case("broken_validation_data",
         lambda d, t: [*DIGITS[:-1], "train_and_eval", "--model_dir", d, "--params_override",
                       f"{SHORT},task.validation_data.source=npz,"
                       f"task.validation_data.input_path={with_x(poisoned(np.nan))(t)}"],
         ("data.npz", "NaN or inf")),
    Case("user_model_output_width_vs_loss",
         lambda d, t: ["train", "--import", write(f"{t}/user_wide.py", USER_TASK),
                       "--experiment", "user/wide", "--mode", "train", "--model_dir", d],
         ("MeanSquaredError", "(8, 1)", "(8, 3)")),
]


def _npy(path: str) -> str:
    with open(path, "wb") as f:
        np.save(f, images())
    return path


def _other_folder(tmp: str) -> str:
    root = f"{tmp}/more_images"
    for label in ("bird", "cat", "dog"):
        write(f"{root}/{label}/ok.png", png(8, 8, b"".join(b"\x00" + bytes(8) for _ in range(8))))
    return root


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_data_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))
