"""A consumer of ``torchgarden export --format hf`` with transformers (and PEFT) only.

Run as ``python -I hf_consumer.py HF_DIR REFERENCE.pt [BASE_DIR]`` in a fresh process:
every ``sys.path`` entry that holds a ``torchgarden`` package is dropped first (the venv's
editable install adds one), so torchgarden cannot be imported. It loads ``HF_DIR`` with
``AutoModelForImageClassification.from_pretrained`` -- or, when ``BASE_DIR`` is given,
the base model from there with the PEFT adapter in ``HF_DIR`` over it -- runs it on the
reference inputs and prints the largest difference from the reference logits as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "torchgarden"))]
assert importlib.util.find_spec("torchgarden") is None, "torchgarden is importable"

import torch  # noqa: E402
from transformers import AutoModelForImageClassification  # noqa: E402

hf_dir, reference = sys.argv[1], torch.load(sys.argv[2], weights_only=True)
if len(sys.argv) > 3:
    from peft import PeftModel

    model = PeftModel.from_pretrained(
        AutoModelForImageClassification.from_pretrained(sys.argv[3]), hf_dir)
else:
    model = AutoModelForImageClassification.from_pretrained(hf_dir)
model.eval()
with torch.no_grad():
    logits = model(reference["inputs"]).logits
assert "torchgarden" not in sys.modules
print(json.dumps({"max_abs_diff": float((logits.double() - reference["logits"].double())
                                        .abs().max())}))
