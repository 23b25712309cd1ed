"""Small in-memory datasets: tensors, scikit-learn digits, `.npz` files, a toy regression."""

from __future__ import annotations

import functools
import importlib.util
import os
import zipfile

import numpy as np
import torch
from torch.utils.data import Dataset

from torchgarden.data.image_folder import ImageFolderDataset
from torchgarden.data.validation import read_npz_array
from torchgarden.utils.suggest import did_you_mean

__all__ = [
    "ArrayDataset",
    "ImageFolderDataset",
    "load_digits_arrays",
    "load_npz_arrays",
    "make_toy_regression",
]

_SPLITS = ("train", "validation")


class ArrayDataset(Dataset):
    """A dataset of equally long tensors; example `i` is `tuple(t[i] for t in tensors)`.

    `build_dataloader` recognises it and, without workers, batches it by one
    indexing gather per tensor instead of per-example `__getitem__` + collate.

    Args:
        *tensors: One or more tensors sharing their first dimension.

    Raises:
        ValueError: If no tensor is given or the first dimensions differ.

    Example:
        >>> ds = ArrayDataset(torch.zeros(4, 3), torch.arange(4))
        >>> len(ds), ds[1][1].item()
        (4, 1)
    """

    def __init__(self, *tensors: torch.Tensor) -> None:
        if not tensors:
            raise ValueError("ArrayDataset needs at least one tensor, got none.")
        for i, tensor in enumerate(tensors):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(
                    f"ArrayDataset tensor {i} must be a torch.Tensor, got {type(tensor).__name__}; "
                    "wrap numpy arrays with torch.from_numpy."
                )
            if tensor.dim() == 0:
                raise ValueError(
                    f"ArrayDataset tensor {i} must have a first dimension, got a scalar."
                )
        lengths = {t.shape[0] for t in tensors}
        if len(lengths) != 1:
            shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
            raise ValueError(
                f"ArrayDataset tensors must share their first dimension, got shapes {shapes}."
            )
        self.tensors: tuple[torch.Tensor, ...] = tuple(tensors)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


def _check_split(split: str) -> None:
    if split not in _SPLITS:
        hint = did_you_mean(split, _SPLITS, cutoff=0.0, style="clause")
        raise ValueError(f"split must be one of {list(_SPLITS)}, got {split!r}{hint}")


def load_digits_arrays(
    split: str, *, validation_fraction: float = 0.2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loads scikit-learn's bundled 8x8 handwritten digits (1,797 images, offline).

    The split is stratified: within each class a seeded permutation sends
    `round(validation_fraction * class_count)` images to validation and the rest
    to train, so the two splits are disjoint and deterministic for a seed.
    Examples keep the dataset's original order inside each split.

    Args:
        split: `"train"` or `"validation"`.
        validation_fraction: Share of each class held out, in (0, 1). Defaults to 0.2.
        seed: Seed of the split permutation. Defaults to 0.

    Returns:
        `(x, y)`: `x` float32 `[N, 1, 8, 8]` scaled to [0, 1]; `y` int64 `[N]` in 0..9.

    Raises:
        ValueError: On an unknown `split` or a `validation_fraction` outside (0, 1).
        ImportError: If scikit-learn is not installed.
    """
    _check_split(split)
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            f"validation_fraction must be in (0, 1), got {validation_fraction}; try 0.2."
        )
    images, labels = _digits_file()
    rng = np.random.default_rng(seed)
    is_validation = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        held_out = int(round(validation_fraction * len(members)))
        is_validation[rng.permutation(members)[:held_out]] = True
    keep = is_validation if split == "validation" else ~is_validation
    x = torch.from_numpy(images[keep] / 16.0).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels[keep]).contiguous()
    return x, y


@functools.cache
def _digits_file() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``digits.csv.gz`` read as ``sklearn.datasets.load_digits`` reads it,
    without importing scikit-learn (and with it SciPy: about 0.9 s of every start-up)."""
    spec = importlib.util.find_spec("sklearn")  # Finds the package, does not import it.
    path = (os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
            if spec is not None and spec.submodule_search_locations else "")
    if not os.path.isfile(path):
        raise ImportError("load_digits_arrays reads the digits file of scikit-learn; install "
                          "it with pip install 'torchgarden[digits]'.")
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8).astype(np.float32), data[:, -1].astype(np.int64)


def load_npz_arrays(
    path: str | os.PathLike[str], *, x_key: str = "x", y_key: str = "y"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loads a features/labels pair from a NumPy `.npz` archive.

    Nothing is unpickled; each array's declared size is checked before it is decoded
    (see `data.validation.read_npz_array`), so a truncated, compressed-bomb or
    object-holding archive is refused with one line naming the file.

    Args:
        path: The `.npz` file.
        x_key: Array name of the features. Defaults to `"x"`.
        y_key: Array name of the labels. Defaults to `"y"`.

    Returns:
        `(x, y)` as tensors with the stored dtypes.

    Raises:
        FileNotFoundError: If `path` does not exist.
        KeyError: If a key is missing (the message lists the available keys).
        ValueError: If the file is no readable `.npz` archive, or an array is too large,
            truncated or holds Python objects.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"npz file not found: {os.fspath(path)!r}.")
    where = os.fspath(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(
            f"{where!r} is not a readable .npz archive (truncated, or another kind of file: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}); torchgarden reads "
            "numeric arrays saved with numpy.savez."
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{where!r} holds one .npy array, not an .npz archive of x and y.")
    with archive:
        available = sorted(archive.files)
        arrays = []
        for name, key in (("x_key", x_key), ("y_key", y_key)):
            if key not in archive.files:
                hint = did_you_mean(key, available, style="clause") or "."
                raise KeyError(f"{name}={key!r} not in {where!r}; available keys: {available}{hint}")
            arrays.append(torch.from_numpy(read_npz_array(archive, key, where)))
    return arrays[0], arrays[1]


def make_toy_regression(
    num_examples: int = 256,
    in_features: int = 8,
    out_features: int = 1,
    noise: float = 0.01,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples `y = x @ w + b + noise` from a fixed random linear map.

    The map `(w, b)` and the samples are all drawn from one generator seeded
    with `seed`, so equal arguments give bit-identical tensors.

    Args:
        num_examples: Rows to sample. Defaults to 256.
        in_features: Width of `x`. Defaults to 8.
        out_features: Width of `y`. Defaults to 1.
        noise: Standard deviation of the Gaussian noise on `y`. Defaults to 0.01.
        seed: Generator seed. Defaults to 0.

    Returns:
        `(x, y)`: float32 `[num_examples, in_features]` and `[num_examples, out_features]`.

    Raises:
        ValueError: On a negative size or noise.
    """
    for name, value in (
        ("num_examples", num_examples),
        ("in_features", in_features),
        ("out_features", out_features),
        ("noise", noise),
    ):
        if value < 0:
            raise ValueError(f"make_toy_regression {name} must be >= 0, got {value}.")
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(in_features, out_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    x = torch.randn(num_examples, in_features, generator=generator)
    y = x @ weight + bias + noise * torch.randn(num_examples, out_features, generator=generator)
    return x, y
