#!/bin/bash
# Device side: install our packages next to the packed stack, convert the model, run one job.
set -uo pipefail
export JOB_START=$(date +%s)   # the scripts size their timeouts from it
bash .gpu/bin/unpack.sh open
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl 2>&1 | tail -2
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/site \
  . ./envs/gsm8k ./envs/python ./envs/games ./envs/countdown ./envs/arithmetic ./trainers/verl 2>&1 | grep -v WARNING | tail -3
if [ ! -f /root/smollm2/config.json ]; then
  python3 .gpu/bin/convert_smollm2.py /root/smollm2 /tmp/site/_files/SmolLM2-135M-Instruct.Q4_1.gguf 2>&1 | tail -1
  # the GGUF names <|im_start|> as eos; the chat model ends turns with <|im_end|> (id 2), as config.json says
  python3 - <<'PY'
import json
p = "/root/smollm2/tokenizer_config.json"
d = json.load(open(p)); d["eos_token"] = "<|im_end|>"; d.pop("eos_token_id", None); json.dump(d, open(p, "w"), indent=1)
PY
fi
mkdir -p /root/data && cp -r .gpu/data/* /root/data/
export AGENT_GYM_GSM8K_DIR=/root/data/gsm8k PATH=/tmp/site/bin:$PATH
export RAY_ADDRESS=local   # every verl run starts its own Ray instance (two may run at once, one per GPU)
echo "setup: $(( $(date +%s) - JOB_START )) s, $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
"$@"
