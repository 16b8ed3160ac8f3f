"""Markdown tables of `bench_gap_quality.py`'s results file: one row per tag, then the evaluation-only choices.

    python benchmarks/summarise_gap_quality.py [--results benchmarks/results/gap_quality.json] [--baseline TAG ...]

Every F1 is x 100. "clean test" is GAP validation, scored once at the threshold chosen on the selection part (400
held-out GAP development rows); mean ± sample standard deviation over the seeds of the row, with each seed's value.
`--baseline` adds each row's difference to a baseline row, seed by seed (same seeds, same data split), on the
selection part (what decides) and on the clean test; a row is compared with the first baseline trained for the
same number of epochs, and with none if no baseline was.
"""

import argparse
import json
import statistics
from pathlib import Path


def mean_and_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f} (1 seed)"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def per_seed(runs: list[dict], part: str, field: str = "f1") -> list[float]:
    return [run[part][field] * 100 for run in runs]


def paired_differences(runs: list[dict], base_runs: dict, part: str) -> str:
    differences = [
        (run[part]["f1"] - base_runs[run["seed"]][part]["f1"]) * 100 for run in runs if run.get("seed") in base_runs
    ]
    return ", ".join(f"{value:+.1f}" for value in differences) or "-"


def baseline_for(record: dict, results: dict, baselines: list[str]) -> str | None:
    return next((tag for tag in baselines if results[tag].get("epochs") == record.get("epochs")), None)


def main_table(results: dict, baselines: list[str]) -> list[str]:
    header = "| row | epochs | seeds | clean test F1 (GAP validation) | per seed | M / F | selection-part F1 | best epochs |"
    rule = "|---|---|---|---|---|---|---|---|"
    if baselines:
        header += " compared with | minus it, selection part, per seed | minus it, clean test, per seed |"
        rule += "---|---|---|"
    lines = [header, rule]
    for tag, record in results.items():
        runs = record["runs"]
        clean = per_seed(runs, "validation_clean_test")
        male = statistics.mean(per_seed(runs, "validation_clean_test", "masculine_f1"))
        female = statistics.mean(per_seed(runs, "validation_clean_test", "feminine_f1"))
        epochs = ", ".join(str(run.get("best_epoch", "-")) for run in runs)
        row = (
            f"| {tag} | {record.get('epochs', '-') if record['model'] != 'probe' else '-'} | "
            f"{', '.join(str(run.get('seed', '-')) for run in runs)} | {mean_and_spread(clean)} | "
            f"{', '.join(f'{value:.1f}' for value in clean)} | {male:.1f} / {female:.1f} | "
            f"{mean_and_spread(per_seed(runs, 'selection_part'))} | {epochs} |"
        )
        baseline = baseline_for(record, results, baselines) if record["model"] != "probe" else None
        if baselines and baseline is None:
            row += " - | - | - |"
        elif baselines:
            base_runs = {run.get("seed"): run for run in results[baseline]["runs"]}
            row += (
                f" {baseline} | {paired_differences(runs, base_runs, 'selection_part')} | "
                f"{paired_differences(runs, base_runs, 'validation_clean_test')} |"
            )
        lines.append(row)
    return lines


def choices_table(results: dict) -> list[str]:
    lines = [
        "| row | evaluation choice | clean test F1 | selection-part F1 |",
        "|---|---|---|---|",
    ]
    for tag, record in results.items():
        runs = [run for run in record["runs"] if "evaluation_choices" in run]
        if not runs:
            continue
        for choice in runs[0]["evaluation_choices"]:
            clean = [run["evaluation_choices"][choice]["validation_clean_test"]["f1"] * 100 for run in runs]
            selection = [run["evaluation_choices"][choice]["selection_part"]["f1"] * 100 for run in runs]
            lines.append(f"| {tag} | {choice} | {mean_and_spread(clean)} | {mean_and_spread(selection)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(Path(__file__).parent / "results" / "gap_quality.json"))
    parser.add_argument(
        "--baseline", nargs="+", default=[], help="tags whose per-seed F1 rows of the same epochs are compared with"
    )
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    unknown = [tag for tag in args.baseline if tag not in results]
    if unknown:
        raise SystemExit(f"--baseline {unknown} not among the tags of {args.results}: {sorted(results)}")
    print("\n".join(main_table(results, args.baseline)))
    print()
    print("\n".join(choices_table(results)))


if __name__ == "__main__":
    main()
