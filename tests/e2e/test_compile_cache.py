"""A restarted compiled run loads the compile artifacts its model_dir keeps (issue 24)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from torchgarden.compile.cache import CACHE_FILE, load_compile_cache

RUN = (
    "import json, sys, torch\n"
    "from torchgarden.cli.main import main\n"
    "status = main(['train', '--experiment', 'image_classification', '--mode', 'train',\n"
    "               '--model_dir', sys.argv[1], '--params_override', sys.argv[2]])\n"
    "counters = torch._dynamo.utils.counters['inductor']\n"
    "print(json.dumps({'status': status, 'hit': counters['fxgraph_cache_hit'],\n"
    "                  'miss': counters['fxgraph_cache_miss']}))\n"
)
OVERRIDE = ("trainer.steps_per_loop=2,trainer.summary_interval=2,runtime.enable_xla=true,"
            "runtime.steps_per_graph=2,trainer.train_steps=")


def _train(model_dir, steps, inductor_dir):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir)}  # empty: a new machine
    done = subprocess.run([sys.executable, "-c", RUN, str(model_dir), f"{OVERRIDE}{steps}"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_resumed_compiled_run_on_a_new_machine_reuses_the_compiled_code(tmp_path):
    first = _train(tmp_path / "run", 4, tmp_path / "inductor_a")
    assert first["status"] == 0 and first["miss"] > 0 and first["hit"] == 0
    assert (tmp_path / "run" / CACHE_FILE).stat().st_size > 0
    resumed = _train(tmp_path / "run", 8, tmp_path / "inductor_b")
    assert resumed["status"] == 0
    assert resumed["hit"] >= first["miss"] and resumed["miss"] == 0  # no code generated
    records = [json.loads(line) for line in
               (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 8]


def test_damaged_artifacts_cost_a_compile_not_the_run(tmp_path, caplog):
    (tmp_path / CACHE_FILE).write_bytes(b"not torch.compiler artifacts")
    with caplog.at_level(logging.WARNING, logger="torchgarden"):
        assert load_compile_cache(str(tmp_path)) == 0
    assert f"compile artifacts {tmp_path / CACHE_FILE} not used" in caplog.text
    assert load_compile_cache(str(tmp_path / "absent")) == 0
