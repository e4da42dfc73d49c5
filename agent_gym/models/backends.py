"""Env-side chat models: the backends a simulated user or a judge talks through.

One small protocol, ``(messages) -> reply text``, and the two backends every env-side model needs:

- :class:`OpenAICompatibleChat`: a model served over the OpenAI chat-completions API (``vllm serve``, any
  compatible server), called with the standard library (``urllib``): no client package;
- :class:`HFChat`: a local transformers model through :func:`agent_gym.models.load_causal_lm` and the
  tokenizer's chat template, loaded on the first call (torch is imported then, not before).

They sit with the policy's models in :mod:`agent_gym.models`, below the chat package, which they do
not need: a backend takes and returns plain messages and text. Both are blocking and thread-safe;
callers run them in worker threads under ``astep``. A failure raises :class:`ChatBackendError` with
what failed and what to do; callers decide what it means for the episode (a judge falls back to the
env's reward, a simulated user ends the episode).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any, Mapping, Protocol, Sequence, TypedDict

__all__ = ["ChatBackend", "ChatBackendError", "EndpointOptions", "HFChat", "OpenAICompatibleChat", "chat_completions_url"]


class ChatBackendError(RuntimeError):
    """A chat backend gave no reply: the server is down, slow or answered an error, or sent no text."""


class ChatBackend(Protocol):
    """``(messages) -> the reply's text``; messages in the OpenAI chat format (``role``, ``content``)."""

    def __call__(self, messages: Sequence[Mapping[str, str]]) -> str: ...


def chat_completions_url(url: str) -> str:
    """``.../v1/chat/completions`` from a server URL, its ``/v1`` base or the full endpoint."""
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


class EndpointOptions(TypedDict, total=False):
    """The keyword options of :class:`OpenAICompatibleChat`, for callers that build one and pass them
    through (``OpenAICompatibleJudge(url, model, timeout_s=30)``): one list of them, checked by mypy."""

    api_key: str | None
    timeout_s: float
    max_tokens: int
    temperature: float
    extra_body: Mapping[str, Any] | None


class OpenAICompatibleChat:
    """A model behind an OpenAI-compatible chat-completions endpoint.

    Args:
        url: the server (``http://host:8000``), its ``/v1`` base, or the full ``.../chat/completions`` URL.
        model: the served model's name (vLLM's ``--served-model-name``).
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout_s: seconds to wait for the whole reply; a slower server is a :class:`ChatBackendError`.
        max_tokens: the reply length limit.
        temperature: 0 for reproducible replies.
        extra_body: more request fields (``{"top_p": 1.0}``, vLLM's ``chat_template_kwargs``...).
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_tokens: int = 512,
        temperature: float = 0.0,
        extra_body: Mapping[str, Any] | None = None,
    ):
        self.url = chat_completions_url(url)
        self.model = model
        self.api_key = api_key
        self.timeout_s = float(timeout_s)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, model={self.model!r})"  # never the api key

    def __call__(self, messages: Sequence[Mapping[str, str]]) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages],
                                "max_tokens": self.max_tokens, "temperature": self.temperature, **self.extra_body}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - the user's own URL
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ChatBackendError(f"{self.url} answered HTTP {exc.code}: {detail or exc.reason}") from exc
        except (TimeoutError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise ChatBackendError(f"{self.url} timed out after {self.timeout_s:g} s; raise timeout_s= or check the server's load") from exc
            raise ChatBackendError(f"{self.url} is unreachable ({reason}); is the server running (vllm serve MODEL)?") from exc
        return _reply_text(payload, self.url)


def _reply_text(payload: Any, url: str) -> str:
    """The first choice's message text of a chat-completions response."""
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ChatBackendError(f"{url} sent no choices[0].message.content (is it a chat-completions endpoint?): {str(payload)[:200]}") from exc
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ChatBackendError(f"{url} sent a non-text message content ({type(content).__name__}); ask the server for text")
    return content


class HFChat:
    """A local transformers model: the messages through the tokenizer's chat template, then ``generate``
    (greedy by default: the same reply for the same messages).

    The model loads on the first call; calls are serialised (one model, one generate at a time).

    Args:
        model: anything :func:`agent_gym.models.load_causal_lm` takes (``None``: the embedded default).
        max_new_tokens: the reply length limit.
        do_sample / temperature: sampling instead of greedy decoding.
        device: ``"cpu"``, ``"cuda"``...; ``None``: CUDA when available.
        model_kwargs: passed on to ``from_pretrained`` (``dtype``, ...).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        max_new_tokens: int = 256,
        do_sample: bool = False,
        temperature: float = 1.0,
        device: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
    ):
        self.model_name = model
        self.max_new_tokens = int(max_new_tokens)
        self.do_sample = bool(do_sample)
        self.temperature = float(temperature)
        self.device = device
        self.model_kwargs = dict(model_kwargs or {})
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None

    def __call__(self, messages: Sequence[Mapping[str, str]]) -> str:
        with self._lock:
            model, tokenizer = self._load()
            import torch

            text = tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=True)
            inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            sampling = {"do_sample": True, "temperature": self.temperature} if self.do_sample else {"do_sample": False}
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=self.max_new_tokens, pad_token_id=pad, **sampling)
            return str(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            import torch

            from agent_gym.models import load_causal_lm, load_tokenizer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            model = load_causal_lm(self.model_name, **self.model_kwargs).to(device).eval()
            self._loaded = (model, load_tokenizer(self.model_name))
        return self._loaded
