"""Everything that differs between verl 0.7.x and 0.9.x, in one place.

The rest of the adapter imports verl only through this module, and changes verl's own objects only
through :mod:`agent_gym_verl.patches` (whose tables list every such change). What differs (read from the
installed sources of verl 0.7.0 and 0.9.1):

==============================  =====================================  ======================================
what                            verl 0.7.0                             verl 0.9.1
==============================  =====================================  ======================================
server manager given to loops   ``AsyncLLMServerManager``              ``LLMServerClient`` (``llm_server``)
``generate(...)`` returns       ``TokenOutput(token_ids, log_probs)``  the same, plus ``num_preempted`` and
                                                                       ``extra_fields``
``AgentLoopBase.__init__``      ``dataset_config=DictConfig``          ``data_config=DictConfigWrap``,
                                                                       ``hf_model_type``, ``tools``
``AgentLoopMetrics`` fields     generate_sequences, tool_calls         + compute_score, num_preempted
agent-loop worker               ``AgentLoopWorkerBase(config,          ``AgentLoopWorker(config,
                                server_handles, reward_router)``       llm_client, teacher, reward_handles)``
legacy ``TaskRunner`` module    ``verl.trainer.main_ppo``              ``verl.trainer.main_ppo_v0``
                                                                       (and ``trainer.use_v1=False``)
advantage estimators            11                                     14 (+ optimal-token baselines, GDPO)
==============================  =====================================  ======================================

Identical in both (and relied on): ``register``, ``AgentLoopOutput`` (prompt_ids, response_ids,
response_mask, response_logprobs, reward_score, num_turns, metrics, extra_fields), one agent-loop
output per dataset row (``_run_agent_loop`` post-processes exactly one output), ``extra_fields``
landing in ``non_tensor_batch``, ``RayPPOTrainer._balance_batch`` mutating the batch in place right
after rollout, and ``ray_trainer.compute_advantage`` being looked up as a module global by ``fit``.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from importlib.metadata import version as _dist_version
from typing import Any

# -- the tested verl releases ------------------------------------------------------------------------
# Checked before this module imports verl: outside them the differences above (and patches.py's
# targets) are unknown, so the adapter refuses to run rather than fail somewhere inside a training step.

#: The verl releases this module and :mod:`agent_gym_verl.patches` are tested with (the extras
#: ``verl07`` and ``verl09`` of trainers/verl/pyproject.toml).
TESTED_VERL = ("0.7.0", "0.9.1")
#: The series they stand for, as ``(major, minor)``.
TESTED_SERIES = ((0, 7), (0, 9))


class UnsupportedVerl(RuntimeError):
    """The installed verl is not one of :data:`TESTED_VERL`'s series."""


def check_verl_version(version: str) -> tuple[int, int]:
    """``(major, minor)`` of ``version`` when it is of a tested series.

    Raises:
        UnsupportedVerl: any other version (or an unreadable one), naming the tested releases and the fix.
    """
    parts = version.split(".")
    try:
        series = (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x"))
    except (IndexError, ValueError):
        series = (-1, -1)
    if series not in TESTED_SERIES:
        raise UnsupportedVerl(
            f"agent_gym_verl is tested with verl {' and '.join(TESTED_VERL)} and patches verl's internals "
            f"(agent_gym_verl/compat.py, patches.py), but verl {version} is installed: "
            "pip install 'agent-r1-gym-verl[verl09]' (or [verl07])"
        )
    return series


VERL_VERSION: str = _dist_version("verl")
#: ``(major, minor)`` of the installed verl, e.g. ``(0, 7)`` or ``(0, 9)``.
VERL_SERIES: tuple[int, int] = check_verl_version(VERL_VERSION)

# -- verl beside trl 1.x -----------------------------------------------------------------------------
# verl's ``apply_monkey_patch`` imports trl's ``AutoModelForCausalLMWithValueHead`` whenever ``trl`` is
# importable; trl 1.x has no such class. ``agent_gym_verl.patches`` (rows 2-3) puts this narrower check
# in place of verl's. It is defined before this module's verl imports: when this module is the first to
# import verl, verl's ``VERL_USE_EXTERNAL_MODULES`` hook installs that patch from inside ``import verl``,
# while this module is half-imported, and finds the check here already.


def trl_has_value_head_model() -> bool:
    """Whether the installed trl (if any) provides ``AutoModelForCausalLMWithValueHead``, where verl looks."""
    if importlib.util.find_spec("trl") is None:
        return False
    for name in ("trl", "trl.experimental.ppo"):
        with warnings.catch_warnings():  # trl warns on every import from trl.experimental
            warnings.filterwarnings("ignore", message=".*trl.experimental")
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError:
                continue
        if hasattr(module, "AutoModelForCausalLMWithValueHead"):
            return True
    return False


from verl import DataProto  # noqa: E402, F401  (re-exported; after the trl check, see above)
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402, F401  (re-exported; after the trl check)
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    DictConfigWrap,
    register,
)
from verl.trainer.ppo import core_algos  # noqa: E402, F401  (re-exported; after the trl check)
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: E402, F401  (re-exported; after the trl check)

__all__ = [
    "VERL_VERSION",
    "VERL_SERIES",
    "AgentLoopBase",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "AdvantageEstimator",
    "DataProto",
    "DictConfigWrap",
    "core_algos",
    "register",
    "token_output",
    "make_metrics",
    "agent_loop_init_kwargs",
    "make_agent_loop_worker",
    "task_runner_module",
    "ray_trainer_module",
    "estimator_names",
    "registered_estimator_fn",
    "trl_has_value_head_model",
]

#: True for the 0.7 layout (``AsyncLLMServerManager``, ``main_ppo.TaskRunner``).
LEGACY_LAYOUT: bool = VERL_SERIES < (0, 9)


def token_output(output: Any) -> tuple[list[int], list[float] | None]:
    """``(token_ids, log_probs)`` from what a server manager's ``generate`` returned.

    Both versions return a pydantic ``TokenOutput``; a dict or a ``(ids, logprobs)`` pair is accepted
    too, for custom server managers.
    """
    if isinstance(output, dict):
        ids, lps = output.get("token_ids"), output.get("log_probs")
    elif isinstance(output, (tuple, list)) and len(output) == 2 and not isinstance(output[0], int):
        ids, lps = output
    else:
        ids, lps = getattr(output, "token_ids"), getattr(output, "log_probs", None)
    if ids is None:
        raise TypeError(f"the server manager's generate returned no token_ids ({type(output).__name__}); return a TokenOutput")
    ids = [int(t) for t in ids]
    if lps is not None:
        lps = [float(x) for x in lps]
        if not lps and ids:
            lps = None  # logprobs were not requested
    return ids, lps


def make_metrics(**values: float) -> AgentLoopMetrics:
    """An ``AgentLoopMetrics`` with the fields this verl version has (others are dropped)."""
    fields = AgentLoopMetrics.model_fields
    return AgentLoopMetrics(**{k: v for k, v in values.items() if k in fields})


def agent_loop_init_kwargs(config: Any, server_manager: Any, tokenizer: Any, processor: Any = None) -> dict[str, Any]:
    """Constructor arguments of an ``AgentLoopBase`` subclass, as this verl's worker passes them."""
    from verl.utils.dataset.rl_dataset import get_dataset_class

    kwargs: dict[str, Any] = {
        "trainer_config": DictConfigWrap(config=config),
        "server_manager": server_manager,
        "tokenizer": tokenizer,
        "processor": processor,
        "dataset_cls": get_dataset_class(config.data),
    }
    if LEGACY_LAYOUT:
        kwargs["dataset_config"] = config.data
    else:
        from verl.experimental.agent_loop.agent_loop import ToolListWrap

        kwargs["data_config"] = DictConfigWrap(config.data)
        kwargs["hf_model_type"] = None
        kwargs["tools"] = ToolListWrap([])
    return kwargs


def make_agent_loop_worker(config: Any, server_manager: Any) -> Any:
    """verl's own agent-loop worker (not a Ray actor), generating through ``server_manager``.

    The worker is verl's class unchanged: it reads the agent-loop config file, instantiates the agent
    loop named in each row, pads and stacks the outputs into a ``DataProto``. Only the server it asks
    for tokens is ours (tests use one backed by transformers on CPU instead of vLLM).
    """
    from verl.experimental.agent_loop import agent_loop as al

    if LEGACY_LAYOUT:

        class _Worker(al.AgentLoopWorkerBase):
            def __init__(self) -> None:
                # verl keeps a preset server_manager ("for recipe to change").
                self.server_manager = server_manager
                super().__init__(config, server_handles=[], reward_router_address=None)

        return _Worker()
    return al.AgentLoopWorker(config, llm_client=server_manager, teacher_client=None, reward_loop_worker_handles=None)


def task_runner_module() -> Any:
    """The module whose ``TaskRunner`` builds the legacy ``RayPPOTrainer`` (looked up by name)."""
    return importlib.import_module("verl.trainer.main_ppo" if LEGACY_LAYOUT else "verl.trainer.main_ppo_v0")


def ray_trainer_module() -> Any:
    """``verl.trainer.ppo.ray_trainer`` (holds ``RayPPOTrainer`` and ``compute_advantage``)."""
    return importlib.import_module("verl.trainer.ppo.ray_trainer")


def estimator_names() -> list[str]:
    """The values of this verl's ``AdvantageEstimator`` enum, enumerated at run time."""
    return [e.value for e in AdvantageEstimator]


def registered_estimator_fn(name: str) -> Any:
    """verl's advantage function registered under ``name``."""
    return core_algos.get_adv_estimator_fn(name)
