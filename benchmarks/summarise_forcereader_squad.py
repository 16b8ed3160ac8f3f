"""Markdown tables of `bench_forcereader_squad.py`'s results files: one table per SQuAD version, then the step times.

    python benchmarks/summarise_forcereader_squad.py benchmarks/results/forcereader_squad_issue22b_*.json

A file may be named as PATH:RUNG,RUNG to take only those rungs from it (e.g. the joint baseline's seeds from an
earlier file measured with the same budget, next to a new default of `forcereader`). Runs from several files are
merged by (version, seed, rung): files measured with another budget are refused, and a
run found twice is refused (which one would count is not obvious). Scores are on the report part of the held-out
articles; "selection F1" is on the selection part, where the SQuAD 2.0 threshold and the defaults were chosen.
Mean ± sample standard deviation over seeds; the paired difference is the rung's F1 minus the joint baseline's on
the same seed.
"""

import argparse
import json
import statistics
from pathlib import Path

BASELINE = "joint-bert"


def merge(names: list[str]) -> tuple[dict, dict | None, dict]:
    """(version -> rung -> seed -> record, the speed record if any file has one, the common budget)."""
    quality: dict = {}
    speed, budget = None, None
    for name in names:
        path_text, _, only = name.partition(":")
        path, kept = Path(path_text), set(only.split(",")) if only else None
        results = json.loads(path.read_text())
        if budget is None:
            budget = results["budget"]
        elif results["budget"] != budget:
            raise SystemExit(f"{path} was measured with another budget ({results['budget']}) than {budget}.")
        if results.get("speed") and kept is None:
            if speed is not None:
                raise SystemExit(f"{path} has step times too: pass only one file with step times (one machine).")
            speed = results["speed"]
        for version, per_version in results["quality"].items():
            for seed, runs in per_version["runs"].items():
                for rung, record in runs.items():
                    if kept is not None and rung not in kept:
                        continue
                    seeds = quality.setdefault(version, {}).setdefault(rung, {})
                    if seed in seeds:
                        raise SystemExit(f"SQuAD {version}, seed {seed}, {rung} is in more than one file ({path}).")
                    seeds[seed] = record
    return quality, speed, budget or {}


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def optional_spread(values: list[float | None], digits: int = 1) -> str:
    """Mean ± spread of the seeds that recorded the value (older records lack the threshold-free views)."""
    present = [value for value in values if value is not None]
    if not present:
        return "-"
    text = f"{statistics.mean(present):.{digits}f}" + (f" ± {statistics.stdev(present):.{digits}f}" if len(present) > 1 else "")
    return text + (f" ({len(present)} of {len(values)} seeds)" if len(present) < len(values) else "")


def version_table(version: str, rungs: dict) -> list[str]:
    f1_key = "f1"
    em_key = "exact_match" if version == "1.1" else "exact"
    extra = (" HasAns F1 | NoAns F1 | threshold (chosen on selection) | HasAns F1, always answering | no-answer AUROC |"
             " best F1 on report (oracle, not a result) |") if version == "2.0" else ""
    lines = [
        f"| rung | seeds | EM | F1 | F1 per seed | paired F1 - joint, per seed (mean) | mean F1 / joint's (same seeds) | selection F1 |{extra}",
        "|---|---|---|---|---|---|---|---|" + ("---|" * 6 if extra else ""),
    ]
    baseline = rungs.get(BASELINE, {})
    for rung, seeds in rungs.items():
        order = sorted(seeds, key=int)
        f1 = [seeds[s]["report"][f1_key] for s in order]
        em = [seeds[s]["report"][em_key] for s in order]
        selection = [seeds[s]["selection"][f1_key] for s in order]
        paired = [seeds[s]["report"][f1_key] - baseline[s]["report"][f1_key] for s in order if s in baseline]
        paired_text = "-" if rung == BASELINE or not paired else (
            ", ".join(f"{d:+.1f}" for d in paired) + f" ({statistics.mean(paired):+.1f})"
        )
        shared = [s for s in order if s in baseline]  # the ratio is over the seeds both ran
        ratio = "-" if not shared else f"{statistics.mean(seeds[s]['report'][f1_key] for s in shared) / statistics.mean(baseline[s]['report'][f1_key] for s in shared):.2f}"
        row = (f"| `{rung}` | {', '.join(order)} | {spread(em)} | **{spread(f1)}** | "
               f"{', '.join(f'{v:.1f}' for v in f1)} | {paired_text} | {ratio} | {spread(selection)} |")
        if extra:
            has = [seeds[s]["report"].get("HasAns_f1", float("nan")) for s in order]
            no = [seeds[s]["report"].get("NoAns_f1", float("nan")) for s in order]
            thresholds = ", ".join(f"{seeds[s]['null_score_diff_threshold']:.2f}" for s in order)
            always = [seeds[s].get("report_answer_all", {}).get("HasAns_f1") for s in order]
            aurocs = [seeds[s].get("report_no_answer_auroc") for s in order]
            oracle = [seeds[s].get("report_oracle_best_f1") for s in order]
            row += (f" {spread(has)} | {spread(no)} | {thresholds} | {optional_spread(always)} | "
                    f"{optional_spread(aurocs, digits=2)} | {optional_spread(oracle)} |")
        lines.append(row)
    return lines


def speed_table(speed: dict) -> list[str]:
    lines = ["| rung | median s / step | ratio to joint (median of interleaved batches) | min .. max |", "|---|---|---|---|"]
    for rung, timing in speed["rungs"].items():
        lines.append(
            f"| `{rung}` | {timing['median_step_s']:.3f} | **{timing['ratio_to_baseline']:.2f}** | "
            f"{timing['ratio_min']:.2f} .. {timing['ratio_max']:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="results files, each PATH or PATH:RUNG,RUNG")
    args = parser.parse_args(argv)
    quality, speed, budget = merge(args.results)
    print(f"Budget: {json.dumps(budget)}\n")
    for version in sorted(quality):
        print(f"SQuAD {version} (report part):\n")
        print("\n".join(version_table(version, quality[version])) + "\n")
    if speed:
        print("Train-step time:\n")
        print("\n".join(speed_table(speed)))


if __name__ == "__main__":
    main()
