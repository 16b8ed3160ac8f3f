"""Fine-tune a tiny ForceReader on real SQuAD 2.0 questions with `train_on_squad`, one process or many.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29513 tests/scripts/ddp_train_forcereader.py OUT

Every process calls `train_on_squad` (data-parallel training, then the validation features shared between the
processes and their logits gathered) and records its evaluation; then every process calls `Trainer.save_model`,
which writes ``OUT/model`` on the main process only. `tests/test_multiprocess_forcereader.py` checks the files.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from accelerate import PartialState
from ddp_common import DATA_DIR, RankRecorder, minilm_tokenizer, script_main
from transformers import BertConfig, set_seed

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.tasks.question_answering.data import load_squad, split_by_article
from hf_entity_models.tasks.question_answering.training import train_on_squad

SQUAD_V2 = DATA_DIR / "squad" / "squad-v2.0-dev-public.json.gz"
TRAIN_QUESTIONS, VALIDATION_QUESTIONS = 16, 7
MAX_LENGTH, DOC_STRIDE = 128, 48
PER_DEVICE_TRAIN_BATCH, EVAL_BATCH, MAX_STEPS = 4, 4, 2


def squad_questions() -> tuple[datasets.Dataset, datasets.Dataset]:
    """Training and validation questions from different articles."""
    parts = split_by_article(load_squad(SQUAD_V2), num_validation_articles=1, num_train_articles=2, seed=0)
    return parts["train"].select(range(TRAIN_QUESTIONS)), parts["validation"].select(range(VALIDATION_QUESTIONS))


def tiny_forcereader(vocab_size: int) -> ForceReaderForQuestionAnswering:
    encoder = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=MAX_LENGTH)  # fmt: skip
    config = ForceReaderConfig.from_preset("forcereader", encoder_config=encoder, interaction_channels=8)
    model = ForceReaderForQuestionAnswering(config)
    # The answer head starts at zero (uniform logits), so nothing behind it gets gradient until it has moved. Two
    # steps (the first at warm-up's zero rate) would leave most biases where they started, and the test checks that
    # every trained weight moved the same way on both ranks: start the head away from zero.
    with torch.no_grad():
        for layer in (model.start_bilinear, model.end_bilinear, model.interaction_outputs):
            layer.weight.normal_(0.0, 0.02)
    return model


def train(output_dir: Path) -> None:
    """`train_on_squad` for `MAX_STEPS` steps, then the model saved through the Trainer."""
    output_dir.mkdir(parents=True, exist_ok=True)
    encoder_tokenizer = minilm_tokenizer()
    # The main process builds the `datasets` cache of the SQuAD file first; the others then read it.
    with PartialState(cpu=not torch.cuda.is_available()).main_process_first():
        train_questions, validation_questions = squad_questions()
    set_seed(0)
    model = tiny_forcereader(len(encoder_tokenizer))
    recorder = RankRecorder(model)
    result = train_on_squad(
        model, encoder_tokenizer, train_questions, validation_questions, str(output_dir / "trainer"),
        max_length=MAX_LENGTH, doc_stride=DOC_STRIDE, eval_batch_size=EVAL_BATCH, max_steps=MAX_STEPS,
        per_device_train_batch_size=PER_DEVICE_TRAIN_BATCH, new_lr=3e-3, pretrained_lr=1e-3, disable_tqdm=True,
        logging_strategy="no", seed=0,
    )  # fmt: skip
    result.trainer.save_model(str(output_dir / "model"))  # every process calls it; the Trainer writes on rank 0 only
    evaluation = result.validation
    recorder.write(
        output_dir,
        result.trainer,
        predictions=evaluation.predictions,
        null_odds=evaluation.null_odds,
        scores=evaluation.scores,
        null_score_diff_threshold=evaluation.null_score_diff_threshold,
        validation_ids=list(validation_questions["id"]),
    )


if __name__ == "__main__":
    script_main(train, __doc__.splitlines()[0])
