"""agent_gym.models: the built-in names, LoRA adapter folders as models, and the merged-model cache.

The fast tests read configs and the tokenizer only; the slow ones load and merge the real SmolLM2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import agent_gym.models as models
from agent_gym.models import BASE_MODEL, BUILTIN_MODELS, DEFAULT_MODEL, ModelSource, resolve_model

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGED_ADAPTER = REPO_ROOT / "models" / "smollm2-135m-tool" / "agent_gym_smollm2_135m_tool"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_folder() -> str:
    return str(models._smollm2_gguf().parent)


def test_built_in_names():
    assert DEFAULT_MODEL == "smollm2-135m-tool" and BASE_MODEL == "smollm2-135m-instruct"
    assert BUILTIN_MODELS == {DEFAULT_MODEL: "smollm2-135m-tool", BASE_MODEL: None}
    assert {p.name for p in PACKAGED_ADAPTER.iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}


@pytest.mark.parametrize("name", [None, DEFAULT_MODEL])
def test_the_default_is_smollm2_with_the_packaged_adapter(name):
    source = resolve_model(name)
    assert source == ModelSource(gguf_folder(), {"gguf_file": GGUF_NAME}, is_default=True,
                                 adapter=str(PACKAGED_ADAPTER), name=DEFAULT_MODEL)
    assert Path(source.adapter, "adapter_config.json").is_file()


def test_the_base_model_has_no_adapter_and_is_the_defaults_base():
    base = resolve_model(BASE_MODEL)
    assert base == ModelSource(gguf_folder(), {"gguf_file": GGUF_NAME}, is_default=True, adapter=None, name=BASE_MODEL)
    assert resolve_model(None).base == base
    assert base.base == base


def write_adapter(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_an_adapter_folder_resolves_to_its_base_with_the_adapter(tmp_path, monkeypatch):
    adapter = write_adapter(tmp_path / "my-lora", {"base_model_name_or_path": BASE_MODEL, "peft_type": "LORA", "r": 4})
    want = ModelSource(gguf_folder(), {"gguf_file": GGUF_NAME}, is_default=True, adapter=str(adapter), name=None)
    assert resolve_model(adapter) == want
    assert resolve_model(str(adapter)) == want
    monkeypatch.chdir(tmp_path)
    assert resolve_model("my-lora") == ModelSource(want.path, want.kwargs, True, adapter="my-lora", name=None)
    assert resolve_model(adapter).base == resolve_model(BASE_MODEL)


def test_an_adapter_folder_whose_base_is_a_local_folder(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    adapter = write_adapter(tmp_path / "lora", {"base_model_name_or_path": str(base)})
    assert resolve_model(adapter) == ModelSource(str(base), {}, is_default=False, adapter=str(adapter), name=None)


def test_a_folder_with_a_config_json_is_a_model_not_an_adapter(tmp_path):
    folder = write_adapter(tmp_path / "merged", {"base_model_name_or_path": BASE_MODEL})
    (folder / "config.json").write_text("{}")
    assert resolve_model(folder) == ModelSource(str(folder))


@pytest.mark.parametrize("config", [{}, {"base_model_name_or_path": None}, {"base_model_name_or_path": ""}])
def test_an_adapter_config_without_a_base_name_is_a_value_error(tmp_path, config):
    adapter = write_adapter(tmp_path / "lora", config)
    with pytest.raises(ValueError) as info:
        resolve_model(str(adapter))
    assert str(info.value) == f"{adapter}: adapter_config.json names no base_model_name_or_path"


def test_an_adapter_whose_base_does_not_exist_names_the_base(tmp_path):
    adapter = write_adapter(tmp_path / "lora", {"base_model_name_or_path": str(tmp_path / "gone")})
    with pytest.raises(FileNotFoundError) as info:
        resolve_model(adapter)
    assert str(info.value) == f"no such file or folder: {tmp_path / 'gone'}"


def test_a_missing_adapter_package_names_its_pip_command(monkeypatch):
    real_find_spec = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "agent_gym_smollm2_135m_tool" else real_find_spec(name, *a))
    for name in (None, DEFAULT_MODEL):
        with pytest.raises(models.DefaultModelNotInstalled) as info:
            resolve_model(name)
        assert str(info.value) == (
            f"the built-in model {DEFAULT_MODEL} needs its LoRA adapter, the package agent-r1-gym-smollm2-135m-tool: "
            f"from a clone of agent-r1-gym, `pip install -e models/smollm2-135m-tool` (or pass --model {BASE_MODEL} "
            "for SmolLM2 alone)"
        )
    assert resolve_model(BASE_MODEL).adapter is None  # the base model needs no adapter


def test_the_default_models_tokenizer_is_the_bases(tokenizer):
    from agent_gym.models import load_tokenizer

    default = load_tokenizer(DEFAULT_MODEL)
    assert default is load_tokenizer(None) is load_tokenizer(BASE_MODEL)  # memoised: one object
    assert default.get_vocab() == tokenizer.get_vocab()
    assert default.get_vocab() == load_tokenizer(BASE_MODEL).get_vocab()
    assert len(default) == 49152
    assert (default.eos_token, default.eos_token_id) == ("<|im_end|>", 2)
    assert (default.pad_token, default.pad_token_id) == ("<|endoftext|>", 0)


def test_an_adapter_folders_tokenizer_is_its_bases(tmp_path):
    from agent_gym.models import load_tokenizer

    adapter = write_adapter(tmp_path / "lora", {"base_model_name_or_path": BASE_MODEL})
    assert load_tokenizer(adapter) is load_tokenizer(BASE_MODEL)


# -- slow: the merge, and its cache ------------------------------------------------------------------------


def merged_folder_name() -> str:
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((PACKAGED_ADAPTER / name).read_bytes())
    return f"{DEFAULT_MODEL}-{digest.hexdigest()[:12]}-transformers{models._transformers_major_minor()}"


@pytest.mark.slow
def test_the_merge_runs_once_then_loads_from_its_cache_folder(tmp_path, monkeypatch):
    """A fresh cache: the first load merges the adapter with peft (once) and saves the merged weights;
    the second reads that folder without peft and has the very same weights. The base's dequantised
    folder is taken from the usual cache where it exists, so the GGUF is not converted again."""
    import peft
    import torch

    from agent_gym.models import cache_dir, load_causal_lm

    base_name = f"{BASE_MODEL}-transformers{models._transformers_major_minor()}"
    converted = cache_dir() / "models" / base_name
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "models").mkdir(parents=True)
    if (converted / "config.json").is_file():
        (tmp_path / "cache" / "models" / base_name).symlink_to(converted, target_is_directory=True)
    merged = tmp_path / "cache" / "models" / merged_folder_name()

    merges = []
    original = peft.PeftModel.from_pretrained

    def counting(*args, **kwargs):
        merges.append(args[1:])
        return original(*args, **kwargs)

    monkeypatch.setattr(peft.PeftModel, "from_pretrained", counting)
    first = load_causal_lm()
    assert merges == [(str(PACKAGED_ADAPTER),)]
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    assert sorted(p.name for p in merged.parent.iterdir()) == sorted([base_name, merged.name])  # no temp folder left

    def forbidden(*args, **kwargs):
        raise AssertionError("peft merged again instead of reading the cached folder")

    monkeypatch.setattr(peft.PeftModel, "from_pretrained", forbidden)
    second = load_causal_lm()
    assert second.config._name_or_path == str(merged)
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype == torch.float32, key
        assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
def test_the_merged_weights_differ_from_the_base_on_the_lora_targets_only():
    import torch

    from agent_gym.models import load_causal_lm

    tool, base = load_causal_lm(DEFAULT_MODEL).state_dict(), load_causal_lm(BASE_MODEL).state_dict()
    assert tool.keys() == base.keys()
    for layer in (0, 29):
        for module in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"):
            key = f"model.layers.{layer}.{module}.weight"
            assert not torch.equal(tool[key], base[key]), key
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    untouched = [k for k in base if not any(f".{t}." in k for t in targets)]
    assert "model.embed_tokens.weight" in untouched and "model.norm.weight" in untouched
    for key in untouched:  # embeddings, norms: LoRA left them alone
        assert torch.equal(tool[key], base[key]), key


def test_an_adapter_on_an_adapter_is_refused_with_the_way_out(tmp_path):
    """An adapter trained on the default model (itself SmolLM2 + a LoRA) would lose that LoRA if only
    the GGUF were loaded under it: refused, naming the export that makes a plain base folder."""
    from agent_gym.models import DEFAULT_MODEL, resolve_model

    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": DEFAULT_MODEL}))
    with pytest.raises(ValueError) as info:
        resolve_model(str(tmp_path))
    assert str(info.value) == (
        f"{tmp_path}: its base {DEFAULT_MODEL} carries an adapter of its own; merge that first "
        f"(agent-gym export-model --model {DEFAULT_MODEL} --out DIR) and name DIR as the base"
    )
