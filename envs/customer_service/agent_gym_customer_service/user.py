"""The simulated customer: scripted (deterministic rules, the default) or a model behind a generate backend.

The customer holds the task's goal (its requests, in order) and reveals it turn by turn. It speaks only
when the agent ends a turn without a tool call (a message to the customer); its replies are user turns
of the context, env tokens the policy does not generate. It ends the episode by writing
:data:`STOP` (``"###STOP###"``).

A user is any object with ``opening() -> str`` and ``reply(transcript) -> str``, where ``transcript``
is the visible conversation so far (``{"role": "user" | "assistant", "content"}``, the agent's messages
without tool calls). :class:`ScriptedUser` needs nothing else; :class:`ModelUser` wraps a
:class:`UserBackend`, any callable ``(messages) -> str`` over OpenAI-format chat messages:

- :class:`OpenAIUserBackend`: an OpenAI-compatible ``/v1/chat/completions`` URL (a vLLM server),
  through the standard library's ``urllib`` only;
- :class:`HFUserBackend`: a local Hugging Face causal LM (:func:`agent_gym.models.load_causal_lm`)
  through its tokenizer's chat template; torch and transformers are imported at its first reply.

Both are agent_gym's env-side chat backends (:mod:`agent_gym.models.backends`), which judges use too.

Every user opens with the scripted first message (so a task's opening prompt is the same data for
every user, e.g. in a trainer's dataset).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from agent_gym.models.backends import EndpointOptions, HFChat, OpenAICompatibleChat
from agent_gym.core.prompts import PromptTemplates

from agent_gym_customer_service.generate import CustomerServiceTask, Request

if TYPE_CHECKING:  # typing.Unpack is 3.11+; under postponed annotations it is never evaluated
    from typing_extensions import Unpack

__all__ = [
    "STOP",
    "HFUserBackend",
    "ModelUser",
    "OpenAIUserBackend",
    "ScriptedUser",
    "User",
    "UserBackend",
    "classify",
    "make_user",
]

#: What the customer writes to end the conversation.
STOP = "###STOP###"

_ELSE = re.compile(r"\b(anything|something|what) else\b|\belse (i|we) can\b")
_IDENTITY = re.compile(r"e-?mail|zip|postal code|(your|full) name|verif|identity|authenticat")
_ASKS = re.compile(r"\?|\bplease\b|\bprovide\b|\bshare\b|\bneed\b|\bgive me\b")
_CONFIRM = re.compile(
    r"\bconfirm|\bproceed|go ahead|\bshall i\b|\bshould i\b|would you like me to|do you want me to|is (that|this) (correct|right|ok)"
)


class User(Protocol):
    """What the env needs of a simulated customer."""

    def opening(self) -> str: ...

    def reply(self, transcript: Sequence[Mapping[str, str]]) -> str: ...


class UserBackend(Protocol):
    """A chat model: OpenAI-format messages in, the next message's text out."""

    def __call__(self, messages: list[dict[str, str]]) -> str: ...


def classify(agent_text: str) -> str:
    """What the agent's message asks of the customer (the scripted user's rules, in this order):

    - ``"next"``: it asks whether the customer needs anything else;
    - ``"identity_email"`` / ``"identity_name_zip"`` / ``"identity"``: it asks for the customer's
      email, name and zip code, or either (a request word or a question and an identity word);
    - ``"confirm"``: it asks to confirm an action (a question with confirm, proceed, shall I, ...);
    - ``"restate"``: any other question (the customer repeats its current request);
    - ``"next"``: no question: a report; the customer takes it as done and moves on.
    """
    text = agent_text.lower()
    if _ELSE.search(text):
        return "next"
    if _IDENTITY.search(text) and _ASKS.search(text):
        email = bool(re.search(r"e-?mail", text))
        name_zip = bool(re.search(r"zip|postal code|(your|full) name", text))
        if email and not name_zip:
            return "identity_email"
        if name_zip and not email:
            return "identity_name_zip"
        return "identity"
    if "?" in text:
        return "confirm" if _CONFIRM.search(text) else "restate"
    return "next"


class ScriptedUser:
    """The deterministic customer: rules over the agent's last message (:func:`classify`).

    It opens with its first request; gives its email or name and zip code when asked (its preferred
    one when asked for either); says yes to a confirmation; repeats its current request after any other
    question; and after a report or "anything else?" reveals its next request, or, when none is left,
    thanks the agent and writes :data:`STOP`. It never checks the database: like a real customer it
    relies on what the agent tells it (grading checks the rest).

    Args:
        task: the task whose user profile and requests it plays.
        prompts: the env's templates (``customer_service_user.j2`` holds every line it says).
    """

    def __init__(self, task: CustomerServiceTask, prompts: PromptTemplates):
        self.task = task
        self.prompts = prompts
        self.index = 0  # the request being discussed

    def _say(self, line: str, request: Request | None = None) -> str:
        return self.prompts.render("customer_service_user.j2", line=line, user=self.task.user, request=request, stop=STOP)

    def opening(self) -> str:
        return self._say("opening", self.task.requests[0])

    def reply(self, transcript: Sequence[Mapping[str, str]]) -> str:
        last = next((m["content"] for m in reversed(transcript) if m["role"] == "assistant"), "")
        kind = classify(last)
        if kind.startswith("identity"):
            way = kind[len("identity_"):] or self.task.user.get("prefers", "email")
            return self._say("identity_email" if way == "email" else "identity_name_zip")
        if kind == "confirm":
            return self._say("confirm")
        if kind == "restate" and self.index < len(self.task.requests):
            return self._say("restate", self.task.requests[self.index])
        self.index += 1
        if self.index < len(self.task.requests):
            return self._say("next", self.task.requests[self.index])
        return self._say("done")


class ModelUser:
    """A customer played by a chat model: the system prompt (``customer_service_user_sim.j2``) holds
    the profile and the goal; the conversation is shown with the roles swapped (the agent's messages
    as ``user``, the customer's own as ``assistant``).

    Args:
        task: the task it plays.
        prompts: the env's templates.
        backend: the model (:class:`UserBackend`).
    """

    def __init__(self, task: CustomerServiceTask, prompts: PromptTemplates, backend: UserBackend):
        self.task = task
        self.prompts = prompts
        self.backend = backend
        self.scripted = ScriptedUser(task, prompts)

    def opening(self) -> str:
        return self.scripted.opening()

    def system_prompt(self) -> str:
        user = self.task.user
        requests = [self.prompts.render("customer_service_user.j2", line="restate", user=user, request=r, stop=STOP)
                    .removeprefix("Sorry if I was unclear. ") for r in self.task.requests]
        return self.prompts.render("customer_service_user_sim.j2", user=user, requests=requests, stop=STOP)

    def reply(self, transcript: Sequence[Mapping[str, str]]) -> str:
        swap = {"user": "assistant", "assistant": "user"}
        messages = [{"role": "system", "content": self.system_prompt()}]
        messages += [{"role": swap[m["role"]], "content": m["content"]} for m in transcript]
        return str(self.backend(messages)).strip()


class OpenAIUserBackend(OpenAICompatibleChat):
    """A model behind an OpenAI-compatible chat-completions URL as the customer (vLLM: ``vllm serve
    MODEL``): agent_gym's :class:`~agent_gym.models.backends.OpenAICompatibleChat` with the customer's
    defaults (a short reply).

    Args:
        base_url: the server, e.g. ``"http://localhost:8000/v1"``.
        model: the served model's name.
        **options: :class:`~agent_gym.models.backends.OpenAICompatibleChat`'s (``api_key``,
            ``timeout_s``, ``temperature``, ``extra_body``); ``max_tokens`` is 256 unless given.
    """

    def __init__(self, base_url: str, model: str, **options: Unpack[EndpointOptions]):
        options.setdefault("max_tokens", 256)  # a customer's reply is short
        super().__init__(base_url, model, **options)


class HFUserBackend(HFChat):
    """A local Hugging Face causal LM as the customer: agent_gym's :class:`~agent_gym.models.backends.HFChat`
    (greedy by default, loaded on the first reply).

    Args:
        model: a name or path :func:`agent_gym.models.load_causal_lm` reads (``None``: the default model).
        max_new_tokens: the longest reply.
        do_sample, temperature: sampling settings.
        model_kwargs: passed to ``from_pretrained`` (``dtype``, ``device_map``, ...).
    """

    def __init__(self, model: str | None = None, *, max_new_tokens: int = 128, do_sample: bool = False,
                 temperature: float = 1.0, model_kwargs: Mapping[str, Any] | None = None):
        super().__init__(model, max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                         model_kwargs=model_kwargs)


def make_user(spec: str | UserBackend, user_model: str | None = None) -> Callable[[CustomerServiceTask, PromptTemplates], User]:
    """A factory of the episode's user from the env's ``user=`` argument.

    ``"scripted"`` (the default): :class:`ScriptedUser`. ``"hf"``: :class:`HFUserBackend` with
    ``user_model`` (``None``: the default model). ``"http://..."`` / ``"https://..."``: an
    OpenAI-compatible API root (:class:`OpenAIUserBackend`; ``user_model`` names the served model).
    A callable ``(messages) -> str``: that backend. Model backends are built once, here.

    Raises:
        ValueError: an unknown spec, or a URL without ``user_model``.
    """
    if callable(spec):
        backend: UserBackend = spec
    elif spec == "scripted":
        return ScriptedUser
    elif spec == "hf":
        backend = HFUserBackend(user_model)
    elif isinstance(spec, str) and spec.startswith(("http://", "https://")):
        if not user_model:
            raise ValueError(f"user={spec!r} needs user_model= (the model name the server serves)")
        backend = OpenAIUserBackend(spec, user_model)
    else:
        raise ValueError(
            f"unknown user {spec!r}: use 'scripted' (default), 'hf' (a local model: user_model=NAME_OR_PATH), "
            "an OpenAI-compatible URL such as 'http://localhost:8000/v1' (with user_model=), or a callable (messages) -> str"
        )
    return lambda task, prompts: ModelUser(task, prompts, backend)
