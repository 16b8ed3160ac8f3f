"""The checkpoint swap of `train` (`replacing_checkpoint`) and of `definitions --overwrite` survives Ctrl-C at any point
(issue 5): its renames hold SIGINT back until they are done, so the output folder holds one complete checkpoint, the
old one or the new one, never a mix and never none; a rollback after a failed rename is not cut short by a second
Ctrl-C; and what a failed rollback or a hard kill leaves next to the folder is named, and put back by the next save.

Every rename of the swap, and of its rollback, is tried in turn (`Renames`): a real SIGINT (`signal.raise_signal`, as
a Ctrl-C delivers it) just before or just after it, a rename that fails (EIO), a KeyboardInterrupt raised in place of
it (as a harness without signals simulates one), or a hard kill (`os._exit` in a forked process). Checkpoints are
a few small files: the renames are what is under test.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import hf_entity_models.cli.embeddings as cli_embeddings
import hf_entity_models.cli.checkpoint_swap as checkpoint_swap
from hf_entity_models.cli.common import CliError

OLD = {
    "config.json": '{"model_type": "petra", "run": "old"}', "model.safetensors": "old weights",
    "README.md": "# old card", "tokenizer.json": '{"run": "old"}', "vocab.txt": "old vocabulary",
    "validation_results.json": '{"f1": 0.5}',
}
NEW = {
    "config.json": '{"model_type": "petra", "run": "new"}', "model.safetensors": "new weights",
    "README.md": "# new card", "tokenizer.json": '{"run": "new"}', "added_tokens.json": "{}",
    "validation_results.json": '{"f1": 0.7}',
}
OLD_READER = {
    "definition-reader/config.json": '{"model_type": "definition-emb", "run": "old"}',
    "definition-reader/model.safetensors": "old reader",
}
NEW_READER = {
    "definition-reader/config.json": '{"model_type": "definition-emb", "run": "new"}',
    "definition-reader/model.safetensors": "new reader", "definition_embeddings.json": '{"replaced_token_ids": []}',
}
USERS = {"notes.txt": "what I tried", "results/table.csv": "f1\n0.5\n"}
THIRD = {**NEW, "model.safetensors": "third weights"}


@dataclasses.dataclass(frozen=True)
class Layout:
    """An output folder before the save: the checkpoint in it (None: no folder yet), the user's own files next to
    it, and whether `definitions` saves there (its reader folder is then part of the checkpoint)."""

    name: str
    old: dict[str, str] | None
    users: dict[str, str]
    definitions: bool

    @property
    def new(self) -> dict[str, str]:
        return {**NEW, **(NEW_READER if self.definitions else {})}

    def before(self) -> dict[str, str] | None:
        return None if self.old is None else {**self.old, **self.users}

    def after(self, checkpoint: dict[str, str] | None = None) -> dict[str, str]:
        return {**(checkpoint or self.new), **self.users}

    def also_replaced(self) -> Callable[[Path], list[Path]] | None:
        return cli_embeddings._earlier_reader if self.definitions else None


LAYOUTS = [
    Layout("new-folder", None, {}, False),
    Layout("checkpoint-folder", OLD, {}, False),  # replaced as a whole (`_move_into_place`)
    Layout("users-folder", OLD, USERS, False),  # only its checkpoint files replaced (`_replace_checkpoint_files`)
    Layout("definitions-folder", {**OLD, **OLD_READER}, {}, True),
    Layout("definitions-users-folder", {**OLD, **OLD_READER}, USERS, True),
]
BY_NAME = pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)


class Renames:
    """Once started, stands in for os.replace and os.rename (Path.rename and Path.replace call them), counting the
    calls; `plan(call)` names what happens at each: "interrupt" (a real SIGINT just before the rename), "interrupt
    after", "fail" (EIO, nothing renamed), "raise" (KeyboardInterrupt in place of the rename), "kill", "kill after"
    (os._exit: a hard kill)."""

    def __init__(self, plan: Callable[[int], set[str]] = lambda call: set()) -> None:
        self.plan = plan
        self.calls = 0
        self.real: tuple[Callable, Callable] | None = None

    def start(self) -> None:
        self.real = (os.replace, os.rename)
        os.replace, os.rename = self._wrap(os.replace), self._wrap(os.rename)

    def stop(self) -> None:
        if self.real is not None:
            os.replace, os.rename = self.real
            self.real = None

    def _wrap(self, rename: Callable) -> Callable:
        def renamed(source, target, *args, **kwargs):
            self.calls += 1
            actions = self.plan(self.calls)
            if "interrupt" in actions:
                signal.raise_signal(signal.SIGINT)
            if "kill" in actions:
                os._exit(137)
            if "fail" in actions:
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(source))
            if "raise" in actions:
                raise KeyboardInterrupt
            rename(source, target, *args, **kwargs)
            if "interrupt after" in actions:
                signal.raise_signal(signal.SIGINT)
            if "kill after" in actions:
                os._exit(137)

        return renamed


def at(call: int, *actions: str) -> Callable[[int], set[str]]:
    return lambda number: set(actions) if number == call else set()


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def state(folder: Path) -> dict[str, str] | None:
    """The files under `folder` with their text; None when there is no folder."""
    if not folder.exists():
        return None
    return {str(path.relative_to(folder)): path.read_text() for path in folder.rglob("*") if path.is_file()}


def hidden(destination: Path) -> list[Path]:
    """Hidden entries next to `destination` and in it: staging or replaced folders."""
    inside = list(destination.iterdir()) if destination.is_dir() else []
    return sorted(path for path in [*destination.parent.iterdir(), *inside] if path.name.startswith("."))


def output_folder(root: Path, layout: Layout) -> Path:
    destination = root / "petra"
    root.mkdir(parents=True)
    if layout.old is not None:
        destination.mkdir()
        write_files(destination, layout.before())
    return destination


def save(layout: Layout, destination: Path, renames: Renames | None = None,
         files: dict[str, str] | None = None) -> BaseException | None:
    """Save the new checkpoint (or `files`) to `destination` as `train` or `definitions` does; what it raised."""
    replacing = (cli_embeddings._replacing_definitions_checkpoint if layout.definitions
                 else checkpoint_swap.replacing_checkpoint)
    try:
        with replacing(destination) as staging:
            write_files(staging, files or layout.new)
            if renames is not None:
                renames.start()  # from here on: the renames of the swap (and of its rollback)
    except BaseException as error:  # KeyboardInterrupt included: each test says what it expects
        return error
    finally:
        if renames is not None:
            renames.stop()
    return None


def count_renames(layout: Layout, root: Path, plan: Callable[[int], set[str]] = lambda call: set()) -> int:
    renames = Renames(plan)
    save(layout, output_folder(root, layout), renames)
    return renames.calls


@pytest.fixture(autouse=True)
def _signals_and_renames_put_back():
    # Python's own Ctrl-C handler for every test, whatever the suite was started with (a shell starts background jobs
    # with SIGINT ignored, e.g. `nohup make test &`), and the starting handler back afterwards.
    started_with = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    handler = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, started_with)
    assert handler is signal.default_int_handler, "the Ctrl-C handler was not put back"
    assert os.replace.__module__ != __name__ and os.rename.__module__ != __name__


# ------------------------------------------------------------------------------------------ the swap, interrupted
@BY_NAME
def test_ctrl_c_during_the_swap_comes_once_the_new_checkpoint_is_in_place(tmp_path, layout):
    """A Ctrl-C before or after any rename of the swap (or at every one) waits until the swap is done: the run stops,
    with the new checkpoint complete in place, the old one deleted and the user's files untouched."""
    swap = count_renames(layout, tmp_path / "count")
    plans = {f"Ctrl-C {when} rename {call} of {swap}": at(call, action)
             for call in range(1, swap + 1) for when, action in (("before", "interrupt"), ("after", "interrupt after"))}
    plans["Ctrl-C at every rename"] = lambda call: {"interrupt", "interrupt after"}
    for index, (label, plan) in enumerate(plans.items()):
        destination = output_folder(tmp_path / str(index), layout)
        renames = Renames(plan)
        outcome = save(layout, destination, renames)
        assert isinstance(outcome, KeyboardInterrupt), f"{layout.name}, {label}: {outcome!r}"
        assert state(destination) == layout.after(), f"{layout.name}, {label}"
        assert hidden(destination) == [], f"{layout.name}, {label}"
        assert renames.calls == swap, f"{layout.name}, {label}: every rename of the swap, none of a rollback"


@BY_NAME
def test_ctrl_c_during_the_rollback_of_a_failed_swap_leaves_the_old_checkpoint(tmp_path, layout):
    """A rename of the swap fails (EIO): the renames done so far are undone, and a Ctrl-C before or after any rename of
    that rollback (or at every rename) does not cut it short. The old checkpoint is back, byte for byte; the run stops
    on the disk error, which says what happened."""
    swap = count_renames(layout, tmp_path / "count")
    plans = {}
    for failed in range(1, swap + 1):
        end = count_renames(layout, tmp_path / f"count-{failed}", at(failed, "fail"))
        for call in range(failed + 1, end + 1):
            for when, action in (("before", "interrupt"), ("after", "interrupt after")):
                plans[f"rename {failed} fails, Ctrl-C {when} rename {call} of {end}"] = (
                    lambda number, failed=failed, call=call, action=action:
                    {"fail"} if number == failed else {action} if number == call else set()
                )
        plans[f"rename {failed} fails, Ctrl-C at every rename"] = (
            lambda number, failed=failed: {"interrupt", "interrupt after", *(["fail"] if number == failed else [])}
        )
    for index, (label, plan) in enumerate(plans.items()):
        destination = output_folder(tmp_path / str(index), layout)
        outcome = save(layout, destination, Renames(plan))
        assert isinstance(outcome, OSError) and outcome.errno == errno.EIO, f"{layout.name}, {label}: {outcome!r}"
        assert state(destination) == layout.before(), f"{layout.name}, {label}"
        assert hidden(destination) == [], f"{layout.name}, {label}"


@BY_NAME
def test_a_second_keyboard_interrupt_raised_by_a_rollback_rename_is_overcome(tmp_path, layout):
    """As a harness without signals simulates it: a rename of the swap raises KeyboardInterrupt, and so does any one
    rename of the rollback that follows. The rollback goes over what it left once more: the old checkpoint is back."""
    swap = count_renames(layout, tmp_path / "count")
    plans = {}
    for first in range(1, swap + 1):
        end = count_renames(layout, tmp_path / f"count-{first}", at(first, "raise"))
        plans[f"rename {first} raises"] = at(first, "raise")
        for second in range(first + 1, end + 1):
            plans[f"rename {first} raises, then rename {second} of {end}"] = (
                lambda number, first=first, second=second: {"raise"} if number in (first, second) else set()
            )
    for index, (label, plan) in enumerate(plans.items()):
        destination = output_folder(tmp_path / str(index), layout)
        outcome = save(layout, destination, Renames(plan))
        assert isinstance(outcome, KeyboardInterrupt), f"{layout.name}, {label}: {outcome!r}"
        assert state(destination) == layout.before(), f"{layout.name}, {label}"
        assert hidden(destination) == [], f"{layout.name}, {label}"


# -------------------------------------------------------------------------------- what is left behind is named
@BY_NAME
def test_a_rollback_that_fails_names_what_it_left_and_the_next_save_puts_it_back(tmp_path, layout, caplog):
    """From one rename of the swap on, every rename fails (the disk went read-only): the error names each hidden
    folder left next to the output folder and says what to do; the next save puts the old checkpoint back before it
    replaces it, and names what it keeps (the new checkpoint that was not moved into place)."""
    swap = count_renames(layout, tmp_path / "count")
    for failed in range(1, swap + 1):
        label = f"{layout.name}, renames {failed}.. of {swap} fail"
        destination = output_folder(tmp_path / str(failed), layout)
        read_only = Renames(lambda number, failed=failed: {"fail"} if number >= failed else set())
        outcome = save(layout, destination, read_only)
        left = hidden(destination)
        if left:
            assert isinstance(outcome, CliError), f"{label}: {outcome!r}"
            message = str(outcome)
            assert "\n" not in message and all(str(path) in message for path in left), f"{label}: {message}"
            assert f"could not be saved to {destination}" in message, f"{label}: {message}"
            assert f"move them back into {destination}" in message or f" to {destination} " in message, message
        else:
            assert isinstance(outcome, OSError) and outcome.errno == errno.EIO, f"{label}: {outcome!r}"
            assert state(destination) == layout.before(), label
            continue
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=checkpoint_swap.__name__):
            checkpoint_swap.recover_interrupted_swaps(destination, layout.also_replaced())
        assert state(destination) == layout.before(), label
        assert all(str(path) in caplog.text for path in hidden(destination)), f"{label}: {caplog.text}"
        # A save into the folder works as usual after that.
        assert save(layout, destination, files={**layout.new, **THIRD}) is None, label
        assert state(destination) == layout.after({**layout.new, **THIRD}), label


@pytest.mark.skipif(not hasattr(os, "fork"), reason="a hard kill is simulated in a forked process")
@BY_NAME
def test_after_a_hard_kill_at_any_rename_the_next_save_puts_back_or_names_the_leftovers(tmp_path, layout, caplog):
    """A process killed (SIGKILL, power loss) before or after any rename of the swap: the next save finds the folders
    it left; the output folder holds a complete checkpoint after it (the old one when the kill came before the last
    rename, else the new one), and each hidden folder still there is named in a warning."""
    swap = count_renames(layout, tmp_path / "count")
    points = [(call, action) for call in range(1, swap + 1) for action in ("kill", "kill after")]
    for index, (call, action) in enumerate(points):
        label = f"{layout.name}: {action} rename {call} of {swap}"
        destination = output_folder(tmp_path / str(index), layout)
        child = os.fork()
        if child == 0:  # the killed run
            try:
                save(layout, destination, Renames(at(call, action)))
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=checkpoint_swap.__name__):
            checkpoint_swap.recover_interrupted_swaps(destination, layout.also_replaced())
        committed = call == swap and action == "kill after"
        assert state(destination) == (layout.after() if committed else layout.before()), label
        assert all(str(path) in caplog.text for path in hidden(destination)), f"{label}: {caplog.text}"
        assert all(path.parent == destination.parent for path in hidden(destination)), label
        assert save(layout, destination, files={**layout.new, **THIRD}) is None, label
        assert state(destination) == layout.after({**layout.new, **THIRD}), label


def test_folders_of_a_run_still_going_on_are_left_alone(tmp_path, caplog):
    """A staging or replaced folder whose process is alive belongs to a swap in progress: not touched, not named."""
    destination = output_folder(tmp_path / "out", LAYOUTS[1])
    running = os.getppid()
    for purpose in ("saving", "replaced"):
        write_files(tmp_path / "out" / f".petra.{purpose}-{running}-0123abcd", {"config.json": "{}"})
    before = state(tmp_path)
    with caplog.at_level(logging.WARNING, logger=checkpoint_swap.__name__):
        checkpoint_swap.recover_interrupted_swaps(destination)
    assert state(tmp_path) == before and caplog.text == ""


def test_the_reader_folder_an_earlier_version_set_aside_is_named(tmp_path, caplog):
    """Before issue 5 `definitions` set the old reader aside in a `.NAME.replaced-reader-*` folder of its own."""
    layout = LAYOUTS[3]
    destination = output_folder(tmp_path / "out", layout)
    leftover = tmp_path / "out" / ".petra.replaced-reader-999999999-0123abcd"
    write_files(leftover, {"config.json": '{"model_type": "definition-emb"}'})
    with caplog.at_level(logging.WARNING, logger=checkpoint_swap.__name__):
        assert save(layout, destination) is None
    assert state(destination) == layout.after()
    assert str(leftover) in caplog.text and leftover.is_dir()


# ----------------------------------------------------------------------------------------- holding Ctrl-C back
def test_ctrl_c_inside_deferring_interrupts_arrives_when_the_block_is_done(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    done = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoint_swap.deferring_interrupts():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # pressed twice: one KeyboardInterrupt
            first.rename(second)
            done.append("renamed")
    assert done == ["renamed"] and second.is_dir() and not first.exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_is_held_back_too_and_reaches_the_handler_that_was_there():
    received = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
    try:
        with checkpoint_swap.deferring_interrupts():
            signal.raise_signal(signal.SIGTERM)
            assert received == []
        assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_error_of_the_block_wins_over_a_held_back_ctrl_c():
    """The error stops the run and says what happened (a rollback that could not finish names its folders there)."""
    with pytest.raises(OSError, match="disk"):
        with checkpoint_swap.deferring_interrupts():
            signal.raise_signal(signal.SIGINT)
            raise OSError("disk")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_deliver_ctrl_c_after_the_outer_one():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoint_swap.deferring_interrupts():
            with checkpoint_swap.deferring_interrupts():
                signal.raise_signal(signal.SIGINT)
            order.append("after the inner block")
    assert order == ["after the inner block"]


def test_off_the_main_thread_deferring_interrupts_changes_nothing():
    """Python runs signal handlers on the main thread only (and refuses to install them elsewhere)."""
    outcome = []

    def work():
        try:
            with checkpoint_swap.deferring_interrupts():
                outcome.append(signal.getsignal(signal.SIGINT))
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            outcome.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert outcome == [signal.default_int_handler]
