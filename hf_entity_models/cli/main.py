"""The ``hf-entity`` entry point: the parser with its commands, and turning errors into one line.

``train`` is a group with one command per model (``hf-entity train petra ...``), each listing only its own options;
``evaluate`` and ``predict`` take any checkpoint and tell its task from its config.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import coreference, embeddings, evaluate, language_modeling, predict, push, question_answering
from .common import DEBUG_VARIABLE, PROGRAM, one_line, user_errors

DISTRIBUTION = "hf-entity-models"


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
    """The argument parser of ``hf-entity``: train (one command per model), evaluate, predict, push, definitions.

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


def _prepare(args: argparse.Namespace) -> None:
    """What every command needs before it runs: the torch threads asked for, and the package's models and pipelines
    registered with transformers (the parser needed neither)."""
    if getattr(args, "threads", None) is not None:
        import torch

        torch.set_num_threads(args.threads)
    from transformers.pipelines import PIPELINE_REGISTRY

    from ..auto import register_auto_classes, register_pipelines

    register_auto_classes()  # idempotent; importing hf_entity_models has usually done it already
    if "coreference" not in PIPELINE_REGISTRY.get_supported_tasks():  # registering twice logs a warning
        register_pipelines()
