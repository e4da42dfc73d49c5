"""The OpenAI chat-completions wire format: requests read and checked, completions and errors written.

Only what an agent program sends is read: ``messages`` (``system``, ``developer`` read as ``system``,
``user``, ``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``), ``tools`` (function
schemas) and the sampling fields, which are kept as they were sent (:attr:`ChatRequest.params`) for
the caller to read: the policy behind the endpoint samples as its trainer says. A request this
endpoint cannot answer as asked (``stream=true``, ``n > 1``, image parts) is refused with a 400 and a
message that names the field, never answered differently from what was asked.

The messages are normalised to the project's chat format (:data:`agent_gym.core.types.Message`): the
content is a string (text parts joined), an assistant's ``tool_calls`` are
``{"id", "type": "function", "function": {"name", "arguments"}}`` with the arguments as the JSON text
sent, and a tool message carries the ``name`` of the call it answers when the program left it out.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["APIError", "ChatRequest", "SAMPLING_FIELDS", "completion", "model_list", "parse_request"]

#: Request fields kept in :attr:`ChatRequest.params` (the sampling settings a program asked for).
SAMPLING_FIELDS = (
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "presence_penalty",
    "frequency_penalty", "tool_choice", "parallel_tool_calls", "response_format", "logprobs", "top_logprobs",
)
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

    Args:
        status: the HTTP status (400 a request that cannot be answered, 401 an unknown key, 404 an
            unknown path, 410 an episode that is over).
        message: what is wrong and what to do, for the program's author.
        type: OpenAI's error type (``invalid_request_error``, ...).
        param: the request field at fault, if one is.
        code: a short machine-readable code (``stream_not_supported``, ``context_length_exceeded``).
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """One ``POST /v1/chat/completions``, read and normalised.

    Attributes:
        model: the model name the program asked for (any name is served: the policy answers).
        messages: the conversation in the project's chat format (see the module docstring).
        tools: the tool schemas offered, ``{"type": "function", "function": {...}}`` each.
        params: the sampling fields the request set (:data:`SAMPLING_FIELDS`), as sent.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)


def parse_request(body: bytes | str | Mapping[str, Any]) -> ChatRequest:
    """Read a chat-completions request body.

    Raises:
        APIError: 400 naming the field when the body is not a request this endpoint can answer.
    """
    if isinstance(body, (bytes, str)):
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise APIError(400, f"the request body is not JSON ({exc})") from None
    else:
        data = body
    if not isinstance(data, Mapping):
        raise APIError(400, "the request body must be a JSON object")
    if data.get("stream"):
        raise APIError(400, "stream=true is not supported yet: this endpoint answers whole completions; "
                            "call without stream (or with stream=false)", param="stream", code="stream_not_supported")
    n = data.get("n", 1)
    if n not in (None, 1):
        raise APIError(400, f"n={n!r} is not supported: one completion per request (send n=1 or leave it out)", param="n")
    if "functions" in data or "function_call" in data:
        raise APIError(400, "the legacy functions/function_call fields are not supported: send tools=[...] instead",
                       param="functions")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list of chat messages", param="messages")
    normalised: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        normalised.append(_message(message, i, normalised))
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list of {\"type\": \"function\", \"function\": {...}}", param="tools")
    model = data.get("model", "")
    if not isinstance(model, str):
        raise APIError(400, "model must be a string", param="model")
    params = {k: data[k] for k in SAMPLING_FIELDS if k in data}
    return ChatRequest(model=model, messages=normalised, tools=[_tool(t, i) for i, t in enumerate(tools)], params=params)


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise APIError(400, f"{where}: content part of type {kind!r} is not supported (text parts only)",
                               param="messages")
        return "".join(texts)
    raise APIError(400, f"{where}: content must be a string or a list of text parts", param="messages")


def _message(message: Any, index: int, earlier: Sequence[dict[str, Any]]) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise APIError(400, f"{where} is not an object", param="messages")
    role = _ROLES.get(message.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise APIError(400, f"{where}: unknown role {message.get('role')!r} (system, developer, user, assistant, tool)",
                       param="messages")
    out: dict[str, Any] = {"role": role, "content": _text(message.get("content"), where)}
    if role == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            raise APIError(400, f"{where}: tool_calls must be a list", param="messages")
        out["tool_calls"] = [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise APIError(400, f"{where}: a tool message needs the tool_call_id of the call it answers", param="messages")
        out["tool_call_id"] = call_id
        name = message.get("name") or _call_name(call_id, earlier)
        if name:
            out["name"] = str(name)
    return out


def _call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise APIError(400, f"{where} needs function.name", param="messages")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):  # some clients send the object itself
        arguments = json.dumps(arguments)
    return {"id": str(call.get("id", "")), "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _call_name(call_id: str, earlier: Sequence[dict[str, Any]]) -> str | None:
    for message in reversed(earlier):
        for call in message.get("tool_calls", ()):
            if call["id"] == call_id:
                return str(call["function"]["name"])
    return None


def _tool(tool: Any, index: int) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(tool, Mapping) or tool.get("type", "function") != "function" or not isinstance(function, Mapping) \
            or not isinstance(function.get("name"), str):
        raise APIError(400, f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", param="tools")
    spec: dict[str, Any] = {"name": function["name"]}
    for key in ("description", "parameters", "strict"):
        if key in function:
            spec[key] = function[key]
    return {"type": "function", "function": spec}


def completion(
    *,
    completion_id: str,
    model: str,
    content: str | None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [dict(c) for c in tool_calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def model_list(names: Sequence[str]) -> dict[str, Any]:
    """``GET /v1/models``: the served model names."""
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "agent-gym"} for n in names]}
