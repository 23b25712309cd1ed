"""Writes the fine-tuning task of docs/fine_tuning.md: is an 8x8 digit odd? (2 classes).

``python examples/fine_tuning/make_parity.py OUT_DIR [NUM_TRAIN]`` writes
``OUT_DIR/parity_train.npz`` (the first NUM_TRAIN, default 100, images of the digits
training split: a small labelled set, where pretrained features pay off) and
``OUT_DIR/parity_validation.npz`` (the whole validation split), as ``x`` float32
[N, 1, 8, 8] and ``y`` int64 (digit % 2).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from torchgarden.data import load_digits_arrays

out_dir = sys.argv[1]
num_train = int(sys.argv[2]) if len(sys.argv) > 2 else 100
os.makedirs(out_dir, exist_ok=True)
for split, limit in (("train", num_train), ("validation", None)):
    x, y = load_digits_arrays(split)
    np.savez(os.path.join(out_dir, f"parity_{split}.npz"), x=x[:limit].numpy(),
             y=(y[:limit] % 2).numpy())
    print(f"{split}: {len(y[:limit])} images")
