"""``hf-entity definitions``: train a DefinitionEMB reader for a model and write the model with replaced embeddings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .checkpoints import checkpoint_entries, stored_config
from .common import (
    CliError,
    add_overwrite_option,
    add_threads_option,
    check_location,
    entry_names,
    is_nonempty_folder,
    listing,
    positive_int,
    refuse_folder_holding_the_current_one,
    refuse_inputs_inside,
)
from .checkpoint_swap import replacing_checkpoint

# After the least-squares start of A, 100 steps moved MiniLM's held-out cosine from 0.301 to 0.305
# (benchmarks/RESULTS.md): a few minutes on a CPU; raise it on a GPU.
DEFAULT_READER_STEPS = 100
DEFAULT_ALPHA = 5.0
DEFAULT_HELD_OUT = 300
# The subfolder of --output-dir that the trained reader is saved to: part of the checkpoint `definitions` writes.
READER_FOLDER = "definition-reader"
# The model_type of a saved DefinitionEMB reader (DefinitionEmbConfig.model_type), read without importing the model.
READER_MODEL_TYPE = "definition-emb"
# What each preset sets: the reader's config, the ranking, how rows are written, and whether A starts from the
# least-squares fit. "paper" is Section 5's reading (four slots 50/25/25, mask-slot readout, MSE, rows written as
# read, ranked by index); "default" hides the answer, reads what the model's kind allows, and keeps row norms.
PRESETS = {
    # blend None: `apply_definition_embeddings`'s DEFAULT_BLEND.
    "default": {"reader": {}, "strategy": "rare", "blend": None, "original_norms": True, "least_squares": True},
    "paper": {
        "reader": {"word_slots": "paper", "readout": "mask-slot", "loss": "mse"},
        "strategy": "last", "blend": 1.0, "original_norms": False, "least_squares": False,
    },
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``definitions``."""
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
        "--preset", choices=tuple(PRESETS), default="default",
        help="default: every word slot masked (only the forms distinct for the tokenizer), the readout the model's "
        "kind allows, cosine loss, A started from a least-squares fit, rows written at their own norm blended with "
        "--blend, ranked by task counts; paper: Section 5 as written (four slots corrupted 50/25/25, mask-slot "
        "readout, MSE, rows written as read, ranked by index). With --reader, only the ranking and writing apply",
    )
    reader.add_argument(
        "--readout", choices=("mask-slot", "pooled-definition"),
        help="override the readout (default: pooled-definition for an encoder without a masked-LM head, such as a "
        "sentence-embedding BertModel; mask-slot otherwise and with --preset paper)",
    )
    reader.add_argument(
        "--reader-type", choices=("encoder-only", "encoder-decoder"),
        help="reader architecture (default: encoder-decoder for an encoder-decoder model, else encoder-only)",
    )
    reader.add_argument("--max-steps", type=positive_int, default=DEFAULT_READER_STEPS,
                        help=f"training steps of the reader (default: {DEFAULT_READER_STEPS})")
    reader.add_argument("--batch-size", type=positive_int, default=32, help="definitions per step (default: 32)")
    reader.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate (default: 1e-4)")
    reader.add_argument("--seed", type=int, default=0, help="seed of training and corruption (default: 0)")
    reader.add_argument(
        "--held-out", type=positive_int, default=DEFAULT_HELD_OUT,
        help=f"definitions set aside (never trained on) to compare the reader with the mean embedding before "
        f"anything is written (default: {DEFAULT_HELD_OUT}, at most a fifth of the definitions)",
    )
    reader.add_argument(
        "--allow-worse", action="store_true",
        help="write the checkpoint even when the reader does not beat the mean embedding on the held-out words",
    )
    replacement = parser.add_argument_group("replacement")
    replacement.add_argument(
        "--alpha", type=float, default=DEFAULT_ALPHA,
        help=f"percentage of the vocabulary size bounding the replaced rows, 0..100 (default: {DEFAULT_ALPHA:g})",
    )
    replacement.add_argument(
        "--strategy", choices=("rare", "last", "random", "top"),
        help="which task tokens first: fewest occurrences in the task texts (rare; the default), largest indexes "
        "(last, the paper's and --preset paper's), smallest from 5000 (top) or random",
    )
    replacement.add_argument(
        "--blend", type=float,
        help="lambda of the written rows e + lambda (e_d - e), 0..1 (default: the one chosen on word-similarity sets "
        "that are not reported, 0.1; --preset paper: 1)",
    )
    replacement.add_argument(
        "--whole-range", action="store_true",
        help="replace every token with a definition in the index range (Appendix M), not only tokens that appear in "
        "the task",
    )
    parser.add_argument("--output-dir", required=True, help="folder for the model with replaced embeddings")
    add_overwrite_option(
        parser,
        "write into a non-empty --output-dir, replacing only the checkpoint files there (config, weights, card, "
        f"tokenizer, the replaced rows) and the {READER_FOLDER}/ of an earlier run, keeping every other file and "
        "folder (without it such a folder is refused)",
    )
    add_threads_option(parser, "training the reader and reading the definitions")
    # check_first: what `main` checks before torch and transformers are imported (seconds on a busy machine).
    parser.set_defaults(handler=run_definitions, command_name="definitions", check_first=check_arguments)


def run_definitions(args: argparse.Namespace) -> int:
    """Train (or load) the reader, replace the task's rare-token embeddings and save the model."""
    from transformers import AutoModel, set_seed

    from ..models.definition_emb import DefinitionEmbModel
    from ..tasks.embeddings.replacement import apply_definition_embeddings
    from .checkpoints import load_tokenizer
    from .training import main_process_work

    check_arguments(args)
    _check_reader_fits(args)
    preset = PRESETS[args.preset]
    output_dir = Path(args.output_dir)
    # The user's definitions and texts are read before any model: an empty file is refused at once.
    definitions = _user_definitions(args)
    task_texts = _task_texts(args)
    set_seed(args.seed)
    tokenizer = load_tokenizer(args.model)
    definitions = _with_number_words(args, definitions, tokenizer)
    model = AutoModel.from_pretrained(args.model, trust_remote_code=False)
    definitions, held_out = _held_out_split(args, definitions)
    if args.reader is not None:
        reader = DefinitionEmbModel.from_pretrained(args.reader)
        if args.reader_type is not None and args.reader_type != reader.config.reader_type:
            raise CliError(f"--reader {args.reader} is an {reader.config.reader_type} reader, not {args.reader_type}.")
        training = None
    else:
        reader = _new_reader(args, model)
        training = _training_definitions(args, definitions, tokenizer, reader.config)
        _train_reader(args, reader, tokenizer, training, preset["least_squares"])
    with main_process_work() as is_main:
        if not is_main:
            return 0
        comparison = _held_out_gate(args, reader, tokenizer, model, training, held_out)
        blend = args.blend if args.blend is not None else preset["blend"]
        # Written like `train`'s checkpoints: into a new folder next to --output-dir, moved into place when complete.
        with _replacing_definitions_checkpoint(output_dir) as staging:
            if args.reader is None:
                reader.save_pretrained(staging / READER_FOLDER)
                tokenizer.save_pretrained(staging / READER_FOLDER)
            result = apply_definition_embeddings(
                model, tokenizer, reader, task_texts, alpha=args.alpha, strategy=args.strategy or preset["strategy"],
                appearing_only=not args.whole_range, definitions=definitions, seed=args.seed, inplace=True,
                definitions_description=args.definitions, original_norms=preset["original_norms"],
                definition_model_description=_reader_description(args),
                **({"blend": blend} if blend is not None else {}),
            )
            if comparison is not None:
                result.held_out = comparison.summary()
                model.config.definition_embeddings = result.summary()
            result.save_pretrained(staging)
            # The card's loading examples name the folder it ends up in, not the staging one.
            result.model_card(str(output_dir)).save(staging / "README.md")
        print(json.dumps({"output_dir": str(output_dir), **result.summary()}))
    return 0


def check_arguments(args: argparse.Namespace) -> None:
    """The checks that read no data and import no torch: the options, then --output-dir (`check_output_dir`)."""
    if not math.isfinite(args.alpha) or not 0 <= args.alpha <= 100:
        raise CliError(f"--alpha is a percentage of the vocabulary size and must lie in 0..100, got {args.alpha:g}.")
    if (args.task_texts is None) == (args.glue_task is None):
        raise CliError("give the task's texts with either --task-texts FILE... or --glue-task with --glue-dir.")
    if args.glue_task is not None and args.glue_dir is None:
        raise CliError("--glue-task needs --glue-dir, the task's folder with train.tsv.")
    if args.blend is not None and not (math.isfinite(args.blend) and 0 <= args.blend <= 1):
        raise CliError(f"--blend is lambda in e + lambda (e_d - e) and must lie in 0..1, got {args.blend:g}.")
    strategy = args.strategy or PRESETS[args.preset]["strategy"]
    if args.reader is not None and args.readout is not None:
        raise CliError(
            "--readout sets up a reader to train; --reader loads one whose readout is in its config: drop --readout "
            "(with --reader, --preset chooses only how rows are ranked and written)."
        )
    if args.whole_range and strategy in ("random", "rare"):
        raise CliError(
            f"--whole-range replaces an index range, which --strategy {strategy} does not have: pass --strategy last "
            "or top."
        )
    check_output_dir(args)


def check_output_dir(args: argparse.Namespace) -> None:
    """Refuse, before anything is read or trained, an --output-dir that cannot be written (with `train`'s messages),
    that holds an input of the run (even with --overwrite), or that is not empty (without --overwrite)."""
    output_dir = Path(args.output_dir)
    check_location(output_dir, "--output-dir", folder=True)
    refuse_folder_holding_the_current_one(output_dir, "--output-dir")
    inputs = [("MODEL", args.model), ("--definitions", args.definitions), ("--glue-dir", args.glue_dir),
              ("--reader", args.reader), *(("--task-texts", name) for name in args.task_texts or ())]
    refuse_inputs_inside(output_dir, "--output-dir", inputs)
    if is_nonempty_folder(output_dir) and not args.overwrite:
        replaced = _replaced_entries(output_dir)
        action = (f"replace {listing(entry_names(replaced))} and keep everything else" if replaced
                  else "write the model next to them")
        raise CliError(
            f"--output-dir {output_dir} is not empty (it holds {listing(entry_names(list(output_dir.iterdir())))}); "
            f"choose a new or empty folder, or pass --overwrite to {action}."
        )


def _replaced_entries(folder: Path) -> list[Path]:
    """What a new checkpoint replaces in `folder`: its checkpoint files, and the reader an earlier run saved there."""
    reader = folder / READER_FOLDER
    return [*checkpoint_entries(folder), *([reader] if _is_saved_reader(reader) else [])]


def _is_saved_reader(folder: Path) -> bool:
    """A DefinitionEMB reader saved by an earlier run (anything else of that name is the user's)."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    return stored_config(str(folder)).get("model_type") == READER_MODEL_TYPE


@contextlib.contextmanager
def _replacing_definitions_checkpoint(output_dir: Path) -> Iterator[Path]:
    """`train`'s `replacing_checkpoint` (a staging folder next to `output_dir`, moved into place when the block
    completes; in a folder with the user's files, only the checkpoint files replaced), where the reader folder of an
    earlier run counts as part of its checkpoint: it is replaced, or put back, with the checkpoint files, by the same
    renames that hold Ctrl-C back until they are done. An interrupted run leaves `output_dir` as it was."""
    with replacing_checkpoint(output_dir, also_replaced=_earlier_reader) as staging:
        yield staging


def _earlier_reader(folder: Path) -> list[Path]:
    """The reader folder an earlier run saved in `folder`, which a new checkpoint replaces (none: nothing, or the
    user's folder of that name)."""
    reader = folder / READER_FOLDER
    return [reader] if _is_saved_reader(reader) else []


def _check_reader_fits(args: argparse.Namespace) -> None:
    """Refuse a --reader that is not a DefinitionEMB reader of MODEL's kind (model type, embedding width, vocabulary),
    reading only the two configs: a reader of another model fails deep in the replacement ("The size of tensor a
    (768) must match the size of tensor b (384)") after minutes of work, or writes rows of another vocabulary."""
    if args.reader is None:
        return
    from transformers import AutoConfig

    from .. import DefinitionEmbConfig

    stored = stored_config(args.reader)
    if stored.get("model_type") != READER_MODEL_TYPE:
        kind = stored.get("model_type")
        found = f"a {kind!r} model" if isinstance(kind, str) else "not a saved model (no config.json with a model_type)"
        raise CliError(
            f"--reader {args.reader} is {found}, not a DefinitionEMB reader ({READER_MODEL_TYPE!r}) for MODEL "
            f"{args.model}; pass the {READER_FOLDER} folder that `hf-entity definitions` saved for that model, or drop "
            "--reader to train one."
        )
    reader = DefinitionEmbConfig.from_pretrained(args.reader)
    expected = DefinitionEmbConfig(reader_config=AutoConfig.from_pretrained(args.model, trust_remote_code=False))
    differences = [
        f"{name} {got!r} where MODEL has {want!r}"
        for name, got, want in (
            ("model type", reader.reader_config.model_type, expected.reader_config.model_type),
            ("embedding width", reader.embedding_size, expected.embedding_size),
            ("vocabulary size", reader.reader_config.vocab_size, expected.reader_config.vocab_size),
        )
        if got != want
    ]
    if differences:
        raise CliError(
            f"--reader {args.reader} was trained for another model than MODEL {args.model} ({'; '.join(differences)}); "
            f"pass the {READER_FOLDER} folder saved for MODEL, or drop --reader to train one."
        )


def _user_definitions(args: argparse.Namespace) -> Any:
    """The definitions of --definitions, refused when there are none: nothing would be replaced, and the output
    would be a full copy of the model."""
    from ..tasks.embeddings.definitions import load_definitions

    try:
        definitions = load_definitions(args.definitions)
    except (FileNotFoundError, ValueError) as error:  # the loader's message names the file, the row or the header
        raise CliError(str(error)) from error
    if len(definitions) == 0:
        raise CliError(
            f"--definitions {args.definitions} holds no definitions (it is empty or has a header only); give a table "
            "with word, part_of_speech and definition columns and at least one row."
        )
    return definitions


def _with_number_words(args: argparse.Namespace, definitions: Any, tokenizer: Any) -> Any:
    from datasets import concatenate_datasets

    from ..tasks.embeddings.definitions import number_word_definitions

    if args.no_number_words:
        return definitions
    numbers = number_word_definitions(tokenizer)
    return concatenate_datasets([definitions.select_columns(numbers.column_names), numbers])


def _task_texts(args: argparse.Namespace) -> list[str]:
    if args.glue_task is not None:
        from ..tasks.embeddings.glue import read_glue, task_texts

        return task_texts(read_glue(args.glue_dir, args.glue_task, "train"))
    from ..tasks.embeddings.replacement import read_task_texts

    try:
        return read_task_texts(args.task_texts)
    except (FileNotFoundError, ValueError) as error:  # names the file (and the byte of a file that is not text)
        raise CliError(str(error)) from error


def _new_reader(args: argparse.Namespace, model: Any) -> Any:
    """A DefinitionEMB reader around `model` with the preset's settings (and --readout, --reader-type)."""
    from ..models.definition_emb import DefinitionEmbModel

    settings = dict(PRESETS[args.preset]["reader"])
    if args.readout is not None:
        settings["readout"] = args.readout
    try:
        reader = DefinitionEmbModel.from_pretrained_model(model, reader_type=args.reader_type, **settings)
    except ValueError as error:  # e.g. a pooled readout asked of an encoder-decoder
        raise CliError(str(error)) from error
    reader.config.base_model_name_or_path = args.model
    return reader


def _train_reader(args: argparse.Namespace, reader: Any, tokenizer: Any, definitions: Any, least_squares: bool) -> None:
    """Train `reader` with the stock Trainer on the prompts of `definitions` (exactly those its steps read:
    `_training_definitions`), A first fitted by least squares when the preset says so."""
    from ..tasks.embeddings.definitions import definition_prompt_dataset
    from ..tasks.embeddings.training import (
        build_definition_trainer,
        definition_training_arguments,
        fit_projection_by_least_squares,
    )
    from .training import trainer_folder

    prompts = definition_prompt_dataset(definitions, tokenizer, word_slots=reader.config.word_slots)
    if least_squares:
        fit_projection_by_least_squares(reader, tokenizer, prompts)  # its first LEAST_SQUARES_PROMPTS
    # The Trainer saves nothing (save_strategy "no") but creates its folder: a temporary one leaves none behind.
    with trainer_folder(None) as trainer_dir:
        training_arguments = definition_training_arguments(
            trainer_dir, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate, seed=args.seed, save_strategy="no",
        )
        trainer = build_definition_trainer(reader, tokenizer, prompts, args=training_arguments, seed=args.seed)
        trainer.train()


def _training_definitions(args: argparse.Namespace, definitions: Any, tokenizer: Any, config: Any) -> Any:
    """The definitions training reads: --max-steps x --batch-size per process (at least the least-squares start's
    sample), drawn at random with --seed, so that only those are built into prompts (building all of WordNet's takes
    minutes, a few thousand take seconds). A pooled-definition reader rebuilds whole single-token words only, so it
    draws from their definitions."""
    from ..tasks.embeddings.quality import definitions_of_single_tokens
    from ..tasks.embeddings.training import LEAST_SQUARES_PROMPTS
    from ..training.distributed import process_rank_and_count

    if config.readout == "pooled-definition":
        definitions = definitions_of_single_tokens(tokenizer, definitions, config)
        if len(definitions) == 0:
            raise CliError("no definition defines a word that is a single token of this tokenizer: nothing to train on.")
    needed = args.max_steps * args.batch_size * process_rank_and_count()[1]
    if PRESETS[args.preset]["least_squares"]:
        needed = max(needed, LEAST_SQUARES_PROMPTS)  # A's least-squares start reads these too
    if needed >= len(definitions):
        return definitions
    return definitions.shuffle(seed=args.seed).select(range(needed))


def _held_out_split(args: argparse.Namespace, definitions: Any) -> tuple[Any, Any]:
    """(definitions to train on, definitions set aside for the quality gate); none set aside when there are fewer
    than 5 definitions."""
    from ..tasks.embeddings.definitions import split_definitions

    count = min(args.held_out, len(definitions) // 5)
    if count == 0:
        return definitions, None
    parts = split_definitions(definitions, validation_size=count, seed=args.seed)
    return parts["train"], parts["validation"]


def _held_out_gate(args: argparse.Namespace, reader: Any, tokenizer: Any, model: Any, trained: Any, held_out: Any) -> Any:
    """Compare the reader with the mean embedding on the held-out definitions, leaving out what the `trained`
    definitions named (None: a --reader trained elsewhere); refuse to go on (in one line) when it does not beat it,
    unless --allow-worse."""
    from ..tasks.embeddings.quality import held_out_comparison, training_targets

    if held_out is None:
        print("no definitions set aside (fewer than 5): the reader is not compared with the mean embedding")
        return None
    trained_tokens = training_targets(tokenizer, trained, reader.config) if trained is not None else ()
    comparison = held_out_comparison(reader, tokenizer, model.get_input_embeddings().weight, held_out, trained_tokens)
    if not comparison.beats_mean and not args.allow_worse:
        raise CliError(
            f"nothing written: {comparison.describe()}, so the reader would write rows no better than the mean "
            "embedding; train it longer (--max-steps) or pass --allow-worse to write them anyway."
        )
    return comparison


def _reader_description(args: argparse.Namespace) -> str:
    """Where the definition reader of this run is kept, as the card says it."""
    if args.reader is not None:
        return f"the reader in {args.reader} (--reader)"
    return f"trained by this command and saved in {READER_FOLDER}/ next to this checkpoint"
