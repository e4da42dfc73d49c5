#!/bin/bash
# After a (possibly timed-out) verl run: stop its Ray cluster and any vLLM process still holding the GPU.
ray stop --force >/dev/null 2>&1
pkill -9 -f "ray::|raylet|gcs_server|vllm.entrypoints|EngineCore" >/dev/null 2>&1
sleep 3
nvidia-smi --query-gpu=memory.used --format=csv,noheader
