"""A program's chat requests as the prompt token ids a policy continues from, without drift.

An agent program resends its whole history with every request. The policy must see exactly the ids it
saw and generated before, so the history is not re-tokenised while the program only *appends* to it:
when a request holds the previous request's messages, then the assistant reply that was sent for it
(the same content and tool calls), then new messages (tool results, user turns), its prompt ids are

    previous prompt ids + the generated ids of that reply + the ids of the new messages

(:meth:`agent_gym.chat.context.ChatContext.append_messages`: the template's suffix for the new turns).
Any other request (the program dropped, edited or summarised messages, changed its tools, or replied
something else for the assistant) is rendered afresh with the policy's chat template and starts a new
segment: :meth:`Conversation.follow` says so.

Tools: a chat template that renders ``tools`` itself gets the request's schemas; for one that does not
(SmolLM2's), the schemas and how to call them are written into the system message in the tool-call
format (``templates/tools_system.j2``), as the suite's tool envs do. An assistant turn of the history
whose ``tool_calls`` the template cannot render has them written into its content in the same format:
the text such a policy would have generated.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping, Sequence

from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate
from agent_gym.endpoint.wire import APIError, ChatRequest
from agent_gym.tools.formats import get_parser
from agent_gym.tools.parsing import ToolCallParser

__all__ = ["Conversation", "same_reply"]


class Conversation:
    """The prompt ids of one program's requests (see the module docstring).

    Args:
        template: the policy's chat template.
        tool_format: the tool-call format the policy writes (a registered name or a parser class's name).
        max_context_tokens: a request whose prompt would be longer is refused (400,
            ``context_length_exceeded``, as OpenAI answers), and the conversation is left as it was.
    """

    def __init__(self, template: ChatTemplate, *, tool_format: str = "hermes", max_context_tokens: int = 8192):
        self.template = template
        self.tool_format = tool_format
        self.max_context_tokens = int(max_context_tokens)
        self.renders_tool_calls = "tool_calls" in (template.chat_template or "")
        self.context: ChatContext | None = None
        #: the request the current prompt ids render (as sent, normalised)
        self.request: ChatRequest | None = None
        self.parser: ToolCallParser = get_parser(tool_format)
        self._parsers: dict[str, ToolCallParser] = {}
        self._prompts: Any = None

    def open(self, request: ChatRequest) -> None:
        """Render the first request of the program.

        Raises:
            APIError: 400 when the template cannot render it or it is longer than the context limit.
        """
        self._rewrite(request)

    def follow(self, action_ids: Sequence[int], assistant: Mapping[str, Any], reply: Mapping[str, Any],
               request: ChatRequest) -> bool:
        """Move on to ``request``, the program's next one after it got ``reply`` (generated as ``action_ids``).

        Args:
            action_ids: the ids the policy generated for the previous request (kept verbatim).
            assistant: the message the context records for them (the decoded text, tool calls).
            reply: the assistant message sent to the program (``content``, ``tool_calls``).
            request: the program's next request.

        Returns:
            ``True`` when the request was rendered afresh (a new segment), ``False`` when appended.

        Raises:
            APIError: 400 as :meth:`open`; the conversation is then as it was before the call.
        """
        assert self.context is not None and self.request is not None, "open() first"
        appended = self._appended(request, reply)
        if appended is None:
            self._rewrite(request)
            return True
        ctx = self.context
        snapshot = ctx.snapshot()
        try:
            ctx.append_action(action_ids, dict(assistant))
            suffix = ctx.pending_suffix(self._for_template(appended, request))
            self._check_length(len(ctx) + len(suffix))
            ctx.append_messages(self._for_template(appended, request), suffix)
        except APIError:
            ctx.restore(snapshot)
            raise
        except Exception as exc:  # noqa: BLE001 - a template that cannot render the request: the program's error
            ctx.restore(snapshot)
            raise APIError(400, f"the policy's chat template cannot render these messages: {type(exc).__name__}: {exc}",
                           param="messages") from None
        self.request = request
        return False

    # -- internals -----------------------------------------------------------------------------------

    def _appended(self, request: ChatRequest, reply: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The messages ``request`` adds after the previous request and the reply sent, or ``None``
        when it does not extend them (or adds an assistant turn of its own: rendered afresh)."""
        previous = self.request
        assert previous is not None
        k = len(previous.messages)
        new = request.messages
        if request.tools != previous.tools or len(new) <= k + 1 or new[:k] != previous.messages:
            return None
        if not same_reply(new[k], reply):
            return None
        rest = new[k + 1:]
        if any(m["role"] in ("assistant", "system") for m in rest):
            return None
        return rest

    def _rewrite(self, request: ChatRequest) -> None:
        parser = self._parser(request.tools)
        messages = self._with_tools(self._for_template(request.messages, request, parser), request.tools, parser)
        tools = request.tools  # the observation's offered tools; rendered only by a template that renders tools
        try:
            if self.context is None:
                ctx = ChatContext.start(self.template, messages, tools)
            else:
                ctx = self.context
                snapshot = ctx.snapshot()
                ctx.rewrite(messages, tools)
        except Exception as exc:  # noqa: BLE001 - the template refused the request: unchanged, the program is told
            raise APIError(400, f"the policy's chat template cannot render these messages: {type(exc).__name__}: {exc}",
                           param="messages") from None
        try:
            self._check_length(len(ctx))
        except APIError:
            if self.context is not None:
                ctx.restore(snapshot)
            raise
        self.context, self.request, self.parser = ctx, request, parser

    def _check_length(self, tokens: int) -> None:
        if tokens > self.max_context_tokens:
            raise APIError(400, f"This model's maximum context length is {self.max_context_tokens} tokens; your messages "
                                f"resulted in {tokens} tokens. Shorten the messages.",
                           param="messages", code="context_length_exceeded")

    def _parser(self, tools: Sequence[Mapping[str, Any]]) -> ToolCallParser:
        key = json.dumps(list(tools), sort_keys=True)
        parser = self._parsers.get(key)
        if parser is None:
            if len(self._parsers) >= 64:
                self._parsers.clear()
            try:
                parser = get_parser(self.tool_format, tools=list(tools))
            except ValueError as exc:  # a format that cannot express these tools
                raise APIError(400, f"the policy's tool-call format cannot offer these tools: {exc}", param="tools") from None
            self._parsers[key] = parser
        return parser

    def _for_template(self, messages: Sequence[Mapping[str, Any]], request: ChatRequest,
                      parser: ToolCallParser | None = None) -> list[dict[str, Any]]:
        """``messages`` with each assistant's tool calls written into its content where the template
        does not render ``tool_calls``."""
        out = []
        for m in messages:
            if m.get("tool_calls") and not self.renders_tool_calls:
                parser = parser or self._parser(request.tools)
                calls = [{"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
                         for c in m["tool_calls"]]
                text = parser.format_calls(calls)
                content = m.get("content") or ""
                m = {k: v for k, v in m.items() if k != "tool_calls"}
                m["content"] = f"{content}\n{text}" if content.strip() else text
            out.append(dict(m))
        return out

    def _with_tools(self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]],
                    parser: ToolCallParser) -> list[dict[str, Any]]:
        """The schemas offered in the system message, where the template does not render ``tools``."""
        if not tools or self.template.renders_tools:
            return messages
        from agent_gym.core.prompts import PromptTemplates, tool_prompt_variables

        if self._prompts is None:
            self._prompts = PromptTemplates("agent_gym.endpoint")
        first = tools[0]["function"]
        required = (first.get("parameters") or {}).get("required", [])
        example = {"name": first["name"], "arguments": {p: "..." for p in required}}
        variables = tool_prompt_variables(parser, list(tools), [example])
        messages = copy.deepcopy(messages)
        if messages and messages[0]["role"] == "system":
            system = messages.pop(0)["content"]
        else:
            system = ""
        text = self._prompts.render("tools_system.j2", system=system, **variables)
        return [{"role": "system", "content": text}, *messages]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def same_reply(sent: Mapping[str, Any], reply: Mapping[str, Any]) -> bool:
    """Whether the assistant message a program sent back is the reply it got: the same content (up to
    surrounding whitespace) and the same calls (names and arguments as JSON values; ids may differ)."""
    if sent.get("role") != "assistant":
        return False
    if (sent.get("content") or "").strip() != (reply.get("content") or "").strip():
        return False

    def calls(m: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in m.get("tool_calls") or ()]

    return calls(sent) == calls(reply)
