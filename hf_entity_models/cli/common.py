"""What every ``hf-entity`` command shares: one-line errors, argument types and options, and output files written
so that nothing of the user's is replaced silently or left half-written.

Like every module of the CLI package, this one imports no torch, transformers, datasets, huggingface_hub or numpy at
module level: ``hf-entity --help`` must answer at once. Commands import them when they run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROGRAM = "hf-entity"
DEBUG_VARIABLE = "HF_ENTITY_DEBUG"
# A Hub repository id ("user/name" or "name"): such a location need not exist on disk. huggingface_hub's rule
# (`validate_repo_id`), so that "./runs/model" or "runs/a/b" are paths that do not exist, never ids to look up: ASCII
# letters, digits, "-", "_" and "." (neither first nor last, never "--" or ".."), at most 96 a part, no ".git" end.
HUB_ID = re.compile(r"^(?!.*(?:--|\.\.))(?!.*\.git\Z)(?:\w(?:[\w.-]{0,94}\w)?/)?\w(?:[\w.-]{0,94}\w)?\Z", re.ASCII)


class CliError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that come from the input (files, spans, values, the Hub), not from a bug in this package."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    return (CliError, OSError, ValueError, ImportError, HfHubHTTPError, OfflineModeIsEnabled)


def one_line(error: BaseException) -> str:
    """The message of `error` on one line; other errors than `CliError` also name their type."""
    message = " ".join(str(error).split()) or type(error).__name__
    return message if isinstance(error, CliError) else f"{message} ({type(error).__name__})"


# ------------------------------------------------------------------------------------------ argument types
def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return number


def non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return number


def positive_float(value: str) -> float:
    number = float(value)
    if not number > 0 or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return number


def non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0 or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return number


def finite_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value}")
    return number


def json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error.msg}): {value}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"hidden_size\": 64}}', got {value}")
    return parsed


# ------------------------------------------------------------------------------------------------ options
def add_threads_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, work: str) -> None:
    """--threads: torch's intra-op CPU threads for `work` (what the command computes, e.g. "training")."""
    parser.add_argument(
        "--threads", type=positive_int, metavar="N",
        help=f"torch intra-op CPU threads used for {work} (torch.set_num_threads; default: torch's choice). Small "
        "models step through many tiny operations, so on a busy or small CPU a single thread is often fastest",
    )


def add_overwrite_option(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    parser.add_argument(
        "--overwrite", action="store_true",
        help=help_text or "replace output files that exist (without it they are refused)",
    )


def given_options(args: argparse.Namespace, options: dict[str, str]) -> list[str]:
    """The options among `options` (argparse destination -> option) that the command line gave."""
    flags = {"incremental", "sweep"}  # store_true: False is their default, not a choice
    return [
        option for name, option in options.items()
        if getattr(args, name, None) is not None and not (name in flags and getattr(args, name) is False)
    ]


def listing(names: Sequence[str], limit: int = 5) -> str:
    """`names` for a message: the first few, then how many more."""
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --------------------------------------------------------------------------------------------------- files
def json_safe(value: Any) -> Any:
    """NaN (an undefined bias) becomes null: strict JSON readers refuse NaN."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, payload: dict[str, Any]) -> None:
    write_text(path, json.dumps(payload, indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write through a new file next to `path`, renamed into place: an interrupted write leaves the old file (or
    none), never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = hidden_sibling(path, "writing")
    try:
        with partial.open("x", encoding="utf-8") as stream:  # "x": a new file, with the usual permissions
            stream.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def emit(text: str, output: str | None) -> None:
    """Print `text`, or write it to the --output file."""
    if output is None:
        print(text)
        return
    write_text(Path(output), text + "\n")


def hidden_sibling(path: Path, purpose: str) -> Path:
    """A new name next to `path`: the same folder is the same filesystem, where a rename is atomic."""
    return path.with_name(f".{path.name}.{purpose}-{os.getpid()}-{secrets.token_hex(4)}")


def is_nonempty_folder(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def entry_names(entries: Sequence[Path]) -> list[str]:
    """Sorted names of folder entries for a message, folders marked with a trailing slash."""
    return sorted(f"{entry.name}/" if entry.is_dir() and not entry.is_symlink() else entry.name for entry in entries)


def check_location(path: Path, option: str, *, folder: bool) -> None:
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


def check_output_file(output: str | None, option: str, overwrite: bool, inputs: Sequence[Path] = ()) -> None:
    """An output file is new, or --overwrite was given and it is not one of the command's own inputs."""
    if output is None:
        return
    path = Path(output)
    check_location(path, option, folder=False)
    if not path.exists():
        return
    if not overwrite:
        raise CliError(f"{option} {path} already exists; pass --overwrite to replace it, or choose another file.")
    for source in inputs:
        if source.exists() and os.path.samefile(path, source):
            raise CliError(f"{option} {path} is an input of this command; choose another file.")


def refuse_folder_holding_the_current_one(folder: Path, option: str) -> None:
    """Refuse an output folder that contains the current folder: a checkpoint is moved into place by renaming the
    folder, which would pull the ground from under the shell that started the command."""
    if Path.cwd().resolve().is_relative_to(folder.resolve()):
        raise CliError(
            f"{option} {folder} contains the current folder, which saving the checkpoint would replace; give "
            f"a folder of its own, e.g. {option} runs/my-model."
        )


def refuse_inputs_inside(folder: Path, option: str, inputs: Sequence[tuple[str, str | None]]) -> None:
    """Refuse an output folder that holds an input of the run (a data file, an encoder, a checkpoint to start
    from), even with --overwrite: writing a checkpoint there must never risk what the run reads.

    Args:
        folder: The output folder.
        option: Its option, for the message (e.g. "--output-dir").
        inputs: (option, location) of every input; None and locations that do not exist (Hub ids) are skipped.
    """
    roots = {Path(os.path.abspath(folder)), folder.resolve()}
    for input_option, location in inputs:
        if location is None or not Path(location).exists():
            continue
        # Both spellings: the path as given and with links resolved (a linked input may live elsewhere).
        paths = {Path(os.path.abspath(location)), Path(location).resolve()}
        if any(path.is_relative_to(root) for path in paths for root in roots):
            raise CliError(
                f"{option} {folder} contains {input_option} {location}, an input of this run; choose an output "
                "folder that holds none of the inputs (e.g. runs/my-model)."
            )


# ------------------------------------------------------------------------------------------------------ the Hub
def hub_endpoint() -> str:
    """The Hub address that requests go to: HF_ENDPOINT as set now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def is_connection_error(error: BaseException) -> bool:
    """A transport failure (no connection, no answer in time) of huggingface_hub's HTTP client (httpx or its fork
    httpx2), or of the OS."""
    if isinstance(error, ConnectionError):
        return True
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(error).__mro__
    )


def check_hub_reachable(location: str, what: str, instead: str | None = None) -> None:
    """Before `location` is loaded: when it is no local path but a Hub id (and huggingface_hub is not offline), say
    where it is looked up, and refuse in one line when that Hub cannot be reached and no copy of it is cached.

    Without this a model or tokenizer name sits silent for about a minute (huggingface_hub retries every file five
    times) before transformers' error. One request, with huggingface_hub's HF_HUB_ETAG_TIMEOUT, tells instead. When
    a copy is cached, the run goes on offline: it reads the cache at once, as with HF_HUB_OFFLINE=1.

    Args:
        location: What the command will load: a folder, or a Hub id such as ``bert-base-cased``.
        what: How the messages name it, e.g. ``"--encoder"`` or ``"the default tokenizer"``.
        instead: What to do instead of the look-up (default: give `what` a local folder).

    Example:
        >>> check_hub_reachable("bert-base-cased", "--encoder")  # doctest: +SKIP
        --encoder bert-base-cased: not a local folder, looking it up on the Hub at https://huggingface.co
    """
    if Path(location).exists() or not HUB_ID.match(location):
        return  # a local folder, or a path that does not exist: the load names it
    from huggingface_hub import constants, get_session

    if constants.HF_HUB_OFFLINE:  # huggingface_hub reads it at request time: the load goes to the cache only
        return
    endpoint = hub_endpoint()
    print(f"{what} {location}: not a local folder, looking it up on the Hub at {endpoint}", file=sys.stderr)
    try:
        get_session().head(f"{endpoint}/api/models/{location}", timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except Exception as error:  # any answer, even "not found", means the Hub is there: the load says the rest
        if not is_connection_error(error):
            raise
        if _cached_on_disk(location):
            print(f"the Hub at {endpoint} cannot be reached: reading {location} from the Hugging Face cache",
                  file=sys.stderr)
            constants.HF_HUB_OFFLINE = True  # what HF_HUB_OFFLINE=1 sets: no request waits for a Hub that is not there
            return
        raise CliError(
            f"{what} {location} is not a local folder, and the Hub at {endpoint} cannot be reached "
            f"({one_line(error)}); {instead or f'give {what} a local folder instead'}, or set HF_HUB_OFFLINE=1 to read "
            "a copy from the Hugging Face cache (or check the network and HF_ENDPOINT)."
        ) from error


def _cached_on_disk(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds a copy of the model or tokenizer repository `repo_id`."""
    from huggingface_hub import try_to_load_from_cache

    names = ("config.json", "tokenizer_config.json", "tokenizer.json")
    return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in names)
