"""Registries: names, errors with the closest match, entry-point plug-ins."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from torchgarden import registry
from torchgarden.config import ExperimentConfig, TaskConfig
from torchgarden.core import Task


def test_builtins_are_listed_and_each_get_is_a_fresh_config():
    names = registry.list_experiments()
    assert {"image_classification", "toy_regression"} <= set(names)
    a = registry.get_experiment("toy_regression")
    a.trainer.train_steps = 7
    assert registry.get_experiment("toy_regression").trainer.train_steps == 100


def test_unknown_experiment_lists_registered_and_closest():
    with pytest.raises(registry.RegistryError) as info:
        registry.get_experiment("toy_regresion")
    message = str(info.value)
    assert "Did you mean 'toy_regression'?" in message
    assert "image_classification" in message


def test_duplicate_registration_is_refused():
    @registry.register_experiment("test_registry/dup")
    def first() -> ExperimentConfig:
        return ExperimentConfig()

    with pytest.raises(registry.RegistryError, match="more than once"):
        registry.register_experiment("test_registry/dup")(lambda: ExperimentConfig())


def test_task_lookup_is_by_exact_config_class():
    @dataclasses.dataclass
    class ParentConfig(TaskConfig):
        pass

    @dataclasses.dataclass
    class ChildConfig(ParentConfig):
        pass

    @registry.register_task(ParentConfig)
    class ParentTask(Task):
        pass

    assert isinstance(registry.get_task(ParentConfig(), logging_dir="/tmp/x"), ParentTask)
    assert registry.get_task(ParentConfig(), logging_dir="/tmp/x").logging_dir == "/tmp/x"
    with pytest.raises(registry.RegistryError, match="no task is registered for config class"):
        registry.get_task(ChildConfig())


def test_entry_point_plugins_register_experiments(tmp_path):
    dist = tmp_path / "fake_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[torchgarden.experiments]\nfake = fake_plugin\n")
    (tmp_path / "fake_plugin.py").write_text(textwrap.dedent("""
        from torchgarden import ExperimentConfig, register_experiment

        @register_experiment("plugin_experiment")
        def plugin_experiment():
            return ExperimentConfig()
    """))
    # Keep the inherited PYTHONPATH so the subprocess runs the torchgarden under test.
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([sys.executable, "-m", "torchgarden", "list"], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "plugin_experiment" in out.stdout.split()


def test_builtins_register_through_entry_points_after_a_plain_import():
    """No string import of experiments/ or tasks/: the registry loads its entry-point groups
    (experiments torch-free for listing, tasks only when a task is looked up)."""
    code = textwrap.dedent("""
        import sys
        import torchgarden.registry as registry
        params = registry.get_experiment("toy_regression")
        print("torch" in sys.modules)
        print(type(registry.get_task(params.task)).__name__, "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "ToyRegressionTask", "True"]


def test_import_flag_errors_name_the_module():
    with pytest.raises(registry.RegistryError, match="--import no_such_module_xyz"):
        registry.import_user_module("no_such_module_xyz")
    with pytest.raises(registry.RegistryError, match="file not found"):
        registry.import_user_module("/nonexistent/dir/mod.py")
