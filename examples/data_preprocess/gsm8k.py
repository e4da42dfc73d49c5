"""GSM8K (single step) to verl parquet files: the sanity-check task of examples/run_qwen2.5-3b.sh.

    python3 examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k

Rows come from the env ``AgentR1/GSM8K-v0``'s own task source (``agent_gym_verl.export``): the prompt
is the env's opening chat, ``extra_info`` names env and task, and ``agent_name`` selects the
``agent_gym`` agent loop (concat mode; one step, so concat and step mode coincide). The data comes
from ``--local_dataset_path``, ``$AGENT_GYM_GSM8K_DIR`` or the copy packaged with agent-r1-gym-gsm8k.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import export, parse_args  # noqa: E402

if __name__ == "__main__":
    args = parse_args("~/data/gsm8k", "concat", __doc__.splitlines()[0])
    export("AgentR1/GSM8K-v0", args, ground_truth=lambda task: task.answer.replace(",", ""))
