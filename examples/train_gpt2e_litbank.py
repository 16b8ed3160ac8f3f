"""Train GPT2E on LitBank's gold coreference with the stock Trainer, evaluate perplexity with and without entity
information and on LAMBADA, save it, reload it through AutoModelForCausalLM and generate, with entity ids for the
prompt taken from a coreference model of this package when one is given.

    python examples/train_gpt2e_litbank.py                                       # a few minutes on 2 CPU cores
    python examples/train_gpt2e_litbank.py --init-from path/to/gpt2 --batch-size 1 --epochs 3   # from GPT-2 weights
    python examples/train_gpt2e_litbank.py --coref-model runs/petra-gap          # prompt entities from PeTra

LitBank's 80 books are split by book (8 validation, 8 test); nothing is selected on the test books. Needs
../shared/data/litbank, ../shared/data/lambada and the GPT-2 tokenizer in ../shared/data/tokenizers/gpt2.
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline, set_seed  # noqa: E402

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM  # noqa: E402
from hf_entity_models.hub import record_evaluation  # noqa: E402
from hf_entity_models.tasks.language_modeling import (  # noqa: E402
    build_entity_lm_trainer,
    entity_ids_from_text,
    entity_lm_training_arguments,
    evaluate_entity_lm,
    generate_with_entities,
    lambada_examples,
    lambada_scores,
    load_litbank_entity_lm,
    read_lambada,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PROMPT = "Elizabeth Bennet met Mr. Darcy at the ball. She"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--init-from", help="a saved GPT-2 (or GPT2E) folder; default: a small model from scratch")
    parser.add_argument("--window-length", type=int, default=256, help="a fresh model's n_positions (else the checkpoint's)")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=256)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8, help="1 is the paper's (entity states updated every window)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--lambada-examples", type=int, default=200)
    parser.add_argument("--coref-model", help="a PeTra / Referential Reader checkpoint for the prompt's entity ids")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/gpt2e-litbank")
    return parser.parse_args()


def build_model(args: argparse.Namespace, vocab_size: int) -> GPT2EForCausalLM:
    if args.init_from:
        return GPT2EForCausalLM.from_pretrained(args.init_from)  # maps every GPT-2 weight; entity attention at zero
    config = GPT2EConfig(
        vocab_size=vocab_size, n_positions=args.window_length, n_layer=args.n_layer, n_embd=args.n_embd,
        n_head=args.n_head,
    )
    return GPT2EForCausalLM(config)


def prompt_with_entities(args: argparse.Namespace, tokenizer) -> dict:
    if args.coref_model is None:
        ids = tokenizer(PROMPT)["input_ids"]
        print("No --coref-model: the prompt carries no entity ids.")
        return {"input_ids": ids, "entity_ids": [0] * len(ids)}
    coref = pipeline("coreference", model=args.coref_model)
    prompt = entity_ids_from_text(PROMPT, coref, tokenizer)
    print("Entities found by the coreference model:", [[m["text"] for m in cluster] for cluster in prompt["clusters"]])
    return prompt


def main() -> None:
    args = parse_args()
    set_seed(args.seed)
    # GPT-2's files ask for WordPiece's space clean-up on decode, which BPE text does not need (transformers ignores
    # it, with a warning on every run).
    tokenizer = AutoTokenizer.from_pretrained(DATA / "tokenizers" / "gpt2", clean_up_tokenization_spaces=False)
    model = build_model(args, len(tokenizer))
    books = load_litbank_entity_lm(
        DATA / "litbank" / "conll", tokenizer, window_length=model.config.n_positions,
        max_entities=model.config.max_entities,
    )
    training_args = entity_lm_training_arguments(
        f"{args.output_dir}-trainer", batch_size=args.batch_size, num_train_epochs=args.epochs,
        learning_rate=args.learning_rate, seed=args.seed, use_cpu=not torch.cuda.is_available(),
    )
    build_entity_lm_trainer(model, tokenizer, books["train"], training_args).train()
    for split in ("validation", "test"):
        scores = evaluate_entity_lm(model, books[split], batch_size=args.batch_size)
        print(f"{split} books: perplexity {scores['perplexity']:.1f} with entities, "
              f"{scores['perplexity_without_entities']:.1f} without (same model, entity ids zeroed)")
        record_evaluation(
            model.config, task="text-generation", dataset="litbank", split=f"{split} books (split by book, seed 0)",
            metric="perplexity", value=scores["perplexity"], metric_name="perplexity (gold entity ids)",
        )
    texts = read_lambada(DATA / "lambada" / "lambada_test.jsonl")[: args.lambada_examples]
    lambada = lambada_scores(model, lambada_examples(texts, tokenizer))
    print(f"LAMBADA (first {lambada.examples}): perplexity {lambada.perplexity:.1f}, accuracy {lambada.accuracy:.3f}")

    model.save_pretrained(args.output_dir)  # safetensors, config, code, model card
    tokenizer.save_pretrained(args.output_dir)
    reloaded = AutoModelForCausalLM.from_pretrained(args.output_dir).eval()
    prompt = prompt_with_entities(args, tokenizer)
    input_ids, entity_ids = torch.tensor([prompt["input_ids"]]), torch.tensor([prompt["entity_ids"]])
    # The prompt is read once as the previous window, so that its entities have representations to attend to.
    generated = generate_with_entities(reloaded, input_ids, entity_ids, max_new_tokens=20, do_sample=False)
    print(tokenizer.decode(generated[0]))


if __name__ == "__main__":
    main()
