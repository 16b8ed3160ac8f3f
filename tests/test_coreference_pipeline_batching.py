"""pipeline("coreference") on lists of texts (issue 39): a batch of document-mode texts read together (encoder windows
of several documents in shared calls, mentions clustered in lockstep) gives the clusters of each text read alone;
`resolve=True` adds `resolve_coreferences` of the clusters."""

import pytest
import torch
from conftest import saved_tiny_petra
from transformers import pipeline

from hf_entity_models.models._shared.document_coreference import EntityMemory
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hf_entity_models.tasks.coreference import resolve_coreferences
from hf_entity_models.tasks.coreference.pipeline import cluster_in_lockstep, document_words

# Every span passes the threshold; the best 0.6 per word are kept: many mentions, as an untrained model proposes.
DOCUMENT = dict(coreference_mode="document", document_hidden_size=16, max_span_width=3, span_width_size=4,
                span_threshold=-1e6)
STORY = ("Anna met her brother Tom in Paris. He was late, and she told him so. Tom laughed at her. \"You are always "
         "early,\" he said to his sister. Anna smiled. Their mother, Mrs. Reed, waited for them at the station. ")
TEXTS = [
    STORY * 4,  # longer than the encoder window of 64 tokens: read in overlapping windows
    "Bob slept.",
    STORY,
    "It rained. \n\nThe end",
    STORY * 2 + "She left.",
]


@pytest.fixture(scope="module")
def document_pipe(tmp_path_factory, one_torch_thread):
    folder = saved_tiny_petra(tmp_path_factory.mktemp("petra-document"), **DOCUMENT, encoder_window_size=64,
                   encoder_window_overlap=16)
    return pipeline("coreference", model=str(folder), device="cpu")


@pytest.fixture(scope="module")
def token_pipe(tmp_path_factory, one_torch_thread):
    folder = saved_tiny_petra(tmp_path_factory.mktemp("petra-tokens"), mention_threshold=0.3)
    return pipeline("coreference", model=str(folder), device="cpu")


def test_a_document_batch_gives_the_clusters_of_each_text_alone(document_pipe, monkeypatch):
    alone = [document_pipe(text) for text in TEXTS]
    assert sum(len(cluster) for cluster in alone[0]["clusters"]) > 50  # the untrained model proposes many mentions
    assert document_pipe(TEXTS, batch_size=8) == alone
    assert document_pipe(TEXTS, batch_size=2) == alone  # batches of 2, 2 and 1
    # Windows of several documents share the encoder calls, and they are split over several calls.
    monkeypatch.setattr(coreference_pipeline, "ENCODER_TOKENS_PER_CALL", 128)
    assert document_pipe(TEXTS, batch_size=8) == alone
    # Documents without a mention leave the lockstep clustering with nothing to read.
    assert document_pipe(TEXTS, batch_size=8, span_threshold=1e6) == [{"clusters": []}] * len(TEXTS)


def test_a_bounded_memory_clusters_each_document_of_a_batch_alone(tmp_path, one_torch_thread):
    pipe = pipeline("coreference", model=str(saved_tiny_petra(tmp_path, **DOCUMENT, max_entities=2)), device="cpu")
    assert pipe(TEXTS[1:4], batch_size=3) == [pipe(text) for text in TEXTS[1:4]]


@pytest.mark.parametrize("update", ["mlp-merge", "gru", "mean"])
def test_lockstep_clustering_is_the_memory_own_clustering(update):
    torch.manual_seed(0)
    memory = EntityMemory(20, 16, 16, update, 12, 10, 4, 0.0).eval()
    lengths = [7, 0, 30, 1, 12]  # documents of different numbers of mentions, one without any
    vectors = [torch.randn(length, 20) if length else None for length in lengths]
    starts = [torch.sort(torch.randint(0, 50, (length,))).values for length in lengths]
    expected = [memory.cluster(v, s) if v is not None else [] for v, s in zip(vectors, starts)]
    assert cluster_in_lockstep(memory, vectors, starts) == expected
    assert any(len(set(entities)) > 1 for entities in expected)  # new entities and joins both happen


def test_a_token_mode_batch_gives_the_answers_of_each_text_alone(token_pipe):
    texts = TEXTS[1:4]
    assert token_pipe(texts, batch_size=3) == [token_pipe(text) for text in texts]


@pytest.mark.parametrize("pipe_name", ["document_pipe", "token_pipe"])
def test_resolve_adds_the_resolved_text_of_the_clusters(pipe_name, request):
    pipe = request.getfixturevalue(pipe_name)
    answer = pipe(STORY, resolve=True)
    expected = resolve_coreferences(STORY, answer["clusters"])
    assert answer == {**pipe(STORY), "resolved_text": expected["text"], "replacements": expected["replacements"]}
    for replacement in answer["replacements"]:
        assert STORY[replacement["start"] : replacement["end"]] == replacement["original"]
        resolved = answer["resolved_text"][replacement["resolved_start"] : replacement["resolved_end"]]
        assert resolved == replacement["replacement"]
    batch = pipe([STORY, "Bob slept. He dreamt."], batch_size=2, resolve=True)
    assert batch == [answer, pipe("Bob slept. He dreamt.", resolve=True)]


def test_the_document_pipeline_resolves_the_pronouns_of_an_entity(document_pipe, monkeypatch):
    """Clusters chosen by hand (an untrained model's are noise): Anna's pronouns become "Anna", her possessive
    "Anna's"; the offsets of every replacement index the text and the resolved text."""
    text = "Anna met Tom. She told him about her book."
    words = [text[start:end] for start, end in document_words(text)]
    anna = [(words.index(word), words.index(word), 0) for word in ("Anna", "She", "her")]

    def found(model, tokens, *arguments):
        return [sorted(anna + [(2, 2, 1), (words.index("him"), words.index("him"), 1)])] * len(tokens)

    monkeypatch.setattr(coreference_pipeline, "predict_document_batch", found)
    answer = document_pipe(text, resolve=True)
    assert answer["resolved_text"] == "Anna met Tom. Anna told Tom about Anna's book."
    assert [(r["original"], r["replacement"]) for r in answer["replacements"]] == [
        ("She", "Anna"), ("him", "Tom"), ("her", "Anna's")]
    assert document_pipe([text, text], batch_size=2, resolve=True) == [answer, answer]


def test_resolve_refuses_a_query(token_pipe):
    with pytest.raises(ValueError, match="resolve=True rewrites the text from its clusters"):
        token_pipe(STORY, pronoun=(35, 37), candidates=[(0, 4)], resolve=True)
    with pytest.raises(ValueError, match="resolve=True rewrites the text from its clusters"):
        token_pipe([{"text": STORY, "pronoun": (35, 37), "candidates": [(0, 4)]}], resolve=True)


def test_resolve_without_the_package_says_what_is_missing(document_pipe, monkeypatch):
    """A checkpoint's copy of the pipeline runs where the package is not installed: resolve=True names it."""
    monkeypatch.setattr(coreference_pipeline, "__package__", "transformers_modules.petra")
    with pytest.raises(ValueError, match="resolve=True needs the hf_entity_models package"):
        document_pipe("Bob slept.", resolve=True)
