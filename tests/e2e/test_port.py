"""``torchgarden port FILE.yaml``: a Model Garden-style experiment YAML key by key, the config
it resolves to, and a training run on it."""

from __future__ import annotations

import os
import textwrap

import yaml

from torchgarden.cli.main import main

# Written for this test in the shape of Model Garden's experiment YAMLs.
_MG_YAML = textwrap.dedent("""\
    # --experiment_type=toy_regression
    runtime:
      distribution_strategy: 'mirrored'
      all_reduce_alg: nccl
      mixed_precision_dtype: 'float32'
    task:
      train_data:
        global_batch_size: 16
    trainer:
      train_steps: 2
      steps_per_loop: 1
      summary_interval: 1
      checkpoint_interval: 2
      validation_interval: 2
      validation_steps: 1
      train_tf_while_loop: true
      optimizer_config:
        optimizer:
          type: 'adamw'
          adamw:
            weight_decay_rate: 0.05
            include_in_weight_decay: '.*(kernel|weight):0$'
            gradient_clip_norm: 0.0
        learning_rate:
          type: 'cosine'
          cosine:
            initial_learning_rate: 0.01
            decay_steps: 2
        warmup:
          type: 'linear'
          linear:
            warmup_steps: 1
    """)


def _table(out: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in out.splitlines():
        parts = line[2:].split(None, 2) if line.startswith("# ") else []
        if len(parts) >= 2 and parts[1] in ("honoured", "mapped", "ignored", "refused"):
            rows[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return rows


def test_port_prints_the_resolved_config_and_every_key(tmp_path, capsys):
    path = tmp_path / "mg.yaml"
    path.write_text(_MG_YAML)
    assert main(["port", str(path)]) == 0  # the experiment named in the file's comment
    out = capsys.readouterr().out
    config = yaml.safe_load(out)  # the table is comments: the output is the config
    assert config["runtime"]["distribution_strategy"] == "auto"
    adamw = config["trainer"]["optimizer_config"]["optimizer"]["adamw"]
    assert adamw["include_in_weight_decay"] == [".*(kernel|weight):0$"]
    assert adamw["gradient_clip_norm"] == 0.0
    rows = _table(out)
    assert len(rows) == 20  # every leaf key of the file
    assert rows["runtime.distribution_strategy"][0] == "mapped"
    assert "torchrun --nproc_per_node" in rows["runtime.distribution_strategy"][1]
    assert rows["runtime.all_reduce_alg"][0] == "ignored"
    assert rows["trainer.train_tf_while_loop"][0] == "ignored"
    assert rows["trainer.optimizer_config.optimizer.adamw.include_in_weight_decay"][0] == "mapped"
    assert rows["trainer.train_steps"] == ("honoured", "")


def test_refused_keys_are_listed_each_and_the_rest_still_judged(tmp_path, capsys):
    path = tmp_path / "mg.yaml"
    path.write_text(_MG_YAML.replace("  train_steps: 2", "  train_stepz: 2\n  train_steps: 2"))
    assert main(["port", str(path), "--experiment", "toy_regression"]) == 2
    captured = capsys.readouterr()
    rows = _table(captured.out)
    assert rows["trainer.train_stepz"][0] == "refused"
    assert "did you mean 'trainer.train_steps'" in rows["trainer.train_stepz"][1]
    assert rows["runtime.all_reduce_alg"][0] == "ignored"
    assert rows["trainer.train_steps"][0] == "honoured"
    assert "task:" not in captured.out  # no config is printed for a refused file
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("torchgarden: error: ")
    assert "trainer.train_stepz" in err


def test_a_key_validation_refuses_is_named_and_dropped(tmp_path, capsys):
    path = tmp_path / "mg.yaml"
    path.write_text(_MG_YAML.replace("steps_per_loop: 1", "steps_per_loop: 2"))
    assert main(["port", str(path)]) == 2
    rows = _table(capsys.readouterr().out)
    assert rows["trainer.summary_interval"][0] == "refused"
    assert "multiple of trainer.steps_per_loop" in rows["trainer.summary_interval"][1]
    assert rows["trainer.steps_per_loop"][0] == "honoured"


def test_the_experiment_comes_from_the_file_or_is_asked_for(tmp_path, capsys):
    folder = tmp_path / "toy_regression"
    folder.mkdir()
    path = folder / "mg.yaml"
    path.write_text(_MG_YAML.replace("# --experiment_type=toy_regression\n", ""))
    assert main(["port", str(path)]) == 0  # from the directory's name
    capsys.readouterr()
    bare = tmp_path / "bare.yaml"
    bare.write_text("trainer:\n  train_steps: 2\n")
    assert main(["port", str(bare)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot tell which experiment" in err and "--experiment" in err
    assert "toy_regression" in err and len(err.splitlines()) == 1


def test_what_model_garden_leaves_unset_or_untyped_is_refused(tmp_path, capsys):
    path = tmp_path / "mg.yaml"
    path.write_text(textwrap.dedent("""\
        trainer:
          optimizer_config:
            learning_rate:
              type: cosine
              cosine:
                decay_steps: 3
        """))
    assert main(["port", str(path), "--experiment", "toy_regression"]) == 2
    rows = _table(capsys.readouterr().out)
    key = "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate"
    assert rows[key][0] == "refused" and "must be set" in rows[key][1]
    assert rows["trainer.optimizer_config.learning_rate.cosine.decay_steps"][0] == "honoured"
    path.write_text("trainer:\n  optimizer_config:\n    optimizer:\n      type: null\n")
    assert main(["port", str(path), "--experiment", "toy_regression"]) == 2
    rows = _table(capsys.readouterr().out)
    assert rows["trainer.optimizer_config.optimizer.type"][0] == "refused"
    assert "is not set (Model Garden raises too)" in rows["trainer.optimizer_config.optimizer.type"][1]


def test_train_runs_on_the_model_garden_yaml_and_says_each_note_once(tmp_path, capsys):
    path = tmp_path / "mg.yaml"
    path.write_text(_MG_YAML)
    model_dir = str(tmp_path / "run")
    assert main(["train", "--experiment", "toy_regression", "--config_file", str(path),
                 "--model_dir", model_dir]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("torchgarden: note: ")]
    assert len(notes) == len(set(notes)) == 4  # strategy, all_reduce_alg, while loop, regex
    assert os.path.isdir(os.path.join(model_dir, "ckpt-2"))
