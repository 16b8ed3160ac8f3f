"""`import hf_entity_models` is a lazy module (PEP 562): it loads neither torch nor transformers, and still every flow
that needs the package registered with transformers works right after it, in a fresh interpreter each."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_petra_config

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, *args: str) -> dict:
    process = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, stdin=subprocess.DEVNULL,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def petra_folder(tmp_path_factory):
    from hf_entity_models import PetraForCoreference

    folder = tmp_path_factory.mktemp("petra")
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    return folder


def test_importing_the_package_loads_neither_torch_nor_transformers():
    result = _run(
        "import json, sys, hf_entity_models\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'transformers': 'transformers' in sys.modules, "
        "'names': sorted(set(hf_entity_models.__all__) - set(dir(hf_entity_models)))}))"
    )
    assert result == {"torch": False, "transformers": False, "names": []}


def test_cli_help_through_python_dash_m_does_not_import_torch():
    process = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hf_entity_models.cli", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert "usage:" in process.stdout
    imported = {line.split("|")[-1].strip() for line in process.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "transformers" not in imported


def test_auto_classes_know_the_models_right_after_the_import(petra_folder):
    result = _run(
        "import json, sys, hf_entity_models\n"
        "from transformers import AutoConfig, AutoModel\n"
        "config = AutoConfig.from_pretrained(sys.argv[1])\n"
        "model = AutoModel.from_pretrained(sys.argv[1])\n"
        "print(json.dumps([type(config).__module__, type(model).__name__]))",
        str(petra_folder),
    )
    # The package's class (not the code stored in the folder, which needs trust_remote_code).
    assert result == ["hf_entity_models.models.petra.configuration_petra", "PetraModel"]


def test_transformers_imported_first_then_the_package():
    result = _run(
        "import json\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "from transformers.pipelines import PIPELINE_REGISTRY\n"
        "import hf_entity_models\n"
        "print(json.dumps([CONFIG_MAPPING['gpt2e'].__name__, PIPELINE_REGISTRY.check_task('coreference')[1]['impl'].__name__, "
        "PIPELINE_REGISTRY.check_task('question-answering')[1]['impl'].__name__]))"
    )
    assert result == ["GPT2EConfig", "CoreferencePipeline", "QuestionAnsweringPipeline"]


def test_pipeline_tasks_are_known_right_after_the_import():
    result = _run(
        "import json, hf_entity_models\n"
        "from transformers.pipelines import PIPELINE_REGISTRY, check_task\n"
        "print(json.dumps([check_task('question-answering')[1]['impl'].__name__, "
        "'coreference' in PIPELINE_REGISTRY.get_supported_tasks()]))"
    )
    assert result == ["QuestionAnsweringPipeline", True]


def test_a_model_imported_from_its_folder_saves_a_portable_checkpoint(tmp_path):
    """No public name of the package is touched: saving registers the package (auto_map, pipeline code, card)."""
    result = _run(
        "import json, os, sys\n"
        "from transformers import BertConfig\n"
        "from hf_entity_models.models.petra import PetraConfig, PetraForCoreference\n"
        "encoder = BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16, vocab_size=50)\n"
        "PetraForCoreference(PetraConfig(encoder_config=encoder.to_dict(), encoder_layers=[-2, -1], hidden_size=16, "
        "mlp_hidden_size=16)).save_pretrained(sys.argv[1])\n"
        "config = json.load(open(os.path.join(sys.argv[1], 'config.json')))\n"
        "print(json.dumps([config.get('auto_map', {}).get('AutoModel'), sorted(config.get('custom_pipelines', {})), "
        "sorted(name for name in os.listdir(sys.argv[1]) if name.endswith(('.py', '.md')))]))",
        str(tmp_path),
    )
    auto_model, pipelines, files = result
    assert auto_model == "modeling_petra.PetraForCoreference"
    assert pipelines == ["entity-coreference"]
    assert {"README.md", "modeling_petra.py", "configuration_petra.py", "pipeline.py", "checkpoints.py"} <= set(files)


def test_the_pending_model_types_are_the_registered_ones():
    """A model registered in auto.py but missing from `_registration.MODEL_TYPES` would need an attribute access
    before the Auto classes knew it."""
    from transformers import AutoConfig

    from hf_entity_models import _registration, auto

    auto.register_auto_classes()
    registered = {model_type for model_type in _registration.MODEL_TYPES if AutoConfig.for_model(model_type)}
    package_configs = {
        config.model_type for config in vars(auto).values() if isinstance(config, type) and config.__name__.endswith("Config")
        and config.__module__.startswith("hf_entity_models.models")
    }
    assert registered == set(_registration.MODEL_TYPES) == package_configs
