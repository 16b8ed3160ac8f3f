"""Markdown tables of `bench_litbank_coref.py` records: CoNLL F1 on LitBank's report books (71-80), selected on the
selection books (61-70), for the rule baseline, checkpoints scored without training, and trained seeds.

    python benchmarks/summarise_litbank_coref.py benchmarks/results/litbank_coref*.json
"""

import argparse
import json
import re
import statistics
from pathlib import Path

# Saved seeds scored again by `--evaluate` with the tag `<name>-seed<N><suffix>`: one row per name and suffix.
SEED_TAG = re.compile(r"^(.*)-seed\d+(-.*)$")
COLUMNS = (
    "conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1", "mention_f1", "gold_conll_f1", "rule_mentions_conll_f1",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="JSON records of bench_litbank_coref.py")
    return parser.parse_args()


def rows(records: dict) -> list[tuple[str, list[dict]]]:
    """(row name, report-book metrics of every seed or of the one evaluation) for every record."""
    table = []
    for tag, record in sorted(records.items()):
        for mode, metrics in sorted(record.get("rule", {}).items()):
            if mode.endswith("-report"):
                table.append((f"rule baseline, {mode.split('-')[0]} mentions", [metrics]))
        if "evaluated" in record and not SEED_TAG.match(tag):
            table.append((f"{tag} (scored without training)", [record["evaluated"]["report"]]))
        seeds = [record[key]["report"] for key in sorted(record) if key.startswith("seed") and record[key]["report"]]
        if seeds:
            table.append((f"{tag}, {len(seeds)} seeds", seeds))
    groups: dict[str, list[dict]] = {}
    for tag, record in sorted(records.items()):
        match = SEED_TAG.match(tag)
        if match and "evaluated" in record:
            groups.setdefault(match.group(1) + match.group(2), []).append(record["evaluated"]["report"])
    table.extend((f"{name}, {len(seeds)} seeds", seeds) for name, seeds in sorted(groups.items()))
    return table


def cell(values: list[float]) -> str:
    if not values or any(value is None for value in values):
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def main() -> None:
    args = parse_args()
    records = {}
    for path in args.results:
        records.update(json.loads(Path(path).read_text()))
    print("| row | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for name, metrics in rows(records):
        print(f"| {name} | " + " | ".join(cell([m.get(column) for m in metrics]) for column in COLUMNS) + " |")


if __name__ == "__main__":
    main()
