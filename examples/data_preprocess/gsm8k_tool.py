"""GSM8K with a calculator tool (multi-step) to verl parquet files, for examples/run_qwen3-4b_gsm8k_tool.sh.

    python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool [--mode concat]

Rows come from the env ``AgentR1/GSM8KTool-v0``'s own task source (``agent_gym_verl.export``). By
default they select the step-mode agent loop (``agent_gym_step``: trajectory-aware step-level
advantages, one training sample per segment of append-only turns, run with
``python -m agent_gym_verl.main_ppo``), like Agent-R1's step-level training; ``--mode concat`` selects ``agent_gym`` (one sample per trajectory, tool tokens
masked; stock verl). The tool, its schema and the prompt are the env's: nothing about them is stored
here beyond the env id.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import export, parse_args  # noqa: E402

if __name__ == "__main__":
    args = parse_args("~/data/gsm8k_tool", "step", __doc__.splitlines()[0])
    export("AgentR1/GSM8KTool-v0", args, ground_truth=lambda task: task.answer.replace(",", ""))
