"""Input pipelines: samplers, resumable loaders and small datasets.

`build_dataloader(dataset, data_config)` turns a dataset into this replica's
loader of per-replica batches; `DataIterator(loader, repeat=...)` is what a
trainer holds, and its `state_dict()` makes a mid-epoch resume bit-exact.
"""

from torchgarden.data.context import InputContext
from torchgarden.data.datasets import (
    ArrayDataset,
    ImageFolderDataset,
    load_digits_arrays,
    load_npz_arrays,
    make_toy_regression,
)
from torchgarden.data.iterator import DataIterator
from torchgarden.data.loader import (
    ArrayLoader,
    ResumableDataLoader,
    build_dataloader,
    tuple_collate,
)
from torchgarden.data.sampler import ResumableSampler
from torchgarden.data.tfrecord import TFRecordError, read_records, write_tfrecord
from torchgarden.data.tfrecord_input import build_tfrecord_loader
from torchgarden.data.tfrecord_stream import TFRecordStream
from torchgarden.data.transfer import make_batch_mover, move_to_device

__all__ = [
    "ArrayDataset",
    "ArrayLoader",
    "DataIterator",
    "ImageFolderDataset",
    "InputContext",
    "ResumableDataLoader",
    "ResumableSampler",
    "TFRecordError",
    "TFRecordStream",
    "build_dataloader",
    "build_tfrecord_loader",
    "load_digits_arrays",
    "load_npz_arrays",
    "make_batch_mover",
    "make_toy_regression",
    "move_to_device",
    "read_records",
    "tuple_collate",
    "write_tfrecord",
]
