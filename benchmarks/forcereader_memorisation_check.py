"""Where does a ForceReader rung lose to the joint baseline: in fitting its training questions, or in carrying what
it fits to other articles? A small controlled run (issue 22).

Each rung named on the command line is trained by `train_on_squad` on the same few SQuAD 1.1 training questions
(the benchmark's split by article and sampling), several epochs at the benchmark's rates, then scored on those
training questions themselves and on the held-out selection articles. A rung that fits its training questions
better but scores no better on held-out articles memorises with its new layers rather than learning to read.

    python benchmarks/forcereader_memorisation_check.py joint-bert forcereader      # about 10 minutes on 2 cores
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).parent))
import bench_forcereader_squad as bench  # noqa: E402

from hf_entity_models.tasks.question_answering import evaluate_squad, train_on_squad  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rungs", nargs="+", choices=[*bench.RUNGS, *bench.VARIANTS])
    parser.add_argument("--train-questions", type=int, default=160)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--new-lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    split = bench.parse_args(["--versions", "1.1", "--train-questions", str(args.train_questions),
                              "--report-questions", "100"])
    data = bench.split_version("1.1", split)
    tokenizer = AutoTokenizer.from_pretrained(bench.ENCODER)
    for rung in args.rungs:
        model = bench.build(rung, args.seed)
        result = train_on_squad(
            model, tokenizer, data["train"], data["train"], f"runs/memorisation-check/{rung}",
            max_length=192, doc_stride=64, pretrained_lr=1e-4, new_lr=args.new_lr, num_train_epochs=args.epochs,
            per_device_train_batch_size=16, seed=args.seed, logging_steps=5, dataloader_num_workers=0,
        )
        losses = [(entry["step"], round(entry["loss"], 2)) for entry in result.trainer.state.log_history if "loss" in entry]
        heldout = evaluate_squad(result.trainer.model, tokenizer, data["selection"], max_length=192, doc_stride=64)
        print(f"{rung}: F1 on its {len(data['train'])} training questions {result.validation.scores['f1']:.1f}, "
              f"on {len(data['selection'])} held-out questions {heldout.scores['f1']:.1f}; training loss {losses}",
              flush=True)


if __name__ == "__main__":
    main()
