"""verl's PPO entry point with the agent-gym trainer extension.

    python -m agent_gym_verl.main_ppo <the usual verl hydra options>

It is verl's own ``verl.trainer.main_ppo.main`` (same config, same validation, same Ray set-up); the
only change is the ``TaskRunner`` it starts (:class:`agent_gym_verl.patches.AgentGymTaskRunner`, an
importable class, so that Ray ships it by reference): inside its Ray actor it runs verl's legacy ``TaskRunner`` with :func:`agent_gym_verl.patches.agent_gym_trainer_class` in place
of ``RayPPOTrainer`` (parts ``driver`` and ``runner`` of :mod:`agent_gym_verl.patches`). That trainer
marks the config (``agent_gym.step_trainer=True``) before it starts the agent-loop workers, so the
step-mode agent loop refuses to run under any trainer that would not expand its rows. Concat mode needs
none of this (stock ``python -m verl.trainer.main_ppo`` runs it); here it also gets the ``agent_gym/*`` env
metrics in the training log.

verl 0.9.x: pass ``trainer.use_v1=False`` (the v1 trainer needs TransferQueue and has no such seam).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from agent_gym_verl import compat, patches
from agent_gym_verl.trainer import STEP_TRAINER_FLAG, check_engine_batch_sizes, step_sample_kind, tree_settings

__all__ = ["main", "dry_run", "check_file_logger_folder", "STEP_TRAINER_FLAG"]


def _files_use_step_mode(files: Any) -> bool:
    """Whether the train files select the step-mode agent loop (assumed when they are not there yet)."""
    import os

    paths = [files] if isinstance(files, str) else list(files)
    if not paths or not all(os.path.exists(os.path.expanduser(str(p))) for p in paths):
        return True
    import pyarrow.parquet as pq

    for p in paths:
        table = pq.read_table(os.path.expanduser(str(p)), columns=None)
        if "agent_name" in table.column_names and "agent_gym_step" in set(table.column("agent_name").to_pylist()):
            return True
    return False


def _token_logprobs_source(cfg: Any) -> str:
    """Where verl's token log-probs come from in this process (after ``import verl`` ran the modules of
    ``VERL_USE_EXTERNAL_MODULES``, as it does in every worker), without patching anything itself.
    ``model.use_fused_kernels`` takes precedence: verl's fused forward never calls the row function."""
    from verl.utils import torch_functional

    model = cfg.actor_rollout_ref.model
    if model.get("use_fused_kernels", False):
        backend = (model.get("fused_kernel_options") or {}).get("impl_backend", "torch")
        return f"verl's fused kernels (use_fused_kernels, {backend} backend)"
    if "agent_gym_verl.fast_logprobs" in sys.modules:  # the hook ran
        from agent_gym_verl.logprobs import active_implementation

        return active_implementation()
    return torch_functional.logprobs_from_logits_v2.__module__


def dry_run(overrides: list[str]) -> Any:
    """Compose and resolve verl's config with ``overrides`` and check what step mode needs, without
    starting Ray or loading a model (``AGENT_GYM_VERL_DRY_RUN=1``: check a run script on any machine)."""
    import os

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer

    from agent_gym_verl.step_advantage import check_estimator, check_tree_estimator

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    step_mode = _files_use_step_mode(cfg.data.train_files)
    if step_mode:
        check_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)
    try:
        check_engine_batch_sizes(cfg, step_mode=step_mode)
    except ValueError as exc:
        raise SystemExit(f"agent_gym_verl.main_ppo: {exc}") from None
    if not compat.LEGACY_LAYOUT and cfg.trainer.get("use_v1", False):
        raise SystemExit("agent_gym_verl.main_ppo: set trainer.use_v1=False (the legacy trainer is the one extended)")
    try:
        samples = step_sample_kind(cfg)
        tree = tree_settings(cfg)
    except ValueError as exc:
        raise SystemExit(f"agent_gym_verl.main_ppo: {exc}") from None
    if tree is not None and step_mode:
        check_tree_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)
    print(
        f"agent_gym_verl dry run (verl {compat.VERL_VERSION}): config composed; "
        f"adv_estimator={cfg.algorithm.adv_estimator}, step-mode samples={samples}, "
        f"tree={'off' if tree is None else tree}, model={cfg.actor_rollout_ref.model.path}, "
        f"agent_loop_config_path={cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path}, "
        f"token log-probs from {_token_logprobs_source(cfg)}"
    )
    return cfg


def _last_override(overrides: list[str], key: str) -> str | None:
    values = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").split("=", 1)[0] == key and "=" in o]
    return values[-1].strip("'\"") if values else None


def check_file_logger_folder(overrides: list[str]) -> None:
    """Refuse a run whose verl file logger would create a folder that hides an installed package.

    Without ``VERL_FILE_LOGGER_PATH``, verl's ``file`` logger writes ``./<project_name>/<experiment>.jsonl``
    in the working directory, which Ray puts first on every worker's ``sys.path``. A project named like a
    package, e.g. ``agent_gym_countdown``, then turns that package into an empty namespace package in
    every worker started after the folder appears: with an editable install, the env's registration fails
    there ("module 'agent_gym_countdown' has no attribute 'register'") and ``gym.make`` cannot find it.

    A module that ``sys.path`` itself holds (a regular install, the standard library) is not hidden: the
    path finder prefers a regular package to a namespace folder anywhere on the path. Only a module that
    only a finder of its own finds (setuptools' editable installs) is, and only that one is refused.

    Raises:
        SystemExit: with what to change, when ``trainer.logger`` has ``file``, the variable is unset and
            ``trainer.project_name`` names such a module.
    """
    import importlib.util
    import os
    from importlib.machinery import PathFinder

    loggers = _last_override(overrides, "trainer.logger") or ""
    project = _last_override(overrides, "trainer.project_name")
    if "file" not in loggers or os.environ.get("VERL_FILE_LOGGER_PATH") or not project or not project.isidentifier():
        return
    try:
        on_path = PathFinder.find_spec(project)
        found = importlib.util.find_spec(project)
    except (ImportError, ValueError):
        return
    if found is not None and (on_path is None or on_path.origin is None):  # no regular module on sys.path
        raise SystemExit(
            f"agent_gym_verl.main_ppo: trainer.project_name={project} is the name of an installed module, and "
            f"verl's file logger would write ./{project}/ (VERL_FILE_LOGGER_PATH is unset): Ray workers, which "
            f"have this directory first on sys.path, would import that folder instead of the package. Name the "
            f"project differently (e.g. {project.replace('_', '-')}) or set VERL_FILE_LOGGER_PATH=run.jsonl.")


def main(argv: list[str] | None = None) -> None:
    import os

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    check_file_logger_folder(sys.argv[1:])
    if os.environ.get("AGENT_GYM_VERL_DRY_RUN"):
        dry_run(sys.argv[1:])
        return
    # verl's main starts AgentGymTaskRunner, and the fast_logprobs hook reaches workers of a `ray start` cluster too
    patches.install("driver")
    importlib.import_module("verl.trainer.main_ppo").main()


if __name__ == "__main__":
    main()
