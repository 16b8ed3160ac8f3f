"""Train a tiny GPT2E data-parallel with `build_entity_lm_trainer` (the stock Trainer loop) and evaluate it.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29512 tests/scripts/ddp_train_gpt2e.py OUT

The windows are synthetic (token and entity ids drawn in code, documents of different lengths, so that the processes'
streams end at different steps and padding windows are needed). Every process records the (document, window) pairs
of each training batch its model was called on, the `trainer.evaluate()` metrics and the rows it evaluated, and
`evaluate_entity_lm`'s numbers; the main process saves the model to ``OUT/model`` (`Trainer.save_model`).
`tests/test_multiprocess_gpt2e.py` checks the files.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from ddp_common import DATA_DIR, RankRecorder, as_floats, script_main
from transformers import AutoTokenizer, set_seed

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM
from hf_entity_models.tasks.language_modeling import (
    build_entity_lm_trainer,
    entity_lm_training_arguments,
    evaluate_entity_lm,
)

GPT2_TOKENIZER = DATA_DIR / "tokenizers" / "gpt2"
# Windows per document. Training, two processes, batches of 2: process 0 reads documents 0 and 4 (streams of 5 and 2
# windows: 5 batches), process 1 documents 1, 2, 3 and 5 (streams of 4 and 3: 4 batches, then one of padding).
TRAIN_DOCUMENT_WINDOWS = [5, 1, 3, 2, 2, 1]
EVAL_DOCUMENT_WINDOWS = [2, 1, 3, 1, 2]
PER_DEVICE_BATCH = 2
VOCAB_IN_USE = 50  # token ids drawn below this: the model learns something in a few steps
MAX_ENTITIES = 4


def tiny_gpt2e_config(vocab_size: int) -> GPT2EConfig:
    return GPT2EConfig(
        n_layer=2, n_embd=16, n_head=2, vocab_size=vocab_size, n_positions=16, max_entities=MAX_ENTITIES
    )


def synthetic_windows(window_counts: list[int], seed: int) -> datasets.Dataset:
    """Windows of 5-8 tokens; entity ids 0..MAX_ENTITIES recur across a document's windows."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for document, windows in enumerate(window_counts):
        for window in range(windows):
            length = int(torch.randint(5, 9, (1,), generator=generator))
            rows.append(
                {
                    "input_ids": torch.randint(0, VOCAB_IN_USE, (length,), generator=generator).tolist(),
                    "entity_ids": torch.randint(0, MAX_ENTITIES + 1, (length,), generator=generator).tolist(),
                    "document_id": document,
                    "window_index": window,
                    "num_entities": MAX_ENTITIES,
                }
            )
    return datasets.Dataset.from_list(rows)


def train(output_dir: Path) -> None:
    """One epoch over `TRAIN_DOCUMENT_WINDOWS`, then `trainer.evaluate()` and `evaluate_entity_lm` on the eval set."""
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(GPT2_TOKENIZER)
    train_windows = synthetic_windows(TRAIN_DOCUMENT_WINDOWS, seed=1)
    eval_windows = synthetic_windows(EVAL_DOCUMENT_WINDOWS, seed=2)
    arguments = entity_lm_training_arguments(
        str(output_dir / "trainer"),
        batch_size=PER_DEVICE_BATCH,
        num_train_epochs=1,
        learning_rate=1e-2,
        warmup_steps=0,
        lr_scheduler_type="constant",
        logging_strategy="no",
        disable_tqdm=True,
    )
    set_seed(0)
    model = GPT2EForCausalLM(tiny_gpt2e_config(len(tokenizer)))
    recorder = RankRecorder(model)
    trainer = build_entity_lm_trainer(model, tokenizer, train_windows, arguments, eval_windows)
    trainer.train()
    rows_before = recorder.eval_rows
    metrics = trainer.evaluate()
    trainer_eval_rows = recorder.eval_rows - rows_before
    rows_before = recorder.eval_rows
    scores = evaluate_entity_lm(
        trainer.model, eval_windows, batch_size=PER_DEVICE_BATCH, progress=False, distributed=True
    )
    shared_eval_rows = recorder.eval_rows - rows_before
    trainer.save_model(str(output_dir / "model"))  # every process calls it; the Trainer writes on rank 0 only
    recorder.write(
        output_dir,
        trainer,
        train_dataset_rows=len(trainer.train_dataset),
        metrics=as_floats(metrics),
        trainer_eval_rows=trainer_eval_rows,
        evaluate_entity_lm=scores,
        shared_eval_rows=shared_eval_rows,
        train_store_documents=len(model.entity_stores["train"]),
    )


if __name__ == "__main__":
    script_main(train, __doc__.splitlines()[0])
