"""Digits written as streaming data for tests: WebDataset tar shards and Arrow files.

Test modules anywhere under ``tests/`` import it (pytest puts ``tests/`` on the path).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

import torchgarden as tg


def write_digits_streams(root: Path, *, shards: int, per_shard: int,
                         arrow: bool = True) -> Path:
    """Writes the first ``shards * per_shard`` training digits as ``root/shard-<i>.tar``
    (WebDataset: ``<key>.npy`` float32 image, ``<key>.cls`` label) and, with ``arrow``,
    as ``root/arrow`` (``datasets``' ``save_to_disk``, one file per shard); returns root."""
    root.mkdir(parents=True, exist_ok=True)
    images, labels = tg.data.load_digits_arrays("train")
    images = images[:shards * per_shard].numpy().astype(np.float32)
    labels = labels[:shards * per_shard].numpy()
    if arrow:
        import datasets

        datasets.Dataset.from_dict({"image": images.reshape(len(images), -1),
                                    "label": labels}).save_to_disk(str(root / "arrow"),
                                                                   num_shards=shards)
    for shard in range(shards):
        with tarfile.open(root / f"shard-{shard}.tar", "w") as tar:
            for i in range(shard * per_shard, (shard + 1) * per_shard):
                array = io.BytesIO()
                np.save(array, images[i])
                for extension, payload in (("npy", array.getvalue()),
                                           ("cls", str(int(labels[i])).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{extension}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    return root
