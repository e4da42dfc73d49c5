#!/usr/bin/env python3
"""A model folder for vLLM's load_format="dummy" (random weights, nothing loaded from disk): SmolLM2's
config.json with other sizes, plus SmolLM2's tokenizer files, so our envs and chat template apply as is.

    python3 make_dummy_model.py OUT hidden intermediate layers heads kv_heads [tie]
    python3 make_dummy_model.py /root/d8b 4096 14336 32 32 8     # Llama-3.1-8B's shape: 7.4B parameters

SRC names the SmolLM2 folder to start from (default /root/smollm2).
"""
import json
import os
import shutil
import sys
from pathlib import Path

src, out = Path(os.environ.get("SRC", "/root/smollm2")), Path(sys.argv[1])
hidden, inter, layers, heads, kv = map(int, sys.argv[2:7])
out.mkdir(parents=True, exist_ok=True)
cfg = json.load(open(src / "config.json"))
cfg.update(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
           num_key_value_heads=kv, head_dim=hidden // heads, tie_word_embeddings=len(sys.argv) > 7,
           max_position_embeddings=8192)
cfg["dtype"] = "bfloat16"
cfg["architectures"] = ["LlamaForCausalLM"]
json.dump(cfg, open(out / "config.json", "w"), indent=1)
for f in src.iterdir():
    if f.suffix != ".safetensors" and f.name not in ("config.json", "model.safetensors.index.json"):
        shutil.copy(f, out / f.name)
params = layers * (2 * hidden * hidden + 2 * hidden * (hidden // heads) * kv + 3 * hidden * inter) + cfg["vocab_size"] * hidden * (1 if len(sys.argv) > 7 else 2)
print(f"{out}: {params / 1e9:.2f}B parameters, KV {2 * layers * kv * (hidden // heads) * 2 / 1024:.0f} KiB per token")
