"""What the entity attention costs per training step, by its width and value source: GPT2E / GPT-2 step-time ratios
measured interleaved in one run (the evidence for `GPT2EConfig.entity_attention_size`'s default).

Every variant and GPT-2 share the config (6 layers, 384 wide, 512 tokens by default) and train on the same random
batch; the models alternate, the order reversed every other repeat, and the median of the per-repeat ratios is
reported.

    python benchmarks/bench_gpt2e_attention_width.py --threads 1            # about 10 minutes on one core
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

RESULTS = Path(__file__).parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-layer", type=int, default=6)
    parser.add_argument("--n-embd", type=int, default=384)
    parser.add_argument("--n-head", type=int, default=6)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--results", default=str(RESULTS / "gpt2e_attention_width.json"))
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = dict(n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, n_positions=args.length, use_cache=False)
    models = {"gpt2": GPT2LMHeadModel(GPT2Config(**shape))}
    for size in (GPT2EConfig(**shape).entity_attention_size, args.n_embd):
        for values in ("hidden", "entities"):
            config = GPT2EConfig(**shape, entity_attention_size=size, entity_attention_values=values)
            models[f"gpt2e width {size}, values from {values}"] = GPT2EForCausalLM(config)
    input_ids = torch.randint(0, 50257, (args.batch_size, args.length))
    entity_ids = torch.randint(0, 30, (args.batch_size, args.length))
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-6) for name, model in models.items()}

    def step(name: str) -> float:
        model = models[name].train()
        inputs = {"labels": input_ids} if name == "gpt2" else {"labels": input_ids, "entity_ids": entity_ids}
        start = time.perf_counter()
        model(input_ids, **inputs).loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        return time.perf_counter() - start

    for name in models:  # warm-up
        step(name)
    ratios = {name: [] for name in models if name != "gpt2"}
    seconds = {name: [] for name in models}
    for repeat in range(args.repeats):
        order = list(models) if repeat % 2 == 0 else list(models)[::-1]
        measured = {name: step(name) for name in order}
        for name, value in measured.items():
            seconds[name].append(value)
        for name in ratios:
            ratios[name].append(measured[name] / measured["gpt2"])
    record = {
        "command": "python benchmarks/bench_gpt2e_attention_width.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), torch "
        f"{torch.__version__}, transformers {transformers.__version__}",
        "batch": f"{args.batch_size} x {args.length}",
        "median_seconds": {name: statistics.median(values) for name, values in seconds.items()},
        "ratio_to_gpt2": {
            name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for name, values in ratios.items()
        },
    }
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
