"""A consumer of an export that has only torch, safetensors and onnxruntime.

Run as ``python consumer.py EXPORT_DIR REFERENCE.pt`` in a fresh process: it checks
that ``model.safetensors`` equals the checkpoint's model weights, and that
``model.pt2`` (``torch.export.load``) and ``model.onnx`` (onnxruntime) give the
reference outputs (eager ``inference_step``) on the reference inputs; it prints the
measured differences as JSON and fails if torchgarden was imported.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime
import torch
from safetensors.torch import load_file


def _compare(name: str, got: torch.Tensor, want: torch.Tensor) -> float:
    assert tuple(got.shape) == tuple(want.shape), (name, got.shape, want.shape)
    if not want.is_floating_point():
        assert torch.equal(got.to(want.dtype), want), f"{name}: integer outputs differ"
        return 0.0
    assert torch.allclose(got.float(), want.float(), atol=1e-4, rtol=1e-4), name
    return float((got.double() - want.double()).abs().max()) if want.numel() else 0.0


def _compare_detections(got: dict, want: dict, tie: float = 1e-5) -> float:
    """Detections equal up to the order of near-tied scores.

    Float noise (~1e-7) between runtimes can swap two candidates whose scores differ by
    less than that, in ranking, in NMS, or at the last slot. Scores must agree (sorted,
    within ``tie``); classes and boxes must agree for every row whose score is further
    than ``tie`` from its neighbours.
    """
    assert torch.equal(got["num_detections"], want["num_detections"]), "num_detections"
    slots = want["detection_scores"].shape[1]
    for b, count in enumerate(want["num_detections"].tolist()):
        scores = want["detection_scores"][b, :count]
        assert torch.allclose(got["detection_scores"][b, :count], scores, atol=tie, rtol=0)
        close = (scores[:-1] - scores[1:]).abs() < tie
        tied = torch.zeros(count, dtype=torch.bool)
        tied[:-1] |= close
        tied[1:] |= close
        if count == slots and count:
            tied[-1] = True  # the first candidate left out may tie with the last kept
        alone = ~tied
        assert torch.equal(got["detection_classes"][b, :count][alone],
                           want["detection_classes"][b, :count][alone]), "detection_classes"
        assert torch.allclose(got["detection_boxes"][b, :count][alone],
                              want["detection_boxes"][b, :count][alone], atol=1e-3)
    return float((got["detection_scores"] - want["detection_scores"]).abs().max())


def _compare_all(got: dict, want: dict) -> float:
    if "detection_scores" in want:
        got = {k: torch.as_tensor(np.asarray(v)) for k, v in got.items()}
        return _compare_detections(got, want)
    return max(_compare(k, torch.as_tensor(np.asarray(got[k])), v) for k, v in want.items())


def main(export_dir: str, reference_path: str) -> dict:
    with open(os.path.join(export_dir, "export.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    reference = torch.load(reference_path, weights_only=True)
    inputs, expected = reference["inputs"], reference["outputs"]

    weights = load_file(os.path.join(export_dir, "model.safetensors"))
    state = torch.load(os.path.join(manifest["checkpoint"], "state.pt"), weights_only=True)
    assert weights.keys() == state["model"].keys()
    assert all(torch.equal(weights[k], state["model"][k]) for k in weights)

    program = torch.export.load(os.path.join(export_dir, "model.pt2"))
    with torch.no_grad():
        outputs = program.module()(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = {manifest["outputs"][0]["name"]: outputs}
    pt2 = max(_compare(k, outputs[k], v) for k, v in expected.items())  # exact order

    session = onnxruntime.InferenceSession(os.path.join(export_dir, "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    onnx = _compare_all(values, expected)
    assert "torchgarden" not in sys.modules, "the consumer imported torchgarden"
    return {"weights": len(weights), "pt2": pt2, "onnx": onnx}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
