"""Train and evaluate a tiny PeTra on real GAP rows with the stock Trainer, one process or many.

Run it unchanged with one process (``python ddp_train_petra.py OUT``) or under Accelerate with data-parallel
processes; on a CPU-only machine two real processes (gloo backend) come from

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29511 tests/scripts/ddp_train_petra.py OUT

(``--cpu --num_processes 2`` and a bare ``--num_processes 2`` silently start a single process; ``--multi_gpu`` without
``use_cpu=True`` in the TrainingArguments or ``ACCELERATE_USE_CPU=true`` starts two unconnected single-process runs).
The main process encodes the rows first and writes the feature cache that the other processes then load (the
TrainingArguments' ``main_process_first``). Every process writes ``OUT/rank{R}.json`` (`ddp_common.RankRecorder`)
with, besides the common facts, the gathered evaluation metrics and predictions; the main process saves the trained
model to ``OUT/model`` (`Trainer.save_model`, called by every process). `tests/test_multiprocess_petra.py` launches
this (through `ddp_train_models.py`) and checks the files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from ddp_common import DATA_DIR, TESTS_DIR, RankRecorder, as_floats, minilm_tokenizer, script_main
from transformers import set_seed

sys.path.insert(0, str(TESTS_DIR))  # for conftest's tiny configs

from conftest import tiny_petra_config  # noqa: E402

from hf_entity_models import PetraForCoreference  # noqa: E402
from hf_entity_models.models.petra import IGNORE_INDEX  # noqa: E402
from hf_entity_models.tasks.coreference import (  # noqa: E402
    build_gap_trainer,
    cache_encoder_features,
    gap_gold,
    gap_training_arguments,
    load_gap,
    prepare_gap_dataset,
)

GAP_DIR = DATA_DIR / "gap"
# 13 evaluation rows, an odd number: the distributed evaluation has to pad the last batch and drop the duplicates.
TRAIN_ROWS, EVAL_ROWS = 32, 13
# Two epochs: enough steps (4 per process per epoch) to show the split, the averaged gradients and equal weights.
EPOCHS, PER_DEVICE_TRAIN_BATCH, PER_DEVICE_EVAL_BATCH = 2, 4, 4


def prepared_rows(path: Path, tokenizer, count: int):
    # Select first, then tokenize: only the rows used are processed.
    return prepare_gap_dataset(load_gap(path).select(range(count)), tokenizer)


def train(output_dir: Path, data_dir: Path = GAP_DIR) -> None:
    """Train on `TRAIN_ROWS` GAP development rows, evaluate and predict on `EVAL_ROWS` validation rows."""
    output_dir.mkdir(parents=True, exist_ok=True)
    encoder_tokenizer = minilm_tokenizer()
    train_rows = prepared_rows(data_dir / "gap-development.tsv", encoder_tokenizer, TRAIN_ROWS)
    eval_rows = prepared_rows(data_dir / "gap-validation.tsv", encoder_tokenizer, EVAL_ROWS)
    arguments = gap_training_arguments(
        str(output_dir / "trainer"),
        num_train_epochs=EPOCHS,
        per_device_train_batch_size=PER_DEVICE_TRAIN_BATCH,
        per_device_eval_batch_size=PER_DEVICE_EVAL_BATCH,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        eval_strategy="no",
        save_strategy="no",
        load_best_model_at_end=False,
        logging_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    # The same seed in every process: the same initial model, so that every process needs the same frozen-encoder
    # features (DDP also broadcasts rank 0's parameters when it wraps the model).
    set_seed(0)
    model = PetraForCoreference(tiny_petra_config())
    recorder = RankRecorder(model)
    # The main process encodes the rows and writes the cache file; the others wait, then load that file.
    cache_dir = output_dir / "feature_cache"
    with arguments.main_process_first(desc="encoder features"):
        cache_files_before = len(list(cache_dir.glob("*.safetensors"))) if cache_dir.is_dir() else 0
        train_features = cache_encoder_features(model, train_rows, cache_dir=cache_dir, show_progress=False)
        evaluation = cache_encoder_features(model, eval_rows, cache_dir=cache_dir, show_progress=False)
        cache_files_after = len(list(cache_dir.glob("*.safetensors")))

    trainer = build_gap_trainer(
        model,
        arguments,
        train_features,
        evaluation,
        gap_gold(eval_rows),
        pad_token_id=encoder_tokenizer.pad_token_id,
        early_stopping_patience=None,  # needs per-epoch evaluation; this run evaluates once, after training
    )
    trainer.train()
    metrics = trainer.evaluate()
    prediction = trainer.predict(evaluation)
    trainer.save_model(str(output_dir / "model"))  # every process calls it; the Trainer writes on rank 0 only
    link_labels = prediction.label_ids[0] if isinstance(prediction.label_ids, (tuple, list)) else prediction.label_ids
    recorder.write(
        output_dir,
        trainer,
        train_rows=len(train_features),
        feature_cache_files_before=cache_files_before,
        feature_cache_files_after=cache_files_after,
        eval_rows_total=len(evaluation),
        eval_batches_on_this_rank=len(trainer.get_eval_dataloader(evaluation)),
        gumbel_temperature=float(trainer.model.petra.gumbel_temperature),
        metrics=as_floats(metrics),
        predict_metrics=as_floats(prediction.metrics),
        predictions=np.asarray(prediction.predictions, dtype=np.float64).tolist(),
        link_pair_counts=(np.asarray(link_labels) != IGNORE_INDEX).sum(-1).tolist(),
        eval_ids=list(eval_rows["id"]),
    )


if __name__ == "__main__":
    script_main(train, __doc__.splitlines()[0], default_data_dir=GAP_DIR)
