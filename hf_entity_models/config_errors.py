"""One-line explanations of config errors: the package's diagnostics for its configs (a checkpoint does not carry
this file; without the package, huggingface_hub's and transformers' own errors show).

huggingface_hub's strict dataclasses check every field of a config as it is set and run transformers' class-level
checks (`validate_*`) after `__init__`; what they raise is neither a `TypeError` nor a `ValueError` and reads as a long
chain of validator frames. `CONFIG_ERROR_EXPLAINER`, which the package installs as
`CheckpointConfigMixin._error_explainer` when the shared checkpoint code is imported (see `_registration`), turns a
wrongly typed value into a `ConfigFieldTypeError` naming the field, the value, the expected type and the fix, a failed
class-level check into a one-line `ValueError`, and an invalid stored config.json into a `CheckpointError` that names
the file.
"""

import contextlib
import contextvars
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import PreTrainedConfig

from .models._shared.checkpoints import CheckpointError, field_default, config_description


class ConfigFieldTypeError(TypeError, ValueError):
    """A config field was given a value of the wrong type (1.5 cells, a threshold of "high"). A `TypeError`, and a
    `ValueError` too: such values come from files and command lines, whose callers catch `ValueError` for bad input."""


# Where the dict `from_dict` builds a config from was read (set by `from_pretrained`): transformers does not pass it
# on, and an error in a checkpoint's config.json should name the file.
_CONFIG_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("config_source", default=None)


class ConfigErrorExplainer:
    """The contexts `CheckpointConfigMixin` builds and reads configs in (see the module docstring)."""

    @contextlib.contextmanager
    def building(self, config_class: type, given: Mapping[str, Any]) -> Iterator[None]:
        """Turn the strict-dataclass errors raised inside the block into one line."""
        try:
            yield
        except StrictDataclassFieldValidationError as error:
            raise _wrong_type_error(config_class, error, given) from None
        except StrictDataclassClassValidationError as error:
            raise ValueError(f"{config_class.__name__}: {' '.join(str(error.__cause__ or error).split())}") from None

    @contextlib.contextmanager
    def reading_file(self, location: str) -> Iterator[None]:
        """`from_pretrained` of a config: what `from_dict` refuses inside the block names this file."""
        source = _CONFIG_SOURCE.set(location)
        try:
            yield
        finally:
            _CONFIG_SOURCE.reset(source)

    @contextlib.contextmanager
    def reading_dict(
        self, config_class: type, config_dict: dict[str, Any], overrides: Mapping[str, Any], kwargs: Mapping[str, Any]
    ) -> Iterator[None]:
        """`from_dict`: an error of the stored config (not of the caller's `overrides`) becomes a `CheckpointError`
        naming the file it was read from, when one is known."""
        try:
            yield
        except (TypeError, ValueError) as error:
            source = kwargs.get("name_or_path") or _CONFIG_SOURCE.get()  # the Auto classes pass name_or_path
            if not source:
                raise
            stored_problem = _stored_config_problem(config_class, config_dict, kwargs) if overrides else error
            if stored_problem is None:
                raise  # the stored config is fine: the caller's keyword arguments are wrong
            raise CheckpointError(
                f"{_config_file_description(source)} does not hold a valid {config_class.__name__}: "
                f"{' '.join(str(stored_problem).split())}"
            ) from stored_problem


CONFIG_ERROR_EXPLAINER = ConfigErrorExplainer()


def _stored_config_problem(config_class: type, config_dict: dict[str, Any], kwargs: Mapping[str, Any]) -> Exception | None:
    """What building the stored config alone raises, or None when it builds."""
    try:  # transformers' own from_dict: the stored values alone, no file named
        PreTrainedConfig.from_dict.__func__(config_class, dict(config_dict), **kwargs)
    except (TypeError, ValueError) as error:
        return error
    return None


def _config_file_description(location: str) -> str:
    return location if os.path.isfile(location) else config_description(location)


def _wrong_type_error(config_class: type, error: Exception, given: Mapping[str, Any]) -> ConfigFieldTypeError:
    """One line for huggingface_hub's StrictDataclassFieldValidationError: the field, the value, the expected type and
    the fix."""
    cause = " ".join(str(error.__cause__ or error).split())
    found = re.match(r"Validation error for field '([^']+)'", str(error))
    name = found.group(1) if found else None
    field = getattr(config_class, "__dataclass_fields__", {}).get(name)
    if field is None or name not in given:
        # A value set by the config's own code, not one it was given: huggingface_hub's message is all there is.
        return ConfigFieldTypeError(f"{config_class.__name__}: {cause}")
    value = given[name]
    expected = _type_description(field.type)
    default = field_default(config_class, name)
    fixes = [] if default is None else [f"Give {expected} (the default is {default!r})"]
    if isinstance(value, str) and any(kind in expected for kind in ("a number", "an integer", "True or False")):
        fixes.append("without quotes in JSON" if fixes else "Write it without quotes in JSON")
    fix = f" {', '.join(fixes)}." if fixes else ""
    return ConfigFieldTypeError(
        f"{config_class.__name__}.{name} must be {expected}, got {value!r} ({type(value).__name__}).{fix}"
    )


def _type_description(annotation: Any) -> str:
    """How a message names the type a field takes: `float | int` is "a number", `list[int] | tuple[int, ...]` "a list
    of integers", `int | None` "an integer or None"."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
    else:
        options = (annotation,)
    described = []
    for option in options:
        if option is type(None):
            continue
        if option in (int, float) and {int, float} <= set(options):
            description = "a number"
        elif typing.get_origin(option) in (list, tuple):
            item = (typing.get_args(option) or (Any,))[0]
            description = f"a list of {_PLURALS.get(item, 'values')}"
        else:
            known = _SINGULARS.get(option) or _SINGULARS.get(typing.get_origin(option))
            description = known or f"a {getattr(option, '__name__', option)}"
        if description not in described:
            described.append(description)
    if type(None) in options:
        described.append("None")
    return " or ".join(described) if len(described) < 3 else ", ".join(described[:-1]) + " or " + described[-1]


_SINGULARS = {int: "an integer", float: "a number", bool: "True or False", str: "a string", dict: "a dict"}
_PLURALS = {int: "integers", float: "numbers", bool: "booleans", str: "strings", dict: "dicts"}
