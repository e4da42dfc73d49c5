"""A LoRA run's verl checkpoint as a peft adapter folder: the few megabytes that carry a run on.

verl (0.9) trains LoRA with ``actor_rollout_ref.model.lora_rank`` and saves the actor as FSDP shards
(``model_world_size_W_rank_R.pt``, with ``+actor_rollout_ref.actor.checkpoint.save_lora_only=True`` only
the adapter's tensors) plus ``lora_train_meta.json`` (rank, alpha). :func:`export_adapter` turns that
into what peft writes (``adapter_config.json`` + ``adapter_model.safetensors``), which

* continues training in a later run on the same base: ``actor_rollout_ref.model.lora_adapter_path=DIR``
  (verl loads it with ``PeftModel.from_pretrained(..., is_trainable=True)``; the optimizer starts afresh);
* loads anywhere a model is named: ``agent-gym eval --model DIR``, ``agent-gym export-model --model DIR``
  (a folder with ``adapter_config.json`` is merged into the base its config names).

    python -m agent_gym_verl.lora CKPT --out DIR --base MODEL_PATH [--dtype bfloat16]
    python -m agent_gym_verl.lora --check-base DIR --base MODEL_PATH     # the same base weights?

``CKPT`` is ``trainer.default_local_dir`` (its ``latest_checkpointed_iteration.txt`` picks the step), a
``global_step_N`` folder or its ``actor`` folder. ``--base`` is written as ``base_model_name_or_path``:
the model folder the run trained (``actor_rollout_ref.model.path``); a fingerprint of its weights goes into
``agent_gym_lora_state.json``, so that ``--check-base`` can refuse a different base. SmolLM2-135M's rank-16 adapter on
every linear layer is 4.9M parameters: 9.8 MB in bfloat16, 19.5 MB in float32.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["CheckpointError", "find_actor_checkpoint", "load_lora_state", "export_adapter", "weights_fingerprint", "check_base", "main"]

#: Written next to the adapter: the verl step and checkpoint it came from.
STATE_FILE = "agent_gym_lora_state.json"
#: Module-name segments that FSDP, activation checkpointing and torch.compile wrap modules in.
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
#: peft's in-model name of a LoRA tensor: <module>.lora_A.<adapter>.weight; saved without <adapter>.
_LORA_KEY = re.compile(r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B)(?:\.(?P<adapter>[^.]+))?\.weight$")
_RANK_FILE = re.compile(r"^model_world_size_(?P<world>\d+)_rank_(?P<rank>\d+)\.pt$")


class CheckpointError(ValueError):
    """The path is not a LoRA actor checkpoint this module can read."""


def find_actor_checkpoint(path: str | Path) -> tuple[Path, int | None]:
    """The ``actor`` folder of a verl checkpoint and its step (None when the path does not say).

    ``path``: ``trainer.default_local_dir`` (the step in ``latest_checkpointed_iteration.txt``), a
    ``global_step_N`` folder, or an ``actor`` folder (``model_world_size_*_rank_*.pt`` inside)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    tracker = path / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        step_text = tracker.read_text().strip()
        if not step_text.isdigit():
            raise CheckpointError(f"{tracker}: expected a step number, found {step_text!r}")
        path = path / f"global_step_{step_text}"
    if (path / "actor").is_dir():
        path = path / "actor"
    if not any(_RANK_FILE.match(p.name) for p in path.glob("model_world_size_*_rank_*.pt")):
        raise CheckpointError(
            f"{path}: no model_world_size_*_rank_*.pt here; pass trainer.default_local_dir, a global_step_N "
            "folder or its actor folder"
        )
    step = next((int(part[len("global_step_"):]) for part in reversed(path.parts)
                 if part.startswith("global_step_") and part[len("global_step_"):].isdigit()), None)
    return path, step


def weights_fingerprint(model_dir: str | Path) -> dict[str, list[float]] | None:
    """A fingerprint of a model folder's ``*.safetensors`` weights: per tensor, its dot product with a
    fixed pseudo-random +-1 vector and its root mean square (float64). None for anything else (a hub
    name, a folder without safetensors).

    Two exports of the same model match to rounding even where the merge's float arithmetic differs in
    the last bit; another model (another warm start, another base) does not. An adapter only continues
    on the base it was trained on."""
    import torch
    from safetensors import safe_open

    folder = Path(model_dir).expanduser()
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    out: dict[str, list[float]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for name in sorted(fh.keys()):
                w = fh.get_tensor(name).to(torch.float64).flatten()
                signs = torch.randint(0, 2, (w.numel(),), generator=torch.Generator().manual_seed(w.numel()), dtype=torch.int8)
                projection = float(torch.where(signs.bool(), w, -w).sum())
                out[name] = [projection, float(w.square().mean().sqrt()), float(w.numel())]
    return out


def _same_weights(a: dict[str, list[float]], b: dict[str, list[float]], rtol: float = 1e-3) -> list[str]:
    """The tensors whose fingerprints differ. A projection over n elements of rms r moves by about
    sqrt(k) * 2**-8 * r when k of them change by one bfloat16 step, far below rtol * sqrt(n) * r unless a
    large share of the weights changed."""
    if set(a) != set(b):
        return sorted(set(a) ^ set(b))
    bad = []
    for name, (proj, rms, n) in a.items():
        proj2, rms2, n2 = b[name]
        scale = rtol * max(rms, rms2) * n**0.5
        if n != n2 or abs(proj - proj2) > scale or abs(rms - rms2) > rtol * max(rms, rms2):
            bad.append(name)
    return bad


def check_base(adapter_dir: str | Path, base: str | Path) -> None:
    """Raise :class:`CheckpointError` unless ``base`` holds the weights the adapter was trained on (as
    recorded by :func:`export_adapter`; an adapter without the record passes)."""
    state_path = Path(adapter_dir).expanduser() / STATE_FILE
    recorded = json.loads(state_path.read_text()).get("base_fingerprint") if state_path.is_file() else None
    if recorded is None:
        return
    found = weights_fingerprint(base)
    differ = ["(no safetensors)"] if found is None else _same_weights(recorded, found)
    if differ:
        raise CheckpointError(
            f"{adapter_dir} was trained on other base weights than {base} holds ({len(differ)} tensor(s) differ, "
            f"e.g. {differ[0]}): export the same model again (the same agent-r1-gym commit's `agent-gym "
            "export-model`) or train a new adapter"
        )


def _plain(key: str) -> str:
    for wrapper in _WRAPPERS:
        key = key.replace(wrapper, "")
    return key


def _local(value: Any, key: str) -> tuple[Any, Any]:
    """(this rank's tensor, its DTensor placement or None) of one saved state-dict value."""
    import torch

    # Public API only (no torch internals here): torch.distributed.tensor is public since torch 2.5, which
    # every verl this adapter supports needs anyway; DTensor.to_local() is this rank's shard.
    try:
        from torch.distributed.tensor import DTensor
    except ImportError as error:
        raise CheckpointError(f"reading a verl checkpoint needs torch>=2.5 (torch.distributed.tensor), "
                              f"torch {torch.__version__} is installed: pip install 'torch>=2.5'") from error
    if isinstance(value, DTensor):
        placements = tuple(value.placements)
        if len(placements) != 1:
            raise CheckpointError(f"{key}: a {len(placements)}-D device mesh (tensor parallel?) is not supported")
        return value.to_local(), placements[0]
    if hasattr(value, "local_shards"):  # ShardedTensor
        shards = value.local_shards()
        if len(shards) != 1 or tuple(shards[0].tensor.shape) != tuple(value.size()):
            raise CheckpointError(f"{key}: a ShardedTensor split over ranks is not supported; save with FSDP's DTensor state dicts")
        return shards[0].tensor, None
    if isinstance(value, torch.Tensor):
        return value, None
    raise CheckpointError(f"{key}: unexpected value of type {type(value).__name__} in the checkpoint")


def load_lora_state(actor_dir: str | Path) -> dict[str, Any]:
    """The LoRA tensors of a verl actor checkpoint, whole (shards of every rank joined), keyed by their
    names in the model with FSDP's wrappers stripped (``base_model.model....lora_A.default.weight``)."""
    import torch

    actor_dir = Path(actor_dir)
    files: dict[int, dict[int, Path]] = {}
    for p in actor_dir.glob("model_world_size_*_rank_*.pt"):
        m = _RANK_FILE.match(p.name)
        if m:
            files.setdefault(int(m["world"]), {})[int(m["rank"])] = p
    if len(files) != 1:
        raise CheckpointError(f"{actor_dir}: model shards of {len(files)} world sizes; expected one")
    [(world, ranks)] = files.items()
    if sorted(ranks) != list(range(world)):
        raise CheckpointError(f"{actor_dir}: world size {world} but shards of ranks {sorted(ranks)}")
    pieces: dict[str, list[Any]] = {}
    placement: dict[str, Any] = {}
    for rank in range(world):
        state = torch.load(ranks[rank], map_location="cpu", weights_only=False)
        for key, value in state.items():
            if "lora_" not in key:
                continue
            tensor, where = _local(value, key)
            name = _plain(key)
            pieces.setdefault(name, []).append(tensor)
            placement[name] = where
        del state
    if not pieces:
        raise CheckpointError(f"{actor_dir}: the checkpoint holds no LoRA tensors (was actor_rollout_ref.model.lora_rank > 0?)")
    merged: dict[str, Any] = {}
    for name, parts in pieces.items():
        where = placement[name]
        if where is not None and where.is_shard() and len(parts) > 1:
            merged[name] = torch.cat(parts, dim=where.dim).contiguous()
        else:  # replicated, a single rank, or a plain tensor every rank holds whole
            merged[name] = parts[0].contiguous()
    return merged


def export_adapter(
    checkpoint: str | Path,
    out: str | Path,
    *,
    base: str | None = None,
    dtype: str = "bfloat16",
    lora_alpha: float | None = None,
) -> dict[str, Any]:
    """Write the peft adapter of a verl LoRA checkpoint to ``out``; returns what was written (``path``,
    ``step``, ``r``, ``lora_alpha``, ``target_modules``, ``parameters``, ``bytes``).

    ``lora_alpha`` is read from the checkpoint's ``lora_train_meta.json`` (verl writes it); pass it when
    that file is missing. The rank comes from the tensors (and must agree with the metadata)."""
    import torch
    from peft import LoraConfig
    from safetensors.torch import save_file

    actor_dir, step = find_actor_checkpoint(checkpoint)
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"dtype must be bfloat16 or float32, got {dtype!r}")
    state = load_lora_state(actor_dir)
    tensors: dict[str, Any] = {}
    modules: set[str] = set()
    ranks: set[int] = set()
    for name, tensor in sorted(state.items()):
        m = _LORA_KEY.match(name)
        if m is None:
            raise CheckpointError(f"{actor_dir}: unexpected LoRA tensor name {name!r}")
        if m["adapter"] not in (None, "default"):
            raise CheckpointError(f"{actor_dir}: adapter {m['adapter']!r} in {name!r}; only peft's 'default' adapter is supported")
        key = f"{m['module']}.{m['part']}.weight"
        tensors[key] = tensor.to(getattr(torch, dtype)).contiguous()
        modules.add(m["module"].rsplit(".", 1)[-1])
        ranks.add(int(tensor.shape[0] if m["part"] in ("lora_A", "lora_embedding_A") else tensor.shape[1]))
    if len(ranks) != 1:
        raise CheckpointError(f"{actor_dir}: LoRA tensors of ranks {sorted(ranks)}; expected one rank")
    [r] = ranks
    meta_path = actor_dir / "lora_train_meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta.get("r") not in (None, r):
        raise CheckpointError(f"{meta_path}: rank {meta['r']}, but the tensors have rank {r}")
    alpha = lora_alpha if lora_alpha is not None else meta.get("lora_alpha")
    if alpha is None:
        raise CheckpointError(f"{actor_dir}: no lora_train_meta.json with lora_alpha; pass lora_alpha= (--lora-alpha)")
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    # Only the fields that define the adapter: peft fills in the rest, and a config with a newer peft's
    # extra fields is refused by older ones.
    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": str(meta.get("task_type") or "CAUSAL_LM"),
        "base_model_name_or_path": base,
        "r": r,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "inference_mode": False,
    }
    LoraConfig(**{k: v for k, v in config.items() if k != "peft_type"})  # the installed peft accepts it
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    info = {
        "path": str(out),
        "step": step,
        "checkpoint": str(actor_dir),
        "base_model_name_or_path": base,
        "base_fingerprint": None if base is None else weights_fingerprint(base),
        "r": r,
        "lora_alpha": alpha,
        "target_modules": sorted(modules),
        "dtype": dtype,
        "parameters": int(sum(t.numel() for t in tensors.values())),
        "bytes": (out / "adapter_model.safetensors").stat().st_size,
    }
    (out / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent_gym_verl.lora",
        description="Write the peft LoRA adapter of a verl LoRA checkpoint (to continue training with "
        "actor_rollout_ref.model.lora_adapter_path=OUT, or to load with agent-gym --model OUT).",
    )
    parser.add_argument("checkpoint", nargs="?", help="trainer.default_local_dir, a global_step_N folder or its actor folder")
    parser.add_argument("--out", help="the adapter folder to write")
    parser.add_argument("--check-base", metavar="ADAPTER_DIR",
                        help="instead: exit 1 unless --base holds the weights ADAPTER_DIR was trained on")
    parser.add_argument("--base", default=None, help="base_model_name_or_path: the model folder the run trained")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="dtype of the saved tensors (default bfloat16: half the size)")
    parser.add_argument("--lora-alpha", type=float, default=None, help="when the checkpoint has no lora_train_meta.json")
    args = parser.parse_args(argv)
    if args.check_base is not None:
        if args.base is None or args.checkpoint is not None or args.out is not None:
            parser.error("--check-base ADAPTER_DIR takes --base MODEL and nothing else")
        try:
            check_base(args.check_base, args.base)
        except CheckpointError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{args.check_base}: trained on {args.base}'s weights")
        return 0
    if args.checkpoint is None or args.out is None:
        parser.error("a checkpoint and --out are required")
    try:
        info = export_adapter(args.checkpoint, args.out, base=args.base, dtype=args.dtype, lora_alpha=args.lora_alpha)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"adapter of step {info['step']}: {info['path']} (r={info['r']}, lora_alpha={info['lora_alpha']:g}, "
        f"{info['parameters']:,} parameters, {info['bytes'] / 1e6:.1f} MB {info['dtype']}; "
        f"modules {','.join(info['target_modules'])})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
