"""What a saved checkpoint of each model holds, and which checkpoints loading refuses (issue 32, sections 1 and 3).

A checkpoint folder carries the code that runs its model (configuration, modeling, the pipeline it declares and the
shared modeling code these import) and nothing else: cards, Hub upload, evaluation results and the rewriting of
imports are package code. `from_pretrained` of every model refuses, with a `CheckpointError` naming the config.json, a
folder of another model and a config.json that does not fit the stored weights (transformers alone would fill the
missing layers with random values and drop the left-over ones), also where the package is not installed; a checkpoint
saved by another class of the same model still loads, its new head random.

The tiny checkpoints are saved once per module and copied where a test edits them.
"""

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SHARED_DATA, tiny_encoder_config, tiny_petra_config
from test_hub_portability import NO_PACKAGE_PRELUDE, run_python, subprocess_env
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    BertConfig,
    RobertaConfig,
    pipeline,
)

import hf_entity_models
from hf_entity_models import (
    AutoModelForCoreference,
    CheckpointError,
    DefinitionEmbConfig,
    DefinitionEmbModel,
    ForceReaderConfig,
    ForceReaderForQuestionAnswering,
    ForceReaderModel,
    GPT2EConfig,
    GPT2EForCausalLM,
    GPT2EModel,
    PetraForCoreference,
    PetraModel,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
    RefReaderModel,
)

# Lines of Python in a checkpoint folder of each model before issue 32 (its table); the goal is at most 3/4 of them.
LINES_BEFORE = {"petra": 3692, "refreader": 3918, "forcereader": 3355, "gpt2e": 2393, "definition_emb": 2092}
LINE_BUDGET = {name: lines * 3 // 4 for name, lines in LINES_BEFORE.items()}
# Issue 32's target is 3/4 of those lines. The PeTra and Referential Reader checkpoints stay above it (2,935 and 3,135
# lines against 2,769 and 2,938) though they carry no card, Hub or import-rewriting code any more: every checkpoint
# now also runs the strict loading and the config limits this issue added (models/_shared/checkpoints.py, about 510
# lines). For those two the ceiling is today's count, so that they cannot grow unnoticed. Issue 38 raised both by
# about 1,040 lines: every checkpoint of the two can be in the token or the document mode (a config field), so it
# carries the document mode's head (models/_shared/document_coreference.py, about 815 lines with its bounded memory),
# its config fields and the pipeline's raw-text reading; then by 10 for the greedy clustering's precomputed shares of
# the pair scorer (the memory's inference cost, measured in benchmarks/RESULTS.md). Issue 39 raised both by 224: the
# pipeline reads a batch of documents together (their encoder windows in one call, the memories in lockstep) and
# returns resolved text on request.
LINE_CEILING = {**LINE_BUDGET, "petra": 4224, "refreader": 4428}
# Package code that a checkpoint must not carry (it used to).
NOT_SHIPPED = ("entity_hub.py", "evaluation_results.py", "portable_code.py", "checkpoint_fit.py")
# Names that only card, Hub-upload or import-rewriting code uses.
NOT_SHIPPED_NAMES = ("ModelCard", "HfApi", "upload_folder", "make_folder_self_contained", "SHARED_PACKAGE")
GPT2_TOKENIZER = SHARED_DATA / "tokenizers" / "gpt2"
ROBERTA_READER = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)
FORCEREADER_ENCODER = dict(vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32)


def _perturbed(model):
    """Every tensor away from its initial value, so that a tensor left at init (not loaded) is noticed."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


def _tiny_gpt2e() -> GPT2EConfig:
    # The GPT-2 tokenizer's vocabulary, so that pipeline("text-generation") can run it.
    return GPT2EConfig(n_layer=2, n_embd=16, n_head=2, vocab_size=50257, n_positions=64, max_entities=4)


# The model of each kind that a user saves (with a pipeline where the model declares one) ...
BUILDERS = {
    "petra": lambda: PetraForCoreference(tiny_petra_config()),
    "refreader": lambda: RefReaderForCoreference(
        RefReaderConfig(vocab_size=60, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=2)
    ),
    "forcereader": lambda: ForceReaderForQuestionAnswering(
        ForceReaderConfig(encoder_config=BertConfig(**FORCEREADER_ENCODER), interaction_channels=4,
                          interaction_kernel_sizes=[3, 5])
    ),
    "gpt2e": lambda: GPT2EForCausalLM(_tiny_gpt2e()),
    "definition_emb": lambda: DefinitionEmbModel(DefinitionEmbConfig(reader_config=RobertaConfig(**ROBERTA_READER))),
}
# ... and inputs of its forward.
INPUTS = {
    "petra": lambda: dict(input_ids=torch.randint(1000, 2000, (2, 9)), pronoun_spans=torch.tensor([[4, 5], [6, 7]]),
                          candidate_spans=torch.tensor([[[1, 3], [6, 8]]] * 2)),
    "refreader": lambda: dict(input_ids=torch.randint(1, 60, (2, 9))),
    "forcereader": lambda: dict(input_ids=torch.tensor([[101, 5, 6, 102, 20, 21, 22, 102]]),
                                token_type_ids=torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])),
    "gpt2e": lambda: dict(input_ids=torch.randint(0, 50257, (2, 7)),
                          entity_ids=torch.tensor([[1, 0, 2, 1, 0, 0, 2]] * 2)),
    "definition_emb": lambda: dict(input_ids=torch.randint(3, 100, (2, 7))),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """One tiny saved checkpoint of each model: {name: {"folder", "model"}} (the GPT2E folder has its tokenizer)."""
    checkpoints = {}
    for name, build in BUILDERS.items():
        torch.manual_seed(0)
        model = _perturbed(build())
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        checkpoints[name] = {"folder": folder, "model": model}
    AutoTokenizer.from_pretrained(GPT2_TOKENIZER).save_pretrained(checkpoints["gpt2e"]["folder"])
    return checkpoints


def _copy(folder: Path, destination: Path, **config_changes) -> Path:
    shutil.copytree(folder, destination)
    if config_changes:
        path = destination / "config.json"
        config = json.loads(path.read_text())
        for name, value in config_changes.items():
            *parents, leaf = name.split("__")  # encoder_config__num_hidden_layers reaches into a nested config
            target = config
            for parent in parents:
                target = target[parent]
            target[leaf] = value
        path.write_text(json.dumps(config))
    return destination


def _python_lines(folder: Path) -> int:
    return sum(len(path.read_text(encoding="utf-8").splitlines()) for path in folder.glob("*.py"))


def _output_tensors(output) -> dict[str, torch.Tensor]:
    return {key: value for key, value in output.items() if isinstance(value, torch.Tensor)}


# ------------------------------------------------------------------------------ (a) only the code that runs
@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_checkpoint_carries_no_card_hub_or_import_rewriting_code(saved, name):
    folder = saved[name]["folder"]
    code = {path.name: path.read_text(encoding="utf-8") for path in folder.glob("*.py")}
    assert {file.split("_")[0] for file in code} >= {"modeling", "configuration"}
    assert (folder / "README.md").is_file(), "with the package imported, saving still writes the model card"
    shipped = sorted(file for file in code if file.startswith("card_") or file in NOT_SHIPPED)
    assert not shipped, f"the {name} checkpoint carries package code: {shipped}"
    for file, text in code.items():
        found = [word for word in NOT_SHIPPED_NAMES if word in text]
        assert not found, f"{file} of the {name} checkpoint names {found}: card, Hub or import-rewriting code"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "re.compile":
                pattern = ast.unparse(node)
                assert "import" not in pattern, f"{file} of the {name} checkpoint rewrites imports: {pattern}"


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_checkpoint_holds_no_more_lines_than_its_ceiling(saved, name):
    lines = _python_lines(saved[name]["folder"])
    assert lines <= LINE_CEILING[name], (
        f"a saved {name} checkpoint holds {lines} lines of Python: more than its ceiling {LINE_CEILING[name]} (3/4 of "
        f"the {LINES_BEFORE[name]} it held before issue 32 is {LINE_BUDGET[name]})"
    )


# ------------------------------------------------------------------- (b) a folder of another model is refused
@pytest.mark.parametrize(
    "model_class, stored",
    [
        (ForceReaderForQuestionAnswering, "petra"),
        (GPT2EForCausalLM, "petra"),
        (PetraForCoreference, "forcereader"),
        (PetraForCoreference, "gpt2e"),
        (DefinitionEmbModel, "petra"),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_checkpoint_of_another_model_is_refused(saved, model_class, stored):
    folder = saved[stored]["folder"]
    [stored_class] = json.loads((folder / "config.json").read_text())["architectures"]
    with pytest.raises(hf_entity_models.CheckpointError) as error:
        model_class.from_pretrained(folder)
    message = str(error.value)
    assert str(folder / "config.json") in message and stored_class in message, message
    assert model_class.__name__ in message and "\n" not in message


# -------------------------------------------------------------- (c) a config.json that does not fit its weights
@pytest.mark.parametrize(
    "change, problem",
    [
        (dict(n_layer=3), "it lacks 12 weights the config asks for (transformer.h.2."),
        (dict(n_layer=1), "the config has no place for (transformer.h.1."),
        (dict(entity_state="paper"), "it lacks 16 weights the config asks for (transformer.h.0.entity_attn."),
    ],
    ids=["a-layer-more", "a-layer-less", "the-other-entity-state"],
)
def test_an_edited_gpt2e_config_is_refused_wherever_the_model_loads(saved, tmp_path, change, problem):
    assert _tiny_gpt2e().entity_state == "memory" and _tiny_gpt2e().n_layer == 2  # what the edits change
    folder = _copy(saved["gpt2e"]["folder"], tmp_path / "edited", **change)
    config_file = str(folder / "config.json")
    for load in (GPT2EForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(CheckpointError) as error:
            load(folder)
        assert problem in str(error.value) and config_file in str(error.value), str(error.value)
    # The base model, loaded from the language model's checkpoint, has no new module either: refused too.
    for load in (GPT2EModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(CheckpointError, match=re.escape(config_file)):
            load(folder)
    # pipeline() loads the model with from_pretrained; it reports the CheckpointError in a ValueError of its own.
    with pytest.raises((CheckpointError, ValueError)) as error:
        pipeline("text-generation", model=str(folder), device="cpu")
    assert "CheckpointError" in f"{type(error.value).__name__}: {error.value}" and problem in str(error.value)


def test_the_unedited_gpt2e_checkpoint_generates(saved):
    """The folder the edits above start from is sound: the refusals come from the edits."""
    generator = pipeline("text-generation", model=str(saved["gpt2e"]["folder"]), device="cpu")
    [answer] = generator("Zoe met Maggie", max_new_tokens=3, do_sample=False)
    assert answer["generated_text"].startswith("Zoe met Maggie")


# ----------------------------------------------------------------- (d) other classes of the same model
@pytest.mark.parametrize("name", list(BUILDERS))
def test_the_class_that_saved_a_checkpoint_loads_it_unchanged(saved, name):
    model = saved[name]["model"]
    loaded = type(model).from_pretrained(saved[name]["folder"]).eval()
    for (key, expected), (loaded_key, actual) in zip(model.state_dict().items(), loaded.state_dict().items(),
                                                     strict=True):
        assert key == loaded_key and torch.equal(expected, actual), key
    torch.manual_seed(1)
    inputs = INPUTS[name]()
    with torch.no_grad():
        before, after = _output_tensors(model(**inputs)), _output_tensors(loaded(**inputs))
    assert before.keys() == after.keys() and before
    for key in before:
        # Loaded weights are views into the (unaligned) safetensors file: CPU kernels may round the last bit
        # differently; a tensor not loaded would be off by far more.
        torch.testing.assert_close(after[key], before[key], rtol=1e-5, atol=1e-6, msg=key)


def test_a_language_model_checkpoint_starts_a_coreference_model(tmp_path):
    config = RefReaderConfig(vocab_size=60, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=2)
    torch.manual_seed(0)
    language_model = _perturbed(RefReaderForCausalLM(config))
    language_model.save_pretrained(tmp_path / "lm")
    for load in (RefReaderForCoreference.from_pretrained, AutoModelForCoreference.from_pretrained):
        coreference, loading_info = load(tmp_path / "lm", output_loading_info=True)
        assert type(coreference) is RefReaderForCoreference
        reader = coreference.refreader.state_dict()
        for key, tensor in language_model.refreader.state_dict().items():
            assert torch.equal(reader[key], tensor), key
        assert not any(key.startswith("refreader.") for key in loading_info["missing_keys"])
    # And back: a coreference checkpoint gives the reader of a language model, its LM head new (Auto class too).
    coreference.save_pretrained(tmp_path / "coreference")
    for load in (RefReaderForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained):
        assert type(load(tmp_path / "coreference")) is RefReaderForCausalLM
    assert type(RefReaderModel.from_pretrained(tmp_path / "lm")) is RefReaderModel


def test_a_head_model_checkpoint_gives_its_base_model_and_a_base_model_its_head(saved, tmp_path):
    coreference = saved["petra"]["model"]
    base = PetraModel.from_pretrained(saved["petra"]["folder"])
    for key, tensor in coreference.petra.state_dict().items():
        assert torch.equal(base.state_dict()[key], tensor), key
    reader = saved["forcereader"]["model"]
    reader.forcereader.save_pretrained(tmp_path / "base")
    for load in (ForceReaderForQuestionAnswering.from_pretrained, AutoModelForQuestionAnswering.from_pretrained):
        started = load(tmp_path / "base")
        for key, tensor in reader.forcereader.state_dict().items():
            assert torch.equal(started.forcereader.state_dict()[key], tensor), key


def test_another_class_of_the_model_still_refuses_a_config_that_does_not_fit(saved, tmp_path):
    """Only a head the saving class lacked may start random, never a layer of the base model: a ForceReader base
    checkpoint whose config.json asks for an encoder layer more is refused by the question-answering class too."""
    saved["forcereader"]["model"].forcereader.save_pretrained(tmp_path / "base")
    folder = _copy(tmp_path / "base", tmp_path / "deeper", encoder_config__num_hidden_layers=3)
    for load in (ForceReaderForQuestionAnswering.from_pretrained, AutoModelForQuestionAnswering.from_pretrained,
                 ForceReaderModel.from_pretrained):
        with pytest.raises(CheckpointError, match=r"it lacks 16 weights the config asks for \(.*encoder.layer.2"):
            load(folder)


# ---------------------------------------------------------------------------- (e) without the package
REMOTE_STRICT_LOAD = NO_PACKAGE_PRELUDE + r'''
import json
import torch
from transformers import AutoModel

results = {}
for location in sys.argv[1:]:
    try:
        model = AutoModel.from_pretrained(location, trust_remote_code=True).eval()
    except Exception as error:
        results[location] = {"error_class": type(error).__name__, "message": str(error)}
        continue
    with torch.no_grad():
        scores = model(input_ids=torch.tensor([[1500, 1600, 1700, 1800, 1900]]), pronoun_spans=torch.tensor([[3, 4]]),
                       candidate_spans=torch.tensor([[[1, 2], [2, 3]]])).candidate_scores
    results[location] = {"class": type(model).__name__, "module": type(model).__module__, "scores": scores.tolist()}
results["package_imported"] = any(module.startswith("hf_entity_models") for module in sys.modules)
print("RESULT " + json.dumps(results))
'''


def test_without_the_package_a_checkpoint_loads_and_an_edited_one_is_refused(tmp_path):
    torch.manual_seed(0)
    model = _perturbed(PetraForCoreference(tiny_petra_config(encoder_config=tiny_encoder_config(num_hidden_layers=3))))
    model.save_pretrained(tmp_path / "petra")
    fewer_layers = _copy(tmp_path / "petra", tmp_path / "fewer-layers", encoder_config__num_hidden_layers=2)
    remote = run_python(REMOTE_STRICT_LOAD, str(tmp_path / "petra"), str(fewer_layers),
                        env=subprocess_env(tmp_path / "hf_home"), cwd=tmp_path)
    assert not remote["package_imported"]
    loaded = remote[str(tmp_path / "petra")]
    assert loaded["class"] == "PetraForCoreference" and loaded["module"].startswith("transformers_modules.")
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([[1500, 1600, 1700, 1800, 1900]]), pronoun_spans=torch.tensor([[3, 4]]),
                         candidate_spans=torch.tensor([[[1, 2], [2, 3]]])).candidate_scores
    torch.testing.assert_close(torch.tensor(loaded["scores"]), expected, rtol=1e-5, atol=1e-7)
    refused = remote[str(fewer_layers)]
    assert refused["error_class"] == "CheckpointError", refused
    assert f"{fewer_layers / 'config.json'}: holds 16 weights the config has no place for" in refused["message"]
    assert "petra.encoder.encoder.layer.2." in refused["message"]
