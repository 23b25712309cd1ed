"""Model Garden's RetinaNet MobileNetV2 experiment (``retinanet/coco_mobilenetv2_tpu.yaml``'s
keys and values, examples/model_garden/retinanet_mobilenetv2_coco.yaml) is accepted whole over ``retinanet_resnetfpn_coco`` and trains 2 steps on TFRecord shards in
Model Garden's detection schema; YAMLs of backbones or families torchgarden does not build
are refused in one line naming the backbone key or the family, before any other key."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import yaml
from torch import nn

import torchgarden as tg
from torchgarden.cli.main import main
from torchgarden.config import ExperimentConfig

pytest.importorskip("transformers")
pytest.importorskip("crc32c")
pytest.importorskip("tfrecord")

# Model Garden's retinanet/coco_mobilenetv2_tpu.yaml: its keys and values, written out anew.
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "model_garden" / \
    "retinanet_mobilenetv2_coco.yaml"
EXPERIMENT = "retinanet_resnetfpn_coco"


@pytest.fixture
def mg_yaml():
    return str(EXAMPLE)


def test_the_yaml_is_accepted_whole_and_builds_what_it_names(mg_yaml, capsys):
    assert main(["config", "--experiment", EXPERIMENT, "--config_file", mg_yaml]) == 0
    model = yaml.safe_load(capsys.readouterr().out)["task"]["model"]
    assert model["norm_activation"]["activation"] == "relu6"
    assert model["head"]["use_separable_conv"] and model["decoder"]["fpn"]["use_separable_conv"]
    config = tg.get_experiment(EXPERIMENT)
    config.override({"task": {"model": model}})
    built = tg.get_task(config.validate().task).build_model()
    assert built.backbone.channels == {"2": 24, "3": 32, "4": 96, "5": 320}
    tower = [type(m) for m in built.head.cls_tower]
    assert tower.count(nn.ReLU6) == 4 and nn.ReLU not in tower
    assert type(built.fpn.activation) is nn.ReLU6
    assert sum(p.numel() for p in built.parameters()) == MOBILENETV2_RETINANET_PARAMETERS


# MobileNetV2 2,223,872 (its 1280-wide last conv included, as Model Garden builds it); the
# separable 128-wide FPN on levels 3..7: laterals 58,176 (from 32, 96, 320 channels),
# 3x3 convs 5 x 17,664, batch norms 5 x 256 (147,776); the head: 2 towers of 4 separable
# convs 8 x 17,536, per-level batch norms 40 x 256, classifier 106,803 (9 anchors x 91
# classes) and box regressor 5,796 (263,127).
MOBILENETV2_RETINANET_PARAMETERS = 2_223_872 + 147_776 + 263_127


def test_the_yaml_trains_two_steps_on_model_garden_tfrecords(mg_yaml, tmp_path):
    from torchgarden.data.tfrecord_samples import write_detection_shards

    data = tmp_path / "data"
    write_detection_shards(data, num_shards=2, per_shard=2)
    write_detection_shards(data, num_shards=1, per_shard=2, prefix="val", seed=1)
    model_dir = tmp_path / "run"
    code = main([
        "train", "--experiment", EXPERIMENT, "--mode", "train_and_eval",
        "--model_dir", str(model_dir), "--config_file", mg_yaml, "--params_override",
        f"task.train_data.input_path={data}/train-*,task.validation_data.input_path={data}/val-*,"
        "task.train_data.global_batch_size=2,task.validation_data.global_batch_size=2,"
        "task.model.input_size=[64,64,3],trainer.train_steps=2,trainer.steps_per_loop=1,"
        "trainer.summary_interval=1,trainer.checkpoint_interval=2,"
        "trainer.validation_interval=2,trainer.validation_steps=1"])
    assert code == 0 and (model_dir / "ckpt-2").is_dir()
    params = ExperimentConfig.from_yaml(model_dir / "params.yaml")
    assert params.task.model.backbone.type == "mobilenet"
    assert params.task.train_data.source == "tfrecord"
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "AP" in json.dumps(r)]
    assert evaluated and all(math.isfinite(float(v)) for r in records for k, v in r.items()
                             if k.endswith("loss") and isinstance(v, (int, float)))


def _refusal(capsys, *argv) -> str:
    """The one error line of a refused command (exit 2)."""
    assert main(list(argv)) == 2
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.startswith("torchgarden: error: ")]
    assert len(err) == 1, err
    return err[0].removeprefix("torchgarden: error: ")


def _refused_file(tmp_path, backbone: dict) -> str:
    """The example with ``backbone``, after keys refused for other reasons: Model Garden's
    losses.norm_activation slip, an input_size missing its comma, an identity decoder,
    hard_swish (in the file's order, all before the backbone)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    model = data["task"].pop("model")
    model.update(input_size=["320 320", 3], decoder={"type": "identity"},
                 norm_activation={"activation": "hard_swish"})
    del model["backbone"]
    model["backbone"] = backbone  # last in the block
    losses = {**data["task"].pop("losses"), "norm_activation": {"activation": "relu"}}
    data["task"] = {"losses": losses, "model": model, **data["task"]}
    path = tmp_path / "model_garden.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("backbone, first", [
    ({"spinenet": {"model_id": "49"}, "type": "spinenet"},
     "task.model.backbone.type: 'spinenet' needs SpineNet"),
    ({"spinenet_mobile": {"model_id": "49"}, "type": "spinenet_mobile"},
     "task.model.backbone.type: 'spinenet_mobile' needs mobile SpineNet"),
    ({"mobilenet": {"model_id": "MobileDetCPU"}, "type": "mobiledet"},
     "task.model.backbone.type: 'mobiledet' needs MobileDet"),
    ({"mobilenet": {"model_id": "MobileNetMultiAVG"}, "type": "mobilenet"},
     "task.model.backbone.mobilenet.model_id: 'MobileNetMultiAVG' needs a MobileNetMultiAVG"),
])
def test_a_backbone_no_library_builds_is_the_first_refusal(tmp_path, capsys, backbone, first):
    model_dir = tmp_path / "run"
    line = _refusal(capsys, "train", "--experiment", EXPERIMENT, "--model_dir", str(model_dir),
                    "--config_file", _refused_file(tmp_path, backbone))
    assert line.startswith(first) and "which no installed library builds" in line
    assert not model_dir.exists()


def test_a_list_missing_its_comma_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "comma.yaml"
    path.write_text(EXAMPLE.read_text().replace("input_size: [256, 256, 3]",
                                                "input_size: [320 320, 3]"))
    line = _refusal(capsys, "config", "--experiment", EXPERIMENT, "--config_file", str(path))
    assert line == ("task.model.input_size[0] expects int | None, received '320 320' (str); "
                    "YAML reads it as one string: is a comma missing (320, 320)?")


MASK_RCNN_YAML = """\
task:
  init_checkpoint: null
  train_data:
    parser: {aug_rand_hflip: true, aug_scale_min: 0.5, aug_scale_max: 2.0}
  model:
    anchor: {anchor_size: 3.0}
    min_level: 3
    max_level: 7
    input_size: [640, 640, 3]
"""


_FAMILY_NAMES = {  # Family name -> what the files of the cases below start with.
    "Mask R-CNN (instance segmentation)": ("maskrcnn/", "own/mask"),
    "video classification": ("own/video",),
    "NLP (BERT-style encoders: pretraining, sentence prediction, question answering, tagging, "
    "translation)": ("own/glue", "nlp/"),
    "BASNet (salient object detection)": ("projects/basnet",),
    "MaxViT": ("own/maxvit",),
}


@pytest.mark.parametrize("where, text, shows", [
    ("maskrcnn/r50fpn.yaml", MASK_RCNN_YAML, "its directory maskrcnn/"),
    ("own/mask.yaml", MASK_RCNN_YAML + "    mask_head: {num_convs: 4}\n",
     "its key task.model.mask_head"),
    ("own/video.yaml", "# --experiment_type=video_classification_kinetics400\n"
     "task:\n  model:\n    dropout_rate: 0.5\n  train_data:\n    name: kinetics400\n",
     "--experiment_type=video_classification_kinetics400"),
    ("own/video3d.yaml", "task:\n  model:\n    backbone:\n      resnet_3d_rs: {model_id: 50}\n"
     "      type: resnet_3d_rs\n", "its key task.model.backbone.resnet_3d_rs"),
    ("own/glue.yaml", "task:\n  hub_module_url: ''\n  model:\n    num_classes: 3\n",
     "its key task.hub_module_url"),
    ("nlp/configs/experiments/pretrain.yaml",
     "task:\n  train_data: {use_next_sentence_label: true}\n", "its directory nlp/"),
    ("projects/basnet/configs/experiments/basnet.yaml",
     "task:\n  validation_data: {resize_eval_groundtruth: true}\n",
     "its directory basnet/"),
    ("own/maxvit.yaml", "task:\n  model:\n    backbone:\n      maxvit: {model_name: maxvit-base}\n",
     "its key task.model.backbone.maxvit"),
])
def test_a_family_torchgarden_does_not_have_is_refused_naming_it(tmp_path, capsys, where, text,
                                                                 shows):
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(text)
    family = next(name for name in _FAMILY_NAMES if where.startswith(_FAMILY_NAMES[name]))
    expected = (f"{path}: a Model Garden {family} experiment ({shows}), a family torchgarden "
                "does not have; torchgarden's Model Garden experiments are image "
                "classification, RetinaNet and semantic segmentation (see `torchgarden list`)")
    assert _refusal(capsys, "port", str(path)) == expected
    model_dir = tmp_path / "run"
    assert _refusal(capsys, "train", "--experiment", "image_classification", "--model_dir",
                    str(model_dir), "--config_file", str(path)) == expected
    assert not model_dir.exists()


def test_a_mask_rcnn_file_whose_keys_are_all_retinanets_reads_as_retinanet_when_asked(
        tmp_path, capsys):
    """Model Garden reads it so too under --experiment=retinanet_resnetfpn_coco."""
    path = tmp_path / "maskrcnn" / "r50fpn.yaml"
    path.parent.mkdir()
    path.write_text(MASK_RCNN_YAML)
    assert main(["config", "--experiment", EXPERIMENT, "--config_file", str(path)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["task"]["model"]["anchor"]["anchor_size"] == 3


def test_port_says_when_the_files_experiment_type_is_not_registered(tmp_path, capsys):
    """Model Garden's retinanet_mobile_coco defaults to SpineNet-Mobile, so it is not
    registered: the experiment port picks (the directory's) is said with the refusal."""
    path = tmp_path / "retinanet" / "coco_mobilenetv2_tpu.yaml"
    path.parent.mkdir()
    body = [line for line in EXAMPLE.read_text().splitlines(True) if not line.startswith("#")]
    path.write_text("".join(["# --experiment_type=retinanet_mobile_coco\n", *body]))
    line = _refusal(capsys, "port", str(path))
    assert line.endswith("(read over retinanet: --experiment_type=retinanet_mobile_coco is not "
                         "a torchgarden experiment; pass --experiment NAME to choose "
                         "(`torchgarden list`))")
    assert main(["port", str(path), "--experiment", EXPERIMENT]) == 0


def test_the_backbone_screen_reads_what_the_command_line_chooses(capsys):
    """--params_override is screened like a file; a registered experiment whose own backbone
    is refused (revnet_imagenet) is still built, and refused at validation as before."""
    line = _refusal(capsys, "config", "--experiment", EXPERIMENT, "--params_override",
                    "task.model.input_size=[320 320],task.model.backbone.type=spinenet")
    assert line.startswith("task.model.backbone.type: 'spinenet' needs SpineNet")
    line = _refusal(capsys, "config", "--experiment", "image_classification", "--params_override",
                    "task.model.aggregate_endpoints=false,task.model.backbone.type=resnet_3d_rs")
    assert line.startswith("task.model.backbone.type: 'resnet_3d_rs' needs a 3-D ResNet-RS "
                           "(video classification)")
    assert tg.get_experiment("revnet_imagenet").task.model.backbone.type == "revnet"
    line = _refusal(capsys, "config", "--experiment", "revnet_imagenet")
    assert line.startswith("task.model.backbone.type: 'revnet' needs a reversible ResNet")


def test_a_later_override_still_changes_the_backbone_a_file_chose(tmp_path, capsys):
    path = tmp_path / "spinenet.yaml"
    path.write_text(yaml.safe_dump({"task": {"model": {"backbone": {"type": "spinenet"}}}}))
    assert main(["config", "--experiment", EXPERIMENT, "--config_file", str(path),
                 "--params_override", "task.model.backbone.type=resnet"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["task"]["model"]["backbone"]["type"] == \
        "resnet"
