"""The small trainer extension step mode needs, without forking verl's trainer.

:func:`agent_gym_verl.patches.agent_gym_trainer_class` (rows 6-12 of the patches' tables, built from
the helpers here, which import nothing of the patches) subclasses verl's legacy ``RayPPOTrainer``
(0.7.x, and 0.9.x with ``trainer.use_v1=False``) and touches two seams that both versions share:

1. ``_balance_batch(batch, metrics)`` is the first thing ``fit`` does with the rollout batch after
   ``batch.union(gen_batch_output)``, and it mutates the batch in place. The override logs the env
   metrics of the trajectory rows (turns, tool calls, reward components: ``agent_gym/*``), expands
   step-mode rows into step samples there (:func:`agent_gym_verl.step_advantage.expand_step_batch`,
   padded with fully masked rows to whole PPO mini-batches, a multiple of the data-parallel size),
   then balances as verl would. ``balance_batch`` is
   forced on so that the hook always runs; ``trainer.balance_batch=False`` still skips the reordering.
   Everything after it (rewards from ``rm_scores``, old/ref log-probs, values, the actor and critic
   updates) runs on the step samples.
2. ``fit`` looks ``compute_advantage`` up as a global of ``verl.trainer.ppo.ray_trainer``; while
   ``fit`` runs, that global is a wrapper that sends expanded step batches to
   :func:`agent_gym_verl.step_advantage.compute_step_advantage` (which itself calls verl's function
   on the trajectory view) and every other batch to verl's function unchanged. It is restored when
   ``fit`` returns.

At construction the trainer checks the settings step mode cannot honour (the advantage estimator,
enumerated from verl's enum at run time; ``agent_gym.samples``; ``agent_gym.tree`` and, in tree mode, the
GRPO settings :func:`agent_gym_verl.step_advantage.check_tree_estimator` requires) so that a bad run fails
at start-up.

Tree mode (``agent_gym.tree``, :mod:`agent_gym_verl.tree`): the batches ``_validate`` builds (through
``_get_gen_batch``, row 11) carry the column ``agent_gym_validate``, so that the step-mode loop plays one
episode per validation row; training rows are trees, expanded and given their advantages as above.

Validation (``_validate``, both verl versions) gets two metrics per data source on top of verl's own:
``val-aux/<data_source>/tool_call_validity`` (the answered tool calls that parsed and ran, as a fraction
of all answered calls: the ratio of the sums, from the ``tool_calls_valid`` and ``tool_calls_answered``
means verl logs) and ``val-aux/<data_source>/episodes`` (how many episodes the means are over, for
standard errors).
"""

from __future__ import annotations

import functools
import logging
import math
import re
from typing import Any, Mapping

from agent_gym_verl import compat
from agent_gym_verl.step_advantage import compute_step_advantage, is_expanded, tool_call_validity

logger = logging.getLogger(__name__)

__all__ = [
    "step_aware_compute_advantage",
    "dataset_uses_step_mode",
    "step_sample_kind",
    "tree_settings",
    "validation_metrics",
    "STEP_AGENT_NAME",
]

STEP_AGENT_NAME = "agent_gym_step"
#: Top-level config key the step-mode agent loop checks (set by this trainer).
STEP_TRAINER_FLAG = "agent_gym"


def step_sample_kind(cfg: Any) -> str:
    """``agent_gym.samples`` of a run's config (``"segment"`` when unset); raises ``ValueError`` for
    anything but the kinds :data:`agent_gym_verl.samples.SAMPLE_KINDS` names."""
    from agent_gym_verl.samples import SAMPLE_KINDS

    kind = str((cfg.get(STEP_TRAINER_FLAG, None) or {}).get("samples", "segment"))
    if kind not in SAMPLE_KINDS:
        raise ValueError(f"agent_gym.samples must be one of {', '.join(SAMPLE_KINDS)}, got {kind!r}")
    return kind


def tree_settings(cfg: Any) -> Any:
    """``agent_gym.tree`` of a run's config as a :class:`agent_gym_verl.tree.TreeConfig` (``None``: tree
    mode off); raises ``ValueError`` for an unknown key or a bad value."""
    from agent_gym_verl.tree import tree_config

    return tree_config(cfg.get(STEP_TRAINER_FLAG, None))


def dataset_uses_step_mode(dataset: Any, default_agent_loop: str | None = None) -> bool:
    """Whether a verl ``RLHFDataset`` has rows for the step-mode agent loop."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None:
        return False
    names = getattr(frame, "column_names", None) or list(getattr(frame, "columns", []))
    if "agent_name" not in names:
        return default_agent_loop == STEP_AGENT_NAME
    return STEP_AGENT_NAME in set(frame["agent_name"])


def step_aware_compute_advantage(base: Any) -> Any:
    """verl's ``compute_advantage`` (``base``), routing expanded step batches to step mode."""

    # verl's name and docstring, but its own module and qualified name (tracebacks show where it lives)
    @functools.wraps(base, assigned=("__name__", "__doc__"))
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        if is_expanded(data):
            return compute_step_advantage(data, *args, base_compute_advantage=base, **kwargs)
        return base(data, *args, **kwargs)

    compute_advantage.__agent_gym_base__ = base  # type: ignore[attr-defined]
    return compute_advantage


_VALID_KEY = re.compile(r"^val-aux/(?P<source>.+)/tool_calls_valid/mean@(?P<n>\d+)$")


def validation_metrics(metrics: Mapping[str, Any], episodes: Mapping[str, int] | None = None) -> dict[str, float]:
    """The metrics validation adds to verl's own ``metrics`` (see the module docstring), per data source:
    ``val-aux/<source>/tool_call_validity`` from verl's ``tool_calls_valid`` and ``tool_calls_answered``
    means (the largest ``@n`` verl logged), where some call was answered, and
    ``val-aux/<source>/episodes`` from ``episodes`` (episodes per data source)."""
    extra: dict[str, float] = {}
    best: dict[str, int] = {}
    for key in metrics:
        match = _VALID_KEY.match(key)
        if match and int(match["n"]) >= best.get(match["source"], 0):
            best[match["source"]] = int(match["n"])
    for source, n in best.items():
        validity = tool_call_validity(
            metrics.get(f"val-aux/{source}/tool_calls_valid/mean@{n}"),
            metrics.get(f"val-aux/{source}/tool_calls_answered/mean@{n}"),
        )
        if validity is not None:
            extra[f"val-aux/{source}/tool_call_validity"] = validity
    for source, count in (episodes or {}).items():
        extra[f"val-aux/{source}/episodes"] = float(count)
    return extra


def _fixed_micro(section: Any, micro_key: str, dynamic_key: str) -> int | None:
    """A config section's micro-batch size per GPU, or None when it batches by tokens (dynamic) or has none."""
    if section is None or bool(section.get(dynamic_key, False)):
        return None
    value = section.get(micro_key, None)
    return int(value) if value else None


def _sp_size(section: Any) -> int:
    """A worker's Ulysses sequence-parallel size: verl 0.9 reads ``fsdp_config.ulysses_sequence_parallel_size``
    (the top-level key is deprecated and copied there only when above 1)."""
    if section is None:
        return 1
    fsdp = section.get("fsdp_config", None) or {}
    return max(int(section.get("ulysses_sequence_parallel_size", 1) or 1), int(fsdp.get("ulysses_sequence_parallel_size", 1) or 1))


def fsdp_dp_size(cfg: Any, role: str = "actor") -> int:
    """The data-parallel size verl 0.9's FSDP engine gives ``role`` (``actor`` or ``ref``): every GPU of the
    run divided by the role's sequence-parallel size."""
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    return max(1, world // _sp_size(cfg.actor_rollout_ref.get(role, None)))


def step_pad_multiple(cfg: Any, dp_size: int, *, with_critic: bool = False) -> int:
    """The row count an expanded step batch is padded to a multiple of: whole global PPO mini-batches
    (``ppo_mini_batch_size * rollout.n`` rows; verl 0.9's engine workers require them) and the
    data-parallel size; the critic's mini-batch too when there is one. Padding stays below one
    mini-batch, so no mini-batch is all filler; :func:`check_micro_batches` makes sure at start-up
    that each GPU's share of a mini-batch splits into every micro-batch size."""
    n = int(cfg.actor_rollout_ref.rollout.n)
    multiple = math.lcm(int(dp_size), int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size) * n)
    if with_critic and "critic" in cfg:
        multiple = math.lcm(multiple, int(cfg.critic.ppo_mini_batch_size) * n)
    return multiple


def check_micro_batches(cfg: Any, *, step_mode: bool) -> None:
    """Refuse, at start-up, batch sizes verl 0.9's FSDP engine would refuse only at its first update or
    log-prob pass, after minutes of start-up and a whole rollout.

    Each GPU's share of a PPO mini-batch (``ppo_mini_batch_size * rollout.n / dp``) must be whole and,
    with fixed micro-batches, split into ``ppo_micro_batch_size_per_gpu`` (both modes: the update asserts
    it). In step mode the batch is a whole number of mini-batches of any count, so the share must also
    split into the log-prob micro-batches of the rollout (old log-probs) and of the reference policy.
    """
    arr = cfg.actor_rollout_ref
    rows = int(arr.actor.ppo_mini_batch_size) * int(arr.rollout.n)
    size = f"ppo_mini_batch_size={arr.actor.ppo_mini_batch_size} x rollout.n={arr.rollout.n} = {rows} rows"
    dp = fsdp_dp_size(cfg, "actor")
    if rows % dp:
        raise ValueError(f"actor_rollout_ref.actor.{size} per mini-batch do not split over {dp} data-parallel GPU(s)")
    checks = [("actor.ppo_micro_batch_size_per_gpu", dp, _fixed_micro(arr.actor, "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz"))]
    if step_mode:
        checks.append(("rollout.log_prob_micro_batch_size_per_gpu", dp,
                       _fixed_micro(arr.rollout, "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz")))
        checks.append(("ref.log_prob_micro_batch_size_per_gpu", fsdp_dp_size(cfg, "ref"),
                       _fixed_micro(arr.get("ref", None), "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz")))
    for key, ranks, micro in checks:
        if micro and (rows % ranks or (rows // ranks) % micro):
            raise ValueError(
                f"actor_rollout_ref.actor.{size} per mini-batch is {rows / ranks:g} per GPU on {ranks} data-parallel "
                f"GPU(s), which actor_rollout_ref.{key}={micro} does not divide; pick sizes so that "
                f"ppo_mini_batch_size * n / GPUs is a multiple of it"
            )


def check_engine_batch_sizes(cfg: Any, *, step_mode: bool) -> None:
    """:func:`check_micro_batches` where it matters: verl 0.9's FSDP engine, which asserts these sizes only
    when it reaches them (verl 0.7 checks the update's split itself when its workers start, and splits
    log-prob passes unevenly). Called by the trainer at construction and by the dry run."""
    if not compat.LEGACY_LAYOUT and cfg.actor_rollout_ref.actor.get("strategy", "fsdp") in ("fsdp", "fsdp2"):
        check_micro_batches(cfg, step_mode=step_mode)
