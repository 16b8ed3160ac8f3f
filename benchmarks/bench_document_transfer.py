"""A document-mode coreference checkpoint as users run it (issue 38): speed of `pipeline("coreference")` on whole
LitBank books beside the rule baseline, and zero-shot transfer to GAP (as the fast-coref paper measures transfer).

* Speed (report books 71-80 of the LitBank split of `bench_litbank_coref.py`, never trained or selected on): each
  book's words joined by single spaces, one `pipe(text)` call per book, wall seconds per book (after one warm-up
  call on another book), on `--threads` CPU threads; the rule baseline (`rule_baseline_clusters`, no model) timed on
  the same books from their CoNLL words.
* GAP zero-shot (GAP validation, 454 rows; the checkpoint never saw GAP): the pipeline's clusters of the row's
  text; candidate A (B) is resolved as coreferent when a mention of the pronoun's cluster overlaps A's (B's)
  characters. A pronoun the model did not propose as a mention resolves to neither. Scored with GAP's F1
  (`score_gap`: overall, masculine, feminine, bias), beside the GAP-trained models of benchmarks/RESULTS.md.
  Nothing is tuned on GAP: the checkpoint's own span threshold (chosen on LitBank selection books) is used.

    python benchmarks/bench_document_transfer.py runs/issue38/petra-document --threads 2

Results are written to --results (JSON keyed by the checkpoint's folder name).
"""

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import pipeline

import hf_entity_models  # noqa: F401  (registers pipeline("coreference"))
from hf_entity_models.tasks.coreference import read_conll_coreference, score_gap
from hf_entity_models.tasks.coreference.gap import gap_gold, load_gap
from hf_entity_models.tasks.coreference.rule_baseline import rule_baseline_clusters

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
LITBANK = SHARED / "litbank" / "conll"
GAP_VALIDATION = SHARED / "gap" / "gap-validation.tsv"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gap-rows", type=int, default=None, help="the first N GAP validation rows (default: all)")
    parser.add_argument("--results", default="benchmarks/results/document_transfer_issue38.json")
    return parser.parse_args()


def report_books() -> list:
    files = sorted(LITBANK.glob("*.conll"))
    if len(files) != 80:
        raise SystemExit(f"Expected the 80 LitBank files in {LITBANK}, found {len(files)}.")
    return read_conll_coreference(files[70:])


def speed(pipe, books) -> dict:
    pipe(" ".join(read_conll_coreference(sorted(LITBANK.glob("*.conll"))[:1])[0].words))  # warm-up, a training book
    seconds = []
    for book in tqdm(books, desc="pipeline"):
        start = time.perf_counter()
        pipe(" ".join(book.words))
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    rule_baseline_clusters(books, mentions="rule")
    rule_seconds = (time.perf_counter() - start) / len(books)
    return {"pipeline_seconds_per_book": sum(seconds) / len(seconds), "pipeline_seconds_max": max(seconds),
            "words_per_book": sum(len(book.words) for book in books) / len(books),
            "rule_baseline_seconds_per_book": rule_seconds}


def overlaps(mention: dict, start: int, end: int) -> bool:
    return mention["start"] < end and start < mention["end"]


def resolve(clusters: list, row) -> tuple[bool, bool]:
    """(A coreferent, B coreferent) from the clusters: the candidates a mention of the pronoun's cluster overlaps."""
    pronoun = (row["pronoun_offset"], row["pronoun_offset"] + len(row["pronoun"]))
    candidates = [(row["a_offset"], row["a_offset"] + len(row["a"])), (row["b_offset"], row["b_offset"] + len(row["b"]))]
    for cluster in clusters:
        if any(mention["start"] == pronoun[0] and mention["end"] == pronoun[1] for mention in cluster):
            return tuple(any(overlaps(m, *span) and not overlaps(m, *pronoun) for m in cluster) for span in candidates)
    return False, False


def gap_transfer(pipe, limit: int | None) -> dict:
    rows = load_gap(GAP_VALIDATION)
    if limit is not None:
        rows = rows.select(range(limit))
    predictions, pronoun_found = {}, 0
    for row in tqdm(rows, desc="GAP validation"):
        clusters = pipe(row["text"])["clusters"]
        predictions[row["id"]] = resolve(clusters, row)
        pronoun_found += any(m["start"] == row["pronoun_offset"] for cluster in clusters for m in cluster)
    scores = {name: value if math.isfinite(value) else None  # bias is NaN when a gender's F1 is 0
              for name, value in score_gap(gap_gold(rows), predictions).as_dict().items()}
    return {**scores, "rows": len(rows), "pronoun_proposed_share": pronoun_found / len(rows)}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    pipe = pipeline("coreference", model=args.checkpoint, device="cpu")
    if getattr(pipe.model.config, "coreference_mode", "tokens") != "document":
        raise SystemExit(f"{args.checkpoint} is not a document-mode checkpoint (coreference_mode='document').")
    row = {"speed_report_books": speed(pipe, report_books()), "gap_validation_zero_shot": gap_transfer(pipe, args.gap_rows),
           "span_threshold": float(pipe.model.config.span_threshold),
           "machine": f"{platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)"}
    results = Path(args.results)
    stored = json.loads(results.read_text()) if results.exists() else {}
    stored[Path(args.checkpoint).name] = row
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(stored, indent=1, sort_keys=True))
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
