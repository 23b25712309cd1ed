"""tfds_name: a TFDS dataset prepared on disk is read as TFRecord files; nothing else is."""

from __future__ import annotations

import pytest

pytest.importorskip("crc32c")
pytest.importorskip("tfrecord")

from torchgarden.data.tfrecord import write_tfrecord  # noqa: E402
from torchgarden.data.tfrecord_input import tfds_files, tfrecord_files  # noqa: E402
from torchgarden.data.tfrecord_stream import TFRecordStream  # noqa: E402


def _prepare(root, name="mnist", version="3.0.1", split="train", shards=2, fmt="tfrecord"):
    folder = root / name / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset_info.json").write_text("{}")
    paths = []
    for i in range(shards):
        path = folder / f"{name.split('/')[-1]}-{split}.{fmt}-{i:05d}-of-{shards:05d}"
        write_tfrecord(path, [f"{split}{i}-{k}".encode() for k in range(3)])
        paths.append(str(path))
    return paths


def test_reads_the_newest_prepared_version(tmp_path):
    _prepare(tmp_path, version="1.0.0")
    newest = _prepare(tmp_path, version="3.0.1")
    _prepare(tmp_path, version="3.0.1", split="test", shards=1)
    assert tfds_files("mnist", "train", str(tmp_path)) == newest
    assert len(tfds_files("mnist:1.0.0", "train", str(tmp_path))) == 2
    stream = TFRecordStream(tfds_files("mnist", "test", str(tmp_path)),
                            lambda data, seed: data.decode())
    assert list(stream) == ["test0-0", "test0-1", "test0-2"]


def test_config_names_and_data_dir_from_the_environment(tmp_path, monkeypatch):
    paths = _prepare(tmp_path, name="coco/2017", version="1.1.0", split="validation")
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    assert tfds_files("coco/2017", "validation") == paths

    class Params:
        tfds_name, tfds_split, tfds_data_dir, input_path = "coco/2017", "validation", "", ""

    assert tfrecord_files(Params()) == paths


def test_refusals_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tfds_name: 'imagenet2012' is not prepared "
                                                r"under .* \(nothing is downloaded\)"):
        tfds_files("imagenet2012", "train", str(tmp_path))
    _prepare(tmp_path, name="cifar10", fmt="array_record")
    with pytest.raises(FileNotFoundError, match="prepared as array_record; only TFRecord"):
        tfds_files("cifar10", "train", str(tmp_path))
    _prepare(tmp_path, name="mnist")
    with pytest.raises(FileNotFoundError, match=r"has no split 'valid' \(it has \['train'\]\)"):
        tfds_files("mnist", "valid", str(tmp_path))
    with pytest.raises(ValueError, match="split slices"):
        tfds_files("mnist", "train[:10%]", str(tmp_path))
