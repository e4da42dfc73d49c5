"""Write a model as a plain Hugging Face folder that vLLM and verl load: :func:`export_model`.

The embedded default model (SmolLM2-135M-Instruct) ships as a GGUF file, which vLLM and verl do not
read. :func:`export_model` writes it (or any model :func:`agent_gym.models.resolve_model` accepts) as
``config.json`` + ``model.safetensors`` + tokenizer files + ``generation_config.json``, with the end of
turn as eos everywhere: transformers' GGUF reader maps SmolLM2's eos onto ``<|im_start|>`` (id 1),
while the model ends a turn with ``<|im_end|>`` (id 2); a folder that kept id 1 would let vLLM and verl
generate past the end of every turn.

    python -c "from agent_gym.model_export import export_model; export_model('~/models/smollm2')"

The library function, apart from the command line (``agent-gym export-model``,
:mod:`agent_gym.cli.export_model`), so that scripts and the trainer adapters' tests export a model
without importing the core's CLI. It reads the end of turn through :mod:`agent_gym.chat.template` and
loads through :mod:`agent_gym.models`, so it sits above both in the layer table.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["export_model", "ExportedModel", "DTYPES"]

DTYPES = ("bfloat16", "float32")

# Weight files a model folder may hold: with force=True, old ones are removed so that the folder
# does not mix the new weights with an earlier export's shards.
_WEIGHT_PATTERNS = ("*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class ExportedModel:
    """What :func:`export_model` wrote."""

    path: Path
    parameters: int
    dtype: str
    eos_token: str
    eos_token_id: int
    pad_token: str | None
    pad_token_id: int | None
    also_stops: tuple[tuple[str, int], ...] = ()  # further eos ids of config and generation config

    def describe(self) -> str:
        pad = f", pad {self.pad_token} (id {self.pad_token_id})" if self.pad_token_id is not None else ""
        also = "".join(f", also stops at {token} (id {i})" for token, i in self.also_stops)
        eos = self.eos_token if self.eos_token.strip() else repr(self.eos_token)  # "\n\n" shown as such
        return (f"wrote {self.path} ({self.parameters / 1e6:.0f}M parameters, {self.dtype}; "
                f"eos {eos} (id {self.eos_token_id}){also}{pad})")


def _check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty; pass --force to overwrite the model files in it")


def _end_of_turn(tokenizer: Any) -> tuple[str, int]:
    """The token that ends an assistant turn: the chat template's (one token), else the tokenizer's eos."""
    from agent_gym.chat.template import ChatTemplate

    ids = list(ChatTemplate(tokenizer).end_of_turn_ids) if getattr(tokenizer, "chat_template", None) else []
    if len(ids) == 1:
        token_id = int(ids[0])
    elif tokenizer.eos_token_id is not None:
        token_id = int(tokenizer.eos_token_id)
    else:
        raise ValueError("the tokenizer has neither a one-token end of turn nor an eos token; cannot export")
    return tokenizer.convert_ids_to_tokens(token_id), token_id


def _includes(value: Any, token_id: int) -> bool:
    return value == token_id or (isinstance(value, (list, tuple)) and token_id in value)


def _save_weights(lm: Any, folder: Path) -> None:
    """``lm.save_pretrained``; for a model read from GGUF that transformers refuses to save
    ("quantized with gguf and not serializable"), the config without its quantization entry plus
    the dequantised weights."""
    try:
        lm.save_pretrained(str(folder))
        return
    except Exception:  # noqa: BLE001 - fall back below
        for pattern in _WEIGHT_PATTERNS + ("config.json",):
            for stale in folder.glob(pattern):
                stale.unlink()
    from safetensors.torch import save_model

    config = copy.deepcopy(lm.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(str(folder))
    save_model(lm, str(folder / "model.safetensors"))  # handles tied embeddings


def export_model(
    out: str | os.PathLike[str],
    model: str | os.PathLike[str] | None = None,
    *,
    dtype: str = "bfloat16",
    force: bool = False,
) -> ExportedModel:
    """Write ``model`` (default: the embedded SmolLM2-135M-Instruct, :data:`~agent_gym.models.BASE_MODEL`,
    without the tool-use adapter of the default model) as a Hugging Face folder ``out``.

    Args:
        out: the folder to write (created; ``~`` is expanded).
        model: anything :func:`agent_gym.models.resolve_model` accepts: ``None`` or a built-in name,
            a ``.gguf`` file, a model folder, a hub name.
        dtype: ``"bfloat16"`` (what vLLM and verl run; the default) or ``"float32"``.
        force: overwrite the model files of a non-empty ``out`` (old weight files are removed, other
            files are left alone); without it a non-empty ``out`` is refused.

    Returns:
        an :class:`ExportedModel` (path, parameter count, dtype, eos and pad).

    Raises:
        FileExistsError: ``out`` is not empty (and ``force`` is false), or is a file.
        FileNotFoundError: ``model`` is neither an existing path nor a reachable hub name.
        ValueError: an unknown ``dtype``.
    """
    from agent_gym.models import BASE_MODEL, resolve_model

    # RL starts from the instruction model itself; the tool-use default is asked for by name.
    model = BASE_MODEL if model is None else model
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    target = Path(os.path.expanduser(os.fspath(out)))
    _check_target(target, force)
    resolve_model(model)  # a bad name or path fails before anything loads

    tokenizer, lm = _load(model, dtype)
    eos, eos_id, stops = _set_end_of_turn(tokenizer)
    pad_id = tokenizer.pad_token_id
    generation = _set_stop_ids(lm, stops, eos_id, pad_id)
    _write_folder(target, lm, generation, tokenizer, eos_id, pad_id)
    return ExportedModel(
        path=target,
        parameters=sum(p.numel() for p in lm.parameters()),
        dtype=dtype,
        eos_token=eos,
        eos_token_id=eos_id,
        pad_token=tokenizer.pad_token,
        pad_token_id=pad_id,
        also_stops=tuple((tokenizer.convert_ids_to_tokens(i), i) for i in stops[1:]),
    )


def _load(model: str | os.PathLike[str], dtype: str) -> tuple[Any, Any]:
    """A private copy of ``model``'s tokenizer and its weights in ``dtype`` (a LoRA adapter merged in)."""
    import torch

    from agent_gym.models import load_causal_lm, load_tokenizer

    # The tokenizer first: it is cheap, and a built-in's is checked as it is read (gemma3-270m's needs
    # transformers>=5.18), before minutes go into the weights.
    tokenizer = copy.deepcopy(load_tokenizer(model))  # the loader's copy is memoised: never mutate it
    lm = load_causal_lm(model, dtype=getattr(torch, dtype))
    if hasattr(lm, "merge_and_unload"):  # a PEFT model: write the merged weights, not the adapter
        lm = lm.merge_and_unload()
    return tokenizer, lm


def _set_end_of_turn(tokenizer: Any) -> tuple[str, int, list[int]]:
    """Make the end of turn the tokenizer's eos and give it a distinct pad where the vocabulary has one.

    Returns the end-of-turn token, its id and the ids that stop generation (the end of turn first).
    """
    eos, eos_id = _end_of_turn(tokenizer)
    # A turn also ends at the tokenizer's own eos where that is another token (a base model with the
    # completion template ends an answer with a blank line, a document with <eos>): config and
    # generation config list both, the end of turn first.
    stops = [eos_id] + [int(t) for t in [tokenizer.eos_token_id] if t is not None and int(t) != eos_id]
    tokenizer.eos_token = eos
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == eos_id:
        # a pad distinct from eos, where the vocabulary has one (SmolLM2: <|endoftext|>)
        for candidate in ("<|endoftext|>", "<pad>", "<|pad|>"):
            if candidate != eos and candidate in tokenizer.get_vocab():
                tokenizer.pad_token = candidate
                break
    return eos, eos_id, stops


def _set_stop_ids(lm: Any, stops: list[int], eos_id: int, pad_id: int | None) -> Any:
    """Put the stop ids and pad into ``lm``'s config and a generation config; return the latter (also set on ``lm``)."""
    from transformers import GenerationConfig

    _put_stops(lm.config, stops, eos_id, pad_id)
    generation = copy.deepcopy(lm.generation_config) if getattr(lm, "generation_config", None) else GenerationConfig()
    _put_stops(generation, stops, eos_id, pad_id)
    if generation.bos_token_id is None and lm.config.bos_token_id is not None:
        generation.bos_token_id = lm.config.bos_token_id
    lm.generation_config = generation
    return generation


def _put_stops(config: Any, stops: list[int], eos_id: int, pad_id: int | None) -> None:
    """Set ``config``'s (a model config or a generation config: both read these two keys) eos and pad ids.

    Several stops replace the eos ids outright; a single one is set only where the config does not
    already stop on it, so that a config's own extra eos ids are kept."""
    if len(stops) > 1:
        config.eos_token_id = stops
    elif not _includes(config.eos_token_id, eos_id):
        config.eos_token_id = eos_id
    if pad_id is not None:
        config.pad_token_id = pad_id


def _write_folder(target: Path, lm: Any, generation: Any, tokenizer: Any, eos_id: int, pad_id: int | None) -> None:
    """Write the folder next to ``target``, check it reads back, then move its files into ``target``.

    A failed export leaves ``target`` as it was; into a non-empty ``target`` (``force``) only the old
    weight files are removed, other files stay.
    """
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        _save_weights(lm, tmp)
        generation.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _portable(tmp)
        _check_folder(tmp, eos_id, pad_id, AutoConfig, AutoTokenizer, GenerationConfig)
        if target.is_dir() and any(target.iterdir()):
            for pattern in _WEIGHT_PATTERNS:
                for stale in target.glob(pattern):
                    stale.unlink()
            for item in tmp.iterdir():
                os.replace(item, target / item.name)
            tmp.rmdir()
        else:
            if target.is_dir():
                target.rmdir()
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _portable(folder: Path) -> None:
    """Make the folder read the same under transformers 4.x (verl 0.7's pin) as under 5.x, and give
    its files the usual permissions (the weights are written 0600).

    - transformers 5 writes ``rope_parameters`` only; 4.x ignores it and falls back to
      ``rope_theta`` = 10,000 (SmolLM2's is 100,000): write ``rope_theta`` too, as the hub's configs do;
    - its tokenizer class ``TokenizersBackend`` does not exist in 4.x: ``PreTrainedTokenizerFast``
      (the same class under 5.x) reads the same ``tokenizer.json`` in both; the loading-time keys
      ``backend``, ``is_local`` and ``local_files_only`` are dropped.
    """
    import json

    def rewrite(name: str, change: Any) -> None:
        path = folder / name
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            change(data)
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def config(data: dict[str, Any]) -> None:
        rope = data.get("rope_parameters")
        if isinstance(rope, dict) and "rope_theta" in rope and "rope_theta" not in data:
            data["rope_theta"] = rope["rope_theta"]
        # Per layer type (Gemma 3: global and sliding-window layers), 4.x reads two keys.
        if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict) and "rope_theta" not in data:
            data["rope_theta"] = rope["full_attention"].get("rope_theta")
            if isinstance(rope.get("sliding_attention"), dict) and "rope_local_base_freq" not in data:
                data["rope_local_base_freq"] = rope["sliding_attention"].get("rope_theta")

    def tokenizer(data: dict[str, Any]) -> None:
        if data.get("tokenizer_class") == "TokenizersBackend":
            data["tokenizer_class"] = "PreTrainedTokenizerFast"
        for key in ("backend", "is_local", "local_files_only"):
            data.pop(key, None)

    rewrite("config.json", config)
    rewrite("tokenizer_config.json", tokenizer)
    umask = os.umask(0)
    os.umask(umask)
    for item in folder.iterdir():
        item.chmod(0o666 & ~umask)


def _check_folder(folder: Path, eos_id: int, pad_id: int | None, AutoConfig: Any, AutoTokenizer: Any, GenerationConfig: Any) -> None:
    """Read the written folder back the way vLLM and verl will (from the path alone) and check that
    config, generation config and tokenizer agree on eos (and pad)."""
    config = AutoConfig.from_pretrained(str(folder))
    generation = GenerationConfig.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    seen = {"config.json": config.eos_token_id, "generation_config.json": generation.eos_token_id,
            "the tokenizer": tokenizer.eos_token_id}
    wrong = {where: value for where, value in seen.items() if not _includes(value, eos_id)}
    if wrong:
        raise RuntimeError(f"exported eos is not id {eos_id} in {', '.join(f'{k} ({v})' for k, v in wrong.items())}")
    if pad_id is not None and tokenizer.pad_token_id != pad_id:
        raise RuntimeError(f"exported tokenizer's pad id is {tokenizer.pad_token_id}, expected {pad_id}")
