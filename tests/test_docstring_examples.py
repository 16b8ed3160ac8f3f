"""The runnable examples in the package's docstrings give the output they show.

Examples that need real checkpoints or data are marked `# doctest: +SKIP` in the docstrings; the others run here.
"""

import doctest
import importlib
import pkgutil

import pytest

import hf_entity_models


def package_modules() -> list[str]:
    return sorted(module.name for module in pkgutil.walk_packages(hf_entity_models.__path__, prefix="hf_entity_models."))


@pytest.mark.parametrize("module_name", package_modules())
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {module_name} failed (see output above)"


def test_runnable_examples_exist():
    attempted = sum(
        doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False).attempted
        for name in package_modules()
    )
    assert attempted >= 20
