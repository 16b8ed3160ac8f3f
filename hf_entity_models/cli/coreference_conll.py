"""``hf-entity train petra|refreader --conll``: the coreference models on whole CoNLL-2012 documents (e.g. LitBank),
in the document mode (the default: span mentions proposed and scored, clustered by an unbounded memory of entities,
`train_document_coreference`) or with the token memory (``--coreference-mode tokens``, `train_on_conll`); and the
CoNLL-2012 score table, responses and document-mode scoring that ``evaluate --conll`` prints and writes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .checkpoints import stored_config
from .common import HUB_ID, CliError, given_options, hidden_sibling, json_safe, listing, write_json
from .coreference_models import build_model, config_overrides, load_coreference_checkpoint
from .training import check_train_outputs, is_main_process, main_process_work, save_checkpoint, trainer_folder

# Schedule defaults that depend on the data (written here so that `--help` does not import torch; tests check they
# agree with the training functions'): the token memory's epochs (GAP rows or --conll chunks), its chunks of CoNLL
# documents (`train_on_conll`'s defaults; a CoNLL epoch, which reads every validation document whole, is long).
TOKEN_MODE_EPOCHS = 20.0
CONLL_BATCH_SIZE, CONLL_PATIENCE, CONLL_CHUNK_LENGTH = 8, 5, 256
# The document mode (`train_document_coreference`'s defaults): one whole document per step, the measured number of
# epochs, the encoder's rate when PeTra fine-tunes it.
DOCUMENT_BATCH_SIZE, DOCUMENT_EPOCHS, DOCUMENT_ENCODER_LEARNING_RATE = 1, 15, 2e-5
# How `--conll` documents are learned (`config.coreference_mode`); the first is the default.
COREFERENCE_MODES = ("document", "tokens")
# Without --validation, the last tenth of the --conll documents (at least one) is held out for selection.
CONLL_HELD_OUT_SHARE = 10
# Options of GAP-format or built-in data that training on --conll does not read (argparse destination -> option).
GAP_DATA_OPTIONS = {"synthetic_validation": "--synthetic-validation", "max_train_rows": "--max-train-rows"}
# Options of the token memory, which the document mode does not have (argparse destination -> option).
_TOKEN_MEMORY_OPTIONS = {
    "num_memory_cells": "--num-memory-cells", "memory_variant": "--memory-variant", "hidden_size": "--hidden-size",
    "mlp_hidden_size": "--mlp-hidden-size", "dropout": "--dropout",
}
# The rows of the `evaluate --conll` table of a coreference checkpoint: key of `score_coreference`, name printed.
CONLL_TABLE_ROWS = (("muc", "MUC"), ("bcub", "B3"), ("ceafm", "CEAF-m"), ("ceafe", "CEAF-e"), ("blanc", "BLANC"),
                    ("lea", "LEA"))


# ------------------------------------------------------------------------------------------- train --conll
def run_train_conll_documents(args: argparse.Namespace) -> int:
    """``hf-entity train petra|refreader --conll PATH``: the document mode, or the token memory with
    ``--coreference-mode tokens``."""
    if (args.coreference_mode or COREFERENCE_MODES[0]) == "tokens":
        return run_train_conll(args)
    return run_train_document(args)


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
    refuse_encoder_learning_rate(args, "--coreference-mode tokens")
    check_train_outputs(args, [("--conll", args.conll), ("--validation", args.validation),
                               ("--encoder", args.encoder), ("--init-from", args.init_from)])
    overrides = {**conll_config_defaults(args), **config_overrides(args)}
    if overrides.get("coreference_mode", "tokens") != "tokens":
        raise CliError(
            f"--config-overrides sets coreference_mode={overrides['coreference_mode']!r}, but --coreference-mode is "
            "'tokens'; drop --coreference-mode tokens to train the document mode."
        )
    train_documents, validation_documents, held_out = training_and_validation_documents(args)
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
            num_train_epochs=args.epochs or TOKEN_MODE_EPOCHS,
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


def run_train_document(args: argparse.Namespace) -> int:
    """``hf-entity train petra|refreader --conll PATH`` (the document mode, `coreference_mode="document"`): train on
    whole CoNLL-2012 documents, one per step (`train_document_coreference`), keep the epoch with the best validation
    CoNLL F1, choose the span threshold there, save model + tokenizer + card, print the scores."""
    from transformers import set_seed

    from ..tasks.coreference.document_training import train_document_coreference
    from .language_modeling import _conll_dataset

    check_conll_options(args)
    check_document_options(args)
    check_train_outputs(args, [("--conll", args.conll), ("--validation", args.validation),
                               ("--encoder", args.encoder), ("--init-from", args.init_from)])
    overrides = document_config_overrides(args)
    stored = stored_config(args.init_from) if args.init_from is not None else {}
    if getattr(args, "encoder_learning_rate", None) is not None and overrides.get(
        "freeze_encoder", stored.get("freeze_encoder", True)
    ):
        raise CliError(
            "--encoder-learning-rate applies to a fine-tuned encoder, but this model's encoder is frozen; add "
            "--config-overrides '{\"freeze_encoder\": false}' (PeTra) or drop --encoder-learning-rate."
        )
    train_documents, validation_documents, held_out = training_and_validation_documents(args)
    set_seed(args.seed)
    model, tokenizer = build_document_model(args, overrides)
    fine_tuned = not model.config.encoder_is_frozen
    encoder_learning_rate = getattr(args, "encoder_learning_rate", None) or DOCUMENT_ENCODER_LEARNING_RATE
    output_dir = Path(args.output_dir)
    dataset, dataset_name = _conll_dataset(args.validation or args.conll)
    with trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_document_coreference(
            model,
            tokenizer,
            train_documents,
            validation_documents,
            output_dir=trainer_dir,
            epochs=args.epochs or DOCUMENT_EPOCHS,
            learning_rate=args.learning_rate,
            encoder_learning_rate=encoder_learning_rate,
            early_stopping_patience=args.early_stopping_patience,
            cache_dir=args.cache_dir,
            dataset=dataset,
            dataset_name=dataset_name,
            per_device_train_batch_size=args.batch_size or DOCUMENT_BATCH_SIZE,
            seed=args.seed,
            data_seed=args.seed,
        )
        with main_process_work() as is_main:
            if not is_main:
                return 0
            model = result.trainer.model  # the best epoch's weights, span threshold stored in its config
            metrics = result.validation_metrics
            report = {
                "checkpoint": str(output_dir),
                "coreference_mode": "document",
                "conll": args.conll,
                "validation": args.validation,
                "training_documents": len(train_documents),
                "validation_documents": len(validation_documents),
                "held_out_documents": held_out,
                "encoder": model.config.name_or_path or None,
                "encoder_fine_tuned": fine_tuned,
                "learning_rate": args.learning_rate,
                "encoder_learning_rate": encoder_learning_rate if fine_tuned else None,
                **metrics,
                "span_threshold_sweep": {f"{key:g}": value for key, value in result.threshold_sweep.items()},
                "epochs_run": len(result.epoch_seconds),
                "epoch_seconds": result.epoch_seconds,
                "history": result.history,
            }
            save_checkpoint(model, tokenizer, output_dir, report)
            print(document_score_line("validation", metrics))
            print(f"checkpoint saved to {output_dir}")
    return 0


def check_document_options(args: argparse.Namespace) -> None:
    """The document mode: no option of the token mode (chunks, the token memory's sizes, an incremental reader)."""
    if args.chunk_length is not None:
        raise CliError(
            "--chunk-length cuts the token mode's training chunks; the document mode trains on whole documents: drop "
            "it, or add --coreference-mode tokens."
        )
    if getattr(args, "incremental", False):
        raise CliError(
            "--incremental reads no encoder, but the document mode reads a pretrained encoder's features: drop "
            "--incremental, or add --coreference-mode tokens."
        )
    memory = given_options(args, _TOKEN_MEMORY_OPTIONS)
    if memory:
        raise CliError(
            f"{' and '.join(memory)} set the token memory, which the document mode does not have; its sizes are "
            "config fields, e.g. --config-overrides '{\"document_hidden_size\": 128, \"document_dropout\": 0.3}', "
            "or add --coreference-mode tokens."
        )


def document_config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--config-overrides of the document mode, with `coreference_mode="document"`."""
    overrides = config_overrides(args)
    mode = overrides.get("coreference_mode", "document")
    if mode != "document":
        raise CliError(
            f"--config-overrides sets coreference_mode={mode!r}, but --coreference-mode is 'document' (the default "
            "with --conll); use --coreference-mode tokens instead."
        )
    return {**overrides, "coreference_mode": "document"}


def build_document_model(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """A fresh document-mode model on --encoder, or a document-mode --init-from checkpoint, and its tokenizer."""
    if args.init_from is not None:
        location = args.init_from
        stored = stored_config(location) if Path(location).exists() or HUB_ID.match(location) else {}
        stored_mode = stored.get("coreference_mode", "tokens")
        if stored and stored_mode != "document":
            raise CliError(
                f"--init-from {location} is a coreference_mode={stored_mode!r} checkpoint, but --conll trains the "
                "document mode; start from a fresh model (drop --init-from), from a document-mode checkpoint, or add "
                "--coreference-mode tokens."
            )
    return build_model(args, overrides)


def document_score_line(split: str, metrics: dict[str, float]) -> str:
    """The scores of `train_document_coreference` (percent) on one line."""
    return (
        f"{split} CoNLL F1 {metrics['conll_f1']:.1f} (MUC {metrics['muc_f1']:.1f}, B3 {metrics['bcub_f1']:.1f}, "
        f"CEAF-e {metrics['ceafe_f1']:.1f}, LEA {metrics['lea_f1']:.1f}); gold-mention CoNLL F1 "
        f"{metrics['gold_conll_f1']:.1f}; mentions P {metrics['mention_precision']:.1f} R "
        f"{metrics['mention_recall']:.1f} F1 {metrics['mention_f1']:.1f}; span threshold "
        f"{metrics['span_threshold']:g}; best epoch {metrics['best_epoch']}, {metrics['seconds_per_epoch']:.1f} s "
        "per epoch"
    )


def refuse_encoder_learning_rate(args: argparse.Namespace, what: str) -> None:
    if getattr(args, "encoder_learning_rate", None) is not None:
        raise CliError(
            f"--encoder-learning-rate applies to the --conll document mode with a fine-tuned encoder, not to {what}; "
            "drop it."
        )


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
    ignored = given_options(args, GAP_DATA_OPTIONS)
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


# ------------------------------------------------------------------------------------------ evaluate --conll
def evaluate_document_checkpoint(args: argparse.Namespace, architecture: str, documents: list[Any]) -> int:
    """The CoNLL-2012 scores of a document-mode checkpoint (`coreference_mode="document"`) on every --conll
    document, read whole: the table of the token mode, mention detection and the CoNLL F1 of the gold mentions
    clustered by the model; --responses writes the clusters found."""
    import torch

    from ..tasks.coreference import score_coreference
    from ..tasks.coreference.conll_training import mention_scores
    from ..tasks.coreference.document_training import add_document_word_features, document_responses, document_rows

    model, tokenizer = load_coreference_checkpoint(args.checkpoint)
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    try:
        rows = document_rows(documents, tokenizer)
    except ValueError as error:
        raise CliError(str(error)) from error
    if model.config.encoder_is_frozen:
        rows = add_document_word_features(model, rows)
    gold_mentions = bool(args.gold_mentions)
    threshold = args.span_threshold if args.span_threshold is not None else float(model.config.span_threshold)
    gold = document_responses(model, documents, rows, gold_mentions=True)
    responses = gold if gold_mentions else document_responses(model, documents, rows, span_threshold=threshold)
    scores = score_coreference(documents, responses)
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint, "model": architecture, "coreference_mode": "document", "conll": args.conll,
        "documents": len(documents), "gold_mentions": gold_mentions,
        "span_threshold": None if gold_mentions else threshold,
        **scores, **mention_scores(documents, responses),
        "gold_conll_f1": float(score_coreference(documents, gold)["conll_f1"]),
        "entities_per_document": sum(len({c for *_, c in r.mentions}) for r in responses) / len(responses),
        "key_mentions": sum(len(document.mentions) for document in documents),
        "response_mentions": sum(len(document.mentions) for document in responses),
    }
    print(json.dumps(json_safe(result), indent=2) if args.json else conll_table(result))
    if args.output:
        write_json(Path(args.output), json_safe(result))
    if args.responses:
        write_responses(responses, Path(args.responses))
        print(f"wrote the clusters of {len(responses)} documents to {args.responses}", file=sys.stderr)
    return 0


def conll_table(result: dict[str, Any]) -> str:
    """The `evaluate --conll` result of a coreference checkpoint as a small table, then the CoNLL F1 and mentions
    (and, for a document-mode checkpoint, the CoNLL F1 of the gold mentions clustered by the model)."""
    if result["gold_mentions"]:
        chosen = "gold mentions"
    elif result.get("coreference_mode") == "document":
        chosen = f"span threshold {result['span_threshold']:g}"
    else:
        chosen = f"mention threshold {result['mention_threshold']:.2f}"
    lines = [
        f"{result['model']} on {result['documents']} document(s) of {result['conll']} ({chosen}; singletons scored)",
        f"{'metric':<8}{'recall':>9}{'precision':>11}{'F1':>8}",
    ]
    for key, name in CONLL_TABLE_ROWS:
        scores = result[key]
        lines.append(f"{name:<8}{scores['recall']:>9.2f}{scores['precision']:>11.2f}{scores['f1']:>8.2f}")
    lines.append(f"CoNLL F1 {result['conll_f1']:.2f} (mean of the MUC, B3 and CEAF-e F1)")
    lines.append(
        f"mentions: recall {result['mention_recall']:.2f}, precision {result['mention_precision']:.2f}, F1 "
        f"{result['mention_f1']:.2f} (exact spans; {result['response_mentions']} found, {result['key_mentions']} in "
        "the key)"
    )
    if "gold_conll_f1" in result:
        lines.append(f"gold-mention CoNLL F1 {result['gold_conll_f1']:.2f} (the key's mentions clustered by the model)")
    return "\n".join(lines)


def write_responses(responses: list[Any], path: Path) -> None:
    """`write_conll_coreference` through a new file next to `path`, renamed into place: never half a file."""
    from ..tasks.coreference import write_conll_coreference

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = hidden_sibling(path, "writing")
    try:
        write_conll_coreference(responses, partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def training_and_validation_documents(args) -> tuple[list, list, list[str]]:
    """The --conll training and validation documents; names the documents held out when --validation is not given."""
    train_documents, validation_documents, held_out = conll_training_documents(args.conll, args.validation)
    if held_out and is_main_process():
        total = len(held_out) + len({document.name for document in train_documents})
        print(
            f"held out for validation (not trained on): the last {len(held_out)} of the {total} documents of --conll, "
            f"{listing(held_out, 10)}"
        )
    return train_documents, validation_documents, held_out
