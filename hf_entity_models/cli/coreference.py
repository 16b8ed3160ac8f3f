"""``hf-entity train petra`` and ``hf-entity train refreader``: the coreference models (PeTra, Referential Reader)
on GAP-format data, the built-in people-and-pronouns corpus, or whole CoNLL-2012 documents (``--conll``, e.g.
LitBank: the document mode by default, span mentions clustered by an entity memory; ``--coreference-mode tokens``
for the token memory); and the GAP scoring that ``evaluate`` shares.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import CliError, positive_float, positive_int
from .coreference_conll import (
    CONLL_BATCH_SIZE,
    CONLL_CHUNK_LENGTH,
    CONLL_HELD_OUT_SHARE,
    CONLL_PATIENCE,
    COREFERENCE_MODES,
    DOCUMENT_BATCH_SIZE,
    DOCUMENT_ENCODER_LEARNING_RATE,
    DOCUMENT_EPOCHS,
    TOKEN_MODE_EPOCHS,
    refuse_encoder_learning_rate,
    run_train_conll_documents,
)
from .coreference_models import (  # noqa: F401 (`evaluate`, `predict` and tests reach them here)
    build_model,
    config_overrides,
    coreference_pipeline,
    load_coreference_checkpoint,
    model_class,
)
from .training import (
    add_config_overrides_option,
    add_encoder_option,
    add_output_options,
    add_schedule_options,
    check_train_outputs,
    main_process_work,
    refuse_shared_examples,
    refuse_the_same_data,
    save_checkpoint,
    trainer_folder,
)

MODEL_NAMES = {"petra": "PeTra", "refreader": "Referential Reader"}
# What the built-in corpus uses when only --synthetic N is given: a quarter as many validation rows.
SYNTHETIC_VALIDATION_SHARE = 4
# Schedule defaults of GAP rows (those of --conll documents are in `coreference_conll`).
GAP_BATCH_SIZE, GAP_PATIENCE, GAP_EPOCHS = 32, 15, TOKEN_MODE_EPOCHS
# How to fix validation rows that the model also trains on.
_VALIDATION_ADVICE = "give validation rows the model does not train on (e.g. --validation gap-validation.tsv)"
_DESCRIPTIONS = {
    "petra": "Train PeTra (people tracking with a fixed memory) on GAP-format data, tune the decision threshold on "
    "validation and save model, tokenizer and model card to --output-dir. With --conll it learns whole-document "
    "coreference from CoNLL-2012 files (e.g. LitBank) instead, selected by CoNLL F1 with a tuned mention threshold. "
    "PeTra reads the features of a frozen pretrained encoder (--encoder). On --conll documents it learns the "
    "document mode by default (span mentions proposed and scored, clustered by an unbounded memory of entities; the "
    "epoch and the span threshold chosen by CoNLL F1), or its token memory with --coreference-mode tokens.",
    "refreader": "Train the Referential Reader on GAP-format data, tune the decision threshold on validation and "
    "save model, tokenizer and model card to --output-dir. With --conll it learns whole-document coreference from "
    "CoNLL-2012 files (e.g. LitBank) instead, selected by CoNLL F1 with a tuned mention threshold. It reads the "
    "features of a frozen encoder (--encoder), or its own word embeddings (--incremental), and can start from a "
    "saved checkpoint such as a language-model-pretrained RefReaderForCausalLM (--init-from). On --conll "
    "documents it learns the document mode by default (span mentions proposed and scored, clustered by an unbounded "
    "memory of entities), or its token memory with --coreference-mode tokens.",
}
_CONLL_EXAMPLE = "--conll litbank/conll --epochs 10 --output-dir runs/{model}-litbank"
_EXAMPLES = {
    "petra": "hf-entity train petra --synthetic 1200 --epochs 5 --output-dir runs/petra-people",
    "refreader": "hf-entity train refreader --incremental --init-from runs/refreader-lm --train gap-development.tsv "
    "--validation gap-validation.tsv --output-dir runs/refreader-incremental",
}


# ------------------------------------------------------------------------------------------------- parsers
def add_train_parsers(models: argparse._SubParsersAction) -> None:
    """Register ``train petra`` and ``train refreader``."""
    for model in ("petra", "refreader"):
        _add_train_parser(models, model)


def _add_train_parser(models: argparse._SubParsersAction, model: str) -> None:
    name = MODEL_NAMES[model]
    parser = models.add_parser(
        model, help=f"{name}: pronoun coreference on GAP-format data (or the built-in corpus), or whole-document "
        "coreference on CoNLL-2012 files",
        description=_DESCRIPTIONS[model],
        epilog=f"Examples: {_EXAMPLES[model]}; hf-entity train {model} {_CONLL_EXAMPLE.format(model=model)}",
    )
    data = parser.add_argument_group(
        "data (either --train and --validation, --synthetic, or --conll with an optional --validation)"
    )
    data.add_argument("--train", metavar="PATH_OR_ID", help="GAP TSV file or Hub dataset id of the training rows")
    data.add_argument(
        "--validation", metavar="PATH_OR_ID",
        help="GAP TSV file or Hub dataset id of the validation rows; with --conll, a CoNLL-2012 file or folder of "
        "validation documents (none may also be a training document)",
    )
    data.add_argument("--train-split", default="train", help="split of a Hub training dataset (default: train)")
    data.add_argument(
        "--validation-split", default="validation", help="split of a Hub validation dataset (default: validation)"
    )
    data.add_argument(
        "--synthetic", type=positive_int, metavar="N",
        help="train on N rows of the built-in people-and-pronouns corpus (no data needed)",
    )
    data.add_argument(
        "--synthetic-validation", type=positive_int, metavar="M",
        help=f"validation rows of the built-in corpus (default: N/{SYNTHETIC_VALIDATION_SHARE}); ignored with "
        "--validation",
    )
    data.add_argument("--max-train-rows", type=positive_int, help="train on the first rows only")
    data.add_argument(
        "--conll", metavar="PATH",
        help="train on whole-document coreference instead: a CoNLL-2012 file or folder of them (e.g. LitBank's conll "
        "folder), every mention of every entity. The epoch and the mention threshold are chosen by CoNLL F1 on "
        f"--validation, or, without it, on the last {100 // CONLL_HELD_OUT_SHARE}%% of these documents (at least one; "
        "their names are printed), held out from training",
    )
    data.add_argument(
        "--coreference-mode", choices=COREFERENCE_MODES,
        help="with --conll: how the documents are learned. 'document' (default): whole documents, one per step; span "
        "mentions proposed and scored, clustered by an unbounded memory of entities (config.coreference_mode="
        "'document'); the epoch is chosen by CoNLL F1 on the validation documents, then the span threshold. "
        f"'tokens': the paper's token memory of {'PeTra' if model == 'petra' else 'the Referential Reader'} on "
        "chunks of --chunk-length tokens, with a tuned mention threshold",
    )
    data.add_argument(
        "--chunk-length", type=positive_int, metavar="N",
        help=f"with --conll --coreference-mode tokens: tokens per training chunk (default: {CONLL_CHUNK_LENGTH}); "
        "validation documents are read whole",
    )

    architecture = parser.add_argument_group("model")
    add_encoder_option(
        architecture, "its frozen features are read and its tokenizer is used"
        + ("; with --incremental only its tokenizer" if model == "refreader" else ""),
    )
    if model == "refreader":
        architecture.add_argument(
            "--incremental", action="store_true",
            help="a purely incremental reader with its own word embeddings over the vocabulary of the --encoder's "
            "tokenizer (no encoder weights are loaded)",
        )
    architecture.add_argument(
        "--init-from", metavar="CHECKPOINT",
        help=f"start from a saved {name} checkpoint folder or Hub id"
        + (" (e.g. a language-model-pretrained RefReaderForCausalLM)" if model == "refreader" else "")
        + " instead of a fresh model; its tokenizer is used when it has one saved, else the --encoder's. "
        "Architecture options must match the checkpoint",
    )
    cells = "10, paper range 2-20" if model == "petra" else "2; the paper uses 2 or 4"
    architecture.add_argument("--num-memory-cells", type=positive_int, help=f"memory cells (default: {cells})")
    if model == "petra":
        architecture.add_argument("--memory-variant", choices=("vanilla", "learned_init", "fixed_key"),
                                  help="memory variant (default: vanilla)")
    architecture.add_argument("--hidden-size", type=positive_int, help="GRU and memory size (default: 300)")
    if model == "petra":
        architecture.add_argument("--mlp-hidden-size", type=positive_int, help="width of the MLPs (default: 300)")
    where = "the GRU output" if model == "petra" else "the input features, the pre-recurrent state and the output"
    architecture.add_argument("--dropout", type=float, help=f"dropout on {where} (default: 0.5)")
    config_name = "PetraConfig" if model == "petra" else "RefReaderConfig"
    add_config_overrides_option(architecture, config_name, '{"encoder_layers": [-2, -1]}')

    training = parser.add_argument_group("training")
    add_schedule_options(training, epochs=GAP_EPOCHS, batch_size=GAP_BATCH_SIZE, learning_rate=1e-3,
                         learning_rate_help="Adam(W) learning rate (the document mode: of everything but the encoder)")
    _data_dependent_batch_size(training)
    _data_dependent_epochs(training)
    if model == "petra":
        training.add_argument(
            "--encoder-learning-rate", type=positive_float, metavar="LR",
            help="with --conll (document mode) and a fine-tuned encoder (--config-overrides '{\"freeze_encoder\": "
            f"false}}', optionally with \"trainable_encoder_layers\"): its learning rate (default: "
            f"{DOCUMENT_ENCODER_LEARNING_RATE:g})",
        )
    training.add_argument(
        "--early-stopping-patience", type=positive_int,
        help=f"epochs without validation improvement before stopping (default: {GAP_PATIENCE}; {CONLL_PATIENCE} with "
        "--conll --coreference-mode tokens, whose epochs are longer; none in the document mode: every epoch runs "
        "and the best is kept)",
    )
    training.add_argument(
        "--cache-dir", help="folder for cached encoder features (reused by later runs"
        + ("; unused with --incremental)" if model == "refreader" else ")"),
    )
    add_output_options(parser, "training and encoding the features")
    parser.set_defaults(handler=run_train, model=model, command_name=f"train {model}")


def _data_dependent_batch_size(group: argparse._ArgumentGroup) -> None:
    """--batch-size defaults to None, so that a run can tell a given size from the default of its data (GAP rows or
    CoNLL chunks)."""
    action = next(action for action in group._group_actions if action.dest == "batch_size")
    action.default = None
    action.help = (
        f"rows per batch and process (default: {GAP_BATCH_SIZE} GAP rows; {CONLL_BATCH_SIZE} chunks of "
        f"--chunk-length tokens with --conll --coreference-mode tokens; {DOCUMENT_BATCH_SIZE} whole document in the "
        "document mode)"
    )


def _data_dependent_epochs(group: argparse._ArgumentGroup) -> None:
    """--epochs defaults to None, so that the document mode can take its own default."""
    action = next(action for action in group._group_actions if action.dest == "epochs")
    action.default = None
    action.help = f"training epochs (default: {GAP_EPOCHS:g}; {DOCUMENT_EPOCHS} in the --conll document mode)"


# --------------------------------------------------------------------------------------------------- train
def run_train(args: argparse.Namespace) -> int:
    """``hf-entity train petra|refreader``: train, tune the threshold on validation, save model + tokenizer + card,
    print the scores."""
    from transformers import set_seed

    from ..tasks.coreference import gap_gold, score_gap, train_on_gap

    if args.conll is not None:
        return run_train_conll_documents(args)
    if args.chunk_length is not None:
        raise CliError("--chunk-length applies to --conll documents; add --conll PATH or drop it.")
    if args.coreference_mode is not None:
        raise CliError(
            f"--coreference-mode {args.coreference_mode} chooses how --conll documents are learned; GAP-format data "
            "and the built-in corpus train the token mode: add --conll PATH or drop --coreference-mode."
        )
    refuse_encoder_learning_rate(args, "GAP-format data and the built-in corpus")
    check_train_outputs(args, [("--train", args.train), ("--validation", args.validation),
                               ("--encoder", args.encoder), ("--init-from", args.init_from)])
    overrides = config_overrides(args)
    train_rows, validation_rows, dataset_id = training_data(args)
    set_seed(args.seed)
    model, tokenizer = build_model(args, overrides)
    output_dir = Path(args.output_dir)
    with trainer_folder(args.trainer_dir) as trainer_dir:
        result = train_on_gap(
            model,
            tokenizer,
            train_rows,
            validation_rows,
            output_dir=trainer_dir,
            cache_dir=args.cache_dir,
            max_train_rows=args.max_train_rows,
            early_stopping_patience=args.early_stopping_patience or GAP_PATIENCE,
            num_train_epochs=args.epochs or GAP_EPOCHS,
            per_device_train_batch_size=args.batch_size or GAP_BATCH_SIZE,
            learning_rate=args.learning_rate,
            seed=args.seed,
            data_seed=args.seed,
            **_dataset_label(dataset_id),
        )
        with main_process_work() as is_main:
            if not is_main:
                return 0
            model = result.trainer.model  # the best epoch's weights, threshold stored in its config
            scores = result.validation_scores
            threshold = float(model.config.coref_threshold)
            gold = gap_gold(validation_rows)
            baseline = score_gap(gold, {row.example_id: (True, True) for row in gold})
            report = {
                "checkpoint": str(output_dir),
                "validation_rows": len(gold),
                "threshold": threshold,
                **scores.as_dict(),
                "all_positive_baseline_f1": baseline.f1,
                "epochs_run": len(result.epoch_seconds),
            }
            save_checkpoint(model, tokenizer, output_dir, report)
            print(score_line("validation", scores, threshold))
            print(f"all-positive baseline F1 {100 * baseline.f1:.1f}; checkpoint saved to {output_dir}")
    return 0


def training_data(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(train rows, validation rows, dataset id for the model card), as datasets in the `load_gap` layout; validation
    rows with a repeated id, or that the model also trains on, are refused (before any model is built)."""
    from ..tasks.coreference import load_gap
    from ..tasks.coreference.gap import shared_ids
    from ..tasks.coreference.synthetic import PEOPLE_CORPUS_ID, generate_people_corpus

    if args.synthetic is not None and args.train is not None:
        raise CliError("give either --train (with --validation) or --synthetic N, not both.")
    if args.synthetic is None and (args.train is None or args.validation is None):
        raise CliError(
            "no training data: pass --train PATH --validation PATH (GAP TSV files or Hub dataset ids), "
            "--synthetic N to use the built-in people-and-pronouns corpus, or --conll PATH (CoNLL-2012 documents)."
        )
    if args.synthetic is not None:
        train = generate_people_corpus(args.synthetic, seed=args.seed, id_prefix="people-train")
        training_source = f"--synthetic {args.synthetic}"
        if args.validation is None:
            size = args.synthetic_validation or max(1, args.synthetic // SYNTHETIC_VALIDATION_SHARE)
            # Another seed: validation stories are new combinations of names and templates.
            validation = generate_people_corpus(size, seed=args.seed + 1, id_prefix="people-validation")
            return train, validation, PEOPLE_CORPUS_ID
    else:
        refuse_the_same_data(("--train", args.train, args.train_split),
                             ("--validation", args.validation, args.validation_split), _VALIDATION_ADVICE)
        train = load_gap(args.train, split=args.train_split)  # a repeated training row is trained on twice: no harm
        training_source = f"--train {args.train}"
    validation = read_gap_rows(args.validation, args.validation_split, "--validation")
    trained = train if args.max_train_rows is None else train.select(range(min(args.max_train_rows, len(train))))
    refuse_shared_examples(shared_ids(trained, validation), f"--validation {args.validation}", training_source,
                           _VALIDATION_ADVICE)
    return train, validation, _dataset_id(args.validation)


def read_gap_rows(source: str, split: str | None, option: str | None = None) -> Any:
    """The GAP rows of a file or Hub dataset (`load_gap`), refused in one line when an id occurs more than once
    (predictions and scores are matched to rows by id); `option` (e.g. "--gap-file") names the source."""
    from ..tasks.coreference.gap import check_unique_ids, load_gap

    rows = load_gap(source, split=split)
    try:
        check_unique_ids(rows, f"{option} {source}" if option else source)
    except ValueError as error:
        raise CliError(str(error)) from error
    return rows


def _dataset_id(source: str) -> str:
    """A Hub id stays as it is; a local GAP file becomes "gap" (the card links the GAP dataset), others the stem."""
    path = Path(source)
    if not path.exists():
        return source
    return "gap" if path.name.lower().startswith("gap") else path.stem


def _dataset_label(dataset_id: str) -> dict[str, str | None]:
    """Id and display name that the validation scores are recorded under (the model card shows them)."""
    from ..tasks.coreference.synthetic import PEOPLE_CORPUS_ID, PEOPLE_CORPUS_NAME

    names = {PEOPLE_CORPUS_ID: PEOPLE_CORPUS_NAME, "gap": "GAP"}
    return {"dataset": dataset_id, "dataset_name": names.get(dataset_id)}


def score_line(split: str, scores: Any, threshold: float) -> str:
    return (
        f"{split} F1 {100 * scores.f1:.1f} (masculine {100 * scores.masculine_f1:.1f}, feminine "
        f"{100 * scores.feminine_f1:.1f}, bias {scores.bias:.2f}) at threshold {threshold:.2f}"
    )


# ----------------------------------------------------------------------------------------- checkpoints, scores
def candidate_probabilities(model: Any, tokenizer: Any, rows: Any, batch_size: int = 32) -> list[list[float]]:
    """Link probability of every GAP row's pronoun with A and with B, in row order (a progress bar shows).

    Uses the same tokenization, spans and link scheme as training (`prepare_gap_dataset` with the model's
    `gap_link_scheme`), so the scores equal the ones the threshold was tuned on.

    Args:
        model: A coreference model (`PetraForCoreference`, `RefReaderForCoreference`), on any device: the batches
            are moved to `model.device`.
        tokenizer: Its fast tokenizer.
        rows: GAP rows in the `load_gap` layout.
        batch_size: Rows per forward pass.

    Returns:
        ``[[p_a, p_b], ...]``, one pair per row.

    Example:
        >>> candidate_probabilities(model, tokenizer, load_gap("gap-validation.tsv"))[:1]  # doctest: +SKIP
        [[0.071, 0.003]]
    """
    import torch
    from tqdm.auto import tqdm

    from ..tasks.coreference import CoreferenceCollator, prepare_gap_dataset
    from ..tasks.coreference.training import gap_link_scheme

    # The scores do not depend on the labelled pairs, but the rows are then prepared exactly as in training.
    prepared = prepare_gap_dataset(rows, tokenizer, link_scheme=gap_link_scheme(model))
    columns = ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans"]
    prepared = prepared.select_columns([column for column in columns if column in prepared.column_names])
    collator = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id or 0)
    model.eval()
    probabilities: list[list[float]] = []
    with torch.no_grad(), tqdm(total=len(prepared), desc="Scoring", unit="row") as progress:
        for start in range(0, len(prepared), batch_size):
            batch = collator([prepared[index] for index in range(start, min(start + batch_size, len(prepared)))])
            # The collator builds CPU tensors; the model may sit on a GPU (e.g. after `pipeline(...)` placed it).
            batch = {key: value.to(model.device) for key, value in batch.items()}
            probabilities.extend(model(**batch).candidate_scores[:, :2].float().cpu().tolist())
            progress.update(len(batch["input_ids"]))
    return probabilities
