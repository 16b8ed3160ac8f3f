"""Train a tiny Referential Reader data-parallel: GAP coreference with `train_on_gap` and LM pre-training with
`build_refreader_lm_trainer`, both with per-epoch evaluation, checkpoints and the best model loaded at the end.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29514 tests/scripts/ddp_train_refreader.py OUT

Writes ``OUT/gap/rank{R}.json`` (with the threshold sweep and report scores every process computed) and
``OUT/lm/rank{R}.json`` (with the validation losses of every epoch), each next to the process's final weights.
`tests/test_multiprocess_refreader.py` checks the files.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from ddp_common import DATA_DIR, RankRecorder, minilm_tokenizer, script_main
from transformers import set_seed

from hf_entity_models import RefReaderConfig, RefReaderForCausalLM, RefReaderForCoreference
from hf_entity_models.tasks.coreference import load_gap, train_on_gap
from hf_entity_models.tasks.language_modeling import build_refreader_lm_trainer, refreader_lm_training_arguments

GAP_DIR = DATA_DIR / "gap"
# 16 training rows in batches of 4 on 2 processes: 2 steps per epoch. 9 validation rows: an odd count, so the
# gathered predictions must drop the padding of the last evaluation batch.
GAP_TRAIN_ROWS, GAP_VALIDATION_ROWS, GAP_REPORT_ROWS = 16, 9, 6
LM_TRAIN_BLOCKS, LM_EVAL_BLOCKS, LM_BLOCK_LENGTH = 16, 6, 12
PER_DEVICE_BATCH, EPOCHS = 4, 2


def tiny_reader_config() -> RefReaderConfig:
    # The MiniLM tokenizer has the BERT uncased vocabulary, the config's default vocab_size.
    return RefReaderConfig(embedding_size=16, hidden_size=16, key_size=8, num_memory_cells=2, dropout=0.0)


def train_gap(output_dir: Path, encoder_tokenizer) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    development = load_gap(GAP_DIR / "gap-development.tsv")
    validation = load_gap(GAP_DIR / "gap-validation.tsv")
    set_seed(0)
    model = RefReaderForCoreference(tiny_reader_config())
    recorder = RankRecorder(model)
    result = train_on_gap(
        model, encoder_tokenizer, development.select(range(GAP_TRAIN_ROWS)),
        validation.select(range(GAP_VALIDATION_ROWS)), output_dir / "trainer", early_stopping_patience=None,
        report_source=validation.select(range(GAP_VALIDATION_ROWS, GAP_VALIDATION_ROWS + GAP_REPORT_ROWS)),
        num_train_epochs=EPOCHS, per_device_train_batch_size=PER_DEVICE_BATCH,
        per_device_eval_batch_size=PER_DEVICE_BATCH, learning_rate=3e-2, disable_tqdm=True, seed=0,
    )  # fmt: skip
    result.trainer.save_model(str(output_dir / "model"))
    recorder.write(
        output_dir,
        result.trainer,
        threshold=result.threshold_sweep.best_threshold,
        validation_f1=result.validation_scores.f1,
        report_f1=result.report_scores.f1,
        coref_threshold=model.config.coref_threshold,
        eval_f1_per_epoch=[entry["eval_f1"] for entry in result.trainer.state.log_history if "eval_f1" in entry],
    )


def synthetic_blocks(count: int, seed: int) -> datasets.Dataset:
    generator = torch.Generator().manual_seed(seed)
    # Ids of ordinary word pieces (the first thousand are special and unused tokens).
    return datasets.Dataset.from_dict(
        {"input_ids": torch.randint(1000, 1100, (count, LM_BLOCK_LENGTH), generator=generator).tolist()}
    )


def train_lm(output_dir: Path, encoder_tokenizer) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    arguments = refreader_lm_training_arguments(
        str(output_dir / "trainer"), batch_size=PER_DEVICE_BATCH, num_train_epochs=EPOCHS, disable_tqdm=True,
        learning_rate=3e-2,
    )  # fmt: skip
    set_seed(0)
    model = RefReaderForCausalLM(tiny_reader_config())
    recorder = RankRecorder(model)
    trainer = build_refreader_lm_trainer(
        model, encoder_tokenizer, synthetic_blocks(LM_TRAIN_BLOCKS, 1), synthetic_blocks(LM_EVAL_BLOCKS, 2), arguments,
        early_stopping_patience=None,
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(output_dir / "model"))
    recorder.write(
        output_dir,
        trainer,
        eval_loss_per_epoch=[entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry],
        best_metric=trainer.state.best_metric,
    )


def train(output_dir: Path) -> None:
    """GAP coreference into ``output_dir/gap``, then LM pre-training into ``output_dir/lm``."""
    encoder_tokenizer = minilm_tokenizer()
    train_gap(output_dir / "gap", encoder_tokenizer)
    train_lm(output_dir / "lm", encoder_tokenizer)


if __name__ == "__main__":
    script_main(train, __doc__.splitlines()[0])
