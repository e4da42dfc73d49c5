#!/bin/bash
# GRPO on SearchQA-v0 (multi-hop questions over the generated encyclopedia, `search` and `open` tools) from
# SmolLM2-135M warm-started on grounded search demonstrations, on ONE GPU: the learn recipe
# (examples/learn_smollm2-135m_gsm8k_tool.sh: step mode, LoRA r16, 64 prompts x 8 episodes a step, parts that
# each fit a short lease) with SearchQA's rows, model and prompt length. The default model never answers
# SearchQA (0/20 on every difficulty, docs/performance.md), so RL starts from the warm start.
#
#   python3 examples/sft_warmstart.py --env AgentR1/SearchQA-v0 --env-kwarg difficulty=medium \
#       --out ~/models/smollm2-135m-searchqa-lora --limit 4000 --lora-rank 16 --lr 5e-4 --epochs 2 --batch-size 32
#   agent-gym export-model --model ~/models/smollm2-135m-searchqa-lora --out ~/models/smollm2-135m-searchqa
#   agent-gym export-verl AgentR1/SearchQA-v0 --split train --limit 8192 --env-kwarg difficulty=medium \
#       --out ~/data/searchqa_medium --mode step
#   agent-gym export-verl AgentR1/SearchQA-v0 --split test --limit 512 --env-kwarg difficulty=medium \
#       --out ~/data/searchqa_medium_val512 --mode step
#   bash examples/learn_smollm2-135m_searchqa.sh                      # part 1, then the adapter
#   PART=2 ADAPTER=~/runs/searchqa_learn/part1/adapter bash examples/learn_smollm2-135m_searchqa.sh
#   python3 examples/plot_heldout_accuracy.py ~/runs/searchqa_learn/part*/metrics.jsonl --csv c.csv --png c.png
#
# Held-out: 512 test questions of DIFFICULTY (the tasks of seeds 0-511 of the test split, whose questions
# hash there and are never trained on), greedy, before training and every TEST_FREQ steps: val-core/<source>/acc/mean@1,
# val-aux/<source>/tool_calls/mean@1 (searches and opens per episode) and val-aux/<source>/answer_f1/mean@1
# (the answer's token F1). The paired test of the start against the end, on the same 512 questions (episode
# i is reset with seed i, as export-verl drew the validation rows; vLLM loads the adapter merged into its base):
#   agent-gym eval AgentR1/SearchQA-v0 --split test --env-kwarg difficulty=medium --model ~/models/smollm2-135m-searchqa \
#       --backend vllm --episodes 512 --out start.jsonl
#   agent-gym export-model --model ~/runs/searchqa_learn/part1/adapter --out ~/models/searchqa-rl-part1
#   agent-gym eval AgentR1/SearchQA-v0 --split test --env-kwarg difficulty=medium --model ~/models/searchqa-rl-part1 \
#       --backend vllm --episodes 512 --out end.jsonl
#   python3 examples/compare_evals.py start.jsonl end.jsonl
#
# Settings: DIFFICULTY (medium: the rows' difficulty, used by the default folders and the commands a missing
# input's message names), PROMPT_LENGTH (2048: a medium episode's context reaches about 1,100 tokens, a hard
# one more), and every setting of the learn recipe (STEPS, BATCH, N, LR, PART, ADAPTER, MODE, TREE_WIDTH,
# ...; its header). Extra arguments are hydra options. AGENT_GYM_VERL_DRY_RUN=1 composes verl's config and stops.
set -euo pipefail

DIFFICULTY=${DIFFICULTY:-medium}
case "$DIFFICULTY" in easy|medium|hard) ;; *) echo "DIFFICULTY must be easy, medium or hard, got '$DIFFICULTY'" >&2; exit 2 ;; esac
MODE=${MODE:-step}
suffix=$([[ $MODE == concat ]] && echo _concat || true)
export MODE
export MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-searchqa}
export DATA_DIR=${DATA_DIR:-$HOME/data/searchqa_$DIFFICULTY$suffix}
export VAL_DIR=${VAL_DIR:-$HOME/data/searchqa_${DIFFICULTY}${suffix}_val512}
export RUN_DIR=${RUN_DIR:-$HOME/runs/searchqa_learn$suffix${TREE_WIDTH:+_tree}}
export PROMPT_LENGTH=${PROMPT_LENGTH:-2048}
export RECIPE=examples/learn_smollm2-135m_searchqa.sh   # the command the next part's line names
export PROJECT=${PROJECT:-agent-gym-searchqa} NAME=${NAME:-smollm2_135m_searchqa_$DIFFICULTY}
export MODEL_CMD="python3 examples/sft_warmstart.py --env AgentR1/SearchQA-v0 --env-kwarg difficulty=$DIFFICULTY \
--out ${MODEL_PATH}-lora --limit 4000 --lora-rank 16 --lr 5e-4 --epochs 2 --batch-size 32 && \
agent-gym export-model --model ${MODEL_PATH}-lora --out $MODEL_PATH"
export DATA_CMD="agent-gym export-verl AgentR1/SearchQA-v0 --split train --limit 8192 --env-kwarg difficulty=$DIFFICULTY \
--out $DATA_DIR --mode $MODE"
export VAL_CMD="agent-gym export-verl AgentR1/SearchQA-v0 --split test --limit 512 --env-kwarg difficulty=$DIFFICULTY \
--out $VAL_DIR --mode $MODE"
exec bash "$(dirname "$0")/learn_smollm2-135m_gsm8k_tool.sh" "$@"
