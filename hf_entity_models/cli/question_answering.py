"""``hf-entity train forcereader``: fine-tune ForceReader (any rung of its ablation ladder) with its encoder on SQuAD
1.1 / 2.0; and the SQuAD pieces that ``evaluate`` and ``predict`` share (windows, versions, score lines).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .checkpoints import (
    check_tokenizer_fits,
    fast_tokenizer,
    held_back_loading_output,
    load_checkpoint,
    load_failure,
)
from .common import CliError, one_line, positive_float, positive_int
from .training import (
    add_config_overrides_option,
    add_encoder_option,
    add_output_options,
    add_schedule_options,
    add_step_options,
    check_config_fields,
    check_train_outputs,
    encoder_location,
    is_main_process,
    main_process_work,
    save_checkpoint,
    trainer_folder,
)

# The presets of ForceReader (its ablation ladder, from the joint baseline to the full model, and the full model read
# as printed): the keys of
# `configuration_forcereader.PRESETS`, named here so that building the parser imports no model code
# (tests/test_cli_package.py checks that both lists agree).
FORCEREADER_PRESETS = (
    "joint-bert", "sep-bert-reader", "multi-mode-reader", "cond-attention-reader", "forcereader", "forcereader-sum",
    "forcereader-paper",
)
# Question-answering windows when none are given: the SQuAD standard, within what the model reads.
DEFAULT_MAX_LENGTH = 384
DEFAULT_DOC_STRIDE = 128


# -------------------------------------------------------------------------------------------------- parser
def add_train_parser(models: argparse._SubParsersAction) -> None:
    """Register ``train forcereader``."""
    parser = models.add_parser(
        "forcereader", help="ForceReader: extractive question answering on SQuAD 1.1 / 2.0",
        description="Fine-tune ForceReader and its encoder on SQuAD 1.1 / 2.0 (--squad), validate on questions of "
        "other articles (split by article, or --validation) with the official EM / F1 (SQuAD 2.0: HasAns / NoAns "
        "and the no-answer threshold chosen on validation), and save model, tokenizer and model card to "
        "--output-dir.",
        epilog="Example: hf-entity train forcereader --squad squad-v1.1-dev-public.json.gz --validation-articles 8 "
        "--max-length 256 --doc-stride 96 --epochs 2 --output-dir runs/forcereader-squad",
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--squad", metavar="PATH_OR_ID",
        help="SQuAD 1.1 or 2.0 questions to train on (the official JSON, .json.gz, or a Hub dataset id with "
        "--train-split); without --validation its articles are split into training and validation articles, so "
        "that no article has questions on both sides",
    )
    data.add_argument(
        "--validation", metavar="PATH_OR_ID",
        help="SQuAD JSON file or Hub dataset id of the validation questions (articles other than --squad's)",
    )
    data.add_argument("--train-split", default="train", help="split of a Hub training dataset (default: train)")
    data.add_argument(
        "--validation-split", default="validation", help="split of a Hub validation dataset (default: validation)"
    )
    data.add_argument(
        "--squad-version", choices=("1.1", "2.0"),
        help="the SQuAD version the data must be (default: detected from the data; a 2.0 file with unanswerable "
        "questions is refused as 1.1)",
    )
    data.add_argument(
        "--validation-articles", type=positive_int, metavar="N",
        help="without --validation: articles of --squad held out for validation (default: a fifth)",
    )
    data.add_argument(
        "--train-articles", type=positive_int, metavar="N",
        help="without --validation: train on N of the other articles only (default: all of them)",
    )
    data.add_argument("--max-train-rows", type=positive_int, help="train on the first questions only")
    data.add_argument(
        "--max-validation-rows", type=positive_int, metavar="N",
        help="validate on the first N validation questions only (quick runs)",
    )
    architecture = parser.add_argument_group("model")
    architecture.add_argument(
        "--preset", choices=FORCEREADER_PRESETS, default="forcereader",
        help="the rung of the paper's ablation ladder (default: forcereader, the full model)",
    )
    add_encoder_option(architecture, "fine-tuned with the reader; its tokenizer is used")
    architecture.add_argument(
        "--dropout", type=float,
        help="classifier_dropout on the states the new layers read (default: 0.1)",
    )
    add_config_overrides_option(architecture, "ForceReaderConfig", '{"interaction_channels": 8}')
    training = parser.add_argument_group("training")
    add_schedule_options(training, epochs=2.0, batch_size=12, learning_rate=1e-4,
                         learning_rate_help="AdamW rate of the new layers")
    training.add_argument(
        "--encoder-learning-rate", type=positive_float, default=3e-5,
        help="AdamW rate of the pretrained encoder (default: 3e-05)",
    )
    add_step_options(training, weight_decay=1e-4)
    add_window_options(training, "--encoder's")
    add_output_options(parser, "training and validation")
    parser.set_defaults(handler=run_train, model="forcereader", command_name="train forcereader")


def add_window_options(group: argparse._ArgumentGroup, model: str) -> None:
    """--max-length and --doc-stride: the windows a long context is read in."""
    group.add_argument(
        "--max-length", type=positive_int,
        help=f"tokens per window, question included (default: {DEFAULT_MAX_LENGTH}, or the {model} maximum if "
        "smaller); longer contexts are read in overlapping windows, never cut",
    )
    group.add_argument(
        "--doc-stride", type=positive_int,
        help=f"context tokens that consecutive windows share (default: {DEFAULT_DOC_STRIDE}, or half of --max-length "
        "if less)",
    )


# --------------------------------------------------------------------------------------------------- train
def run_train(args: argparse.Namespace) -> int:
    """``hf-entity train forcereader``: fine-tune on SQuAD, score the validation questions officially (SQuAD 2.0:
    with the no-answer threshold chosen on them), save model + tokenizer + card, print the scores."""
    from transformers import set_seed

    from ..tasks.question_answering import train_on_squad

    check_train_outputs(args, [("--squad", args.squad), ("--validation", args.validation),
                               ("--encoder", args.encoder)])
    overrides = _config_overrides(args)
    encoder = encoder_location(args.encoder)
    max_length, doc_stride = squad_windows(args.max_length, args.doc_stride, _encoder_positions(encoder), "--encoder")
    train, validation = squad_training_data(args)
    set_seed(args.seed)
    model, tokenizer = build_question_answering_model(args, encoder, overrides)
    output_dir = Path(args.output_dir)
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
    with trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_squad(
            model, tokenizer, train, validation, output_dir=trainer_dir, max_length=max_length, doc_stride=doc_stride,
            pretrained_lr=args.encoder_learning_rate, new_lr=args.learning_rate, weight_decay=args.weight_decay,
            num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size, seed=args.seed,
            data_seed=args.seed, **steps,
        )
        with main_process_work() as is_main:
            if not is_main:
                return 0
            model = result.trainer.model  # its config holds the validation scores and, for SQuAD 2.0, the threshold
            evaluation = result.validation
            report: dict[str, Any] = {
                "checkpoint": str(output_dir),
                "preset": model.config.preset,
                "squad_version": evaluation.version,
                "train_questions": len(train),
                "train_articles": article_count(train),
                "validation_questions": len(validation),
                "validation_articles": article_count(validation),
                "train_titles": sorted(set(train["title"])),
                "validation_titles": sorted(set(validation["title"])),
                "max_length": max_length,
                "doc_stride": doc_stride,
                **evaluation.scores,
            }
            if evaluation.version == "2.0":
                report["null_score_diff_threshold"] = evaluation.null_score_diff_threshold
            if result.branch_weight_f1:
                report["branch_weight"] = model.config.branch_weight
                report["validation_f1_per_branch_weight"] = result.branch_weight_f1
            save_checkpoint(model, tokenizer, output_dir, report)
            for line in squad_score_lines("validation", evaluation, len(validation), article_count(validation)):
                print(line)
            if result.branch_weight_f1:
                print(f"separate-encoding branch weight {model.config.branch_weight:g}, chosen on validation (F1 per "
                      "weight: " + ", ".join(f"{w:g}: {f1:.1f}" for w, f1 in result.branch_weight_f1.items()) + ")")
            print(f"checkpoint saved to {output_dir}")
    return 0


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--config-overrides with --dropout on top, checked against the preset before any data or weights are loaded
    (the encoder's own config comes later, from --encoder)."""
    from ..models.forcereader import ForceReaderConfig

    overrides = dict(args.config_overrides)
    if args.dropout is not None:
        overrides["classifier_dropout"] = args.dropout
    check_config_fields(ForceReaderConfig, overrides, "forcereader", " (the encoder's config comes from --encoder)")
    try:
        ForceReaderConfig.from_preset(args.preset, **overrides)
    except (ValueError, TypeError) as error:
        raise CliError(
            f"--preset {args.preset} with {overrides} is not a valid ForceReader config: {one_line(error)}"
        ) from error
    return overrides


def _encoder_positions(encoder: str) -> int | None:
    """How many positions the encoder reads (None when its config does not say)."""
    from transformers import AutoConfig

    positions = getattr(AutoConfig.from_pretrained(encoder, trust_remote_code=False), "max_position_embeddings", None)
    return positions if isinstance(positions, int) else None


def squad_windows(
    max_length: int | None, doc_stride: int | None, positions: int | None, model_option: str
) -> tuple[int, int]:
    """The window length and stride: the given ones, checked against what the model reads, or the defaults (384 and
    128, within the model's positions). Contexts longer than a window are read in overlapping windows, so a window
    shorter than the context never drops text."""
    if max_length is None:
        max_length = DEFAULT_MAX_LENGTH if positions is None else min(DEFAULT_MAX_LENGTH, positions)
    elif positions is not None and max_length > positions:
        raise CliError(
            f"--max-length {max_length} is longer than the {positions} positions that the {model_option} model reads; "
            f"use --max-length {positions} or less (longer contexts are read in overlapping windows anyway)."
        )
    if doc_stride is None:
        doc_stride = min(DEFAULT_DOC_STRIDE, max_length // 2)
    elif doc_stride >= max_length:
        raise CliError(
            f"--doc-stride {doc_stride} must be smaller than --max-length {max_length}: it is the number of context "
            "tokens that consecutive windows share."
        )
    return max_length, doc_stride


def squad_training_data(args: argparse.Namespace) -> tuple[Any, Any]:
    """(training questions, validation questions) in the `load_squad` layout: --squad split by article, or --squad
    and --validation, which must not share an article."""
    from ..tasks.question_answering import split_by_article, squad_version

    if args.squad is None:
        raise CliError(
            "no training data: `train forcereader` trains on SQuAD; pass --squad FILE_OR_HUB_ID (the official JSON "
            "or .json.gz, e.g. train-v1.1.json, or a Hub dataset id such as rajpurkar/squad), optionally with "
            "--validation FILE_OR_HUB_ID."
        )
    if args.validation is not None and (args.validation_articles is not None or args.train_articles is not None):
        given = [option for option, value in (("--validation-articles", args.validation_articles),
                                              ("--train-articles", args.train_articles)) if value is not None]
        raise CliError(
            f"{' and '.join(given)} split --squad by article, but --validation gives the validation questions; "
            "drop one of them (--max-train-rows and --max-validation-rows size a run either way)."
        )
    squad = load_squad_questions(args.squad, args.squad_version, args.train_split, "--squad")
    if args.validation is None:
        train, validation = _split_by_article(args, squad, split_by_article)
    else:
        train = squad
        validation = load_squad_questions(args.validation, args.squad_version, args.validation_split, "--validation")
        if squad_version(train) != squad_version(validation):
            raise CliError(
                f"--squad {args.squad} is SQuAD {squad_version(train)} but --validation {args.validation} is SQuAD "
                f"{squad_version(validation)}; train and validate on the same version."
            )
        shared = sorted(set(train["title"]) & set(validation["title"]))
        if shared:
            raise CliError(
                f"--squad and --validation share {len(shared)} article(s), e.g. {shared[:3]}; validation questions "
                "must come from articles the model does not train on. Give files of different articles, or --squad "
                "alone to split it by article."
            )
    if args.max_train_rows is not None:
        train = train.select(range(min(args.max_train_rows, len(train))))
    if args.max_validation_rows is not None:
        validation = validation.select(range(min(args.max_validation_rows, len(validation))))
    if is_main_process():
        print(
            f"SQuAD {squad_version(train)}: training on {len(train)} questions of {article_count(train)} article(s), "
            f"validating on {len(validation)} questions of {article_count(validation)} other article(s)",
            file=sys.stderr,
        )
    return train, validation


def _split_by_article(args: argparse.Namespace, squad: Any, split_by_article: Any) -> tuple[Any, Any]:
    articles = article_count(squad)
    validation_articles = args.validation_articles or 0
    if validation_articles >= articles or validation_articles + (args.train_articles or 1) > articles:
        wanted = f"{validation_articles or 'some'} validation and {args.train_articles or 'at least one'} training"
        raise CliError(
            f"--squad {args.squad} has {articles} article(s), too few for {wanted} article(s); lower "
            "--validation-articles / --train-articles, or give the validation questions with --validation."
        )
    parts = split_by_article(
        squad, 0.2, num_validation_articles=args.validation_articles, num_train_articles=args.train_articles,
        seed=args.seed,
    )
    return parts["train"], parts["validation"]


def load_squad_questions(source: str, version: str | None, split: str | None, option: str) -> Any:
    """`load_squad`, where a SQuAD 2.0 source asked for as --squad-version 1.1 is refused in the CLI's terms."""
    from ..tasks.question_answering import load_squad, squad_version

    if version != "1.1":
        return load_squad(source, version, split=split)
    questions = load_squad(source, None, split=split)
    if squad_version(questions) == "1.1":
        return questions
    unanswerable = sum(questions["is_impossible"])
    if unanswerable:
        raise CliError(
            f"{option} {source} is SQuAD 2.0: {unanswerable} of its {len(questions)} questions are unanswerable, "
            "which SQuAD 1.1 has no place for; pass --squad-version 2.0, or leave --squad-version out to detect the "
            "version from the data."
        )
    return load_squad(source, "1.1", split=split)  # a 2.0 file without unanswerable questions reads as 1.1


def article_count(questions: Any) -> int:
    return len(set(questions["title"]))


def build_question_answering_model(args: argparse.Namespace, encoder: str, overrides: dict[str, Any]) -> tuple:
    """A fresh ForceReader (--preset) around the pretrained --encoder, and the encoder's fast tokenizer."""
    from safetensors import SafetensorError

    from ..models.forcereader import ForceReaderForQuestionAnswering

    tokenizer = fast_tokenizer(encoder)
    try:
        with held_back_loading_output(quiet_progress=Path(encoder).is_dir()):
            model = ForceReaderForQuestionAnswering.from_encoder(encoder, preset=args.preset, **overrides)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise CliError(load_failure(encoder, error, None)) from error
    check_tokenizer_fits(tokenizer, model, f"--encoder {encoder}")
    return model, tokenizer


def squad_score_lines(split: str, evaluation: Any, questions: int, articles: int) -> list[str]:
    """One line for EM / F1, and for SQuAD 2.0 one each for HasAns, NoAns, the questions answered (not "no answer")
    and the no-answer threshold: a model that never answers scores the share of unanswerable questions overall,
    and only these lines show that it answers nothing."""
    scores = evaluation.scores
    lines = [
        f"{split} exact match {evaluation.exact_match:.1f}, F1 {evaluation.f1:.1f} (SQuAD {evaluation.version}, "
        f"{questions} questions of {articles} article(s))"
    ]
    if evaluation.version != "2.0":
        return lines
    for prefix, kind in (("HasAns", "answerable"), ("NoAns", "unanswerable")):
        if scores.get(f"{prefix}_total"):
            lines.append(
                f"{split} {prefix} ({scores[f'{prefix}_total']} {kind} questions): exact match "
                f"{scores[f'{prefix}_exact']:.1f}, F1 {scores[f'{prefix}_f1']:.1f}"
            )
        else:
            lines.append(f"{split} {prefix}: no {kind} questions")
    answered, total = scores["answered_total"], scores["total"]
    lines.append(
        f"{split} answered {answered} of {total} questions ({scores['answered_percent']:.1f}%) with a span, "
        f"\"no answer\" to {total - answered}"
    )
    lines.append(
        f"no-answer threshold {evaluation.null_score_diff_threshold:.3f} (chosen on these {split} questions and "
        "stored in the checkpoint's config.null_score_diff_threshold: \"no answer\" when the null score exceeds the "
        "best span score by more)"
    )
    return lines


# ------------------------------------------------------------------------------------------------ checkpoints
def load_question_answering_checkpoint(checkpoint: str) -> tuple[Any, Any]:
    """Model (any AutoModelForQuestionAnswering: ForceReader, BERT, ...) and fast tokenizer of a checkpoint."""
    from transformers import AutoModelForQuestionAnswering

    return load_checkpoint(AutoModelForQuestionAnswering, checkpoint)


def model_positions(model: Any) -> int | None:
    """How many positions a question-answering model reads: its encoder's (ForceReader) or its own (BERT)."""
    config = getattr(model.config, "encoder_config", None) or model.config
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) else None
