"""The two-learning-rate AdamW of ForceReader's recipe, and its use by the stock Trainer with warm-up."""

import pytest
import torch
from transformers import BertConfig, BertForQuestionAnswering, Trainer, TrainingArguments

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.training import two_rate_adamw

ENCODER = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)


def test_every_parameter_is_in_exactly_one_group_with_its_rate():
    model = ForceReaderForQuestionAnswering(ForceReaderConfig(encoder_config=ENCODER))
    optimizer = two_rate_adamw(model, model.forcereader.encoder, pretrained_lr=3e-5, new_lr=1e-4, weight_decay=1e-4)
    encoder_ids = {id(p) for p in model.forcereader.encoder.parameters()}
    groups = optimizer.param_groups
    assert [g["lr"] for g in groups] == [3e-5, 1e-4] and all(g["weight_decay"] == 1e-4 for g in groups)
    assert {id(p) for p in groups[0]["params"]} == encoder_ids
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in model.parameters()} - encoder_ids
    assert {id(p) for p in groups[1]["params"]} >= {id(p) for p in model.interaction.parameters()}


def test_a_foreign_or_all_covering_module_is_refused():
    model = BertForQuestionAnswering(ENCODER)
    with pytest.raises(ValueError, match="submodule"):
        two_rate_adamw(model, torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no new layers"):
        two_rate_adamw(model, model)


def test_the_trainer_warms_both_groups_up_from_zero(tmp_path):
    model = BertForQuestionAnswering(ENCODER)
    optimizer = two_rate_adamw(model, model.base_model, pretrained_lr=3e-5, new_lr=1e-4)
    args = TrainingArguments(tmp_path, max_steps=10, warmup_steps=4, lr_scheduler_type="linear", use_cpu=True,
                             report_to="none")
    trainer = Trainer(model=model, args=args, optimizers=(optimizer, None))
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    rates = []
    for _ in range(5):
        rates.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        trainer.lr_scheduler.step()
    assert rates[0] == [0.0, 0.0]
    assert rates[2] == pytest.approx([1.5e-5, 5e-5])  # half-way through the 4 warm-up steps
    assert rates[4] == pytest.approx([3e-5 * 6 / 6, 1e-4 * 6 / 6])  # warm-up done, linear decay starts from the peak
