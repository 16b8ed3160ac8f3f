"""``hf-entity train petra`` and ``hf-entity train refreader``: the coreference models (PeTra, Referential Reader)
on GAP-format data, the built-in people-and-pronouns corpus, or whole CoNLL-2012 documents (``--conll``, e.g.
LitBank); and the GAP scoring that ``evaluate`` shares.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .checkpoints import load_checkpoint, load_model, saved_tokenizer, stored_config
from .common import HUB_ID, CliError, given_options, listing, positive_int
from .training import (
    add_config_overrides_option,
    add_encoder_option,
    add_output_options,
    add_schedule_options,
    check_config_fields,
    check_train_outputs,
    encoder_location,
    is_main_process,
    main_process_work,
    refuse_fields,
    refuse_shared_examples,
    refuse_the_same_data,
    save_checkpoint,
    trainer_folder,
)

MODEL_NAMES = {"petra": "PeTra", "refreader": "Referential Reader"}
# What the built-in corpus uses when only --synthetic N is given: a quarter as many validation rows.
SYNTHETIC_VALIDATION_SHARE = 4
# Schedule defaults that depend on the data: GAP rows, or chunks of CoNLL documents (`train_on_conll`'s own defaults,
# written here so that `--help` does not import torch; a test checks they agree; a CoNLL epoch, which reads every
# validation document whole, is long).
GAP_BATCH_SIZE, CONLL_BATCH_SIZE = 32, 8
GAP_PATIENCE, CONLL_PATIENCE = 15, 5
CONLL_CHUNK_LENGTH = 256
# Without --validation, the last tenth of the --conll documents (at least one) is held out for selection.
CONLL_HELD_OUT_SHARE = 10
# How to fix validation rows that the model also trains on.
_VALIDATION_ADVICE = "give validation rows the model does not train on (e.g. --validation gap-validation.tsv)"
# Options of GAP-format or built-in data that training on --conll does not read (argparse destination -> option).
_GAP_DATA_OPTIONS = {"synthetic_validation": "--synthetic-validation", "max_train_rows": "--max-train-rows"}
# Fields of the incremental reader that come from the tokenizer, and fields that only the encoder mode reads.
_TOKENIZER_FIELDS = ("vocab_size", "pad_token_id")
_ENCODER_FIELDS = ("encoder_layers", "encoder_window_size", "encoder_window_overlap")
_DESCRIPTIONS = {
    "petra": "Train PeTra (people tracking with a fixed memory) on GAP-format data, tune the decision threshold on "
    "validation and save model, tokenizer and model card to --output-dir. With --conll it learns whole-document "
    "coreference from CoNLL-2012 files (e.g. LitBank) instead, selected by CoNLL F1 with a tuned mention threshold. "
    "PeTra reads the features of a frozen pretrained encoder (--encoder).",
    "refreader": "Train the Referential Reader on GAP-format data, tune the decision threshold on validation and "
    "save model, tokenizer and model card to --output-dir. With --conll it learns whole-document coreference from "
    "CoNLL-2012 files (e.g. LitBank) instead, selected by CoNLL F1 with a tuned mention threshold. It reads the "
    "features of a frozen encoder (--encoder), or its own word embeddings (--incremental), and can start from a "
    "saved checkpoint such as a language-model-pretrained RefReaderForCausalLM (--init-from).",
}
_CONLL_EXAMPLE = "--conll litbank/conll --epochs 10 --output-dir runs/{model}-litbank"
_EXAMPLES = {
    "petra": "hf-entity train petra --synthetic 1200 --epochs 5 --output-dir runs/petra-people",
    "refreader": "hf-entity train refreader --incremental --init-from runs/refreader-lm --train gap-development.tsv "
    "--validation gap-validation.tsv --output-dir runs/refreader-incremental",
}


# ------------------------------------------------------------------------------------------------- parsers
def add_train_parsers(models: argparse._SubParsersAction) -> None:
    """Register ``train petra`` and ``train refreader``."""
    for model in ("petra", "refreader"):
        _add_train_parser(models, model)


def _add_train_parser(models: argparse._SubParsersAction, model: str) -> None:
    name = MODEL_NAMES[model]
    parser = models.add_parser(
        model, help=f"{name}: pronoun coreference on GAP-format data (or the built-in corpus), or whole-document "
        "coreference on CoNLL-2012 files",
        description=_DESCRIPTIONS[model],
        epilog=f"Examples: {_EXAMPLES[model]}; hf-entity train {model} {_CONLL_EXAMPLE.format(model=model)}",
    )
    data = parser.add_argument_group(
        "data (either --train and --validation, --synthetic, or --conll with an optional --validation)"
    )
    data.add_argument("--train", metavar="PATH_OR_ID", help="GAP TSV file or Hub dataset id of the training rows")
    data.add_argument(
        "--validation", metavar="PATH_OR_ID",
        help="GAP TSV file or Hub dataset id of the validation rows; with --conll, a CoNLL-2012 file or folder of "
        "validation documents (none may also be a training document)",
    )
    data.add_argument("--train-split", default="train", help="split of a Hub training dataset (default: train)")
    data.add_argument(
        "--validation-split", default="validation", help="split of a Hub validation dataset (default: validation)"
    )
    data.add_argument(
        "--synthetic", type=positive_int, metavar="N",
        help="train on N rows of the built-in people-and-pronouns corpus (no data needed)",
    )
    data.add_argument(
        "--synthetic-validation", type=positive_int, metavar="M",
        help=f"validation rows of the built-in corpus (default: N/{SYNTHETIC_VALIDATION_SHARE}); ignored with "
        "--validation",
    )
    data.add_argument("--max-train-rows", type=positive_int, help="train on the first rows only")
    data.add_argument(
        "--conll", metavar="PATH",
        help="train on whole-document coreference instead: a CoNLL-2012 file or folder of them (e.g. LitBank's conll "
        "folder), every mention of every entity. The epoch and the mention threshold are chosen by CoNLL F1 on "
        f"--validation, or, without it, on the last {100 // CONLL_HELD_OUT_SHARE}%% of these documents (at least one; "
        "their names are printed), held out from training",
    )
    data.add_argument(
        "--chunk-length", type=positive_int, metavar="N",
        help=f"with --conll: tokens per training chunk (default: {CONLL_CHUNK_LENGTH}); validation documents are "
        "read whole",
    )

    architecture = parser.add_argument_group("model")
    add_encoder_option(
        architecture, "its frozen features are read and its tokenizer is used"
        + ("; with --incremental only its tokenizer" if model == "refreader" else ""),
    )
    if model == "refreader":
        architecture.add_argument(
            "--incremental", action="store_true",
            help="a purely incremental reader with its own word embeddings over the vocabulary of the --encoder's "
            "tokenizer (no encoder weights are loaded)",
        )
    architecture.add_argument(
        "--init-from", metavar="CHECKPOINT",
        help=f"start from a saved {name} checkpoint folder or Hub id"
        + (" (e.g. a language-model-pretrained RefReaderForCausalLM)" if model == "refreader" else "")
        + " instead of a fresh model; its tokenizer is used when it has one saved, else the --encoder's. "
        "Architecture options must match the checkpoint",
    )
    cells = "10, paper range 2-20" if model == "petra" else "2; the paper uses 2 or 4"
    architecture.add_argument("--num-memory-cells", type=positive_int, help=f"memory cells (default: {cells})")
    if model == "petra":
        architecture.add_argument("--memory-variant", choices=("vanilla", "learned_init", "fixed_key"),
                                  help="memory variant (default: vanilla)")
    architecture.add_argument("--hidden-size", type=positive_int, help="GRU and memory size (default: 300)")
    if model == "petra":
        architecture.add_argument("--mlp-hidden-size", type=positive_int, help="width of the MLPs (default: 300)")
    where = "the GRU output" if model == "petra" else "the input features, the pre-recurrent state and the output"
    architecture.add_argument("--dropout", type=float, help=f"dropout on {where} (default: 0.5)")
    config_name = "PetraConfig" if model == "petra" else "RefReaderConfig"
    add_config_overrides_option(architecture, config_name, '{"encoder_layers": [-2, -1]}')

    training = parser.add_argument_group("training")
    add_schedule_options(training, epochs=20.0, batch_size=GAP_BATCH_SIZE, learning_rate=1e-3)
    _data_dependent_batch_size(training)
    training.add_argument(
        "--early-stopping-patience", type=positive_int,
        help=f"epochs without validation improvement before stopping (default: {GAP_PATIENCE}; {CONLL_PATIENCE} with "
        "--conll, whose epochs are longer)",
    )
    training.add_argument(
        "--cache-dir", help="folder for cached encoder features (reused by later runs"
        + ("; unused with --incremental)" if model == "refreader" else ")"),
    )
    add_output_options(parser, "training and encoding the features")
    parser.set_defaults(handler=run_train, model=model, command_name=f"train {model}")


def _data_dependent_batch_size(group: argparse._ArgumentGroup) -> None:
    """--batch-size defaults to None, so that a run can tell a given size from the default of its data (GAP rows or
    CoNLL chunks)."""
    action = next(action for action in group._group_actions if action.dest == "batch_size")
    action.default = None
    action.help = (
        f"rows per batch and process (default: {GAP_BATCH_SIZE} GAP rows; {CONLL_BATCH_SIZE} chunks of "
        "--chunk-length tokens with --conll)"
    )


# --------------------------------------------------------------------------------------------------- train
def model_class(model: str) -> type:
    """The coreference head `train` builds for a model name."""
    if model == "petra":
        from ..models.petra import PetraForCoreference

        return PetraForCoreference
    from ..models.refreader import RefReaderForCoreference

    return RefReaderForCoreference


def run_train(args: argparse.Namespace) -> int:
    """``hf-entity train petra|refreader``: train, tune the threshold on validation, save model + tokenizer + card,
    print the scores."""
    from transformers import set_seed

    from ..tasks.coreference import gap_gold, score_gap, train_on_gap

    if args.conll is not None:
        return run_train_conll(args)
    if args.chunk_length is not None:
        raise CliError("--chunk-length applies to --conll documents; add --conll PATH or drop it.")
    check_train_outputs(args, [("--train", args.train), ("--validation", args.validation),
                               ("--encoder", args.encoder), ("--init-from", args.init_from)])
    overrides = config_overrides(args)
    train_rows, validation_rows, dataset_id = training_data(args)
    set_seed(args.seed)
    model, tokenizer = build_model(args, overrides)
    output_dir = Path(args.output_dir)
    with trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_gap(
            model,
            tokenizer,
            train_rows,
            validation_rows,
            output_dir=trainer_dir,
            cache_dir=args.cache_dir,
            max_train_rows=args.max_train_rows,
            early_stopping_patience=args.early_stopping_patience or GAP_PATIENCE,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size or GAP_BATCH_SIZE,
            learning_rate=args.learning_rate,
            seed=args.seed,
            data_seed=args.seed,
            **_dataset_label(dataset_id),
        )
        with main_process_work() as is_main:
            if not is_main:
                return 0
            model = result.trainer.model  # the best epoch's weights, threshold stored in its config
            scores = result.validation_scores
            threshold = float(model.config.coref_threshold)
            gold = gap_gold(validation_rows)
            baseline = score_gap(gold, {row.example_id: (True, True) for row in gold})
            report = {
                "checkpoint": str(output_dir),
                "validation_rows": len(gold),
                "threshold": threshold,
                **scores.as_dict(),
                "all_positive_baseline_f1": baseline.f1,
                "epochs_run": len(result.epoch_seconds),
            }
            save_checkpoint(model, tokenizer, output_dir, report)
            print(score_line("validation", scores, threshold))
            print(f"all-positive baseline F1 {100 * baseline.f1:.1f}; checkpoint saved to {output_dir}")
    return 0


def conll_config_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """`CONLL_CONFIG_DEFAULTS` of the model for a fresh model (a checkpoint keeps its own); overrides win."""
    from ..tasks.coreference.conll_training import CONLL_CONFIG_DEFAULTS

    return {} if args.init_from is not None else dict(CONLL_CONFIG_DEFAULTS[args.model])


def run_train_conll(args: argparse.Namespace) -> int:
    """``hf-entity train petra|refreader --conll PATH``: train on whole CoNLL-2012 documents (`train_on_conll`),
    choose the epoch and the mention threshold by CoNLL F1 on the validation documents, save model + tokenizer +
    card, print the scores."""
    from transformers import set_seed

    from ..tasks.coreference.conll_training import train_on_conll
    from .language_modeling import _conll_dataset

    check_conll_options(args)
    check_train_outputs(args, [("--conll", args.conll), ("--validation", args.validation),
                               ("--encoder", args.encoder), ("--init-from", args.init_from)])
    overrides = {**conll_config_defaults(args), **config_overrides(args)}
    train_documents, validation_documents, held_out = conll_training_documents(args.conll, args.validation)
    if held_out and is_main_process():
        total = len(held_out) + len({document.name for document in train_documents})
        print(
            f"held out for validation (not trained on): the last {len(held_out)} of the {total} documents of --conll, "
            f"{listing(held_out, 10)}"
        )
    set_seed(args.seed)
    model, tokenizer = build_model(args, overrides)
    output_dir = Path(args.output_dir)
    dataset, dataset_name = _conll_dataset(args.validation or args.conll)
    chunk_length = args.chunk_length or CONLL_CHUNK_LENGTH
    with trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_conll(
            model,
            tokenizer,
            train_documents,
            validation_documents,
            output_dir=trainer_dir,
            cache_dir=args.cache_dir,
            chunk_length=chunk_length,
            early_stopping_patience=args.early_stopping_patience or CONLL_PATIENCE,
            dataset=dataset,
            dataset_name=dataset_name,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size or CONLL_BATCH_SIZE,
            learning_rate=args.learning_rate,
            seed=args.seed,
            data_seed=args.seed,
        )
        with main_process_work() as is_main:
            if not is_main:
                return 0
            model = result.trainer.model  # the best epoch's weights, mention threshold stored in its config
            metrics = result.validation_metrics
            report = {
                "checkpoint": str(output_dir),
                "conll": args.conll,
                "validation": args.validation,
                "training_documents": len(train_documents),
                "validation_documents": len(validation_documents),
                "held_out_documents": held_out,
                "chunk_length": chunk_length,
                **metrics,
                "epochs_run": len(result.epoch_seconds),
            }
            save_checkpoint(model, tokenizer, output_dir, report)
            print(conll_score_line("validation", metrics))
            print(f"checkpoint saved to {output_dir}")
    return 0


def check_conll_options(args: argparse.Namespace) -> None:
    """--conll: no other training data, no option of GAP-format data, and inputs that exist (checked before anything
    heavy is imported)."""
    sources = (("--train", args.train), ("--synthetic", args.synthetic))
    others = [option for option, value in sources if value is not None]
    if others:
        raise CliError(
            f"--conll and {' and '.join(others)} are two sources of training data; give either --conll PATH "
            "(CoNLL-2012 documents, optionally with --validation PATH) or the GAP-format data, not both."
        )
    ignored = given_options(args, _GAP_DATA_OPTIONS)
    if ignored:
        raise CliError(f"{' and '.join(ignored)} apply to GAP-format data, not to --conll documents; drop them.")
    for option, location in (("--conll", args.conll), ("--validation", args.validation)):
        if location is not None and not Path(location).exists():
            raise CliError(
                f"{option} {location} does not exist; with --conll, give a CoNLL-2012 file or a folder of them."
            )


def conll_training_documents(conll: str, validation: str | None) -> tuple[list[Any], list[Any], list[str]]:
    """(training documents, validation documents, names of the documents held out of --conll for validation).

    With --validation, no validation document (name, part) may also be a training document: the epoch and the
    mention threshold would be chosen on data the model was trained on. Without it, the last tenth of the --conll
    documents (at least one) is held out, every part of a document on the same side.
    """
    from ..tasks.coreference import read_conll_coreference

    documents = read_conll_coreference(conll)
    if validation is not None:
        validation_documents = read_conll_coreference(validation)
        trained = {(document.name, document.part) for document in documents}
        shared = [document for document in validation_documents if (document.name, document.part) in trained]
        if shared:
            raise CliError(
                f"--validation {validation} shares {len(shared)} of its {len(validation_documents)} document(s) with "
                f"--conll {conll} (same name and part: {listing([document.label for document in shared], 3)}); "
                "choosing the epoch and the threshold on training documents would overrate the model: give "
                "validation documents that are not in --conll."
            )
        return documents, validation_documents, []
    names = list(dict.fromkeys(document.name for document in documents))  # in reading order
    if len(names) < 2:
        raise CliError(
            f"--conll {conll} holds {len(names)} document(s), too few to hold one out for validation; give more "
            "documents, or the validation documents with --validation PATH."
        )
    held_out = names[-max(1, len(names) // CONLL_HELD_OUT_SHARE):]
    kept = set(held_out)
    return (
        [document for document in documents if document.name not in kept],
        [document for document in documents if document.name in kept],
        held_out,
    )


def conll_score_line(split: str, metrics: dict[str, float]) -> str:
    """The CoNLL-2012 scores of `ConllMetrics` (percent) on one line."""
    return (
        f"{split} CoNLL F1 {metrics['conll_f1']:.1f} (MUC {metrics['muc_f1']:.1f}, B3 {metrics['bcub_f1']:.1f}, "
        f"CEAF-e {metrics['ceafe_f1']:.1f}, LEA {metrics['lea_f1']:.1f}); mentions F1 {metrics['mention_f1']:.1f}; "
        f"gold-mention CoNLL F1 {metrics['gold_conll_f1']:.1f}; mention threshold {metrics['mention_threshold']:.2f}"
        f"{_new_entity_rule(metrics.get('new_entity_threshold'))}"
    )


def _new_entity_rule(threshold: float | None) -> str:
    return "" if threshold is None else f", new entity at overwrite share {threshold:.2f}"


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--config-overrides, then the explicit options on top; fields that the model's config does not have are
    refused (a typo would be lost)."""
    overrides = dict(args.config_overrides)
    explicit = {
        "num_memory_cells": args.num_memory_cells,
        "memory_variant": getattr(args, "memory_variant", None),
        "hidden_size": args.hidden_size,
        "mlp_hidden_size": getattr(args, "mlp_hidden_size", None),
        "dropout": args.dropout,
    }
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    check_config_fields(
        model_class(args.model).config_class, overrides, args.model, " (the encoder's config comes from --encoder)"
    )
    if getattr(args, "incremental", False) and args.init_from is None:
        refuse_fields(overrides, _TOKENIZER_FIELDS, "with --incremental they come from the --encoder's tokenizer")
        refuse_fields(overrides, _ENCODER_FIELDS, "an --incremental reader has no encoder")
    return overrides


def training_data(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(train rows, validation rows, dataset id for the model card), as datasets in the `load_gap` layout; validation
    rows with a repeated id, or that the model also trains on, are refused (before any model is built)."""
    from ..tasks.coreference import load_gap
    from ..tasks.coreference.gap import shared_ids
    from ..tasks.coreference.synthetic import PEOPLE_CORPUS_ID, generate_people_corpus

    if args.synthetic is not None and args.train is not None:
        raise CliError("give either --train (with --validation) or --synthetic N, not both.")
    if args.synthetic is None and (args.train is None or args.validation is None):
        raise CliError(
            "no training data: pass --train PATH --validation PATH (GAP TSV files or Hub dataset ids), "
            "--synthetic N to use the built-in people-and-pronouns corpus, or --conll PATH (CoNLL-2012 documents)."
        )
    if args.synthetic is not None:
        train = generate_people_corpus(args.synthetic, seed=args.seed, id_prefix="people-train")
        training_source = f"--synthetic {args.synthetic}"
        if args.validation is None:
            size = args.synthetic_validation or max(1, args.synthetic // SYNTHETIC_VALIDATION_SHARE)
            # Another seed: validation stories are new combinations of names and templates.
            validation = generate_people_corpus(size, seed=args.seed + 1, id_prefix="people-validation")
            return train, validation, PEOPLE_CORPUS_ID
    else:
        refuse_the_same_data(("--train", args.train, args.train_split),
                             ("--validation", args.validation, args.validation_split), _VALIDATION_ADVICE)
        train = load_gap(args.train, split=args.train_split)  # a repeated training row is trained on twice: no harm
        training_source = f"--train {args.train}"
    validation = read_gap_rows(args.validation, args.validation_split, "--validation")
    trained = train if args.max_train_rows is None else train.select(range(min(args.max_train_rows, len(train))))
    refuse_shared_examples(shared_ids(trained, validation), f"--validation {args.validation}", training_source,
                           _VALIDATION_ADVICE)
    return train, validation, _dataset_id(args.validation)


def read_gap_rows(source: str, split: str | None, option: str | None = None) -> Any:
    """The GAP rows of a file or Hub dataset (`load_gap`), refused in one line when an id occurs more than once
    (predictions and scores are matched to rows by id); `option` (e.g. "--gap-file") names the source."""
    from ..tasks.coreference.gap import check_unique_ids, load_gap

    rows = load_gap(source, split=split)
    try:
        check_unique_ids(rows, f"{option} {source}" if option else source)
    except ValueError as error:
        raise CliError(str(error)) from error
    return rows


def _dataset_id(source: str) -> str:
    """A Hub id stays as it is; a local GAP file becomes "gap" (the card links the GAP dataset), others the stem."""
    path = Path(source)
    if not path.exists():
        return source
    return "gap" if path.name.lower().startswith("gap") else path.stem


def build_model(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """The model to train and its tokenizer: from --init-from, an incremental reader, or a fresh model on --encoder."""
    from .checkpoints import fast_tokenizer

    head = model_class(args.model)
    if args.init_from is not None:
        return _model_from_checkpoint(args, head, overrides)
    encoder = encoder_location(args.encoder)
    tokenizer = fast_tokenizer(encoder)
    if getattr(args, "incremental", False):
        config = head.config_class(
            vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, encoder_config=None, **overrides
        )
        return head(config), tokenizer
    return head.from_encoder(encoder, **overrides), tokenizer


def _model_from_checkpoint(args: argparse.Namespace, head: type, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """--init-from: the checkpoint's weights in the coreference head (an LM checkpoint's memory and embeddings
    carry over), with its saved tokenizer or else the --encoder's."""
    from transformers import AutoConfig

    from .checkpoints import fast_tokenizer

    location = args.init_from
    if not Path(location).exists() and not HUB_ID.match(location):
        raise CliError(f"--init-from checkpoint {location} does not exist; pass a folder written by save_pretrained.")
    # Before AutoConfig reads it: for a model type it does not know, it would offer to run the checkpoint's code.
    expected = head.config_class.model_type
    model_type = stored_config(location).get("model_type", expected)
    if model_type != expected:
        raise CliError(
            f"--init-from {location} holds a {model_type!r} model, but `train {args.model}` needs a {expected!r} "
            "checkpoint; pick the matching model."
        )
    stored = AutoConfig.from_pretrained(location, trust_remote_code=False)
    encoder_config = getattr(stored, "encoder_config", None)
    if getattr(args, "incremental", False) and encoder_config is not None:
        raise CliError(
            f"--incremental was given, but --init-from {location} reads encoder features; drop --incremental (the "
            "checkpoint decides the mode)."
        )
    tokenizer = saved_tokenizer(location)
    if tokenizer is None:
        tokenizer = fast_tokenizer(encoder_location(args.encoder))
    vocab_size = encoder_config.vocab_size if encoder_config is not None else stored.vocab_size
    if len(tokenizer) > vocab_size:
        raise CliError(
            f"the tokenizer has {len(tokenizer)} tokens but --init-from {location} has a vocabulary of {vocab_size}; "
            "save the checkpoint's own tokenizer next to it or pass the matching --encoder."
        )
    changed = sorted(key for key, value in overrides.items() if getattr(stored, key, None) != value)
    advice = (
        f"the options {changed} change the shapes of weights stored in --init-from {location}; with a checkpoint "
        "only fields that keep its architecture (e.g. dropout, loss weights) can be overridden."
        if changed else None
    )
    # A checkpoint of the same head must hold all of its weights; another head's (a language model's) need not.
    same_head = head.__name__ in (stored_config(location).get("architectures") or [])
    return load_model(head, location, advice, strict=same_head, **overrides), tokenizer


def _dataset_label(dataset_id: str) -> dict[str, str | None]:
    """Id and display name that the validation scores are recorded under (the model card shows them)."""
    from ..tasks.coreference.synthetic import PEOPLE_CORPUS_ID, PEOPLE_CORPUS_NAME

    names = {PEOPLE_CORPUS_ID: PEOPLE_CORPUS_NAME, "gap": "GAP"}
    return {"dataset": dataset_id, "dataset_name": names.get(dataset_id)}


def score_line(split: str, scores: Any, threshold: float) -> str:
    return (
        f"{split} F1 {100 * scores.f1:.1f} (masculine {100 * scores.masculine_f1:.1f}, feminine "
        f"{100 * scores.feminine_f1:.1f}, bias {scores.bias:.2f}) at threshold {threshold:.2f}"
    )


# ----------------------------------------------------------------------------------------- checkpoints, scores
def load_coreference_checkpoint(checkpoint: str) -> tuple[Any, Any]:
    """Model (PeTra or Referential Reader) and fast tokenizer of a coreference checkpoint."""
    from ..auto import AutoModelForCoreference

    return load_checkpoint(AutoModelForCoreference, checkpoint)


def coreference_pipeline(checkpoint: str) -> Any:
    """`pipeline("coreference")` of a checkpoint (the task is registered before any command runs)."""
    from transformers import pipeline

    model, tokenizer = load_coreference_checkpoint(checkpoint)
    # Built from the loaded objects: nothing more is loaded, and transformers is told so (it never asks).
    return pipeline("coreference", model=model, tokenizer=tokenizer, trust_remote_code=False)


def candidate_probabilities(model: Any, tokenizer: Any, rows: Any, batch_size: int = 32) -> list[list[float]]:
    """Link probability of every GAP row's pronoun with A and with B, in row order (a progress bar shows).

    Uses the same tokenization, spans and link scheme as training (`prepare_gap_dataset` with the model's
    `gap_link_scheme`), so the scores equal the ones the threshold was tuned on.

    Args:
        model: A coreference model (`PetraForCoreference`, `RefReaderForCoreference`), on any device: the batches
            are moved to `model.device`.
        tokenizer: Its fast tokenizer.
        rows: GAP rows in the `load_gap` layout.
        batch_size: Rows per forward pass.

    Returns:
        ``[[p_a, p_b], ...]``, one pair per row.

    Example:
        >>> candidate_probabilities(model, tokenizer, load_gap("gap-validation.tsv"))[:1]  # doctest: +SKIP
        [[0.071, 0.003]]
    """
    import torch
    from tqdm.auto import tqdm

    from ..tasks.coreference import CoreferenceCollator, prepare_gap_dataset
    from ..tasks.coreference.training import gap_link_scheme

    # The scores do not depend on the labelled pairs, but the rows are then prepared exactly as in training.
    prepared = prepare_gap_dataset(rows, tokenizer, link_scheme=gap_link_scheme(model))
    columns = ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans"]
    prepared = prepared.select_columns([column for column in columns if column in prepared.column_names])
    collator = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id or 0)
    model.eval()
    probabilities: list[list[float]] = []
    with torch.no_grad(), tqdm(total=len(prepared), desc="Scoring", unit="row") as progress:
        for start in range(0, len(prepared), batch_size):
            batch = collator([prepared[index] for index in range(start, min(start + batch_size, len(prepared)))])
            # The collator builds CPU tensors; the model may sit on a GPU (e.g. after `pipeline(...)` placed it).
            batch = {key: value.to(model.device) for key, value in batch.items()}
            probabilities.extend(model(**batch).candidate_scores[:, :2].float().cpu().tolist())
            progress.update(len(batch["input_ids"]))
    return probabilities
