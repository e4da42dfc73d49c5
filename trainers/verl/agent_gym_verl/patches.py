"""Every change agent_gym_verl makes to verl's own objects, in one module, installed by :func:`install`.

The rest of the adapter reads verl through :mod:`agent_gym_verl.compat` and changes it only here. Each
patch belongs to a *part*, named after the process and moment it must be installed in:

- ``worker``: every verl process, Ray workers included, from inside ``import verl``:
  :mod:`agent_gym_verl.fast_logprobs`, the module the run scripts name in ``VERL_USE_EXTERNAL_MODULES``,
  installs it when imported, which verl does at the end of its ``__init__``, before any of verl's model
  code is imported (rows 2-3 must precede that import). This part imports only verl's
  ``torch_functional`` and ``import_utils`` and, after row 1, :mod:`agent_gym_verl.compat`, which is safe
  from inside ``import verl`` (``verl.DataProto`` is bound before verl runs the hook);
- ``driver``: the process of ``python -m agent_gym_verl.main_ppo``, before verl's ``main`` runs;
- ``runner``: verl's ``TaskRunner`` actor, before the runner builds the trainer
  (:class:`AgentGymTaskRunner` installs it there: a patch made in the driver would not reach the
  actor's process);
- ``fit``: while the trainer's ``fit`` runs (:func:`fit_scope`, entered by row 10); undone when it returns.

``install("worker")``, ``install("driver")``, ``install("runner")`` or ``install()`` (all three) returns
what it applied, one :class:`Applied` per row. Every part is idempotent: verl's own object is kept once,
where the second table says, and a repeated install replaces (or wraps) that one again, so verl's own is
never lost and never replaced by ours. To undo a row, assign the kept object back to the target (rows
7-11 go with row 6; row 12 restores itself).

What is patched (targets in verl; ``main_ppo[_v0]``: ``main_ppo`` in verl 0.7, ``main_ppo_v0`` in 0.9;
replacements in ``agent_gym_verl``):

==  ========================================================  ===================================================================  ======
#   target                                                    replacement                                                          part
==  ========================================================  ===================================================================  ======
1   verl.utils.torch_functional.logprobs_from_logits_v2       logprobs.chunked_logprobs_from_logits                                worker
2   verl.utils.import_utils.is_trl_available                  compat.trl_has_value_head_model                                      worker
3   verl.models.transformers.monkey_patch.is_trl_available    compat.trl_has_value_head_model                                      worker
4   verl.trainer.main_ppo[_v0].TaskRunner                     patches.AgentGymTaskRunner                                           driver
5   verl.trainer.main_ppo.get_ppo_ray_runtime_env             patches.forward_env_to_ray_workers.<locals>.get_ppo_ray_runtime_env  driver
6   verl.trainer.main_ppo[_v0].RayPPOTrainer                  patches.AgentGymRayPPOTrainer                                        runner
7   verl.trainer.main_ppo[_v0].RayPPOTrainer.__init__         patches.AgentGymRayPPOTrainer.__init__                               runner
8   verl.trainer.main_ppo[_v0].RayPPOTrainer._balance_batch   patches.AgentGymRayPPOTrainer._balance_batch                         runner
9   verl.trainer.main_ppo[_v0].RayPPOTrainer._validate        patches.AgentGymRayPPOTrainer._validate                              runner
10  verl.trainer.main_ppo[_v0].RayPPOTrainer.fit              patches.AgentGymRayPPOTrainer.fit                                    runner
11  verl.trainer.main_ppo[_v0].RayPPOTrainer._get_gen_batch   patches.AgentGymRayPPOTrainer._get_gen_batch                         runner
12  verl.trainer.ppo.ray_trainer.compute_advantage            trainer.step_aware_compute_advantage.<locals>.compute_advantage      fit
==  ========================================================  ===================================================================  ======

Why, for which verl, and where verl's own object stays (to undo: assign it back to the target):

==  ============  =======================================================================  =================================================
#   verl          verl's own, kept at                                                      why
==  ============  =======================================================================  =================================================
1   0.7.0, 0.9.1  verl.utils.torch_functional._agent_gym_original_logprobs_from_logits_v2  Without flash-attn (or torch_npu) verl computes
                                                                                           label log-probs with this function, a Python loop
                                                                                           over rows; verl 0.9's engine flattens a
                                                                                           micro-batch to one row per token (~23,000
                                                                                           iterations), so the actor update is bound by
                                                                                           kernel launches. Ours: the same arithmetic over
                                                                                           chunks of 1,024 rows (SmolLM2-135M on an H200:
                                                                                           1.7 s instead of 15.6 s per update). verl's
                                                                                           dispatcher ``logprobs_from_logits`` looks the
                                                                                           name up at call time; with flash-attn it never
                                                                                           calls it.
2   0.7.0, 0.9.1  verl.utils.import_utils.verl_is_trl_available                            verl's ``apply_monkey_patch``, which every FSDP
                                                                                           actor runs on its model, imports trl's
                                                                                           ``AutoModelForCausalLMWithValueHead`` whenever
                                                                                           trl is importable; trl 1.x (the TRL adapter's)
                                                                                           has no such class, so every actor failed with an
                                                                                           ImportError (verl 0.9.1 + trl 1.16.0, H200). The
                                                                                           check is narrowed to "trl has the class".
                                                                                           ``monkey_patch`` and ``verl.utils.model`` import
                                                                                           the name when they are imported, after the hook.
3   0.7.0, 0.9.1  verl.utils.import_utils.verl_is_trl_available                            Row 2 for a ``monkey_patch`` imported before the
                                                                                           guard ran (its copy of the name is verl's); only
                                                                                           applied when that module is loaded already.
4   0.7.0, 0.9.1  verl.trainer.main_ppo[_v0]._agent_gym_original_TaskRunner                verl's ``main`` starts the runner class this
                                                                                           global names. Ours runs verl's own ``TaskRunner``
                                                                                           in the actor after installing part ``runner``;
                                                                                           not a subclass: Ray pickles a class defined by
                                                                                           value with private copies of its globals, which
                                                                                           no patch reaches. verl 0.9's is a Ray actor class
                                                                                           (ours is wrapped by ``ray.remote(num_cpus=1)``);
                                                                                           0.7's ``run_ppo`` wraps it itself. verl 0.9 needs
                                                                                           ``trainer.use_v1=False`` (the v1 trainer has no
                                                                                           such seam).
5   0.7.0, 0.9.1  verl.trainer.main_ppo._agent_gym_original_get_ppo_ray_runtime_env        verl's runtime_env for the Ray job leaves out the
                                                                                           driver's environment, which workers of a cluster
                                                                                           started with ``ray start`` do not inherit: the
                                                                                           hook never ran there (verl's row loop, a 106 s
                                                                                           actor update) and the file logger ignored
                                                                                           ``VERL_FILE_LOGGER_PATH``. The wrapper adds the
                                                                                           driver's :data:`FORWARDED_ENV_VARS` (paths made
                                                                                           absolute); verl calls it right before
                                                                                           ``ray.init``.
6   0.7.0, 0.9.1  verl.trainer.main_ppo[_v0]._agent_gym_original_RayPPOTrainer             ``TaskRunner.run`` builds the trainer this global
                                                                                           names; ours subclasses verl's ``RayPPOTrainer``
                                                                                           (the legacy one in 0.9) with rows 7-11.
7   0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.RayPPOTrainer.__init__                      After verl's: refuses what step mode cannot
                                                                                           honour (estimator, batch sizes,
                                                                                           ``agent_gym.samples``, ``agent_gym.tree``) at
                                                                                           start-up, forces
                                                                                           ``trainer.balance_batch=True`` (row 8 is where
                                                                                           the hook lives; the user's value still decides
                                                                                           the reordering) and sets
                                                                                           ``agent_gym.step_trainer=True``, which the
                                                                                           step-mode agent loop requires.
8   0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.RayPPOTrainer._balance_batch                The first thing ``fit`` does with the rollout
                                                                                           batch; it mutates the batch in place. Logs the
                                                                                           ``agent_gym/*`` env metrics, expands step-mode
                                                                                           rows into step samples (padded to whole PPO
                                                                                           mini-batches), then balances as verl does.
9   0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.RayPPOTrainer._validate                     Adds ``val-
                                                                                           aux/<data_source>/tool_call_validity`` and
                                                                                           ``.../episodes`` to verl's metrics; while it
                                                                                           runs, row 11 marks its batches.
10  0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.RayPPOTrainer.fit                           Runs verl's ``fit`` inside part ``fit`` (row 12).
11  0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.RayPPOTrainer._get_gen_batch                Both versions' ``_validate`` build each
                                                                                           generation batch with it, and an agent loop gets
                                                                                           no other sign of validation (only the batch's
                                                                                           columns reach ``run``). In tree mode
                                                                                           (``agent_gym.tree``) the batches built inside
                                                                                           ``_validate`` get the column
                                                                                           ``agent_gym_validate``, and the step-mode loop
                                                                                           plays one episode per validation row instead of
                                                                                           a tree. verl's result otherwise unchanged.
12  0.7.0, 0.9.1  verl.trainer.ppo.ray_trainer.compute_advantage.__agent_gym_base__        ``fit`` looks ``compute_advantage`` up as a
                                                                                           module global; the wrapper sends expanded step
                                                                                           batches to
                                                                                           ``step_advantage.compute_step_advantage`` (which
                                                                                           calls verl's on the trajectory view), every other
                                                                                           batch to verl's unchanged. Restored (the kept
                                                                                           object put back) when ``fit`` returns.
==  ============  =======================================================================  =================================================

Not patches, though they change what verl does: ``compat.register`` in :mod:`agent_gym_verl.agent_loop`
adds the two agent loops to verl's registry (verl's extension point), and
``compat.make_agent_loop_worker`` subclasses verl's agent-loop worker for an object of ours that verl
never sees. ``verl.utils.model`` also imports ``is_trl_available`` by name; it is not patched (it
matters only for trl's value-head models, which a trl 1.x cannot make) and binds row 2's when imported
after the hook, as it is in the workers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = [
    "FORWARDED_ENV_VARS",
    "PARTS",
    "PATCHES",
    "Applied",
    "Patch",
    "AgentGymTaskRunner",
    "agent_gym_trainer_class",
    "fit_scope",
    "forward_env_to_ray_workers",
    "guard_trl_value_head_patch",
    "install",
    "plain_class",
    "resolve",
    "verl_task_runner",
]

#: The parts :func:`install` takes (``fit`` is entered with :func:`fit_scope` instead).
PARTS = ("worker", "driver", "runner")

#: How the tables spell verl's legacy ``TaskRunner`` module (``main_ppo`` in 0.7, ``main_ppo_v0`` in 0.9).
RUNNER_MODULE = "verl.trainer.main_ppo[_v0]"


@dataclass(frozen=True)
class Patch:
    """One row of the module's tables."""

    number: int
    target: str  # verl's dotted name
    replacement: str  # ours, relative to agent_gym_verl
    part: str
    kept_at: str  # where verl's own object stays


@dataclass(frozen=True)
class Applied:
    """A row as :func:`install` (or :func:`fit_scope`) applied it: the object now at the target, and verl's."""

    patch: Patch
    replacement: Any
    original: Any


_R = RUNNER_MODULE
_TRAINER = "verl.trainer.ppo.ray_trainer"
#: The rows of the tables above, in the order :func:`install` applies them.
PATCHES: tuple[Patch, ...] = (
    Patch(1, "verl.utils.torch_functional.logprobs_from_logits_v2", "logprobs.chunked_logprobs_from_logits", "worker",
          "verl.utils.torch_functional._agent_gym_original_logprobs_from_logits_v2"),
    Patch(2, "verl.utils.import_utils.is_trl_available", "compat.trl_has_value_head_model", "worker",
          "verl.utils.import_utils.verl_is_trl_available"),
    Patch(3, "verl.models.transformers.monkey_patch.is_trl_available", "compat.trl_has_value_head_model", "worker",
          "verl.utils.import_utils.verl_is_trl_available"),
    Patch(4, f"{_R}.TaskRunner", "patches.AgentGymTaskRunner", "driver", f"{_R}._agent_gym_original_TaskRunner"),
    Patch(5, "verl.trainer.main_ppo.get_ppo_ray_runtime_env", "patches.forward_env_to_ray_workers.<locals>.get_ppo_ray_runtime_env",
          "driver", "verl.trainer.main_ppo._agent_gym_original_get_ppo_ray_runtime_env"),
    Patch(6, f"{_R}.RayPPOTrainer", "patches.AgentGymRayPPOTrainer", "runner", f"{_R}._agent_gym_original_RayPPOTrainer"),
    *(Patch(n, f"{_R}.RayPPOTrainer.{name}", f"patches.AgentGymRayPPOTrainer.{name}", "runner", f"{_TRAINER}.RayPPOTrainer.{name}")
      for n, name in ((7, "__init__"), (8, "_balance_batch"), (9, "_validate"), (10, "fit"), (11, "_get_gen_batch"))),
    Patch(12, f"{_TRAINER}.compute_advantage", "trainer.step_aware_compute_advantage.<locals>.compute_advantage", "fit",
          f"{_TRAINER}.compute_advantage.__agent_gym_base__"),
)
_ROW = {p.number: p for p in PATCHES}


def resolve(dotted: str) -> Any:
    """The object a dotted name of the tables names now (importing the modules it names)."""
    if dotted.startswith(RUNNER_MODULE):
        from agent_gym_verl import compat

        dotted = compat.task_runner_module().__name__ + dotted[len(RUNNER_MODULE):]
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        if not hasattr(obj, part):
            importlib.import_module(".".join(parts[:i]))
        obj = getattr(obj, part)
    return obj


def _replace(patch: Patch, owner: Any, attribute: str, replacement: Any) -> Applied:
    """Put ``replacement`` at ``owner.attribute``, keeping verl's object the first time only (idempotent)."""
    kept = patch.kept_at.rsplit(".", 1)[1]
    if not hasattr(owner, kept):
        setattr(owner, kept, getattr(owner, attribute))
    setattr(owner, attribute, replacement)
    return Applied(patch, replacement, getattr(owner, kept))


# -- part "worker" -------------------------------------------------------------------------------------


def guard_trl_value_head_patch() -> list[Applied]:
    """Rows 2-3: make verl patch trl's value-head class only where trl has one (idempotent)."""
    from verl.utils import import_utils

    # While compat's own `import verl` runs the hook, compat is half-imported: the probe is defined
    # above its verl imports for this.
    from agent_gym_verl import compat

    probe = compat.trl_has_value_head_model
    applied = [_replace(_ROW[2], import_utils, "is_trl_available", probe)]
    loaded = sys.modules.get("verl.models.transformers.monkey_patch")
    if loaded is not None:
        setattr(loaded, "is_trl_available", probe)  # a module object: mypy knows no such attribute
        applied.append(Applied(_ROW[3], probe, import_utils.verl_is_trl_available))
    return applied


def _install_worker() -> list[Applied]:
    from verl.utils import torch_functional

    from agent_gym_verl.logprobs import chunked_logprobs_from_logits

    # Row 1 first: it needs no verl beyond torch_functional; rows 2-3 import compat (verl's agent loop).
    applied = [_replace(_ROW[1], torch_functional, "logprobs_from_logits_v2", chunked_logprobs_from_logits)]
    return applied + guard_trl_value_head_patch()


# -- part "driver" -------------------------------------------------------------------------------------

#: variables the driver hands to every worker of the job when it has them set (and non-empty)
FORWARDED_ENV_VARS = ("VERL_USE_EXTERNAL_MODULES", "VERL_FILE_LOGGER_PATH")
_FORWARDED_PATHS = frozenset({"VERL_FILE_LOGGER_PATH"})


def forward_env_to_ray_workers() -> list[Applied]:
    """Row 5: wrap ``verl.trainer.main_ppo.get_ppo_ray_runtime_env`` so the job's ``env_vars`` carry the
    driver's :data:`FORWARDED_ENV_VARS` (idempotent; read when verl calls it, right before ``ray.init``)."""
    module = importlib.import_module("verl.trainer.main_ppo")
    original = getattr(module, "_agent_gym_original_get_ppo_ray_runtime_env", module.get_ppo_ray_runtime_env)

    def get_ppo_ray_runtime_env(*args: Any, **kwargs: Any) -> dict[str, Any]:
        runtime_env = original(*args, **kwargs)
        for name in FORWARDED_ENV_VARS:
            value = os.environ.get(name)
            if value:
                runtime_env.setdefault("env_vars", {})[name] = (
                    os.path.abspath(os.path.expanduser(value)) if name in _FORWARDED_PATHS else value)
        return runtime_env

    return [_replace(_ROW[5], module, "get_ppo_ray_runtime_env", get_ppo_ray_runtime_env)]


def plain_class(cls: Any) -> type:
    """verl 0.9's ``TaskRunner`` is a Ray actor class; its Python class is ``__ray_actor_class__``."""
    return getattr(cls, "__ray_actor_class__", cls)


def verl_task_runner() -> type:
    """verl's own legacy ``TaskRunner`` class (the Python class, also after row 4)."""
    from agent_gym_verl import compat

    module = compat.task_runner_module()
    return plain_class(getattr(module, "_agent_gym_original_TaskRunner", module.TaskRunner))


class AgentGymTaskRunner:
    """Runs verl's legacy ``TaskRunner`` with the agent-gym trainer, inside the Ray actor.

    Deliberately *not* a subclass of verl's ``TaskRunner``: Ray ships actor classes with cloudpickle,
    and a class (or base class) that is pickled by value gets private copies of its methods' globals,
    which no patch of verl's module reaches. Here nothing of verl is pickled: ``run`` executes in the
    actor process, where verl's modules are imported normally, installs the ``runner`` part
    (``RayPPOTrainer`` in the module of verl's ``TaskRunner``) and then runs verl's own ``TaskRunner``
    in-process. It lives here, beside the patches it installs, so that the patches never import the
    entry point (:mod:`agent_gym_verl.main_ppo`) that installs them.
    """

    def _agent_gym_patch(self) -> tuple[type, Any]:
        """Install the agent-gym trainer in this process; returns verl's runner class and the trainer
        class its ``run`` will build."""
        runner_cls: Any = verl_task_runner()  # verl's class: its run is verl's, unknown to mypy
        install("runner")
        return runner_cls, runner_cls.run.__globals__["RayPPOTrainer"]

    def run(self, config: Any) -> Any:
        runner_cls, trainer_cls = self._agent_gym_patch()
        if not trainer_cls.__name__.startswith("AgentGym"):
            raise RuntimeError(f"agent_gym_verl: verl's TaskRunner would build {trainer_cls!r}, not the agent-gym trainer")
        return runner_cls().run(config)


def _install_driver() -> list[Applied]:
    from agent_gym_verl import compat

    module = compat.task_runner_module()
    if compat.LEGACY_LAYOUT:
        runner: Any = AgentGymTaskRunner  # run_ppo wraps it with ray.remote(num_cpus=1)
    else:
        import ray

        runner = ray.remote(num_cpus=1)(AgentGymTaskRunner)
    return [_replace(_ROW[4], module, "TaskRunner", runner), *forward_env_to_ray_workers()]


# -- part "runner" -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def agent_gym_trainer_class(base: type) -> type:
    """A subclass of verl's ``RayPPOTrainer`` ``base`` with rows 7-11 (see :mod:`agent_gym_verl.trainer`)."""
    from omegaconf import open_dict

    from agent_gym_verl import step_advantage as sa
    from agent_gym_verl import trainer as ours

    class AgentGymRayPPOTrainer(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            cfg = self.config
            default_loop = cfg.actor_rollout_ref.rollout.agent.get("default_agent_loop", None)
            self._agent_gym_step_mode = ours.dataset_uses_step_mode(getattr(self, "train_dataset", None), default_loop)
            if self._agent_gym_step_mode:
                sa.check_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)
            ours.check_engine_batch_sizes(cfg, step_mode=self._agent_gym_step_mode)
            ours.step_sample_kind(cfg)  # a bad agent_gym.samples fails here, not in the agent-loop workers
            # a bad agent_gym.tree too; tree mode runs the GRPO estimators only
            self._agent_gym_tree = ours.tree_settings(cfg) is not None
            if self._agent_gym_tree and self._agent_gym_step_mode:
                sa.check_tree_estimator(cfg.algorithm.adv_estimator, cfg.algorithm)
            self._agent_gym_validating = False

            self._agent_gym_balance = bool(cfg.trainer.get("balance_batch", True))
            with open_dict(cfg):
                cfg.trainer.balance_batch = True  # our hook lives in _balance_batch
                # Read by the step-mode agent loop (the workers get this config in init_workers):
                # only a trainer that expands step rows may run it.
                flags = dict(cfg.get(ours.STEP_TRAINER_FLAG, None) or {})  # keeps agent_gym.samples
                cfg[ours.STEP_TRAINER_FLAG] = {**flags, "step_trainer": True}
            ours.logger.warning(
                "agent_gym_verl: trainer extension active (step-mode rows in the train data: %s)", self._agent_gym_step_mode
            )

        def _balance_batch(self, batch: Any, metrics: dict, logging_prefix: str = "global_seqlen", keep_minibatch: bool = False):
            metrics.update(sa.trajectory_metrics(batch))
            if sa.is_step_batch(batch):
                pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
                multiple = self._agent_gym_pad_multiple()
                expanded, stats = sa.expand_step_batch(batch, pad_token_id=pad_id, pad_to_multiple=multiple)
                batch.batch = expanded.batch
                batch.non_tensor_batch = expanded.non_tensor_batch
                batch.meta_info.update(expanded.meta_info)
                metrics.update(stats)
            if not self._agent_gym_balance:
                return None
            return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)

        def _validate(self, *args: Any, **kwargs: Any) -> Any:
            self._agent_gym_validating = True  # row 11 marks the batches this builds
            try:
                metrics = super()._validate(*args, **kwargs)
            finally:
                self._agent_gym_validating = False
            merged = kwargs.get("merged", args[0] if args else False)  # verl 0.9: raw results, metrics later
            if isinstance(metrics, dict) and not merged:
                metrics.update(ours.validation_metrics(metrics, self._agent_gym_val_episodes()))
            return metrics

        def _get_gen_batch(self, batch: Any) -> Any:
            gen_batch = super()._get_gen_batch(batch)
            if getattr(self, "_agent_gym_tree", False) and getattr(self, "_agent_gym_validating", False):
                import numpy as np

                from agent_gym_verl.tree import VALIDATE_KEY

                # Tree mode plays one tree per training row; a validation row is one episode.
                gen_batch.non_tensor_batch[VALIDATE_KEY] = np.ones(len(gen_batch), dtype=bool)
            return gen_batch

        def _agent_gym_val_episodes(self) -> dict[str, int]:
            """Validation episodes per data source: the val dataset's rows times ``val_kwargs.n``."""
            frame = getattr(getattr(self, "val_dataset", None), "dataframe", None)
            if frame is None:
                return {}
            try:
                sources = list(frame["data_source"])
            except (TypeError, KeyError, ValueError):
                return {}
            n = int(self.config.actor_rollout_ref.rollout.val_kwargs.get("n", 1) or 1)
            return {str(source): count * n for source, count in Counter(sources).items()}

        def _agent_gym_pad_multiple(self) -> int:
            """Row count the expanded batch is padded to a multiple of (see :func:`trainer.step_pad_multiple`)."""
            return ours.step_pad_multiple(
                self.config,
                int(self._get_dp_size(self.actor_rollout_wg, "actor")),
                with_critic=bool(getattr(self, "use_critic", False)),
            )

        def fit(self) -> Any:
            with fit_scope():
                return super().fit()

    name = f"AgentGym{base.__name__}"
    AgentGymRayPPOTrainer.__name__ = AgentGymRayPPOTrainer.__qualname__ = name
    for attribute, value in vars(AgentGymRayPPOTrainer).items():
        if callable(value) and hasattr(value, "__qualname__"):  # tracebacks name the class as it is named
            value.__qualname__ = f"{name}.{attribute}"
    return AgentGymRayPPOTrainer


def _install_runner() -> list[Applied]:
    from agent_gym_verl import compat

    base = compat.ray_trainer_module().RayPPOTrainer
    trainer_cls = agent_gym_trainer_class(base)
    applied = [_replace(_ROW[6], compat.task_runner_module(), "RayPPOTrainer", trainer_cls)]
    for number in (7, 8, 9, 10, 11):
        attribute = _ROW[number].target.rsplit(".", 1)[1]
        applied.append(Applied(_ROW[number], vars(trainer_cls)[attribute], getattr(base, attribute)))
    return applied


# -- part "fit" ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def fit_scope() -> Iterator[list[Applied]]:
    """Row 12 while the block runs: verl's module-level ``compute_advantage`` routes expanded step batches
    to step mode; verl's function is put back when the block exits."""
    from agent_gym_verl import compat
    from agent_gym_verl.trainer import step_aware_compute_advantage

    module = compat.ray_trainer_module()
    original = module.compute_advantage
    module.compute_advantage = step_aware_compute_advantage(original)
    try:
        yield [Applied(_ROW[12], module.compute_advantage, original)]
    finally:
        module.compute_advantage = original


_INSTALLERS = {"worker": _install_worker, "driver": _install_driver, "runner": _install_runner}


def install(*parts: str) -> list[Applied]:
    """Install the named parts (all of :data:`PARTS` when none is named), in table order; idempotent.

    Returns one :class:`Applied` per row applied (row 3 only where verl's ``monkey_patch`` is imported).
    """
    for part in parts:
        if part not in _INSTALLERS:
            hint = "; part 'fit' is scoped: `with patches.fit_scope():`" if part == "fit" else ""
            raise ValueError(f"agent_gym_verl.patches.install: unknown part {part!r}, pick from {', '.join(PARTS)}{hint}")
    applied: list[Applied] = []
    for part in PARTS:
        if part in parts or not parts:
            applied.extend(_INSTALLERS[part]())
    return applied
