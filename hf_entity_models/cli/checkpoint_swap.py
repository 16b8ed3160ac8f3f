"""Saving a checkpoint into its output folder as one swap: the new checkpoint is written next to the folder, then
takes the old one's place in a few renames during which Ctrl-C and SIGTERM are held back, so the folder holds the old
checkpoint or the new one, never a mix; a rollback that cannot finish, and what an interrupted earlier swap left
behind, are put back or named (`replacing_checkpoint`, `recover_interrupted_swaps`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .checkpoints import TRAIN_REPORT, checkpoint_entries, user_entries
from .common import CliError, hidden_sibling, listing, one_line


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
        replaced = replaceable_entries(destination, also_replaced) if destination.is_dir() else []
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
            new_in = sorted(entry.name for entry in replaceable_entries(destination, also_replaced))
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


def replaceable_entries(folder: Path, also_replaced: Callable[[Path], Sequence[Path]] | None = None) -> list[Path]:
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
