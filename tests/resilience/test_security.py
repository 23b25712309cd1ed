"""Security: configs and checkpoints are data, never code.

Each payload below would create a marker file if it were executed or imported; the
tests check the refusal message and that the marker never appears.
"""

from __future__ import annotations

import ast
import html
import html.parser
import json
import os
import pathlib
import re
import sys

import pytest
import torch
import yaml
from resilience_tools import process_state_restored

from torchgarden.checkpoint import layout
from torchgarden.cli.main import main

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "torchgarden"
TOY = ["train", "--experiment", "toy_regression", "--mode", "train"]
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5," \
        "trainer.checkpoint_interval=5"


class Payload:
    """Unpickling this calls ``Path(marker).touch()``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    with process_state_restored():
        code = main(argv)
    return code, capsys.readouterr().err.strip()


def test_the_payload_is_live_without_weights_only(tmp_path):
    """Guards the tests below: this file really runs code when loaded unsafely."""
    marker = tmp_path / "ran"
    torch.save({"x": Payload(str(marker))}, tmp_path / "p.pt")
    torch.load(tmp_path / "p.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("tag", ["!!python/object/apply:pathlib.Path.touch",
                                 "!!python/object:pathlib.PosixPath"])
def test_yaml_python_tags_are_refused(tag, tmp_path, capsys):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    config.write_text(f"task:\n  name: {tag} [{str(marker)!r}]\n")
    code, err = run([*TOY, "--model_dir", str(tmp_path / "run"), "--config_file", str(config)],
                    capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("torchgarden: error: ") and "evil.yaml" in err
    assert "could not determine a constructor" in err or "python/object" in err, err
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_an_override_string_cannot_construct_python_objects(tmp_path, capsys):
    marker = tmp_path / "ran"
    code, err = run([*TOY, "--model_dir", str(tmp_path / "run"), "--params_override",
                     f"{{task: {{name: !!python/object/apply:pathlib.Path.touch ['{marker}']}}}}"],
                    capsys)
    assert code == 2 and err.startswith("torchgarden: error: "), err
    assert not marker.exists()


def test_a_type_naming_an_unimported_class_is_not_imported(tmp_path, capsys, monkeypatch):
    module = tmp_path / "sneaky_configs.py"
    marker = tmp_path / "imported"
    module.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                      "class EvilConfig: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "typed.yaml"
    config.write_text("task:\n  _type: sneaky_configs.EvilConfig\n")

    code, err = run([*TOY, "--model_dir", str(tmp_path / "run"), "--config_file", str(config)],
                    capsys)

    assert code == 2 and len(err.splitlines()) == 1, err
    assert "task._type: config class 'sneaky_configs.EvilConfig' is not imported" in err
    assert "--import sneaky_configs" in err
    assert not marker.exists() and "sneaky_configs" not in sys.modules


@pytest.fixture
def trained(tmp_path) -> str:
    model_dir = str(tmp_path / "run")
    with process_state_restored():
        assert main([*TOY, "--model_dir", model_dir, "--params_override", SHORT]) == 0
    return model_dir


def plant_payload(checkpoint: str, marker: str) -> None:
    """Adds a payload to state.pt and rewrites meta.json so the checksums still match."""
    state_path = os.path.join(checkpoint, "state.pt")
    state = torch.load(state_path, weights_only=True)
    state["model"]["_extra"] = Payload(marker)
    torch.save(state, state_path)
    meta_path = os.path.join(checkpoint, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["files"]["state.pt"] = {"xxh3_128": layout.file_digest(state_path),
                                 "bytes": os.path.getsize(state_path)}
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def test_a_checkpoint_carrying_a_pickled_payload_is_refused_on_resume(trained, tmp_path, capsys):
    marker = str(tmp_path / "ran")
    checkpoint = os.path.join(trained, "ckpt-10")
    plant_payload(checkpoint, marker)

    code, err = run([*TOY, "--model_dir", trained, "--params_override",
                     SHORT.replace("train_steps=10", "train_steps=20")], capsys)

    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"torchgarden: error: '{checkpoint}/state.pt' holds pickled Python "
                          "objects that torch.load(weights_only=True) refuses")
    assert "(Unsupported global: GLOBAL getattr was not an allowed global by default)" in err
    assert "load only checkpoints you trust" in err
    assert not os.path.exists(marker)


def test_an_init_checkpoint_carrying_a_pickled_payload_is_refused(tmp_path, capsys):
    marker = str(tmp_path / "ran")
    weights = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(1, 8), "bias": torch.zeros(1), "x": Payload(marker)},
               weights)

    code, err = run([*TOY, "--model_dir", str(tmp_path / "run"), "--params_override",
                     f"{SHORT},task.init_checkpoint={weights}"], capsys)

    assert code == 2 and len(err.splitlines()) == 1, err
    assert "init checkpoint" in err and "weights.pt' holds pickled Python objects" in err
    assert "Unsupported global" in err
    assert not os.path.exists(marker) and not (tmp_path / "run").exists()


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """``("module.attr" or "name", call)`` for every call in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                out.append((func.id, node))
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                out.append((f"{func.value.id}.{func.attr}", node))
    return out


def test_the_source_loads_only_with_weights_only_and_never_evals_config_data():
    """Every torch.load passes weights_only=True; YAML only through the safe loader; no
    pickle, exec or eval (a config class's string annotations are resolved by
    typing.get_type_hints, never a config value)."""
    loads, evals, problems = 0, [], []
    for path in SRC.rglob("*.py"):
        where = str(path.relative_to(SRC))
        tree = ast.parse(path.read_text())
        for name, call in _calls(tree):
            keywords = {k.arg: k.value for k in call.keywords}
            if name == "torch.load":
                loads += 1
                flag = keywords.get("weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    problems.append(f"{where}:{call.lineno}: torch.load without weights_only=True")
            elif name in ("yaml.load", "yaml.load_all"):
                loader = keywords.get("Loader")
                if not (isinstance(loader, ast.Name) and loader.id == "_Loader"):
                    problems.append(f"{where}:{call.lineno}: {name} without the safe _Loader")
            elif name in ("yaml.unsafe_load", "yaml.full_load", "pickle.load", "pickle.loads",
                          "exec"):
                problems.append(f"{where}:{call.lineno}: {name}")
            elif name == "eval":
                evals.append(where)
    assert loads >= 2  # checkpoint/_direct.py and models/weights.py
    assert problems == []
    assert evals == []
    safe = (SRC / "config" / "overrides.py").read_text()
    assert re.search(r"class _Loader\(getattr\(yaml, \"CSafeLoader\", yaml\.SafeLoader\)\)", safe)


EVIL = '</script><script>document.title="pwned"</script><!--<script>'
EVIL_ATTR = '"><img src=x onerror=alert(1)>'


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data_block = ""
        self._in_data = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_data = tag == "script" and dict(attrs).get("id") == "tg-data"

    def handle_data(self, data):
        if self._in_data:
            self.data_block += data

    def handle_endtag(self, tag):
        self._in_data = False


def test_a_report_of_metrics_holding_html_and_script_escapes_them(tmp_path, capsys):
    """Split names, metric names, config values and the run's name are the run's data:
    the page shows them as text and runs only its own three scripts."""
    model_dir = tmp_path / f"run{EVIL_ATTR.replace('/', '_')}"
    model_dir.mkdir()
    rows = [{"step": s, "split": f"train{EVIL}", "wall_time": 0.0, f"loss{EVIL}": 1.0 / s,
             EVIL_ATTR: 2.0} for s in (1, 2, 3)]
    (model_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (model_dir / "params.yaml").write_text(yaml.safe_dump({"task": {"name": EVIL + EVIL_ATTR}}))
    output = tmp_path / "report.html"

    code, err = run(["report", str(model_dir), "--output", str(output), "--title", EVIL], capsys)

    assert code == 0, err
    page = output.read_text()
    parser = _Tags()
    parser.feed(page)
    assert [t for t, _ in parser.tags if t in ("script", "img", "iframe", "object")] == [
        "script"] * 3
    assert not [(t, a) for t, a in parser.tags for k in a if k.startswith("on")]
    assert "<" not in parser.data_block and ">" not in parser.data_block
    data = json.loads(parser.data_block)
    assert any(EVIL in chart["title"] for chart in data["charts"])
    assert any(EVIL_ATTR in chart["title"] for chart in data["charts"])
    assert html.escape(EVIL) in page and EVIL not in page
