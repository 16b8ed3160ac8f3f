"""The README's Python snippets run as they are, against real GAP rows and the loopback Hub.

The snippets form two stories that share nothing but the set-up lines at the top of the first snippet (imports, the
encoder, the GAP folder, the tokenizer): the PeTra story (train on GAP, load, pipeline, score, LitBank, ForceReader,
GPT2E with PeTra's clusters, publish) and the other models' story (Referential Reader, DefinitionEMB, the compiled
recurrence, honest GAP selection), about equally long. Each story runs its snippets in README order in one fresh
interpreter, so that the two pytest workers share the load; `story_snippets` fails when a snippet belongs to no story
or to two, so a snippet added to the README runs once it is given a story.
"""

import os
import re
import subprocess
import sys

from conftest import REPO_ROOT, SHARED_DATA
from hub_server import LoopbackHub

# Each snippet is recognised by a line of its own; a story runs its snippets in README order.
STORIES = {
    "petra": (
        'model.save_pretrained("petra-gap")',  # fine-tune with the stock Trainer
        'memory_only = AutoModel.from_pretrained("petra-gap")',  # load through the Auto classes
        'coref = pipeline("coreference", model="petra-gap")',  # ask the pipeline
        'gap_metric = evaluate.load(metric_path("gap"))',  # score with evaluate
        "litbank = train_document_coreference(",  # whole documents
        'nlp.add_pipe("entity_coref"',  # spaCy, resolved text (the document-mode checkpoint of the snippet before)
        'reader.push_to_hub("your-name/forcereader-squad")',  # ForceReader (here: the two stories take equal time)
        'lm.push_to_hub("your-name/gpt2e-litbank")',  # GPT2E, with PeTra's clusters (`coref`)
        'model.push_to_hub("your-name/petra-gap")',  # publish
    ),
    "other_models": (
        'language_model.save_pretrained("refreader-lm")',  # the Referential Reader
        'replaced.push_to_hub("your-name/minilm-mrpc-definitions")',  # DefinitionEMB
        'memory_implementation="compiled"',  # the recurrence on a GPU
        "hold_out_gap_rows(",  # honest GAP selection
    ),
}
# The first snippet's lines before this one set up what the later snippets use (encoder, gap, tokenizer, imports);
# the story that does not run the first snippet starts with them.
FIRST_SNIPPET_WORK = "model = PetraForCoreference.from_encoder("


def readme_python_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)


def story_snippets(story: str) -> list[str]:
    """The snippets `story` runs, in README order, after the first snippet's set-up lines when it does not run it."""
    blocks = readme_python_blocks()
    assert len(blocks) >= 4, "README lost its user stories"
    owners = {}
    for index, block in enumerate(blocks):
        found = [(name, marker) for name, markers in STORIES.items() for marker in markers if marker in block]
        assert len(found) == 1, (
            f"README snippet {index + 1} belongs to {len(found)} stories of tests/test_readme.py {found}; give it "
            f"exactly one:\n{block}"
        )
        owners[index] = found[0]
    used = {marker for _, marker in owners.values()}
    unused = [marker for markers in STORIES.values() for marker in markers if marker not in used]
    assert not unused, f"no README snippet holds {unused}: update STORIES in tests/test_readme.py"
    snippets = [block for index, block in enumerate(blocks) if owners[index][0] == story]
    if owners[0][0] != story:
        lines = blocks[0].splitlines(keepends=True)
        start = [number for number, line in enumerate(lines) if line.startswith(FIRST_SNIPPET_WORK)]
        assert start, f"the first README snippet no longer has a line starting {FIRST_SNIPPET_WORK!r}"
        snippets.insert(0, "".join(lines[: start[0]]))
    return snippets


def run_story(story: str, tmp_path, repos: list[str]):
    """Run the story's snippets in one fresh interpreter in tmp_path/work (README paths are relative:
    ../shared/data); return the process and the files pushed to each of `repos`."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    script = workdir / f"readme_{story}.py"
    script.write_text("\n\n".join(story_snippets(story)), encoding="utf-8")
    with LoopbackHub() as hub:
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.endpoint,
            "HF_TOKEN": "loopback-token",
            "HF_HUB_OFFLINE": "0",
            "HF_HOME": str(tmp_path / "hf_home"),
            "MPLBACKEND": "Agg",
            # Small recurrent models are all per-step overhead: one thread is fastest, and it keeps a busy machine usable.
            "OMP_NUM_THREADS": "1",
        }
        process = subprocess.run(
            [sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
        )
        assert process.returncode == 0, process.stderr[-4000:]
        pushed = {repo: hub.files(repo) for repo in repos}
    return workdir, process, pushed


def test_every_snippet_belongs_to_one_story():
    ran = [snippet for story in STORIES for snippet in story_snippets(story)]
    blocks = readme_python_blocks()
    assert all(block in ran for block in blocks)
    assert len(ran) == len(blocks) + 1  # and the set-up lines of the first snippet, once


def test_readme_petra_story_runs(tmp_path, shared_data):
    repos = ["your-name/petra-gap", "your-name/gpt2e-litbank", "your-name/forcereader-squad"]
    workdir, process, pushed = run_story("petra", tmp_path, repos)
    pushed_petra, pushed_lm, pushed_reader = (pushed[repo] for repo in repos)
    assert "validation F1" in process.stdout
    assert (workdir / "memory.png").stat().st_size > 1000
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json"} <= set(pushed_petra)
    assert pushed_petra["model.safetensors"] == (workdir / "petra-gap" / "model.safetensors").read_bytes()
    assert "'perplexity_without_entities'" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_gpt2e.py",
            "configuration_gpt2e.py"} <= set(pushed_lm)
    assert pushed_lm["model.safetensors"] == (workdir / "gpt2e-litbank" / "model.safetensors").read_bytes()
    assert any(line.startswith("Emma met ") for line in process.stdout.splitlines())  # the resolved text
    assert "SQuAD validation EM" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_forcereader.py",
            "pipeline.py", "answer_spans.py"} <= set(pushed_reader)
    assert sorted(path.name for path in (workdir / "attention").iterdir()) == [
        "figure_1.png", "figure_3.png", "figure_4.png", "figure_5.png"]


def test_readme_other_models_story_runs(tmp_path, shared_data):
    workdir, process, pushed = run_story("other_models", tmp_path, ["your-name/minilm-mrpc-definitions"])
    pushed_definitions = pushed["your-name/minilm-mrpc-definitions"]
    assert "validation F1" in process.stdout  # the Referential Reader's
    assert "GAP validation F1" in process.stdout and "chosen on held-out development rows" in process.stdout
    assert "token embeddings replaced" in process.stdout
    assert "\nBertModel\n" in process.stdout  # the replaced checkpoint is the original architecture
    assert "MRPC dev accuracy" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "definition_embeddings.json"} <= set(
        pushed_definitions)
    assert not any(name.endswith(".py") for name in pushed_definitions), "a plain checkpoint carries no code"
    assert pushed_definitions["model.safetensors"] == (
        workdir / "minilm-mrpc-definitions" / "model.safetensors").read_bytes()
