"""Train the ``language_model`` experiment for a few steps, then write bytes from a prompt.

    python examples/language_model_generate.py --model_dir /tmp/lm_generate --steps 200

The model is a transformers GPT-2, so generation is transformers' own ``generate``: the
prompt's UTF-8 bytes are the token ids (byte-level vocabulary), and the ids that come
back are bytes again. Run it twice with the same ``--model_dir`` and the second run only
restores the checkpoint and generates.
"""

from __future__ import annotations

import argparse

import torch

import torchgarden as tg


def generate(model: torch.nn.Module, prompt: str, max_new_bytes: int = 48) -> str:
    """Greedy continuation of ``prompt``, decoded from bytes (invalid UTF-8 replaced)."""
    ids = torch.tensor([list(prompt.encode("utf-8"))],
                       device=next(model.parameters()).device)
    model.eval()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=max_new_bytes, do_sample=False)
    return bytes(out[0].tolist()).decode("utf-8", errors="replace")


def main(model_dir: str, steps: int = 200, prompt: str = "def __init__(self") -> dict:
    """Trains ``steps`` steps of ``language_model`` in ``model_dir`` and generates."""
    params = tg.get_experiment("language_model")
    params.override({"trainer": {"train_steps": steps, "validation_interval": steps,
                                 "checkpoint_interval": steps,
                                 "steps_per_loop": min(50, steps),
                                 "summary_interval": min(50, steps)}})
    task = tg.get_task(params.task, logging_dir=model_dir)
    model, eval_logs = tg.run_experiment(task=task, mode="train_and_eval", params=params,
                                         model_dir=model_dir)
    return {"model": model, "eval_logs": eval_logs, "text": generate(model, prompt)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--prompt", default="def __init__(self")
    flags = parser.parse_args()
    result = main(flags.model_dir, flags.steps, flags.prompt)
    print(f"bits per byte: {float(result['eval_logs']['bits_per_byte']):.3f} "
          f"(unigram baseline {float(result['eval_logs']['unigram_bits_per_byte']):.3f})")
    print(repr(result["text"]))
