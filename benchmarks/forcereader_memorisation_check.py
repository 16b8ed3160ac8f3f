"""Why does ForceReader score below the joint baseline it starts as? A controlled run per training condition
(issue 30, section 1; first written for issue 22).

Each condition named on the command line (a rung or ForceReader with other head-training switches, see
`CONDITIONS`) is trained with the stock Trainer on the same SQuAD 1.1 training questions (the benchmark's split by
article and sampling), at the benchmark's rates, with the same seed; then scored on a sample of its own training
questions and on the held-out selection articles (never the report articles), each answer head alone and their sum:

  * `combined`: the logits the model answers with;
  * `qcp_tokens`: the QCP token head alone (BERT's QA head on the jointly read pair, the joint baseline's head);
  * `separate_encoding`: the separate-encoding branch alone (bilinear head + interaction features).

A condition whose heads fit the training questions better but score no better held out memorises rather than
reads; a condition whose QCP head alone scores below the joint baseline's head has been kept from learning by the
branch. One JSON record per condition is written as it finishes (`--results`), so an interrupted run keeps what it
measured, and `--resume` skips the conditions already there.

    python benchmarks/forcereader_memorisation_check.py joint a-sum b-deep-supervision   # ~65 min, 1 thread
    python benchmarks/forcereader_memorisation_check.py --train-questions 160 --epochs 3 joint a-sum   # issue 22's
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, set_seed

sys.path.insert(0, str(Path(__file__).parent))
import bench_forcereader_squad as bench  # noqa: E402

from hf_entity_models import ForceReaderForQuestionAnswering  # noqa: E402
from hf_entity_models.models.forcereader.configuration_forcereader import SUMMED_HEAD_TRAINING  # noqa: E402
from hf_entity_models.tasks.question_answering import (  # noqa: E402
    build_squad_trainer,
    postprocess_predictions,
    score_answers,
    squad_features,
    squad_head_logits,
    squad_training_arguments,
)

# name -> (preset, config overrides, optimizer options). `a-sum` is the issue-22 default (the summed logits alone);
# every other ForceReader condition changes one thing from it, or names the two it combines.
CONDITIONS = {
    "joint": ("joint-bert", {}, {}),
    "sep-bert-reader": ("sep-bert-reader", {}, {}),
    "a-sum": ("forcereader", SUMMED_HEAD_TRAINING, {}),
    "b-deep-supervision": ("forcereader", {**SUMMED_HEAD_TRAINING, "head_training": "deep-supervision"}, {}),
    "c-detached": ("forcereader", {**SUMMED_HEAD_TRAINING, "detach_branch_from_encoder": True}, {}),
    "d-branch-dropout": ("forcereader", {**SUMMED_HEAD_TRAINING, "branch_dropout": 0.5}, {}),
    "d-gate": ("forcereader", {**SUMMED_HEAD_TRAINING, "branch_gate": True}, {}),
    # Decoupled decay is multiplied by the rate: 10 x 3e-4 shrinks the new layers by 0.3% a step, ~20% over the run.
    "d-weight-decay": ("forcereader", SUMMED_HEAD_TRAINING, {"new_weight_decay": 10.0}),
    "e-stacked-detached": (
        "forcereader", {**SUMMED_HEAD_TRAINING, "head_training": "stacked", "detach_branch_from_encoder": True}, {}
    ),
    "e-deep-supervision-detached": (
        "forcereader",
        {**SUMMED_HEAD_TRAINING, "head_training": "deep-supervision", "detach_branch_from_encoder": True},
        {},
    ),
    # Three encoder passes a step give the encoder three gradients: the encoder at a third of its rate.
    "e-encoder-lr-third": ("forcereader", SUMMED_HEAD_TRAINING, {"pretrained_lr_factor": 1 / 3}),
}
HEADS = ("combined", "qcp_tokens", "separate_encoding")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("conditions", nargs="*", help=f"any of {', '.join(CONDITIONS)}")
    parser.add_argument("--table", action="store_true", help="print --results as a markdown table and stop")
    parser.add_argument("--train-questions", type=int, default=1200)
    parser.add_argument("--epochs", type=float, default=1.5)
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pretrained-lr", type=float, default=1e-4)
    parser.add_argument("--new-lr", type=float, default=3e-4)
    parser.add_argument("--scored-questions", type=int, default=300, help="training and held-out questions scored")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", default=str(bench.RESULTS / "forcereader_mechanism.json"))
    parser.add_argument("--resume", action="store_true", help="skip the conditions already in --results")
    parser.add_argument(
        "--report", action="store_true",
        help="also score the report articles (only reported: nothing is chosen on them), as the benchmark does",
    )
    parser.add_argument(
        "--save-models", default=None, metavar="DIR",
        help="save every trained reader to DIR/v1.1/CONDITION/seedSEED/final (the layout of the benchmark's "
             "--init-from-v1)",
    )
    args = parser.parse_args(argv)
    unknown = [condition for condition in args.conditions if condition not in CONDITIONS]
    if unknown or not (args.conditions or args.table):
        parser.error(f"name conditions among {', '.join(CONDITIONS)} (unknown: {unknown})")
    return args


def build(condition: str, seed: int) -> tuple[ForceReaderForQuestionAnswering, dict]:
    preset, overrides, optimizer_options = CONDITIONS[condition]
    set_seed(seed)
    return ForceReaderForQuestionAnswering.from_encoder(bench.ENCODER, preset=preset, **overrides), optimizer_options


def head_scores(model, tokenizer, examples, args) -> dict:
    """SQuAD 1.1 F1 / EM of the answers of every head of `model` (the sum alone for a one-head rung): one forward
    pass per feature batch, every head post-processed like the model's answers."""
    features = squad_features(examples, tokenizer, args.max_length, args.doc_stride, training=False)
    scores = {}
    for head, (start_logits, end_logits) in squad_head_logits(model, features, progress=False).items():
        evaluation = score_answers(postprocess_predictions(examples, features, start_logits, end_logits), examples)
        scores[head] = {"f1": evaluation.scores["f1"], "exact_match": evaluation.scores["exact_match"]}
    return scores


def run_condition(condition: str, data: dict, tokenizer, args) -> dict:
    model, optimizer_options = build(condition, args.seed)
    options = dict(optimizer_options)
    pretrained_lr = args.pretrained_lr * options.pop("pretrained_lr_factor", 1.0)
    training_args = squad_training_arguments(
        f"runs/forcereader-mechanism/{condition}", num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, seed=args.seed, logging_steps=10, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    features = squad_features(data["train"], tokenizer, args.max_length, args.doc_stride, training=True)
    trainer = build_squad_trainer(
        model, tokenizer, features, training_args, pretrained_lr=pretrained_lr, new_lr=args.new_lr, **options
    )
    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started
    losses = [[entry["step"], round(entry["loss"], 3)] for entry in trainer.state.log_history if "loss" in entry]
    record = {
        "config": {key: model.config.to_dict()[key] for key in (
            "separate_encoding", "reading_modes", "qcp_passage_logits", "head_training",
            "detach_branch_from_encoder", "branch_dropout", "branch_gate")},
        "optimizer": {"pretrained_lr": pretrained_lr, "new_lr": args.new_lr, **options},
        "train_steps": trainer.state.global_step,
        "train_seconds": train_seconds,
        "train_loss_log": losses,
        "mean_train_loss": trainer.state.log_history[-1].get("train_loss"),
        "training_questions": head_scores(model, tokenizer, data["train_scored"], args),
        "heldout_selection": head_scores(model, tokenizer, data["selection"], args),
    }
    if args.report:
        record["heldout_report"] = head_scores(model, tokenizer, data["report"], args)
    if args.save_models:
        trainer.save_model(str(bench.saved_reader(args.save_models, "1.1", condition, args.seed)))
    if getattr(model, "branch_gate", None) is not None:
        record["branch_gate"] = model.branch_gate.weight.item()
    return record


def markdown_table(results: dict) -> str:
    """One row per condition: F1 of the sum and of each head alone, on training, selection and report questions."""

    def cells(record: dict, part: str) -> list[str]:
        scores = record.get(part, {})
        return [f"{scores[head]['f1']:.1f}" if head in scores else "-" for head in HEADS]

    lines = [
        "| condition | training F1: sum / QCP head / branch | selection F1: sum / QCP head / branch | report F1: sum / "
        "QCP head / branch | mean training loss | s / step |",
        "|---|---|---|---|---|---|",
    ]
    for name, record in results["conditions"].items():
        parts = [" / ".join(cells(record, part)) for part in ("training_questions", "heldout_selection", "heldout_report")]
        lines.append(f"| `{name}` | {parts[0]} | {parts[1]} | {parts[2]} | {record['mean_train_loss']:.2f} | "
                     f"{record['train_seconds'] / record['train_steps']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(Path(args.results).read_text())))
        return
    torch.set_num_threads(args.threads)
    split = bench.parse_args([
        "--versions", "1.1", "--train-questions", str(args.train_questions),
        "--report-questions", str(args.scored_questions),
    ])
    data = bench.split_version("1.1", split)
    data["train_scored"] = bench.sample(data["train"], args.scored_questions, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(bench.ENCODER)
    path = Path(args.results)
    budget = {key: getattr(args, key) for key in (
        "train_questions", "epochs", "max_length", "doc_stride", "batch_size", "pretrained_lr", "new_lr",
        "scored_questions", "seed")}
    results = json.loads(path.read_text()) if args.resume and path.exists() else {}
    if results and results.get("budget") != budget:
        raise SystemExit(f"--resume: {path} holds another budget ({results.get('budget')}); pass another --results.")
    results.update(budget=budget, machine=bench.machine(), heldout=data["record"]["selection"])
    runs = results.setdefault("conditions", {})
    for condition in args.conditions:
        if condition in runs:
            print(f"{condition}: kept from {path}", flush=True)
            continue
        record = run_condition(condition, data, tokenizer, args)
        # Another process may have written its own conditions to the same file meanwhile: merge, do not overwrite.
        on_disk = json.loads(path.read_text()) if path.exists() else {}
        runs = {**on_disk.get("conditions", {}), **runs, condition: record}
        results["conditions"] = runs
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2))
        summary = {part: {head: round(value["f1"], 1) for head, value in record[part].items()}
                   for part in ("training_questions", "heldout_selection", "heldout_report") if part in record}
        print(f"{condition}: F1 {json.dumps(summary)}, mean train loss {record['mean_train_loss']:.3f}, "
              f"{record['train_steps']} steps in {record['train_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
