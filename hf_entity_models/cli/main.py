"""The ``hf-entity`` entry point: the parser with its commands, and turning errors into one line.

``train`` is a group with one command per model (``hf-entity train petra ...``), each listing only its own options;
``evaluate`` and ``predict`` take any checkpoint and tell its task from its config.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import coreference, embeddings, evaluate, export, language_modeling, predict, push, question_answering
from .checkpoints import WEIGHT_FILE_NAMES, user_entries
from .common import (
    DEBUG_VARIABLE,
    PROGRAM,
    check_hub_reachable,
    check_location,
    check_output_file,
    is_nonempty_folder,
    one_line,
    user_errors,
)
from .training import check_train_outputs

DISTRIBUTION = "hf-entity-models"
# The options of the `train` commands that name an input of the run: an --output-dir must not hold one.
TRAIN_INPUT_OPTIONS = {
    "train": "--train", "validation": "--validation", "conll": "--conll", "squad": "--squad", "encoder": "--encoder",
    "tokenizer": "--tokenizer", "init_from": "--init-from",
}
# Output files and folders of the commands that write them (destination -> option, is a folder), checked before any
# heavy import; each command checks its outputs again, completely (against its inputs), before it loads anything.
OUTPUT_PATHS = {
    "output": ("--output", False), "responses": ("--responses", False), "predictions": ("--predictions", False),
    "memory_plot": ("--memory-plot", False), "attention_figures": ("--attention-figures", True),
    "onnx": ("--onnx", True),
}
# What each command loads by name (destination -> how a message names it): a folder, or a Hub id to fetch.
LOADED_LOCATIONS = {
    "train": {"encoder": "--encoder", "tokenizer": "--tokenizer", "init_from": "--init-from"},
    "evaluate": {"checkpoint": "CHECKPOINT"},
    "predict": {"checkpoint": "CHECKPOINT", "coref_model": "--coref-model"},
    "definitions": {"model": "MODEL", "reader": "--reader"},
    "export": {"checkpoint": "CHECKPOINT"},
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hf-entity`` command line.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 on an error (a one-line message on stderr), 2 on bad usage, 130 when
        interrupted.

    Example:
        >>> main(["predict", "runs/petra", "--text", "Zoe met Maggie. She smiled."])  # doctest: +SKIP
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse has printed the usage and the message (or the help, the version)
        return exit_request.code if isinstance(exit_request.code, int) else 2
    try:
        # Refused paths and unreachable Hub names answer as fast as a usage error: before torch and transformers are
        # imported (seconds; 8-20 on a busy machine).
        check_outputs_first(args)
        check_hub_names_first(args)
        _prepare(args)
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"{PROGRAM} {args.command_name}: interrupted", file=sys.stderr)
        return 130
    except user_errors() as error:
        if os.environ.get(DEBUG_VARIABLE):
            raise
        print(f"{PROGRAM} {args.command_name}: error: {one_line(error)}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hf-entity``: train (one command per model), evaluate, predict, push, definitions,
    export.

    Building it (and answering ``--help``) imports no torch, transformers, datasets or numpy.
    """
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Train, evaluate, run and publish entity-aware coreference models (PeTra, Referential Reader), "
        "the ForceReader question-answering model (SQuAD 1.1 / 2.0) and the GPT2E entity language model (CoNLL "
        "coreference files, LAMBADA); rebuild a model's rare-token embeddings from dictionary definitions "
        "(DefinitionEMB).",
        epilog=f"Run `{PROGRAM} COMMAND --help` for a command's options. Set {DEBUG_VARIABLE}=1 to get a traceback "
        "instead of a one-line error.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)
    _add_train_parser(commands)
    evaluate.add_parser(commands)
    predict.add_parser(commands)
    push.add_parser(commands)
    embeddings.add_parser(commands)
    export.add_parser(commands)
    return parser


def _add_train_parser(commands: argparse._SubParsersAction) -> None:
    """``train``: a group of one command per model, each with only the options that apply to it."""
    parser = commands.add_parser(
        "train",
        help="train a model (petra, refreader, forcereader, gpt2e) and save a checkpoint folder",
        description="Train one of the package's models and save model, tokenizer and model card to --output-dir. "
        "Each model has its own command and options: `hf-entity train MODEL --help`. Under `accelerate launch` "
        "the run is data-parallel; the main process alone evaluates, saves and reports.",
        epilog="Example: hf-entity train petra --synthetic 1200 --epochs 5 --output-dir runs/petra-people",
    )
    # The models were chosen with --model before they became commands: say so instead of "unrecognized arguments".
    parser.add_argument("--model", action=_ModelIsACommand, help=argparse.SUPPRESS)
    models = parser.add_subparsers(dest="model_command", required=True, metavar="MODEL")
    coreference.add_train_parsers(models)
    question_answering.add_train_parser(models)
    language_modeling.add_train_parser(models)
    for model_parser in models.choices.values():  # every model writes its --output-dir the same way
        model_parser.set_defaults(check_first=check_train_outputs_first)


class _CommandParser(argparse.ArgumentParser):
    """The parser of a command: an argument it does not know is its error, shown with its own usage (argparse would
    report it at the top level, with the usage of `hf-entity` alone)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


class _ModelIsACommand(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        parser.error(f"the model is a command now: `{PROGRAM} train {values} ...` instead of --model {values}")


class _VersionAction(argparse.Action):
    """--version, read only when asked for (the installed distribution's metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        print(f"{PROGRAM} {package_version()}")
        parser.exit()


def package_version() -> str:
    """The installed version of the hf-entity-models distribution, else the package's ``__version__`` (read from the
    already imported package: importing it for this would load torch)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return getattr(sys.modules.get(__name__.split(".")[0]), "__version__", "unknown")


def check_outputs_first(args: argparse.Namespace) -> None:
    """The output checks that need neither torch nor transformers, before the command imports them: its own
    (``check_first``, set by the parsers of the commands that write a folder), then every output file or folder
    it was given can be written there."""
    check_first = getattr(args, "check_first", None)
    if check_first is not None:
        check_first(args)
    resumed = getattr(args, "resumed_outputs", ())  # outputs the command resumes when they exist: it checks them
    for destination, (option, folder) in OUTPUT_PATHS.items():
        location = getattr(args, destination, None)
        if not isinstance(location, str) or destination in resumed:
            continue
        if folder:
            check_location(Path(location), option, folder=True)
        else:
            # Without the command's inputs: whether --overwrite would replace one of them is checked by the command.
            check_output_file(location, option, getattr(args, "overwrite", False))


def check_train_outputs_first(args: argparse.Namespace) -> None:
    """`check_train_outputs` before the models are registered. Whether a non-empty folder of checkpoint files is a
    checkpoint of this package (which `train` replaces without --overwrite) depends on the registered model types:
    that case is left to the command, after its location is checked."""
    inputs = [(option, getattr(args, name, None)) for name, option in TRAIN_INPUT_OPTIONS.items()]
    output_dir = Path(args.output_dir)
    needs_model_types = (
        not args.overwrite and is_nonempty_folder(output_dir) and not user_entries(output_dir)
        and any((output_dir / name).is_file() for name in WEIGHT_FILE_NAMES)
    )
    if needs_model_types:
        check_location(output_dir, "--output-dir", folder=True)
        return
    check_train_outputs(args, inputs)


def check_hub_names_first(args: argparse.Namespace) -> None:
    """Each model, tokenizer or checkpoint the command loads by a Hub id: say where it is looked up, and refuse in
    one line when that Hub cannot be reached (`check_hub_reachable`)."""
    for destination, name in LOADED_LOCATIONS.get(getattr(args, "command", None), {}).items():
        location = getattr(args, destination, None)
        if isinstance(location, str):
            check_hub_reachable(location, name)


def _prepare(args: argparse.Namespace) -> None:
    """What every command needs before it runs: the torch threads asked for, and the package's models and pipelines
    registered with transformers (the parser needed neither)."""
    if getattr(args, "threads", None) is not None:
        import torch

        torch.set_num_threads(args.threads)
    from .._registration import ensure_registered

    ensure_registered()
