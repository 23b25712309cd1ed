from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from torchgarden.data import ArrayDataset, ImageFolderDataset


def _write(path, value: int, size=(4, 6)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[0], size[1], 3), value, np.uint8)).save(path)


@pytest.fixture
def folder(tmp_path):
    _write(tmp_path / "dog" / "b.png", 255)
    _write(tmp_path / "dog" / "a.png", 0)
    _write(tmp_path / "cat" / "x.png", 51)
    (tmp_path / "cat" / "notes.txt").write_text("ignored")
    return tmp_path


def test_labels_follow_sorted_class_names_and_pixels_scale_to_unit(folder):
    ds = ImageFolderDataset(folder)
    assert ds.classes == ["cat", "dog"] and len(ds) == 3
    labels = [ds[i][1].item() for i in range(3)]
    assert labels == [0, 1, 1]
    image, _ = ds[0]
    assert image.shape == (3, 4, 6) and image.dtype == torch.float32
    assert torch.allclose(image, torch.full_like(image, 0.2))
    assert ds[1][0].max().item() == 0.0 and ds[2][0].min().item() == 1.0  # a.png before b.png


def test_resize_grayscale_and_to_arrays(folder):
    ds = ImageFolderDataset(folder, image_size=(2, 3), grayscale=True)
    x, y = ds.to_arrays()
    assert x.shape == (3, 1, 2, 3) and y.tolist() == [0, 1, 1]
    assert len(ArrayDataset(x, y)) == 3


def test_transform_and_class_subset(folder):
    ds = ImageFolderDataset(folder, class_names=["dog"], transform=lambda t: t * 2)
    assert ds.classes == ["dog"] and len(ds) == 2 and ds[1][0].max().item() == 2.0


def test_missing_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ImageFolderDataset(tmp_path / "missing")


def test_no_class_folders(tmp_path):
    with pytest.raises(ValueError, match="no class folders"):
        ImageFolderDataset(tmp_path)


def test_empty_class_folder_is_named(folder):
    (folder / "emu").mkdir()
    with pytest.raises(ValueError, match="emu.*holds no images"):
        ImageFolderDataset(folder)


def test_unknown_class_name_suggests_closest(folder):
    with pytest.raises(FileNotFoundError, match="did you mean 'dog'"):
        ImageFolderDataset(folder, class_names=["dgo"])


def test_unreadable_image_names_the_file(folder):
    (folder / "cat" / "broken.png").write_bytes(b"not a png")
    ds = ImageFolderDataset(folder)
    with pytest.raises(ValueError, match="cannot decode image .*broken.png"):
        ds[0]
