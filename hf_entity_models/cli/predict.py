"""``hf-entity predict``: run a checkpoint, whatever its task (told by its config.json): the entities of a text, a
pronoun query, GAP predictions, the clusters of a corpus (JSON lines, resumable) or CoNLL-2012 responses
(coreference), the answer to a question (question answering), the continuation of a prompt (language model).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from .checkpoints import (
    add_trust_remote_code_option,
    architecture_of,
    checkpoint_inputs,
    checkpoint_kind,
    trust_remote_code_for,
    stored_config,
    trusting_remote_code,
)
from .common import (
    CliError,
    add_overwrite_option,
    add_threads_option,
    check_location,
    check_output_file,
    listing,
    emit,
    given_options,
    hidden_sibling,
    positive_int,
)
from .evaluate import (
    LANGUAGE_MODEL_ARCHITECTURES,
    is_question_answering_architecture,
    refuse_options_of_other_checkpoints,
    refuse_output_inside_input_folders,
)

# Options that only one kind of checkpoint reads (argparse destination -> option).
_QA_OPTIONS = {
    "context": "--context", "top_k": "--top-k", "max_answer_length": "--max-answer-length",
    "max_length": "--max-length", "doc_stride": "--doc-stride",
    "handle_impossible_answer": "--handle-impossible-answer", "attention_figures": "--attention-figures",
    "question_word": "--question-word", "passage_word": "--passage-word",
}
_COREFERENCE_OPTIONS = {
    "pronoun": "--pronoun", "candidate": "--candidate", "mention_threshold": "--mention-threshold",
    "memory_plot": "--memory-plot", "resolve": "--resolve", "responses": "--responses",
}
# Options that only some coreference inputs read: argparse destination -> (option, the inputs that read it).
_INPUT_OPTIONS = {
    "pronoun": ("--pronoun", ("--text",)), "candidate": ("--candidate", ("--text",)),
    "memory_plot": ("--memory-plot", ("--text",)), "resolve": ("--resolve", ("--text", "--texts")),
    "split": ("--split", ("--gap-file",)), "responses": ("--responses", ("--conll",)),
}
_LM_OPTIONS = {"max_new_tokens": "--max-new-tokens", "coref_model": "--coref-model"}
# The figures `--attention-figures` draws (the ForceReader paper's numbers), as `plot_attention_figures` names them.
_ATTENTION_FIGURES = tuple(f"figure_{number}.png" for number in (1, 3, 4, 5))
DEFAULT_MAX_NEW_TOKENS = 30


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``predict``."""
    parser = commands.add_parser(
        "predict",
        help="entities of a text, a pronoun query, predictions for a GAP file, the answer to a question, or the "
        "continuation of a prompt",
        description="Run pipeline('coreference'): --text alone prints the entity clusters; --text with --pronoun "
        "and --candidate prints the link probabilities and decisions; --gap-file writes ID, A-coref, B-coref "
        "rows (the official GAP scorer's system format: tab separated, no header). For a question-answering "
        "checkpoint, run pipeline('question-answering'): --question with --context prints the answer(s) as JSON "
        "({answer, start, end, score}, with context[start:end] == answer); --attention-figures also draws "
        "ForceReader's attention (the paper's Figures 1 and 3-5). For a language model (GPT2E or GPT-2), --prompt "
        "prints the greedy continuation as JSON; GPT2E reads the prompt's entity ids from a coreference checkpoint "
        "(--coref-model) and prints the clusters it used, or reads no entities without one. --texts FILE.jsonl|DIR "
        "finds the clusters of every document of a corpus, --batch-size at a time, and writes one JSON line per "
        "document to --output as it goes ({\"id\", \"clusters\"}, or {\"id\", \"error\"} for a document that "
        "fails); run again with the same --output, it skips the documents done and retries those that failed. "
        "--conll DIR_OR_FILE --responses FILE writes the clusters of every CoNLL-2012 document as a response file "
        "for the reference scorer.",
        epilog='Example (GPT2E): hf-entity predict runs/gpt2e-litbank --prompt "Emma met Mr. Knightley. She" '
        '--coref-model runs/petra-people. Examples (coreference): hf-entity predict runs/petra-litbank --text "Emma '
        'smiled. She liked her book." --resolve | hf-entity predict runs/petra-litbank --texts books.jsonl --output '
        "clusters.jsonl --batch-size 8",
    )
    parser.add_argument("checkpoint", help="checkpoint folder (or Hub id) with model and tokenizer")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to read (coreference)")
    source.add_argument("--gap-file", help="GAP TSV file or Hub dataset id to predict (coreference)")
    source.add_argument("--question", help="the question to answer from --context (question answering)")
    source.add_argument("--prompt", help="the text to continue (language model)")
    source.add_argument(
        "--texts", metavar="FILE.jsonl|DIR",
        help='a corpus to cluster (coreference): a JSON-lines file, one {"id": ..., "text": ...} per line ("id", a '
        "string or an integer, is optional: the line number by default), or a folder of UTF-8 .txt files (one "
        "document each, named by file name). Needs --output",
    )
    source.add_argument(
        "--conll", metavar="DIR_OR_FILE",
        help="CoNLL-2012 documents (a .conll file or a folder) whose clusters to write to --responses (coreference)",
    )
    language_model = parser.add_argument_group("language model (with --prompt)")
    language_model.add_argument(
        "--max-new-tokens", type=positive_int,
        help=f"tokens to generate after the prompt (default: {DEFAULT_MAX_NEW_TOKENS})",
    )
    language_model.add_argument(
        "--coref-model", metavar="CHECKPOINT",
        help="GPT2E: a coreference checkpoint (PeTra or Referential Reader folder or Hub id) whose "
        "pipeline('coreference') finds the prompt's entities; their clusters become the prompt's entity ids "
        "(--mention-threshold applies). Without it every token reads the no-entity id",
    )
    _add_question_answering_options(parser.add_argument_group("question answering (with --question)"))
    coreference = parser.add_argument_group("coreference (with --text or --gap-file)")
    coreference.add_argument("--split", help="split of a Hub dataset (with --gap-file)")
    coreference.add_argument(
        "--pronoun", type=int, nargs=2, metavar=("START", "END"), help="character span of the pronoun in --text"
    )
    coreference.add_argument(
        "--candidate", type=int, nargs=2, action="append", metavar=("START", "END"),
        help="character span of a candidate name in --text (repeat for every candidate)",
    )
    coreference.add_argument(
        "--mention-threshold", type=float,
        help="write probability that makes a token a mention (default 0.5; also for --coref-model)",
    )
    coreference.add_argument("--memory-plot", metavar="PNG", help="with --text: also draw the memory log to this PNG")
    coreference.add_argument(
        "--resolve", action="store_true", default=None,
        help="with --text or --texts: also give the text with every pronoun replaced by the name of its entity "
        '("resolved_text") and the replacements made ("replacements": start/end in the text, resolved_start/'
        "resolved_end in the resolved text)",
    )
    coreference.add_argument("--responses", metavar="CONLL_FILE", help="with --conll: the response file to write")
    coreference.add_argument(
        "--batch-size", type=positive_int, default=16,
        help="texts per forward pass (--gap-file, --texts, --conll; default: 16)",
    )
    parser.add_argument(
        "--output",
        help="write the result here instead of stdout; with --texts the JSON-lines file of clusters (required), "
        "resumed when it exists (--overwrite starts it afresh)",
    )
    add_overwrite_option(parser)
    add_trust_remote_code_option(parser)
    add_threads_option(parser, "the model's forward passes and generation")
    parser.set_defaults(handler=run_predict, command_name="predict", check_first=_check_first)


def _check_first(args: argparse.Namespace) -> None:
    """Before the checks of every output file (`main.check_outputs_first`): the --output of --texts is resumed when
    it exists, so `_predict_texts` checks it instead."""
    if args.texts is not None:
        args.resumed_outputs = ("output",)


def _add_question_answering_options(qa: argparse._ArgumentGroup) -> None:
    qa.add_argument("--context", help="the passage that holds the answer (any length: it is read in windows)")
    qa.add_argument("--top-k", type=positive_int, help="print the K best distinct answers, best first (default: 1)")
    qa.add_argument("--max-answer-length", type=positive_int, help="longest answer in tokens (default: 15)")
    qa.add_argument(
        "--max-length", type=positive_int, help="tokens per window (default: 384, or the model's maximum if smaller)"
    )
    qa.add_argument(
        "--doc-stride", type=positive_int,
        help="context tokens that consecutive windows share (default: 128, or less for a long question)",
    )
    qa.add_argument(
        "--handle-impossible-answer", action=argparse.BooleanOptionalAction, default=None,
        help="let \"no answer\" ({answer: '', start: 0, end: 0}) compete with the spans, at the checkpoint's "
        "config.null_score_diff_threshold (default: on for a checkpoint that records SQuAD 2.0 results)",
    )
    qa.add_argument(
        "--attention-figures", metavar="DIR",
        help="ForceReader only: also draw the paper's attention Figures 1 and 3-5 for this question and context "
        "to DIR/figure_<n>.png (Figures 4 and 5 need the Q2P / P2Q reading modes)",
    )
    qa.add_argument(
        "--question-word", action="append", metavar="W",
        help="with --attention-figures: a word piece of the question to show as a row, as the tokenizer writes it "
        "(e.g. lowercased for an uncased model; repeat for several; default: all)",
    )
    qa.add_argument(
        "--passage-word", action="append", metavar="W",
        help="with --attention-figures: a word piece of the context to show as a row of Figure 5 (default: all)",
    )


def run_predict(args: argparse.Namespace) -> int:
    """``hf-entity predict``: clusters or a query answer for --text, or GAP predictions for --gap-file; the answer to
    --question for a question-answering checkpoint; the continuation of --prompt for a language model. A checkpoint
    (or --coref-model) that needs code of its own is refused first, unless --trust-remote-code was given."""
    with trusting_remote_code(args.trust_remote_code):
        for location in (args.checkpoint, args.coref_model):
            if location is not None:
                trust_remote_code_for(location)
        return _run_predict(args)


def _run_predict(args: argparse.Namespace) -> int:
    data = [location for location in (args.gap_file, args.texts, args.conll) if location is not None]
    inputs = [*(Path(location) for location in data), *checkpoint_inputs(args.checkpoint)]
    if args.coref_model is not None:
        inputs += checkpoint_inputs(args.coref_model)
    if args.texts is None:  # an existing --output of --texts is resumed
        check_output_file(args.output, "--output", args.overwrite, inputs)
    check_output_file(args.memory_plot, "--memory-plot", args.overwrite, inputs)
    language_model = architecture_of(args.checkpoint, LANGUAGE_MODEL_ARCHITECTURES.__contains__)
    if args.prompt is not None or language_model is not None:
        return _predict_language_model(args, language_model)
    refuse_options_of_other_checkpoints(args, _LM_OPTIONS, "language-model checkpoints (GPT2E, GPT-2)")
    architecture = architecture_of(args.checkpoint, is_question_answering_architecture)
    if args.question is not None or architecture is not None:
        return _predict_question_answering(args, architecture, inputs)
    refuse_options_of_other_checkpoints(args, _QA_OPTIONS, "question-answering checkpoints")
    _refuse_options_of_other_inputs(args)
    if args.gap_file is not None:
        return _predict_gap_file(args)
    if args.texts is not None:
        return _predict_texts(args, inputs)
    if args.conll is not None:
        return _predict_conll(args, inputs)
    return _predict_text(args)


def _refuse_options_of_other_inputs(args: argparse.Namespace) -> None:
    """An option of one coreference input (--text, --gap-file, --texts, --conll) given with another."""
    sources = {"--text": args.text, "--gap-file": args.gap_file, "--texts": args.texts, "--conll": args.conll}
    source = next(option for option, value in sources.items() if value is not None)
    for name, (option, readers) in _INPUT_OPTIONS.items():
        if getattr(args, name, None) is not None and source not in readers:
            raise CliError(f"{option} only applies with {' or '.join(readers)}, not with {source}.")


# ------------------------------------------------------------------------------------------------ coreference
def _predict_text(args: argparse.Namespace) -> int:
    from .coreference import coreference_pipeline

    if (args.pronoun is None) != (args.candidate is None):
        raise CliError("a query needs both --pronoun START END and at least one --candidate START END.")
    pipe = coreference_pipeline(args.checkpoint)
    options: dict[str, Any] = {}
    if args.pronoun is not None:
        options.update(pronoun=tuple(args.pronoun), candidates=[tuple(span) for span in args.candidate])
    if args.mention_threshold is not None:
        options["mention_threshold"] = args.mention_threshold
    if args.memory_plot is not None:
        options["return_memory_log"] = True
    if args.resolve:
        if args.pronoun is not None:
            raise CliError("--resolve rewrites the text from its clusters, but --pronoun/--candidate ask for link "
                           "probabilities; drop --resolve or the query.")
        options["resolve"] = True
    answer = pipe(args.text, **options)
    if args.memory_plot is not None:
        from ..tasks.coreference.plots import plot_memory_log

        plot_memory_log(answer.pop("memory_log"), args.memory_plot)
        print(f"memory log drawn to {args.memory_plot}", file=sys.stderr)
    emit(json.dumps(answer, indent=2), args.output)
    return 0


def _predict_gap_file(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .coreference import coreference_pipeline, read_gap_rows

    rows = read_gap_rows(args.gap_file, args.split, "--gap-file")  # checked before the model loads
    pipe = coreference_pipeline(args.checkpoint)
    queries = (
        {
            "text": row["text"],
            "pronoun": (row["pronoun_offset"], row["pronoun_offset"] + len(row["pronoun"])),
            "candidates": [(row["a_offset"], row["a_offset"] + len(row["a"])),
                           (row["b_offset"], row["b_offset"] + len(row["b"]))],
        }
        for row in rows
    )
    lines = []
    answers = pipe(queries, batch_size=args.batch_size)
    for row_id, answer in zip(rows["id"], tqdm(answers, total=len(rows), desc="Predicting", unit="row")):
        a_coref, b_coref = (candidate["coreferent"] for candidate in answer["candidates"])
        lines.append(f"{row_id}\t{'TRUE' if a_coref else 'FALSE'}\t{'TRUE' if b_coref else 'FALSE'}")
    emit("\n".join(lines), args.output)
    if args.output:
        print(f"wrote {len(lines)} predictions to {args.output}", file=sys.stderr)
    return 0


def _predict_texts(args: argparse.Namespace, inputs: list[Path]) -> int:
    """``--texts FILE.jsonl|DIR --output FILE``: the clusters of every document, one JSON line each, written as they
    are found; an existing --output is resumed (its documents done are skipped, those that failed retried)."""
    from tqdm.auto import tqdm

    from ..tasks.coreference.corpus import TextCorpus, predict_corpus, start_output
    from .coreference import coreference_pipeline

    if args.output is None:
        raise CliError("--texts writes one JSON line per document to a file: add --output clusters.jsonl (a rerun "
                       "with the same file resumes where it stopped).")
    output = Path(args.output)
    check_location(output, "--output", folder=False)
    refuse_output_inside_input_folders(args.output, "--output", [("--texts", args.texts)])
    if output.exists() and any(source.exists() and os.path.samefile(output, source) for source in inputs):
        raise CliError(f"--output {output} is an input of this command; choose another file.")
    corpus = TextCorpus(args.texts)  # read (ids, duplicates) before the model loads
    pipe = coreference_pipeline(args.checkpoint)
    options = {} if args.mention_threshold is None else {"mention_threshold": args.mention_threshold}
    pipe([], **options, resolve=bool(args.resolve))  # options of the other mode are refused before the output opens
    state, resuming = start_output(output, corpus.ids, fresh=args.overwrite)
    if resuming:
        print(resuming, file=sys.stderr)
    summary = predict_corpus(
        pipe, corpus, output, args.batch_size, resolve=bool(args.resolve), pipeline_options=options, resume=state,
        on_error=lambda document, error: tqdm.write(f"{document.id} ({document.where}): {error}", file=sys.stderr),
    )
    print(f"wrote the clusters of {summary.written} documents to {output} ({summary.skipped} skipped, done before)",
          file=sys.stderr)
    if summary.failed:
        raise CliError(
            f"{len(summary.failed)} of the {len(corpus)} documents failed: {listing([str(i) for i in summary.failed])} "
            f"(their lines in {output} hold the error); fix them and run the same command again to retry them."
        )
    return 0


def _predict_conll(args: argparse.Namespace, inputs: list[Path]) -> int:
    """``--conll DIR_OR_FILE --responses FILE``: the clusters of every CoNLL-2012 document as a response file."""
    import torch

    from ..tasks.coreference import read_conll_coreference
    from ..tasks.coreference.corpus import conll_corpus_responses
    from .coreference import load_coreference_checkpoint
    from .coreference_conll import write_responses

    if args.responses is None:
        raise CliError("--conll writes the clusters it finds to a CoNLL-2012 file: add --responses FILE.conll.")
    if args.output is not None:
        raise CliError("--conll writes its clusters to --responses; drop --output.")
    check_output_file(args.responses, "--responses", args.overwrite, inputs)
    refuse_output_inside_input_folders(args.responses, "--responses", [("--conll", args.conll)])
    if args.mention_threshold is not None and stored_config(args.checkpoint).get("coreference_mode") == "document":
        raise CliError(f"--mention-threshold applies to token-mode checkpoints; {args.checkpoint} is in the document "
                       "mode (its mentions are spans chosen by their logit): drop --mention-threshold.")
    documents = read_conll_coreference(args.conll)  # a file it refuses is refused before the model loads
    model, tokenizer = load_coreference_checkpoint(args.checkpoint)
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    responses = conll_corpus_responses(
        model, tokenizer, documents, batch_size=args.batch_size, mention_threshold=args.mention_threshold
    )
    write_responses(responses, Path(args.responses))
    print(f"wrote the clusters of {len(responses)} documents to {args.responses}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------- question answering
def _predict_question_answering(args: argparse.Namespace, architecture: str | None, inputs: list[Path]) -> int:
    """``--question Q --context C``: the pipeline's answer(s) as JSON, and with --attention-figures ForceReader's
    attention pictures."""
    from transformers import pipeline

    from .question_answering import load_question_answering_checkpoint, model_positions, squad_windows

    _check_question_answering_options(args, architecture, inputs)
    model, tokenizer = load_question_answering_checkpoint(args.checkpoint)
    if args.max_length is not None:
        squad_windows(args.max_length, None, model_positions(model), "checkpoint's")
    # The "question-answering" task is registered before any command runs (transformers 5.x has none of its own).
    pipe = pipeline("question-answering", model=model, tokenizer=tokenizer, trust_remote_code=False)
    handle_impossible = args.handle_impossible_answer
    if handle_impossible is None:
        handle_impossible = _records_squad_v2(model.config)
    options: dict[str, Any] = {"handle_impossible_answer": handle_impossible}
    for option, value in (("top_k", args.top_k), ("max_answer_len", args.max_answer_length),
                          ("max_seq_len", args.max_length), ("doc_stride", args.doc_stride)):
        if value is not None:
            options[option] = value
    answer = pipe(question=args.question, context=args.context, **options)
    if args.attention_figures is not None:
        written = _draw_attention_figures(model, tokenizer, args)
        print(f"attention figures written: {', '.join(str(path) for path in written)}", file=sys.stderr)
    emit(json.dumps(answer, indent=2), args.output)
    return 0


def _check_question_answering_options(args: argparse.Namespace, architecture: str | None, inputs: list[Path]) -> None:
    checkpoint = args.checkpoint
    if args.question is None:
        raise CliError(
            f"{checkpoint} is a question-answering model ({architecture}): ask it with --question Q --context C "
            "(--text and --gap-file are for coreference models)."
        )
    config = stored_config(checkpoint)
    if architecture is None and config:
        raise CliError(
            f"--question asks a question-answering model, but {checkpoint} is {checkpoint_kind(checkpoint)}; use "
            "--text or --gap-file with a coreference model."
        )
    given = given_options(args, _COREFERENCE_OPTIONS)
    if given:
        raise CliError(f"{' and '.join(given)} only apply to coreference models (with --text or --gap-file).")
    if args.context is None:
        raise CliError("--question needs --context: the passage that holds the answer.")
    if not args.question.strip():
        raise CliError('--question is empty; ask a question, e.g. --question "Who founded Microsoft?".')
    if not args.context.strip():
        raise CliError("--context is empty; give the passage that holds the answer.")
    if (args.question_word or args.passage_word) and args.attention_figures is None:
        raise CliError("--question-word and --passage-word choose the rows of --attention-figures; add "
                       "--attention-figures DIR, or drop them.")
    if args.attention_figures is not None:
        if config and config.get("model_type") != "forcereader":
            raise CliError(
                f"--attention-figures draws ForceReader's attention (the paper's Figures 1 and 3-5), but {checkpoint} "
                f"is {checkpoint_kind(checkpoint)}, without ForceReader's separate question and passage encodings; "
                "drop --attention-figures."
            )
        _check_figure_folder(Path(args.attention_figures), args.overwrite, inputs)


def _records_squad_v2(config: Any) -> bool:
    """The checkpoint was scored on SQuAD 2.0 (as `train forcereader` records): "no answer" is an answer."""
    results = getattr(config, "evaluation_results", None) or []
    return any(isinstance(entry, dict) and entry.get("dataset") == "squad_v2" for entry in results)


def _check_figure_folder(folder: Path, overwrite: bool, inputs: list[Path]) -> None:
    """The figures can be written to `folder`: checked before the model is loaded. Figures of an earlier run there are
    replaced only with --overwrite; other files of the folder are left alone."""
    check_location(folder, "--attention-figures", folder=True)
    existing = [
        folder / name for name in _ATTENTION_FIGURES if (folder / name).exists() or (folder / name).is_symlink()
    ]
    if existing and not overwrite:
        raise CliError(
            f"--attention-figures {folder} already holds {', '.join(path.name for path in existing)}; pass "
            "--overwrite to replace them, or choose another folder."
        )
    for path in existing:
        if path.is_dir():
            raise CliError(f"--attention-figures {folder}: {path.name} is a folder; choose another folder.")
        if any(source.exists() and os.path.samefile(path, source) for source in inputs):
            raise CliError(
                f"--attention-figures {folder}: {path.name} is an input of this command; choose another folder."
            )


def _draw_attention_figures(model: Any, tokenizer: Any, args: argparse.Namespace) -> list[Path]:
    """Draw the figures into a new folder inside --attention-figures, then move each into place: a failure (e.g. a
    --question-word that is not a token of the question) leaves no figure of this run behind."""
    from ..tasks.question_answering import plot_attention_figures

    folder = Path(args.attention_figures)
    folder.mkdir(parents=True, exist_ok=True)
    staging = hidden_sibling(folder / "figures", "drawing")
    try:
        drawn = plot_attention_figures(
            model, tokenizer, args.question, args.context, staging,
            question_words=args.question_word, passage_words=args.passage_word,
        )
        written = []
        for _, path in sorted(drawn.items()):
            os.replace(path, folder / path.name)
            written.append(folder / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ language model
def _predict_language_model(args: argparse.Namespace, architecture: str | None) -> int:
    """``--prompt TEXT``: the greedy continuation as JSON. GPT2E reads the prompt's entity ids from the clusters that
    --coref-model's pipeline('coreference') finds, or no entities without it."""
    from ..tasks.language_modeling import reads_entities
    from .language_modeling import load_language_model

    _check_prompt_options(args, architecture)
    max_new_tokens = DEFAULT_MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens
    model, tokenizer = load_language_model(args.checkpoint)
    entities: list[dict[str, Any]] = []
    if args.coref_model is not None:
        if not reads_entities(model):
            raise CliError(f"--coref-model gives GPT2E entity ids, but {args.checkpoint} reads none; drop --coref-model.")
        input_ids, entity_ids, entities = _prompt_entities(args, model, tokenizer)
    else:
        input_ids = tokenizer(args.prompt, add_special_tokens=False)["input_ids"]
        entity_ids = [0] * len(input_ids)
        if reads_entities(model):
            print(
                "no entities: without --coref-model every prompt token reads the no-entity id 0; pass --coref-model "
                "CHECKPOINT (a PeTra or Referential Reader checkpoint) to give GPT2E the prompt's entities",
                file=sys.stderr,
            )
    positions = getattr(model.config, "n_positions", None)
    if positions is not None and len(input_ids) + max_new_tokens > positions:
        raise CliError(
            f"the prompt has {len(input_ids)} tokens; with --max-new-tokens {max_new_tokens} that is more than the "
            f"{positions} positions {args.checkpoint} reads; shorten the prompt or lower --max-new-tokens."
        )
    continuation = _continuation(model, tokenizer, input_ids, entity_ids, max_new_tokens)
    answer = {
        "prompt": args.prompt,
        "continuation": continuation,
        "generated_text": args.prompt + continuation,
        "entity_source": args.coref_model if args.coref_model is not None else "none",
        "entities": entities,
    }
    emit(json.dumps(answer, indent=2), args.output)
    return 0


def _check_prompt_options(args: argparse.Namespace, architecture: str | None) -> None:
    checkpoint = args.checkpoint
    if args.prompt is None:
        raise CliError(
            f"{checkpoint} is a language model ({architecture}): give it a text to continue with --prompt TEXT "
            "(--text, --gap-file and --question are for coreference and question-answering models)."
        )
    if architecture is None and stored_config(checkpoint):
        raise CliError(
            f"--prompt continues a text with a language model, but {checkpoint} is {checkpoint_kind(checkpoint)}; "
            "use --text or --gap-file with a coreference model, --question with a question-answering model."
        )
    refuse_options_of_other_checkpoints(args, _QA_OPTIONS, "question-answering checkpoints")
    given = given_options(args, {"pronoun": "--pronoun", "candidate": "--candidate", "memory_plot": "--memory-plot"})
    if given:
        raise CliError(f"{' and '.join(given)} only apply to coreference models (with --text); drop them.")
    if args.mention_threshold is not None and args.coref_model is None:
        raise CliError("--mention-threshold applies to the pipeline of --coref-model; add --coref-model or drop it.")
    if not args.prompt.strip():
        raise CliError('--prompt is empty; give the text to continue, e.g. --prompt "Emma met Harriet. She".')
    if args.coref_model is not None and architecture not in (None, "GPT2EForCausalLM"):
        raise CliError(
            f"--coref-model gives GPT2E the prompt's entity ids, but {checkpoint} is a {architecture}, which reads "
            "no entity ids; drop --coref-model."
        )


def _prompt_entities(args: argparse.Namespace, model: Any, tokenizer: Any) -> tuple[list[int], list[int], list]:
    """(input ids, entity ids, numbered clusters) of the prompt, from --coref-model's clusters."""
    from ..tasks.language_modeling import entity_ids_from_text
    from .coreference import coreference_pipeline

    options = {} if args.mention_threshold is None else {"mention_threshold": args.mention_threshold}
    encoded = entity_ids_from_text(args.prompt, coreference_pipeline(args.coref_model), tokenizer, **options)
    if encoded["num_entities"] > model.config.max_entities:
        raise CliError(
            f"--coref-model found {encoded['num_entities']} entities in the prompt, more than the "
            f"{model.config.max_entities} that {args.checkpoint} keeps (config.max_entities); shorten the prompt."
        )
    entities = _numbered_clusters(args.prompt, encoded)
    found = "; ".join(f"{e['entity']}: {', '.join(m['text'] for m in e['mentions'])}" for e in entities)
    print(f"entities from {args.coref_model}: {found or 'none found'}", file=sys.stderr)
    return encoded["input_ids"], encoded["entity_ids"], entities


def _numbered_clusters(text: str, encoded: dict[str, Any]) -> list[dict[str, Any]]:
    """The clusters the prompt's entity ids came from, by entity id (`entity_ids_from_text` numbers them), mentions
    in text order."""
    by_id = sorted(zip(encoded["cluster_entity_ids"], encoded["clusters"]), key=lambda pair: pair[0])
    return [
        {
            "entity": number,
            "mentions": [
                {"start": mention["start"], "end": mention["end"], "text": text[mention["start"] : mention["end"]]}
                for mention in sorted(cluster, key=lambda mention: (mention["start"], -mention["end"]))
            ],
        }
        for number, cluster in by_id
    ]


def _continuation(model: Any, tokenizer: Any, input_ids: list[int], entity_ids: list[int], max_new_tokens: int) -> str:
    """The greedy continuation of the prompt, decoded."""
    import torch

    from ..tasks.language_modeling import generate_with_entities, reads_entities

    prompt_ids = torch.tensor([input_ids], device=model.device)
    attention_mask = torch.ones_like(prompt_ids)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        if reads_entities(model):
            # A window reads the entity states left by earlier windows: the prompt is read once as the previous one.
            generated = generate_with_entities(
                model, prompt_ids, torch.tensor([entity_ids], device=model.device), max_new_tokens=max_new_tokens,
                do_sample=False, pad_token_id=pad_token_id, attention_mask=attention_mask,
            )
        else:
            generated = model.generate(
                prompt_ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id,
                attention_mask=attention_mask,
            )
    return tokenizer.decode(generated[0, len(input_ids):], skip_special_tokens=True, clean_up_tokenization_spaces=False)
