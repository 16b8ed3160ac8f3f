"""The dependencies setup.py declares are the ones the package imports, and their declared floors really work.

1. Every third-party module the package imports belongs to a declared requirement, and every declared requirement is
   imported (nothing undeclared that breaks `import hf_entity_models`, nothing declared for no reason).
2. The declared floors work: a separate environment gets exactly the lowest version of every requirement
   (tests/scripts/floor_constraints.py reads them from setup.py) and the smoke subset of the suite runs there
   (tests/smoke_tests.py: every public entry point once; the whole suite again would double `make test`). A floor raised
   or lowered in setup.py is tested the next time the suite runs; code that needs a newer version than declared fails.
   `make test` builds that environment before pytest starts (tests/scripts/floors_environment.py), as it builds .venv.
   torch is the one exception: only the CPU build on local disk can be installed here (TORCH_SPEC, as in the
   Makefile), so its floor is transformers' own (transformers treats older torch as absent).
"""

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT, SMOKE_STRICT_VARIABLE
from smoke_tests import SMOKE_TESTS

sys.path.insert(0, str(REPO_ROOT / "tests" / "scripts"))
from floor_constraints import declared_requirements, floor  # noqa: E402
from floors_environment import declared_floors, ensure_floors_environment, normalized

PACKAGE_DIR = REPO_ROOT / "hf_entity_models"
# Optional imports, each behind an extra of setup.py and imported only where that feature is used.
OPTIONAL_IMPORTS = {"matplotlib": "viz", "spacy": "spacy", "onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx"}
# Declared but not imported by name: what the package uses imports it.
USED_THROUGH = {
    "accelerate": "transformers.Trainer, which imports accelerate (transformers' [torch] extra)",
    "jinja2": "huggingface_hub.ModelCard.from_template, which renders the model cards with it",
}


def third_party_imports() -> dict[str, list[str]]:
    """Top-level modules imported anywhere in the package that are neither standard library nor the package itself,
    each with the files that import it."""
    imports: dict[str, list[str]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top != "hf_entity_models":
                    imports.setdefault(top, []).append(str(path.relative_to(REPO_ROOT)))
    return imports


def test_every_imported_package_is_declared_and_every_declared_one_is_imported():
    declared = {normalized(floor(requirement)[0]) for requirement in declared_requirements()}
    distributions = importlib.metadata.packages_distributions()
    imported = {}
    for module, files in third_party_imports().items():
        if module in OPTIONAL_IMPORTS:
            continue
        assert module in distributions, f"{module} (imported by {files[0]}) is not installed from any distribution"
        for distribution in distributions[module]:
            imported[normalized(distribution)] = files
    undeclared = {name: files[:3] for name, files in imported.items() if name not in declared}
    assert not undeclared, f"imported but not in setup.py install_requires: {undeclared}"
    unused = declared - set(imported) - set(USED_THROUGH)
    assert not unused, f"declared in setup.py but never imported by the package: {sorted(unused)}"


def test_optional_imports_stay_behind_their_extra():
    # The one exemption: the spaCy component registers its factory with `@Language.factory` when its module is
    # imported, so it needs spacy at module level. Only spaCy imports that module (setup.py's `spacy_factories`
    # entry point); nothing in the package does (checked below), so `import hf_entity_models` never needs spacy.
    spacy_component = "hf_entity_models/spacy_component.py"
    exempt = {("spacy", spacy_component)}
    extras = declared_extras()
    for module, extra in OPTIONAL_IMPORTS.items():
        in_extra = {normalized(floor(requirement)[0]) for requirement in extras.get(extra, [])}
        assert normalized(module) in in_extra, f"setup.py must declare {module} in the [{extra}] extra"
        for file in third_party_imports().get(module, []):
            if (module, Path(file).as_posix()) in exempt:
                continue
            module_level = [node for node in ast.parse((REPO_ROOT / file).read_text()).body if imports_module(node, module)]
            assert not module_level, f"{file} imports {module} at module level: import it where the feature is used"

    def runs_at_import(tree: ast.AST):
        """The nodes of a module that run when it is imported: all but the bodies of functions."""
        for child in ast.iter_child_nodes(tree):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield child
                yield from runs_at_import(child)

    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        file = path.relative_to(REPO_ROOT).as_posix()
        if file == spacy_component:
            continue
        for node in runs_at_import(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(alias.name for alias in node.names)]
            else:
                continue
            assert not any("spacy_component" in name.split(".") for name in names), (
                f"{file} imports the spaCy component at module level (line {node.lineno}): only spaCy's entry point "
                "may load it, else `import hf_entity_models` needs spacy"
            )


def declared_extras() -> dict[str, list[str]]:
    """setup.py's `extras_require`, read without running it."""
    for node in ast.walk(ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no extras_require")


def imports_module(node: ast.stmt, module: str) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == module for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == module


def test_the_smoke_subset_passes_with_every_dependency_at_its_declared_floor(tmp_path):
    floors = declared_floors()
    python = ensure_floors_environment(floors)  # `make test` built it before pytest started
    installed = installed_versions(python, floors)
    assert installed == {name: normalize_version(version) for name, version in floors.items()}, (
        "the floors environment does not hold the declared floors"
    )
    # Only the files that hold the subset are collected (collecting all of tests/ there takes as long as several
    # smoke tests); `-m smoke` selects the subset in them, and a missing entry fails the run (SMOKE_STRICT_VARIABLE).
    smoke_files = list(dict.fromkeys(entry.split("::")[0] for entry in SMOKE_TESTS))
    result = subprocess.run(
        # Its own --basetemp: pytest keeps only the newest three base folders of a user, and this run must not
        # rotate away the folders of the run it is part of.
        [str(python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "smoke", *smoke_files,
         "--basetemp", str(tmp_path / "floors-basetemp")],
        cwd=REPO_ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", SMOKE_STRICT_VARIABLE: "1"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, (
        f"the smoke subset fails with the declared floors {floors}:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    )
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= len(SMOKE_TESTS), f"the smoke subset did not run:\n{result.stdout[-3000:]}"


def installed_versions(python: Path, names) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]: print(name, m.version(name))"
    )
    output = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, check=True).stdout
    return {name: normalize_version(version) for name, version in (line.split() for line in output.splitlines())}


def normalize_version(version: str) -> str:
    """"5.6" and "5.6.0" are the same release."""
    parts = version.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)
