"""Packing a byte stream into fixed-length next-byte-prediction examples."""

from __future__ import annotations

import numpy as np
import torch

from torchgarden.data import ArrayDataset

__all__ = ["pack_bytes", "unigram_bits_per_byte"]


def pack_bytes(data: np.ndarray, seq_length: int) -> ArrayDataset:
    """Consecutive, non-overlapping windows of ``seq_length + 1`` bytes of ``data``.

    Example ``i`` is ``(data[i*L : i*L + L], data[i*L + 1 : i*L + L + 1])``: inputs and
    their next-byte targets, as ``uint8`` byte values (cast to ``int64`` token ids on the
    device: a quarter of the host-to-device traffic). The tail that does not fill a window
    is dropped. An `ArrayDataset`, so batches are one gather per tensor.

    Args:
        data: The bytes (``uint8``).
        seq_length: Tokens per example ``L``.

    Raises:
        ValueError: ``data`` is shorter than one window.
    """
    count = (len(data) - 1) // seq_length if seq_length > 0 else 0
    if count < 1:
        raise ValueError(f"{len(data)} bytes cannot fill one window of seq_length + 1 = "
                         f"{seq_length + 1} bytes.")
    flat = torch.from_numpy(np.array(data[:count * seq_length + 1]))  # A writable copy.
    inputs = flat[:-1].reshape(count, seq_length)
    targets = flat[1:].reshape(count, seq_length)
    return ArrayDataset(inputs, targets)


def unigram_bits_per_byte(train: np.ndarray, validation: np.ndarray) -> float:
    """Bits per byte of ``validation`` under the byte frequencies of ``train`` (add-one).

    The baseline a language model must beat: it knows which bytes are common, nothing
    about context.
    """
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    probabilities = counts / counts.sum()
    return float(-np.log2(probabilities[validation]).mean())
