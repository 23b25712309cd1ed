"""TFRecord files without TensorFlow: framing, CRCs, Model Garden's decoders, the stream."""

from __future__ import annotations

import struct
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("crc32c")
pytest.importorskip("tfrecord")

from torchgarden.data.tf_example import (  # noqa: E402
    build_example,
    decode_classification,
    decode_detection,
    decode_segmentation,
)
from torchgarden.data.tfrecord import (  # noqa: E402
    TFRecordError,
    expand_input_paths,
    masked_crc32c,
    read_records,
    write_tfrecord,
)
from torchgarden.data.tfrecord_samples import encode_image  # noqa: E402
from torchgarden.data.tfrecord_stream import TFRecordStream  # noqa: E402


def _text(data: bytes, seed: int) -> str:
    return data.decode()


def _shards(tmp_path, num_files=3, per_file=5) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(num_files):
        path = str(tmp_path / f"s-{f:05d}-of-{num_files:05d}")
        write_tfrecord(path, [f"{f}-{i}".encode() for i in range(per_file)])
        paths.append(path)
    return paths


# ------------------------------------------------------------------ framing and CRCs
def test_masked_crc_matches_tensorflow_known_value():
    # TensorFlow's crc32c_test: Mask(Value("foo")) round-trips; the crc32c of "123456789"
    # is 0xE3069283 (RFC 3720), masked as TFRecord does.
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_written_framing_and_read_back(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    offsets = write_tfrecord(path, [b"hello", b"", b"x" * 1000])
    raw = Path(path).read_bytes()
    assert struct.unpack("<Q", raw[:8])[0] == 5 and raw[12:17] == b"hello"
    assert struct.unpack("<I", raw[8:12])[0] == masked_crc32c(raw[:8])
    assert struct.unpack("<I", raw[17:21])[0] == masked_crc32c(b"hello")
    assert offsets == [0, 21, 37]
    assert list(read_records(path)) == [(0, b"hello"), (21, b""), (37, b"x" * 1000)]
    assert list(read_records(path, 21)) == [(21, b""), (37, b"x" * 1000)]


def _corrupt(path: str, at: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[at] ^= 0x40
    Path(path).write_bytes(bytes(data))


def test_bad_data_crc_names_file_and_offset(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_tfrecord(path, [b"aaaa", b"bbbb", b"cccc"])
    _corrupt(path, 20 + 12)  # a data byte of the second record (offset 20)
    with pytest.raises(TFRecordError) as err:
        list(read_records(path))
    message = str(err.value)
    assert f"{path}: bad TFRecord record at byte offset 20: data CRC mismatch" in message
    assert "\n" not in message and "skip_bad_records" in message


def test_bad_length_crc_and_truncation(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_tfrecord(path, [b"aaaa", b"bbbb"])
    _corrupt(path, 20 + 2)  # the length of the second record
    with pytest.raises(TFRecordError, match="offset 20: length CRC mismatch"):
        list(read_records(path))
    write_tfrecord(path, [b"aaaa", b"bbbb"])
    with open(path, "r+b") as f:
        f.truncate(34)
    with pytest.raises(TFRecordError, match="offset 20: truncated record"):
        list(read_records(path))


def test_skip_and_count(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_tfrecord(path, [b"aaaa", b"bbbb", b"cccc"])
    _corrupt(path, 20 + 12)
    skipped: list[int] = []
    assert [d for _, d in read_records(path, skip_bad=True, skipped=skipped)] == [b"aaaa",
                                                                                   b"cccc"]
    assert skipped == [20]


def test_worker_wrapped_error_is_one_line():
    wrapped = ("Caught TFRecordError in DataLoader worker process 0.\nOriginal Traceback (most "
               "recent call last):\n  File ...\ntorchgarden.data.tfrecord.TFRecordError: f: bad")
    assert str(TFRecordError(wrapped)) == "f: bad"


def test_expand_input_paths(tmp_path):
    paths = _shards(tmp_path)
    assert expand_input_paths(f"{tmp_path}/s-*") == paths
    assert expand_input_paths(f"{paths[2]}, {paths[0]}") == [paths[2], paths[0]]
    assert expand_input_paths([paths[1], f"{tmp_path}/s-0000[02]*"]) == [paths[1], paths[0],
                                                                        paths[2]]
    with pytest.raises(FileNotFoundError, match=r"task.train_data.input_path: '.*/x-\*' "
                                                "matches no file"):
        expand_input_paths(f"{tmp_path}/x-*", "task.train_data.input_path")


# ------------------------------------------------------------------ decoders
def test_classification_decoder():
    record = build_example({"image/encoded": b"JPEGBYTES", "image/class/label": 7})
    assert decode_classification(record) == {"image": b"JPEGBYTES", "label": 7}
    custom = build_example({"img": b"x", "lab": [1, 3]})
    out = decode_classification(custom, image_key="img", label_key="lab", is_multilabel=True)
    assert out["image"] == b"x" and out["label"].tolist() == [1, 3]
    with pytest.raises(KeyError, match="no feature 'image/class/label'"):
        decode_classification(build_example({"image/encoded": b"x"}))


def test_detection_decoder_follows_model_garden_defaults():
    record = build_example({
        "image/encoded": b"J", "image/source_id": b"42", "image/height": 100,
        "image/width": 200,
        "image/object/bbox/ymin": [0.1, 0.5], "image/object/bbox/xmin": [0.2, 0.0],
        "image/object/bbox/ymax": [0.3, 1.0], "image/object/bbox/xmax": [0.6, 0.5],
        "image/object/class/label": [3, 1]})
    out = decode_detection(record)
    np.testing.assert_allclose(out["boxes"], [[0.1, 0.2, 0.3, 0.6], [0.5, 0.0, 1.0, 0.5]],
                               rtol=1e-6)
    assert out["classes"].tolist() == [3, 1] and out["source_id"] == "42"
    assert out["is_crowd"].tolist() == [False, False]  # absent: none is crowd
    np.testing.assert_allclose(out["area"], [0.2 * 0.4 * 20000, 0.5 * 0.5 * 20000], rtol=1e-5)
    crowd = build_example({"image/encoded": b"J", "image/object/bbox/ymin": [0.0],
                           "image/object/bbox/xmin": [0.0], "image/object/bbox/ymax": [1.0],
                           "image/object/bbox/xmax": [1.0], "image/object/class/label": [2],
                           "image/object/is_crowd": [1], "image/object/area": [5.0]})
    out = decode_detection(crowd)
    assert out["is_crowd"].tolist() == [True] and out["area"].tolist() == [5.0]


def test_segmentation_decoder():
    mask = np.array([[0, 1], [2, 1]], np.uint8)
    record = build_example({"image/encoded": b"J", "image/height": 2, "image/width": 2,
                            "image/segmentation/class/encoded": encode_image(mask, "PNG")})
    out = decode_segmentation(record)
    import io

    from PIL import Image

    assert np.asarray(Image.open(io.BytesIO(out["label"]))).tolist() == mask.tolist()
    assert (out["height"], out["width"], out["image"]) == (2, 2, b"J")


# ------------------------------------------------------------------ the stream
def test_interleave_order_is_tf_datas(tmp_path):
    files = _shards(tmp_path)
    stream = TFRecordStream(files, _text, cycle_length=2, block_length=2)
    # Hand-computed from tf.data.Dataset.interleave: slots open files lazily; an exhausted
    # slot moves on to the next slot and opens the next file when it comes round again.
    assert list(stream) == ["0-0", "0-1", "1-0", "1-1", "0-2", "0-3", "1-2", "1-3", "0-4",
                            "1-4", "2-0", "2-1", "2-2", "2-3", "2-4"]
    stream = TFRecordStream(files, _text, cycle_length=3, block_length=1)
    assert list(stream)[:6] == ["0-0", "1-0", "2-0", "0-1", "1-1", "2-1"]


def test_sharding_covers_each_record_once(tmp_path):
    for num_files in (1, 3, 8):
        files = _shards(tmp_path / str(num_files), num_files=num_files, per_file=4)
        seen = []
        for rank in range(2):
            for worker in range(2):
                stream = TFRecordStream(files, _text, is_training=True, seed=3,
                                        shuffle_buffer_size=5, cycle_length=2)
                stream.shard_for_replica(rank, 2)
                stream._unit = lambda r=rank, w=worker: (r * 2 + w, 4)  # worker w of 2
                seen += list(stream)
        assert sorted(seen) == sorted(f"{f}-{i}" for f in range(num_files) for i in range(4))


def test_shuffle_is_seeded_and_changes_per_epoch(tmp_path):
    files = _shards(tmp_path, num_files=4, per_file=6)

    def read(seed, epoch):
        stream = TFRecordStream(files, _text, is_training=True, seed=seed,
                                shuffle_buffer_size=8, cycle_length=2)
        stream.set_epoch(epoch)
        return list(stream)

    assert read(1, 0) == read(1, 0)
    assert read(1, 0) != read(2, 0) and read(1, 0) != read(1, 1)
    assert sorted(read(1, 1)) == sorted(read(1, 0))
    plain = TFRecordStream(files, _text, cycle_length=1)
    assert list(plain) == [f"{f}-{i}" for f in range(4) for i in range(6)]  # eval: in order


@pytest.mark.parametrize("num_files", [1, 4])
def test_exact_resume_mid_file(tmp_path, num_files):
    files = _shards(tmp_path, num_files=num_files, per_file=7)

    def stream():
        s = TFRecordStream(files, _text, is_training=True, seed=5, shuffle_buffer_size=4,
                           cycle_length=2, block_length=2)
        s.set_epoch(2)
        return s

    full = list(stream())
    for stop in (1, 3, 6):
        first = stream()
        it = iter(first)
        head = [next(it) for _ in range(stop)]
        state = first.state_dict()
        resumed = stream()
        resumed.set_epoch(0)
        resumed.load_state_dict(state)
        assert head + list(resumed) == full


def test_bad_record_in_stream_skipped_and_counted(tmp_path):
    files = _shards(tmp_path, num_files=2, per_file=3)
    _corrupt(files[1], 19 + 12)  # records of "f-i" are 3 bytes: 19 bytes each; record 1
    with pytest.raises(TFRecordError, match=f"{files[1]}: bad TFRecord record at byte offset 19"):
        list(TFRecordStream(files, _text, cycle_length=1))
    stream = TFRecordStream(files, _text, cycle_length=1, skip_bad=True)
    assert list(stream) == ["0-0", "0-1", "0-2", "1-0", "1-2"]
    assert stream.state_dict()["skipped"] == 1


def test_unparseable_record_names_file_and_offset(tmp_path):
    path = str(tmp_path / "a")
    offsets = write_tfrecord(path, [
        build_example({"image/encoded": b"x", "image/class/label": 1}), b"\xff\xff no proto"])

    def parse(data, seed):
        return decode_classification(data)["label"]

    with pytest.raises(TFRecordError, match=f"{path}: record at byte offset {offsets[1]}: Error parsing"):
        list(TFRecordStream([path], parse))
    assert list(TFRecordStream([path], parse, skip_bad=True)) == [1]


def test_stateful_loader_with_workers_resumes_exactly(tmp_path):
    pytest.importorskip("torchdata")
    from torchgarden.data.context import InputContext
    from torchgarden.data.tfrecord_input import build_tfrecord_loader

    _shards(tmp_path, num_files=4, per_file=6)
    params = types.SimpleNamespace(
        input_path=f"{tmp_path}/s-*", tfds_name="", is_training=True, seed=1,
        shuffle_buffer_size=4, cycle_length=2, block_length=1, drop_remainder=True,
        skip_bad_records=False, global_batch_size=2, num_workers=2, pin_memory=False,
        persistent_workers=False, prefetch_factor=None, deterministic=None, sharding=True)
    context = InputContext(num_replicas=1, replica_id=0)

    def loader():
        return build_tfrecord_loader(params, _text, input_context=context,
                                     collate_fn=lambda rows: rows)

    full = list(loader())
    assert sorted(sum(full, [])) == sorted(f"{f}-{i}" for f in range(4) for i in range(6))
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + list(resumed) == full


def test_a_stream_iterated_again_without_set_epoch_reads_the_next_epoch(tmp_path):
    # Persistent loader workers keep their copy of the stream: set_epoch never reaches it.
    files = _shards(tmp_path, num_files=4, per_file=6)

    def stream():
        return TFRecordStream(files, _text, is_training=True, seed=1, shuffle_buffer_size=8,
                              cycle_length=2)

    kept = stream()
    first, second = list(kept), list(kept)
    fresh = stream()
    fresh.set_epoch(1)
    assert first != second and second == list(fresh)
