"""``await env.astep(action)`` (and ``await env.areset()``) on whatever ``gym.make`` returns.

Gymnasium has no async step, and ``gym.make`` wraps every env in its own wrappers
(``PassiveEnvChecker``, ``OrderEnforcing``, ``TimeLimit`` when the spec has a step limit), which since
gymnasium 1.0 no longer forward unknown attributes. So without help ``env.astep`` exists only on
``env.unwrapped``, and calling it there would skip what the wrappers do (order checks, step limits,
reward shaping).

This module is the one place that changes gymnasium or reads its private attributes: :func:`install`
gives ``gymnasium.Wrapper`` an ``astep`` method (it adds the attribute, never replaces one), and
:func:`mark_reset` tells a fresh wrapper stack that an episode is under way (a restored snapshot's:
``OrderEnforcing._has_reset``, ``TimeLimit._elapsed_steps``, ``PassiveEnvChecker._previous_data``). For a wrapper layer it does what the
layer's ``step`` would do, awaiting the layer below instead of blocking:

- a layer whose ``step`` is ``Wrapper.step`` itself (it only forwards) awaits the inner layer's
  ``astep``;
- gymnasium's own ``OrderEnforcing``, ``PassiveEnvChecker``, ``TimeLimit``, ``ObservationWrapper``,
  ``RewardWrapper`` and ``ActionWrapper`` get async versions of their ``step`` (same checks, same
  truncation, same transforms);
- any other wrapper that overrides ``step`` (a user's, another library's) keeps its exact semantics:
  its ``step`` runs in a worker thread (blocking only that thread, not the event loop). A wrapper that
  defines its own ``astep`` is used as it is (this project's wrappers do).

The innermost env is awaited through its own ``astep`` (every ``AgentEnv`` has one) or, for an env
without one, stepped in a worker thread. ``areset`` (:func:`areset`) does the same for ``reset`` where the
innermost env has an ``areset`` of its own (an env whose reset waits); other envs reset synchronously.

What it relies on of gymnasium, all checked against :data:`TESTED_GYMNASIUM` by :func:`check_version`
(which :func:`install`, run on ``import agent_gym``, calls first; outside the range it raises
:class:`UnsupportedGymnasium` naming the range and the ``pip install`` that gets a tested release):

| private name or patch | why | undone by |
|---|---|---|
| ``gymnasium.Wrapper.astep`` / ``.areset`` (added) | ``await env.astep`` through ``gym.make``'s wrappers | ``del gym.Wrapper.astep`` (never replaces one) |
| ``OrderEnforcing._has_reset`` | the async step's order check; a restored snapshot is under way | nothing to undo (the wrapper's own state) |
| ``TimeLimit._elapsed_steps``, ``._max_episode_steps`` | the async step's truncation; a snapshot's step count | as above |
| ``PassiveEnvChecker._previous_data``, ``.checked_step``, ``.checked_reset`` | the checker's first step and reset, async | as above |
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import common

from agent_gym.versions import in_tested_range

__all__ = ["TESTED_GYMNASIUM", "UnsupportedGymnasium", "areset", "astep", "check_version", "install", "mark_reset"]

#: The gymnasium releases whose wrappers' private attributes this module reads (the pin in pyproject.toml;
#: CI runs 1.4.0). Raise the upper bound once the tests pass on the next minor release.
TESTED_GYMNASIUM = ">=1.0,<1.5"


class UnsupportedGymnasium(RuntimeError):
    """The installed gymnasium is outside :data:`TESTED_GYMNASIUM`."""


def check_version(version: str | None = None) -> str:
    """Check ``version`` (default: ``gymnasium.__version__``) against :data:`TESTED_GYMNASIUM`; return it.

    Raises:
        UnsupportedGymnasium: outside the range (or unreadable), naming the range and the fix.
    """
    version = gym.__version__ if version is None else version
    if not in_tested_range(version, TESTED_GYMNASIUM):
        raise UnsupportedGymnasium(
            f"agent_gym is tested with gymnasium{TESTED_GYMNASIUM} and reads private attributes of its wrappers "
            f"(agent_gym/core/async_step.py), but gymnasium {version} is installed: "
            f"pip install 'gymnasium{TESTED_GYMNASIUM}'"
        )
    return version

StepResult = tuple[Any, Any, bool, bool, dict[str, Any]]
ResetResult = tuple[Any, dict[str, Any]]


async def astep(env: Any, action: Any) -> StepResult:
    """Step any env or wrapper stack without blocking the event loop.

    ``env.astep(action)`` when the object has one (every ``AgentEnv``, and every gymnasium wrapper once
    :func:`install` ran); else ``env.step`` in a worker thread.
    """
    method = getattr(env, "astep", None)
    if method is not None:
        return await method(action)
    return await asyncio.to_thread(env.step, action)


async def _forward(self: gym.Wrapper, action: Any) -> StepResult:
    return await astep(self.env, action)


async def _order_enforcing(self: common.OrderEnforcing, action: Any) -> StepResult:
    if not self._has_reset:
        raise ResetNeeded("Cannot call env.step() before calling env.reset()")
    return await astep(self.env, action)


async def _passive_env_checker(self: common.PassiveEnvChecker, action: Any) -> StepResult:
    if self.checked_step is False:
        # The first step runs gymnasium's checker, which calls the inner step synchronously: run that
        # one step as gymnasium does, in a thread so that a waiting tool does not stall the loop.
        return await asyncio.to_thread(self.step, action)
    result = await astep(self.env, action)
    if self.checked_data_reuse is False:
        obs, _, _, _, info = result
        from gymnasium.utils.passive_env_checker import env_data_reuse_passive_checker

        previous: Any = self._previous_data  # gymnasium types it as None until its first reset
        env_data_reuse_passive_checker(previous, (obs, info), "step", "step")
        self._previous_data = None
        self.checked_data_reuse = True
    return result


async def _time_limit(self: common.TimeLimit, action: Any) -> StepResult:
    obs, reward, terminated, truncated, info = await astep(self.env, action)
    elapsed: int = (self._elapsed_steps or 0) + 1  # gymnasium types the counter as None before reset
    self._elapsed_steps = elapsed  # type: ignore[assignment]
    if elapsed >= self._max_episode_steps:
        truncated = True
    return obs, reward, terminated, truncated, info


async def _observation_wrapper(self: gym.ObservationWrapper, action: Any) -> StepResult:
    obs, reward, terminated, truncated, info = await astep(self.env, action)
    return self.observation(obs), reward, terminated, truncated, info


async def _reward_wrapper(self: gym.RewardWrapper, action: Any) -> StepResult:
    obs, reward, terminated, truncated, info = await astep(self.env, action)
    return obs, self.reward(reward), terminated, truncated, info


async def _action_wrapper(self: gym.ActionWrapper, action: Any) -> StepResult:
    return await astep(self.env, self.action(action))


# The class that defines a layer's ``step`` -> the async form of that ``step``.
_ASYNC_FORMS: dict[type, Callable[[Any, Any], Awaitable[StepResult]]] = {
    gym.Wrapper: _forward,
    common.OrderEnforcing: _order_enforcing,
    common.PassiveEnvChecker: _passive_env_checker,
    common.TimeLimit: _time_limit,
    gym.ObservationWrapper: _observation_wrapper,
    gym.RewardWrapper: _reward_wrapper,
    gym.ActionWrapper: _action_wrapper,
}


async def _wrapper_astep(self: gym.Wrapper, action: Any) -> StepResult:
    """Async :meth:`step` of this wrapper (see :mod:`agent_gym.core.async_step`)."""
    owner = next(klass for klass in type(self).__mro__ if "step" in vars(klass))
    form = _ASYNC_FORMS.get(owner)
    if form is not None:
        return await form(self, action)
    own = vars(owner).get("astep")
    if own is not None:  # the class that overrides step also gave its async form
        return await own(self, action)
    return await asyncio.to_thread(self.step, action)


async def areset(env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetResult:
    """Reset any env or wrapper stack, awaiting the innermost env's ``areset`` where it has one.

    An env whose reset waits on something outside (a remote session, an agent program's first request)
    defines ``async def areset``; through gymnasium's wrappers each layer then does what its ``reset``
    does (``OrderEnforcing`` notes the reset, ``TimeLimit`` zeroes its count, an observation wrapper
    transforms) around the awaited inner reset. Any other env is reset as it always was, synchronously
    (its reset is cheap: a thread hop would only cost).
    """
    method = getattr(env, "areset", None)
    if method is not None:
        return await method(seed=seed, options=options)
    return env.reset(seed=seed, options=options)


async def _forward_reset(self: gym.Wrapper, seed: int | None, options: dict[str, Any] | None) -> ResetResult:
    return await areset(self.env, seed=seed, options=options)


async def _order_enforcing_reset(self: common.OrderEnforcing, seed: int | None, options: dict[str, Any] | None) -> ResetResult:
    self._has_reset = True
    return await areset(self.env, seed=seed, options=options)


async def _passive_env_checker_reset(self: common.PassiveEnvChecker, seed: int | None,
                                     options: dict[str, Any] | None) -> ResetResult:
    if self.checked_reset is False:  # the checker resets the inner env synchronously: once, in a thread
        return await asyncio.to_thread(self.reset, seed=seed, options=options)
    return await areset(self.env, seed=seed, options=options)


async def _time_limit_reset(self: common.TimeLimit, seed: int | None, options: dict[str, Any] | None) -> ResetResult:
    self._elapsed_steps = 0  # type: ignore[assignment]  # gymnasium types the counter as None before reset
    return await areset(self.env, seed=seed, options=options)


async def _observation_wrapper_reset(self: gym.ObservationWrapper, seed: int | None,
                                     options: dict[str, Any] | None) -> ResetResult:
    obs, info = await areset(self.env, seed=seed, options=options)
    return self.observation(obs), info


# The class that defines a layer's ``reset`` -> the async form of that ``reset``.
_ASYNC_RESETS: dict[type, Callable[[Any, Any, Any], Awaitable[ResetResult]]] = {
    gym.Wrapper: _forward_reset,
    common.OrderEnforcing: _order_enforcing_reset,
    common.PassiveEnvChecker: _passive_env_checker_reset,
    common.TimeLimit: _time_limit_reset,
    gym.ObservationWrapper: _observation_wrapper_reset,
    gym.RewardWrapper: _forward_reset,
    gym.ActionWrapper: _forward_reset,
}


async def _wrapper_areset(self: gym.Wrapper, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetResult:
    """Async :meth:`reset` of this wrapper (see :func:`areset`)."""
    if getattr(self.unwrapped, "areset", None) is None:
        return self.reset(seed=seed, options=options)  # nothing to await below: as it always was
    owner = next(klass for klass in type(self).__mro__ if "reset" in vars(klass))
    form = _ASYNC_RESETS.get(owner)
    if form is not None:
        return await form(self, seed, options)
    own = vars(owner).get("areset")
    if own is not None:
        return await own(self, seed=seed, options=options)
    return await asyncio.to_thread(self.reset, seed=seed, options=options)


def install() -> None:
    """Give ``gymnasium.Wrapper`` its ``astep`` and ``areset`` (idempotent; never replaces an existing attribute).

    Raises:
        UnsupportedGymnasium: the installed gymnasium is outside :data:`TESTED_GYMNASIUM` (:func:`check_version`).
    """
    check_version()
    if "astep" not in vars(gym.Wrapper):
        gym.Wrapper.astep = _wrapper_astep  # type: ignore[attr-defined]
    if "areset" not in vars(gym.Wrapper):
        gym.Wrapper.areset = _wrapper_areset  # type: ignore[attr-defined]


def mark_reset(env: Any, steps: int = 0) -> None:
    """Tell gymnasium's wrappers around ``env`` that an episode is under way, ``steps`` steps in (an
    episode restored from a snapshot, which their ``reset`` never saw): ``OrderEnforcing`` lets ``step``
    through, ``TimeLimit`` counts from ``steps``, ``PassiveEnvChecker`` has a reset result to compare its first step with."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, common.OrderEnforcing):
            layer._has_reset = True
        elif isinstance(layer, common.TimeLimit):
            layer._elapsed_steps = steps  # type: ignore[assignment]
        elif isinstance(layer, common.PassiveEnvChecker) and layer._previous_data is None:
            # Its first step checks that the env returns new objects, not those of the reset it saw:
            # none was seen, so it compares with fresh ones.
            layer._previous_data = ({}, {})
        layer = layer.env
