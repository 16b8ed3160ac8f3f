"""``hf-entity push``: upload the files of a checkpoint folder to the Hugging Face Hub (``HF_ENDPOINT`` and
``HF_TOKEN`` are honoured): config, weights, code, card and tokenizer files only, never dot-files, subfolders,
training states or links.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .checkpoints import WEIGHT_FILE_NAMES, checkpoint_entries, stored_config
from .common import CliError, entry_names, hub_endpoint, is_connection_error, listing, one_line, positive_float

# Seconds a request may wait for the Hub (to connect, to send a piece, to receive one) before the upload gives up.
# huggingface_hub's client waits forever: an endpoint that takes the connection and never answers held `push`
# silent for minutes. A minute is far more than the Hub takes between two pieces of an answer.
DEFAULT_TIMEOUT = 60.0
# How many bytes of an answer that is not JSON a message shows (enough to tell an HTML page or a proxy's notice).
_ANSWER_SHOWN = 80


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``push``."""
    parser = commands.add_parser(
        "push",
        help="upload a checkpoint folder to the Hugging Face Hub",
        description="Create the model repository if needed and upload the files the checkpoint consists of "
        "(config, weights, code, card, tokenizer). The Hub address comes from HF_ENDPOINT and the token from "
        "--token, HF_TOKEN or the saved login.",
    )
    parser.add_argument("checkpoint", help="checkpoint folder to upload")
    parser.add_argument(
        "repo_id", metavar="REPO_ID", help="repository id, e.g. my-user/petra-gap or my-user/refreader-gap"
    )
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--commit-message", default="Upload model with hf-entity", help="commit message")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the saved login)")
    parser.add_argument(
        "--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help="give up when the Hub does not answer a request for this long: connecting, sending or receiving "
        f"(default: {DEFAULT_TIMEOUT:g})",
    )
    parser.set_defaults(handler=run_push, command_name="push")


def run_push(args: argparse.Namespace) -> int:
    """``hf-entity push``: create the repository (if missing) and upload the files of the checkpoint folder."""
    from huggingface_hub import CommitOperationAdd, HfApi

    check_repo_id(args.repo_id)  # before anything says where the files go
    folder = Path(args.checkpoint)
    check_is_saved_model(folder)
    # An allow-list, not the whole folder: a .env, keys, optimizer and trainer states must never reach the Hub.
    files = checkpoint_entries(folder)
    refuse_links(folder, files)
    left_out = entry_names([entry for entry in folder.iterdir() if entry not in files])
    if left_out:
        print(f"not uploaded (not part of a checkpoint): {', '.join(left_out)}", file=sys.stderr)
    endpoint = hub_endpoint()
    api = HfApi(endpoint=endpoint, token=args.token or os.environ.get("HF_TOKEN") or None)
    print(f"uploading {len(files)} files of {folder} to {endpoint}/{args.repo_id}", file=sys.stderr)
    step = f"creating the repository {args.repo_id}"
    try:
        with _requests_timeout(args.timeout), _responses_recorded() as answers:
            repo_url = api.create_repo(args.repo_id, private=args.private or None, exist_ok=True, repo_type="model")
            repo_id = getattr(repo_url, "repo_id", None) or args.repo_id
            step = f"uploading {len(files)} files to {repo_id}"
            operations = [CommitOperationAdd(path_in_repo=path.name, path_or_fileobj=str(path)) for path in files]
            commit = api.create_commit(
                repo_id=repo_id, operations=operations, commit_message=args.commit_message, repo_type="model"
            )
    except Exception as error:
        if _is_timeout(error):
            raise CliError(
                f"the Hub at {endpoint} did not answer within {args.timeout:g} s while {step}{_request_of(error)}; "
                "check the network and HF_ENDPOINT, or wait longer with --timeout SECONDS."
            ) from error
        if is_connection_error(error):
            raise CliError(
                f"cannot reach the Hub at {endpoint} ({one_line(error)}); check the network and HF_ENDPOINT."
            ) from error
        if isinstance(error, json.JSONDecodeError):  # huggingface_hub reads every answer of the Hub as JSON
            raise CliError(
                f"the endpoint {endpoint} is not a Hugging Face Hub: while {step}, it answered "
                f"{_answer_description(answers.last)}, not JSON; set HF_ENDPOINT to the Hub's address (unset: "
                "https://huggingface.co), or check the proxy between."
            ) from error
        raise
    print(f"uploaded {len(files)} files of {folder} to {repo_url} ({getattr(commit, 'commit_url', commit)})")
    return 0


def check_repo_id(repo_id: str) -> None:
    """Refuse a repository id the Hub would refuse (huggingface_hub's `validate_repo_id`), in one line.

    Example:
        >>> check_repo_id("my-user/petra-gap")
        >>> check_repo_id("my user/petra")
        Traceback (most recent call last):
            ...
        hf_entity_models.cli.common.CliError: REPO_ID 'my user/petra' is not a valid repository id: ...
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise CliError(
            f"REPO_ID {repo_id!r} is not a valid repository id: it is NAME or NAMESPACE/NAME, of ASCII letters, "
            "digits, '-', '_' and '.' (not first or last, never '--' or '..'), at most 96 characters each; e.g. "
            "my-user/petra-gap."
        ) from None


def check_is_saved_model(folder: Path) -> None:
    """Refuse a folder that is not a saved model: no config.json, a config.json without a model type that this
    package or transformers knows, or no weights (model.safetensors or its index)."""
    from transformers import CONFIG_MAPPING  # this package's model types are registered there too

    if not folder.is_dir():
        raise CliError(f"checkpoint folder {folder} does not exist; pass the --output-dir of `train`.")
    if not (folder / "config.json").is_file():
        raise CliError(f"{folder} has no config.json, so it is not a saved model; pass the --output-dir of `train`.")
    model_type = stored_config(str(folder)).get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        found = "names no model_type" if model_type is None else f"names the unknown model_type {model_type!r}"
        raise CliError(
            f"{folder / 'config.json'} {found}, so {folder} is not a saved model of this package or of transformers; "
            "pass a folder written by save_pretrained or `hf-entity train`."
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILE_NAMES):
        raise CliError(
            f"{folder} has no weights ({' or '.join(WEIGHT_FILE_NAMES)}), so it is not a saved model; pass a folder "
            "written by save_pretrained or `hf-entity train`."
        )


def refuse_links(folder: Path, files: list[Path]) -> None:
    """Refuse to upload a link, or a file whose real path lies outside the folder: it would publish whatever it
    points to (a key, another project's file)."""
    root = folder.resolve()
    links = [path for path in files if path.is_symlink() or not path.resolve().is_relative_to(root)]
    if links:
        targets = listing([f"{path.name} -> {path.resolve()}" for path in links], 3)
        raise CliError(
            f"{folder} holds checkpoint files that are symbolic links or lie outside the folder ({targets}); push "
            "uploads only the folder's own files: replace each link with a copy of the file it points to."
        )


@contextlib.contextmanager
def _requests_timeout(seconds: float) -> Iterator[None]:
    """Every request of huggingface_hub's shared HTTP client gives up after `seconds` without progress; its own
    setting comes back afterwards (the client is shared with whatever else runs in this process)."""
    from huggingface_hub import get_session

    session = get_session()
    previous = session.timeout
    session.timeout = seconds
    try:
        yield
    finally:
        session.timeout = previous


class _LastAnswer:
    """The last answer huggingface_hub's HTTP client received (`_responses_recorded`); None before the first."""

    last: Any = None

    def __call__(self, response: Any) -> None:
        self.last = response


@contextlib.contextmanager
def _responses_recorded() -> Iterator[_LastAnswer]:
    """Within the block, the last answer of huggingface_hub's shared HTTP client is kept: an answer that is not JSON
    reaches us as a bare JSONDecodeError ("Expecting value: line 1 column 1"), which names neither the request nor
    what came back. Its hooks as they were come back afterwards."""
    from huggingface_hub import get_session

    session = get_session()
    hooks = session.event_hooks
    previous = list(hooks.get("response", []))
    recorder = _LastAnswer()
    session.event_hooks = {**hooks, "response": [*previous, recorder]}
    try:
        yield recorder
    finally:
        session.event_hooks = {**session.event_hooks, "response": previous}


def _answer_description(response: Any) -> str:
    """'HTTP 200 (text/html: "<!DOCTYPE html>...") to POST URL' for a message, with what is known of the answer."""
    if response is None:
        return "something"
    content_type = response.headers.get("content-type") or "no content type"
    try:
        body = response.content
    except Exception:  # httpx's ResponseNotRead: the body was never read, so nothing of it can be shown
        body = None
    if body is None:
        shown = ""
    elif not body:
        shown = ", empty"
    else:
        text = " ".join(body[:_ANSWER_SHOWN].decode("utf-8", errors="replace").split())
        shown = f': "{text}{"..." if len(body) > _ANSWER_SHOWN else ""}"'
    try:
        request = f" to {response.request.method} {response.request.url}"
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when the response carries no request
        request = ""
    return f"HTTP {response.status_code} ({content_type}{shown}){request}"


def _is_timeout(error: BaseException) -> bool:
    """No answer in time: httpx's (or httpx2's) TimeoutException, or the OS's."""
    if isinstance(error, TimeoutError):
        return True
    return any(
        cls.__name__ == "TimeoutException" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(error).__mro__
    )


def _request_of(error: Any) -> str:
    """" (POST URL)", the request that was not answered, when the error knows it."""
    try:
        request = error.request  # httpx raises RuntimeError when the error carries no request
    except (AttributeError, RuntimeError):
        return ""
    return f" ({request.method} {request.url})"
