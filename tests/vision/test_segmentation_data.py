"""SegmentationFolderDataset: pairing, decoding, augmentation and one-line bad-data errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from torchgarden.vision.augment import Augmentation
from torchgarden.vision.segmentation_data import SegmentationFolderDataset


def _write_pair(root: Path, stem: str, mask: np.ndarray, *, image_size=None, ext=".png") -> None:
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    height, width = image_size or mask.shape
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[..., 0] = 255  # pure red
    Image.fromarray(pixels).save(root / "images" / f"{stem}{ext}")
    Image.fromarray(mask.astype(np.uint8)).save(root / "masks" / f"{stem}.png")


def _dataset(root: Path, **kwargs) -> SegmentationFolderDataset:
    return SegmentationFolderDataset(root / "images", root / "masks", **kwargs)


def test_reads_pairs_by_stem_in_sorted_order(tmp_path):
    _write_pair(tmp_path, "b", np.full((4, 6), 2))
    _write_pair(tmp_path, "a", np.array([[0, 1, 255, 3]] * 4), ext=".jpg")
    ds = _dataset(tmp_path, num_classes=4)
    assert [p[0].name for p in ds.pairs] == ["a.jpg", "b.png"]
    image, mask = ds[0]
    assert image.dtype == torch.float32 and image.shape == (3, 4, 4)
    assert mask.dtype == torch.int64 and mask[0].tolist() == [0, 1, 255, 3]
    image, mask = ds[1]
    assert image.shape == (3, 4, 6) and image[0].eq(1).all() and image[1:].eq(0).all()
    assert mask.eq(2).all()


def test_palette_masks_and_resizing(tmp_path):
    _write_pair(tmp_path, "a", np.zeros((2, 2)))
    palette = Image.fromarray(np.array([[0, 1], [2, 3]], dtype=np.uint8), mode="P")
    palette.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    palette.save(tmp_path / "masks" / "a.png")
    _, mask = _dataset(tmp_path, num_classes=4, image_size=(4, 4))[0]
    assert mask.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]


def test_augment_runs_on_every_access_and_preload_keeps_decoded_pairs(tmp_path):
    mask = np.zeros((8, 8))
    mask[:, :2] = 1
    _write_pair(tmp_path, "a", mask)
    ds = _dataset(
        tmp_path, num_classes=2, preload=True,
        augment=Augmentation(horizontal_flip=True, mean=[0.5] * 3, std=[0.5] * 3),
    )
    (tmp_path / "images" / "a.png").unlink()  # preloaded: the file is no longer read
    torch.manual_seed(0)
    columns = set()
    for _ in range(12):
        image, out = ds[0]
        assert image[0].eq(1).all() and image[1].eq(-1).all()  # normalized red
        columns.add(tuple(out[0].tolist()))
    assert columns == {(1, 1, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 1, 1)}


def test_missing_mask_names_the_image(tmp_path):
    _write_pair(tmp_path, "a", np.zeros((4, 4)))
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "images" / "lonely.png")
    with pytest.raises(FileNotFoundError, match=r"no mask for image '.*lonely\.png'.*masks/lonely\.png"):
        _dataset(tmp_path)


def test_size_mismatch_names_both_files(tmp_path):
    _write_pair(tmp_path, "a", np.zeros((4, 4)), image_size=(4, 5))
    ds = _dataset(tmp_path)  # lazily checked: construction succeeds
    with pytest.raises(ValueError, match=r"mask '.*masks/a\.png' is 4x4 \(HxW\) but image '.*a\.png' is 4x5"):
        ds[0]
    with pytest.raises(ValueError, match="is 4x4"):
        _dataset(tmp_path, preload=True)  # eagerly checked


def test_out_of_range_mask_values_name_the_file_and_ids(tmp_path):
    _write_pair(tmp_path, "a", np.array([[0, 1, 255, 7], [9, 7, 0, 0]]))
    assert _dataset(tmp_path)[0][1].max() == 255  # no num_classes: not checked
    with pytest.raises(ValueError, match=r"mask '.*a\.png' has class ids \[7, 9\] outside 0\.\.3 \(num_classes=4\)"):
        _dataset(tmp_path, num_classes=4)[0]
    _dataset(tmp_path, num_classes=10)[0]  # 255 is the ignore label, 7 and 9 are valid


def test_unreadable_and_multichannel_files(tmp_path):
    _write_pair(tmp_path, "a", np.zeros((4, 4)))
    (tmp_path / "images" / "a.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"cannot read image '.*images/a\.png'"):
        _dataset(tmp_path)[0]
    _write_pair(tmp_path, "a", np.zeros((4, 4)))
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "masks" / "a.png")
    with pytest.raises(ValueError, match=r"mask '.*masks/a\.png' has mode RGB with 3 channels"):
        _dataset(tmp_path)[0]


def test_missing_or_empty_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="images_dir is not a directory"):
        SegmentationFolderDataset(tmp_path / "nope", tmp_path)
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    with pytest.raises(ValueError, match="holds no images"):
        _dataset(tmp_path)
    with pytest.raises(ValueError, match="image_size"):
        _dataset(tmp_path, image_size=(0, 3))
