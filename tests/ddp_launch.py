"""Launching the data-parallel training scripts and reading what their processes wrote (a plain module: import it).

`models_run` starts ``tests/scripts/ddp_train_models.py`` ONCE per pytest process with
``accelerate launch --multi_gpu --num_processes 2`` (two real CPU processes, gloo): it trains every model, each into
its own folder, and every `tests/test_multiprocess_<model>.py` reads its model's folder. One launch instead of one
per model saves the start-up of two Python processes per model. The checks every model shares are here too, and the
module fixtures `run` (the model's folder) and `reports` (its ranks' reports) for a test module that names its model
in ``MODEL`` and imports them.

Example:
    >>> folder = models_run(tmp_path_factory) / "gpt2e"  # doctest: +SKIP
    >>> reports = rank_reports(folder)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = REPO_ROOT / "tests" / "scripts"
NUM_PROCESSES = 2
LAUNCH_TIMEOUT_SECONDS = 600
MODELS = ("petra", "refreader", "forcereader", "gpt2e", "definition_emb")
# The real data the scripts train on (../shared/data next to the checkout).
DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DATA_FOLDERS = tuple(DATA_DIR / name for name in ("gap", "glue", "squad", "tokenizers/gpt2"))

_runs: dict[str, Path | str] = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(script: Path, *arguments: str, port: int) -> list[str]:
    """``accelerate launch`` of `script` on `NUM_PROCESSES` CPU processes."""
    # `--multi_gpu` is what starts N processes on a CPU-only machine (Accelerate picks gloo);
    # `--cpu --num_processes 2` and a bare `--num_processes 2` both silently run ONE process.
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(NUM_PROCESSES), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
        str(script), *arguments,
    ]  # fmt: skip


def launch_environment() -> dict[str, str]:
    """This environment, offline, one thread per process, no GPU and no distributed set-up of an outer launcher."""
    # The processes run on the CPU (gloo) on every machine: with a visible GPU, `--multi_gpu` would put both ranks on
    # it (NCCL refuses two ranks on one GPU) and the builders' use_cpu=not torch.cuda.is_available() would be False.
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="")  # fmt: skip
    # A distributed setup inherited from an outer launcher would make the children join the wrong group.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU"):
        env.pop(name, None)
    return env


def launch(script: Path, *arguments: str) -> None:
    """Run `script` data-parallel; fail the test with the processes' output if it does not exit cleanly."""
    completed = subprocess.run(
        launch_command(script, *arguments, port=free_port()), cwd=REPO_ROOT, env=launch_environment(),
        capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_SECONDS,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(
            f"accelerate launch failed ({completed.returncode}):\n"
            f"{completed.stdout[-3000:]}\n{completed.stderr[-8000:]}"
        )


def models_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the one launch that trained every model (launched on first use, then reused)."""
    if "models" not in _runs:
        missing = [str(folder) for folder in DATA_FOLDERS if not folder.is_dir()]
        if missing:
            pytest.fail(f"The data folders {missing} are missing; clone the project next to ../shared.")
        output_dir = tmp_path_factory.mktemp("ddp")
        try:
            launch(SCRIPTS_DIR / "ddp_train_models.py", str(output_dir), *MODELS)
            _runs["models"] = output_dir
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            _runs["models"] = str(error)  # the other modules fail with the same message, without launching again
    run = _runs["models"]
    if isinstance(run, str):
        pytest.fail(run)
    return run


def rank_reports(folder: Path) -> dict[int, dict]:
    """rank -> the JSON report that rank wrote into `folder`."""
    reports = [json.loads(path.read_text()) for path in sorted(folder.glob("rank*.json"))]
    return {report["rank"]: report for report in reports}


@pytest.fixture(scope="module")
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the test module's model (its ``MODEL``) in the one launch."""
    return models_run(tmp_path_factory) / request.module.MODEL


@pytest.fixture(scope="module")
def reports(run: Path) -> dict[int, dict]:
    """rank -> the report of the test module's model (trained in one part, written straight into its folder)."""
    return rank_reports(run)


def assert_two_connected_processes(reports: dict[int, dict]) -> None:
    """Two real processes, ranks 0 and 1 of one gloo group, as the Trainer, the launcher and torch see it."""
    assert sorted(reports) == [0, 1], f"expected reports from ranks 0 and 1, got {sorted(reports)}"
    for rank, report in reports.items():
        assert report["world_size"] == NUM_PROCESSES
        assert report["distributed_world_size"] == NUM_PROCESSES
        assert report["env_rank"] == str(rank) and report["env_world_size"] == str(NUM_PROCESSES)
        assert report["backend"] == "gloo"
        assert report["distributed_type"] == "DistributedType.MULTI_CPU"
    assert reports[0]["pid"] != reports[1]["pid"]


def assert_gradients_were_averaged(folder: Path, reports: dict[int, dict], unused: tuple[str, ...] = ()) -> None:
    """Both processes started from one model and ended bit-identical, and training changed every weight but those
    whose names contain one of `unused` (weights the loss never reaches: no gradient, no update)."""
    assert reports[0]["initial_weights_sha256"] == reports[1]["initial_weights_sha256"]
    assert reports[0]["final_weights_sha256"] == reports[1]["final_weights_sha256"]
    rank0, rank1 = load_file(folder / "rank0.safetensors"), load_file(folder / "rank1.safetensors")
    initial = load_file(folder / "initial.safetensors")
    assert rank0.keys() == rank1.keys() == initial.keys() and rank0
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between the ranks: gradients were not synced"
    unchanged = [name for name in rank0 if torch.equal(rank0[name], initial[name])]
    expected = [name for name in rank0 if any(part in name for part in unused)]
    assert unchanged == expected, f"weights that training left unchanged: {unchanged}; expected {expected}"


def assert_only_the_main_process_saved(folder: Path, reports: dict[int, dict], saves_on_rank_0: int = 1) -> None:
    """Every process called the saving code; only rank 0 wrote the model, and its saved weights are the trained ones."""
    assert [reports[rank]["saves"] for rank in (0, 1)] == [saves_on_rank_0, 0]
    saved = load_file(folder / "model" / "model.safetensors")
    for name, tensor in load_file(folder / "rank0.safetensors").items():
        if name in saved:  # a tied weight is saved once, under its other name
            assert torch.equal(saved[name], tensor), name
