"""A judge reward for open-ended answers: a model (or a script) grades the final answer against a rubric.

Exact-match rewards miss right answers written another way ("eighteen dollars" for ``18``) and cannot
grade free text at all. :class:`JudgeReward` wraps any env and, on the step that terminates an episode,
renders a jinja2 rubric with the task, the reference answer and the policy's final answer, asks a judge,
parses the judge's verdict and turns it into reward, reported as ``info["reward_components"]["judge"]``.

Judges are pluggable generate backends behind one small protocol, a callable ``(prompt: str) -> str``
(or ``async (prompt: str) -> str``), so tests run a script and training runs a served model:

- :class:`ScriptedJudge`: a callable or a dict of replies (tests, CPU, deterministic runs);
- :class:`OpenAICompatibleJudge`: ``POST {url}/v1/chat/completions`` with the standard library only
  (a vLLM server, any OpenAI-compatible endpoint);
- :class:`HFJudge`: a local transformers model through :func:`agent_gym.models.load_causal_lm`, greedy
  (torch and transformers are imported on its first call, never by ``import agent_gym.wrappers``).

The judge never breaks an episode: an exception, a time-out or a reply without a verdict leaves the
env's own reward in place, says what failed in ``info["judge_error"]`` and is counted
(``info["judge_errors"]``, ``info["judge_unparsable"]``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, SupportsFloat, Union

import gymnasium as gym

from agent_gym.models.backends import ChatBackendError, EndpointOptions, HFChat, OpenAICompatibleChat
from agent_gym.core.async_step import astep
from agent_gym.core.grading import after_marker, tagged

if TYPE_CHECKING:  # typing.Unpack is 3.11+; under postponed annotations it is never evaluated
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_RUBRIC",
    "HFJudge",
    "JudgeError",
    "JudgeFn",
    "JudgeReward",
    "OpenAICompatibleJudge",
    "ScriptedJudge",
    "VerdictCache",
    "default_extract",
    "parse_verdict",
]

#: A judge: the rendered rubric in, the judge's reply (text ending with a verdict line) out; blocking
#: or ``async``. Every backend of this module is one; so is any ``lambda prompt: "VERDICT: correct"``.
JudgeFn = Union[Callable[[str], str], Callable[[str], Awaitable[str]]]

Mode = Literal["replace", "add", "max"]
MODES: tuple[str, ...] = ("replace", "add", "max")

#: The rubric used when none is given. Variables: ``question`` (the task's question, else the first user
#: message), ``reference`` (the task's reference answer or ``None``), ``answer`` (what ``extract`` took
#: from the final message), ``response`` (the whole final message), ``task`` (the task as a dict) and
#: ``messages`` (the whole conversation). It asks for a last line ``VERDICT: correct`` or
#: ``VERDICT: incorrect``, which :func:`parse_verdict` reads as 1.0 or 0.0.
DEFAULT_RUBRIC = """\
You are grading an answer to a task.

Task:
{{ question }}
{% if reference is not none %}
Reference answer:
{{ reference }}
{% endif %}
Answer to grade:
{{ answer }}

Decide whether the answer is correct.{% if reference is not none %} It is correct when it agrees with \
the reference answer: the same final result, whatever the wording, units or formatting.{% endif %}
Think briefly, then end your reply with exactly one of these two lines:
VERDICT: correct
VERDICT: incorrect"""

#: The variables a rubric can use (a rubric naming another one is refused when the wrapper is built).
RUBRIC_VARIABLES = frozenset({"question", "reference", "answer", "response", "task", "messages"})


class JudgeError(RuntimeError):
    """A judge backend failed (HTTP error, time-out, a reply of the wrong shape); the message says which."""


# -- reading the answer and the verdict --------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_VERDICT_LINE = re.compile(
    r"^[\s*_#>`-]*(verdict|score)[\s*_`]*[:=][\s*_`]*([A-Za-z]+|[-+]?\d*\.?\d+(?:/\d+)?)[\s*_`.!]*$",
    re.IGNORECASE | re.MULTILINE,
)
_VERDICT_WORDS = {"correct": 1.0, "incorrect": 0.0}


def default_extract(text: str) -> str:
    """The answer part of a final message: the last ``<answer>...</answer>``, else the text after the
    last ``####``, else the whole message; ``<think>...</think>`` reasoning is dropped first, so the
    judge grades what the policy answered, not how it got there."""
    text = _THINK.sub("", text)
    answer = tagged(text, "answer", open_at_end=False)
    if answer is None:
        answer = after_marker(text, first_line=False)
    return text.strip() if answer is None else answer


def parse_verdict(reply: str) -> float | None:
    """The score in a judge's reply, or ``None`` when it has none.

    The last line of the form ``VERDICT: correct`` (1.0), ``VERDICT: incorrect`` (0.0) or
    ``SCORE: x`` with ``0 <= x <= 1`` wins (judges reason first and conclude last); case, markdown
    emphasis (``**VERDICT:** correct``) and a trailing full stop are tolerated. Anything else, a score
    outside [0, 1] included, is ``None``: the wrapper counts it as unparsable, never guesses.
    """
    for key, value in reversed(_VERDICT_LINE.findall(reply)):
        if key.lower() == "verdict":
            score = _VERDICT_WORDS.get(value.lower())
            if score is not None:
                return score
            continue
        try:
            score = float(value)
        except ValueError:
            continue
        if 0.0 <= score <= 1.0:
            return score
    return None


# -- the verdict cache --------------------------------------------------------------------------------


class VerdictCache:
    """A thread-safe LRU of parsed verdicts keyed by ``(rubric text, answer)``.

    GRPO groups and repeated evaluations grade the same answer to the same task many times; a served
    judge costs a request each time. Only parsed verdicts are stored (an error or an unparsable reply
    is retried next time). Pass one instance to several wrappers to share it, only between wrappers
    that use the same judge.

    Args:
        maxsize: most entries kept (least recently used dropped first); 0 keeps nothing.
    """

    def __init__(self, maxsize: int = 1024):
        if maxsize < 0:
            raise ValueError(f"maxsize is a number of entries, give it as >= 0 (0: no caching), got {maxsize}")
        self.maxsize = int(maxsize)
        self._entries: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> float | None:
        """The cached score of ``key`` (and mark it recently used), or ``None``."""
        with self._lock:
            score = self._entries.get(key)
            if score is not None:
                self._entries.move_to_end(key)
            return score

    def put(self, key: tuple[str, str], score: float) -> None:
        """Store ``score`` for ``key``, dropping the least recently used entry when full."""
        if self.maxsize == 0:
            return
        with self._lock:
            self._entries[key] = score
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


# -- judge backends ------------------------------------------------------------------------------------


class ScriptedJudge:
    """A judge that answers from a script, for tests and CPU runs: no model, fully deterministic.

    Args:
        script: a callable ``(prompt) -> reply``, or a dict whose first key (in order) found in the
            prompt gives the reply (``{"eighteen": "VERDICT: correct"}``).
        default: the reply when no key of a dict script is in the prompt; ``None``: raise
            :class:`JudgeError` (the wrapper reports it and keeps the env's reward).

    Attributes:
        prompts: every prompt received, in order (``len(judge.prompts)`` counts the calls).
    """

    def __init__(self, script: Callable[[str], str] | Mapping[str, str], *, default: str | None = None):
        if not callable(script) and not isinstance(script, Mapping):
            raise TypeError(f"script must be a callable (prompt) -> reply or a dict of replies, got {type(script).__name__}")
        self.script = script
        self.default = default
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if callable(self.script):
            return str(self.script(prompt))
        for key, reply in self.script.items():
            if key in prompt:
                return reply
        if self.default is not None:
            return self.default
        raise JudgeError(f"no key of the scripted judge's dict occurs in the prompt; add one or give default=, keys: {list(self.script)}")


class OpenAICompatibleJudge:
    """A judge served over the OpenAI chat-completions API (vLLM's ``vllm serve``, any compatible server),
    through :class:`agent_gym.models.backends.OpenAICompatibleChat` (``urllib`` only, no client package).

    Blocking: :class:`JudgeReward` runs it in a worker thread under ``astep``, so many episodes wait on
    the server at once.

    Args:
        url: the server (``http://host:8000``), its ``/v1`` base, or the full ``.../chat/completions`` URL.
        model: the served model's name (``--served-model-name`` of vLLM).
        system: a system message put before the rubric, if any.
        **options: :class:`~agent_gym.models.backends.OpenAICompatibleChat`'s: ``api_key`` (vLLM's
            ``--api-key``), ``timeout_s`` (60; a slower server is a judge error), ``max_tokens`` (512;
            leave room for reasoning before the verdict line), ``temperature`` (0: reproducible
            grading), ``extra_body``.
    """

    def __init__(self, url: str, model: str, *, system: str | None = None, **options: Unpack[EndpointOptions]):
        self.chat = OpenAICompatibleChat(url, model, **options)
        self.url = self.chat.url
        self.model = model
        self.system = system

    def __repr__(self) -> str:
        return f"OpenAICompatibleJudge({self.url!r}, model={self.model!r})"  # never the api key

    def __call__(self, prompt: str) -> str:
        return _ask(self.chat, prompt, self.system)


class HFJudge:
    """A local transformers model as the judge (:class:`agent_gym.models.backends.HFChat`): the rubric as
    one user turn of the tokenizer's chat template, decoded greedily (the same verdict for the same prompt).

    The model loads on the first call (torch and transformers are imported then, not before), and calls
    are serialised: one model, one generate at a time. Small models (the embedded 135M default) rarely
    write a parsable verdict; use it to try the plumbing, a served instruct model to train.

    Args:
        model: anything :func:`agent_gym.models.load_causal_lm` takes (``None``: the embedded default).
        max_new_tokens: the reply length limit.
        device: ``"cpu"``, ``"cuda"``...; ``None``: CUDA when available.
    """

    def __init__(self, model: str | None = None, *, max_new_tokens: int = 256, device: str | None = None):
        self.chat = HFChat(model, max_new_tokens=max_new_tokens, device=device)

    def __call__(self, prompt: str) -> str:
        return _ask(self.chat, prompt, None)


def _ask(chat: Callable[[list[dict[str, str]]], str], prompt: str, system: str | None) -> str:
    """The judge's reply to the rubric (a user turn, after ``system``); a backend failure is a JudgeError."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    try:
        return chat(messages)
    except ChatBackendError as exc:
        raise JudgeError(str(exc)) from exc


# -- the wrapper ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """What one judging produced: a score, or why there is none."""

    score: float | None
    cached: bool = False
    unparsable: bool = False
    error: str | None = None


class JudgeReward(gym.Wrapper):
    """Rewards the final answer of an episode by a judge's verdict against a rubric.

    On the step that terminates the episode (a final answer; not a truncation, not an invalid action)
    the rubric is rendered (see :data:`DEFAULT_RUBRIC` for its variables), sent to ``judge``, and the
    verdict parsed to a score ``s`` in [0, 1]. With the env's reward ``r`` of which ``o`` is the outcome
    component (``info["reward_components"]["outcome"]``; shaping bonuses are the rest):

    - ``"replace"``: the outcome is replaced: reward ``r - o + weight * s``; the ``outcome`` component
      is dropped, ``judge`` is ``weight * s``;
    - ``"add"``: reward ``r + weight * s``; ``judge`` is ``weight * s``;
    - ``"max"``: the better of the two counts: reward ``r - o + max(o, weight * s)``; ``judge`` is what
      the judge adds above the outcome, ``max(o, weight * s) - o``.

    So the reward is always the sum of ``info["reward_components"]``, and wrappers compose in any order
    (``RewardShaping(JudgeReward(env, ...))`` adds its bonuses to the judged reward).

    On a judged step ``info`` also gets ``judge_verdict`` (``s``, ``None`` when there is no verdict),
    ``env_reward`` (``r``), and the counts ``judge_cached``, ``judge_unparsable``, ``judge_errors``
    (0 or 1 each: sum them over episodes); when there is no verdict, ``judge_error`` says why, the
    reward stays ``r`` and ``judge`` is 0.0. ``stats`` keeps the same counts over the wrapper's life.

    Args:
        env: any env (what ``gym.make`` returns); the final message is the last assistant message of
            ``obs["messages"]``, the task is ``env.unwrapped.task``.
        judge: a :data:`JudgeFn`: blocking or async ``(prompt) -> reply``.
        rubric: a jinja2 template; a variable it names outside :data:`RUBRIC_VARIABLES` is refused here.
        weight: scales the judge's score.
        mode: ``"replace"``, ``"add"`` or ``"max"`` (above).
        extract: ``(final message text) -> answer`` (default :func:`default_extract`).
        parse: ``(reply) -> score in [0, 1] or None`` (default :func:`parse_verdict`).
        cache: a :class:`VerdictCache` (share one between wrappers with the same judge) or its size; 0: none.
        timeout_s: the longest wait for one verdict; ``None``: the judge's own (``OpenAICompatibleJudge``'s
            ``timeout_s``). A timed-out call is abandoned (its thread finishes on its own), not killed.
    """

    def __init__(
        self,
        env: gym.Env,
        judge: JudgeFn,
        *,
        rubric: str = DEFAULT_RUBRIC,
        weight: float = 1.0,
        mode: Mode = "replace",
        extract: Callable[[str], str] = default_extract,
        parse: Callable[[str], float | None] = parse_verdict,
        cache: VerdictCache | int = 1024,
        timeout_s: float | None = None,
    ):
        super().__init__(env)
        if not callable(judge):
            raise TypeError(f"judge must be a callable (prompt: str) -> str (or async); got {type(judge).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if not math.isfinite(weight):
            raise ValueError(f"weight must be a finite number, got {weight}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s is seconds > 0 (None: the judge's own limit), got {timeout_s}")
        self.judge = judge
        self.rubric = rubric
        self._template = _compile_rubric(rubric)
        self.weight = float(weight)
        self.mode: Mode = mode
        self.extract = extract
        self.parse = parse
        self.cache = cache if isinstance(cache, VerdictCache) else VerdictCache(cache)
        self.timeout_s = timeout_s
        self._is_async = _is_async_callable(judge)
        self._stats_lock = threading.Lock()
        #: Counts over the wrapper's life: ``judged``, ``calls`` (judge calls made), ``cached``,
        #: ``unparsable``, ``errors``.
        self.stats: dict[str, int] = {"judged": 0, "calls": 0, "cached": 0, "unparsable": 0, "errors": 0}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        request = self._request(obs, terminated, info)
        if request is None:
            return obs, reward, terminated, truncated, info
        outcome = request if isinstance(request, _Outcome) else self._judge_blocking(*request)
        return obs, *self._apply(reward, terminated, truncated, info, outcome)

    async def astep(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Async step: the judge is awaited (an async judge) or run in a worker thread (a blocking one),
        so the event loop keeps serving other episodes while it grades."""
        obs, reward, terminated, truncated, info = await astep(self.env, action)
        request = self._request(obs, terminated, info)
        if request is None:
            return obs, reward, terminated, truncated, info
        outcome = request if isinstance(request, _Outcome) else await self._judge_async(*request)
        return obs, *self._apply(reward, terminated, truncated, info, outcome)

    # -- building the prompt ---------------------------------------------------------------------------

    def _request(self, obs: Any, terminated: bool, info: Mapping[str, Any]) -> tuple[str, str] | _Outcome | None:
        """``(prompt, answer)`` for a step to judge, ``None`` for a step that is not an answered end, the
        error outcome when the user's ``extract`` or the rubric fails (reported like a judge failure)."""
        if not terminated or "invalid_action" in info or "render_error" in info:
            return None
        messages = list(obs.get("messages", [])) if isinstance(obs, Mapping) else []
        response = _last_assistant_text(messages)
        if response is None:
            return None
        try:
            answer = str(self.extract(response))
            task = getattr(self.env.unwrapped, "task", None)
            prompt = self._template.render(
                question=_question(task, messages),
                reference=_reference(task, info),
                answer=answer,
                response=response,
                task=_task_dict(task),
                messages=messages,
            )
        except Exception as exc:  # noqa: BLE001 - a user's extract or rubric must not end the run
            self._count("judged")
            return self._failed(ValueError(f"the rubric could not be rendered ({type(exc).__name__}: {exc}); fix the rubric or extract="))
        return prompt, answer

    # -- asking the judge ------------------------------------------------------------------------------

    def _judge_blocking(self, prompt: str, answer: str) -> _Outcome:
        early = self._before_call(prompt, answer)
        if early is not None:
            return early
        try:
            if self._is_async:
                reply = _in_daemon_thread(lambda: asyncio.run(self._call_async(prompt))).result(self.timeout_s)
            elif self.timeout_s is not None:
                reply = _in_daemon_thread(lambda: self.judge(prompt)).result(self.timeout_s)
            else:
                reply = self.judge(prompt)
        except Exception as exc:  # noqa: BLE001 - never raise out of step: fall back and say why
            return self._failed(exc)
        return self._after_call(prompt, answer, reply)

    async def _judge_async(self, prompt: str, answer: str) -> _Outcome:
        early = self._before_call(prompt, answer)
        if early is not None:
            return early
        try:
            if self._is_async:
                reply = await asyncio.wait_for(self._call_async(prompt), self.timeout_s)
            else:
                future = _in_daemon_thread(lambda: self.judge(prompt))
                reply = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - never raise out of astep: fall back and say why
            return self._failed(exc)
        return self._after_call(prompt, answer, reply)

    async def _call_async(self, prompt: str) -> Any:
        return await self.judge(prompt)  # type: ignore[misc]  # checked: an async callable

    def _before_call(self, prompt: str, answer: str) -> _Outcome | None:
        """The cached verdict, if any (else the call is counted)."""
        self._count("judged")
        score = self.cache.get((prompt, answer))
        if score is not None:
            self._count("cached")
            return _Outcome(score, cached=True)
        self._count("calls")
        return None

    def _after_call(self, prompt: str, answer: str, reply: Any) -> _Outcome:
        if not isinstance(reply, str):
            return self._failed(JudgeError(f"the judge returned {type(reply).__name__}, not the reply text (str)"))
        try:
            score = self.parse(reply)
        except Exception as exc:  # noqa: BLE001 - a user's parse must not end the run
            return self._failed(exc)
        if score is None or not 0.0 <= float(score) <= 1.0:
            self._count("unparsable")
            tail = reply.strip()[-200:]
            return _Outcome(
                None, unparsable=True, error=f"no verdict in the judge's reply (want a last line 'VERDICT: correct|incorrect' or 'SCORE: 0..1'); it ends {tail!r}"
            )
        self.cache.put((prompt, answer), float(score))
        return _Outcome(float(score))

    def _failed(self, exc: BaseException) -> _Outcome:
        self._count("errors")
        if isinstance(exc, (TimeoutError, concurrent.futures.TimeoutError, asyncio.TimeoutError)) and not str(exc):
            return _Outcome(None, error=f"the judge timed out after {self.timeout_s:g} s (timeout_s=)")
        return _Outcome(None, error=f"{type(exc).__name__}: {exc}")

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    # -- the reward ------------------------------------------------------------------------------------

    def _apply(
        self, reward: SupportsFloat, terminated: bool, truncated: bool, info: dict[str, Any], outcome: _Outcome
    ) -> tuple[float, bool, bool, dict[str, Any]]:
        env_reward = float(reward)
        given = info.get("reward_components")
        components = dict(given) if given else {"outcome": env_reward}
        info = {
            **info,
            "env_reward": env_reward,
            "judge_verdict": outcome.score,
            "judge_cached": int(outcome.cached),
            "judge_unparsable": int(outcome.unparsable),
            "judge_errors": int(outcome.error is not None and not outcome.unparsable),
        }
        if outcome.score is None:
            info["judge_error"] = outcome.error
            components["judge"] = 0.0
            return env_reward, terminated, truncated, {**info, "reward_components": components}
        judged = self.weight * outcome.score
        outcome_part = float(components.get("outcome", 0.0))
        if self.mode == "replace":
            components.pop("outcome", None)
            components["judge"] = judged
            total = env_reward - outcome_part + judged
        elif self.mode == "add":
            components["judge"] = judged
            total = env_reward + judged
        else:
            components["judge"] = max(outcome_part, judged) - outcome_part
            total = env_reward + components["judge"]
        return total, terminated, truncated, {**info, "reward_components": components}


# -- helpers -------------------------------------------------------------------------------------------


def _compile_rubric(rubric: str) -> Any:
    """The rubric as a jinja2 template; a syntax error or an unknown variable is refused now, not at
    the end of the first episode."""
    import jinja2
    import jinja2.meta

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
    try:
        unknown = jinja2.meta.find_undeclared_variables(env.parse(rubric)) - RUBRIC_VARIABLES
        template = env.from_string(rubric)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"the rubric is not a valid jinja2 template (line {exc.lineno}: {exc.message}); fix its syntax") from exc
    if unknown:
        raise ValueError(f"the rubric uses unknown variable(s) {sorted(unknown)}; available: {sorted(RUBRIC_VARIABLES)}")
    return template


def _is_async_callable(judge: Any) -> bool:
    return inspect.iscoroutinefunction(judge) or inspect.iscoroutinefunction(getattr(judge, "__call__", None))


def _in_daemon_thread(fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """Run ``fn`` in a daemon thread: a judge that hangs past its time-out is abandoned without keeping
    the interpreter (or an event loop's executor shutdown) waiting for it."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting step
            future.set_exception(exc)

    threading.Thread(target=run, name="judge", daemon=True).start()
    return future


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def _last_assistant_text(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return _text_of(message.get("content"))
    return None


def _field(task: Any, *names: str) -> Any:
    """The first of ``names`` that ``task`` has, as an attribute or a key; ``None`` when none."""
    for name in names:
        value = task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)
        if value is not None:
            return value
    return None


def _question(task: Any, messages: list[Any]) -> str:
    """The task's question, else the first user message (the env's phrasing of it)."""
    question = _field(task, "question", "prompt")
    if question is not None:
        return str(question)
    first_user = next((m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"), None)
    return _text_of(first_user.get("content")) if first_user is not None else ""


def _reference(task: Any, info: Mapping[str, Any]) -> str | None:
    """The task's reference answer (a list of accepted answers joined by ``; ``), else ``info["expected"]``."""
    value = _field(task, "answer", "reference", "golden_answers")
    if value is None:
        value = info.get("expected")
    if isinstance(value, (list, tuple)):
        return "; ".join(str(v) for v in value)
    return None if value is None else str(value)


def _task_dict(task: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(task) and not isinstance(task, type):
        return dataclasses.asdict(task)
    if isinstance(task, Mapping):
        return dict(task)
    return dict(vars(task)) if hasattr(task, "__dict__") else {"value": task}
