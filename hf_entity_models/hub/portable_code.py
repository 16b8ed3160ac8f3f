"""Self-contained checkpoint folders from model code that imports shared modules.

In the package, code that several models share lives once, in `hf_entity_models/models/_shared/`, and a model folder
imports it absolutely (`from hf_entity_models.models._shared.entity_hub import EntityHubMixin`). A checkpoint must run
where the package is not installed (`trust_remote_code=True` loads only the files stored next to the weights), so
saving a model makes its folder self-contained, the way transformers flattens modular sources into standalone
modeling files: every shared module the saved code imports is copied next to it, and the import is rewritten to the
relative form (`from .entity_hub import EntityHubMixin`) that transformers' remote-code loader resolves.

Package code, run by the package's save (`hub.checkpoint_writer`), never saved into a checkpoint: there, the shared
modules are already plain neighbours imported relatively, and saving again copies them as transformers always does.
"""

import ast
import re
import shutil
from pathlib import Path

from transformers.dynamic_module_utils import get_relative_import_files

from ..models import _shared as shared_models

SHARED_PACKAGE = shared_models.__name__  # "hf_entity_models.models._shared"
SHARED_DIR = Path(shared_models.__file__).resolve().parent
_SHARED_IMPORT = re.compile(rf"^(?P<indent>[ \t]*)from[ \t]+{re.escape(SHARED_PACKAGE)}\.(?P<module>\w+)[ \t]+import\b", re.M)


def shared_imports(source: str) -> list[str]:
    """Names of the shared modules that a module's source imports absolutely, in order of first import.

    Example:

    ```python
    >>> shared_imports(f"import torch\\nfrom {SHARED_PACKAGE}.entity_hub import EntityHubMixin\\n")
    ['entity_hub']

    ```
    """
    return list(dict.fromkeys(match["module"] for match in _SHARED_IMPORT.finditer(source)))


def files_to_ship(module_file: str | Path) -> list[Path]:
    """Every source file a checkpoint needs to run `module_file`: the file, its relative imports and the shared
    modules it imports, followed recursively (shared modules may import one another relatively)."""
    needed: dict[str, Path] = {}
    pending = [Path(module_file)]
    while pending:
        path = pending.pop()
        if path.name in needed:
            if needed[path.name].resolve() != path.resolve():  # a checkpoint is one flat folder
                raise ValueError(f"{needed[path.name]} and {path} would be saved under the same name: rename one.")
            continue
        needed[path.name] = path
        pending += [Path(name) for name in get_relative_import_files(path)]
        pending += [SHARED_DIR / f"{module}.py" for module in shared_imports(path.read_text(encoding="utf-8"))]
    return list(needed.values())


def make_folder_self_contained(folder: str | Path, module_file: str | Path) -> list[str]:
    """Copy into `folder` the shared modules that the saved code of `module_file` imports, and make those imports
    relative.

    Call it after transformers has saved the code of a model (or config) defined in `module_file` into the folder.
    Only the saved copies of that code are edited; the package's own files and other files are never touched.

    Returns:
        Names of the shared module files copied into the folder (replacing files of the same name, as transformers
        does with the model's own code files).
    """
    folder = Path(folder)
    shared_files = []
    for code_file in files_to_ship(module_file):
        saved_file = folder / code_file.name
        if code_file.parent == SHARED_DIR:
            shared_files.append(code_file)
        elif saved_file.is_file():
            source = saved_file.read_text(encoding="utf-8")
            saved_file.write_text(_SHARED_IMPORT.sub(r"\g<indent>from .\g<module> import", source), encoding="utf-8")
            _refuse_package_imports(saved_file)
    for shared_file in shared_files:
        shutil.copyfile(shared_file, folder / shared_file.name)
    return [shared_file.name for shared_file in shared_files]


def _refuse_package_imports(saved_file: Path) -> None:
    """Fail the save rather than write a checkpoint that imports the package it must run without (an import form
    the rewrite does not know, e.g. one continued with a backslash)."""
    package = SHARED_PACKAGE.split(".")[0]
    for node in ast.walk(ast.parse(saved_file.read_text(encoding="utf-8"))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        if any(name.split(".")[0] == package for name in names):
            raise ValueError(
                f"{saved_file.name}, line {node.lineno}: the saved code still imports {package}, which a checkpoint "
                f"cannot: import shared code on one line as `from {SHARED_PACKAGE}.<module> import ...`."
            )
