"""The model-agnostic files that every model folder carries a copy of stay identical and self-contained.

A model folder is shipped to the Hub on its own and loaded with `trust_remote_code=True`, so code that several models
share (model cards and Hub upload, evaluation-result bookkeeping, span link probabilities, memory batching) is copied
into each folder instead of imported across folders, like transformers' "Copied from" convention. These tests keep
the copies from drifting apart and the files from importing anything a checkpoint folder does not have.
"""

import ast
import sys
from pathlib import Path

import pytest

import hf_entity_models.models

MODELS_DIR = Path(hf_entity_models.models.__file__).parent
# The copy that is edited; every other model folder holds the same bytes.
REFERENCE_DIR = MODELS_DIR / "petra"
GENERIC_FILES = ("entity_hub.py", "evaluation_results.py", "coreference_links.py")
# What a checkpoint's environment provides besides the standard library (see DESIGN.md, "Layout").
ALLOWED_PACKAGES = {"torch", "transformers", "huggingface_hub"}


def model_folders() -> list[Path]:
    return sorted(path for path in MODELS_DIR.iterdir() if path.is_dir() and not path.name.startswith(("_", ".")))


def copies() -> list[tuple[str, Path]]:
    return [(name, folder) for name in GENERIC_FILES for folder in model_folders() if (folder / name).is_file()]


def test_the_reference_folder_holds_every_generic_file():
    missing = [name for name in GENERIC_FILES if not (REFERENCE_DIR / name).is_file()]
    assert not missing, f"{REFERENCE_DIR} must hold the reference copies of {missing}"


@pytest.mark.parametrize(
    "name, folder", copies(), ids=[f"{folder.name}/{name}" for name, folder in copies()]
)
def test_every_copy_is_byte_identical_to_the_reference(name, folder):
    reference = REFERENCE_DIR / name
    assert (folder / name).read_bytes() == reference.read_bytes(), (
        f"models/{folder.name}/{name} differs from models/{REFERENCE_DIR.name}/{name}. The file is model-agnostic "
        f"and must be the same in every model folder: make the change in models/{REFERENCE_DIR.name}/{name}, then "
        f"copy it over the others, e.g. `cp {reference.relative_to(MODELS_DIR.parents[1])} "
        f"{(folder / name).relative_to(MODELS_DIR.parents[1])}`."
    )


@pytest.mark.parametrize("name", GENERIC_FILES)
def test_a_generic_file_imports_only_the_checkpoint_environment_and_the_other_generic_files(name):
    tree = ast.parse((REFERENCE_DIR / name).read_text(), filename=name)
    generic_modules = {Path(other).stem for other in GENERIC_FILES} - {Path(name).stem}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [alias.name for alias in node.names if not _is_available(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if not _is_available(node.module):
                bad.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            # `from .module import x` names the module; `from . import module` names it among the imported names.
            modules = [node.module] if node.module else [alias.name for alias in node.names]
            bad += ["." * node.level + module for module in modules if node.level != 1 or module not in generic_modules]
    assert not bad, (
        f"{name} is copied into every model folder and must import only {sorted(ALLOWED_PACKAGES)}, the standard "
        f"library and the other generic files {sorted(generic_modules)}; it imports {bad}. Model-specific code "
        "belongs in the model folder's own files (e.g. its card file), passed in through the model class."
    )


@pytest.mark.parametrize("name", GENERIC_FILES)
def test_a_generic_file_names_no_model(name):
    text = (REFERENCE_DIR / name).read_text().lower()
    named = [folder.name for folder in model_folders() if folder.name in text]
    assert not named, f"{name} is model-agnostic but names {named}; move that content into the model's own files."


def _is_available(module: str) -> bool:
    top_level = module.split(".")[0]
    return top_level in ALLOWED_PACKAGES or top_level in sys.stdlib_module_names
