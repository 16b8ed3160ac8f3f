"""Markdown tables of `bench_gap_quality.py`'s results file: one row per tag, then the evaluation-only choices.

    python benchmarks/summarise_gap_quality.py [--results benchmarks/results/gap_quality.json] [--baseline TAG]

Every F1 is x 100. "clean test" is GAP validation, scored once at the threshold chosen on the selection part (400
held-out GAP development rows); mean ± sample standard deviation over the seeds of the row, with each seed's value.
`--baseline` adds each row's difference to that row, seed by seed (same seeds, same data split).
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


def main_table(results: dict, baseline: str | None) -> list[str]:
    lines = [
        "| row | seeds | clean test F1 (GAP validation) | per seed | M / F | selection-part F1 | best epochs |"
        + (f" minus {baseline}, per seed |" if baseline else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if baseline else ""),
    ]
    base_runs = {run.get("seed"): run for run in results[baseline]["runs"]} if baseline else {}
    for tag, record in results.items():
        runs = record["runs"]
        clean = per_seed(runs, "validation_clean_test")
        male = statistics.mean(per_seed(runs, "validation_clean_test", "masculine_f1"))
        female = statistics.mean(per_seed(runs, "validation_clean_test", "feminine_f1"))
        epochs = ", ".join(str(run.get("best_epoch", "-")) for run in runs)
        row = (
            f"| {tag} | {', '.join(str(run.get('seed', '-')) for run in runs)} | {mean_and_spread(clean)} | "
            f"{', '.join(f'{value:.1f}' for value in clean)} | {male:.1f} / {female:.1f} | "
            f"{mean_and_spread(per_seed(runs, 'selection_part'))} | {epochs} |"
        )
        if baseline:
            differences = [
                (run["validation_clean_test"]["f1"] - base_runs[run["seed"]]["validation_clean_test"]["f1"]) * 100
                for run in runs
                if run.get("seed") in base_runs
            ]
            row += f" {', '.join(f'{value:+.1f}' for value in differences) or '-'} |"
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
    parser.add_argument("--baseline", default=None, help="tag whose per-seed F1 every row is compared with")
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    if args.baseline is not None and args.baseline not in results:
        raise SystemExit(f"--baseline {args.baseline!r} is not a tag of {args.results}: {sorted(results)}")
    print("\n".join(main_table(results, args.baseline)))
    print()
    print("\n".join(choices_table(results)))


if __name__ == "__main__":
    main()
