"""SQuAD with the stock Trainer: training arguments, the Trainer with ForceReader's two-rate optimizer, evaluation
(windowed features -> logits -> answers -> official EM/F1, with the SQuAD 2.0 no-answer threshold), and one call
that does it all. Works for ForceReader and for any `AutoModelForQuestionAnswering` (BERT and the like).

Data parallel (``accelerate launch --multi_gpu --num_processes N``): the Trainer shards the training features; the
evaluation shares the validation features between the processes and gathers their logits, so every process computes
the same answers, scores and no-answer threshold (nothing here writes files: save on the main process only, e.g.
with `trainer.save_model`, which does so by itself).
"""

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import Trainer, TrainingArguments, default_data_collator
from transformers.utils import logging

from ...hub.evaluation_results import record_evaluation
from ...training.distributed import (
    check_processes_connected,
    gather_rows,
    is_main_process,
    process_rank_and_count,
    process_shard,
)
from ...models.forcereader.configuration_forcereader import BRANCH_WEIGHTS
from ...models.forcereader.modeling_forcereader import MASKED_LOGIT, logits_per_head
from ...training.optimizers import two_rate_adamw
from .data import squad_version
from .features import squad_features
from .metrics import find_best_thresholds, score_answer, score_squad_v1, score_squad_v2
from .postprocess import SquadPredictions, postprocess_predictions

logger = logging.get_logger(__name__)

# Hub dataset ids under which results are recorded (and named in the model card).
DATASET_IDS = {"1.1": "squad", "2.0": "squad_v2"}
_MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@dataclass
class SquadEvaluation:
    """Answers and official scores of one evaluation.

    Attributes:
        predictions: Question id -> answer text ("" for no answer).
        null_odds: Question id -> null score minus best span score (logits; larger means "no answer").
        scores: The official scores in percent (`exact_match`/`f1` for 1.1; `exact`, `f1`, `HasAns_*`, `NoAns_*`,
            `best_*` for 2.0), and for 2.0 how many questions got a span rather than "no answer": `answered_total`
            and `answered_percent` (a model that never answers shows 0 here, and `HasAns_f1` 0, however high
            `NoAns_f1` and the overall F1 are).
        version: "1.1" or "2.0".
        null_score_diff_threshold: The no-answer threshold the 2.0 predictions were made with (None for 1.1).
    """

    predictions: dict[str, str]
    null_odds: dict[str, float]
    scores: dict[str, float]
    version: str
    null_score_diff_threshold: float | None = None

    @property
    def f1(self) -> float:
        return self.scores["f1"]

    @property
    def exact_match(self) -> float:
        return self.scores["exact_match" if self.version == "1.1" else "exact"]


@dataclass
class SquadTrainingResult:
    """What `train_on_squad` returns: the trainer (its model is the trained model) and the validation evaluation."""

    trainer: Trainer
    validation: SquadEvaluation
    branch_weight_f1: dict[float, float] | None = None  # ForceReader: validation F1 at each branch weight tried


def squad_training_arguments(
    output_dir: str,
    *,
    num_train_epochs: float = 2.0,
    per_device_train_batch_size: int = 12,
    warmup_steps: float = 0.1,
    seed: int = 42,
    **overrides: Any,
) -> TrainingArguments:
    """`TrainingArguments` for SQuAD fine-tuning: ForceReader's batch of 12 and warm-up then linear decay; the learning
    rates live in the optimizer (`build_squad_trainer`). Any `TrainingArguments` field can be overridden.

    Example:

    ```python
    >>> args = squad_training_arguments("runs/forcereader", num_train_epochs=1, max_steps=10)
    >>> args.per_device_train_batch_size, args.lr_scheduler_type.value
    (12, 'linear')

    ```
    """
    values = dict(
        output_dir=output_dir,
        num_train_epochs=num_train_epochs,
        per_device_train_batch_size=per_device_train_batch_size,
        warmup_steps=warmup_steps,  # a float below 1 is a share of the training steps
        lr_scheduler_type="linear",
        seed=seed,
        save_strategy="no",
        logging_steps=50,
        report_to="none",
        # Without it, `accelerate launch --multi_gpu` on a machine without GPUs starts unconnected single-process runs.
        use_cpu=not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    values.update(overrides)
    return TrainingArguments(**values)


def pretrained_part(model: nn.Module) -> nn.Module:
    """The pretrained encoder of a QA model: ForceReader's encoder, else the model's base model (e.g. `bert`)."""
    body = getattr(model, "forcereader", None)
    return body.encoder if body is not None else model.base_model


def build_squad_trainer(
    model: nn.Module,
    tokenizer: Any,
    train_features: datasets.Dataset,
    args: TrainingArguments,
    *,
    pretrained_lr: float = 3e-5,
    new_lr: float = 1e-4,
    weight_decay: float = 1e-4,
    new_weight_decay: float | None = None,
) -> Trainer:
    """The stock Trainer on SQuAD training features, with ForceReader's optimizer (section 4.3): AdamW at
    `pretrained_lr` for the encoder and `new_lr` for the other layers, `weight_decay` on all parameters
    (`new_weight_decay` on the new layers when given); the Trainer adds the warm-up and linear decay of `args`.

    Raises:
        ValueError: If N processes were launched but `args` do not connect them (see `check_processes_connected`).
    """
    check_processes_connected(args)
    optimizer = two_rate_adamw(model, pretrained_part(model), pretrained_lr, new_lr, weight_decay, new_weight_decay)
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_features,
        data_collator=default_data_collator,
        processing_class=tokenizer,
        optimizers=(optimizer, None),
    )


@torch.no_grad()
def squad_logits(
    model: nn.Module,
    features: datasets.Dataset,
    batch_size: int = 32,
    *,
    distributed: bool = False,
    progress: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end logits of every validation feature (in feature order), computed on the model's device.

    Args:
        model: A question-answering model.
        features: Validation features (`squad_features(..., training=False)`, fixed-size).
        batch_size: Features per forward pass.
        distributed: Share the features between the processes of a data-parallel run (``accelerate launch``):
            EVERY process must then call this; each computes a contiguous block and all get all logits. False (the
            default) computes every feature in this process, so it may be called on one process only.
        progress: Show a progress bar (on the main process only).
    """

    def answer_logits(batch: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        output = model(**batch)
        return {"answer": (output.start_logits, output.end_logits)}

    return _collect_logits(model, features, answer_logits, ["answer"], batch_size, distributed, progress)["answer"]


@torch.no_grad()
def squad_head_logits(
    model: nn.Module,
    features: datasets.Dataset,
    batch_size: int = 32,
    *,
    distributed: bool = False,
    progress: bool = True,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Like `squad_logits`, for each answer head of a ForceReader (`output_head_logits=True`): head name -> (start,
    end) logits of every feature."""
    names = ["combined", "qcp_tokens", "separate_encoding"] if model.config.has_two_heads else ["combined"]
    return _collect_logits(
        model, features, lambda batch: logits_per_head(model(**batch, output_head_logits=True)), names, batch_size,
        distributed, progress,
    )


def _collect_logits(
    model: nn.Module,
    features: datasets.Dataset,
    logits_of,
    names: list[str],
    batch_size: int,
    distributed: bool,
    progress: bool,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """`logits_of(batch)` (name -> (start, end)) over every feature; every process gathers every name in `names`,
    a process that got no feature included."""
    model.eval()
    shard = distributed and process_rank_and_count()[1] > 1
    inputs = features.select_columns([name for name in _MODEL_INPUTS if name in features.column_names])
    if shard:
        inputs = inputs.select(process_shard(len(inputs)))
    inputs = inputs.with_format("torch")
    device = next(model.parameters()).device
    collected: dict[str, tuple[list, list]] = {name: ([], []) for name in names}
    batches = range(0, len(inputs), batch_size)
    for start in tqdm(batches, desc="Answering", unit="batch", disable=not progress or not is_main_process()):
        batch = {name: tensor.to(device) for name, tensor in inputs[start : start + batch_size].items()}
        for name, (start_logits, end_logits) in logits_of(batch).items():
            collected[name][0].append(start_logits.float())
            collected[name][1].append(end_logits.float())
    # Features are padded to one length; a process given no feature still contributes a (0, length) block.
    width = len(features[0]["input_ids"]) if len(features) else 0
    result = {}
    for name, (starts, ends) in collected.items():
        start_logits, end_logits = _joined(starts, width, device), _joined(ends, width, device)
        if shard:
            # Rank-order concatenation of the contiguous blocks restores feature order.
            start_logits, end_logits = gather_rows(start_logits, device), gather_rows(end_logits, device)
        result[name] = (start_logits.cpu(), end_logits.cpu())
    return result


def _joined(parts: list[torch.Tensor], width: int, device: torch.device) -> torch.Tensor:
    """The logits of one process; an empty (0, width) block for a process that got no feature."""
    return torch.cat(parts) if parts else torch.zeros((0, width), device=device)


def answer_squad(
    model: nn.Module,
    tokenizer: Any,
    examples: datasets.Dataset,
    *,
    max_length: int = 384,
    doc_stride: int = 128,
    batch_size: int = 32,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    distributed: bool = False,
) -> SquadPredictions:
    """The best span of every question of `examples` (the `load_squad` layout) and its null odds, before any
    no-answer decision (see `score_answers`). `distributed`: see `squad_logits`."""
    features = squad_features(examples, tokenizer, max_length, doc_stride, training=False)
    return _answers_from_features(
        model, examples, features, batch_size, n_best_size, max_answer_length, distributed=distributed
    )


def _answers_from_features(
    model: nn.Module,
    examples: datasets.Dataset,
    features: datasets.Dataset,
    batch_size: int,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    *,
    distributed: bool = False,
) -> SquadPredictions:
    start_logits, end_logits = squad_logits(model, features, batch_size, distributed=distributed)
    return postprocess_predictions(
        examples, features, start_logits, end_logits, n_best_size=n_best_size, max_answer_length=max_answer_length
    )


def choose_branch_weight(
    model: nn.Module,
    examples: datasets.Dataset,
    features: datasets.Dataset,
    batch_size: int = 32,
    *,
    weights: tuple[float, ...] = BRANCH_WEIGHTS,
    distributed: bool = False,
) -> tuple[float, dict[float, float], SquadPredictions]:
    """The weight of a two-head ForceReader's separate-encoding branch (`config.branch_weight`) with the best F1 on
    `examples` (SQuAD 2.0: the best F1 over no-answer thresholds), among `weights`; on equal F1 the larger weight.
    One forward pass: the heads' logits are computed once (branch weight 1) and combined for every weight. Returns
    (the weight, F1 per weight, the answers at that weight); the model's config is left as it was.

    Choose on data you do not report (validation articles), as for the no-answer threshold; `record_branch_weight`
    stores the choice in the config.

    Raises:
        ValueError: The model has no separate-encoding branch (a ForceReader without the QCP token head, or another
            model), or `weights` is empty or holds a negative or non-finite weight; before any forward pass.
    """
    _check_branch_weight_choice(model, weights)
    configured = model.config.branch_weight
    model.config.branch_weight = 1.0
    try:
        heads = squad_head_logits(model, features, batch_size, distributed=distributed)
    finally:
        model.config.branch_weight = configured
    (pair_start, pair_end), (branch_start, branch_end) = heads["qcp_tokens"], heads["separate_encoding"]
    answerable = pair_start > MASKED_LOGIT / 2
    version = squad_version(examples)
    gold = {row["id"]: list(row["answers"]["text"]) for row in examples}
    scores, answers = {}, {}
    for weight in weights:
        start = torch.where(answerable, pair_start + weight * branch_start, MASKED_LOGIT)
        end = torch.where(answerable, pair_end + weight * branch_end, MASKED_LOGIT)
        answers[weight] = postprocess_predictions(examples, features, start, end)
        if version == "1.1":
            scores[weight] = score_squad_v1(answers[weight].predictions, gold).f1
        else:
            scores[weight] = find_best_thresholds(answers[weight].predictions, gold, answers[weight].null_odds).best_f1
    best = max(weights, key=lambda weight: (scores[weight], weight))
    return best, scores, answers[best]


def _check_branch_weight_choice(model: nn.Module, weights: tuple[float, ...]) -> None:
    """Refuse what `choose_branch_weight` cannot choose among, before its forward pass over every feature."""
    config = getattr(model, "config", None)
    if not getattr(config, "has_two_heads", False):
        which = (
            f"preset {config.preset!r}: only a ForceReader with the QCP token head, 'qcp' in reading_modes and "
            "qcp_passage_logits=True, answers with two heads"
            if hasattr(config, "preset") else "it is not a ForceReader with two answer heads"
        )
        raise ValueError(
            f"{type(model).__name__} has no separate-encoding branch to weigh ({which}): choose a branch weight only "
            "for such a reader, and evaluate this one as it is (evaluate_squad)."
        )
    if not weights:
        raise ValueError(
            f"weights is empty: pass at least one weight >= 0 to choose among (the default is {BRANCH_WEIGHTS})."
        )
    if not all(
        isinstance(weight, numbers.Real) and not isinstance(weight, bool) and math.isfinite(weight) and weight >= 0
        for weight in weights
    ):
        raise ValueError(
            f"weights must be finite numbers >= 0, got {tuple(weights)!r}: pass branch weights such as the default "
            f"{BRANCH_WEIGHTS} (0 answers with the QCP token head alone)."
        )


def record_branch_weight(config: Any, weight: float, f1_per_weight: dict[float, float]) -> None:
    """Store a branch weight chosen on validation (`choose_branch_weight`) in a ForceReader config: the weight in
    `config.branch_weight` and the validation F1 of every weight tried in `config.branch_weight_validation_f1` (what
    the model card reads to say that the weight was chosen on validation).

    Raises:
        ValueError: The weight is negative or not finite, or is not among the weights tried.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> from hf_entity_models import ForceReaderConfig
    >>> encoder = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    >>> config = ForceReaderConfig.from_preset("forcereader", encoder_config=encoder)
    >>> record_branch_weight(config, 0.25, {0.0: 40.0, 0.25: 41.5, 1.0: 30.0})
    >>> config.branch_weight, config.branch_weight_validation_f1
    (0.25, {'0.0': 40.0, '0.25': 41.5, '1.0': 30.0})

    ```
    """
    if weight not in f1_per_weight:
        raise ValueError(
            f"branch weight {weight!r} is not among the weights tried ({sorted(f1_per_weight)}): record the weight "
            "choose_branch_weight returned with the F1 per weight it returned."
        )
    config.branch_weight = weight
    config.branch_weight_validation_f1 = {str(float(tried)): float(f1) for tried, f1 in f1_per_weight.items()}


def score_answers(
    answers: SquadPredictions, examples: datasets.Dataset, null_score_diff_threshold: float = 0.0
) -> SquadEvaluation:
    """Official scores of best-span answers. SQuAD 2.0: a question is answered "" when its null odds exceed the
    threshold (a finite number: +-inf would answer every question alike, whatever the odds); the scores also hold
    the official best thresholds (`best_f1_thresh`), searched over the best spans, and the share of questions
    answered with a span (`answered_total`, `answered_percent`)."""
    version = squad_version(examples)
    gold = {row["id"]: list(row["answers"]["text"]) for row in examples}
    if version == "1.1":
        scores = score_squad_v1(answers.predictions, gold).as_dict()
        return SquadEvaluation(dict(answers.predictions), dict(answers.null_odds), scores, version)
    null_score_diff_threshold = checked_null_threshold(null_score_diff_threshold)
    predictions = {
        question: "" if answers.null_odds[question] > null_score_diff_threshold else answer
        for question, answer in answers.predictions.items()
    }
    scores = score_squad_v2(predictions, gold).as_dict()
    scores.update(dataclasses.asdict(find_best_thresholds(answers.predictions, gold, answers.null_odds)))
    answered = sum(answer != "" for answer in predictions.values())
    scores.update(answered_total=answered, answered_percent=100.0 * answered / len(predictions))
    return SquadEvaluation(predictions, dict(answers.null_odds), scores, version, null_score_diff_threshold)


def checked_null_threshold(threshold: Any, where: str = "null_score_diff_threshold") -> float:
    """`threshold` as a float if it is a finite number, else a ValueError: a non-finite no-answer threshold answers
    every question alike (-inf: never, +inf: always, NaN: always) and is not valid JSON in a config."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
        raise ValueError(
            f"{where} must be a finite number, got {threshold!r}: a SQuAD 2.0 no-answer threshold of +-inf or NaN "
            "answers every question alike and cannot be stored in config.json (JSON has no Infinity / NaN). Choose "
            "one on validation with choose_null_threshold, or pass a finite one (evaluate_squad's "
            "null_score_diff_threshold; `hf-entity evaluate --null-threshold T`)."
        )
    return float(threshold)


def record_null_threshold(config: Any, threshold: float) -> None:
    """Store a SQuAD 2.0 no-answer threshold in `config.null_score_diff_threshold` (the pipeline and `evaluate_squad`
    read it), refusing a non-finite one (see `checked_null_threshold`).

    Example:

    ```python
    >>> from transformers import PretrainedConfig
    >>> config = PretrainedConfig()
    >>> record_null_threshold(config, -1.5)
    >>> config.null_score_diff_threshold
    -1.5

    ```
    """
    config.null_score_diff_threshold = checked_null_threshold(threshold)


def choose_null_threshold(answers: SquadPredictions, examples: datasets.Dataset) -> float:
    """The SQuAD 2.0 no-answer threshold with the best F1 on `examples`: answering exactly the questions whose null
    odds are at most the threshold (no answer when the odds exceed it). Always a finite number, which reproduces
    the best F1 when applied (`score_answers`) and can be stored in config.json.

    Only the order of the odds matters, so the candidates are the finite cut points of the sorted distinct odds:
    each odds value itself (answer the questions with odds up to it, as the official `best_f1_thresh` is placed),
    and one logit below the smallest (answer none of them). Equal odds fall on the same side of every threshold, so
    they are taken or left together. Infinite odds are on the same side of every finite threshold (-inf: always
    answered; +inf, a question without any valid span: never). On equal F1 the fewer answers win, as in the
    official search. Unlike the official `best_f1_thresh`, which reports 0.0 when answering nothing is best
    whatever the odds are, the threshold returned here then lies below every finite odds. Without finite odds
    every threshold gives the same answers: 0.0.

    Raises:
        ValueError: A question's null odds are NaN (the model's logits were not finite).

    Example:

    ```python
    >>> from datasets import Dataset
    >>> examples = Dataset.from_list([{"id": "a", "answers": {"text": ["Paris"]}, "is_impossible": False},
    ...                               {"id": "b", "answers": {"text": []}, "is_impossible": True}])
    >>> answers = SquadPredictions({"a": "Paris", "b": "Rome"}, {"a": -2.0, "b": 1.0}, {})
    >>> choose_null_threshold(answers, examples)  # answer a, not b
    -2.0
    >>> choose_null_threshold(SquadPredictions({"a": "Lyon", "b": "Rome"}, {"a": -2.0, "b": 1.0}, {}), examples)
    -3.0

    ```
    """
    gold = {row["id"]: list(row["answers"]["text"]) for row in examples}
    # Answering a question instead of abstaining changes the summed F1 by its span's F1 minus 1 if unanswerable.
    gain_at: dict[float, float] = {}
    for question, odds in answers.null_odds.items():
        odds = float(odds)
        if math.isnan(odds):
            raise ValueError(
                f"The null odds of question {question!r} are NaN: the model gave non-finite logits; no no-answer "
                "threshold can be chosen from them."
            )
        if math.isinf(odds):
            continue
        span_f1 = score_answer(answers.predictions[question], gold[question], version="v2.0")[1]
        gain_at[odds] = gain_at.get(odds, 0.0) + span_f1 - float(not gold[question])
    if not gain_at:
        return 0.0
    cuts = sorted(gain_at)
    best_cut, best_gain, gain = None, 0.0, 0.0
    for cut in cuts:
        gain += gain_at[cut]
        if gain > best_gain + 1e-9:  # summed F1 in questions: 1e-9 only absorbs rounding
            best_cut, best_gain = cut, gain
    if best_cut is not None:
        return best_cut
    below = cuts[0] - 1.0
    if below == cuts[0]:  # odds so large that one logit is below their float resolution
        below = math.nextafter(cuts[0], -math.inf)
    return checked_null_threshold(below, "the no-answer threshold below the smallest null odds")


def evaluate_squad(
    model: nn.Module,
    tokenizer: Any,
    examples: datasets.Dataset,
    *,
    null_score_diff_threshold: float | None = None,
    **answer_options: Any,
) -> SquadEvaluation:
    """Answer every question of `examples` and score the answers officially (`answer_squad`, then `score_answers`).

    SQuAD 2.0: the no-answer threshold defaults to the model config's `null_score_diff_threshold` (else 0). The
    scores also hold the official best thresholds (`best_f1_thresh`): choose one on data you do not report, store it
    in the config, and evaluate elsewhere.

    With ``distributed=True`` (through `answer_options`) in a data-parallel run, every process must call it: the
    processes share the features and all return the same evaluation (`squad_logits`).

    Example:

    ```python
    >>> evaluation = evaluate_squad(model, tokenizer, load_squad("dev-v2.0.json"))  # doctest: +SKIP
    >>> evaluation.scores["HasAns_f1"], evaluation.scores["best_f1_thresh"]  # doctest: +SKIP

    ```
    """
    if null_score_diff_threshold is None:
        configured = getattr(model.config, "null_score_diff_threshold", None)
        null_score_diff_threshold = 0.0 if configured is None else checked_null_threshold(
            configured, "the model config's null_score_diff_threshold (written by an earlier, faulty version if it "
            "is -inf)"
        )
    return score_answers(answer_squad(model, tokenizer, examples, **answer_options), examples, null_score_diff_threshold)


def train_on_squad(
    model: nn.Module,
    tokenizer: Any,
    train_examples: datasets.Dataset,
    validation_examples: datasets.Dataset,
    output_dir: str,
    *,
    max_length: int = 384,
    doc_stride: int = 128,
    pretrained_lr: float = 3e-5,
    new_lr: float = 1e-4,
    weight_decay: float = 1e-4,
    new_weight_decay: float | None = None,
    eval_batch_size: int = 32,
    **training_arguments: Any,
) -> SquadTrainingResult:
    """Fine-tune a QA model on SQuAD questions with the stock Trainer, then answer and score the validation questions.

    For SQuAD 2.0 the no-answer threshold that maximises validation F1 is stored in
    `model.config.null_score_diff_threshold` (the pipeline and `evaluate_squad` use it), and the recorded
    validation scores are those at that threshold: they were selected on the validation questions, so report them
    as such, or evaluate again on questions of other articles. The scores are recorded in `config.evaluation_results`
    (and the model card) when the config records results. A ForceReader with two heads gets the branch weight with the
    best validation F1 (`choose_branch_weight`), stored with the F1 of every weight tried (`record_branch_weight`).

    Under ``accelerate launch`` every process calls it: the Trainer trains data-parallel, the main process builds
    the feature caches first (the others then read them), and the validation features are shared between the
    processes, whose logits are gathered, so every process returns the same evaluation and stores the same
    threshold. Nothing is saved here: save the model on the main process (`result.trainer.save_model(...)` does
    that by itself).

    Example:

    ```python
    >>> squad = split_by_article(load_squad("squad-v1.1-dev-public.json.gz"), 0.2)  # doctest: +SKIP
    >>> result = train_on_squad(model, tokenizer, squad["train"], squad["validation"], "runs/qa", max_steps=100)  # doctest: +SKIP
    >>> result.validation.f1  # doctest: +SKIP

    ```
    """
    version = squad_version(validation_examples)
    if squad_version(train_examples) != version:
        raise ValueError(
            f"train_examples are SQuAD {squad_version(train_examples)} but validation_examples are SQuAD {version}: "
            "train and validate on the same version."
        )
    args = squad_training_arguments(output_dir, **training_arguments)
    # The main process writes the `datasets` caches of the features first; the others then load them.
    with args.main_process_first(desc="SQuAD features"):
        train_features = squad_features(train_examples, tokenizer, max_length, doc_stride, training=True)
        validation_features = squad_features(validation_examples, tokenizer, max_length, doc_stride, training=False)
    trainer = build_squad_trainer(
        model, tokenizer, train_features, args, pretrained_lr=pretrained_lr, new_lr=new_lr, weight_decay=weight_decay,
        new_weight_decay=new_weight_decay,
    )
    trainer.train()
    trained = trainer.model
    branch_weight_f1 = None
    if getattr(getattr(trained, "config", None), "has_two_heads", False):
        # ForceReader with two heads: how much of its separate-encoding branch to keep is chosen on validation.
        weight, branch_weight_f1, answers = choose_branch_weight(
            trained, validation_examples, validation_features, eval_batch_size, distributed=args.world_size > 1
        )
        record_branch_weight(trained.config, weight, branch_weight_f1)
        logger.info(f"Branch weight {weight} chosen on validation (F1 per weight: {branch_weight_f1}).")
    else:
        answers = _answers_from_features(
            trained, validation_examples, validation_features, eval_batch_size, distributed=args.world_size > 1
        )
    threshold = 0.0
    if version == "2.0":
        threshold = choose_null_threshold(answers, validation_examples)
        record_null_threshold(trained.config, threshold)
    evaluation = score_answers(answers, validation_examples, threshold)
    _record(trained.config, evaluation)
    return SquadTrainingResult(trainer, evaluation, branch_weight_f1)


def _record(config: Any, evaluation: SquadEvaluation) -> None:
    if not hasattr(config, "evaluation_results"):
        return
    dataset = DATASET_IDS[evaluation.version]
    # SQuAD 2.0: the split and the share answered too, so that a model that never answers, whose overall F1 is the
    # share of unanswerable questions, shows HasAns 0 and 0 % answered on its card.
    metrics = ("exact_match", "f1") if evaluation.version == "1.1" else (
        "exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "answered_percent"
    )
    for metric in metrics:
        if metric in evaluation.scores and math.isfinite(evaluation.scores[metric]):
            record_evaluation(
                config, task="question-answering", dataset=dataset, split="validation", metric=metric,
                value=round(float(evaluation.scores[metric]), 4),
            )
