"""GPT2E on LitBank with entity ids from a trained coreference model, next to gold ids and ids zeroed (issue 31).

How much of GPT2E's entity gain survives when the entity ids come from a coreference model run on the raw text (the
README's path: ``entity_ids_from_text(text, pipeline("coreference", model=...), gpt2_tokenizer)``) instead of
LitBank's gold annotation?

Split, the one of the LitBank coreference benchmark (`bench_litbank_coref.py`): the 80 ``*.conll`` files in sorted
name order, books 1-60 train, 61-70 selection, 71-80 report. The coreference models were trained on books 1-60
(their epoch and mention threshold chosen on 61-70); GPT2E is trained here on books 1-60 only, with gold entity ids,
for a fixed budget (nothing selected on any split). Books 71-80 are seen by neither model before they are scored.

GPT2E is the issue-23 set-up of `bench_gpt2e_litbank.py` (entity-memory preset, 4 layers, 128 wide, 4 heads,
windows of 128 GPT-2 tokens, batch 16, AdamW 1e-3), initialised from a fresh GPT-2 of the seed exactly as there.
The report books are then scored, every window of a book in order with its entity states carried (the package's
perplexity evaluation), with the entity ids

  * gold: LitBank's annotation (`entity_ids_for_document`);
  * predicted by each ``--coref`` checkpoint: `entity_ids_from_text` on the book's words joined by single spaces
    (the text the gold path tokenizes), through ``pipeline("coreference")`` at the checkpoint's own mention threshold;
  * rule: the rule baseline's clusters (`rule_baseline_clusters(..., mentions="rule")`, no training);
  * zeroed: every id 0.

The GPT-2 tokens are the same in every variant (checked; a difference raises). Perplexity over all predicted tokens,
and over the tokens of GOLD mentions (the same token set in every variant; the package's `mention_perplexity` counts
the mentions of the ids it is given, which for predicted ids would be another set: it is reported too, as
``mention_perplexity_own_mentions``). The share of the gold-vs-zeroed gain kept by predicted ids is
``(ppl_zeroed - ppl_predicted) / (ppl_zeroed - ppl_gold)``.

    python benchmarks/bench_gpt2e_predicted_entities.py --save-model runs/issue31/models/gpt2e-litbank-books1-60 \\
        --coref runs/issue31/models/petra-litbank-seed0 --threads 1
    python benchmarks/bench_gpt2e_predicted_entities.py --gpt2e runs/issue31/models/gpt2e-litbank-books1-60 \\
        --coref runs/issue31/models/petra-litbank-seed0 runs/issue31/models/refreader-litbank-seed0 --threads 1

Needs ../shared/data/litbank and ../shared/data/tokenizers/gpt2 (and the coreference checkpoints' encoder).
"""

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoTokenizer, pipeline  # noqa: E402

import hf_entity_models  # noqa: E402,F401  (registers the coreference pipeline and the models)
from hf_entity_models import GPT2EForCausalLM  # noqa: E402
from hf_entity_models.models.gpt2e import PRESETS  # noqa: E402
from hf_entity_models.tasks.coreference.conll import CorefDocument  # noqa: E402
from hf_entity_models.tasks.coreference.conll_metrics import score_coreference  # noqa: E402
from hf_entity_models.tasks.coreference.rule_baseline import rule_baseline_clusters  # noqa: E402
from hf_entity_models.tasks.language_modeling import (  # noqa: E402
    document_windows,
    entity_ids_for_document,
    entity_ids_from_text,
    entity_lm_windows,
    evaluate_entity_lm,
    read_conll_coreference,
)

# The package's document-level evaluation loop (books side by side, window after window, entity states carried in
# the store), reused so that every variant is scored by exactly the procedure of `evaluate_entity_lm`; the per-token
# losses are needed here to count the GOLD mention tokens while the model reads other ids. The gold variant is
# checked against `evaluate_entity_lm` itself.
from hf_entity_models.tasks.language_modeling.entity_evaluation import (  # noqa: E402
    _document_batches,
    _forward,
    _windows_by_document,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpt2e_litbank import build_pair, machine, train  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"
SPLIT = {"train": (0, 60), "selection": (60, 70), "report": (70, 80)}  # slices of the files in sorted name order
TRAINING_RECORD = "gpt2e_training_record.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--litbank", default=str(DATA / "litbank" / "conll"))
    parser.add_argument("--gpt2e", metavar="CHECKPOINT", help="a GPT2E saved by --save-model: skip the training")
    parser.add_argument("--save-model", metavar="DIR", help="save the trained GPT2E (and tokenizer) here")
    parser.add_argument("--coref", nargs="*", default=[], metavar="CHECKPOINT",
                        help="coreference checkpoints (PeTra / Referential Reader folders with their tokenizer)")
    parser.add_argument("--mention-threshold", type=float, default=None,
                        help="the pipeline's mention threshold (default: each checkpoint's config.mention_threshold)")
    parser.add_argument("--no-rule", action="store_true", help="leave out the rule baseline's ids")
    parser.add_argument("--controls", action="store_true",
                        help="also score the gold mention spans with no linking (every mention its own entity; all "
                        "mentions one entity)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window-length", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="entity-memory")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=float, default=4.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="overrides --epochs when > 0")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--report-books", type=int, default=None,
                        help="score only the first N report books (development; the real run scores all 10)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--output-dir", default="runs/bench-gpt2e-predicted-entities", help="Trainer folder")
    parser.add_argument("--results", default=str(RESULTS / "gpt2e_predicted_entities.json"))
    args = parser.parse_args(argv)
    # Fields `build_pair` reads for the paper preset only.
    args.entity_attention_size, args.entity_attention_values = None, "hidden"
    return args


def litbank_split(folder: str) -> dict[str, list[CorefDocument]]:
    """Books 1-60 / 61-70 / 71-80 of the files in sorted name order (the coreference benchmark's split)."""
    files = sorted(Path(folder).glob("*.conll"))
    if len(files) != 80:
        raise ValueError(f"Expected LitBank's 80 .conll files in {folder}, found {len(files)}.")
    return {name: read_conll_coreference(files[start:end]) for name, (start, end) in SPLIT.items()}


def book_names(documents: list[CorefDocument]) -> list[str]:
    return [document.name for document in documents]


# ------------------------------------------------------------------------------------------------ GPT2E
def train_gpt2e(args, tokenizer, split) -> tuple[GPT2EForCausalLM, dict]:
    max_entities = max(256, max(len({m[2] for m in d.mentions}) for d in split["train"]))
    windows = entity_lm_windows(split["train"], tokenizer, args.window_length, max_entities=max_entities)
    _, gpt2e = build_pair(args, len(tokenizer), args.seed, max_entities=max_entities)
    record = train(gpt2e, tokenizer, windows, args, args.seed, "gpt2e")
    record.update(
        trained_on=book_names(split["train"]),
        windows=len(windows),
        tokens=sum(len(ids) for ids in windows["input_ids"]),
        seed=args.seed,
        config={k: getattr(args, k) for k in ("n_layer", "n_embd", "n_head", "window_length", "preset", "batch_size",
                                             "epochs", "max_steps", "learning_rate")},
        machine=machine(),
    )
    if args.save_model:
        gpt2e.save_pretrained(args.save_model)
        tokenizer.save_pretrained(args.save_model)
        Path(args.save_model, TRAINING_RECORD).write_text(json.dumps(record, indent=2))
    return gpt2e, record


def load_gpt2e(path: str, split) -> tuple[GPT2EForCausalLM, dict]:
    record_path = Path(path, TRAINING_RECORD)
    if not record_path.is_file():
        raise FileNotFoundError(
            f"{record_path} is missing: --gpt2e takes a folder written by this script's --save-model (its record says "
            "which books it was trained on)."
        )
    record = json.loads(record_path.read_text())
    held_out = set(book_names(split["selection"])) | set(book_names(split["report"]))
    leaked = sorted(set(record["trained_on"]) & held_out)
    if leaked or set(record["trained_on"]) != set(book_names(split["train"])):
        raise ValueError(f"{path} was not trained on books 1-60 exactly (held-out books seen: {leaked}).")
    model = GPT2EForCausalLM.from_pretrained(path)
    return model, record


def with_capacity(model: GPT2EForCausalLM, max_entities: int) -> GPT2EForCausalLM:
    """The entity store's capacity holds no weight (states are gathered per id): raise it where predicted ids need
    more entities than the training books had."""
    if max_entities > model.config.max_entities:
        model.config.max_entities = max_entities
    return model


# ------------------------------------------------------------------------------------------------ entity ids
def windows_of(encodings: list[dict], window_length: int) -> list[dict]:
    rows = []
    for document_id, encoded in enumerate(encodings):
        windows = document_windows(encoded["input_ids"], encoded["entity_ids"], window_length)
        for window_index, window in enumerate(windows):
            rows.append({**window, "document_id": document_id, "window_index": window_index})
    return rows


def check_same_tokens(name: str, encodings: list[dict], gold: list[dict], documents: list[CorefDocument]) -> None:
    for encoded, reference, document in zip(encodings, gold, documents, strict=True):
        if encoded["input_ids"] != reference["input_ids"]:
            first = next(
                (i for i, (a, b) in enumerate(zip(encoded["input_ids"], reference["input_ids"])) if a != b),
                min(len(encoded["input_ids"]), len(reference["input_ids"])),
            )
            raise RuntimeError(
                f"{name}: the GPT-2 tokens of {document.name} differ from the gold path's at token {first} "
                f"({len(encoded['input_ids'])} vs {len(reference['input_ids'])} tokens); the perplexities would not "
                "be comparable."
            )


def coref_encodings(checkpoint: str, documents, tokenizer, threshold: float | None) -> tuple[list[dict], dict]:
    """`entity_ids_from_text` of every book through ``pipeline("coreference", model=checkpoint)``, and the clusters
    as word-level CorefDocuments (to score them)."""
    resolver = pipeline("coreference", model=checkpoint, device=-1)
    kwargs = {} if threshold is None else {"mention_threshold": threshold}
    encodings, responses, seconds = [], [], []
    for document in documents:
        text = " ".join(document.words)  # what entity_ids_for_document tokenizes
        start = time.perf_counter()
        encoded = entity_ids_from_text(text, resolver, tokenizer, **kwargs)
        seconds.append(time.perf_counter() - start)
        encodings.append(encoded)
        responses.append(word_clusters(document, text, encoded["clusters"]))
    config = resolver.model.config
    info = {
        "checkpoint": str(checkpoint),
        "model_type": config.model_type,
        # The pipeline's own default when no threshold is given.
        "mention_threshold": threshold if threshold is not None else getattr(config, "mention_threshold", 0.5),
        "pipeline_seconds_per_book": sum(seconds) / len(seconds),
    }
    return encodings, {"info": info, "responses": responses}


def word_clusters(document: CorefDocument, text: str, clusters: list[list[dict]]) -> CorefDocument:
    """The pipeline's character-offset clusters as word spans of the document (text = words joined by spaces)."""
    word_of_character = []
    for index, word in enumerate(document.words):
        word_of_character += [index] * len(word) + [index]  # the space after a word counts to it (never a mention edge)
    mentions = {
        (word_of_character[m["start"]], word_of_character[m["end"] - 1], cluster)
        for cluster, members in enumerate(clusters)
        for m in members
    }
    return document.with_mentions(sorted(mentions))


# ------------------------------------------------------------------------------------------------ scoring
@torch.no_grad()
def score_variant(
    model, windows: list[dict], gold_windows: list[dict], batch_size: int, use_entities: bool = True
) -> dict:
    """Perplexity over all predicted tokens, over the gold mention tokens, and over the tokens the given ids mark as
    mentions (the package's `mention_perplexity`), by `evaluate_entity_lm`'s document loop."""
    by_document = _windows_by_document(windows)
    gold = _windows_by_document(gold_windows)
    seen = Counter()
    sums = {"all": [0.0, 0], "gold_mentions": [0.0, 0], "own_mentions": [0.0, 0]}
    for batch, states in _document_batches(model, by_document, batch_size, use_entities, False, "perplexity"):
        gold_ids = torch.zeros_like(batch["input_ids"])
        for row, document in enumerate(batch["document_ids"].tolist()):
            window = gold[document][seen[document]]
            seen[document] += 1
            if list(window["input_ids"]) != batch["input_ids"][row, : len(window["input_ids"])].tolist():
                raise RuntimeError(f"Document {document}: the scored window is not the gold window's tokens.")
            gold_ids[row, : len(window["entity_ids"])] = torch.as_tensor(window["entity_ids"])
        outputs = _forward(model, batch, states)
        targets = batch["input_ids"][:, 1:]
        losses = torch.nn.functional.cross_entropy(  # over flat rows: the transposed view is 3x slower on CPU
            outputs.logits[:, :-1].float().flatten(0, 1), targets.flatten(), reduction="none"
        ).view_as(targets)
        mask = batch["attention_mask"][:, 1:].bool()
        for key, chosen in (
            ("all", mask),
            ("gold_mentions", mask & (gold_ids[:, 1:] != 0)),
            ("own_mentions", mask & (batch["gold_entity_ids"][:, 1:] != 0)),  # the ids given in `windows`
        ):
            sums[key][0] += float(losses[chosen].double().sum())
            sums[key][1] += int(chosen.sum())
        states.update(outputs)

    def perplexity(key: str) -> float:
        nll, count = sums[key]
        return math.exp(nll / count) if count else math.nan

    return {
        "perplexity": perplexity("all"),
        "mention_perplexity": perplexity("gold_mentions"),
        "mention_perplexity_own_mentions": perplexity("own_mentions"),
        "tokens": sums["all"][1],
        "gold_mention_tokens": sums["gold_mentions"][1],
        "own_mention_tokens": sums["own_mentions"][1],
    }


def token_agreement(encodings: list[dict], gold: list[dict]) -> dict:
    """Token-level mention detection against gold (a token is a mention token when its id is not 0), and the share
    of gold coreference links (each mention to the previous mention of its entity) that the predicted ids keep."""
    both = predicted = actual = 0
    same_same = same_pairs = 0
    for encoded, reference in zip(encodings, gold):
        p, g = encoded["entity_ids"], reference["entity_ids"]
        both += sum(1 for a, b in zip(p, g) if a and b)
        predicted += sum(1 for a in p if a)
        actual += sum(1 for b in g if b)
        # Links between a gold mention and the previous mention of its gold entity (the first token of the one, the
        # last token of the other; a run of tokens of one gold entity counts as one mention) that the predicted ids
        # keep: both tokens carry the same nonzero predicted entity.
        last_token_of = {}
        for position, (a, b) in enumerate(zip(p, g)):
            if b:
                starts_mention = position == 0 or g[position - 1] != b
                if starts_mention and b in last_token_of:
                    same_pairs += 1
                    same_same += int(a != 0 and p[last_token_of[b]] == a)
                last_token_of[b] = position
    return {
        "mention_token_precision": both / predicted if predicted else math.nan,
        "mention_token_recall": both / actual if actual else math.nan,
        "gold_chain_links_kept": same_same / same_pairs if same_pairs else math.nan,
    }


def gain_share(zeroed: float, predicted: float, gold: float) -> float:
    return (zeroed - predicted) / (zeroed - gold) if zeroed != gold else math.nan


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(DATA / "tokenizers" / "gpt2")
    split = litbank_split(args.litbank)
    report = split["report"][: args.report_books] if args.report_books else split["report"]

    if args.gpt2e:
        model, training = load_gpt2e(args.gpt2e, split)
        training = {**training, "loaded_from": args.gpt2e}
    else:
        model, training = train_gpt2e(args, tokenizer, split)
    print(f"GPT2E: {json.dumps({k: training[k] for k in ('train_seconds', 'steps', 'mean_train_loss')})}", flush=True)

    gold = [entity_ids_for_document(document, tokenizer) for document in report]
    variants: dict[str, list[dict]] = {}
    coref_info: dict[str, dict] = {}
    for checkpoint in args.coref:
        encodings, found = coref_encodings(checkpoint, report, tokenizer, args.mention_threshold)
        name = f"predicted_{Path(checkpoint).name}"
        check_same_tokens(name, encodings, gold, report)
        variants[name] = encodings
        coref_info[name] = {
            **found["info"],
            "conll_scores_of_the_pipeline_clusters": _conll(score_coreference(report, found["responses"])),
        }
        print(f"{name}: {json.dumps(coref_info[name])}", flush=True)
    if not args.no_rule:
        responses = rule_baseline_clusters(report, mentions="rule")
        encodings = [entity_ids_for_document(document, tokenizer) for document in responses]
        check_same_tokens("rule", encodings, gold, report)
        variants["rule"] = encodings
        coref_info["rule"] = {"conll_scores_of_the_clusters": _conll(score_coreference(report, responses))}
    if args.controls:
        # Gold mention spans with the linking thrown away: what marking the mentions alone is worth.
        controls = {"control_gold_mentions_singletons": lambda i: i, "control_gold_mentions_one_entity": lambda i: 0}
        for name, cluster_of in controls.items():
            responses = [
                d.with_mentions([(m[0], m[1], cluster_of(i)) for i, m in enumerate(d.mentions)])
                for d in report
            ]
            encodings = [entity_ids_for_document(document, tokenizer) for document in responses]
            check_same_tokens(name, encodings, gold, report)
            variants[name] = encodings
            coref_info[name] = {"conll_scores_of_the_clusters": _conll(score_coreference(report, responses))}

    max_entities = max(e["num_entities"] for encodings in [gold, *variants.values()] for e in encodings)
    model = with_capacity(model, max_entities)
    if torch.cuda.is_available():
        model = model.cuda()
    gold_windows = windows_of(gold, args.window_length)
    # The package's own evaluation of the gold ids, over the windows it builds itself: the reference numbers.
    reference_windows = entity_lm_windows(report, tokenizer, args.window_length)
    if reference_windows["input_ids"] != [w["input_ids"] for w in gold_windows] or reference_windows["entity_ids"] != [
        w["entity_ids"] for w in gold_windows
    ]:
        raise RuntimeError("The gold windows differ from entity_lm_windows's.")
    reference = evaluate_entity_lm(model, reference_windows, batch_size=args.batch_size, progress=False)

    scores = {"gold": score_variant(model, gold_windows, gold_windows, args.batch_size)}
    for key, package_key in (("perplexity", "perplexity"), ("mention_perplexity", "mention_perplexity")):
        if not math.isclose(scores["gold"][key], reference[package_key], rel_tol=1e-6):
            raise RuntimeError(
                f"gold {key} {scores['gold'][key]} differs from evaluate_entity_lm's {reference[package_key]}."
            )
    for name, encodings in variants.items():
        scores[name] = score_variant(model, windows_of(encodings, args.window_length), gold_windows, args.batch_size)
        print(f"{name}: {json.dumps(scores[name])}", flush=True)
    scores["zeroed"] = score_variant(model, gold_windows, gold_windows, args.batch_size, use_entities=False)
    if not math.isclose(scores["zeroed"]["perplexity"], reference["perplexity_without_entities"], rel_tol=1e-6):
        raise RuntimeError("zeroed perplexity differs from evaluate_entity_lm's perplexity_without_entities.")

    gains = {
        name: {
            tokens: gain_share(scores["zeroed"][key], scores[name][key], scores["gold"][key])
            for tokens, key in (("all_tokens", "perplexity"), ("gold_mention_tokens", "mention_perplexity"))
        }
        for name in variants
    }
    per_book = {
        document.name: {
            "gpt2_tokens": len(reference_doc["input_ids"]),
            "entities": {
                "gold": reference_doc["num_entities"], **{n: v[i]["num_entities"] for n, v in variants.items()}
            },
            "mention_tokens": {
                "gold": sum(1 for e in reference_doc["entity_ids"] if e),
                **{n: sum(1 for e in v[i]["entity_ids"] if e) for n, v in variants.items()},
            },
        }
        for i, (document, reference_doc) in enumerate(zip(report, gold))
    }
    selection_windows = entity_lm_windows(split["selection"], tokenizer, args.window_length)
    selection = evaluate_entity_lm(model, selection_windows, batch_size=args.batch_size, progress=False)
    record = {
        "command": "python benchmarks/bench_gpt2e_predicted_entities.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "split": {
            "files": "the 80 LitBank .conll files in sorted name order",
            "gpt2e_trained_on": "books 1-60 (gold entity ids), fixed budget, nothing selected",
            "coreference_models_trained_on": "books 1-60, epoch and mention threshold selected on books 61-70",
            "scored_on": f"books 71-80 ({len(report)} books), seen by neither model; nothing selected on them",
            "report_books": book_names(report),
        },
        "args": vars(args),
        "gpt2e_training": training,
        "gpt2e_max_entities_at_evaluation": model.config.max_entities,
        "books_71_80": {
            "scores": scores,
            "share_of_gold_gain_kept": gains,
            "entity_id_quality": {
                name: {**coref_info.get(name, {}), **token_agreement(encodings, gold)}
                for name, encodings in variants.items()
            },
            "per_book": per_book,
        },
        "books_61_70_gold_and_zeroed_only": selection,
        "wall_seconds": time.perf_counter() - started,
    }
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(record, indent=2))
    print(table(scores, gains))


def _conll(scores: dict) -> dict:
    return {"conll_f1": scores["conll_f1"], **{k: scores[k]["f1"] for k in ("muc", "bcub", "ceafe")}}


def table(scores: dict, gains: dict) -> str:
    lines = [
        "books 71-80 | perplexity, all tokens | gold mention tokens | gain kept (all / mentions)",
        "---|---|---|---",
    ]
    for name, values in scores.items():
        gain = gains.get(name)
        kept = f"{gain['all_tokens']:.2f} / {gain['gold_mention_tokens']:.2f}" if gain else "-"
        lines.append(f"{name} | {values['perplexity']:.1f} | {values['mention_perplexity']:.1f} | {kept}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
