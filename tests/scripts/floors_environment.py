"""Build (or reuse) .venv-floors: the package with every requirement of setup.py at its declared floor.

tests/test_dependency_floors.py runs the smoke subset of the suite there. `make test` builds it before pytest starts,
as it builds .venv (installing is set-up, not testing); the test builds it itself when it is missing or stale (e.g.
when pytest is run directly). It is rebuilt whenever the floors or TORCH_SPEC change (a stamp of both is kept).

Usage: python tests/scripts/floors_environment.py
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_constraints import REPO_ROOT, declared_requirements, floor

FLOORS_VENV = REPO_ROOT / ".venv-floors"
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")


def normalized(name: str) -> str:
    return name.lower().replace("_", "-")


def declared_floors() -> dict[str, str]:
    """{distribution: lowest declared version} of setup.py's requirements, torch excepted: only the CPU build on
    local disk can be installed here (TORCH_SPEC, as in the Makefile), so its floor is transformers' own."""
    floors = {normalized(name): version for name, version in map(floor, declared_requirements())}
    floors.pop("torch")
    return floors


def ensure_floors_environment(floors: dict[str, str]) -> Path:
    """The python of a virtualenv holding the package with every requirement at its floor; rebuilt when the floors
    change."""
    constraints = "".join(f"{name}=={version}\n" for name, version in sorted(floors.items()))
    stamp = hashlib.sha256(f"{TORCH_SPEC}\n{constraints}\nbyte-compiled".encode()).hexdigest()
    python = FLOORS_VENV / "bin" / "python"
    stamp_file = FLOORS_VENV / "floors.sha256"
    if stamp_file.is_file() and stamp_file.read_text() == stamp and python.is_file():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(FLOORS_VENV)], check=True)
    constraints_file = FLOORS_VENV / "constraints.txt"
    constraints_file.write_text(constraints)
    for arguments in ([TORCH_SPEC], ["-c", str(constraints_file), "-e", f"{REPO_ROOT}[dev,viz,examples]"]):
        # Byte-compiled at install (pip's default): where PYTHONDONTWRITEBYTECODE is set, nothing imported later would
        # be, and every fresh interpreter of the smoke run would compile torch and transformers from source (4-5x
        # slower to start).
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *arguments],
            check=False, capture_output=True, text=True, timeout=1200,
        )
        if install.returncode != 0:
            raise RuntimeError(f"installing {arguments} into {FLOORS_VENV} failed:\n{install.stderr[-4000:]}")
    stamp_file.write_text(stamp)
    return python


if __name__ == "__main__":
    print(f"dependency floors environment: {ensure_floors_environment(declared_floors())}")
