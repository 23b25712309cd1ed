"""The shapes data generator: files, COCO consistency, determinism, caching, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils

from torchgarden.vision.shapes import (
    SHAPE_NAMES,
    default_data_root,
    draw_shapes_image,
    generate_shapes_dataset,
    shapes_dataset_root,
)

# pycocotools' decode under NumPy 2 warns about __array__(copy=...); not our code.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

SMALL = {"num_train": 6, "num_validation": 3, "image_size": 64, "seed": 3}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shapes") / "data"
    generate_shapes_dataset(root, **SMALL)
    return root


def test_writes_images_masks_annotations_and_done(dataset):
    for split, count in (("train", 6), ("validation", 3)):
        images = sorted(p.name for p in (dataset / split / "images").iterdir())
        masks = sorted(p.name for p in (dataset / split / "masks").iterdir())
        assert images == masks == [f"{i:06d}.png" for i in range(count)]
        with Image.open(dataset / split / "images" / "000000.png") as image:
            assert (image.mode, image.size) == ("RGB", (64, 64))
        with Image.open(dataset / split / "masks" / "000000.png") as mask:
            assert (mask.mode, mask.size) == ("L", (64, 64))
    done = json.loads((dataset / "DONE").read_text())
    assert done["num_train"] == 6 and done["seed"] == 3 and done["version"] == "shapes-v1"


def test_coco_annotations_match_the_masks(dataset):
    coco = json.loads((dataset / "train" / "annotations.json").read_text())
    assert coco["categories"] == [
        {"id": 1, "name": "rectangle"}, {"id": 2, "name": "ellipse"}, {"id": 3, "name": "triangle"}
    ]
    assert [im["id"] for im in coco["images"]] == list(range(1, 7))
    assert coco["images"][0] == {"id": 1, "file_name": "000000.png", "height": 64, "width": 64}
    ids = [a["id"] for a in coco["annotations"]]
    assert ids == list(range(1, len(ids) + 1))
    for image_info in coco["images"]:
        class_mask = np.array(Image.open(dataset / "train" / "masks" / image_info["file_name"]))
        rebuilt = np.zeros_like(class_mask)
        anns = [a for a in coco["annotations"] if a["image_id"] == image_info["id"]]
        assert anns, "every image has at least one visible object"
        for ann in anns:
            rle = dict(ann["segmentation"], counts=ann["segmentation"]["counts"].encode())
            visible = mask_utils.decode(rle).astype(bool)
            assert ann["area"] == int(visible.sum()) > 0
            assert ann["iscrowd"] == 0 and 1 <= ann["category_id"] <= 3
            rows, cols = np.flatnonzero(visible.any(1)), np.flatnonzero(visible.any(0))
            assert ann["bbox"] == [cols[0], rows[0], cols[-1] - cols[0] + 1, rows[-1] - rows[0] + 1]
            assert not rebuilt[visible].any(), "visible instance masks do not overlap"
            rebuilt[visible] = ann["category_id"]
        np.testing.assert_array_equal(rebuilt, class_mask)


def test_same_arguments_give_identical_bytes_and_splits_differ(tmp_path, dataset):
    other = generate_shapes_dataset(tmp_path / "again", **SMALL)
    for split in ("train", "validation"):
        for sub in ("images", "masks"):
            for path in sorted((dataset / split / sub).iterdir()):
                assert path.read_bytes() == (Path(other[split]) / sub / path.name).read_bytes()
    first_train = (dataset / "train" / "images" / "000000.png").read_bytes()
    first_val = (dataset / "validation" / "images" / "000000.png").read_bytes()
    assert first_train != first_val
    reseeded = generate_shapes_dataset(tmp_path / "seed4", **{**SMALL, "seed": 4})
    assert (Path(reseeded["train"]) / "images" / "000000.png").read_bytes() != first_train


def test_second_call_skips_work_and_mismatch_is_an_error(tmp_path):
    root = tmp_path / "data"
    dirs = generate_shapes_dataset(root, num_train=2, num_validation=1)
    assert dirs == {"train": str(root / "train"), "validation": str(root / "validation")}
    marker = root / "train" / "images" / "000000.png"
    marker.write_bytes(b"left alone")
    generate_shapes_dataset(root, num_train=2, num_validation=1)
    assert marker.read_bytes() == b"left alone"
    with pytest.raises(ValueError, match=r"DONE.*num_train"):
        generate_shapes_dataset(root, num_train=3, num_validation=1)
    assert [p.name for p in tmp_path.iterdir()] == ["data"], "no staging directory left behind"


def test_refuses_a_foreign_non_empty_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match="not a generated shapes dataset"):
        generate_shapes_dataset(tmp_path, num_train=1, num_validation=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 7}, r"num_classes must be in 1\.\.6"),
        ({"num_classes": 0}, "num_classes"),
        ({"image_size": 8}, "image_size must be >= 16"),
        ({"max_objects": 0}, "max_objects"),
        ({"num_train": 0}, "num_train"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_shapes_dataset(tmp_path / "d", **kwargs)


def test_draws_every_class_and_medium_objects():
    rng = np.random.default_rng(0)
    classes, areas = set(), []
    for _ in range(60):
        image, class_mask, instances = draw_shapes_image(
            rng, image_size=64, num_classes=6, max_objects=4
        )
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        assert 1 <= len(instances) <= 4
        for category_id, visible in instances:
            classes.add(category_id)
            areas.append(int(visible.sum()))
            assert (class_mask[visible] == category_id).all()
    assert classes == set(range(1, len(SHAPE_NAMES) + 1))
    assert max(areas) >= 32 * 32 and min(areas) < 32 * 32


def test_clutter_makes_background_non_uniform():
    image, class_mask, _ = draw_shapes_image(
        np.random.default_rng(1), image_size=64, num_classes=3, max_objects=1
    )
    background = image[class_mask == 0].astype(float)
    assert background.std(axis=0).min() > 3.0


def test_default_roots(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHGARDEN_DATA_DIR", str(tmp_path))
    assert default_data_root() == str(tmp_path)
    root = shapes_dataset_root()
    assert Path(root).parent == tmp_path and Path(root).name.startswith("shapes-v1-")
    assert shapes_dataset_root() == root != shapes_dataset_root(seed=1)
    monkeypatch.delenv("TORCHGARDEN_DATA_DIR")
    assert default_data_root() == str(Path.home() / ".cache" / "torchgarden")
    assert shapes_dataset_root(data_root="/x").startswith("/x/shapes-v1-")


def test_generator_and_vision_package_do_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, torchgarden.vision, torchgarden.vision.shapes\n"
        "assert 'generate_shapes_dataset' in torchgarden.vision.__all__\n"
        "assert torchgarden.vision.generate_shapes_dataset.__module__ == 'torchgarden.vision.shapes'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
