"""Model Garden's config tests (params_dict_test, base_config_test, oneof_test) replayed
through torchgarden's API: where the behaviour matches, and the documented differences
(docs/porting_from_model_garden.md §6, "Configs")."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from torchgarden.config import Config, ConfigError, OneOfConfig
from torchgarden.config.errors import ConfigKeyError, ConfigTypeError


@dataclasses.dataclass
class DumpConfig1(Config):
    a: int = 1
    b: str = "text"


@dataclasses.dataclass
class DumpConfig2(Config):
    c: int = 2
    d: str = "text"
    e: DumpConfig1 = dataclasses.field(default_factory=DumpConfig1)
    key: Any = None


@dataclasses.dataclass
class DumpConfig5(Config):
    z: tuple[str] = ("a",)
    pair: tuple[int, int] = (1, 2)
    c: list[int] = dataclasses.field(default_factory=lambda: [1])


@pytest.mark.parametrize("key", ["_locked", "_restrictions", "aa"])
def test_unknown_and_reserved_keys_raise_key_error(key):
    with pytest.raises(KeyError) as error:
        DumpConfig2().override({key: True})
    assert isinstance(error.value, ConfigError) and key in str(error.value)
    assert not str(error.value).startswith("'")  # One readable line, not KeyError's repr.


@pytest.mark.parametrize("value", [lambda x: x, object(), {1, 2}, frozenset()])
def test_unsupported_values_raise_type_error(value):
    with pytest.raises(TypeError) as error:
        DumpConfig2().override({"key": value})
    assert isinstance(error.value, ConfigTypeError) and "key" in str(error.value)


def test_wrong_value_types_raise_type_error():
    with pytest.raises(TypeError, match="c expects int"):
        DumpConfig2().override({"c": "two"})
    with pytest.raises(TypeError, match=r"c\[0\] expects int"):
        DumpConfig5().override({"c": [[1]]})  # Model Garden: "Invalid sequence".


def test_a_locked_config_refuses_changes_with_value_error():
    cfg = DumpConfig2().lock()
    with pytest.raises(ValueError, match="locked"):
        cfg.override({"c": 3})
    with pytest.raises(ValueError, match="locked"):
        cfg.c = 3
    with pytest.raises(ValueError, match="locked; cannot delete 'c'"):
        del cfg.c
    assert cfg.c == 2


def test_deleting_a_field_is_refused_before_lock_too():
    cfg = DumpConfig2()
    with pytest.raises(KeyError, match="cannot delete DumpConfig2.e"):
        del cfg.e
    assert isinstance(cfg.e, DumpConfig1)  # Still there (Model Garden would remove it).


@pytest.mark.parametrize("bad", [True, 5, ["a"], {"x": 1}])
def test_a_type_key_of_the_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="_type expects a class name"):
        DumpConfig2().override({"_type": bad})
    with pytest.raises(TypeError, match=r"e\._type expects a class name"):
        DumpConfig2().override({"e": {"_type": bad}})


@pytest.mark.parametrize("value", [("str", 1, 2.3, None), [("a", 1)], ({"a": 42},)])
def test_tuples_stay_tuples_in_any_fields_and_as_dict(value):
    cfg = DumpConfig2().override({"key": value})
    assert cfg.key == value and type(cfg.key) is type(value)
    assert cfg.as_dict()["key"] == value and type(cfg.as_dict()["key"]) is type(value)


def test_a_single_argument_tuple_takes_any_length_and_empty():
    cfg = DumpConfig5().override({"z": ["a", "b", "c"]})
    assert cfg.z == ("a", "b", "c")
    assert DumpConfig5().override({"z": ()}).z == ()


def test_a_fixed_length_tuple_keeps_its_length():
    with pytest.raises(ConfigTypeError, match="expected 2 items, got 3"):
        DumpConfig5().override({"pair": [1, 2, 3]})


def test_tuples_come_back_from_yaml_as_lists_except_in_tuple_fields(tmp_path):
    cfg = DumpConfig2().override({"key": (1, 2)})
    path = tmp_path / "c.yaml"
    cfg.to_yaml(path)
    assert DumpConfig2.from_yaml(path).key == [1, 2]
    cfg5 = DumpConfig5().override({"z": ("p", "q")})
    cfg5.to_yaml(path)
    assert DumpConfig5.from_yaml(path).z == ("p", "q")


def test_a_oneof_with_an_invalid_type_is_a_value_error_with_the_closest():
    @dataclasses.dataclass
    class Choice(OneOfConfig):
        type: str | None = "first"
        first: DumpConfig1 = dataclasses.field(default_factory=DumpConfig1)
        second: DumpConfig2 = dataclasses.field(default_factory=DumpConfig2)

    with pytest.raises(ValueError, match="'frist' is not one of first, second; did you mean"):
        Choice().override({"type": "frist"})
    assert Choice().as_dict() == {"type": "first", "first": {"a": 1, "b": "text"}}


def test_nested_config_override_merges_and_replace_copies():
    cfg = DumpConfig2()
    cfg.override({"e": {"a": 2, "b": "new text"}})
    assert cfg.e == DumpConfig1(a=2, b="new text")
    new = cfg.replace(e={"a": 3})
    assert new.e.a == 3 and cfg.e.a == 2


def test_config_errors_are_one_line_and_read_like_messages():
    error = ConfigKeyError("unknown key 'x'\n more", key="x")
    assert str(error) == "unknown key 'x' more" and error.key == "x"


def test_a_failed_restriction_is_a_value_error_naming_both_keys():
    @dataclasses.dataclass
    class Restricted(DumpConfig2):
        RESTRICTIONS = ["e.a < c"]  # noqa: RUF012

    Restricted().validate()
    with pytest.raises(ValueError, match=r"e\.a < c") as error:
        Restricted(c=0).validate()
    assert not isinstance(error.value, KeyError)  # Model Garden raises KeyError here.


# ----------------------------------------------------- framework sections (issue 21, item 2)
# Model Garden's RuntimeConfig and TrainerConfig fields with their defaults, as a dumped
# params.yaml holds them: every key is accepted, with Model Garden's meaning or a notice.
_MG_RUNTIME = {
    "distribution_strategy": "mirrored", "enable_xla": False, "gpu_thread_mode": None,
    "dataset_num_private_threads": None, "per_gpu_thread_count": 0, "tpu": None, "num_gpus": 0,
    "worker_hosts": None, "task_index": -1, "all_reduce_alg": None, "num_packs": 1,
    "mixed_precision_dtype": None, "loss_scale": None, "run_eagerly": False,
    "batchnorm_spatial_persistent": False, "tpu_enable_xla_dynamic_padder": None,
    "num_cores_per_replica": 1, "default_shard_dim": -1, "use_tpu_mp_strategy": False,
}
_MG_TRAINER = {
    "train_tf_while_loop": True, "train_tf_function": True, "eval_tf_function": True,
    "eval_tf_while_loop": False, "allow_tpu_summary": False, "steps_per_loop": 1000,
    "summary_interval": 1000, "checkpoint_interval": 1000, "max_to_keep": 5,
    "continuous_eval_timeout": 3600, "train_steps": 0, "validation_steps": -1,
    "validation_interval": 1000, "best_checkpoint_export_subdir": "",
    "best_checkpoint_eval_metric": "", "best_checkpoint_metric_comp": "higher",
    "loss_upper_bound": 1e6, "recovery_begin_steps": 0, "recovery_max_trials": 0,
    "validation_summary_subdir": "validation", "preemption_on_demand_checkpoint": True,
}


def test_every_model_garden_runtime_and_trainer_key_is_accepted_with_a_notice_when_read():
    from torchgarden.config import ExperimentConfig
    from torchgarden.config.notices import collect_notices

    with collect_notices() as notes:
        config = ExperimentConfig().override(
            {"runtime": _MG_RUNTIME, "trainer": _MG_TRAINER}).validate()
    said = {n.key: n.action for n in notes}
    # Model Garden's mirrored with num_gpus 0 runs on the CPU: so does this.
    assert config.runtime.distribution_strategy == "auto" and config.runtime.device == "cpu"
    assert said["runtime.distribution_strategy"] == said["runtime.num_gpus"] == "mapped"
    ignored = {k for k, action in said.items() if action == "ignored"}
    assert ignored == {f"runtime.{k}" for k in (
        "gpu_thread_mode", "dataset_num_private_threads", "per_gpu_thread_count", "tpu",
        "worker_hosts", "task_index", "all_reduce_alg", "num_packs", "run_eagerly",
        "batchnorm_spatial_persistent", "tpu_enable_xla_dynamic_padder",
        "num_cores_per_replica", "default_shard_dim", "use_tpu_mp_strategy")} | {
        f"trainer.{k}" for k in ("train_tf_while_loop", "train_tf_function",
                                 "eval_tf_function", "eval_tf_while_loop", "allow_tpu_summary")}
    for key, value in _MG_TRAINER.items():  # the rest keep Model Garden's name and value
        if f"trainer.{key}" not in said:
            assert getattr(config.trainer, key) == value, key


@pytest.mark.parametrize("strategy, expected", [
    ("mirrored", "auto"), ("multi_worker_mirrored", "auto"), ("tpu", "auto"),
    ("one_device", "single"), ("off", "off")])
def test_model_garden_strategies_run_as_ddp_or_one_process(strategy, expected):
    from torchgarden.config import ExperimentConfig
    from torchgarden.config.notices import collect_notices

    with collect_notices() as notes:
        config = ExperimentConfig().override({"runtime": {"distribution_strategy": strategy}})
    assert config.validate().runtime.distribution_strategy == expected
    if strategy != expected:
        assert "torchrun --nproc_per_node" in str(notes[0])


def test_num_gpus_and_keras_policy_names_keep_their_model_garden_meaning():
    from torchgarden.config import ExperimentConfig

    with pytest.warns(UserWarning):
        config = ExperimentConfig().override({"runtime": {
            "num_gpus": 8, "mixed_precision_dtype": "mixed_bfloat16", "loss_scale": "dynamic"}})
    assert config.runtime.device == "auto" and config.runtime.mixed_precision_dtype == "bfloat16"
    from torchgarden.config.notices import collect_notices

    with collect_notices(), pytest.raises(ConfigError, match="num_gpus and runtime.device set"):
        ExperimentConfig().override({"runtime": {"num_gpus": 0, "device": "cuda"}})
    with pytest.raises(ConfigError, match="parameter_server' is not one of"):
        ExperimentConfig().override("runtime.distribution_strategy=parameter_server").validate()


def test_model_garden_python_tuple_tag_reads_as_a_tuple_and_no_other_python_tag(tmp_path):
    from torchgarden.config import load_yaml_file

    path = tmp_path / "params.yaml"
    path.write_text("task:\n  feature_shape: !!python/tuple\n  - 32\n  - 224\n")
    assert load_yaml_file(path) == {"task": {"feature_shape": (32, 224)}}
    path.write_text("task: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(ConfigError, match="could not determine a constructor"):
        load_yaml_file(path)


def test_num_gpus_beside_a_strategy_that_does_not_read_it_is_ignored_as_there():
    from torchgarden.config import ExperimentConfig
    from torchgarden.config.notices import collect_notices

    with collect_notices() as notes:  # a TPU job's dumped params.yaml: num_gpus 0, on TPU
        config = ExperimentConfig().override(
            {"runtime": {"distribution_strategy": "tpu", "num_gpus": 0}})
    assert config.runtime.device == "auto"
    assert {n.key: n.action for n in notes}["runtime.num_gpus"] == "ignored"


def test_differential_privacy_config_null_is_ignored_and_a_setting_refused():
    from torchgarden.config import ExperimentConfig
    from torchgarden.config.notices import collect_notices

    with collect_notices() as notes:
        ExperimentConfig().override({"task": {"differential_privacy_config": None}})
    assert [n.action for n in notes] == ["ignored"]
    with pytest.raises(ConfigError, match="task.differential_privacy_config: differentially"):
        ExperimentConfig().override(
            {"task": {"differential_privacy_config": {"clipping_norm": 1.0}}})
