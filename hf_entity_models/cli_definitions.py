"""``hf-entity definitions``: train a DefinitionEMB reader for a model and write the model with replaced embeddings.

Kept apart from cli.py, which registers it: one command, one file.
"""

import argparse
import json
import math
from pathlib import Path
from typing import Any

DEFAULT_READER_STEPS = 1000
DEFAULT_ALPHA = 5.0


def add_definitions_parser(commands: argparse._SubParsersAction, threads_option, overwrite_option) -> None:
    """Register ``definitions`` with the ``hf-entity`` parser."""
    parser = commands.add_parser(
        "definitions",
        help="rebuild the rare-token embeddings of a model from dictionary definitions (DefinitionEMB)",
        description="Train a DefinitionEMB definition reader for MODEL on word definitions (--definitions: WordNet "
        "glosses or any word / part_of_speech / definition table) with the stock Trainer, or load a trained one "
        "(--reader); read the definition embeddings of the tokens of a task (--task-texts or --glue-task); replace "
        "min(alpha% x N, |V_task|) rows of MODEL's token embeddings, ranked by --strategy; and save MODEL, still of "
        "its own class, with its tokenizer, a model card and the list of replaced rows to --output-dir. The "
        "trained reader is saved to <output-dir>/definition-reader.",
        epilog="Example: hf-entity definitions path/to/minilm --definitions wordnet/wordnet30_glosses.tsv "
        "--glue-task mrpc --glue-dir glue/MRPC --alpha 5 --output-dir runs/minilm-mrpc-definitions",
    )
    parser.add_argument("model", help="folder or Hub id of the pre-trained model whose embeddings are rebuilt")
    data = parser.add_argument_group("data")
    data.add_argument(
        "--definitions", required=True,
        help="definitions: a .tsv/.csv/.json/.jsonl file with word, part_of_speech, definition columns (the WordNet "
        "glosses layout is recognised) or a Hub dataset id",
    )
    data.add_argument(
        "--no-number-words", action="store_true",
        help="do not add generated definitions of the number tokens of the vocabulary ('2' -> 'two')",
    )
    data.add_argument("--task-texts", nargs="+", metavar="FILE", help="text files of the task, one text per line")
    data.add_argument("--glue-task", choices=("mrpc", "rte"), help="take the task texts from a GLUE training set")
    data.add_argument("--glue-dir", help="the GLUE task's folder (with train.tsv), for --glue-task")
    reader = parser.add_argument_group("definition reader")
    reader.add_argument("--reader", help="a trained DefinitionEmbModel folder (skips training)")
    reader.add_argument(
        "--reader-type", choices=("encoder-only", "encoder-decoder"),
        help="reader architecture (default: encoder-decoder for an encoder-decoder model, else encoder-only)",
    )
    reader.add_argument("--max-steps", type=_positive_int, default=DEFAULT_READER_STEPS,
                        help=f"training steps of the reader (default: {DEFAULT_READER_STEPS})")
    reader.add_argument("--batch-size", type=_positive_int, default=32, help="definitions per step (default: 32)")
    reader.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate (default: 1e-4)")
    reader.add_argument("--seed", type=int, default=0, help="seed of training and corruption (default: 0)")
    replacement = parser.add_argument_group("replacement")
    replacement.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                             help=f"percentage of the vocabulary size bounding the replaced rows, 0..100 (default: {DEFAULT_ALPHA:g})")
    replacement.add_argument("--strategy", choices=("last", "random", "top"), default="last",
                             help="which task tokens first: largest indexes (last, the paper's), smallest from 5000 "
                             "(top) or random (default: last)")
    replacement.add_argument("--whole-range", action="store_true",
                             help="replace every token with a definition in the index range (Appendix M), not only "
                             "tokens that appear in the task")
    parser.add_argument("--output-dir", required=True, help="folder for the model with replaced embeddings")
    overwrite_option(parser)
    threads_option(parser)
    parser.set_defaults(handler=run_definitions)


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return number


def run_definitions(args: argparse.Namespace) -> int:
    """Train (or load) the reader, replace the task's rare-token embeddings and save the model."""
    from transformers import AutoModel, AutoTokenizer, set_seed

    from .cli import CliError
    from .models.definition_emb import DefinitionEmbModel
    from .tasks.embeddings.replacement import apply_definition_embeddings

    _check_arguments(args, CliError)
    output_dir = Path(args.output_dir)
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model)
    definitions = _definitions(args, tokenizer)
    task_texts = _task_texts(args, CliError)
    if args.reader is not None:
        reader = DefinitionEmbModel.from_pretrained(args.reader)
        if args.reader_type is not None and args.reader_type != reader.config.reader_type:
            raise CliError(f"--reader {args.reader} is an {reader.config.reader_type} reader, not {args.reader_type}.")
    else:
        reader = _train_reader(args, model, tokenizer, definitions, output_dir / "definition-reader")
    result = apply_definition_embeddings(
        model, tokenizer, reader, task_texts, alpha=args.alpha, strategy=args.strategy,
        appearing_only=not args.whole_range, definitions=definitions, seed=args.seed, inplace=True,
        definitions_description=args.definitions,
    )
    result.save_pretrained(output_dir)
    print(json.dumps({"output_dir": str(output_dir), **result.summary()}))
    return 0


def _check_arguments(args: argparse.Namespace, error: type[Exception]) -> None:
    if not math.isfinite(args.alpha) or not 0 <= args.alpha <= 100:
        raise error(f"--alpha is a percentage of the vocabulary size and must lie in 0..100, got {args.alpha:g}.")
    if (args.task_texts is None) == (args.glue_task is None):
        raise error("give the task's texts with either --task-texts FILE... or --glue-task with --glue-dir.")
    if args.glue_task is not None and args.glue_dir is None:
        raise error("--glue-task needs --glue-dir, the task's folder with train.tsv.")
    if args.whole_range and args.strategy == "random":
        raise error("--whole-range replaces an index range, which --strategy random does not have.")
    output_dir = Path(args.output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not args.overwrite:
        raise error(f"{output_dir} exists and is not empty; pass --overwrite to replace its files.")


def _definitions(args: argparse.Namespace, tokenizer: Any):
    from datasets import concatenate_datasets

    from .tasks.embeddings.definitions import load_definitions, number_word_definitions

    definitions = load_definitions(args.definitions)
    if args.no_number_words:
        return definitions
    numbers = number_word_definitions(tokenizer)
    return concatenate_datasets([definitions.select_columns(numbers.column_names), numbers])


def _task_texts(args: argparse.Namespace, error: type[Exception]) -> list[str]:
    if args.glue_task is not None:
        from .tasks.embeddings.glue import read_glue, task_texts

        return task_texts(read_glue(args.glue_dir, args.glue_task, "train"))
    texts: list[str] = []
    for name in args.task_texts:
        path = Path(name)
        if not path.is_file():
            raise error(f"task text file {path} does not exist.")
        texts += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise error(f"the task text files {', '.join(args.task_texts)} hold no text: give the task's training texts.")
    return texts


def _train_reader(args: argparse.Namespace, model: Any, tokenizer: Any, definitions: Any, reader_dir: Path):
    from .models.definition_emb import DefinitionEmbModel
    from .tasks.embeddings.definitions import definition_prompt_dataset
    from .tasks.embeddings.training import build_definition_trainer, definition_training_arguments

    reader = DefinitionEmbModel.from_pretrained_model(model, reader_type=args.reader_type)
    reader.config.base_model_name_or_path = args.model
    prompts = definition_prompt_dataset(definitions, tokenizer)
    training_arguments = definition_training_arguments(
        str(reader_dir / "trainer"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        save_strategy="no",
    )
    trainer = build_definition_trainer(reader, tokenizer, prompts, args=training_arguments, seed=args.seed)
    trainer.train()
    reader.save_pretrained(reader_dir)
    tokenizer.save_pretrained(reader_dir)
    return reader
