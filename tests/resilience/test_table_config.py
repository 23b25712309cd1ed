"""Adversarial table, config group: flags, YAML files, overrides, values, imports.

Every row is exit 2 with one ``torchgarden: error:`` line naming the key or file, and a
model_dir left as it was (see ``table.py``).
"""

from __future__ import annotations

import pytest
from table import DIGITS, SHORT, TOY, Case, run_case, write

BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
    for p, k in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh")
)


def toy(*override: str) -> callable:
    return lambda d, t: [*TOY, "--model_dir", d, "--params_override", ",".join(override)]


def toy_file(name: str, text: str | bytes) -> callable:
    return lambda d, t: [*TOY, "--model_dir", d, "--config_file", write(f"{t}/{name}", text)]


def digits(*override: str, mode: str = "train") -> callable:
    return lambda d, t: [*DIGITS[:-1], mode, "--model_dir", d, "--params_override",
                         ",".join((SHORT, *override))]


CASES = [
    # ------------------------------------------------------------- YAML files and strings
    Case("malformed_yaml_file", toy_file("bad.yaml", "trainer:\n  train_steps: [1, 2\n"),
         ("bad.yaml", "line")),
    Case("malformed_yaml_override", toy("{trainer: {train_steps: 5"),
         ("override string", "malformed YAML", "line")),
    Case("yaml_alias_bomb", toy_file("bomb.yaml", BOMB),
         ("bomb.yaml", "expands to more than", "aliases")),
    Case("yaml_nested_too_deep", toy_file("deep.yaml", "a: " + "[" * 5000 + "]" * 5000),
         ("deep.yaml", "nests deeper than 64 levels")),
    Case("yaml_recursive_alias", toy_file("loop.yaml", "task: &a {name: *a}\n"),
         ("loop.yaml", "cannot be recursive")),
    Case("yaml_duplicate_key", toy_file("dup.yaml", "trainer:\n  train_steps: 5\n"
                                        "  train_steps: 7\n"),
         ("dup.yaml", "'train_steps' appears twice", "lines 2 and 3")),
    Case("config_file_is_binary", toy_file("weights.yaml", bytes(range(128, 256)) * 8),
         ("weights.yaml", "not UTF-8 text")),
    Case("config_file_is_a_directory",
         lambda d, t: [*TOY, "--model_dir", d, "--config_file", t],
         ("cannot read config file", "Is a directory")),
    Case("config_file_holds_a_list", toy_file("list.yaml", "- 1\n- 2\n"),
         ("list.yaml", "must hold a mapping", "list")),
    Case("override_yaml_bomb_inline", toy("{a: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,"
                                          "*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,"
                                          "*b], d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], e: [*d,*d,"
                                          "*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,"
                                          "*d,*d,*d,*d,*d]}"),
         ("override string", "expands to more than")),
    Case("missing_config_file", lambda d, t: [*TOY, "--model_dir", d, "--config_file",
                                              f"{t}/nope.yaml"], ("nope.yaml", "does not exist")),
    # ------------------------------------------------------------- keys
    Case("unknown_key", toy("trainer.train_stpes=10"),
         ("trainer.train_stpes", "trainer.train_steps"), "existing"),
    Case("unknown_key_in_file", toy_file("c.yaml", "task:\n  train_data:\n    global_bath_size: 4\n"),
         ("task.train_data.global_bath_size", "global_batch_size")),
    Case("unknown_key_deep", toy("trainer.optimizer_config.optimizer.sgd.momentm=0.5"),
         ("trainer.optimizer_config.optimizer.sgd.momentm", "momentum")),
    Case("reserved_key_locked", toy("_locked=false"), ("_locked",)),
    Case("key_conflicts_with_a_value", toy("trainer=1,trainer.train_steps=2"), ("trainer",)),
    Case("index_syntax", toy("task.train_data.input_path[1]=x"),
         ("task.train_data.input_path[i] sets indices [1]", "[...]")),
    Case("override_without_value", toy("trainer.train_steps"), ("trainer.train_steps", "key=value")),
    Case("unterminated_quote", toy("task.name='abc"), ("unterminated", "quote")),
    Case("override_of_undecodable_bytes", toy("task.name=\udcff\udcfe"),
         ("override", "is not UTF-8 text")),
    Case("nested_list_in_pairs", toy("task.init_checkpoint_modules=[[a]]"), ("nested lists",)),
    # ------------------------------------------------------------- types
    Case("wrong_type", toy("trainer.train_steps=ten"), ("trainer.train_steps", "int")),
    Case("wrong_type_in_file", toy_file("c.yaml", "runtime:\n  deterministic: [yes]\n"),
         ("runtime.deterministic", "bool")),
    Case("bool_for_int", toy("trainer.train_steps=true"), ("trainer.train_steps", "int", "True")),
    Case("list_for_int", toy("trainer.train_steps=[1, 2]"), ("trainer.train_steps", "expects int")),
    Case("scalar_for_list", toy("trainer.preemption_signals=SIGTERM"),
         ("trainer.preemption_signals", "wrap it in brackets")),
    Case("type_key_true", toy("_type=true"), ("_type", "class name", "True (bool)")),
    Case("type_key_int_in_file", toy_file("t.yaml", "task:\n  _type: 5\n"),
         ("task._type", "class name", "5 (int)")),
    Case("type_key_unknown_class", toy("task._type=my_pkg.MyTaskConfig"),
         ("task._type", "my_pkg.MyTaskConfig", "--import my_pkg")),
    Case("type_key_not_a_subclass",
         toy("task._type=torchgarden.config.runtime.RuntimeConfig"),
         ("task._type", "RuntimeConfig is not a subclass of TaskConfig")),
    # ------------------------------------------------------------- values
    Case("bad_distribution_strategy", toy("runtime.distribution_strategy=parameter_server"),
         ("runtime.distribution_strategy", "'parameter_server'", "ddp")),
    Case("bad_mixed_precision_dtype", toy("runtime.mixed_precision_dtype=fp16"),
         ("runtime.mixed_precision_dtype", "float16")),
    Case("bad_optimizer_type", toy("trainer.optimizer_config.optimizer.type=adamm"),
         ("trainer.optimizer_config.optimizer", "adamm", "adam")),
    Case("bad_learning_rate_type", toy("trainer.optimizer_config.learning_rate.type=cosin"),
         ("trainer.optimizer_config.learning_rate", "cosin", "cosine")),
    Case("bad_metric_comp", toy("trainer.best_checkpoint_metric_comp=bigger"),
         ("trainer.best_checkpoint_metric_comp", "higher", "lower"), "existing"),
    Case("negative_train_steps", toy("trainer.train_steps=-5"), ("trainer.train_steps", ">= 0", "-5")),
    Case("zero_steps_per_loop", toy("trainer.steps_per_loop=0"), ("trainer.steps_per_loop", "> 0")),
    Case("summary_loop_interval_mismatch", toy("trainer.summary_interval=15"),
         ("trainer.summary_interval", "trainer.steps_per_loop", "set it to 10")),
    Case("zero_max_to_keep", toy("trainer.max_to_keep=0"), ("trainer.max_to_keep", ">= 1")),
    Case("zero_validation_steps", toy("trainer.validation_steps=0"),
         ("trainer.validation_steps", "-1 for the whole dataset")),
    Case("zero_accumulation", toy("trainer.gradient_accumulation_steps=0"),
         ("trainer.gradient_accumulation_steps", ">= 1")),
    Case("negative_workers", toy("task.train_data.num_workers=-1"),
         ("task.train_data.num_workers", ">= 0")),
    Case("persistent_workers_without_workers", toy("task.train_data.persistent_workers=true"),
         ("task.train_data.persistent_workers", "num_workers > 0")),
    Case("negative_loss_scale", toy("runtime.loss_scale=-1"), ("runtime.loss_scale", "positive")),
    Case("bad_compile_mode", toy("runtime.compile_mode=fastest"),
         ("runtime.compile_mode", "'fastest'", "max-autotune")),
    Case("zero_threads", toy("runtime.num_threads=0"), ("runtime.num_threads", ">= 1")),
    Case("export_subdir_outside_model_dir", toy("trainer.best_checkpoint_export_subdir=../best"),
         ("trainer.best_checkpoint_export_subdir", "inside model_dir", "'../best'")),
    Case("summary_subdir_absolute", toy("trainer.validation_summary_subdir=/tmp/elsewhere"),
         ("trainer.validation_summary_subdir", "inside model_dir")),
    Case("negative_seed", toy("runtime.seed=-1"), ("runtime.seed", "[0, 2**32 - 1]")),
    Case("init_modules_without_init_checkpoint", toy("task.init_checkpoint_modules=[backbone]"),
         ("task.init_checkpoint_modules", "task.init_checkpoint is empty")),
    Case("nan_loss_upper_bound", toy("trainer.loss_upper_bound=nan"),
         ("trainer.loss_upper_bound", "is NaN")),
    Case("nan_learning_rate", toy("trainer.optimizer_config.learning_rate.constant."
                                  "learning_rate=nan"),
         ("trainer.optimizer_config.learning_rate.constant.learning_rate", "is NaN")),
    Case("negative_learning_rate", toy(SHORT, "trainer.optimizer_config.learning_rate.constant."
                                       "learning_rate=-1"),
         ("trainer.optimizer_config.learning_rate.constant.learning_rate is -1.0",
          "finite and >= 0")),
    Case("negative_initial_learning_rate",
         toy(SHORT, "trainer.optimizer_config.learning_rate.type=cosine",
             "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate=-0.5"),
         ("trainer.optimizer_config.learning_rate.cosine.initial_learning_rate is -0.5",
          "finite and >= 0")),
    Case("infinite_initial_learning_rate",
         toy(SHORT, "trainer.optimizer_config.learning_rate.type=polynomial",
             "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=inf"),
         ("trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate is inf",)),
    Case("infinite_stepwise_value",
         toy(SHORT, "trainer.optimizer_config.learning_rate.type=stepwise",
             "trainer.optimizer_config.learning_rate.stepwise.boundaries=[5]",
             "trainer.optimizer_config.learning_rate.stepwise.values=[0.1,inf]"),
         ("trainer.optimizer_config.learning_rate.stepwise.values is [0.1, inf]",)),
    Case("negative_warmup_learning_rate",
         toy(SHORT, "trainer.optimizer_config.warmup.type=linear",
             "trainer.optimizer_config.warmup.linear.warmup_learning_rate=-0.1"),
         ("trainer.optimizer_config.warmup.linear.warmup_learning_rate is -0.1",)),
    Case("schedule_fields_giving_a_negative_rate",
         toy(SHORT, "trainer.optimizer_config.learning_rate.type=cosine",
             "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate=0.1",
             "trainer.optimizer_config.learning_rate.cosine.decay_steps=10",
             "trainer.optimizer_config.learning_rate.cosine.alpha=-1"),
         ("trainer.optimizer_config.learning_rate.cosine:", "alpha=-1.0",
          "give the learning rate -0.1 at step")),
    Case("top_level_train_steps_key", toy_file("steps.yaml", "train_steps: 5\n"),
         ("unknown key 'train_steps'", "did you mean 'trainer.train_steps'?")),
    Case("negative_momentum", toy(SHORT, "trainer.optimizer_config.optimizer.sgd.momentum=-1"),
         ("trainer.optimizer_config.optimizer.sgd", "Invalid momentum value: -1.0")),
    Case("negative_hidden_size", toy("task.hidden_size=-3"), ("task.hidden_size", ">= 0", "-3")),
    Case("zero_width_input", toy("task.in_features=0"), ("task.in_features", ">= 1")),
    Case("zero_width_layer", digits("task.model.hidden_sizes=[0]"),
         ("task.model.hidden_sizes", "positive widths", "[0]")),
    Case("negative_width_layer", digits("task.model.hidden_sizes=[-4]"),
         ("task.model.hidden_sizes", "[-4]")),
    Case("label_smoothing_above_1", digits("task.losses.label_smoothing=2.0"),
         ("task.losses.label_smoothing", "[0, 1]", "2.0")),
    Case("dropout_of_1", digits("task.model.dropout_rate=1.0"),
         ("task.model.dropout_rate", "[0, 1)")),
    Case("negative_input_size", digits("task.model.input_size=[8, -8, 1]"),
         ("task.model.input_size", "positive")),
    Case("bad_data_source", digits("task.train_data.source=npzz"),
         ("task.train_data.source", "npzz", "did you mean 'npz'?")),
    Case("npz_source_without_path", digits("task.train_data.source=npz"),
         ("task.train_data.input_path", "is required")),
    Case("uncatchable_preemption_signal", toy("trainer.preemption_signals=[SIGKILL]"),
         ("trainer.preemption_signals", "SIGKILL cannot be caught", "SIGUSR1")),
    Case("unknown_signal_name", toy("trainer.preemption_signals=[SIGTERM,SIGFOO]"),
         ("trainer.preemption_signals", "SIGFOO", "SIGUSR1"), "existing"),
    Case("device_gpu", toy("runtime.device=gpu"), ("runtime.device", "'gpu'", "did you mean 'cuda'?")),
    Case("device_gpu_index", toy("runtime.device=gpu:1"), ("did you mean 'cuda:1'?",)),
    Case("device_tpu", toy("runtime.device=tpu"), ("did you mean 'xla'?",)),
    Case("unavailable_device", toy(SHORT, "runtime.device=cuda:0"),
         ("runtime.device", "CUDA is not available", "cpu")),
    Case("validation_batch_of_zero",
         lambda d, t: [*TOY[:-1], "train_and_eval", "--model_dir", d, "--params_override",
                       f"{SHORT},task.validation_data.global_batch_size=0"],
         ("task.validation_data.global_batch_size", "positive")),
    Case("best_metric_typo", digits("trainer.best_checkpoint_eval_metric=acuracy"),
         ("trainer.best_checkpoint_eval_metric", "'acuracy'", "did you mean 'accuracy'?")),
    Case("best_metric_typo_on_resume",
         digits("trainer.train_steps=20,task.model.hidden_sizes=[8],"
                "trainer.best_checkpoint_eval_metric=top5_accuracy"),
         ("trainer.best_checkpoint_eval_metric", "top_5_accuracy"), "trained_digits"),
    # ------------------------------------------------------------- command line
    Case("unknown_experiment", lambda d, t: ["train", "--experiment", "image_clasification",
                                             "--model_dir", d],
         ("image_clasification", "Did you mean 'image_classification'?")),
    Case("unknown_mode", lambda d, t: [*TOY[:-1], "train_and_evaluate", "--model_dir", d],
         ("--mode", "train_and_evaluate", "train_and_eval")),
    Case("eval_mode_given_to_train", lambda d, t: [*TOY[:-1], "eval", "--model_dir", d],
         ("`torchgarden train` runs", "--mode eval is a mode of `torchgarden eval`")),
    Case("train_mode_given_to_eval",
         lambda d, t: ["eval", "--experiment", "toy_regression", "--mode", "train",
                       "--model_dir", d],
         ("`torchgarden eval` runs --mode eval or continuous_eval", "`torchgarden train`")),
    Case("eval_mode_typo", lambda d, t: ["eval", "--experiment", "toy_regression", "--mode",
                                         "evaluate", "--model_dir", d],
         ("--mode 'evaluate'", "Did you mean 'eval'?")),
    Case("config_key_given_as_a_flag",
         lambda d, t: [*TOY, "--model_dir", d, "--train_steps", "5"],
         ("`torchgarden train` has no flag --train_steps",
          "--params_override trainer.train_steps=5")),
    Case("task_key_given_as_a_flag",
         lambda d, t: [*TOY, "--model_dir", d, "--hidden_size=3"],
         ("no flag --hidden_size", "--params_override task.hidden_size=3")),
    Case("dashed_flag", lambda d, t: [*TOY, "--model-dir", d],
         ("`torchgarden train` has no flag --model-dir", "did you mean --model_dir?")),
    Case("misspelt_flag", lambda d, t: [*TOY, "--model_dri", d],
         ("no flag --model_dri", "did you mean --model_dir?")),
    Case("model_dir_without_its_flag", lambda d, t: ["eval", d],
         ("`torchgarden eval` takes no argument", "did you mean --model_dir")),
    Case("misspelt_command", lambda d, t: ["trian", "--model_dir", d],
         ("unknown command 'trian'", "did you mean 'train'?")),
    Case("flag_without_its_value", lambda d, t: [*TOY, "--model_dir"],
         ("`torchgarden train`", "--model_dir: expected one argument")),
    Case("eval_of_another_experiments_run",
         lambda d, t: ["eval", "--experiment", "image_classification", "--model_dir", d],
         ("--experiment image_classification does not match --model_dir",
          "trained as experiment toy_regression", "leave --experiment out"), "trained"),
    Case("missing_experiment", lambda d, t: ["train", "--model_dir", d],
         ("--experiment", "torchgarden list")),
    Case("missing_model_dir", lambda d, t: [*TOY], ("--model_dir", "required")),
    Case("unknown_import_module",
         lambda d, t: ["train", "--import", "no_such_project.registry", *TOY[1:], "--model_dir", d],
         ("--import no_such_project.registry", "PYTHONPATH")),
    Case("missing_import_file",
         lambda d, t: ["train", "--import", f"{t}/nope.py", *TOY[1:], "--model_dir", d],
         ("nope.py", "not found")),
    Case("import_file_with_a_syntax_error",
         lambda d, t: ["train", "--import", write(f"{t}/broken_project.py", "x = (\n"),
                       *TOY[1:], "--model_dir", d],
         ("--import", "broken_project.py, line", "never closed")),
    Case("import_file_needing_a_missing_package",
         lambda d, t: ["train", "--import", write(f"{t}/needy_project.py",
                                                  "import no_such_dependency_xyz\n"),
                       *TOY[1:], "--model_dir", d],
         ("--import", "needy_project.py", "no_such_dependency_xyz")),
    Case("import_file_with_an_invalid_module_name",
         lambda d, t: ["train", "--import", write(f"{t}/my-project.py", ""), *TOY[1:],
                       "--model_dir", d],
         ("my-project", "not a valid module name")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_config_row(case, tmp_path, trained, capsys, caplog, monkeypatch):
    print(run_case(case, str(tmp_path), trained, capsys, caplog, monkeypatch))


def test_the_table_has_at_least_120_unique_rows_in_four_groups():
    import test_table_checkpoint
    import test_table_data
    import test_table_model_dir

    groups = [CASES, test_table_model_dir.CASES, test_table_data.CASES,
              test_table_checkpoint.CASES]
    rows = [case.name for group in groups for case in group]
    assert len(rows) >= 120 and len(set(rows)) == len(rows)
    assert all(len(group) >= 15 for group in groups)
