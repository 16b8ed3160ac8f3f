"""GPT2E against GPT-2 on LitBank, trained from scratch in one run: perplexity with and without entities, LAMBADA,
the paper's representation analysis (Table 4), and the train-step time ratio measured interleaved.

No pre-trained GPT-2 weights can be fetched here, so both models are trained from scratch with the same small config,
the real GPT-2 tokenizer, the same windows, steps, learning rate and seed:

  * LitBank's 80 books are split BY BOOK (`load_litbank_entity_lm`, split seed 0): training books, 8 validation books,
    8 test books; nothing is selected on the test books (the budget is fixed, no early stopping), and the validation
    books are reported as well;
  * both models start from the same weights: GPT2E is `GPT2EForCausalLM.from_pretrained` of the freshly initialised
    GPT-2 (its entity attention starts at zero, so at step 0 both compute the same function);
  * GPT2E reads the gold entity ids and carries each book's entity states from window to window; "without entities"
    is the same trained GPT2E with every entity id zeroed;
  * LAMBADA: perplexity of the target word and last-word accuracy, no entity information (the paper's protocol);
  * Table 4: mean cosine similarity of a mention with the other mentions of its entity, and with its entity's
    representation, pronouns vs other mentions, on the test books;
  * train-step time (forward + backward + AdamW step on the Trainer's batch) of GPT2E / GPT-2, the two models
    alternating on the same batches, median of the per-batch ratios.

    python benchmarks/bench_gpt2e_litbank.py --quick          # smoke run, a few minutes
    python benchmarks/bench_gpt2e_litbank.py                  # the issue's sizing: 6 layers, 384 wide, batch 8 x 512

Needs ../shared/data/litbank, ../shared/data/lambada and ../shared/data/tokenizers/gpt2.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, set_seed  # noqa: E402

from hf_entity_models import GPT2EForCausalLM  # noqa: E402
from hf_entity_models.models.gpt2e import PRESETS  # noqa: E402
from hf_entity_models.tasks.language_modeling import (  # noqa: E402
    EntityLMCollatorFor,
    build_entity_lm_trainer,
    entity_lm_training_arguments,
    evaluate_entity_lm,
    lambada_examples,
    lambada_scores,
    load_litbank_entity_lm,
    mention_similarities,
    order_windows_for_streams,
    read_lambada,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one training of each model per seed")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the split by book (same for all runs)")
    parser.add_argument("--window-length", type=int, default=512)
    parser.add_argument("--n-layer", type=int, default=6)
    parser.add_argument("--n-embd", type=int, default=384)
    parser.add_argument("--n-head", type=int, default=6)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="entity-memory", help="GPT2E's design")
    parser.add_argument("--entity-attention-size", type=int, default=None,
                        help="paper preset: default GPT2EConfig's (n_embd / 4)")
    parser.add_argument("--entity-attention-values", choices=("hidden", "entities"), default="hidden",
                        help="paper preset only")
    parser.add_argument("--speed-only", action="store_true", help="measure the step-time ratio only (no training)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="overrides --epochs when > 0")
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument(
        "--lambada-examples", type=int, default=1000,
        help="score the first N LAMBADA test passages (0: all 5153); perplexity is per BPE token of the target word",
    )
    parser.add_argument("--speed-batches", type=int, default=5, help="training batches timed for the step ratio")
    parser.add_argument("--speed-repeats", type=int, default=2, help="passes over the timed batches")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output-dir", default="runs/bench-gpt2e-litbank")
    parser.add_argument("--results", default=None, help="JSON output (default benchmarks/results/gpt2e_litbank.json)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budget, results to gpt2e_litbank_quick.json")
    parser.add_argument(
        "--merge", nargs="+", metavar="JSON",
        help="no training: merge the records of runs of single seeds (same arguments otherwise) into --results",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.window_length, args.n_layer, args.n_embd, args.n_head = 128, 2, 64, 2
        args.batch_size, args.max_steps, args.lambada_examples = 4, 6, 50
        args.speed_batches, args.speed_repeats = 2, 1
    if args.results is None:
        args.results = str(RESULTS / ("gpt2e_litbank_quick.json" if args.quick else "gpt2e_litbank.json"))
    return args


def machine() -> str:
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), torch "
        f"{torch.__version__}, transformers {transformers.__version__}, {device}"
    )


def gpt2_config(args, vocab_size: int) -> GPT2Config:
    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=args.window_length,
        n_layer=args.n_layer,
        n_embd=args.n_embd,
        n_head=args.n_head,
        use_cache=False,  # training and scoring never decode: neither model builds a key/value cache
    )


def build_pair(args, vocab_size: int, seed: int, max_entities: int) -> tuple[GPT2LMHeadModel, GPT2EForCausalLM]:
    """GPT-2 freshly initialised with `seed`, and GPT2E loaded from exactly those weights."""
    set_seed(seed)
    gpt2 = GPT2LMHeadModel(gpt2_config(args, vocab_size))
    with tempfile.TemporaryDirectory() as folder:
        gpt2.save_pretrained(folder)
        set_seed(seed)
        entity_fields = dict(max_entities=max_entities, **PRESETS[args.preset])
        if args.preset == "paper":
            entity_fields["entity_attention_values"] = args.entity_attention_values
            if args.entity_attention_size:
                entity_fields["entity_attention_size"] = args.entity_attention_size
        gpt2e = GPT2EForCausalLM.from_pretrained(folder, **entity_fields)
    return gpt2, gpt2e


def train(model, tokenizer, windows, args, seed: int, name: str) -> dict:
    training_args = entity_lm_training_arguments(
        os.path.join(args.output_dir, f"{name}-seed{seed}"),
        batch_size=args.batch_size,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=False,
    )
    trainer = build_entity_lm_trainer(model, tokenizer, windows, training_args)
    start = time.perf_counter()
    result = trainer.train()
    return {"train_seconds": time.perf_counter() - start, "steps": result.global_step, "mean_train_loss": result.training_loss}


def evaluate(gpt2, gpt2e, splits, lambada, tokenizer, args) -> dict:
    scores = {}
    for split in ("validation", "test"):
        gpt2e_scores = evaluate_entity_lm(gpt2e, splits[split], batch_size=args.batch_size)
        gpt2_scores = evaluate_entity_lm(gpt2, splits[split], batch_size=args.batch_size)
        scores[split] = {
            "gpt2e_with_entities": gpt2e_scores["perplexity"],
            "gpt2e_without_entities": gpt2e_scores["perplexity_without_entities"],
            "gpt2": gpt2_scores["perplexity"],
            "mentions_gpt2e_with_entities": gpt2e_scores["mention_perplexity"],
            "mentions_gpt2e_without_entities": gpt2e_scores["mention_perplexity_without_entities"],
            "mentions_gpt2": gpt2_scores["mention_perplexity"],
        }
    for name, model in (("gpt2e", gpt2e), ("gpt2", gpt2)):
        result = lambada_scores(model, lambada, batch_size=16)
        scores.setdefault("lambada", {})[name] = {"perplexity": result.perplexity, "accuracy": result.accuracy}
    scores["lambada"]["examples"] = len(lambada)
    table4 = {}
    for name, model, use_entities in (
        ("gpt2e_without_entities", gpt2e, False),
        ("gpt2e_with_entities", gpt2e, True),
        ("gpt2", gpt2, True),
    ):
        result = mention_similarities(model, splits["test"], tokenizer, batch_size=args.batch_size, use_entities=use_entities)
        table4[name] = {"mention": result.mention, "entity": result.entity, "counts": result.counts}
    scores["table4_test"] = table4
    return scores


def fit_lambada_to_window(examples: list[dict], window: int) -> tuple[list[dict], int]:
    """LAMBADA passages whose context and target exceed the models' window keep the last tokens of their context
    (the target word is never cut); returns the examples and how many were shortened so."""
    fitted, truncated = [], 0
    for example in examples:
        room = window - len(example["target_ids"])
        if room < 1:
            raise ValueError(f"A LAMBADA target of {len(example['target_ids'])} tokens does not fit a window of {window}.")
        truncated += len(example["context_ids"]) > room
        fitted.append({**example, "context_ids": example["context_ids"][-room:]})
    return fitted, truncated


def step_time_ratio(gpt2, gpt2e, tokenizer, windows, args) -> dict:
    """GPT2E / GPT-2 train-step time on the same batches, the two alternating (order swapped every other batch)."""
    ordered = order_windows_for_streams(windows, args.batch_size)
    pad = tokenizer.eos_token_id
    batches = [
        ordered.select(range(start, start + args.batch_size))
        for start in range(0, args.batch_size * args.speed_batches, args.batch_size)
    ]
    models = {"gpt2": gpt2, "gpt2e": gpt2e}
    collators = {name: EntityLMCollatorFor(pad, with_entities=name == "gpt2e") for name in models}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-6) for name, model in models.items()}
    device = next(gpt2.parameters()).device

    def step(name: str, rows) -> float:
        model = models[name].train()
        batch = {key: value.to(device) for key, value in collators[name](list(rows)).items()}
        if name == "gpt2e":  # the store would carry states between timed batches; time the same work every time
            model.reset_entity_stores()
            batch["window_index"] = torch.zeros_like(batch["window_index"])  # each timed batch starts its documents
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for name in models:  # warm-up
        step(name, batches[0])
    seconds = {name: [] for name in models}
    ratios = []
    for repeat in tqdm(range(args.speed_repeats * len(batches)), desc="Timing train steps"):
        rows = batches[repeat % len(batches)]
        order = ("gpt2", "gpt2e") if repeat % 2 == 0 else ("gpt2e", "gpt2")
        measured = {name: step(name, rows) for name in order}
        for name, value in measured.items():
            seconds[name].append(value)
        ratios.append(measured["gpt2e"] / measured["gpt2"])
    return {
        "median_seconds": {name: statistics.median(values) for name, values in seconds.items()},
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "batch": f"{args.batch_size} x {args.window_length}",
    }


def merge_records(paths: list[str], output: str) -> dict:
    """One record of several single-seed runs (e.g. seeds run side by side, one per core), with the summary over
    all their seeds."""
    records = [json.loads(Path(path).read_text()) for path in paths]
    merged = {**records[0], "runs": {}, "merged_from": {path: record["command"] for path, record in zip(paths, records)}}
    for record in records:
        overlap = set(merged["runs"]) & set(record["runs"])
        if overlap:
            raise ValueError(f"seed(s) {sorted(overlap)} appear in more than one of {paths}.")
        merged["runs"].update(record["runs"])
    merged["summary"] = summary(merged["runs"])
    Path(output).write_text(json.dumps(merged, indent=2))
    return merged


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.merge:
        print(json.dumps(merge_records(args.merge, args.results)["summary"], indent=2))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(DATA / "tokenizers" / "gpt2")
    splits = load_litbank_entity_lm(
        DATA / "litbank" / "conll", tokenizer, window_length=args.window_length, seed=args.split_seed
    )
    max_entities = max(max(splits[split]["num_entities"]) for split in splits)
    texts = read_lambada(DATA / "lambada" / "lambada_test.jsonl")
    lambada = lambada_examples(texts[: args.lambada_examples] if args.lambada_examples else texts, tokenizer)
    lambada, lambada_truncated = fit_lambada_to_window(lambada, args.window_length)
    record = {
        "command": "python benchmarks/bench_gpt2e_litbank.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "args": vars(args),
        "data": {
            split: {"windows": len(dataset), "tokens": sum(len(ids) for ids in dataset["input_ids"])}
            for split, dataset in splits.items()
        },
        "max_entities_per_book": max_entities,
        "lambada_contexts_truncated_to_the_window": lambada_truncated,
        "runs": {},
    }
    for seed in args.seeds:
        gpt2, gpt2e = build_pair(args, len(tokenizer), seed, max_entities=max(256, max_entities))
        if torch.cuda.is_available():
            gpt2, gpt2e = gpt2.cuda(), gpt2e.cuda()
        run = {"speed": step_time_ratio(gpt2, gpt2e, tokenizer, splits["train"], args)}
        print(f"seed {seed}: step time GPT2E / GPT-2 = {run['speed']['ratio_median']:.3f}", flush=True)
        if args.speed_only:
            record["runs"][str(seed)] = run
            Path(args.results).parent.mkdir(parents=True, exist_ok=True)
            Path(args.results).write_text(json.dumps(record, indent=2))
            continue
        # The timing took AdamW steps at lr 1e-6 on both; start the training from the shared weights again.
        gpt2, gpt2e = build_pair(args, len(tokenizer), seed, max_entities=max(256, max_entities))
        run["training"] = {name: train(model, tokenizer, splits["train"], args, seed, name) for name, model in (("gpt2", gpt2), ("gpt2e", gpt2e))}
        run["scores"] = evaluate(gpt2, gpt2e, splits, lambada, tokenizer, args)
        print(f"seed {seed}: {json.dumps(run['scores']['test'])}", flush=True)
        record["runs"][str(seed)] = run
        # Written after every seed, so that a long run stopped early keeps the seeds it finished.
        record["summary"] = summary(record["runs"])
        record["wall_seconds"] = time.perf_counter() - started
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(record, indent=2))
    if args.speed_only:
        ratios = [run["speed"]["ratio_median"] for run in record["runs"].values()]
        record["summary"] = {"step_time_ratio": {"mean": statistics.mean(ratios), "values": ratios}}
        Path(args.results).write_text(json.dumps(record, indent=2))
    print(json.dumps(record["summary"], indent=2))


def summary(runs: dict) -> dict:
    """Mean and spread over seeds of the headline figures, and the issue's targets."""

    def spread(values: list[float]) -> dict:
        return {
            "mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values,
        }

    figures = {
        f"{split}_{prefix}ppl_{model}": [run["scores"][split][f"{prefix}{model}"] for run in runs.values()]
        for split in ("validation", "test")
        for prefix in ("", "mentions_")
        for model in ("gpt2e_with_entities", "gpt2e_without_entities", "gpt2")
    }
    figures.update({
        "lambada_ppl_gpt2e": [run["scores"]["lambada"]["gpt2e"]["perplexity"] for run in runs.values()],
        "lambada_ppl_gpt2": [run["scores"]["lambada"]["gpt2"]["perplexity"] for run in runs.values()],
        "step_time_ratio": [run["speed"]["ratio_median"] for run in runs.values()],
    })
    result = {name: spread(values) for name, values in figures.items()}
    with_entities, without = figures["test_ppl_gpt2e_with_entities"], figures["test_ppl_gpt2e_without_entities"]
    result["targets"] = {
        "step_time_ratio_at_most_1.10": result["step_time_ratio"]["mean"] <= 1.10,
        "test_ppl_with_entities_below_ids_zeroed_every_seed": all(a < b for a, b in zip(with_entities, without)),
        "test_ppl_gpt2e_with_entities_not_above_gpt2": result["test_ppl_gpt2e_with_entities"]["mean"]
        <= result["test_ppl_gpt2"]["mean"],
    }
    return result


if __name__ == "__main__":
    main()
