"""Checks of data files before training reads them: archives, declared sizes, values.

Each check raises ``ValueError`` with one line naming the file (and array), what was
expected and how to fix it, so a bad file is reported before the first step, not as a
NaN loss or a crash deep in a loader.
"""

from __future__ import annotations

import glob
import os
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "check_class_labels",
    "check_features",
    "expand_input_paths",
    "memory_limit_bytes",
    "read_npz_array",
]


def memory_limit_bytes() -> int:
    """The most one array may take when decoded: half of the machine's physical memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def expand_input_paths(input_path: str | Sequence[str], key: str) -> list[str]:
    """``DataConfig.input_path`` as a list of existing paths: commas split a string, globs
    expand (sorted).

    Raises:
        FileNotFoundError: A path or pattern matches nothing (named, with ``key``).
        ValueError: ``input_path`` is empty.
    """
    items = input_path.split(",") if isinstance(input_path, str) else list(input_path)
    items = [item.strip() for item in items if item.strip()]
    if not items:
        raise ValueError(f"{key} is empty; give a file or folder.")
    paths: list[str] = []
    for item in items:
        matches = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        if not matches or not os.path.exists(matches[0]):
            raise FileNotFoundError(f"{key}: {item!r} does not exist.")
        paths.extend(matches)
    return paths


def read_npz_array(archive: Any, name: str, path: str) -> np.ndarray:
    """Reads one array of an open ``np.load`` archive after checking its declared size.

    The ``.npy`` header states shape and dtype; an array that would decode to more than
    :func:`memory_limit_bytes` (a compressed archive can declare terabytes) is refused
    before it is decoded, and a member shorter than its header says is truncated.

    Raises:
        ValueError: Too large, truncated, or holding Python objects.
    """
    member = name + ".npy"
    try:
        info = archive.zip.getinfo(member)
        with archive.zip.open(member) as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            header = f.tell()
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"{path!r}: array {name!r} is unreadable ({e}).") from None
    if dtype.kind not in "biufc" and not dtype.hasobject:
        raise ValueError(
            f"{path!r}: array {name!r} has dtype {dtype}; expected numbers (class ids must "
            "be integers, images floats or uint8)."
        )
    if dtype.hasobject:
        raise ValueError(
            f"{path!r}: array {name!r} holds Python objects (dtype {dtype}); torchgarden never "
            "unpickles data files: save numeric arrays (e.g. x.astype('float32'))."
        )
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    limit = memory_limit_bytes()
    if nbytes > limit:
        raise ValueError(
            f"{path!r}: array {name!r} declares shape {tuple(shape)} of {dtype}, "
            f"{nbytes / 2**30:.1f} GiB decoded, more than the {limit / 2**30:.1f} GiB allowed "
            "(half of this machine's memory); split the data or use a folder source."
        )
    if info.file_size < header + nbytes:
        raise ValueError(
            f"{path!r}: array {name!r} is truncated ({info.file_size} bytes where its header "
            f"promises {header + nbytes})."
        )
    try:
        return np.ascontiguousarray(archive[name])
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"{path!r}: array {name!r} is unreadable ({e}).") from None


def check_features(x: np.ndarray, where: str, name: str = "x") -> None:
    """Numbers only (no strings, objects or complex values) and no NaN or inf.

    Raises:
        ValueError: Naming ``where``, the array and the first bad example.
    """
    if x.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: {name} has dtype {x.dtype}; expected numbers (float, int or bool)."
        )
    if x.dtype.kind == "f" and x.size:
        bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1) if x.ndim else ~np.isfinite(x)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{where}: {name} holds NaN or inf in {int(bad.sum())} example(s), the first "
                f"at index {first}; clean the data before training on it."
            )


def check_class_labels(y: np.ndarray, num_examples: int, num_classes: int, where: str) -> np.ndarray:
    """Labels must be one integer class id in ``[0, num_classes)`` per example.

    Float labels are accepted only when every value is a whole number.

    Returns:
        The labels as int64.

    Raises:
        ValueError: Naming ``where``, what is wrong and the fix.
    """
    if y.ndim != 1:
        hint = " (one-hot? save y.argmax(1))" if y.ndim == 2 and y.shape[1] > 1 else (
            " (save y.reshape(-1))" if y.ndim == 2 else "")
        raise ValueError(
            f"{where}: labels have shape {tuple(y.shape)}; expected ({num_examples},): one "
            f"integer class id per example{hint}."
        )
    if len(y) != num_examples:
        raise ValueError(
            f"{where}: {num_examples} images but {len(y)} labels; each image needs one label."
        )
    if y.dtype.kind == "f":
        whole = np.isfinite(y) & (y == np.round(y))
        if not whole.all():
            first = int(np.flatnonzero(~whole)[0])
            raise ValueError(
                f"{where}: label {y[first].item()!r} at index {first} is not a whole number; "
                "labels are integer class ids."
            )
    elif y.dtype.kind not in "biu":
        raise ValueError(f"{where}: labels have dtype {y.dtype}; expected integer class ids.")
    y = y.astype(np.int64)
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(
            f"{where}: labels span [{int(y.min())}, {int(y.max())}] but "
            f"task.model.num_classes is {num_classes}; labels must be in "
            f"[0, {num_classes - 1}]."
        )
    return y
