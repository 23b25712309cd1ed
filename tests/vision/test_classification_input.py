"""Model Garden's classification parser in torch/PIL, and image_classification on TFRecords."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("crc32c")
pytest.importorskip("tfrecord")

from torchgarden.data.tf_example import build_example  # noqa: E402
from torchgarden.data.tfrecord_samples import encode_image, write_classification_shards  # noqa: E402
from torchgarden.vision.classification_input import (  # noqa: E402
    MEAN_RGB,
    STDDEV_RGB,
    ClassificationParser,
    ClassificationRecord,
    center_crop_box,
    sample_distorted_box,
)


def test_random_crop_obeys_model_gardens_bounds():
    rng = np.random.default_rng(0)
    areas, ratios = [], []
    for _ in range(500):
        top, left, h, w = sample_distorted_box(120, 160, rng, area_range=(0.08, 1.0))
        assert top >= 0 and top + h <= 120 and left >= 0 and left + w <= 160
        if (h, w) != (120, 160):
            areas.append(h * w / (120 * 160))
            ratios.append(w / h)
    assert min(areas) >= 0.08 and max(areas) <= 1.0
    assert min(ratios) >= 0.75 - 0.02 and max(ratios) <= 4 / 3 + 0.02
    assert np.mean(areas) > 0.3  # heights uniform: large crops are common


def test_random_crop_seeded_and_whole_image_when_nothing_fits():
    a = sample_distorted_box(100, 100, np.random.default_rng(3))
    assert a == sample_distorted_box(100, 100, np.random.default_rng(3))
    # An area fraction above 1 never fits: every attempt fails, the whole image is returned.
    assert sample_distorted_box(10, 10, np.random.default_rng(0),
                                area_range=(1.5, 2.0)) == (0, 0, 10, 10)


def test_center_crop_is_model_gardens():
    # center_crop_image_v2: size = fraction * min side, offsets int((dim - size) / 2).
    assert center_crop_box(100, 200, 0.875) == (6, 56, 87, 87)
    assert center_crop_box(64, 64, 1.0) == (0, 0, 64, 64)


def _checker(height=48, width=64) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1)
    return image.astype(np.uint8)


def test_eval_parse_is_center_crop_resize_normalize():
    pixels = _checker()
    parser = ClassificationParser((16, 16), is_training=False, center_crop_fraction=1.0,
                                  draft_decode=False)
    out = parser.image(encode_image(pixels, "PNG"), np.random.default_rng(0))
    assert out.shape == (3, 16, 16) and out.dtype == torch.float32
    top, left, h, w = center_crop_box(48, 64, 1.0)
    crop = torch.from_numpy(pixels[top:top + h, left:left + w]).permute(2, 0, 1).float()
    expected = torch.nn.functional.interpolate(crop[None], size=(16, 16), mode="bilinear",
                                               align_corners=False)[0]
    expected = (expected - torch.tensor(MEAN_RGB).view(3, 1, 1)) / torch.tensor(
        STDDEV_RGB).view(3, 1, 1)
    torch.testing.assert_close(out, expected)


def test_jpeg_pixels_equal_tensorflows_decode_jpeg():
    # The fixture's pixels are tf.io.decode_jpeg's (TensorFlow 2.21, its default fast
    # integer DCT): Pillow's and OpenCV's accurate DCT differ by up to 5 levels.
    fixtures = Path(__file__).parent / "fixtures"
    jpeg = (fixtures / "noise_56x40.jpg").read_bytes()
    expected = np.load(fixtures / "noise_56x40.tf_decode_jpeg.npy")
    parser = ClassificationParser((40, 56), is_training=True, aug_crop=False,
                                  aug_rand_hflip=False)
    pixels = parser.decode_crop(jpeg, np.random.default_rng(0))
    assert pixels.dtype == torch.uint8
    np.testing.assert_array_equal(pixels.permute(1, 2, 0).numpy(), expected)
    # No resize at the input size: the image is the normalized pixels.
    image = parser.image(jpeg, np.random.default_rng(0))
    normalized = (torch.from_numpy(expected).permute(2, 0, 1).float()
                  - torch.tensor(MEAN_RGB).view(3, 1, 1)) / torch.tensor(STDDEV_RGB).view(3, 1, 1)
    torch.testing.assert_close(image, normalized, rtol=0, atol=0)


def test_draft_decode_equals_full_decode_within_resampling_error():
    pixels = _checker(256, 320)
    jpeg = encode_image(pixels, "JPEG")
    for training in (False, True):
        fast = ClassificationParser((32, 32), is_training=training, draft_decode=True)
        full = ClassificationParser((32, 32), is_training=training, draft_decode=False)
        a = fast.image(jpeg, np.random.default_rng(1))
        b = full.image(jpeg, np.random.default_rng(1))
        # In normalized units (1 = 0.23 * 255 levels): a few grey levels on average.
        assert (a - b).abs().mean() < 0.1


def test_training_parse_flips_with_probability_half():
    png = encode_image(_checker(), "PNG")
    parser = ClassificationParser((8, 8), is_training=True, aug_crop=False)
    still = ClassificationParser((8, 8), is_training=True, aug_crop=False, aug_rand_hflip=False)
    reference = still.image(png, np.random.default_rng(0))
    outs = [parser.image(png, np.random.default_rng(s)) for s in range(40)]
    flipped = sum(torch.allclose(o, reference.flip(-1)) for o in outs)
    assert flipped + sum(torch.allclose(o, reference) for o in outs) == 40
    assert 8 < flipped < 32


def test_record_parser_reads_model_garden_keys_and_checks_labels():
    jpeg = encode_image(_checker(), "JPEG")
    record = build_example({"image/encoded": jpeg, "image/class/label": 2})
    model = type("M", (), {"input_size": [24, 24, 3], "num_classes": 3})()
    params = type("P", (), dict(
        is_training=False, aug_crop=True, crop_area_range=[0.08, 1.0],
        center_crop_fraction=0.875, aug_rand_hflip=True, is_multilabel=False,
        tf_resize_method="bilinear", image_field_key="image/encoded",
        label_field_key="image/class/label", aug_type=None, color_jitter=0.0,
        random_erasing=None, dtype="float32"))()
    image, label = ClassificationRecord.from_config(params, model)(record, 0)
    assert image.shape == (3, 24, 24) and label == 2
    model.num_classes = 2
    with pytest.raises(ValueError, match=r"label \[2\] is outside \[0, 2\)"):
        ClassificationRecord.from_config(params, model)(record, 0)


def test_train_two_steps_on_tfrecord_shards(tmp_path):
    from torchgarden.cli.main import main

    data = tmp_path / "data"
    write_classification_shards(data, num_shards=3, per_shard=8, prefix="train")
    write_classification_shards(data, num_shards=1, per_shard=8, prefix="validation", seed=1)
    model_dir = str(tmp_path / "run")
    code = main([
        "train", "--experiment", "image_classification", "--mode", "train_and_eval",
        "--model_dir", model_dir, "--params_override",
        f"task.train_data.source=tfrecord,task.train_data.input_path={data}/train-*,"
        f"task.validation_data.source=tfrecord,"
        f"task.validation_data.input_path={data}/validation-00000-of-00001,"
        "task.model.input_size=[24,24,3],task.model.num_classes=4,"
        "task.train_data.global_batch_size=4,task.validation_data.global_batch_size=4,"
        "trainer.train_steps=2,trainer.steps_per_loop=1,trainer.summary_interval=1,"
        "trainer.validation_interval=2"])
    assert code == 0
    rows = [json.loads(line) for line in Path(model_dir, "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "validation_loss" in json.dumps(r)]
    assert evals and os.path.isdir(os.path.join(model_dir, "ckpt-2"))


def test_bad_record_stops_the_run_in_one_line(tmp_path, capsys):
    from torchgarden.cli.main import main

    data = tmp_path / "data"
    paths = write_classification_shards(data, num_shards=1, per_shard=8)
    raw = bytearray(Path(paths[0]).read_bytes())
    raw[40] ^= 0xFF
    Path(paths[0]).write_bytes(bytes(raw))
    code = main([
        "train", "--experiment", "image_classification", "--model_dir", str(tmp_path / "run"),
        "--params_override",
        f"task.train_data.source=tfrecord,task.train_data.input_path={paths[0]},"
        "task.model.input_size=[24,24,3],task.model.num_classes=4,"
        "task.train_data.global_batch_size=4,trainer.train_steps=1", "--mode", "train"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert f"{paths[0]}: bad TFRecord record at byte offset 0: data CRC mismatch" in err[-1]


def test_skip_bad_records_counts_in_the_metrics(tmp_path):
    from torchgarden.cli.main import main

    data = tmp_path / "data"
    paths = write_classification_shards(data, num_shards=2, per_shard=8)
    raw = bytearray(Path(paths[1]).read_bytes())
    raw[40] ^= 0xFF  # the data of the first record of the second shard
    Path(paths[1]).write_bytes(bytes(raw))
    model_dir = tmp_path / "run"
    code = main([
        "train", "--experiment", "image_classification", "--model_dir", str(model_dir),
        "--mode", "train", "--params_override",
        f"task.train_data.source=tfrecord,task.train_data.input_path={data}/train-*,"
        "task.train_data.skip_bad_records=true,task.train_data.shuffle_buffer_size=16,"
        "task.model.input_size=[24,24,3],task.model.num_classes=4,"
        "task.train_data.global_batch_size=4,trainer.train_steps=3,trainer.steps_per_loop=3,"
        "trainer.summary_interval=3"])
    assert code == 0
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["data/skipped_records"] for r in rows if "data/skipped_records" in r] == [1.0]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_bitwise_the_uninterrupted_run(tmp_path, workers):
    from torchgarden.cli.main import main

    data = tmp_path / "data"
    write_classification_shards(data, num_shards=4, per_shard=12)  # 48 records: 12 batches

    def train(model_dir, steps):
        assert main([
            "train", "--experiment", "image_classification", "--mode", "train",
            "--model_dir", str(model_dir), "--params_override",
            f"task.train_data.source=tfrecord,task.train_data.input_path={data}/train-*,"
            f"task.train_data.num_workers={workers},task.train_data.shuffle_buffer_size=8,"
            "task.train_data.cycle_length=2,task.model.input_size=[16,16,3],"
            "task.model.num_classes=4,task.train_data.global_batch_size=4,"
            f"trainer.train_steps={steps},trainer.steps_per_loop=1,trainer.summary_interval=1,"
            "trainer.checkpoint_interval=1"]) == 0

    train(tmp_path / "straight", 15)  # 12 batches an epoch: into the second epoch
    train(tmp_path / "resumed", 3)  # stops mid-file, mid-epoch, shuffle buffers full
    train(tmp_path / "resumed", 15)
    straight = torch.load(tmp_path / "straight" / "ckpt-15" / "state.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "ckpt-15" / "state.pt", weights_only=True)
    for name, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][name]), name


def test_hooks_run_in_model_gardens_order():
    png = encode_image(_checker(), "PNG")
    parser = ClassificationParser((8, 8), is_training=True, aug_crop=False,
                                  aug_rand_hflip=False)
    seen = []

    def hook(name, value):
        def run(image, rng):
            seen.append((name, tuple(image.shape), round(float(image.max()), 1)))
            return image + value
        return run

    parser.pre_resize.append(hook("pre", 1.0))
    parser.post_resize.append(hook("post", 2.0))
    parser.post_normalize.append(hook("normalized", 0.0))
    plain = ClassificationParser((8, 8), is_training=True, aug_crop=False,
                                 aug_rand_hflip=False).image(png, np.random.default_rng(0))
    out = parser.image(png, np.random.default_rng(0))
    assert [s[:2] for s in seen] == [("pre", (3, 48, 64)), ("post", (3, 8, 8)),
                                     ("normalized", (3, 8, 8))]
    torch.testing.assert_close(out, plain + 3.0 / torch.tensor(STDDEV_RGB).view(3, 1, 1))
