"""`hf_entity_models/models/` imports nothing from the rest of the package: a checkpoint folder ships only model code,
and the package extends that code from above (`_registration` installs the checkpoint writer and the config-error
explainer as the shared checkpoint code is imported), never the reverse.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "hf_entity_models" / "models"
MODELS_PACKAGE = ("hf_entity_models", "models")
PACKAGE = MODELS_PACKAGE[0]
# Functions that import the module named by their first argument.
_IMPORT_FUNCTIONS = {"import_module", "__import__"}
# What a relative import with more dots than the file has packages above it resolves to (Python refuses it).
_BEYOND_THE_TOP = ("<beyond the top-level package>",)


def _package_of(path: Path, root: Path) -> tuple[str, ...]:
    """The package a relative import in `path` starts from: its folder (a package's `__init__.py` included)."""
    return tuple(path.relative_to(root).parent.parts)


def _imported_modules(node: ast.AST, package: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The modules an import statement (or an `importlib.import_module("...")` call) imports, resolved to absolute
    names; `from . import name` counts as importing `package.name`, which may be a module."""
    if isinstance(node, ast.Import):
        return [tuple(alias.name.split(".")) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level == 0:
            return [tuple((node.module or "").split("."))]
        if node.level - 1 >= len(package):
            return [_BEYOND_THE_TOP]
        base = package[: len(package) - (node.level - 1)]
        if node.module:
            return [base + tuple(node.module.split("."))]
        return [base + (alias.name,) for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        # A relative name resolves against the call's `package` argument, which the source need not spell out.
        if name in _IMPORT_FUNCTIONS and isinstance(node.args[0].value, str) and not node.args[0].value.startswith("."):
            return [tuple(node.args[0].value.split("."))]
    return []


def imports_from_above(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line imports module` for every import in `path` (a file under `root`) that reaches the package outside
    `models/` (or past its top level), at module level or inside a function."""
    package = _package_of(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        for module in _imported_modules(node, package):
            outside_models = module[0] == PACKAGE and module[:2] != MODELS_PACKAGE
            if outside_models or module == _BEYOND_THE_TOP:
                found.append(f"{path.relative_to(root)}:{node.lineno} imports {'.'.join(module)}")
    return found


MODEL_FILES = sorted(MODELS_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda path: str(path.relative_to(MODELS_DIR)))
def test_a_models_module_imports_nothing_from_the_package_above(path):
    found = imports_from_above(path)
    assert not found, (
        f"{found}: code under hf_entity_models/models/ must not import the rest of the package (a checkpoint ships "
        "only model code). Let the package extend the models from above instead (see hf_entity_models/_registration.py)."
    )


@pytest.mark.parametrize(
    ("source", "found"),
    [
        # What models/_shared/__init__.py imported before the package installed its hooks from above.
        ("from ...config_errors import CONFIG_ERROR_EXPLAINER\n", ["hf_entity_models.config_errors"]),
        ("def f():\n    from ..._registration import ensure_registered\n", ["hf_entity_models._registration"]),
        ("from ... import hub\n", ["hf_entity_models.hub"]),
        ("import hf_entity_models\n", ["hf_entity_models"]),
        ("import hf_entity_models.hub.portable_code as code\n", ["hf_entity_models.hub.portable_code"]),
        ("from hf_entity_models.auto import AutoModelForCoreference\n", ["hf_entity_models.auto"]),
        ("import importlib\nimportlib.import_module('hf_entity_models.hub')\n", ["hf_entity_models.hub"]),
        ("from .... import x\n", ["<beyond the top-level package>"]),
        # Within models/: allowed.
        ("from .checkpoints import CheckpointMixin\nfrom .. import petra\n", []),
        ("from hf_entity_models.models._shared.encoders import FrozenEncoder\nimport torch\n", []),
    ],
)
def test_the_check_names_every_import_that_leaves_models(tmp_path, source, found):
    shared = tmp_path / "hf_entity_models" / "models" / "_shared"
    shared.mkdir(parents=True)
    (shared / "__init__.py").write_text(source, encoding="utf-8")
    reported = imports_from_above(shared / "__init__.py", root=tmp_path)
    assert [line.split(" imports ")[1] for line in reported] == found
    assert all(line.startswith(os.path.join("hf_entity_models", "models", "_shared", "__init__.py:")) for line in reported)


_EXTENDED_MODELS_SCRIPT = """
import importlib, json, os, sys
importlib.import_module(sys.argv[1])
loaded = sorted(name for name in ("hf_entity_models.config_errors", "hf_entity_models.hub") if name in sys.modules)
from hf_entity_models.models.petra import PetraConfig
try:
    PetraConfig(num_memory_cells="many")
    error = None
except TypeError as caught:
    error = str(caught)
PetraConfig(hidden_size=16).save_pretrained(sys.argv[2])
config = json.load(open(os.path.join(sys.argv[2], "config.json")))
files = sorted(name for name in os.listdir(sys.argv[2]) if name.endswith(".py"))
print(json.dumps({"loaded": loaded, "error": error, "auto_map": config.get("auto_map"), "files": files}))
"""


@pytest.mark.parametrize(
    ("first_import", "loaded"),
    [
        # Importing a model loads neither the Hub code nor the config diagnostics: they are imported on first use.
        ("hf_entity_models.models.petra", []),
        # Both import the shared checkpoint code themselves, so the hook runs while they are half imported.
        ("hf_entity_models.config_errors", ["hf_entity_models.config_errors"]),
        ("hf_entity_models.hub", ["hf_entity_models.hub"]),
    ],
)
def test_the_package_extends_its_models_whichever_module_is_imported_first(tmp_path, first_import, loaded):
    """One-line config errors and the package's saving (auto_map, the shared code copied), in a fresh interpreter."""
    process = subprocess.run(
        [sys.executable, "-c", _EXTENDED_MODELS_SCRIPT, first_import, str(tmp_path)], cwd=ROOT, capture_output=True,
        text=True, timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert process.returncode == 0, process.stderr[-4000:]
    result = json.loads(process.stdout.strip().splitlines()[-1])
    assert result["loaded"] == loaded
    assert result["error"].startswith("PetraConfig.num_memory_cells must be an integer, got 'many'"), result["error"]
    assert "\n" not in result["error"]
    assert result["auto_map"] == {"AutoConfig": "configuration_petra.PetraConfig"}
    assert {"configuration_petra.py", "checkpoints.py"} <= set(result["files"])
