"""The env contract, checked: what ``agent-gym check ENV_ID`` runs (cf. ``gymnasium.utils.env_checker``).

:func:`check_contract` makes the env with ``gym.make`` and plays a few scripted steps (a tool call where
the env offers tools, a plain answer, an action with ids after its end-of-turn id) to check, one named
check at a time:

- ``make``: ``gym.make`` builds it and the unwrapped env is an :class:`~agent_gym.core.env.AgentEnv`;
- ``spaces``: a :class:`~agent_gym.core.spaces.TokenSequence` action space and a
  :class:`~agent_gym.core.spaces.ChatContextSpace` observation space over the tokenizer's vocabulary;
- ``hooks``: ``reset``, ``step`` and ``astep`` are :class:`~agent_gym.core.env.AgentEnv`'s own (an env
  customises them through ``on_reset`` and ``respond``/``arespond``);
- ``reset``: ``(obs, info)`` with the observation in its space and ``info`` of the env's reset-info
  type (:func:`agent_gym.core.env.info_types`: ``ResetInfo`` or the env's extension of it), no key
  that the type does not declare;
- ``step``: ``(obs, reward, terminated, truncated, info)`` with a ``float`` reward, ``bool`` flags and
  ``info`` of the env's step-info type, for every scripted step;
- ``determinism``: a second env reset with the same seed, stepped with the same actions, returns the
  same prompt ids, rewards, flags and ``info``; ``reset(options={"task_id": ...})`` gives the same
  episode again;
- ``no_drift``: each next observation's ``prompt_ids`` start with the previous ``prompt_ids`` plus the
  action's ids (as kept: up to the end-of-turn id), unless the env says it rewrote the context;
- ``snapshot``: a snapshot taken mid-episode, pickled and restored into a fresh env continues exactly
  like the original (skipped, with its reason, for an env whose ``fork_blocker`` says it cannot fork);
- ``invalid_action``: an out-of-vocabulary id and a 2-D action end the episode with
  ``info["invalid_action"]``, never an exception;
- ``gymnasium``: ``gymnasium.utils.env_checker.check_env`` passes on the unwrapped env.

A failed check says what was found and how to fix it. The checker steps the env directly (not through
:func:`agent_gym.rollout.play_episode`, whose records normalise what ``step`` returns): it checks the raw
return values.

Example::

    from agent_gym.core.contract import check_contract

    report = check_contract("AgentR1/GSM8KTool-v0")
    print(report)           # one line per check: PASS / FAIL / SKIP, and for a failure, the fix
    report.raise_if_failed()
"""

from __future__ import annotations

import math
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

__all__ = ["CheckResult", "ContractError", "ContractReport", "check_contract", "type_problems", "CHECKS", "HOOKS", "hook_overrides"]

#: The checks, in the order they run.
CHECKS = ("make", "spaces", "hooks", "reset", "step", "determinism", "no_drift", "snapshot", "invalid_action", "gymnasium")

Status = Literal["pass", "fail", "skip"]


class ContractError(AssertionError):
    """An env failed its contract check (the message is the report's failures, each with its fix)."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    name: str
    status: Status
    detail: str = ""
    """What was found (for a failure: what is wrong; for a skip: why it did not run)."""
    fix: str = ""
    """What to change in the env (failures only)."""

    def __str__(self) -> str:
        line = f"{self.status.upper():<4}  {self.name}"
        if self.detail:
            line += f": {self.detail}"
        if self.fix:
            line += f"\n      fix: {self.fix}"
        return line


@dataclass
class ContractReport:
    """Every check's outcome for one env."""

    env_id: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (skipped checks do not fail the env)."""
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def __getitem__(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"no check named {name!r}; checks: {', '.join(CHECKS)}")

    def __str__(self) -> str:
        verdict = "passed" if self.ok else f"FAILED ({len(self.failures)} of {len(self.results)} checks)"
        return "\n".join([f"{self.env_id}: contract {verdict}", *(str(r) for r in self.results)])

    def raise_if_failed(self) -> None:
        """Raise :class:`ContractError` listing each failure and its fix."""
        if not self.ok:
            raise ContractError(str(self))

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "ok": self.ok,
            "checks": [{"name": r.name, "status": r.status, "detail": r.detail, "fix": r.fix} for r in self.results],
        }


class _Failed(Exception):
    """One check failed: ``detail`` is what was found, ``fix`` what to change."""

    def __init__(self, detail: str, fix: str):
        super().__init__(detail)
        self.detail, self.fix = detail, fix


class _Skipped(Exception):
    """One check does not apply to this env (the message says why)."""


def check_contract(
    env_id: str,
    *,
    tokenizer: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    steps: int = 3,
) -> ContractReport:
    """Check the env ``env_id`` against the env contract (see the module docstring).

    Args:
        env_id: a registered id (``AgentR1/...``).
        tokenizer: the tokenizer the envs are made with (an object or a name; ``None``: the default
            model's). Loaded once and shared by the envs the check makes.
        env_kwargs: further constructor arguments (``split``, ``difficulty``, ...).
        seed: the seed of the episodes played.
        steps: the most steps played per episode (the episode may end sooner).

    Returns:
        A :class:`ContractReport`; it never raises for an env that breaks the contract (each broken
        rule is a failed check), only for arguments it cannot use (``steps < 1``).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return _Checker(env_id, tokenizer, dict(env_kwargs or {}), seed, steps).run()


# -- the checks ------------------------------------------------------------------------------------------


@dataclass
class _Step:
    action: list[int]
    result: tuple[Any, ...]


class _Checker:
    def __init__(self, env_id: str, tokenizer: Any, kwargs: dict[str, Any], seed: int, steps: int):
        self.env_id, self.tokenizer, self.kwargs, self.seed, self.steps = env_id, tokenizer, kwargs, seed, steps
        self.report = ContractReport(env_id)
        self.envs: list[Any] = []
        self.env: Any = None
        self.reset_result: tuple[Any, ...] = ()
        self.played: list[_Step] = []

    def run(self) -> ContractReport:
        try:
            for name in CHECKS:
                self._run_one(name, getattr(self, f"_check_{name}"))
        finally:
            for env in self.envs:
                try:
                    env.close()
                except Exception as exc:  # noqa: BLE001 - reported as the env's failure, not raised
                    self.report.results.append(CheckResult(
                        "close", "fail", f"close() raised {type(exc).__name__}: {exc}",
                        "close() must release the env's resources without raising, also mid-episode"))
                    break
        return self.report

    def _run_one(self, name: str, check: Callable[[], str]) -> None:
        if name != "make" and self.env is None:
            self.report.results.append(CheckResult(name, "skip", "the env could not be made"))
            return
        if name in ("determinism", "no_drift", "snapshot") and not self.played:
            self.report.results.append(CheckResult(name, "skip", "no step could be played"))
            return
        try:
            detail = check()
        except _Skipped as skip:
            self.report.results.append(CheckResult(name, "skip", str(skip)))
        except _Failed as failed:
            self.report.results.append(CheckResult(name, "fail", failed.detail, failed.fix))
        except Exception as exc:  # noqa: BLE001 - an env that raises fails the check that made it raise
            self.report.results.append(CheckResult(
                name, "fail", f"raised {type(exc).__name__}: {exc}",
                "reset, step and snapshot must not raise on what the contract allows (bad actions end the "
                "episode with info['invalid_action']); run the check's steps by hand to see the traceback"))
        else:
            self.report.results.append(CheckResult(name, "pass", detail))

    def _make(self) -> Any:
        from agent_gym.core.make import make_env

        env = make_env(self.env_id, tokenizer=self.tokenizer, **self.kwargs)
        self.envs.append(env)
        return env

    # -- make, spaces ------------------------------------------------------------------------------------

    def _check_make(self) -> str:
        from agent_gym.core.env import AgentEnv
        from agent_gym.models import load_tokenizer

        self.tokenizer = load_tokenizer(self.tokenizer)  # once, for every env the check makes
        try:
            env = self._make()
        except Exception as exc:
            raise _Failed(f"gym.make raised {type(exc).__name__}: {exc}",
                          "register the env with agent_gym.register_env and make every constructor argument "
                          "optional (or pass it with --env-kwarg KEY=VALUE)") from exc
        if not isinstance(env.unwrapped, AgentEnv):
            raise _Failed(f"the env is a {type(env.unwrapped).__name__}, not an agent_gym.AgentEnv",
                          "subclass agent_gym.AgentEnv and implement its hooks")
        self.env = env
        return type(env.unwrapped).__name__

    def _check_spaces(self) -> str:
        from agent_gym.core.spaces import ChatContextSpace, TokenSequence

        base = self.env.unwrapped
        vocab = base.template.vocab_size
        fix = "leave action_space and observation_space as AgentEnv.__init__ sets them"
        if not isinstance(base.action_space, TokenSequence):
            raise _Failed(f"action_space is a {type(base.action_space).__name__}", fix)
        if not isinstance(base.observation_space, ChatContextSpace):
            raise _Failed(f"observation_space is a {type(base.observation_space).__name__}", fix)
        if base.action_space.vocab_size != vocab:
            raise _Failed(f"action_space.vocab_size is {base.action_space.vocab_size}, the tokenizer has {vocab}", fix)
        return f"vocab {vocab}, actions up to {base.action_space.max_length} ids"

    def _check_hooks(self) -> str:
        cls = type(self.env.unwrapped)
        reason = getattr(cls, "own_episode_loop", None)
        for name in hook_overrides(cls, own_step=bool(reason)):
            hook = HOOKS[name]
            raise _Failed(f"{next(k for k in cls.__mro__ if name in vars(k)).__qualname__} overrides {name}",
                          f"customise {name} through {hook} and leave {name} to AgentEnv, which keeps seeding, "
                          "the no-drift context, all-or-nothing steps and the info bookkeeping in one place")
        if reason:
            raise _Skipped(f"{cls.__name__}'s reset is AgentEnv's; it runs its own step and astep: {reason}")
        return "reset, step and astep are AgentEnv's"

    # -- reset, step -------------------------------------------------------------------------------------

    def _check_reset(self) -> str:
        from agent_gym.core.env import info_types

        result = self.env.reset(seed=self.seed)
        if not isinstance(result, tuple) or len(result) != 2:
            raise _Failed(f"reset returned {_kind(result)}, not (obs, info)", "return super().reset(...)'s pair")
        obs, info = result
        self._check_obs(obs, "reset")
        self._check_info(info, info_types(type(self.env.unwrapped))[0], "reset")
        self.reset_result = result
        return f"{len(obs['prompt_ids'])} prompt ids, task {info.get('task_id')!r}"

    def _check_step(self) -> str:
        from agent_gym.core.env import info_types

        step_info = info_types(type(self.env.unwrapped))[1]
        obs = self.reset_result[0]
        for i in range(self.steps):
            action = self._action(i, obs)
            result = self.env.step(np.asarray(action, dtype=np.int64))
            self.played.append(_Step(action, result))
            where = f"step {i + 1}"
            if not isinstance(result, tuple) or len(result) != 5:
                raise _Failed(f"{where} returned {_kind(result)}, not (obs, reward, terminated, truncated, info)",
                              "return AgentEnv.step's 5-tuple")
            obs, reward, terminated, truncated, info = result
            self._check_obs(obs, where)
            if type(reward) is not float or not math.isfinite(reward):
                raise _Failed(f"{where}: reward is {reward!r} ({type(reward).__name__}), not a finite float",
                              "give EnvReply.reward / Grade.reward a finite float")
            for flag, value in (("terminated", terminated), ("truncated", truncated)):
                if type(value) is not bool:
                    raise _Failed(f"{where}: {flag} is {value!r} ({type(value).__name__}), not a bool",
                                  f"give EnvReply.{flag} a bool")
            self._check_info(info, step_info, where)
            if terminated or truncated:
                break
        ends = "ended" if self.played and (self.played[-1].result[2] or self.played[-1].result[3]) else "still running"
        return f"{len(self.played)} step(s), episode {ends}"

    def _action(self, i: int, obs: Any) -> list[int]:
        """The scripted action of step ``i``: a tool call first (where the env offers tools), then a plain
        answer, then an answer with ids after its end-of-turn id (which the env must cut)."""
        base = self.env.unwrapped
        template = base.template
        tools = obs.get("tools") or []
        if i == 0 and tools:
            name = tools[0].get("function", tools[0]).get("name", "tool")
            text = "Let me use a tool.\n" + base.parser.format_calls([{"name": name, "arguments": {}}])
        else:
            text = "I think the answer is 1.\n<answer>1</answer>\n#### 1"
        ids = template.encode(text) + list(template.end_of_turn_ids)
        if i == 2 and template.end_of_turn_ids:
            ids += template.encode(" extra")[:2]  # a sampler's padding after the turn ended
        return ids

    def _check_obs(self, obs: Any, where: str) -> None:
        from agent_gym.core.types import Observation

        fix = "return the context's observation (ChatContext.observation()) as AgentEnv does"
        if not isinstance(obs, dict):
            raise _Failed(f"{where}: the observation is {_kind(obs)}, not a dict", fix)
        problems = type_problems(obs, Observation, exact=True, name="the observation")
        if problems:
            raise _Failed(f"{where}: {problems[0]}", fix)
        ids = obs["prompt_ids"]
        if ids.ndim != 1 or ids.dtype != np.int64 or len(ids) == 0:
            raise _Failed(f"{where}: prompt_ids has shape {ids.shape} and dtype {ids.dtype}", fix + " (1-D int64, not empty)")
        if not self.env.unwrapped.observation_space.contains(obs):
            raise _Failed(f"{where}: the observation is not in observation_space", fix)

    def _check_info(self, info: Any, declared: type, where: str) -> None:
        problems = type_problems(info, declared, exact=True, name="info")
        if problems:
            raise _Failed(
                f"{where}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                f"declare every info key the env returns, with its type, in {declared.__qualname__} ({declared.__module__}) "
                "or an extension of it that the env class names (AgentEnv[Task, ResetInfo, StepInfo]); return values "
                "of the declared types",
            )

    # -- determinism, drift ------------------------------------------------------------------------------

    def _check_determinism(self) -> str:
        from agent_gym.trajectory import to_jsonable

        other = self._make()
        obs, info = other.reset(seed=self.seed)
        fix = ("draw the task from the rng sample_task is given (seeded by reset(seed=...)), and keep tools and "
               "replies free of unseeded randomness and of wall-clock time")
        first_obs, first_info = self.reset_result
        if not np.array_equal(obs["prompt_ids"], first_obs["prompt_ids"]) or info != first_info:
            raise _Failed(f"two envs reset with seed={self.seed} differ: task {first_info.get('task_id')!r} "
                          f"vs {info.get('task_id')!r}", fix)
        for i, played in enumerate(self.played):
            again = other.step(np.asarray(played.action, dtype=np.int64))
            difference = _difference(to_jsonable(played.result), to_jsonable(again))
            if difference:
                raise _Failed(f"step {i + 1} differs between two envs with the same seed and actions: {difference}", fix)
        task_id = first_info.get("task_id")
        if task_id is None:
            return f"{len(self.played)} step(s) equal; the env names no task id"
        obs, info = other.reset(options={"task_id": task_id})
        if not np.array_equal(obs["prompt_ids"], first_obs["prompt_ids"]):
            raise _Failed(f"reset(options={{'task_id': {task_id!r}}}) opens another episode than the seeded reset "
                          "that named this task id",
                          "get_task(task_id) must return the task whose id task_id_of gives (and initial_messages must "
                          "depend on the task alone)")
        return f"{len(self.played)} step(s) equal; task_id {task_id!r} pins the same episode"

    def _check_no_drift(self) -> str:
        prev = self.reset_result[0]["prompt_ids"].tolist()
        checked = 0
        for i, played in enumerate(self.played):
            obs, _, terminated, truncated, info = played.result
            cut = int(info.get("ids_after_end_of_turn", 0))
            kept = played.action[: len(played.action) - cut]
            ids = obs["prompt_ids"].tolist()
            if info.get("new_segment"):
                prev = ids
                continue
            if "invalid_action" not in info and ids[: len(prev) + len(kept)] != prev + kept:
                at = _first_difference(ids, prev + kept)
                raise _Failed(
                    f"after step {i + 1} the prompt ids do not extend the previous prompt + action ids (first "
                    f"difference at id {at} of {len(prev) + len(kept)})"
                    + (" around the end-of-turn cut" if cut else ""),
                    "append through ChatContext (EnvReply.messages), never re-render the context; to rewrite it "
                    "return EnvReply(rewrite=...), which starts a new segment (info['new_segment'])",
                )
            checked += 1
            prev = ids
            if terminated or truncated:
                break
        return f"{checked} step(s): next prompt ids = previous + action + appended"

    # -- snapshot ------------------------------------------------------------------------------------------

    def _check_snapshot(self) -> str:
        from agent_gym.core.snapshot import EnvSnapshot, SnapshotError, restore
        from agent_gym.trajectory import to_jsonable

        env = self._make()
        env.reset(seed=self.seed)
        fix = ("name every attribute that holds the episode in episode_state (deep-copied), or give a stateful tool "
               "snapshot_state()/restore_state(); docs/state-and-replay.md")
        rounds = 0
        for i, played in enumerate(self.played[:2]):  # a snapshot after reset, and one after the first step
            blocker = env.unwrapped.fork_blocker()
            if blocker:
                raise _Skipped(f"the env cannot fork: {blocker}")
            try:
                snap = EnvSnapshot.from_bytes(env.unwrapped.snapshot().to_bytes())
            except SnapshotError as exc:
                raise _Failed(f"snapshot() raised: {exc}", "name the episode's attributes in episode_state, give "
                              "stateful tools snapshot_state()/restore_state(), or say why in fork_blocker()") from exc
            other = restore(self._make(), snap)  # a fresh env each time: nothing of an earlier episode left in it
            where = "after reset" if i == 0 else f"after step {i}"
            if other.unwrapped.context.ids != env.unwrapped.context.ids:
                raise _Failed(f"restored {where}, the env's context ids differ from the original's", fix)
            original = env.step(np.asarray(played.action, dtype=np.int64))
            restored = other.step(np.asarray(played.action, dtype=np.int64))
            difference = _difference(to_jsonable(original), to_jsonable(restored))
            if difference:
                raise _Failed(f"restored {where}, the next step differs from the original env's: {difference}", fix)
            rounds += 1
            if original[2] or original[3]:
                break
        return f"{rounds} snapshot(s) pickled and restored in a fresh env: the next step is the same"

    # -- bad actions, gymnasium ----------------------------------------------------------------------------

    def _check_invalid_action(self) -> str:
        base = self.env.unwrapped
        vocab = base.template.vocab_size
        fix = "let AgentEnv.step handle actions (do not override step); an invalid action ends the episode, reward 0"
        for label, action in (("an out-of-vocabulary id", np.array([vocab], dtype=np.int64)),
                              ("a 2-D action", np.zeros((2, 2), dtype=np.int64))):
            self.env.reset(seed=self.seed)
            try:
                _, reward, terminated, _, info = self.env.step(action)
            except Exception as exc:
                raise _Failed(f"step raised {type(exc).__name__} on {label}: {exc}", fix) from exc
            if not terminated or reward != 0.0 or not isinstance(info.get("invalid_action"), str):
                raise _Failed(f"{label} did not end the episode with reward 0 and info['invalid_action']", fix)
        return "an out-of-vocabulary id and a 2-D action end the episode with info['invalid_action']"

    def _check_gymnasium(self) -> str:
        from gymnasium.utils.env_checker import check_env

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check_env(self.env.unwrapped, skip_render_check=True)
            except Exception as exc:
                raise _Failed(f"{type(exc).__name__}: {exc}", "make the env pass gymnasium.utils.env_checker.check_env") from exc
        ours = [str(w.message) for w in caught if "gymnasium" in (w.filename or "") or "env_checker" in str(w.category)]
        if ours:
            raise _Failed(f"check_env warned: {ours[0]}", "make the env pass gymnasium.utils.env_checker.check_env "
                          "without warnings")
        return "gymnasium.utils.env_checker.check_env passes"


# -- values against TypedDicts ---------------------------------------------------------------------------


def type_problems(value: Any, declared: Any, *, exact: bool = False, name: str = "value") -> list[str]:
    """What is wrong with ``value`` (called ``name`` in the messages) as a ``declared`` (a TypedDict, or a
    type annotation): missing required keys, values of another type and, with ``exact``, keys the
    TypedDict does not declare. Empty when it fits. Annotations it cannot check (a ``TypeVar``, a
    protocol) accept anything."""
    if _is_typeddict(declared):
        if not isinstance(value, Mapping):
            return [f"{name} is {_kind(value)}, not a dict"]
        hints, required = _keys(declared)
        problems = [f"{name} lacks the key {k!r}" for k in sorted(required) if k not in value]
        if exact:
            problems += [f"{name} has the undeclared key {k!r}" for k in value if k not in hints]
        for key, hint in hints.items():
            if key in value:
                problems += type_problems(value[key], hint, name=f"{name}[{key!r}]")
        return problems
    return [] if _fits(value, declared) else [f"{name} is {_kind(value)}, not {_name(declared)}"]


def _keys(declared: Any) -> tuple[dict[str, Any], set[str]]:
    """A TypedDict's keys with their value types, and its required keys. Read from the annotations, not
    ``__required_keys__``, which counts a ``NotRequired`` key as required where the annotations are strings
    (``from __future__ import annotations``) before Python 3.12."""
    hints = typing.get_type_hints(declared, include_extras=True)
    required: set[str] = set()
    for key, hint in hints.items():
        marker = typing.get_origin(hint)
        while marker is typing.Annotated:
            hint = typing.get_args(hint)[0]
            marker = typing.get_origin(hint)
        if _marker_name(marker) in ("NotRequired", "Required"):
            if _marker_name(marker) == "Required":
                required.add(key)
            hint = typing.get_args(hint)[0]
        elif getattr(declared, "__total__", True):
            required.add(key)
        hints[key] = hint
    return hints, required


def _marker_name(origin: Any) -> str | None:
    return getattr(origin, "_name", None) or getattr(origin, "__name__", None) if origin is not None else None


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any or isinstance(hint, typing.TypeVar):
        return True
    if hint is None or hint is type(None):
        return value is None
    if _is_typeddict(hint):
        return not type_problems(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is Literal:
        return value in args
    if origin in (list, Sequence, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args))
        return not args or all(_fits(v, args[0]) for v in value)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            return False
        return not args or all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    if hint is float:
        return isinstance(value, (float, int)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


def _name(hint: Any) -> str:
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__qualname__
    return str(hint).replace("typing.", "")


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON-like values first differ (``None``: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}[{key!r}] is only in one"
            found = _difference(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        names = ("obs", "reward", "terminated", "truncated", "info") if not path and len(a) == 5 else None
        if len(a) != len(b):
            return f"{path or 'value'} has {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _difference(x, y, names[i] if names else f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path or 'value'}: {_short(a)} vs {_short(b)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: AgentEnv's methods an env customises through hooks instead, and the hook for each.
HOOKS = {"reset": "on_reset(task) / aon_reset(task) / open_context(task)", "areset": "aon_reset(task)",
         "step": "respond(turn)", "astep": "arespond(turn)"}


def hook_overrides(cls: type, *, own_step: bool = False) -> list[str]:
    """The names of :data:`HOOKS` that ``cls`` (an ``AgentEnv`` subclass) defines itself rather than
    inheriting from ``AgentEnv``; ``own_step``: ``step`` and ``astep`` may be its own (``own_episode_loop``).
    An env that overrides ``aon_reset`` has AgentEnv's ``areset`` (``AgentEnv._areset``), not its own."""
    from agent_gym.core.env import AgentEnv

    found = []
    for name in HOOKS:
        if own_step and name in ("step", "astep"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner is AgentEnv or owner.__dict__[name] is AgentEnv.__dict__.get(f"_{name}"):
            continue
        found.append(name)
    return found
