"""``agent-gym export-model`` with the real embedded SmolLM2-135M-Instruct on CPU: the folder it writes
loads from its path alone, says eos = <|im_end|> (id 2) everywhere, and computes what load_causal_lm does."""

from __future__ import annotations

import json

import pytest

from agent_gym.cli.main import main

pytestmark = pytest.mark.slow  # ~10 s per export (the dequantised model is cached after the first)

IM_END, ENDOFTEXT = 2, 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "smollm2"
    assert main(["export-model", "--out", str(out)]) == 0
    return out


def test_folder_has_the_files_vllm_and_verl_read(exported):
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(name.startswith(".") for name in names)  # no temporary folder left behind


def test_eos_is_the_end_of_turn_in_config_generation_config_and_tokenizer(exported):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    config = json.loads((exported / "config.json").read_text())
    generation = json.loads((exported / "generation_config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"], config["bos_token_id"]) == (IM_END, ENDOFTEXT, 1)
    assert (generation["eos_token_id"], generation["pad_token_id"]) == (IM_END, ENDOFTEXT)
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 100000.0  # transformers 4.x reads this
    tokenizer = AutoTokenizer.from_pretrained(str(exported))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", IM_END)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", ENDOFTEXT)
    assert AutoConfig.from_pretrained(str(exported)).eos_token_id == IM_END
    assert GenerationConfig.from_pretrained(str(exported)).eos_token_id == IM_END
    # the chat template travels with the tokenizer, and a turn ends with the eos
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                                        tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding under transformers 5
    assert IM_END in ids


def test_reloaded_model_gives_the_same_logits_as_load_causal_lm(exported, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym.models import BASE_MODEL, load_causal_lm

    reloaded = AutoModelForCausalLM.from_pretrained(str(exported))
    assert reloaded.dtype == torch.bfloat16
    reference = load_causal_lm(BASE_MODEL, dtype=torch.bfloat16)  # export's default: SmolLM2 without the adapter
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                           tokenize=True)["input_ids"]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        got, want = reloaded(ids).logits, reference(ids).logits
    assert torch.equal(got, want)
    # greedy decoding stops at the end of the turn by the folder's own generation config
    with torch.no_grad():
        out = reloaded.generate(ids, max_new_tokens=48, do_sample=False)
    new = out[0, len(prompt):].tolist()
    assert IM_END in new and new.index(IM_END) == len(new) - 1


def test_float32_export_and_force(exported, tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym.models import BASE_MODEL, load_causal_lm

    out = tmp_path / "fp32"
    out.mkdir()
    (out / "model-00001-of-00002.safetensors").write_bytes(b"stale shard")  # an earlier export's weights
    (out / "notes.txt").write_text("mine")
    assert main(["export-model", "--out", str(out), "--dtype", "float32"]) == 2
    assert "is not empty; pass --force" in capsys.readouterr().err
    assert main(["export-model", "--out", str(out), "--dtype", "float32", "--force"]) == 0
    assert capsys.readouterr().out == (
        f"wrote {out} (135M parameters, float32; eos <|im_end|> (id 2), pad <|endoftext|> (id 0))\n"
    )
    assert not (out / "model-00001-of-00002.safetensors").exists()
    assert (out / "notes.txt").read_text() == "mine"
    reloaded = AutoModelForCausalLM.from_pretrained(str(out))
    assert reloaded.dtype == torch.float32
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646]])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, load_causal_lm(BASE_MODEL)(ids).logits)
