"""Checkpoint folders for ``hf-entity``: which files a checkpoint consists of (all that ``push`` uploads and that
``train`` may replace), what its config.json says, and loading its model and tokenizer so that a damaged or
mismatched checkpoint ends in one line naming the file, and code that a checkpoint ships runs only when the command
was given ``--trust-remote-code`` (transformers is always told ``trust_remote_code=``: it never asks on stdin).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from .common import DEBUG_VARIABLE, HUB_ID, CliError, one_line

# The files a checkpoint folder consists of: all that `push` uploads, and (with the report `train` writes) all that
# `train --overwrite` replaces. Anything else there (a .env, notes, optimizer or trainer states, subfolders) is the
# user's: never uploaded, never deleted.
CHECKPOINT_FILE_NAMES = frozenset({
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json", "README.md",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
    "definition_embeddings.json",
})
# Weight shards and chat templates. Code files count only when the config names them (see `checkpoint_code_files`).
CHECKPOINT_FILE_PATTERN = re.compile(r"^(model-\d+-of-\d+\.safetensors|chat_template\.\w+)$")
WEIGHT_FILE_NAMES = ("model.safetensors", "model.safetensors.index.json")
# What `train` writes next to the checkpoint: the validation scores (not uploaded: the card has them).
TRAIN_REPORT = "validation_results.json"
# Files that tokenizers are saved as; a folder with none of them has no tokenizer.
TOKENIZER_FILE_NAMES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model",
    "spiece.model", "sentencepiece.bpe.model",
)
# The running command's --trust-remote-code (see `trusting_remote_code`); None: the command has no such option.
_REMOTE_CODE_TRUSTED: ContextVar[bool | None] = ContextVar("hf_entity_remote_code_trusted", default=None)


# ------------------------------------------------------------------------------------------ checkpoint files
def checkpoint_entries(folder: Path) -> list[Path]:
    """The files of `folder` that a checkpoint consists of (see `CHECKPOINT_FILE_NAMES`), in name order; never a
    dot-file or a folder, and only the code files that its config.json loads. Links to files are listed too (as
    the entries they are): `push` refuses them."""
    code_files = checkpoint_code_files(folder)
    return sorted(
        entry for entry in folder.iterdir()
        if entry.is_file() and not entry.name.startswith(".")
        and (entry.name in CHECKPOINT_FILE_NAMES or entry.name in code_files
             or CHECKPOINT_FILE_PATTERN.match(entry.name))
    )


def checkpoint_code_files(folder: Path) -> set[str]:
    """Names of the code files that loading the checkpoint with `trust_remote_code=True` imports: the modules its
    config.json names (`auto_map`, `custom_pipelines`) and, recursively, what they import relatively."""
    config = stored_config(str(folder)) if folder.is_dir() else {}
    references = list((config.get("auto_map") or {}).values())
    references += [
        entry.get("impl") for entry in (config.get("custom_pipelines") or {}).values() if isinstance(entry, dict)
    ]
    names = set()
    for reference in references:
        for class_reference in reference if isinstance(reference, (list, tuple)) else [reference]:
            if not isinstance(class_reference, str) or "." not in class_reference:
                continue
            module_file = folder / f"{class_reference.split('--')[-1].rsplit('.', 1)[0]}.py"
            if module_file.is_file() and module_file.parent == folder:
                # Imported here only: a folder refused before any model loads must not wait for transformers.
                from transformers.dynamic_module_utils import get_relative_import_files

                names |= {module_file.name, *(Path(path).name for path in get_relative_import_files(module_file))}
    return names


def user_entries(folder: Path) -> list[Path]:
    """The entries of `folder` that are not part of a checkpoint (nor `train`'s report): the user's own."""
    ours = set(checkpoint_entries(folder))
    return sorted(
        entry for entry in folder.iterdir()
        if entry not in ours and not (entry.name == TRAIN_REPORT and entry.is_file())
    )


def is_package_checkpoint(folder: Path) -> bool:
    """A folder `train` may replace as a whole: a model of this package saved with its weights, and nothing else
    than checkpoint files and train's report (whatever else is there is the user's)."""
    if not any((folder / name).is_file() for name in WEIGHT_FILE_NAMES) or user_entries(folder):
        return False
    return is_package_model_type(stored_config(str(folder)).get("model_type"))


def is_package_model_type(model_type: Any) -> bool:
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return False
    # Every config class this package registers lives in it; the same test covers models added later.
    return CONFIG_MAPPING[model_type].__module__.split(".")[0] == __name__.split(".")[0]


def checkpoint_inputs(checkpoint: str) -> list[Path]:
    """The files of a local checkpoint folder that a command reads (an --output must not replace them)."""
    folder = Path(checkpoint)
    return checkpoint_entries(folder) if folder.is_dir() else []


# ------------------------------------------------------------------------------------------------ config.json
def stored_config(checkpoint: str) -> dict[str, Any]:
    """The config.json of a checkpoint folder or Hub repository as stored, without building the config ({} when
    there is none to read: the model load that follows reports why)."""
    folder = Path(checkpoint)
    if folder.is_dir():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return config if isinstance(config, dict) else {}
    if folder.exists() or not HUB_ID.match(checkpoint):
        return {}
    from transformers import PreTrainedConfig

    try:
        config, _ = PreTrainedConfig.get_config_dict(checkpoint)
    except Exception:  # offline, missing, private: only telling the kind of model failed; the load says why
        return {}
    return config if isinstance(config, dict) else {}


def architecture_of(checkpoint: str, accepts: Any) -> str | None:
    """The first class named in a checkpoint's config.json `architectures` for which `accepts(name)` is true."""
    architectures = stored_config(checkpoint).get("architectures") or []
    return next((name for name in architectures if isinstance(name, str) and accepts(name)), None)


def checkpoint_kind(checkpoint: str) -> str:
    """What a checkpoint holds, for a message: "a PetraForCoreference model"."""
    config = stored_config(checkpoint)
    architectures = [name for name in config.get("architectures") or [] if isinstance(name, str)]
    if architectures:
        return f"a {', '.join(architectures)} model"
    if isinstance(config.get("model_type"), str):
        return f"a {config['model_type']!r} model"
    return "not a question-answering model"


def require_checkpoint(checkpoint: str) -> None:
    if not Path(checkpoint).exists() and not HUB_ID.match(checkpoint):
        raise CliError(f"checkpoint folder {checkpoint} does not exist; pass the --output-dir of `train`.")


# ----------------------------------------------------------------------------------------- code in checkpoints
def add_trust_remote_code_option(parser: argparse.ArgumentParser) -> None:
    """--trust-remote-code, of the commands that load checkpoints a user names (`evaluate`, `predict`)."""
    parser.add_argument(
        "--trust-remote-code", action="store_true",
        help="run the code that a checkpoint ships (the modules its config.json's auto_map names) where its model type "
        "is one that neither transformers nor this package knows; read that code first. Without it such a checkpoint "
        "is refused. Checkpoints of this package's models always load with the installed package's code",
    )


@contextlib.contextmanager
def trusting_remote_code(trusted: bool) -> Iterator[None]:
    """Within the block, the loaders of this module run code that a checkpoint ships where it needs it, if `trusted`
    (the command's --trust-remote-code), and refuse such a checkpoint otherwise. Outside any block (commands without
    the option) they refuse it too, without suggesting the option."""
    token = _REMOTE_CODE_TRUSTED.set(trusted)
    try:
        yield
    finally:
        _REMOTE_CODE_TRUSTED.reset(token)


def trust_remote_code_for(location: str) -> bool:
    """The explicit `trust_remote_code=` to load `location` with: without one, transformers asks on stdin "Do you wish
    to run the custom code?" and imports the checkpoint's modules on "y".

    True only where the checkpoint needs code of its own (`required_remote_code`) and the command was given
    --trust-remote-code; such a checkpoint is refused in one line without it. False otherwise: a model type that
    transformers or this package knows loads with the installed code, whatever code the folder also holds.

    Raises:
        CliError: The checkpoint needs its own code and the command was not given --trust-remote-code.
    """
    requested = required_remote_code(location)
    if not requested:
        return False
    trusted = _REMOTE_CODE_TRUSTED.get()
    if trusted:
        return True
    model_type = stored_config(location).get("model_type")
    names = (
        f"names the model type {model_type!r}, which neither transformers nor this package knows,"
        if isinstance(model_type, str) else "names no model type"
    )
    advice = (
        "read that code, then pass --trust-remote-code to run it, or give a checkpoint of a known model type."
        if trusted is False else
        "this command runs no code that a checkpoint ships: give a checkpoint of a model type that this package or "
        "transformers knows."
    )
    raise CliError(
        f"{config_description(location)} {names} and asks to run code that comes with the checkpoint to load it "
        f"({', '.join(requested)}); {advice}"
    )


def required_remote_code(location: str) -> list[str]:
    """The classes that a checkpoint's config.json asks transformers to import from code that comes with it (its
    auto_map), where loading needs them: its model type is not one that transformers or this package registers.
    [] for any other checkpoint."""
    from transformers import CONFIG_MAPPING

    config = stored_config(location)
    auto_map = config.get("auto_map")
    model_type = config.get("model_type")
    if not isinstance(auto_map, dict) or (isinstance(model_type, str) and model_type in CONFIG_MAPPING):
        return []
    references = []
    for value in auto_map.values():
        items = value if isinstance(value, (list, tuple)) else [value]
        references += [item for item in items if isinstance(item, str)]
    return list(dict.fromkeys(references))


# ---------------------------------------------------------------------------------------------------- models
def load_model(
    model_class: Any, location: str, mismatch_advice: str | None = None, *, strict: bool = True, **overrides: Any
) -> Any:
    """`model_class.from_pretrained(location, **overrides)`, where what a damaged checkpoint raises becomes one line
    that names its weights (a zero-byte or truncated file, sizes in config.json that the weights do not have).

    Args:
        model_class: A model or Auto class.
        location: Checkpoint folder or Hub id.
        mismatch_advice: What to say when the stored weights do not fit the config (default: restore config.json).
        strict: Refuse weights that the model needs but the checkpoint lacks, or stored weights the model has no
            place for (a config.json that does not match them: the model would run with random layers). False
            where a checkpoint of another architecture is the starting point (a GPT-2 for GPT2E).
        **overrides: Config fields passed to `from_pretrained`.

    Raises:
        CliError: The checkpoint cannot be loaded (a folder without config.json, a damaged one), or needs code of
            its own that the command may not run (`trust_remote_code_for`).
    """
    from safetensors import SafetensorError

    from ..models._shared.checkpoints import CheckpointError, refuse_folder_without_config

    try:  # before transformers reads it: the Auto classes would say "Unrecognized model ... should have a model_type"
        refuse_folder_without_config(location, {})
    except CheckpointError as error:
        raise CliError(str(error)) from None
    trust_remote_code = trust_remote_code_for(location)
    try:
        with held_back_loading_output(quiet_progress=Path(location).is_dir()):
            model, loading_info = model_class.from_pretrained(
                location, output_loading_info=True, trust_remote_code=trust_remote_code, **overrides
            )
            if strict:  # inside the block: a refused load does not show transformers' load report either
                _check_loaded_weights(model, loading_info, location, mismatch_advice)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise CliError(load_failure(location, error, mismatch_advice)) from error
    return model


def _check_loaded_weights(model: Any, loading_info: dict[str, Any], location: str, advice: str | None) -> None:
    """Refuse missing, unexpected or resized weights (`loading_problem`, the package's one weight-fit check), in one
    line that ends with the caller's advice when it has one."""
    from ..models._shared.checkpoints import loading_problem

    problem = loading_problem(model, loading_info, location)
    if problem is not None:
        raise CliError(f"{problem} {advice}" if advice else problem)


def load_failure(location: str, error: BaseException, mismatch_advice: str | None) -> str:
    """The one-line message for a failed load. The library may wrap the original error (`CheckpointError`), so the
    whole chain of causes is read."""
    from safetensors import SafetensorError

    causes = [error]
    while causes[-1].__cause__ is not None and len(causes) < 10:
        causes.append(causes[-1].__cause__)
    weights = weights_description(location)
    damaged = next((cause for cause in causes if isinstance(cause, SafetensorError)), None)
    if damaged is not None:
        return (
            f"{weights} is damaged or incomplete (safetensors: {' '.join(str(damaged).split())}); save the model "
            "again, or copy or download the checkpoint again."
        )
    # transformers (and torch) report stored tensors whose sizes the config does not give as a RuntimeError.
    if any(isinstance(cause, RuntimeError) and "mismatch" in str(cause) for cause in causes):
        return mismatch_advice or (
            f"the weights in {weights} do not have the sizes that {config_description(location)} gives (was it "
            "edited, or copied from another model?); restore the config.json saved with these weights."
        )
    return f"cannot load the model of {location}: {one_line(error)}"


def weights_description(location: str) -> str:
    """The weight files of a checkpoint folder as a message names them (else the Hub id)."""
    folder = Path(location)
    if not folder.is_dir():
        return f"the weights of {location}"
    present = [str(folder / name) for name in WEIGHT_FILE_NAMES if (folder / name).is_file()]
    return " / ".join(present) or f"the weights in {folder}"


def config_description(location: str) -> str:
    return str(Path(location) / "config.json") if Path(location).is_dir() else f"the config.json of {location}"


@contextlib.contextmanager
def held_back_loading_output(quiet_progress: bool) -> Iterator[None]:
    """Hold back what transformers logs while a model loads, and pass it on only when the load succeeds.

    On weights that do not fit the config, transformers logs a many-line load report and then raises (or the CLI
    refuses the load): the CLI's one-line error replaces both. When the load succeeds (or HF_ENTITY_DEBUG is set)
    its warnings, e.g. newly initialised weights, still show.
    `quiet_progress` also hides the weight-loading progress bar (a local folder: nothing to download).
    """
    from logging.handlers import BufferingHandler

    from transformers.utils import logging as transformers_logging

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


# ------------------------------------------------------------------------------------------------ tokenizers
def load_tokenizer(location: str) -> Any:
    """`AutoTokenizer.from_pretrained(location)`, where a folder without tokenizer files, or without the file a fast
    tokenizer is built from, is refused in one line naming the files (transformers would suggest installing
    sentencepiece or tiktoken instead); code that comes with the folder runs only as `trust_remote_code_for` allows."""
    from transformers import AutoTokenizer

    folder = Path(location)
    if folder.is_dir():
        refuse_folder_without_tokenizer(folder)
    elif not folder.exists() and not HUB_ID.match(str(location)):
        raise CliError(f"{location} does not exist: give the folder that holds the tokenizer, or a Hub id.")
    trust_remote_code = trust_remote_code_for(location)
    try:
        return AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if not folder.is_dir() or "sentencepiece" not in str(error):
            raise
        present = [name for name in TOKENIZER_FILE_NAMES if (folder / name).is_file()]
        raise CliError(
            f"no tokenizer can be built from the tokenizer files in {folder} ({', '.join(present)}): "
            "tokenizer.json is missing; save the tokenizer again (tokenizer.save_pretrained(folder))."
        ) from error


def fast_tokenizer(location: str) -> Any:
    """The fast tokenizer of a folder or Hub id (character offsets need one); see `load_tokenizer`."""
    tokenizer = load_tokenizer(location)
    if not getattr(tokenizer, "is_fast", False):
        raise CliError(
            f"the tokenizer of {location} is not a fast tokenizer; character offsets need one (save a "
            "tokenizer.json next to the model, e.g. with AutoTokenizer.from_pretrained(..., use_fast=True))."
        )
    return tokenizer


def saved_tokenizer(location: str) -> Any | None:
    """The fast tokenizer saved with a checkpoint folder or Hub repository, or None when it has none."""
    if Path(location).is_dir():
        if any((Path(location) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            return fast_tokenizer(location)
        return None
    with contextlib.suppress(OSError, ValueError):  # a Hub repo without a tokenizer
        return fast_tokenizer(location)
    return None


def check_tokenizer_fits(tokenizer: Any, model: Any, where: str) -> None:
    """A checkpoint saved without tokenizer.json loads a few special tokens only: every word would read as [UNK]."""
    from ..tasks.coreference.pipeline import check_tokenizer_matches_model

    try:
        check_tokenizer_matches_model(tokenizer, model)
    except ValueError as error:
        raise CliError(f"the tokenizer of {where} does not fit its model: {' '.join(str(error).split())}") from error


def load_checkpoint(auto_class: Any, checkpoint: str) -> tuple[Any, Any]:
    """Model (through `auto_class`, e.g. AutoModelForQuestionAnswering) and fast tokenizer of a checkpoint, refused
    in one line when either is missing, damaged or does not match the other."""
    require_checkpoint(checkpoint)
    if Path(checkpoint).is_dir():
        refuse_folder_without_tokenizer(Path(checkpoint))  # the cheap check before the model loads
    model = load_model(auto_class, checkpoint)
    tokenizer = fast_tokenizer(checkpoint)
    check_tokenizer_fits(tokenizer, model, checkpoint)
    return model, tokenizer


def refuse_folder_without_tokenizer(folder: Path) -> None:
    """One line naming the files a tokenizer is saved as, where transformers would suggest installing sentencepiece
    or tiktoken."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILE_NAMES):
        raise CliError(
            f"no tokenizer files ({' / '.join(TOKENIZER_FILE_NAMES[:3])} / ...) in {folder}; save the tokenizer "
            "next to the model (tokenizer.save_pretrained(folder)), or give the folder that holds it."
        )
