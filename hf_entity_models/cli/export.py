"""``hf-entity export``: write a question-answering checkpoint (ForceReader, or any AutoModelForQuestionAnswering
folder such as a BERT one) as an ONNX graph for ONNX Runtime, with its config and tokenizer, and optionally an int8
copy of it (`hf_entity_models.tasks.question_answering.onnx_export`).

Only question answering is exported. The coreference models (PeTra, Referential Reader) are not: their entity memory
is a recurrence run in Python one token (document mode: one mention) at a time, with control flow that depends on the
data, which a graph of fixed operations cannot hold for documents of every length.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from .checkpoints import (
    add_trust_remote_code_option,
    checkpoint_kind,
    require_checkpoint,
    stored_config,
    trust_remote_code_for,
    trusting_remote_code,
)
from .common import CliError, add_overwrite_option, entry_names, listing

ONNX_DEPENDENCIES = ("onnx", "onnxruntime", "onnxscript")
EXPORTABLE = (
    "question-answering checkpoints (ForceReaderForQuestionAnswering, BertForQuestionAnswering and other "
    "AutoModelForQuestionAnswering folders)"
)
COREFERENCE_REASON = (
    "its entity memory is a recurrence run in Python one token (document mode: one mention) at a time, whose steps "
    "depend on the data (each document leaves the batch at its own length; each mention's entity is decided before "
    "the next is read), so a traced graph would be fixed to one document's length; run it with PyTorch "
    "(hf-entity predict / evaluate)"
)
LANGUAGE_MODEL_REASON = "generation is a Python loop around the model; run it with PyTorch (hf-entity predict --prompt)"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``export``."""
    parser = commands.add_parser(
        "export",
        help="write a question-answering checkpoint as an ONNX graph for ONNX Runtime (optionally int8)",
        description="Export a question-answering checkpoint (ForceReader, or any AutoModelForQuestionAnswering "
        "folder such as BERT's) to DIR/model.onnx: inputs input_ids, attention_mask, token_type_ids (batch, "
        "sequence), outputs start_logits and end_logits, both axes dynamic; the config and tokenizer are written "
        "beside it. The graph is checked against PyTorch on sample inputs before it is kept. --int8 also writes "
        "DIR/model.int8.onnx with 8-bit weights (ONNX Runtime dynamic quantisation). Needs the [onnx] extra: pip "
        "install \"hf-entity-models[onnx]\". Coreference and language-model checkpoints are not exported.",
        epilog="Example: hf-entity export runs/forcereader-squad --onnx runs/forcereader-onnx --int8. In Python: "
        "OnnxQuestionAnswering('runs/forcereader-onnx') runs it and evaluate_squad takes it as a model.",
    )
    parser.add_argument("checkpoint", help="question-answering checkpoint folder (or Hub id) with model and tokenizer")
    parser.add_argument(
        "--onnx", required=True, metavar="DIR",
        help="folder to write model.onnx, config and tokenizer into: a new or empty folder, or an earlier export "
        "with --overwrite",
    )
    parser.add_argument(
        "--int8", action="store_true",
        help="also write DIR/model.int8.onnx: int8 weights of the matrix products and embeddings (about a quarter "
        "of the size; logits close to, not equal to, the float graph's)",
    )
    add_overwrite_option(parser, "replace the files of an earlier export in --onnx DIR")
    add_trust_remote_code_option(parser)
    parser.set_defaults(handler=run_export, command_name="export")


def run_export(args: argparse.Namespace) -> int:
    """``hf-entity export``: model.onnx (and model.int8.onnx with --int8), config and tokenizer in --onnx DIR."""
    output = Path(args.onnx)
    check_export_folder(output, args.checkpoint, args.int8, args.overwrite)
    refuse_other_checkpoints(args.checkpoint)
    check_dependencies()
    with trusting_remote_code(args.trust_remote_code):
        trust_remote_code_for(args.checkpoint)
        return _export(args, output)


def _export(args: argparse.Namespace, output: Path) -> int:
    from ..tasks.question_answering.onnx_export import check_question_answering_model, export_onnx, quantize_onnx_int8
    from .question_answering import load_question_answering_checkpoint

    model, tokenizer = load_question_answering_checkpoint(args.checkpoint)
    try:
        check_question_answering_model(model)
    except TypeError as error:
        raise CliError(str(error)) from None
    exported = export_onnx(model, tokenizer, output, overwrite=args.overwrite)
    size = exported.path.stat().st_size
    print(
        f"wrote {exported.path} ({type(model).__name__}, {_megabytes(size)}, opset {exported.opset}; inputs "
        f"{', '.join(exported.input_names)}, batch and sequence axes dynamic; ONNX Runtime matches PyTorch within "
        f"{exported.max_abs_difference:.1e} on sample inputs), with its config and tokenizer"
    )
    if args.int8:
        quantized = quantize_onnx_int8(exported.path, overwrite=args.overwrite)
        quantized_size = quantized.stat().st_size
        print(
            f"wrote {quantized} (int8 weights, {_megabytes(quantized_size)}, {quantized_size / size:.2f} of "
            f"{exported.path.name})"
        )
    return 0


def check_export_folder(output: Path, checkpoint: str, int8: bool, overwrite: bool) -> None:
    """--onnx DIR is new, empty, or an earlier export replaced with --overwrite; never the checkpoint itself, and
    never a folder of other files (their config.json would be replaced)."""
    if output.exists() and not output.is_dir():
        raise CliError(f"--onnx {output} is a file, not a folder; give the folder to write model.onnx into.")
    if Path(checkpoint).is_dir() and output.is_dir() and output.resolve() == Path(checkpoint).resolve():
        raise CliError(
            f"--onnx {output} is the checkpoint folder; write the export into a folder of its own, e.g. --onnx "
            f"{output.name}-onnx."
        )
    if not output.is_dir() or not any(output.iterdir()):
        return
    earlier = [name for name in ("model.onnx", "onnx_export.json") if (output / name).is_file()]
    if not earlier:
        raise CliError(
            f"--onnx {output} holds other files ({listing(entry_names(list(output.iterdir())))}), which the export "
            "could replace; give a new or empty folder."
        )
    if not overwrite:
        replaced = ("model.onnx", "model.int8.onnx") if int8 else ("model.onnx",)
        present = [name for name in replaced if (output / name).exists()]
        raise CliError(
            f"--onnx {output} already holds an export ({', '.join(present or earlier)}); pass --overwrite to replace "
            "it, or choose another folder."
        )


def refuse_other_checkpoints(checkpoint: str) -> None:
    """One line for a checkpoint whose config.json names architectures but no question-answering one, saying what
    can be exported and why this one is not. A checkpoint without architectures is left to the load."""
    require_checkpoint(checkpoint)
    architectures = [name for name in stored_config(checkpoint).get("architectures") or [] if isinstance(name, str)]
    if not architectures or any(name.endswith("ForQuestionAnswering") for name in architectures):
        return
    kind = checkpoint_kind(checkpoint)
    if any(name.endswith("ForCoreference") for name in architectures):
        reason = f"a coreference model is not exported to ONNX: {COREFERENCE_REASON}"
    elif any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in architectures):
        reason = f"a language model is not exported: {LANGUAGE_MODEL_REASON}"
    else:
        reason = "only question answering is exported"
    raise CliError(f"{checkpoint} is {kind}; hf-entity export writes {EXPORTABLE} only, and {reason}.")


def check_dependencies() -> None:
    missing = [name for name in ONNX_DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise CliError(
            f"hf-entity export needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            "installed: pip install \"hf-entity-models[onnx]\"."
        )


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
