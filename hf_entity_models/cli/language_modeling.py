"""``hf-entity train gpt2e``: the GPT2E entity language model (fresh, or from a GPT-2 or GPT2E checkpoint) on
CoNLL-2012 coreference files split by book; and the language-model pieces that ``evaluate`` and ``predict`` share.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from .checkpoints import (
    check_tokenizer_fits,
    fast_tokenizer,
    load_checkpoint,
    load_model,
    saved_tokenizer,
    stored_config,
)
from .common import HUB_ID, CliError, check_hub_reachable, non_negative_int, one_line, positive_int
from .training import (
    add_config_overrides_option,
    add_output_options,
    add_schedule_options,
    add_step_options,
    check_config_fields,
    check_train_outputs,
    is_main_process,
    main_process_work,
    refuse_fields,
    save_checkpoint,
    trainer_folder,
    world_size,
)

# The book split of CoNLL documents into train / validation / test (`load_litbank_entity_lm`), and its defaults.
BOOK_SPLIT_OPTIONS = {"validation_books": "--validation-books", "test_books": "--test-books", "split_seed": "--split-seed"}
DEFAULT_HELD_OUT_BOOKS = 8
# Language-model windows when none are given (the GPT2E paper's), within what the model reads.
DEFAULT_WINDOW_LENGTH = 512
# The tokenizer of a fresh GPT2E when neither --tokenizer nor --init-from gives one: GPT-2's, from the Hub.
DEFAULT_LM_TOKENIZER = "openai-community/gpt2"
# GPT2E's architecture options: with --init-from the checkpoint has them already.
_ARCHITECTURE_OPTIONS = {"n_layer": "--n-layer", "n_embd": "--n-embd", "n_head": "--n-head"}
# GPT2E config fields that other options set: the vocabulary comes from the tokenizer, the positions from the windows.
_DERIVED_FIELDS = ("vocab_size", "n_positions")
# Display names of the perplexities recorded in the config (the model card's results table).
_METRIC_NAMES = {
    "perplexity": "Perplexity (with entity ids)",
    "perplexity_without_entities": "Perplexity (entity ids zeroed)",
    "mention_perplexity": "Perplexity of mention tokens (with entity ids)",
    "mention_perplexity_without_entities": "Perplexity of mention tokens (entity ids zeroed)",
}


# -------------------------------------------------------------------------------------------------- parser
def add_train_parser(models: argparse._SubParsersAction) -> None:
    """Register ``train gpt2e``."""
    parser = models.add_parser(
        "gpt2e", help="GPT2E: a GPT-2 language model that reads coreference entity ids, on CoNLL files",
        description="Train the GPT2E entity language model (fresh, or from a GPT-2 or GPT2E checkpoint with "
        "--init-from) on CoNLL-2012 coreference files (--conll, e.g. LitBank), split by book into training, "
        "validation and test books, and report the perplexity of the held-out books with and without entity ids "
        "(nothing is selected on them: the checkpoint is the model after the last step).",
        epilog="Example: hf-entity train gpt2e --conll litbank/conll --tokenizer tokenizers/gpt2 --n-layer 6 "
        "--n-embd 384 --n-head 6 --window-length 256 --epochs 3 --output-dir runs/gpt2e-litbank",
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--conll", metavar="DIR_OR_FILE",
        help="CoNLL-2012 coreference files to train on (a .conll file or a folder of them, e.g. LitBank's conll "
        "folder); their books are split into training, validation and test books, so that no book has windows on "
        "two sides",
    )
    add_book_split_options(data, "")
    architecture = parser.add_argument_group("model")
    architecture.add_argument(
        "--init-from", metavar="CHECKPOINT",
        help="start from a GPT-2 folder (GPT2LMHeadModel or GPT2Model, whose weights load into GPT2E) or a GPT2E "
        "checkpoint instead of a fresh model; its tokenizer is used when it has one saved and --tokenizer is not "
        "given. The checkpoint decides the architecture",
    )
    architecture.add_argument(
        "--tokenizer", metavar="PATH_OR_ID",
        help=f"the GPT-2 tokenizer (folder or Hub id; default: --init-from's when it has one saved, else "
        f"{DEFAULT_LM_TOKENIZER} from the Hub); a fresh model's vocabulary is the tokenizer's",
    )
    architecture.add_argument(
        "--preset", choices=("entity-memory", "paper"),
        help="the design of a fresh model: entity-memory (the default: a gated memory per entity, written and read "
        "by every mention after a middle block) or paper (the entity attention of section 3 in every block, over "
        "the final hidden states of earlier windows); a GPT2E --init-from checkpoint keeps its own",
    )
    architecture.add_argument("--n-layer", type=positive_int, help="Entity-Transformer blocks (default: 12)")
    architecture.add_argument("--n-embd", type=positive_int, help="hidden size (default: 768)")
    architecture.add_argument("--n-head", type=positive_int, help="attention heads (default: 12)")
    architecture.add_argument(
        "--max-entities", type=positive_int,
        help="entities one document may have (the entity store's capacity; default: 256); a document with more is "
        "refused",
    )
    add_config_overrides_option(architecture, "GPT2EConfig", '{"resid_pdrop": 0.0}')
    training = parser.add_argument_group("training")
    add_schedule_options(training, epochs=1.0, batch_size=8, learning_rate=5e-4,
                         batch_help=", documents read side by side")
    add_step_options(training, weight_decay=0.01)
    training.add_argument(
        "--window-length", type=positive_int,
        help=f"tokens per window (default: {DEFAULT_WINDOW_LENGTH}, or --init-from's positions if fewer); a fresh "
        "model gets as many positions. Documents are read window after window, entity states carried on",
    )
    add_output_options(parser, "training and the held-out perplexities")
    parser.set_defaults(handler=run_train, model="gpt2e", command_name="train gpt2e")


def add_book_split_options(group: argparse._ArgumentGroup, applies: str) -> None:
    """--validation-books, --test-books and --split-seed: how CoNLL documents are split by book
    (`load_litbank_entity_lm`)."""
    group.add_argument(
        "--validation-books", type=non_negative_int, metavar="N",
        help=f"{applies}books held out for validation (default: {DEFAULT_HELD_OUT_BOOKS})",
    )
    group.add_argument(
        "--test-books", type=non_negative_int, metavar="N",
        help=f"{applies}books held out for test, never trained or selected on (default: {DEFAULT_HELD_OUT_BOOKS})",
    )
    group.add_argument(
        "--split-seed", type=int, metavar="SEED",
        help=f"{applies}seed of the shuffle that assigns books to the splits (default: 0; independent of --seed)",
    )


# --------------------------------------------------------------------------------------------------- train
def run_train(args: argparse.Namespace) -> int:
    """``hf-entity train gpt2e``: train GPT2E on the training books of --conll, report the perplexity of the
    validation and test books with and without entity ids, record it in the config and save model + tokenizer +
    card. Nothing is selected on the held-out books: the checkpoint is the model after the last training step."""
    from transformers import set_seed

    from ..tasks.language_modeling import build_entity_lm_trainer, entity_lm_training_arguments, load_litbank_entity_lm

    check_train_outputs(args, [("--conll", args.conll), ("--tokenizer", args.tokenizer), ("--init-from", args.init_from)])
    overrides = _config_overrides(args)
    if args.conll is None:
        raise CliError(
            "no training data: `train gpt2e` trains on CoNLL-2012 coreference files; pass --conll DIR_OR_FILE (a "
            ".conll file or a folder of them, e.g. LitBank's conll folder)."
        )
    validation_books, test_books, split_seed = book_split(args)
    stored = _init_config(args.init_from, overrides) if args.init_from is not None else None
    tokenizer = _tokenizer(args)
    window_length = window_length_for(
        args.window_length, None if stored is None else stored.n_positions, f"--init-from {args.init_from}"
    )
    config = None if stored is not None else _fresh_config(tokenizer, window_length, overrides)
    # The documents are read (bad brackets, too few books) before any weights are built or loaded.
    _check_book_split(args.conll, validation_books, test_books)
    set_seed(args.seed)
    model = _build_model(args, config, overrides)
    check_tokenizer_fits(tokenizer, model, _tokenizer_source(args))
    splits = load_litbank_entity_lm(
        args.conll, tokenizer, window_length, validation_books=validation_books, test_books=test_books,
        seed=split_seed, max_entities=model.config.max_entities,
    )
    if is_main_process():
        print("CoNLL: " + ", ".join(
            f"{split} {split_books(windows)} book(s) ({len(set(windows['document_id']))} documents, {len(windows)} "
            f"windows of up to {window_length} tokens)" for split, windows in splits.items()
        ), file=sys.stderr)
    training_documents = len(set(splits["train"]["document_id"]))
    if args.batch_size > training_documents:
        raise CliError(
            f"--batch-size {args.batch_size} is more than the {training_documents} training document(s): a batch reads "
            "different documents side by side (their entity states carry over from window to window); lower "
            "--batch-size, or hold out fewer books."
        )
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
    with trainer_folder(args.trainer_dir) as trainer_dir:
        training_arguments = entity_lm_training_arguments(
            trainer_dir, batch_size=args.batch_size, num_train_epochs=args.epochs, learning_rate=args.learning_rate,
            seed=args.seed, weight_decay=args.weight_decay, **steps,
        )
        trainer = build_entity_lm_trainer(model, tokenizer, splits["train"], training_arguments)
        trainer.train()
        held_out = _held_out_perplexities(trainer.model, splits, args.batch_size)
        with main_process_work() as is_main:
            if is_main:
                _report_and_save(args, trainer, tokenizer, splits, held_out, window_length, split_seed)
    return 0


def _held_out_perplexities(model: Any, splits: dict[str, Any], batch_size: int) -> dict[str, dict[str, float]]:
    """The held-out books' perplexities, read by every process (each its share of the documents, summed over them):
    the other processes would otherwise wait at a barrier for the whole evaluation, past NCCL's timeout on long runs.
    """
    from ..tasks.language_modeling import evaluate_entity_lm

    distributed = world_size() > 1
    return {
        split: evaluate_entity_lm(model, splits[split], batch_size=batch_size, distributed=distributed)
        for split in ("validation", "test") if split in splits
    }


def _report_and_save(
    args: argparse.Namespace,
    trainer: Any,
    tokenizer: Any,
    splits: dict[str, Any],
    held_out: dict[str, dict[str, float]],
    window_length: int,
    split_seed: int,
) -> None:
    """The main process's part: the held-out perplexities recorded in the config, the checkpoint and the report."""
    from ..hub import record_evaluation

    model = trainer.model
    dataset, dataset_name = _conll_dataset(args.conll)
    for split, scores in held_out.items():
        for metric, value in scores.items():
            if math.isfinite(value):  # an overflowing perplexity is not a result
                record_evaluation(
                    model.config, "text-generation", dataset, split, metric, round(float(value), 4), dataset_name=dataset_name,
                    metric_name=_METRIC_NAMES.get(metric),
                )
    selection = (
        f"nothing was selected on the held-out books: the checkpoint is the model after its last training step "
        f"({trainer.state.global_step} steps on {split_books(splits['train'])} training book(s)); compare runs on "
        "the validation books, and keep the test books for the final report"
    )
    output_dir = Path(args.output_dir)
    report: dict[str, Any] = {
        "checkpoint": str(output_dir), "conll": args.conll, "init_from": args.init_from,
        "window_length": window_length, "split_seed": split_seed, "steps": trainer.state.global_step,
        "selection": selection,
    }
    for split, windows in splits.items():
        report[split] = {
            "books": sorted(book_names(windows)), "documents": len(set(windows["document_id"])),
            "windows": len(windows), **held_out.get(split, {}),
        }
    save_checkpoint(model, tokenizer, output_dir, report)
    for split, scores in held_out.items():
        print(_perplexity_line(split, scores, splits[split], window_length))
    if not held_out:
        print("no held-out books (--validation-books 0 --test-books 0): no perplexity to report")
    print(selection)
    print(f"checkpoint saved to {output_dir}")


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    from ..models.gpt2e import PRESETS, GPT2EConfig

    overrides = {**PRESETS[args.preset], **args.config_overrides} if args.preset else dict(args.config_overrides)
    explicit = {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "max_entities": args.max_entities}
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    check_config_fields(GPT2EConfig, overrides, "gpt2e")
    refuse_fields(overrides, _DERIVED_FIELDS, "they come from --tokenizer and --window-length")
    return overrides


def book_split(args: argparse.Namespace) -> tuple[int, int, int]:
    """--validation-books, --test-books, --split-seed, with their defaults."""
    validation_books = DEFAULT_HELD_OUT_BOOKS if args.validation_books is None else args.validation_books
    test_books = DEFAULT_HELD_OUT_BOOKS if args.test_books is None else args.test_books
    return validation_books, test_books, 0 if args.split_seed is None else args.split_seed


def _check_book_split(conll: str, validation_books: int, test_books: int) -> None:
    """--conll reads (a bracket error names its file and line), and has books left for training after the held-out
    ones."""
    from ..tasks.language_modeling import read_conll_coreference

    books = len({document.name for document in read_conll_coreference(conll)})
    if validation_books + test_books >= books:
        raise CliError(
            f"--conll {conll} has {books} book(s), too few for {validation_books} validation and {test_books} test "
            "book(s) and at least one training book; lower --validation-books / --test-books."
        )


def _init_config(location: str, overrides: dict[str, Any]) -> Any:
    """The config of --init-from: a GPT-2 or GPT2E checkpoint, whose architecture the options keep."""
    from transformers import AutoConfig

    if not Path(location).exists() and not HUB_ID.match(location):
        raise CliError(f"--init-from checkpoint {location} does not exist; pass a folder written by save_pretrained.")
    stored = AutoConfig.from_pretrained(location, trust_remote_code=False)
    if stored.model_type not in ("gpt2", "gpt2e"):
        raise CliError(
            f"--init-from {location} holds a {stored.model_type!r} model, but `train gpt2e` needs a 'gpt2' or "
            "'gpt2e' checkpoint (a GPT2LMHeadModel or GPT2Model folder, or one written by `train gpt2e`); drop "
            "--init-from to train a fresh GPT2E."
        )
    changed = [
        option for name, option in _ARCHITECTURE_OPTIONS.items()
        if name in overrides and getattr(stored, name, None) != overrides[name]
    ]
    if changed:
        raise CliError(
            f"{' and '.join(changed)} differ from --init-from {location} ({stored.n_layer} layers, {stored.n_embd} "
            f"wide, {stored.n_head} heads); the checkpoint decides the architecture: drop them."
        )
    return stored


def _tokenizer(args: argparse.Namespace) -> Any:
    """--tokenizer, else the one saved with --init-from, else GPT-2's from the Hub."""
    if args.tokenizer is not None:
        return fast_tokenizer(args.tokenizer)
    if args.init_from is not None:
        saved = saved_tokenizer(args.init_from)
        if saved is not None:
            return saved
    where = f" and --init-from {args.init_from} has none saved" if args.init_from is not None else ""
    check_hub_reachable(
        DEFAULT_LM_TOKENIZER, "the default tokenizer",
        f"no --tokenizer given{where}: pass --tokenizer PATH, a folder with GPT-2's tokenizer.json",
    )
    try:
        return fast_tokenizer(DEFAULT_LM_TOKENIZER)
    except OSError as error:
        raise CliError(
            f"no --tokenizer given{where}, and GPT-2's tokenizer {DEFAULT_LM_TOKENIZER} cannot be loaded from the Hub "
            f"({one_line(error)}); pass --tokenizer PATH, a folder with GPT-2's tokenizer.json."
        ) from error


def _tokenizer_source(args: argparse.Namespace) -> str:
    if args.tokenizer is not None:
        return f"--tokenizer {args.tokenizer}"
    return f"--init-from {args.init_from}" if args.init_from is not None else DEFAULT_LM_TOKENIZER


def window_length_for(requested: int | None, positions: int | None, model_option: str) -> int:
    """Tokens per language-model window: the given number, checked against what the model reads, or the default
    (512, within the model's positions). Longer documents are read window after window, so nothing is cut."""
    if requested is None:
        return DEFAULT_WINDOW_LENGTH if positions is None else min(DEFAULT_WINDOW_LENGTH, positions)
    if requested < 2:
        raise CliError(f"--window-length {requested} is too short: a window predicts its tokens after the first.")
    if positions is not None and requested > positions:
        raise CliError(
            f"--window-length {requested} is longer than the {positions} positions that the {model_option} model "
            f"reads; use --window-length {positions} or less (documents are read window after window anyway)."
        )
    return requested


def _fresh_config(tokenizer: Any, window_length: int, overrides: dict[str, Any]) -> Any:
    """The config of a fresh GPT2E: the tokenizer's vocabulary, as many positions as a window, the options on top;
    checked before any data is read."""
    from ..models.gpt2e import GPT2EConfig

    try:
        config = GPT2EConfig(
            vocab_size=len(tokenizer), n_positions=window_length, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, **overrides,
        )
    except (ValueError, TypeError) as error:
        raise CliError(f"{overrides} is not a valid GPT2E config: {one_line(error)}") from error
    if config.n_embd % config.n_head:
        raise CliError(
            f"--n-embd {config.n_embd} is not a multiple of --n-head {config.n_head}: the attention splits the hidden "
            "size over the heads."
        )
    return config


def _build_model(args: argparse.Namespace, config: Any, overrides: dict[str, Any]) -> Any:
    """A fresh GPT2E from `config`, or --init-from's weights (a GPT-2 checkpoint maps into GPT2E, whose entity
    attention starts at zero: those weights are expected to be missing)."""
    from ..models.gpt2e import GPT2EForCausalLM

    if config is not None:
        return GPT2EForCausalLM(config)
    advice = (
        f"the options {sorted(overrides)} change the shapes of weights stored in --init-from {args.init_from}; with a "
        "checkpoint only fields that keep its architecture (e.g. max_entities, dropout) can be overridden."
        if overrides else None
    )
    is_gpt2e = stored_config(args.init_from).get("model_type") == "gpt2e"
    return load_model(GPT2EForCausalLM, args.init_from, advice, strict=is_gpt2e, **overrides)


def _conll_dataset(conll: str) -> tuple[str, str | None]:
    """Id and display name that the held-out perplexities are recorded under (the model card shows them)."""
    path = Path(conll)
    if any("litbank" in part.lower() for part in path.parts):
        return "litbank", "LitBank"
    return path.stem or "conll", None


def book_names(windows: Any) -> set[str]:
    """The books of a `load_litbank_entity_lm` split (a document is "book; part N")."""
    from ..tasks.language_modeling import entity_lm_document_names

    return {name.rsplit("; part ", 1)[0] for name in entity_lm_document_names(windows)}


def split_books(windows: Any) -> int:
    return len(book_names(windows))


def _perplexity_line(split: str, scores: dict[str, float], windows: Any, window_length: int) -> str:
    """One line per held-out split: the perplexity with entity ids and, for GPT2E, with them zeroed."""
    line = f"{split} perplexity {scores['perplexity']:.2f}"
    if "perplexity_without_entities" in scores:
        line += f" with entities, {scores['perplexity_without_entities']:.2f} without (entity ids zeroed)"
    return (
        f"{line}; {split_books(windows)} book(s), {len(set(windows['document_id']))} document(s), {len(windows)} "
        f"windows of up to {window_length} tokens"
    )


# ------------------------------------------------------------------------------------------------ checkpoints
def load_language_model(checkpoint: str) -> tuple[Any, Any]:
    """Model (GPT2E or GPT-2, in evaluation mode) and fast tokenizer of a language-model checkpoint."""
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_checkpoint(AutoModelForCausalLM, checkpoint)
    return model.eval(), tokenizer
