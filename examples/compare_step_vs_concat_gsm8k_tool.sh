#!/bin/bash
# Step-level credit against concat, at the same generated-token budget: GRPO on GSM8KTool-v0 from the
# warm-started SmolLM2-135M (smollm2-135m-tool), the learn recipe (examples/learn_smollm2-135m_gsm8k_tool.sh:
# LoRA r16, 64 prompts x 8 episodes a step, temperature 0.8) in two arms that differ only in the agent loop:
#   step    MODE=step:   step mode, one sample per segment, trajectory-level GRPO over steps (agent_gym_step)
#   concat  MODE=concat: concat mode, one sample per episode with tool tokens masked (agent_gym, stock verl)
# Same seeds (data.seed = part), at least TOTAL_STEPS=40 steps each, then the arm that generated fewer tokens
# trains on to the other's count; held-out greedy accuracy on the same first 512 test problems every 5
# steps; the final models on all 1,319 test problems, paired (examples/compare_arms_gsm8k_tool.sh: the steps).
#
# Hardware: one GPU of 80 GB or more (measured on H200s; the recipe's actor peak is ~20 GB, vLLM takes 0.4).
# Before it (docs/verl.md, "Comparing credit assignment"): the install, then
#   agent-gym export-model --model smollm2-135m-tool --out ~/models/smollm2-135m-tool
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool --mode step
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool_concat --mode concat
#   agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out ~/data/gsm8k_tool_val512 --mode step
#   agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out ~/data/gsm8k_tool_concat_val512 --mode concat
# Run (again, after any interruption: finished parts are skipped):
#   bash examples/compare_step_vs_concat_gsm8k_tool.sh
# How long, on one H200 (docs/performance.md, "Learning on one H200": start-up and the step-0 validation
# about 4-5 minutes a part, 20-55 s a step): parts of 10 steps take about 8-14 minutes, 40 steps an arm
# about 35-55 minutes, both arms 70-110 minutes, plus 0-2 parts to equal the tokens and about 5 minutes for
# the two final evaluations: some 1.5-2.5 hours in all. Where a call or a lease is shorter, MAX_UNITS=1 does
# one part (or one final evaluation) per run; or run it detached and read its log:
#   setsid nohup bash examples/compare_step_vs_concat_gsm8k_tool.sh > compare_step_vs_concat.log 2>&1 &
# Outputs: RUN_ROOT (~/runs/compare_step_vs_concat): step/ and concat/ (partN/{metrics.jsonl,adapter/,log.txt},
# final/{eval.jsonl,eval.json}), budget.txt, compare.txt/.json (concat - step on 1,319, paired SE, sign test),
# compare_first512.txt, per_task.csv, heldout_tokens.{csv,png,txt}, heldout_steps.{csv,png,txt}, summary.txt.
# To move to another machine keep RUN_ROOT without its partN/ckpt/ folders (tens of MB).
# Settings: RUN_ROOT, MODEL_PATH, TOTAL_STEPS (40), STEPS_PER_PART (10), MAX_TOPUP_PARTS (8), MAX_UNITS (0: all),
# EVAL_EPISODES (1319); extra arguments are hydra options for every part of both arms.
set -euo pipefail
export RUN_ROOT=${RUN_ROOT:-$HOME/runs/compare_step_vs_concat}
export ARM1="step:MODE=step" ARM2="concat:MODE=concat"
exec bash "$(dirname "$0")/compare_arms_gsm8k_tool.sh" "$@"
