"""The README's Python snippets run as they are, in order, against real GAP rows and the loopback Hub."""

import os
import re
import subprocess
import sys

from conftest import REPO_ROOT, SHARED_DATA
from hub_server import LoopbackHub


def readme_python_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)


def test_readme_user_stories_run(tmp_path, shared_data):
    blocks = readme_python_blocks()
    assert len(blocks) >= 4, "README lost its user stories"
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # README paths are relative: ../shared/data
    script = workdir / "readme_stories.py"
    script.write_text("\n\n".join(blocks), encoding="utf-8")
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
        pushed = hub.files("your-name/petra-gap")
        pushed_reader = hub.files("your-name/forcereader-squad")
        pushed_lm = hub.files("your-name/gpt2e-litbank")
        pushed_definitions = hub.files("your-name/minilm-mrpc-definitions")
    assert "validation F1" in process.stdout
    assert "GAP validation F1" in process.stdout and "chosen on held-out development rows" in process.stdout
    assert (workdir / "memory.png").stat().st_size > 1000
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json"} <= set(pushed)
    assert pushed["model.safetensors"] == (workdir / "petra-gap" / "model.safetensors").read_bytes()
    assert "SQuAD validation EM" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_forcereader.py",
            "pipeline.py", "answer_spans.py"} <= set(pushed_reader)
    assert sorted(path.name for path in (workdir / "attention").iterdir()) == [
        "figure_1.png", "figure_3.png", "figure_4.png", "figure_5.png"]
    assert "'perplexity_without_entities'" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_gpt2e.py",
            "configuration_gpt2e.py"} <= set(pushed_lm)
    assert pushed_lm["model.safetensors"] == (workdir / "gpt2e-litbank" / "model.safetensors").read_bytes()
    assert "token embeddings replaced" in process.stdout
    assert "\nBertModel\n" in process.stdout  # the replaced checkpoint is the original architecture
    assert "MRPC dev accuracy" in process.stdout
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "definition_embeddings.json"} <= set(
        pushed_definitions)
    assert not any(name.endswith(".py") for name in pushed_definitions), "a plain checkpoint carries no code"
    assert pushed_definitions["model.safetensors"] == (
        workdir / "minilm-mrpc-definitions" / "model.safetensors").read_bytes()
