"""The coreference models of ``hf-entity train petra|refreader`` and ``evaluate`` / ``predict``: which class a model
name builds, the config fields a command line sets, a fresh model on an encoder or one started from a checkpoint, and
a trained checkpoint loaded with its tokenizer (or as a pipeline).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .checkpoints import load_checkpoint, load_model, saved_tokenizer, stored_config
from .common import HUB_ID, CliError
from .training import check_config_fields, encoder_location, refuse_fields

# Fields of the incremental reader that come from the tokenizer, and fields that only the encoder mode reads.
_TOKENIZER_FIELDS = ("vocab_size", "pad_token_id")
_ENCODER_FIELDS = ("encoder_layers", "encoder_window_size", "encoder_window_overlap")


def model_class(model: str) -> type:
    """The coreference head `train` builds for a model name."""
    if model == "petra":
        from ..models.petra import PetraForCoreference

        return PetraForCoreference
    from ..models.refreader import RefReaderForCoreference

    return RefReaderForCoreference


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--config-overrides, then the explicit options on top; fields that the model's config does not have are
    refused (a typo would be lost)."""
    overrides = dict(args.config_overrides)
    explicit = {
        "num_memory_cells": args.num_memory_cells,
        "memory_variant": getattr(args, "memory_variant", None),
        "hidden_size": args.hidden_size,
        "mlp_hidden_size": getattr(args, "mlp_hidden_size", None),
        "dropout": args.dropout,
    }
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    check_config_fields(
        model_class(args.model).config_class, overrides, args.model, " (the encoder's config comes from --encoder)"
    )
    if getattr(args, "incremental", False) and args.init_from is None:
        refuse_fields(overrides, _TOKENIZER_FIELDS, "with --incremental they come from the --encoder's tokenizer")
        refuse_fields(overrides, _ENCODER_FIELDS, "an --incremental reader has no encoder")
    return overrides


def build_model(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """The model to train and its tokenizer: from --init-from, an incremental reader, or a fresh model on --encoder."""
    from .checkpoints import fast_tokenizer

    head = model_class(args.model)
    if args.init_from is not None:
        return _model_from_checkpoint(args, head, overrides)
    encoder = encoder_location(args.encoder)
    tokenizer = fast_tokenizer(encoder)
    if getattr(args, "incremental", False):
        config = head.config_class(
            vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, encoder_config=None, **overrides
        )
        return head(config), tokenizer
    return head.from_encoder(encoder, **overrides), tokenizer


def _model_from_checkpoint(args: argparse.Namespace, head: type, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """--init-from: the checkpoint's weights in the coreference head (an LM checkpoint's memory and embeddings
    carry over), with its saved tokenizer or else the --encoder's."""
    from transformers import AutoConfig

    from .checkpoints import fast_tokenizer

    location = args.init_from
    if not Path(location).exists() and not HUB_ID.match(location):
        raise CliError(f"--init-from checkpoint {location} does not exist; pass a folder written by save_pretrained.")
    # Before AutoConfig reads it: for a model type it does not know, it would offer to run the checkpoint's code.
    expected = head.config_class.model_type
    model_type = stored_config(location).get("model_type", expected)
    if model_type != expected:
        raise CliError(
            f"--init-from {location} holds a {model_type!r} model, but `train {args.model}` needs a {expected!r} "
            "checkpoint; pick the matching model."
        )
    stored = AutoConfig.from_pretrained(location, trust_remote_code=False)
    encoder_config = getattr(stored, "encoder_config", None)
    if getattr(args, "incremental", False) and encoder_config is not None:
        raise CliError(
            f"--incremental was given, but --init-from {location} reads encoder features; drop --incremental (the "
            "checkpoint decides the mode)."
        )
    tokenizer = saved_tokenizer(location)
    if tokenizer is None:
        tokenizer = fast_tokenizer(encoder_location(args.encoder))
    vocab_size = encoder_config.vocab_size if encoder_config is not None else stored.vocab_size
    if len(tokenizer) > vocab_size:
        raise CliError(
            f"the tokenizer has {len(tokenizer)} tokens but --init-from {location} has a vocabulary of {vocab_size}; "
            "save the checkpoint's own tokenizer next to it or pass the matching --encoder."
        )
    changed = sorted(key for key, value in overrides.items() if getattr(stored, key, None) != value)
    advice = (
        f"the options {changed} change the shapes of weights stored in --init-from {location}; with a checkpoint "
        "only fields that keep its architecture (e.g. dropout, loss weights) can be overridden."
        if changed else None
    )
    # A checkpoint of the same head must hold all of its weights; another head's (a language model's) need not.
    same_head = head.__name__ in (stored_config(location).get("architectures") or [])
    return load_model(head, location, advice, strict=same_head, **overrides), tokenizer


def load_coreference_checkpoint(checkpoint: str) -> tuple[Any, Any]:
    """Model (PeTra or Referential Reader) and fast tokenizer of a coreference checkpoint."""
    from ..auto import AutoModelForCoreference

    return load_checkpoint(AutoModelForCoreference, checkpoint)


def coreference_pipeline(checkpoint: str) -> Any:
    """`pipeline("coreference")` of a checkpoint (the task is registered before any command runs)."""
    from transformers import pipeline

    model, tokenizer = load_coreference_checkpoint(checkpoint)
    # Built from the loaded objects: nothing more is loaded, and transformers is told so (it never asks).
    return pipeline("coreference", model=model, tokenizer=tokenizer, trust_remote_code=False)
