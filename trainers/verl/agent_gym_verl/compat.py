"""Everything that differs between verl 0.7.x and 0.9.x, in one place.

The rest of the adapter imports verl only through this module. What differs (read from the installed
sources of verl 0.7.0 and 0.9.1):

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
import sys
import warnings
from importlib.metadata import version as _dist_version
from typing import Any

# -- verl beside trl 1.x -----------------------------------------------------------------------------
# verl's ``apply_monkey_patch`` (0.7.0 and 0.9.1 alike), which every FSDP actor runs on its model,
# imports trl's ``AutoModelForCausalLMWithValueHead`` whenever ``trl`` is importable, to patch that
# class's ``state_dict``. trl 1.x has no such class (neither ``trl`` nor ``trl.experimental.ppo``), so
# with the TRL adapter (trl 1.14-1.16) installed beside verl every actor fails to build its model with
# an ImportError (seen with verl 0.9.1 + trl 1.16.0 on an H200). The patch only matters for trl's
# value-head models, which a trl without the class cannot make: the check the monkey-patch module sees
# is narrowed to "trl has the class".


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


def guard_trl_value_head_patch() -> None:
    """Make verl patch trl's value-head class only where trl has one.

    Replaces ``verl.utils.import_utils.is_trl_available`` (which ``verl.models.transformers.monkey_patch``
    and ``verl.utils.model`` import by name; verl's own stays there as ``verl_is_trl_available``) and, if
    ``monkey_patch`` is imported already, its copy.
    Idempotent. Applied in every verl process by :mod:`agent_gym_verl.fast_logprobs`, the module the run
    scripts load through ``VERL_USE_EXTERNAL_MODULES``, which ``import verl`` imports before verl's model
    code (with that variable empty, keep trl 1.x out of verl's environment). Defined before this module's
    own verl imports and touching only ``verl.utils.import_utils``, so it also works from inside
    ``import verl``, which is where that hook runs it.
    """
    from verl.utils import import_utils

    if not hasattr(import_utils, "verl_is_trl_available"):  # verl's own check, kept once
        import_utils.verl_is_trl_available = import_utils.is_trl_available
    import_utils.is_trl_available = trl_has_value_head_model
    loaded = sys.modules.get("verl.models.transformers.monkey_patch")
    if loaded is not None:
        loaded.is_trl_available = trl_has_value_head_model


from verl import DataProto  # noqa: F401  (re-exported)
from verl.experimental.agent_loop.agent_loop import (  # noqa: F401  (re-exported)
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    DictConfigWrap,
    register,
)
from verl.trainer.ppo import core_algos  # noqa: F401  (re-exported)
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: F401  (re-exported)

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
]

VERL_VERSION: str = _dist_version("verl")
_parts = VERL_VERSION.split(".")
#: ``(major, minor)`` of the installed verl, e.g. ``(0, 7)`` or ``(0, 9)``.
VERL_SERIES: tuple[int, int] = (int(_parts[0]), int("".join(c for c in _parts[1] if c.isdigit()) or 0))
#: True for the 0.7/0.8 layout (``AsyncLLMServerManager``, ``main_ppo.TaskRunner``).
LEGACY_LAYOUT: bool = VERL_SERIES < (0, 9)

if VERL_SERIES < (0, 7) or VERL_SERIES >= (0, 10):
    import warnings

    warnings.warn(
        f"agent_gym_verl is tested with verl 0.7.0 and 0.9.1; verl {VERL_VERSION} is installed",
        RuntimeWarning,
        stacklevel=2,
    )


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



# -- the driver's hook variable, on every Ray worker ---------------------------------------------------
# verl's ``run_ppo`` gives the Ray job a runtime_env from ``verl.trainer.constants_ppo.
# get_ppo_ray_runtime_env`` (a module global of ``verl.trainer.main_ppo`` in 0.7.0 and 0.9.1), whose
# env_vars leave out what the launching shell sets: a cluster that ``ray.init`` starts inherits the
# driver's environment anyway. Workers of a cluster started with ``ray start`` do not, so the hook the run
# scripts export (VERL_USE_EXTERNAL_MODULES) never ran there (seen on an H200: verl's per-token log-prob
# loop, a 106 s actor update), and verl's file logger, which runs in the TaskRunner actor, ignored
# VERL_FILE_LOGGER_PATH and wrote ./<project_name>/<experiment_name>.jsonl instead. The wrapper adds the
# driver's value of each forwarded variable; a path is made absolute against the driver's directory.

#: variables the driver hands to every worker of the job when it has them set (and non-empty)
FORWARDED_ENV_VARS = ("VERL_USE_EXTERNAL_MODULES", "VERL_FILE_LOGGER_PATH")
_FORWARDED_PATHS = frozenset({"VERL_FILE_LOGGER_PATH"})


def forward_env_to_ray_workers() -> None:
    """Wrap ``verl.trainer.main_ppo.get_ppo_ray_runtime_env`` so the job's ``env_vars`` carry the driver's
    :data:`FORWARDED_ENV_VARS` (idempotent; read when verl calls it, right before ``ray.init``)."""
    import os

    module = importlib.import_module("verl.trainer.main_ppo")
    original = getattr(module, "_agent_gym_original_get_ppo_ray_runtime_env", module.get_ppo_ray_runtime_env)
    module._agent_gym_original_get_ppo_ray_runtime_env = original

    def get_ppo_ray_runtime_env(*args: Any, **kwargs: Any) -> dict[str, Any]:
        runtime_env = original(*args, **kwargs)
        for name in FORWARDED_ENV_VARS:
            value = os.environ.get(name)
            if value:
                runtime_env.setdefault("env_vars", {})[name] = (
                    os.path.abspath(os.path.expanduser(value)) if name in _FORWARDED_PATHS else value)
        return runtime_env

    module.get_ppo_ray_runtime_env = get_ppo_ray_runtime_env
