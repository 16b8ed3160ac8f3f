"""``hf-entity evaluate``: score a checkpoint, whatever its task (told by its config.json): GAP scores of a
coreference model, or its CoNLL-2012 scores on whole documents (``--conll``), the official SQuAD scores of a
question-answering model, the perplexities of a language model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .checkpoints import (
    add_trust_remote_code_option,
    architecture_of,
    checkpoint_inputs,
    checkpoint_kind,
    stored_config,
    trust_remote_code_for,
    require_checkpoint,
    trusting_remote_code,
)
from .common import (
    CliError,
    add_overwrite_option,
    add_threads_option,
    check_output_file,
    finite_float,
    given_options,
    json_safe,
    positive_int,
    write_json,
)
from .coreference_conll import conll_table, evaluate_document_checkpoint, write_responses
from .language_modeling import BOOK_SPLIT_OPTIONS, DEFAULT_WINDOW_LENGTH, add_book_split_options
from .question_answering import add_window_options

# The causal LMs that `evaluate` and `predict` read CoNLL / LAMBADA / prompts with.
LANGUAGE_MODEL_ARCHITECTURES = ("GPT2EForCausalLM", "GPT2LMHeadModel")
# Options that only one kind of checkpoint reads (argparse destination -> option).
_QA_OPTIONS = {
    "squad_version": "--squad-version", "predictions": "--predictions", "max_length": "--max-length",
    "doc_stride": "--doc-stride", "null_threshold": "--null-threshold",
}
_LM_OPTIONS = {
    "conll": "--conll", "lambada": "--lambada", "lambada_limit": "--lambada-limit", "window_length": "--window-length",
    **BOOK_SPLIT_OPTIONS,
}
# Options of a coreference checkpoint scored on --conll documents.
_CONLL_COREFERENCE_OPTIONS = {
    "gold_mentions": "--gold-mentions", "mention_threshold": "--mention-threshold",
    "span_threshold": "--span-threshold", "responses": "--responses",
}
# Rows per forward pass when --batch-size is not given: GAP rows, SQuAD windows and LM windows are short, whole
# CoNLL documents are long (thousands of tokens each for LitBank).
DEFAULT_BATCH_SIZE, DEFAULT_CONLL_DOCUMENTS_PER_BATCH = 32, 4


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``evaluate``."""
    parser = commands.add_parser(
        "evaluate",
        help="GAP or CoNLL-2012 scores of a coreference checkpoint, SQuAD scores of a question-answering one, or the "
        "perplexity of a language model",
        description="Score a coreference checkpoint on GAP-format rows at its stored threshold "
        "(config.coref_threshold), or on whole CoNLL-2012 documents (--conll: MUC, B3, CEAF-m, CEAF-e, BLANC, LEA, "
        "the CoNLL F1 and mention detection, at config.mention_threshold; a document-mode checkpoint at "
        "config.span_threshold, with the CoNLL F1 of the gold mentions it clusters), or a question-answering "
        "checkpoint "
        "(ForceReader or any AutoModelForQuestionAnswering folder; its config.json tells which) on SQuAD questions with the official "
        "EM / F1 (SQuAD 2.0: also HasAns / NoAns, the share of questions answered with a span and the best "
        "thresholds, at config.null_score_diff_threshold). A language model (GPT2E, or a plain GPT-2 "
        "GPT2LMHeadModel) is scored on CoNLL-2012 documents (--conll: perplexity, for GPT2E with and without entity "
        "ids) and / or on LAMBADA (--lambada: perplexity of the last word and last-word accuracy).",
        epilog="Example (GPT2E): hf-entity evaluate runs/gpt2e-litbank --conll litbank/conll --split test "
        "--lambada lambada_test.jsonl --lambada-limit 500. Example (PeTra, Referential Reader on CoNLL-2012 "
        "documents): hf-entity evaluate runs/petra-litbank --conll test-books/ --responses petra.conll",
    )
    parser.add_argument("checkpoint", help="checkpoint folder (or Hub id) with model and tokenizer")
    parser.add_argument(
        "gap_file", metavar="DATA_FILE", nargs="?",
        help="GAP TSV file (coreference), SQuAD JSON / .json.gz file (question answering), or Hub dataset id; a "
        "language model reads --conll / --lambada instead",
    )
    parser.add_argument(
        "--split",
        help="split of a Hub dataset (question answering: default validation); language model: the held-out books "
        "of --conll to score (validation or test, split like `train gpt2e` does with --validation-books, "
        "--test-books, --split-seed; default: every document)",
    )
    parser.add_argument("--sweep", action="store_true", help="coreference: also report the best threshold in 0.00..0.99")
    qa = parser.add_argument_group("question answering")
    qa.add_argument(
        "--squad-version", choices=("1.1", "2.0"),
        help="the SQuAD version the file must be (default: detected from the data)",
    )
    add_window_options(qa, "model's")
    qa.add_argument(
        "--null-threshold", type=finite_float, metavar="T",
        help="SQuAD 2.0: answer \"no answer\" when the null score exceeds the best span score by more than T "
        "(default: the checkpoint's config.null_score_diff_threshold, else 0)",
    )
    qa.add_argument(
        "--predictions", metavar="JSON",
        help="also write the answers as the official SQuAD scorer reads them ({id: answer})",
    )
    conll = parser.add_argument_group(
        "CoNLL-2012 documents (--conll: coreference and language-model checkpoints; the other options: PeTra or "
        "Referential Reader checkpoints)"
    )
    conll.add_argument(
        "--conll", metavar="DIR_OR_FILE",
        help="CoNLL-2012 coreference files (a .conll file or a folder). A coreference checkpoint reads every document "
        "whole and is scored with the CoNLL-2012 metrics (singletons scored, as LitBank is) and mention detection "
        "(exact spans); a language model gets its perplexity over the documents, read window after window (GPT2E: "
        "with the gold entity ids and with them zeroed)",
    )
    conll.add_argument(
        "--gold-mentions", action="store_true", default=None,  # None when not given: see `given_options`
        help="cluster the gold mentions instead of the model's own (scores the clustering alone)",
    )
    conll.add_argument(
        "--mention-threshold", type=probability, metavar="P",
        help="token-mode checkpoints: a token is a mention when the memory writes it with at least this probability "
        "(default: the checkpoint's config.mention_threshold, chosen on validation by `train --conll "
        "--coreference-mode tokens`)",
    )
    conll.add_argument(
        "--span-threshold", type=finite_float, metavar="LOGIT",
        help="document-mode checkpoints (config.coreference_mode='document'): a candidate span is a mention when its "
        "mention logit reaches this value (default: the checkpoint's config.span_threshold, chosen on validation by "
        "`train --conll`)",
    )
    conll.add_argument(
        "--responses", metavar="CONLL_FILE",
        help="also write the clusters found as a CoNLL-2012 file (one block per document, each with the '#begin "
        "document' line of its key document), which the reference scorer (scorer.pl) reads as the response against "
        "the --conll key; not inside the --conll folder",
    )
    conll.add_argument(
        "--json", action="store_true",
        help="print the result as JSON instead of the table (the other checkpoints always print JSON)",
    )
    language_model = parser.add_argument_group("language model (GPT2E or GPT-2 checkpoints)")
    language_model.add_argument(
        "--window-length", type=positive_int,
        help=f"tokens per window (default: {DEFAULT_WINDOW_LENGTH}, or the model's positions if fewer)",
    )
    add_book_split_options(language_model, "with --split: ")
    language_model.add_argument(
        "--lambada", metavar="JSONL",
        help='LAMBADA texts, one {"text": ...} per line: perplexity of the last word and last-word accuracy (no '
        "entity ids)",
    )
    language_model.add_argument(
        "--lambada-limit", type=positive_int, metavar="N", help="score the first N LAMBADA texts only"
    )
    parser.add_argument(
        "--batch-size", type=positive_int,
        help=f"rows (windows; language model: documents) per forward pass (default: {DEFAULT_BATCH_SIZE}; a "
        f"coreference checkpoint on --conll: {DEFAULT_CONLL_DOCUMENTS_PER_BATCH} whole documents)",
    )
    parser.add_argument("--output", help="also write the JSON result to this file")
    add_overwrite_option(parser)
    add_trust_remote_code_option(parser)
    add_threads_option(parser, "scoring")
    parser.set_defaults(handler=run_evaluate, command_name="evaluate")


def run_evaluate(args: argparse.Namespace) -> int:
    """``hf-entity evaluate``: GAP scores at the stored threshold (and the best one with --sweep), the CoNLL-2012
    scores of a coreference checkpoint on --conll documents (a table), the official SQuAD scores of a
    question-answering checkpoint, or the perplexities of a language model, as JSON. A checkpoint that needs code of
    its own is refused first, unless --trust-remote-code was given."""
    with trusting_remote_code(args.trust_remote_code):
        trust_remote_code_for(args.checkpoint)
        return _run_evaluate(args)


def _run_evaluate(args: argparse.Namespace) -> int:
    data_files = [source for source in (args.gap_file, args.conll, args.lambada) if source is not None]
    inputs = [*(Path(source) for source in data_files), *checkpoint_inputs(args.checkpoint)]
    check_output_file(args.output, "--output", args.overwrite, inputs)
    outputs = [("--output", args.output), ("--responses", args.responses), ("--predictions", args.predictions)]
    for option, output in outputs:
        refuse_output_inside_input_folders(output, option, [("DATA_FILE", args.gap_file), ("--conll", args.conll),
                                                            ("--lambada", args.lambada)])
    language_model = architecture_of(args.checkpoint, LANGUAGE_MODEL_ARCHITECTURES.__contains__)
    coreference = architecture_of(args.checkpoint, is_coreference_architecture)
    if coreference is not None and args.conll is not None:
        return _evaluate_conll_coreference(args, coreference, inputs)
    if args.conll is None and given_options(args, _CONLL_COREFERENCE_OPTIONS) and coreference is not None:
        raise CliError(
            f"{' and '.join(given_options(args, _CONLL_COREFERENCE_OPTIONS))} apply to CoNLL-2012 documents; add "
            "--conll DIR_OR_FILE or drop them."
        )
    refuse_options_of_other_checkpoints(
        args, _CONLL_COREFERENCE_OPTIONS, "coreference checkpoints (PeTra, Referential Reader) scored on --conll"
    )
    args.batch_size = args.batch_size or DEFAULT_BATCH_SIZE
    if language_model is not None:
        return _evaluate_language_model(args, language_model)
    if args.conll is not None:
        require_checkpoint(args.checkpoint)
        raise CliError(
            f"--conll scores a coreference checkpoint (PeTra, Referential Reader: CoNLL-2012 metrics) or a language "
            f"model (GPT2E, GPT-2: perplexity), but {args.checkpoint} is {checkpoint_kind(args.checkpoint)}; drop "
            "--conll."
        )
    refuse_options_of_other_checkpoints(args, _LM_OPTIONS, "language-model checkpoints (GPT2E, GPT-2)")
    if args.gap_file is None:
        require_checkpoint(args.checkpoint)
        raise CliError(
            f"give the DATA_FILE to score {args.checkpoint} on: a GAP TSV file (coreference), a SQuAD JSON file "
            "(question answering) or a Hub dataset id."
        )
    if architecture_of(args.checkpoint, is_question_answering_architecture) is not None:
        return _evaluate_question_answering(args, inputs)
    refuse_options_of_other_checkpoints(args, _QA_OPTIONS, "question-answering checkpoints")
    return _evaluate_coreference(args)


def refuse_output_inside_input_folders(output: str | None, option: str, inputs: list[tuple[str, str | None]]) -> None:
    """Refuse an output file inside a folder that the command reads (e.g. --conll DIR): the next command that reads
    the folder would read the output as data too (a response file as a second copy of every key document).

    Args:
        output: The output file (None: not given).
        option: Its option, for the message (e.g. "--responses").
        inputs: (option, location) of every input; locations that are not folders (files, Hub ids, None) are skipped.
    """
    if output is None:
        return
    # Both spellings: the path as given and with links resolved (a linked folder may live elsewhere).
    paths = {Path(os.path.abspath(output)), Path(output).resolve()}
    for input_option, location in inputs:
        if location is None or not Path(location).is_dir():
            continue
        roots = {Path(os.path.abspath(location)), Path(location).resolve()}
        if any(path.is_relative_to(root) for path in paths for root in roots):
            raise CliError(
                f"{option} {output} is inside {input_option} {location}, which this command reads: reading that folder "
                "again would take the output for data; write it outside the folder."
            )


def probability(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {value}")
    return number


def is_coreference_architecture(name: str) -> bool:
    """A coreference head (PetraForCoreference, RefReaderForCoreference)."""
    return name.endswith("ForCoreference")


def is_question_answering_architecture(name: str) -> bool:
    """A question-answering class (ForceReaderForQuestionAnswering, BertForQuestionAnswering, ...)."""
    return name.endswith("ForQuestionAnswering")


def refuse_options_of_other_checkpoints(args: argparse.Namespace, options: dict[str, str], owners: str) -> None:
    """Options of one kind of checkpoint (`owners`) given for another: one line naming them."""
    given = given_options(args, options)
    if not given:
        return
    require_checkpoint(args.checkpoint)
    raise CliError(
        f"{' and '.join(given)} only apply to {owners}, but {args.checkpoint} is {checkpoint_kind(args.checkpoint)}; "
        "drop them."
    )


def _print_result(result: dict[str, Any], output: str | None) -> None:
    result = json_safe(result)
    print(json.dumps(result, indent=2))
    if output:
        write_json(Path(output), result)


def _evaluate_coreference(args: argparse.Namespace) -> int:
    from ..tasks.coreference import gap_gold, score_gap_probabilities, sweep_threshold
    from .coreference import candidate_probabilities, load_coreference_checkpoint, read_gap_rows

    model, tokenizer = load_coreference_checkpoint(args.checkpoint)
    rows = read_gap_rows(args.gap_file, args.split)  # a repeated id: refused before any row is scored
    scores = candidate_probabilities(model, tokenizer, rows, args.batch_size)
    gold = gap_gold(rows)
    probabilities = {row.example_id: (float(a), float(b)) for row, (a, b) in zip(gold, scores)}
    threshold = float(model.config.coref_threshold)
    at_threshold = score_gap_probabilities(gold, probabilities, threshold)
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint, "gap_file": args.gap_file, "rows": len(gold), "threshold": threshold,
        **at_threshold.as_dict(),
    }
    if args.sweep:
        sweep = sweep_threshold(gold, probabilities)
        result["best_threshold"] = sweep.best_threshold
        result["best"] = sweep.best_scores.as_dict()
    _print_result(result, args.output)
    return 0


def _evaluate_conll_coreference(args: argparse.Namespace, architecture: str, inputs: list[Path]) -> int:
    """CoNLL-2012 scores (MUC, B3, CEAF-m, CEAF-e, BLANC, LEA, CoNLL F1) and mention detection of a coreference
    checkpoint on every --conll document, read whole, as a table (or JSON); --responses writes the clusters found."""
    import tempfile

    from ..tasks.coreference import read_conll_coreference, score_coreference
    from ..tasks.coreference.conll_training import conll_evaluation_trainer, conll_responses, mention_scores
    from .coreference import load_coreference_checkpoint

    _check_conll_coreference_options(args, architecture, inputs)
    document_mode = stored_config(args.checkpoint).get("coreference_mode") == "document"
    _check_threshold_option(args, document_mode)
    documents = read_conll_coreference(args.conll)  # a file it refuses is refused before the model loads
    if document_mode:
        return evaluate_document_checkpoint(args, architecture, documents)
    model, tokenizer = load_coreference_checkpoint(args.checkpoint)
    gold_mentions = bool(args.gold_mentions)
    threshold = args.mention_threshold
    if threshold is None:
        threshold = float(getattr(model.config, "mention_threshold", 0.5))
    with tempfile.TemporaryDirectory(prefix="hf-entity-evaluate-") as trainer_dir:
        trainer = conll_evaluation_trainer(
            model, tokenizer, trainer_dir, batch_size=args.batch_size or DEFAULT_CONLL_DOCUMENTS_PER_BATCH
        )
        responses = conll_responses(trainer, documents, tokenizer, threshold, gold_mentions=gold_mentions)
    scores = score_coreference(documents, responses)
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint, "model": architecture, "conll": args.conll, "documents": len(documents),
        "gold_mentions": gold_mentions, "mention_threshold": None if gold_mentions else threshold,
        **scores, **mention_scores(documents, responses),
        "key_mentions": sum(len(document.mentions) for document in documents),
        "response_mentions": sum(len(document.mentions) for document in responses),
    }
    if args.json:
        _print_result(result, args.output)
    else:
        print(conll_table(result))
        if args.output:
            write_json(Path(args.output), json_safe(result))
    if args.responses:
        write_responses(responses, Path(args.responses))
        print(f"wrote the clusters of {len(responses)} documents to {args.responses}", file=sys.stderr)
    return 0


def _check_conll_coreference_options(args: argparse.Namespace, architecture: str, inputs: list[Path]) -> None:
    """A coreference checkpoint on --conll: no option of other data or checkpoints, inputs that exist, output files
    that can be written; all before the model loads."""
    if args.gap_file is not None:
        raise CliError(
            f"give one data set to score {args.checkpoint} on: the GAP DATA_FILE {args.gap_file} or --conll "
            f"{args.conll}, not both."
        )
    if args.sweep:
        raise CliError(
            "--sweep tunes the GAP decision threshold; on --conll documents the mention threshold is the checkpoint's "
            "config.mention_threshold or --mention-threshold P: drop --sweep."
        )
    if args.split is not None:
        raise CliError(
            f"--split selects the held-out books of a language model's --conll; {args.checkpoint} ({architecture}) "
            "is scored on every document of --conll: drop --split (give a file or folder of the documents to score)."
        )
    refuse_options_of_other_checkpoints(args, _QA_OPTIONS, "question-answering checkpoints")
    language_model_options = {key: value for key, value in _LM_OPTIONS.items() if key != "conll"}
    refuse_options_of_other_checkpoints(args, language_model_options, "language-model checkpoints (GPT2E, GPT-2)")
    for option, value in (("--mention-threshold", args.mention_threshold), ("--span-threshold", args.span_threshold)):
        if args.gold_mentions and value is not None:
            raise CliError(f"{option} chooses the model's own mentions, but --gold-mentions clusters the gold ones; "
                           "drop one of them.")
    if not Path(args.conll).exists():
        raise CliError(f"--conll {args.conll} does not exist; give a CoNLL-2012 file or a folder of them.")
    check_output_file(args.responses, "--responses", args.overwrite, inputs)
    if args.responses is not None and args.output is not None and Path(args.responses).resolve() == Path(
        args.output
    ).resolve():
        raise CliError("--responses and --output name the same file; give each its own file.")


def _check_threshold_option(args: argparse.Namespace, document_mode: bool) -> None:
    """--mention-threshold is a probability of the token memory, --span-threshold a mention logit of the document
    mode: each applies to its own kind of checkpoint."""
    if document_mode and args.mention_threshold is not None:
        raise CliError(
            f"--mention-threshold is the token memory's write probability, but {args.checkpoint} is a "
            "coreference_mode='document' checkpoint, whose mentions are spans chosen by their logit: use "
            "--span-threshold LOGIT instead."
        )
    if not document_mode and args.span_threshold is not None:
        raise CliError(
            f"--span-threshold applies to coreference_mode='document' checkpoints, but {args.checkpoint} is in the "
            "token mode: use --mention-threshold P instead."
        )


def _evaluate_question_answering(args: argparse.Namespace, inputs: list[Path]) -> int:
    """Official EM / F1 (SQuAD 2.0: HasAns / NoAns, the questions answered with a span, and the best thresholds) of a
    question-answering checkpoint's answers to every question of the SQuAD file, as JSON."""
    from ..tasks.question_answering import evaluate_squad
    from .question_answering import (
        article_count,
        load_question_answering_checkpoint,
        load_squad_questions,
        model_positions,
        squad_windows,
    )

    if args.sweep:
        raise CliError(
            f"--sweep tunes the threshold of a coreference model, but {args.checkpoint} is a question-answering model; "
            "its SQuAD 2.0 scores always include the best no-answer threshold (best_f1_thresh): drop --sweep."
        )
    check_output_file(args.predictions, "--predictions", args.overwrite, inputs)
    if args.predictions is not None and args.output is not None and Path(args.predictions).resolve() == Path(
        args.output
    ).resolve():
        raise CliError("--predictions and --output name the same file; give each its own file.")
    model, tokenizer = load_question_answering_checkpoint(args.checkpoint)
    max_length, doc_stride = squad_windows(args.max_length, args.doc_stride, model_positions(model), "checkpoint's")
    examples = load_squad_questions(args.gap_file, args.squad_version, args.split or "validation", "SQuAD file")
    evaluation = evaluate_squad(
        model, tokenizer, examples, null_score_diff_threshold=args.null_threshold, max_length=max_length,
        doc_stride=doc_stride, batch_size=args.batch_size,
    )
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint, "squad_file": args.gap_file, "squad_version": evaluation.version,
        "questions": len(examples), "articles": article_count(examples), "max_length": max_length,
        "doc_stride": doc_stride, **evaluation.scores,
    }
    if evaluation.version == "2.0":
        result["null_score_diff_threshold"] = evaluation.null_score_diff_threshold
        # Always there, null when the file has no such question: the overall F1 alone cannot tell a model that
        # never answers (HasAns 0, answered_percent 0) from one that does.
        for key in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
            result.setdefault(key, None)
    _print_result(result, args.output)
    if args.predictions:
        write_json(Path(args.predictions), evaluation.predictions)
        print(f"wrote {len(evaluation.predictions)} answers to {args.predictions}", file=sys.stderr)
    return 0


def _evaluate_language_model(args: argparse.Namespace, architecture: str) -> int:
    """Perplexity over the documents of --conll (GPT2E: with the gold entity ids and with them zeroed) and / or
    LAMBADA perplexity and last-word accuracy of a language model (GPT2E or GPT-2), as JSON."""
    from ..tasks.language_modeling import lambada_examples, lambada_scores, read_lambada
    from .language_modeling import load_language_model

    _check_language_model_options(args, architecture)
    model, tokenizer = load_language_model(args.checkpoint)
    result: dict[str, Any] = {"checkpoint": args.checkpoint, "model": architecture}
    if args.conll is not None:
        result.update(_conll_perplexities(model, tokenizer, args))
    if args.lambada is not None:
        texts = read_lambada(args.lambada)[: args.lambada_limit]
        scores = lambada_scores(model, lambada_examples(texts, tokenizer), batch_size=args.batch_size)
        result.update(
            lambada_file=args.lambada, lambada_examples=scores.examples, lambada_perplexity=scores.perplexity,
            lambada_accuracy=scores.accuracy,
        )
    _print_result(result, args.output)
    return 0


def _check_language_model_options(args: argparse.Namespace, architecture: str) -> None:
    checkpoint = args.checkpoint
    if args.gap_file is not None:
        raise CliError(
            f"{checkpoint} is a language model ({architecture}): give its data with --conll DIR_OR_FILE and / or "
            f"--lambada FILE, not as DATA_FILE ({args.gap_file})."
        )
    if args.sweep:
        raise CliError(
            f"--sweep tunes the threshold of a coreference model, but {checkpoint} is a language model "
            f"({architecture}); drop --sweep."
        )
    refuse_options_of_other_checkpoints(args, _QA_OPTIONS, "question-answering checkpoints")
    if args.conll is None and args.lambada is None:
        raise CliError(
            f"nothing to score: {checkpoint} is a language model ({architecture}); pass --conll DIR_OR_FILE "
            "(perplexity on CoNLL-2012 documents) and / or --lambada FILE (LAMBADA)."
        )
    conll_options = given_options(args, {"split": "--split", "window_length": "--window-length", **BOOK_SPLIT_OPTIONS})
    if args.conll is None and conll_options:
        raise CliError(
            f"{' and '.join(conll_options)} apply to the CoNLL documents; add --conll DIR_OR_FILE or drop them."
        )
    split_options = given_options(args, BOOK_SPLIT_OPTIONS)
    if split_options and args.split is None:
        raise CliError(
            f"{' and '.join(split_options)} choose the held-out books of --split; add --split validation or --split "
            "test (the books `train` held out with the same options), or drop them to score every document of --conll."
        )
    if args.split is not None and args.split not in ("validation", "test"):
        raise CliError(
            f"--split {args.split}: a language model is scored on the validation or test books of --conll (--split "
            "validation or --split test), or on every document (no --split)."
        )
    if args.lambada_limit is not None and args.lambada is None:
        raise CliError("--lambada-limit applies to --lambada; add --lambada FILE or drop it.")


def _conll_perplexities(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Perplexity of the model over every document of --conll, or over the --split books of the book split."""
    from ..tasks.language_modeling import (
        entity_lm_windows,
        evaluate_entity_lm,
        load_litbank_entity_lm,
        read_conll_coreference,
        reads_entities,
    )
    from .language_modeling import book_split, split_books, window_length_for

    window_length = window_length_for(args.window_length, getattr(model.config, "n_positions", None), "checkpoint's")
    max_entities = model.config.max_entities if reads_entities(model) else None
    if args.split is None:
        documents = read_conll_coreference(args.conll)
        windows = entity_lm_windows(documents, tokenizer, window_length, max_entities=max_entities)
        books = len({document.name for document in documents})
    else:
        validation_books, test_books, split_seed = book_split(args)
        splits = load_litbank_entity_lm(  # too few books for the held-out ones: a ValueError, one line
            args.conll, tokenizer, window_length, validation_books=validation_books, test_books=test_books,
            seed=split_seed, max_entities=max_entities,
        )
        if args.split not in splits:
            raise CliError(f"--split {args.split}: --{args.split}-books is 0, so no book is held out for it.")
        windows = splits[args.split]
        books = split_books(windows)
    return {
        "conll": args.conll, "split": args.split or "all", "books": books,
        "documents": len(set(windows["document_id"])), "windows": len(windows), "window_length": window_length,
        **evaluate_entity_lm(model, windows, batch_size=args.batch_size),
    }
