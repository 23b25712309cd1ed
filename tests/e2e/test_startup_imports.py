"""A default run imports what it uses: the 1-step digits run pinned module by module.

Every `train`, `eval`, `export` and `predict` pays its imports before its first step (issue
24). Heavy libraries a default run does not use stay out: scikit-learn (and SciPy; the
digits file is read directly), torch.distributed.checkpoint (the sharded format only),
torch.export / ONNX (export only), the model libraries, plotting, the trackers, and
`torch._dynamo` (with SymPy), which torch.optim would import on an optimizer's first
build and step although nothing is compiled (`torchgarden.optim.eager_dynamo`).
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Top-level packages (or module prefixes) a default 1-step run must not import.
NOT_IMPORTED = (
    "sklearn", "scipy", "pandas", "torch.distributed.checkpoint", "torchgarden.export",
    "onnx", "onnxruntime", "onnxscript", "transformers", "datasets", "torchdata", "torchvision",
    "timm", "matplotlib", "PIL", "pycocotools", "torchmetrics", "mlflow", "wandb", "safetensors",
    "crc32c", "tfrecord", "torch._dynamo", "sympy",
)


def test_a_default_one_step_run_imports_only_what_it_uses(tmp_path):
    script = (
        "import json, sys\n"
        "from torchgarden.cli.main import main\n"
        "status = main(['train', '--experiment', 'image_classification', '--mode', 'train',\n"
        f"              '--model_dir', {str(tmp_path / 'run')!r},\n"
        "              '--params_override', 'trainer.train_steps=1'])\n"
        "print(json.dumps({'status': status, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, done.stderr
    modules = result["modules"]
    found = [m for m in modules for banned in NOT_IMPORTED
             if m == banned or m.startswith(banned + ".")]
    assert not found, f"a default run imported {sorted({m.split('.')[0] for m in found})}: {found[:8]}"
    assert "torchgarden.tasks.image_classification" in modules  # (The probe ran the run.)


def test_the_first_loop_reports_where_the_start_up_went(tmp_path):
    """Compiled: the first step is eager (the optimizer makes its state), the graph's first
    call comes in the second loop, so that loop's line reports the start-up, compile too."""
    done, reported = _compiled_run(tmp_path / "run", "trainer.train_steps=6,"
                                   "runtime.steps_per_graph=2")
    lines = [line for line in done.stdout.splitlines() if "start-up: " in line]
    assert len(lines) == 1 and "step:      4" in lines[0], done.stdout
    assert [r["step"] for r in reported] == [4]  # once per process, with that loop's summary
    parts = {k: v for k, v in reported[0].items() if k.startswith("startup/")}
    total = parts.pop("startup/seconds")
    assert set(parts) == {f"startup/{p}" for p in
                          ("imports", "data", "model", "restore", "compile", "other")}
    assert all(v >= 0 for v in parts.values()) and parts["startup/compile"] > 0
    assert abs(total - sum(parts.values())) < 1e-6
    assert f"start-up: {total:.1f} s" in lines[0]
    # The notice waits for the compile too: it came in the second loop.
    assert "torchgarden: first 2 train loops (with torch.compile) took" in done.stdout


def test_a_model_only_compile_is_timed_as_start_up(tmp_path):
    """A step the compiled path does not cover (gradient accumulation) calls the
    torch.compile-d model in its first step: that call is the start-up's compile."""
    done, reported = _compiled_run(tmp_path / "run", "trainer.train_steps=4,"
                                   "trainer.gradient_accumulation_steps=2")
    assert [r["step"] for r in reported] == [2]
    assert reported[0]["startup/compile"] > 0.1  # Inductor compiled the model in it
    assert "torchgarden: first train loop (with torch.compile) took" in done.stdout


def _compiled_run(model_dir, overrides: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """A compiled digits run in loops of 2 steps: the process and its start-up records."""
    done = subprocess.run(
        [sys.executable, "-m", "torchgarden", "train", "--experiment", "image_classification",
         "--mode", "train", "--model_dir", str(model_dir), "--params_override",
         "trainer.steps_per_loop=2,trainer.summary_interval=2,runtime.enable_xla=true,"
         + overrides],
        capture_output=True, text=True, timeout=300, check=True)
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return done, [r for r in records if "startup/seconds" in r]
