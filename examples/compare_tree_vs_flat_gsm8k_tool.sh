#!/bin/bash
# Tree against flat GRPO groups at the same number of generated tokens, on GSM8KTool-v0 from the warm-started
# SmolLM2-135M (smollm2-135m-tool), step mode, the learn recipe (examples/learn_smollm2-135m_gsm8k_tool.sh) in
# two arms of 8 trajectories per prompt and 256 samples per optimizer step:
#   flat  8 independent episodes per prompt, one GRPO group of 8 (the recipe as it is)
#   tree  TREE_N=4 trees per prompt, each played by play_tree and branched once in TREE_WIDTH=2 at step
#         TREE_BRANCH_AT=[1] (after the first calculator answer; a branch at step 0 would be one more
#         independent episode), TREE_MAX_LEAVES=2 leaves: the steps after a branch point get per-state GRPO
#         groups, the shared first step GRPO over the 4 trees (docs/verl.md, "Tree rollouts");
#         ppo_mini_batch_size 64 x 4 = 256 rows, as the flat arm's 32 x 8
# Same seeds (data.seed = part), at least TOTAL_STEPS=40 steps each, then the arm that generated fewer tokens
# (the tree arm, whose trees share their first step) trains on to the other's count; held-out greedy
# accuracy on the same first 512 test problems every 5 steps, plotted against tokens generated; the final
# models on all 1,319 test problems, paired (examples/compare_arms_gsm8k_tool.sh: the steps). The tree
# settings above are environment variables of this script.
#
# Hardware: one GPU of 80 GB or more (measured on H200s; the recipe's actor peak is ~20 GB, vLLM takes 0.4).
# Before it (docs/verl.md, "Comparing credit assignment"): the install, then
#   agent-gym export-model --model smollm2-135m-tool --out ~/models/smollm2-135m-tool
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool --mode step
#   agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out ~/data/gsm8k_tool_val512 --mode step
# Run (again, after any interruption: finished parts are skipped):
#   bash examples/compare_tree_vs_flat_gsm8k_tool.sh
# How long, on one H200 (docs/performance.md, "Learning on one H200": start-up and the step-0 validation
# about 4-5 minutes a part, 20-55 s a flat step; a tree step generates in two rounds, the branches after
# their root): parts of 10 steps take about 8-15 minutes, both arms' 40 steps 70-120 minutes, plus about
# 1-3 tree parts to equal the tokens and about 5 minutes for the two final evaluations: some 1.5-3 hours.
# Where a call or a lease is shorter, MAX_UNITS=1 does one part (or one final evaluation) per run; or run
# it detached and read its log:
#   setsid nohup bash examples/compare_tree_vs_flat_gsm8k_tool.sh > compare_tree_vs_flat.log 2>&1 &
# Outputs: RUN_ROOT (~/runs/compare_tree_vs_flat): flat/ and tree/ (partN/{metrics.jsonl,adapter/,log.txt},
# final/{eval.jsonl,eval.json}), budget.txt, compare.txt/.json (tree - flat on 1,319, paired SE, sign test),
# compare_first512.txt, per_task.csv, heldout_tokens.{csv,png,txt}, heldout_steps.{csv,png,txt}, summary.txt.
# To move to another machine keep RUN_ROOT without its partN/ckpt/ folders (tens of MB).
# Settings: RUN_ROOT, MODEL_PATH, TOTAL_STEPS (40), STEPS_PER_PART (10), MAX_TOPUP_PARTS (8), MAX_UNITS (0: all),
# EVAL_EPISODES (1319), TREE_N, TREE_WIDTH, TREE_BRANCH_AT, TREE_MAX_LEAVES; extra arguments are hydra
# options for every part of both arms.
set -euo pipefail
TREE_N=${TREE_N:-4}
TREE_WIDTH=${TREE_WIDTH:-2}
TREE_BRANCH_AT=${TREE_BRANCH_AT:-[1]}
TREE_MAX_LEAVES=${TREE_MAX_LEAVES:-2}
# 256 sampled rows per optimizer step in both arms: verl counts ppo_mini_batch_size in prompts x rollout.n,
# and caps it at the batch's 64 prompts
TREE_MINI=$(( 256 / TREE_N )); (( TREE_MINI <= 64 )) || TREE_MINI=64
export RUN_ROOT=${RUN_ROOT:-$HOME/runs/compare_tree_vs_flat}
export ARM1="flat:MODE=step N=8"
export ARM2="tree:MODE=step N=$TREE_N MINI=$TREE_MINI TREE_WIDTH=$TREE_WIDTH TREE_BRANCH_AT=$TREE_BRANCH_AT TREE_MAX_LEAVES=$TREE_MAX_LEAVES"
exec bash "$(dirname "$0")/compare_arms_gsm8k_tool.sh" "$@"
