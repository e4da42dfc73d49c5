"""Every private name of TRL that agent_gym_trl uses, in one module, behind one check.

TRL has no public call that generates one turn from token ids with the trainer's own backend, nor one
that a ``rollout_func`` can log a metric with, so the adapter uses two private methods of ``GRPOTrainer``.
Only this module names them: the rest of the adapter calls :func:`single_turn_generator` and
:func:`metric_logger` (``tests/test_private.py`` fails on any other module that reads a private name of
TRL). Before the first of them is called, :func:`check` runs once per trainer class: it raises
:class:`UnsupportedTRL` when the installed trl is outside :data:`TESTED_TRL` (naming the installed
version and the ``pip install`` that gets a tested one), or when a name below is gone from the trainer
(naming it). :class:`~agent_gym_trl.EnvRollout` calls it at its first call, before any episode is played.

What is used (``GRPOTrainer``: ``trl.GRPOTrainer``; every row is called, none is replaced):

==  ==================================================  ===========================================  ==============
#   private name                                        used by (through)                            trl tested
==  ==================================================  ===========================================  ==============
1   GRPOTrainer._generate_single_turn(prompt_ids,       rollout._TRLBackend (single_turn_generator)  1.14.2, 1.16.0
    images, multimodal_fields, num_generations)
2   GRPOTrainer._log_metric(name, value)                rollout.EnvRollout._log (metric_logger)      1.14.2, 1.16.0
==  ==================================================  ===========================================  ==============

Why:

==  ========================================================================================================
#   why
==  ========================================================================================================
1   The one call of TRL's generation for a batch of token-id prompts: its vLLM server or colocated engine
    with ``use_vllm`` (weights synced to the current step first), else transformers generation with the
    trainer's model, with the trainer's sampling settings; it returns the completion ids and the sampling
    log-probs. It is what TRL's own multi-turn tool loop calls for each turn; no public method takes token
    ids. Called as ``(prompts, None, {}, num_generations=1)``: TRL's sampler has already repeated each
    prompt; the ``num_generations`` keyword exists since 1.14, and its presence is part of the check.
2   A metric averaged over the logging step and logged next to TRL's own (``kl``, ``entropy``). The public
    route, the ``log_metric`` keyword, is handed to reward functions only, which run after the rollout and
    see no trajectories; the ``env/`` counters are the rollout's.
==  ========================================================================================================

Not used: ``GRPOTrainer._tokenizer``. In both tested releases it is ``processing_class`` itself (a
processor's ``.tokenizer``), which the adapter reads instead.

This module imports trl only when a check needs its version (``import agent_gym_trl`` imports no trl).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

__all__ = [
    "TESTED_TRL",
    "TESTED_RELEASES",
    "PRIVATE_NAMES",
    "UnsupportedTRL",
    "check",
    "installed_trl_version",
    "single_turn_generator",
    "metric_logger",
]

#: The TRL releases this adapter supports (its pin in trainers/trl/pyproject.toml; 1.15.0 cannot compute
#: log-probs with a torch build without Triton, i.e. on CPU).
TESTED_TRL = ">=1.14,!=1.15.0,<1.17"
#: The releases the tests have passed with.
TESTED_RELEASES = ("1.14.2", "1.16.0")
#: The private names of the table, each with the keyword parameters the adapter passes to it.
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "_generate_single_turn": ("num_generations",),
    "_log_metric": (),
}

PIP_FIX = f"pip install 'trl{TESTED_TRL}'"

_verified: dict[type, str | None] = {}  # trainer classes that passed the check, and the trl version


class UnsupportedTRL(RuntimeError):
    """The installed trl is outside the tested range, or lacks a private name the adapter uses."""


def installed_trl_version() -> str | None:
    """The installed trl's version (its distribution metadata, else ``trl.__version__``); ``None``: unknown."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        pass
    try:
        import trl
    except ImportError:
        return None
    return getattr(trl, "__version__", None)


def check(trainer: Any, *, installed: str | None = None) -> str | None:
    """Check ``installed`` (default: the installed trl) and ``trainer`` before the first private call.

    With the installed version the check of a trainer class runs once; later calls return at once.

    Returns:
        the version checked (``None``: unknown, a source tree without metadata: only the names are checked).

    Raises:
        UnsupportedTRL: the version is outside :data:`TESTED_TRL`, or ``trainer`` lacks a name of the table
            (or its keyword parameter).
    """
    explicit = installed is not None
    if not explicit and type(trainer) in _verified:
        return _verified[type(trainer)]
    version = installed if explicit else installed_trl_version()
    if version is not None:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            supported = SpecifierSet(TESTED_TRL).contains(Version(version), prereleases=True)
        except InvalidVersion:
            supported = False
        if not supported:
            raise UnsupportedTRL(
                f"agent-r1-gym-trl supports trl{TESTED_TRL} (tested: {', '.join(TESTED_RELEASES)}); "
                f"trl {version} is installed: {PIP_FIX}"
            )
    shown = f"trl {version}" if version is not None else "the installed trl"
    for name, keywords in PRIVATE_NAMES.items():
        method = getattr(trainer, name, None)
        if not callable(method):
            raise UnsupportedTRL(
                f"{shown}'s {type(trainer).__name__} has no {name}, a private method agent-r1-gym-trl calls "
                f"(agent_gym_trl.private); the adapter is tested with trl{TESTED_TRL}: {PIP_FIX}"
            )
        try:
            parameters = inspect.signature(method).parameters
        except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
            continue
        for keyword in keywords:
            if keyword not in parameters:
                raise UnsupportedTRL(
                    f"{shown}'s {type(trainer).__name__}.{name} takes no {keyword} (agent-r1-gym-trl calls it "
                    f"with {keyword}=...; agent_gym_trl.private); the adapter is tested with trl{TESTED_TRL}: "
                    f"{PIP_FIX}"
                )
    if not explicit:
        _verified[type(trainer)] = version
    return version


def single_turn_generator(trainer: Any) -> Callable[[list[list[int]]], tuple[Any, Any]]:
    """Row 1: ``generate(prompts) -> (completion_ids, logprobs)``, one completion per prompt."""
    check(trainer)
    method = trainer._generate_single_turn

    def generate(prompts: list[list[int]]) -> tuple[Any, Any]:
        return method(prompts, None, {}, num_generations=1)

    return generate


def metric_logger(trainer: Any) -> Callable[[str, float], None]:
    """Row 2: ``log(name, value)``, averaged by TRL over the logging step."""
    check(trainer)
    return trainer._log_metric
