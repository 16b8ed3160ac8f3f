"""Print pip constraints that pin every requirement of setup.py to the lowest version it declares.

`pip install -c <this output> -e .` then builds the environment a user with the oldest allowed versions has: the
floors test runs the package there (tests/test_dependency_floors.py).

Usage: python tests/scripts/floor_constraints.py [setup.py] > floors.txt
"""

import ast
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def declared_requirements(setup_file: Path = REPO_ROOT / "setup.py") -> list[str]:
    """The `install_requires` strings of setup.py, read without running it."""
    for node in ast.walk(ast.parse(setup_file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [ast.literal_eval(element) for element in node.value.elts]
    raise ValueError(f"{setup_file} has no install_requires list")


def floor(requirement: str) -> tuple[str, str]:
    """(distribution, lowest version) of a requirement such as "transformers>=5.4,<6"."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", requirement)
    name, specifiers = match.group(1), match.group(2)
    lowest = re.search(r">=\s*([0-9][^,\s;]*)", specifiers)
    if lowest is None:
        raise ValueError(f"requirement {requirement!r} declares no floor (>=): every dependency needs one")
    return name, lowest.group(1)


if __name__ == "__main__":
    setup_file = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "setup.py"
    for name, version in map(floor, declared_requirements(setup_file)):
        print(f"{name}=={version}")
