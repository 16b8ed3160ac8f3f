"""The `hf-entity` package itself: its modules import no torch / transformers / datasets / numpy when the parser is
built and every `--help` is answered (so `--help` answers at once), none of them is large, they import each other
without a cycle, `--version` prints the installed version, and each command's `--threads` says what it is for."""

import ast
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

CLI_FOLDER = REPO_ROOT / "hf_entity_models" / "cli"
HEAVY = ("torch", "transformers", "datasets", "numpy", "huggingface_hub", "accelerate", "safetensors")
# Every --help the CLI answers.
HELP_COMMANDS = [
    [], ["train"], ["train", "petra"], ["train", "refreader"], ["train", "forcereader"], ["train", "gpt2e"],
    ["evaluate"], ["predict"], ["push"], ["definitions"], ["export"],
]
# Runs in a fresh interpreter where `hf_entity_models` is an empty package object with the real folder as its
# path: what the CLI package itself imports, whatever the package's __init__ does.
WITHOUT_PACKAGE_INIT = """
import importlib.util, sys, types
spec = importlib.util.find_spec("hf_entity_models")
package = types.ModuleType("hf_entity_models")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["hf_entity_models"] = package
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    return result


def cli_modules() -> list[Path]:
    return sorted(CLI_FOLDER.glob("*.py"))


def test_building_the_parser_and_every_help_imports_no_heavy_library():
    code = WITHOUT_PACKAGE_INIT + f"""
import contextlib, io, json
from hf_entity_models.cli import build_parser
parser = build_parser()
for argv in {HELP_COMMANDS!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        parser.parse_args([*argv, "--help"])
print(json.dumps(sorted(name for name in {HEAVY!r} if name in sys.modules)))
"""
    assert json.loads(run_python(code).stdout) == []


def test_the_console_script_answers_help_without_importing_torch():
    script = Path(sys.executable).parent / "hf-entity"
    result = subprocess.run([sys.executable, "-X", "importtime", str(script), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "train" in result.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_version_is_the_installed_distributions(capsys):
    status, out, _ = run_cli(capsys, "--version")
    assert status == 0 and out.strip() == f"hf-entity {importlib.metadata.version('hf-entity-models')}"


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "hf_entity_models.cli", "--version"], capture_output=True,
                            text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0 and result.stdout.startswith("hf-entity ")


def test_no_module_is_large():
    sizes = {path.name: len(path.read_text().splitlines()) for path in cli_modules()}
    assert {name: size for name, size in sizes.items() if size > 600} == {}, sizes


def test_the_modules_import_each_other_without_a_cycle():
    graph = {path.stem: _relative_imports(path) for path in cli_modules()}
    visiting, done = set(), set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in visiting, f"import cycle: {' -> '.join([*path, module])}"
        if module in done:
            return
        visiting.add(module)
        for imported in graph.get(module, ()):
            visit(imported, [*path, module])
        visiting.discard(module)
        done.add(module)

    for module in graph:
        visit(module, [])


def test_each_module_imports_on_its_own():
    names = [f"hf_entity_models.cli.{path.stem}" for path in cli_modules() if path.stem != "__main__"]
    code = WITHOUT_PACKAGE_INIT + f"""
import importlib
for name in {names!r}:
    for loaded in [key for key in sys.modules if key.startswith("hf_entity_models.cli")]:
        del sys.modules[loaded]
    importlib.import_module(name)
print("ok")
"""
    assert run_python(code).stdout.strip() == "ok"


def _relative_imports(path: Path) -> set[str]:
    """The sibling modules of the CLI package that a module imports, wherever in the module (a cycle through a
    function-level import is still a cycle of the design)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                imported.add(node.module.split(".")[0])
            else:
                imported.update(alias.name for alias in node.names)
    return imported - {path.stem}


def test_forcereader_presets_are_the_models():
    """The parser names the presets without importing the model; they must stay the model's."""
    from hf_entity_models.cli.question_answering import FORCEREADER_PRESETS
    from hf_entity_models.models.forcereader.configuration_forcereader import PRESETS

    assert FORCEREADER_PRESETS == tuple(PRESETS)


@pytest.mark.parametrize(
    "command, work",
    [
        (["train", "petra"], "training and encoding the features"),
        (["train", "forcereader"], "training and validation"),
        (["train", "gpt2e"], "training and the held-out perplexities"),
        (["evaluate"], "scoring"),
        (["predict"], "the model's forward passes and generation"),
        (["definitions"], "training the reader"),
    ],
)
def test_threads_says_what_it_is_for(capsys, command, work):
    status, out, _ = run_cli(capsys, *command, "--help")
    assert status == 0 and f"torch intra-op CPU threads used for {work}" in " ".join(out.split())
