"""``agent-gym export-model``: the command line of :func:`agent_gym.model_export.export_model`, which
writes a model as a plain Hugging Face folder that vLLM and verl load.

    agent-gym export-model --out ~/models/smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
from typing import Any

from agent_gym.model_export import DTYPES, export_model

__all__ = ["add_parser"]

_EPILOG = """\
The folder holds config.json, model.safetensors, generation_config.json and the tokenizer (with its
chat template); AutoModelForCausalLM.from_pretrained(DIR), vLLM and verl load it from the path alone.
The end-of-turn token is the eos in all three (for SmolLM2: <|im_end|>, id 2; pad <|endoftext|>, id 0),
so generation stops at the end of a turn. The embedded model is dequantised from its GGUF once (and
cached), so an export takes seconds after the first. This is the first step of the GPU training
scripts (examples/run_smollm2-135m_*.sh read ~/models/smollm2-135m-instruct by default).

Gemma 3 270M (--model gemma3-270m), a pretrained base model, gets the completion template as its
chat template: an answer ends with a blank line, so eos is "\\n\\n" (id 108) and <eos> (id 1) stops
too (config and generation config list both; pad <pad>, id 0). docs/base-models.md says more.

examples:
  agent-gym export-model --out ~/models/smollm2-135m-instruct
  agent-gym export-model --model gemma3-270m --out ~/models/gemma3-270m
  agent-gym export-model --out ~/models/smollm2-fp32 --dtype float32
  agent-gym export-model --model ./my-checkpoint --out ~/models/ckpt --force"""


def add_parser(subparsers: Any, formatter_class: Any = argparse.RawDescriptionHelpFormatter) -> argparse.ArgumentParser:
    """Add the ``export-model`` subcommand to ``agent-gym``'s subparsers."""
    p = subparsers.add_parser(
        "export-model",
        help="write a model as a HF folder for vLLM/verl",
        description="Write a model as a Hugging Face folder (config.json, model.safetensors, tokenizer, "
        "generation_config.json) that vLLM, verl and transformers load from the path alone: by default the "
        "embedded SmolLM2-135M-Instruct, converted from its GGUF file, with <|im_end|> as eos.",
        epilog=_EPILOG,
        formatter_class=formatter_class,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (must be empty or new, unless --force)")
    p.add_argument("--model", default=None, metavar="NAME_OR_PATH",
                   help="a built-in name (smollm2-135m-instruct, smollm2-135m-tool, gemma3-270m), .gguf file, model or LoRA adapter folder, "
                   "or hub name (default: smollm2-135m-instruct, the embedded SmolLM2 without the tool-use adapter)")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="weight dtype (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite the model files of a non-empty folder")
    p.set_defaults(func=_cmd_export_model)
    return p


def _cmd_export_model(args: argparse.Namespace) -> int:
    from agent_gym.commands import user_errors

    # A bad --model, a non-empty --out: one "agent-gym: error: ..." line, exit status 2.
    exported = user_errors(lambda: export_model(args.out, args.model, dtype=args.dtype, force=args.force))
    print(exported.describe())
    return 0
