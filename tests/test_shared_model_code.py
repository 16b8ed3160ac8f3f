"""Model-agnostic code exists once (models/_shared/) and every saved checkpoint still carries all of its code.

Model folders import shared modules absolutely; saving copies those modules next to the weights and makes the
imports relative (hf_entity_models/hub/portable_code.py: package code, which no checkpoint carries). The portability
tests load saved checkpoints of every model in a process that refuses hf_entity_models; these tests keep the source
tree in the shape that makes that work.
"""

import ast
import hashlib
import sys
from pathlib import Path

import pytest
from conftest import saved_source, tiny_petra_config
from test_hub_portability import NO_PACKAGE_PRELUDE, run_python, subprocess_env

import hf_entity_models.models
from hf_entity_models import RefReaderConfig
from hf_entity_models.hub import portable_code

MODELS_DIR = Path(hf_entity_models.models.__file__).parent
SHARED_DIR = MODELS_DIR / "_shared"
SHARED_MODULES = {path.stem for path in SHARED_DIR.glob("*.py")} - {"__init__"}
# What a checkpoint's environment provides besides the standard library.
# safetensors and huggingface_hub are hard dependencies of transformers: a checkpoint environment has them.
CHECKPOINT_PACKAGES = {"torch", "transformers", "huggingface_hub", "safetensors"}


def model_folders() -> list[Path]:
    return sorted(path for path in MODELS_DIR.iterdir() if path.is_dir() and not path.name.startswith(("_", ".")))


def source_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("*.py") if path.name != "__init__.py")


def disallowed_imports(path: Path, shared_import_allowed: bool) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            bad += [alias.name for alias in node.names if not _in_checkpoint_environment(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            module = node.module or ""
            is_shared = module.rpartition(".")[0] == portable_code.SHARED_PACKAGE
            if not _in_checkpoint_environment(module) and not (shared_import_allowed and is_shared):
                bad.append(module)
            elif is_shared and module.rpartition(".")[2] not in SHARED_MODULES:
                bad.append(module)
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module else [alias.name for alias in node.names]
            siblings = {other.stem for other in path.parent.glob("*.py")}
            bad += ["." * node.level + name for name in names if node.level != 1 or name not in siblings]
    return bad


def _in_checkpoint_environment(module: str) -> bool:
    top_level = module.split(".")[0]
    return top_level in CHECKPOINT_PACKAGES or top_level in sys.stdlib_module_names


@pytest.mark.parametrize("path", [p for folder in model_folders() for p in source_files(folder)], ids=str)
def test_a_model_file_imports_only_the_checkpoint_environment_its_folder_and_shared_modules(path):
    bad = disallowed_imports(path, shared_import_allowed=True)
    assert not bad, (
        f"{path.relative_to(MODELS_DIR)} imports {bad}. A model file may import torch, transformers, huggingface_hub, "
        f"the standard library, files of its own folder (relatively) and {portable_code.SHARED_PACKAGE}.<module> "
        "(absolutely, `from ... import ...`): saving copies exactly those next to the weights."
    )


@pytest.mark.parametrize("path", source_files(SHARED_DIR), ids=lambda path: path.name)
def test_a_shared_module_imports_only_the_checkpoint_environment_and_other_shared_modules(path):
    bad = disallowed_imports(path, shared_import_allowed=False)
    assert not bad, (
        f"_shared/{path.name} imports {bad}: it runs inside checkpoints, where only torch, transformers (with "
        "huggingface_hub and safetensors), the standard library and the other shared modules (imported relatively) "
        "exist."
    )


@pytest.mark.parametrize("path", source_files(SHARED_DIR), ids=lambda path: path.name)
def test_a_shared_module_names_no_model(path):
    text = path.read_text().lower()
    named = [folder.name for folder in model_folders() if folder.name in text]
    assert not named, f"_shared/{path.name} is model-agnostic but names {named}; that belongs in the model's folder"


def test_no_source_file_of_a_model_exists_twice():
    by_content: dict[str, list[str]] = {}
    for path in MODELS_DIR.rglob("*.py"):
        if path.name != "__init__.py":
            by_content.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), []).append(str(path.relative_to(MODELS_DIR)))
    copies = [paths for paths in by_content.values() if len(paths) > 1]
    assert not copies, f"identical files in several places: {copies}; keep one in models/_shared/ and import it"


def test_make_folder_self_contained_rewrites_only_shared_imports_and_copies_what_they_need(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    (package / "sibling.py").write_text("VALUE = 1\n")
    modeling = package / "modeling_toy.py"
    modeling.write_text(
        "import torch\n"
        "from .sibling import VALUE\n"
        f"from {portable_code.SHARED_PACKAGE}.encoders import load_pretrained_encoder\n"
        "def f():\n"
        f"    from {portable_code.SHARED_PACKAGE}.coreference_links import LOG_EPSILON\n"
        "    return LOG_EPSILON\n"
        f"TEXT = 'from {portable_code.SHARED_PACKAGE}.encoders import nothing'\n"
    )
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    for path in package.glob("*.py"):  # what transformers' custom_object_save copies
        (checkpoint / path.name).write_text(path.read_text())
    (checkpoint / "user_script.py").write_text(f"from {portable_code.SHARED_PACKAGE}.encoders import x\n")

    copied = portable_code.make_folder_self_contained(checkpoint, modeling)

    # encoders imports checkpoints relatively: it comes along.
    assert set(copied) == {"encoders.py", "coreference_links.py", "checkpoints.py"}
    for name in copied:
        assert (checkpoint / name).read_bytes() == (SHARED_DIR / name).read_bytes()
    assert (checkpoint / "modeling_toy.py").read_text() == (
        "import torch\n"
        "from .sibling import VALUE\n"
        "from .encoders import load_pretrained_encoder\n"
        "def f():\n"
        "    from .coreference_links import LOG_EPSILON\n"
        "    return LOG_EPSILON\n"
        f"TEXT = 'from {portable_code.SHARED_PACKAGE}.encoders import nothing'\n"
    )
    assert (checkpoint / "sibling.py").read_text() == "VALUE = 1\n"
    # Not part of the model's code: left alone.
    assert (checkpoint / "user_script.py").read_text() == f"from {portable_code.SHARED_PACKAGE}.encoders import x\n"
    assert modeling.read_text().count(portable_code.SHARED_PACKAGE) == 3, "the package's own file is untouched"


def test_an_import_form_the_rewrite_does_not_know_fails_the_save(tmp_path):
    modeling = tmp_path / "package" / "modeling_toy.py"
    modeling.parent.mkdir()
    modeling.write_text(f"from {portable_code.SHARED_PACKAGE}.encoders \\\n    import load_pretrained_encoder\n")
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / modeling.name).write_text(modeling.read_text())
    with pytest.raises(ValueError, match=r"modeling_toy.py, line 1: the saved code still imports hf_entity_models"):
        portable_code.make_folder_self_contained(checkpoint, modeling)


def test_no_model_file_is_named_like_a_shared_module():
    # A checkpoint is one flat folder: the shared module would replace the model's file of the same name.
    clashes = [str(path.relative_to(MODELS_DIR)) for folder in model_folders() for path in source_files(folder)
               if path.stem in SHARED_MODULES]
    assert not clashes, f"{clashes} are named like modules of models/_shared/: rename them"


CONFIG_REMOTE_LOAD = NO_PACKAGE_PRELUDE + r'''
import json
from transformers import AutoConfig
result = {}
for folder in sys.argv[1:]:
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    result[folder] = [type(config).__name__, config.hidden_size, type(config).__module__.startswith("transformers_modules")]
print("RESULT " + json.dumps(result))
'''


def test_a_config_saved_on_its_own_loads_without_the_package(tmp_path):
    folders = {}
    for name, config in [("petra", tiny_petra_config(hidden_size=12)), ("refreader", RefReaderConfig(hidden_size=14))]:
        folders[name] = tmp_path / name
        config.save_pretrained(folders[name])
        for saved in folders[name].glob("*.py"):
            source = next((p for p in [MODELS_DIR / name / saved.name, SHARED_DIR / saved.name] if p.is_file()))
            assert saved.read_text() == saved_source(source), saved.name
    loaded = run_python(CONFIG_REMOTE_LOAD, *map(str, folders.values()), env=subprocess_env(tmp_path / "hf"), cwd=tmp_path)
    assert loaded == {
        str(folders["petra"]): ["PetraConfig", 12, True],
        str(folders["refreader"]): ["RefReaderConfig", 14, True],
    }
