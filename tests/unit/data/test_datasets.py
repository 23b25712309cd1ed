from __future__ import annotations

import numpy as np
import pytest
import torch

from torchgarden.data import ArrayDataset, load_digits_arrays, load_npz_arrays, make_toy_regression


def test_array_dataset_indexes_every_tensor():
    ds = ArrayDataset(torch.arange(6).reshape(3, 2), torch.tensor([7, 8, 9]))
    x, y = ds[2]
    assert len(ds) == 3 and x.tolist() == [4, 5] and y.item() == 9
    assert len(ds.tensors) == 2


def test_array_dataset_rejects_mismatched_lengths_naming_shapes():
    with pytest.raises(ValueError, match=r"shapes \(3, 2\), \(4,\)"):
        ArrayDataset(torch.zeros(3, 2), torch.zeros(4))


def test_digits_splits_are_disjoint_stratified_and_deterministic():
    x_train, y_train = load_digits_arrays("train")
    x_val, y_val = load_digits_arrays("validation")
    assert x_train.shape[0] + x_val.shape[0] == 1797
    assert x_val.shape[0] == 359  # round(0.2 * class count) summed over the ten classes
    counts = torch.bincount(y_val, minlength=10) + torch.bincount(y_train, minlength=10)
    assert torch.equal(torch.bincount(y_val), torch.round(0.2 * counts.double()).long())
    assert x_train.shape[1:] == (1, 8, 8) and x_train.dtype == torch.float32
    assert y_train.dtype == torch.int64 and sorted(y_val.unique().tolist()) == list(range(10))
    assert float(x_train.min()) == 0.0 and float(x_train.max()) == 1.0
    again, _ = load_digits_arrays("validation")
    assert torch.equal(again, x_val)
    other, _ = load_digits_arrays("validation", seed=1)
    assert not torch.equal(other, x_val)
    # No validation image is also a training image (the raw digits hold few duplicates).
    train_rows = {tuple(r) for r in x_train.flatten(1).tolist()}
    overlap = sum(tuple(r) in train_rows for r in x_val.flatten(1).tolist())
    assert overlap < 5


def test_digits_unknown_split_suggests_closest():
    with pytest.raises(ValueError, match="did you mean 'validation'"):
        load_digits_arrays("valid")


def test_npz_round_trip(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.ones((3, 2), np.float32), labels=np.arange(3))
    x, y = load_npz_arrays(path, y_key="labels")
    assert x.shape == (3, 2) and y.tolist() == [0, 1, 2]


def test_npz_missing_file_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_npz_arrays(tmp_path / "nope.npz")


def test_npz_missing_key_lists_available_keys(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.ones(2), label=np.ones(2))
    with pytest.raises(KeyError, match=r"y_key='y' not in .*available keys: \['label', 'x'\]"):
        load_npz_arrays(path)


def test_toy_regression_is_seeded_and_nearly_linear():
    x, y = make_toy_regression(num_examples=64, in_features=3, out_features=2, noise=0.0, seed=4)
    x2, y2 = make_toy_regression(num_examples=64, in_features=3, out_features=2, noise=0.0, seed=4)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x.shape == (64, 3) and y.shape == (64, 2)
    design = torch.cat([x, torch.ones(64, 1)], dim=1)
    solution = torch.linalg.lstsq(design, y).solution
    assert torch.allclose(design @ solution, y, atol=1e-4)
