"""Train a tiny DefinitionEMB reader with `build_definition_trainer` and fine-tune a tiny classifier on real MRPC
pairs with `fine_tune_glue`, both data-parallel.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29515 tests/scripts/ddp_train_definition_emb.py OUT

Writes ``OUT/definitions/rank{R}.json`` (with the evaluation loss) and ``OUT/glue/rank{R}.json`` (with the MRPC
metrics), each next to the process's final weights; the main process saves both models (``OUT/*/model``).
`tests/test_multiprocess_definition_emb.py` checks the files.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from ddp_common import DATA_DIR, RankRecorder, as_floats, minilm_tokenizer, script_main
from transformers import BertConfig, BertForSequenceClassification, set_seed

from hf_entity_models.models.definition_emb import DefinitionEmbConfig, DefinitionEmbModel
from hf_entity_models.tasks.embeddings.definitions import definition_prompt_dataset
from hf_entity_models.tasks.embeddings.glue import read_glue
from hf_entity_models.tasks.embeddings.glue_fine_tuning import build_glue_trainer, glue_training_arguments
from hf_entity_models.tasks.embeddings.training import build_definition_trainer, definition_training_arguments

GLUE_DIR = DATA_DIR / "glue"
WORDS = ["cat", "dog", "tree", "river", "stone", "house", "light", "music", "bread", "cloud", "horse", "glass"]
# 8 training prompts in batches of 2 on 2 processes: 2 steps per epoch. Evaluation: 4 prompts, one batch per process.
DEFINITION_TRAIN, DEFINITION_EVAL = 8, 4
# 16 MRPC pairs in batches of 4 on 2 processes: 2 steps; 8 dev pairs, one batch of 4 per process (no padding).
GLUE_TRAIN, GLUE_DEV = 16, 8
PER_DEVICE_BATCH = {"definitions": 2, "glue": 4}


def tiny_bert_config(vocab_size: int, **overrides) -> BertConfig:
    values = dict(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=128)  # fmt: skip
    return BertConfig(**{**values, **overrides})


def definition_prompts(encoder_tokenizer) -> datasets.Dataset:
    definitions = datasets.Dataset.from_dict(
        {
            "word": WORDS,
            "part_of_speech": ["n"] * len(WORDS),
            "definition": [f"a common thing called {word} that people know well" for word in WORDS],
        }
    )
    return definition_prompt_dataset(definitions, encoder_tokenizer, max_length=64)


def train_definitions(output_dir: Path, encoder_tokenizer) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    prompts = definition_prompts(encoder_tokenizer)
    batch = PER_DEVICE_BATCH["definitions"]
    arguments = definition_training_arguments(
        str(output_dir / "trainer"), num_train_epochs=1, per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch, learning_rate=3e-3, warmup_steps=0, save_strategy="no",
        logging_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    set_seed(0)
    model = DefinitionEmbModel(DefinitionEmbConfig(reader_config=tiny_bert_config(len(encoder_tokenizer))))
    with torch.no_grad():  # a PLM's embeddings stand in: the cosine loss has no gradient towards zero targets
        model.target_embeddings.normal_(generator=torch.Generator().manual_seed(0))
    recorder = RankRecorder(model)
    trainer = build_definition_trainer(
        model, encoder_tokenizer, prompts.select(range(DEFINITION_TRAIN)),
        prompts.select(range(DEFINITION_TRAIN, DEFINITION_TRAIN + DEFINITION_EVAL)), args=arguments, seed=0,
    )  # fmt: skip
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(str(output_dir / "model"))
    recorder.write(output_dir, trainer, metrics=as_floats(metrics))


def train_glue(output_dir: Path, encoder_tokenizer) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    batch = PER_DEVICE_BATCH["glue"]
    arguments = glue_training_arguments(
        str(output_dir / "trainer"), "mrpc", max_steps=2, per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch, learning_rate=1e-3, eval_strategy="no", logging_strategy="no",
        disable_tqdm=True,
    )  # fmt: skip
    set_seed(0)
    model = BertForSequenceClassification(tiny_bert_config(len(encoder_tokenizer), num_labels=2))
    recorder = RankRecorder(model)
    dev = read_glue(GLUE_DIR, "mrpc", "dev").select(range(GLUE_DEV))
    trainer = build_glue_trainer(
        model, encoder_tokenizer, read_glue(GLUE_DIR, "mrpc", "train").select(range(GLUE_TRAIN)), {"dev": dev},
        arguments,
    )  # fmt: skip
    trainer.train()
    metrics = trainer.evaluate(eval_dataset=trainer.eval_dataset["dev"], metric_key_prefix="dev")
    trainer.save_model(str(output_dir / "model"))
    recorder.write(output_dir, trainer, metrics=as_floats(metrics))


def train(output_dir: Path) -> None:
    """The definition reader into ``output_dir/definitions``, the MRPC classifier into ``output_dir/glue``."""
    encoder_tokenizer = minilm_tokenizer()
    train_definitions(output_dir / "definitions", encoder_tokenizer)
    train_glue(output_dir / "glue", encoder_tokenizer)


if __name__ == "__main__":
    script_main(train, __doc__.splitlines()[0])
