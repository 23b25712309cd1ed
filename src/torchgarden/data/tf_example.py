"""``tf.train.Example`` records in Model Garden's schemas, decoded without TensorFlow.

The messages are the ``tensorflow.Example`` protobuf compiled in the ``tfrecord`` package
(``tfrecord.example_pb2``, the same ``example.proto``), parsed by ``protobuf``. Decoders
read the keys of Model Garden's decoders (``official/vision/dataloaders``) and return what
those return, as NumPy arrays and bytes (images stay encoded; parsers decode them):

* `decode_classification`: ``image_field_key`` (``image/encoded``) and ``label_field_key``
  (``image/class/label``; a list when ``is_multilabel``).
* `decode_detection`: ``image/encoded``, ``image/source_id``, ``image/height|width``,
  ``image/object/bbox/ymin|xmin|ymax|xmax`` (normalized to [0, 1]; returned as
  ``[ymin, xmin, ymax, xmax]`` rows), ``image/object/class/label``,
  ``image/object/is_crowd`` (absent: all False) and ``image/object/area`` (absent: the box
  areas in pixels), as ``TfExampleDecoder``.
* `decode_segmentation`: ``image/encoded``, ``image/height|width`` and
  ``image/segmentation/class/encoded`` (a PNG of class ids).

`build_example` writes the other way (tests, benchmarks, converting data).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "build_example",
    "decode_classification",
    "decode_detection",
    "decode_segmentation",
    "example_pb2",
    "parse_example",
]


def example_pb2() -> Any:
    """The compiled ``tf.train.Example`` protobuf module (from the ``tfrecord`` package)."""
    try:
        from tfrecord import example_pb2 as module
    except ImportError:
        raise ImportError(
            "reading tf.train.Example records needs the tfrecord package (its compiled "
            "example.proto): pip install 'torchgarden[tfrecord]'"
        ) from None
    return module


def parse_example(data: bytes) -> Mapping[str, Any]:
    """The feature map of a serialized ``tf.train.Example`` (name -> ``Feature``)."""
    return example_pb2().Example.FromString(data).features.feature


def _values(features: Mapping[str, Any], key: str, kind: str, *, required: bool = True) -> Any:
    if key not in features:
        if required:
            raise KeyError(f"the tf.train.Example has no feature {key!r} (it has "
                           f"{sorted(features)[:12]}); set the data config's field keys")
        return []
    feature = features[key]
    found = feature.WhichOneof("kind")
    if found is not None and found != kind:
        raise ValueError(f"feature {key!r} is a {found}, expected a {kind}")
    return getattr(feature, kind).value


def _one(features: Mapping[str, Any], key: str, kind: str, default: Any = None) -> Any:
    values = _values(features, key, kind, required=default is None)
    if not len(values):
        if default is not None:
            return default
        raise ValueError(f"feature {key!r} is empty")
    return values[0]


def decode_classification(data: bytes, *, image_key: str = "image/encoded",
                          label_key: str = "image/class/label",
                          is_multilabel: bool = False) -> dict[str, Any]:
    """``{"image": encoded bytes, "label": int or int64 array (multilabel)}``."""
    features = parse_example(data)
    image = _one(features, image_key, "bytes_list")
    labels = _values(features, label_key, "int64_list")
    if is_multilabel:
        return {"image": image, "label": np.asarray(labels, dtype=np.int64)}
    if len(labels) != 1:
        raise ValueError(f"feature {label_key!r} holds {len(labels)} labels, expected one "
                         "(set is_multilabel for several)")
    return {"image": image, "label": int(labels[0])}


def decode_detection(data: bytes) -> dict[str, Any]:
    """Model Garden's ``TfExampleDecoder`` output, image still encoded (see the module doc)."""
    features = parse_example(data)
    height = int(_one(features, "image/height", "int64_list", 0))
    width = int(_one(features, "image/width", "int64_list", 0))
    coords = [np.asarray(_values(features, f"image/object/bbox/{name}", "float_list",
                                 required=False), dtype=np.float32)
              for name in ("ymin", "xmin", "ymax", "xmax")]
    count = len(coords[0])
    if any(len(c) != count for c in coords):
        raise ValueError(f"image/object/bbox/* have different lengths "
                         f"{[len(c) for c in coords]}")
    boxes = np.stack(coords, axis=-1) if count else np.zeros((0, 4), np.float32)
    classes = np.asarray(_values(features, "image/object/class/label", "int64_list",
                                 required=False), dtype=np.int64)
    if len(classes) != count:
        raise ValueError(f"image/object/class/label has {len(classes)} entries for {count} "
                         "boxes")
    crowd = np.asarray(_values(features, "image/object/is_crowd", "int64_list",
                               required=False), dtype=bool)
    area = np.asarray(_values(features, "image/object/area", "float_list", required=False),
                      dtype=np.float32)
    if not len(area):
        area = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
                * height * width).astype(np.float32)
    source = _one(features, "image/source_id", "bytes_list", b"")
    return {"image": _one(features, "image/encoded", "bytes_list"),
            "source_id": source.decode("utf-8", "replace"), "height": height, "width": width,
            "boxes": boxes, "classes": classes,
            "is_crowd": crowd if len(crowd) else np.zeros(count, bool), "area": area}


def decode_segmentation(data: bytes) -> dict[str, Any]:
    """``{"image": encoded bytes, "label": encoded PNG mask, "height", "width"}``."""
    features = parse_example(data)
    return {"image": _one(features, "image/encoded", "bytes_list"),
            "label": _one(features, "image/segmentation/class/encoded", "bytes_list"),
            "height": int(_one(features, "image/height", "int64_list", 0)),
            "width": int(_one(features, "image/width", "int64_list", 0))}


def build_example(features: Mapping[str, bytes | int | float | Sequence[Any]]) -> bytes:
    """A serialized ``tf.train.Example``: bytes/str -> bytes_list, int -> int64_list,
    float -> float_list (a sequence: its element type decides)."""
    example = example_pb2().Example()
    for key, value in features.items():
        values = list(value) if isinstance(value, list | tuple | np.ndarray) else [value]
        feature = example.features.feature[key]
        sample = values[0] if values else 0
        if isinstance(sample, bytes | str):
            feature.bytes_list.value.extend(
                v.encode() if isinstance(v, str) else v for v in values)
        elif isinstance(sample, float | np.floating):
            feature.float_list.value.extend(float(v) for v in values)
        else:
            feature.int64_list.value.extend(int(v) for v in values)
    return example.SerializeToString()
