"""Does GPT2E's entity state carry an entity across a window boundary? A synthetic recall task (issue 23).

Every document has two windows. Window 0 names two entities, each by one of `--names` name tokens, amid filler
tokens; the name tokens carry their entity id. Window 1 is filler with "he NAME" once for each entity (in a random
order), where "he" and NAME carry the entity's id; the names do not occur in window 1 before. A model that reads
window 1 alone can do no better than guessing among the names: about ln(names) nats on the NAME tokens (ln 16 =
2.77). A model whose entity state remembers the entity reads the name off "he"'s entity.

Every model trains as the Trainer reads documents: one optimiser step per window, window 0 then window 1 of the same
documents, entity states carried in the model's document store (`document_ids` / `window_index`). Scored: the mean
cross-entropy of the NAME tokens of window 1 on held-out documents, for

  * `gpt2`: GPT-2 (the same blocks without entity attention), the window-local level;
  * `gpt2e`: GPT2E as configured (the default design, the entity memory, with `--config-overrides`), with its entity
    ids, and with the ids zeroed;
  * `gpt2e-paper`: the `"paper"` preset (the entity attention of section 3 over the final hidden states of the last
    mentions), likewise;
  * `gpt2e-name-code` (positive control): GPT2E as configured whose stored state of each entity is replaced, before
    window 1, by a fixed random code of its name: what the model can do with an informative state.

    python benchmarks/bench_gpt2e_recall.py                       # 600 steps, 3 seeds, a few minutes on 2 cores
    python benchmarks/bench_gpt2e_recall.py --steps 60 --seeds 0  # smoke run

Results go to benchmarks/results/gpt2e_recall.json, written after every (model, seed).
"""

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM
from hf_entity_models.tasks.language_modeling import (
    recall_documents,
    recall_name_nats,
    recall_vocab_size,
    recall_window_logits,
)

RESULTS = Path(__file__).parent / "results" / "gpt2e_recall.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", type=int, default=16)
    parser.add_argument("--window-length", type=int, default=24)
    parser.add_argument("--steps", type=int, default=600, help="optimiser steps (two per batch of documents)")
    parser.add_argument("--batch-size", type=int, default=32, help="documents per batch")
    parser.add_argument("--heldout-documents", type=int, default=512)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--models", nargs="+", default=["gpt2", "gpt2e", "gpt2e-paper", "gpt2e-name-code"])
    parser.add_argument(
        "--config-overrides", type=json.loads, default={},
        help='JSON of GPT2EConfig fields for the GPT2E models, e.g. \'{"entity_attention_values": "entities"}\'',
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def build(kind: str, args, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    shape = dict(n_layer=2, n_embd=64, n_head=2, vocab_size=recall_vocab_size(args.names),
                 n_positions=args.window_length, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(**shape))
    if kind == "gpt2e-paper":
        return GPT2EForCausalLM(GPT2EConfig.from_preset("paper", **shape, max_entities=2))
    return GPT2EForCausalLM(GPT2EConfig(**shape, max_entities=2, **args.config_overrides))


def name_codes(args, seed: int, width: int) -> torch.Tensor:
    """The positive control's fixed random code of each name (row 0 unused)."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(args.names + 1, width, generator=generator)


def window_forward(model, kind: str, documents: dict, window: int, ids_on: bool, codes: torch.Tensor | None,
                   document_offset: int) -> torch.Tensor:
    """Logits of one window of a batch of documents, reading and writing the model's document store."""
    input_ids = documents["input_ids"][:, window]
    if kind == "gpt2":
        return model(input_ids).logits
    entity_ids = documents["entity_ids"][:, window] if ids_on else torch.zeros_like(input_ids)
    if codes is not None and window == 1:
        # Positive control: the state of each entity is a code of its name, whatever the store holds.
        states = torch.ones(len(input_ids), 3, codes.shape[1])
        states[:, 1:] = codes[documents["entity_names"]]
        return model(input_ids, entity_ids=entity_ids, entity_states=states).logits
    return recall_window_logits(model, documents, window, document_offset, ids_on)


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())


def train_and_score(kind: str, args, seed: int, heldout: dict) -> dict:
    model = build("gpt2e" if kind == "gpt2e-name-code" else kind, args, seed)
    codes = name_codes(args, seed, model.config.n_embd) if kind == "gpt2e-name-code" else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    started, losses = time.perf_counter(), []
    for batch in range(args.steps // 2):
        documents = recall_documents(args.batch_size, args.names, args.window_length, generator)
        for window in (0, 1):  # one optimiser step per window, states carried in the store
            loss = lm_loss(window_forward(model, kind, documents, window, True, codes, batch * args.batch_size),
                           documents["input_ids"][:, window])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
    model.eval()
    record = {"train_s": time.perf_counter() - started, "final_train_loss": statistics.mean(losses[-20:])}
    with torch.no_grad():
        for ids_on in ([True] if kind == "gpt2" else [True, False]):
            if hasattr(model, "reset_entity_stores"):
                model.reset_entity_stores()
            window_forward(model, kind, heldout, 0, ids_on, codes, 0)
            logits = window_forward(model, kind, heldout, 1, ids_on, codes, 0)
            record["name_nats" if ids_on else "name_nats_ids_zeroed"] = recall_name_nats(logits, heldout)
    return record


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    heldout = recall_documents(args.heldout_documents, args.names, args.window_length, torch.Generator().manual_seed(999))
    results = {
        "command": "python benchmarks/bench_gpt2e_recall.py " + " ".join(argv or []),
        "window_local_level_nats": math.log(args.names),
        "setup": {key: getattr(args, key) for key in ("names", "window_length", "steps", "batch_size",
                                                        "heldout_documents", "learning_rate", "config_overrides")},
        "runs": {},
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for kind in args.models:
        for seed in args.seeds:
            record = train_and_score(kind, args, seed, heldout)
            results["runs"].setdefault(kind, {})[str(seed)] = record
            print(f"{kind:>16} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in record.items()), flush=True)
            args.results.write_text(json.dumps(results, indent=2))
    summary = {
        kind: {key: statistics.mean(run[key] for run in runs.values()) for key in next(iter(runs.values()))}
        for kind, runs in results["runs"].items()
    }
    results["mean_over_seeds"] = summary
    args.results.write_text(json.dumps(results, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
