"""A ``rollout_func`` for TRL's ``GRPOTrainer`` that plays agent-r1-gym episodes, multi-turn included.

    from trl import GRPOConfig, GRPOTrainer
    from agent_gym_trl import EnvRollout, env_dataset, env_reward

    trainer = GRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(...),
                          train_dataset=env_dataset("AgentR1/GSM8KTool-v0", split="train"),
                          rollout_func=EnvRollout())
    trainer.train()

For every prompt TRL hands over (its sampler has already repeated each dataset row ``num_generations``
times), :class:`EnvRollout` plays one episode of the row's env and task through the episode engine
(:func:`agent_gym.rollout.episode.play_episode`), all episodes of the batch at once on one event loop. The
turns of the episodes waiting for tokens are generated together, one call of TRL's own generation backend
per round (``GRPOTrainer._generate_single_turn``: its vLLM server or colocated engine when ``use_vllm``,
else transformers generation with the trainer's current weights), so the policy that samples is the policy
being trained, with the trainer's sampling settings.

Each episode becomes one sample, built from :meth:`agent_gym.trajectory.Trajectory.sequence`:
``prompt_ids`` is the env's first prompt, ``completion_ids`` everything after it (every action and every
env reply in between, the exact ids the policy saw: nothing is re-tokenized), ``env_mask`` 1 on the
policy's ids and 0 on the env's (TRL multiplies its loss mask by it), ``logprobs`` the sampling log-probs
(0.0 on env ids; ``None`` from transformers generation, which reports none). ``env_return`` (the episode's
return) and ``env_info`` (the last step's info) reach the reward functions; :func:`env_reward` returns the
former. The env's counters (turns, tool calls, tool errors, format errors, correctness, truncation) are
logged as TRL metrics under ``env/``.

A sample's completion holds at most ``max_completion_tokens`` ids (default: the trainer's
``max_completion_length``): a turn gets the tokens left of that budget, an episode that has used them up
stops (``EndEpisode``) with the return it has earned so far, and TRL's ``mask_truncated_completions``
sees such a sample as truncated (it does not end on an end-of-turn id).

Requires an env that appends to its context (every env but the games with ``context="last_k"`` or
``"board"``): TRL trains one sequence per sample.

Two options change where and how the episodes are played (the samples keep the format above):

- ``EnvRollout(env_workers=N)``: the envs live in Ray worker processes
  (:class:`agent_gym.rollout.ray_pool.RayEnvPools`, the env pool protocol on Ray: a
  :class:`~agent_gym.rollout.ray_pool.RayEnvPool` per distinct env id and arguments of the rows),
  generation stays in the trainer. The samples are those of envs in process.
- ``EnvRollout(tree="entropy" | "random" | K)``: per-state GRPO groups. Each group of ``num_generations``
  prompts of one row plays one tree (:func:`agent_gym.rollout.tree.play_tree`): one episode (the root),
  then ``num_generations - 1`` branches from the env's state before one step ``k`` of the root. Each of
  the ``num_generations`` trajectories becomes a sample whose prompt is step ``k``'s prompt and whose
  completion is steps ``k..end``, so TRL's group normalisation compares continuations of one state, and
  the root's steps before ``k`` are generated once instead of ``num_generations`` times.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import warnings
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Literal, Sequence

from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.episode import EndEpisode, play_episode
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.pool import EnvPool, EnvPoolProtocol, PoolKey
from agent_gym.trajectory import StepRecord, Trajectory

if TYPE_CHECKING:
    from agent_gym.rollout.tree import TreeStats

from agent_gym_trl import private
from agent_gym_trl.dataset import Route, route_of

__all__ = ["EnvRollout", "env_reward", "TESTED_TRL"]

#: The TRL releases this adapter is tested with (1.14.2 and 1.16.0; 1.15.0 fails on CPU-only torch).
TESTED_TRL = private.TESTED_TRL

#: The counters of an episode's last ``info`` that are logged (``env/<name>``, mean per episode).
COUNTERS = ("tool_calls", "tool_errors", "format_errors")

#: ``EnvRollout(tree=...)``: how each group picks the root step its branches start from.
TreeMode = Literal["entropy", "random"] | int


def env_reward(completions: Sequence[Any] | None = None, env_return: Sequence[float] | None = None, **kwargs: Any) -> list[float]:
    """The reward function that goes with :class:`EnvRollout`: each episode's return (sum of the env's rewards).

    Pass it as ``GRPOTrainer(reward_funcs=env_reward, ...)`` (TRL logs it as ``rewards/env_reward``). Other
    reward functions can be added next to it; they receive ``env_return`` and ``env_info`` (the last
    step's info dict) as keyword arguments too.

    Raises:
        ValueError: no ``env_return`` (the trainer's ``rollout_func`` is not :class:`EnvRollout`).
    """
    if env_return is None:
        raise ValueError(
            "env_reward needs the episodes' returns: train with rollout_func=agent_gym_trl.EnvRollout() "
            "(it passes env_return to the reward functions)"
        )
    return [float(r) for r in env_return]


class EnvRollout:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: one env episode per prompt (see the module docstring).

    Args:
        tokenizer: the tokenizer every env is made with; ``None``: the trainer's (``processing_class``). It
            must be the model's: the env's prompt ids are the model's input.
        policy: generate with this instead of TRL's backend: an :class:`agent_gym.rollout.Policy`
            (``generate(prompts, *, max_new_tokens)``, e.g. :class:`~agent_gym.rollout.ScriptedPolicy`) or an
            async ``(prompt_ids) -> Generation`` function. The samples are then not from the trained weights
            (unless the policy reads them): for tests, demonstrations and off-policy experiments.
        max_new_tokens: a turn's limit with ``policy`` (default: the trainer's ``max_completion_length``;
            TRL's backend always uses that).
        max_completion_tokens: the most completion ids of one sample (see the module docstring); ``None``:
            the trainer's ``max_completion_length``.
        env_kwargs: constructor arguments added to every row's (they win), e.g. ``{"max_turns": 4}``.
        log_metrics: log the ``env/`` metrics.
        on_episode: ``(trajectory, env)``, called as each episode ends, before its env plays another (write
            trajectories with a :class:`~agent_gym.trajectory.TrajectoryWriter`, inspect the env). With
            ``env_workers`` ``env`` is the :class:`~agent_gym.rollout.ray_pool.RayEnv` proxy (the env's
            state is in its worker); with ``tree`` it is called once per tree, for each of its
            trajectories, with the root's env for the root and ``None`` for the branches.
        env_workers: play the envs in this many Ray worker processes per distinct env id and arguments of
            the rows (:class:`~agent_gym.rollout.ray_pool.RayEnvPools`, the same pool protocol as the
            in-process :class:`~agent_gym.rollout.pool.EnvPool`; made at the first call, closed by :meth:`close`); generation stays in the trainer. The workers load the tokenizer
            by name: ``tokenizer`` when it is a name or path, else the trainer's tokenizer's
            ``name_or_path``, which must load the same tokenizer. Starts a local Ray (``ray.init()``) unless
            Ray is running or ``ray_address`` (or ``RAY_ADDRESS``) names a cluster.
        envs_per_worker: with ``env_workers``, the envs each worker plays at once. The episodes of a
            batch play at once, so the workers must hold all of an env's episodes of a batch; ``None``
            sizes each pool to the batch (and remakes it for a larger one).
        ray_address: with ``env_workers``, the Ray cluster to connect to when Ray is not initialised
            (``ray.init(address=...)``; default: ``RAY_ADDRESS``, else a local Ray).
        tree: per-state GRPO groups (see the module docstring): the branch step ``k`` of each group's
            root is its highest-surprisal step (``"entropy"``: the mean ``-log p`` of the sampled ids;
            needs sampling log-probs, which TRL reports with vLLM only), a uniformly random step of the
            root (``"random"``, seeded by the trainer's seed, step and the group), or this step index
            (an ``int``, clipped to the root's last step). The completion budget counts from the branch
            state. A root that ran into the budget (stopped, or a turn cut to the ids left) branches at
            step 0: its continuation from a later state had less budget than its branches would get.
            With one generation per prompt (``num_generations_eval=1``) the episodes are played flat.

    Attributes:
        last_trajectories: the trajectories of the latest call, in prompt order (``metadata["route"]``
            holds the row's route, ``metadata["global_step"]`` the trainer's step). With ``tree``, each
            group's root then its branches, with ``metadata["tree"]`` (:func:`~agent_gym.rollout.tree.play_tree`'s)
            and ``metadata["sample_step"]``, the branch step ``k`` (the sample's prompt is that step's).

    Raises:
        ValueError: a bad option, or ``tree`` with ``env_workers`` (a tree forks env states in process).
        ImportError: ``env_workers`` without Ray installed (the message has the install command).
    """

    def __init__(
        self,
        *,
        tokenizer: Any = None,
        policy: Any = None,
        max_new_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        log_metrics: bool = True,
        on_episode: Callable[[Trajectory, Any], None] | None = None,
        env_workers: int | None = None,
        envs_per_worker: int | None = None,
        ray_address: str | None = None,
        tree: TreeMode | None = None,
    ):
        if max_completion_tokens is not None and max_completion_tokens < 1:
            raise ValueError(f"max_completion_tokens must be >= 1, got {max_completion_tokens}")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if policy is not None and not (hasattr(policy, "generate") or callable(policy)):
            raise TypeError(f"policy must have generate(prompts, *, max_new_tokens) or be an async function, got {policy!r}")
        if tree is not None and tree not in ("entropy", "random") and not (
            isinstance(tree, int) and not isinstance(tree, bool) and tree >= 0
        ):
            raise ValueError(f"tree must be 'entropy', 'random' or a step index >= 0, got {tree!r}")
        if env_workers is not None and env_workers < 1:
            raise ValueError(f"env_workers must be >= 1, got {env_workers}")
        if envs_per_worker is not None and envs_per_worker < 1:
            raise ValueError(f"envs_per_worker must be >= 1, got {envs_per_worker}")
        if env_workers is None and (envs_per_worker is not None or ray_address is not None):
            raise ValueError("envs_per_worker and ray_address go with env_workers=N (envs in Ray workers)")
        if tree is not None and env_workers is not None:
            raise ValueError(
                "tree= forks env states (snapshots) in the trainer's process, so its envs cannot live in Ray workers: "
                "drop env_workers= or tree="
            )
        if env_workers is not None:
            from agent_gym.rollout.ray_pool import import_ray

            import_ray()  # no Ray: the ImportError names the install command, before any training
        self.tokenizer = tokenizer
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.max_completion_tokens = max_completion_tokens
        self.env_kwargs = dict(env_kwargs or {})
        if "tokenizer" in self.env_kwargs:
            raise ValueError("pass the tokenizer as EnvRollout(tokenizer=...), not in env_kwargs")
        self.log_metrics = log_metrics
        self.on_episode = on_episode
        self.env_workers = env_workers
        self.envs_per_worker = envs_per_worker
        self.ray_address = ray_address
        self.tree = tree
        self.last_trajectories: list[Trajectory] = []
        self._pool = EnvPool()  # idle envs, reused across calls (made with the trainer's tokenizer); trees fork from it
        self._tokenizer: Any = None
        self._warned_stop = False
        # where the episodes' envs come from: this process's pool, or (env_workers) Ray workers per env kind
        self._envs: EnvPoolProtocol = self._pool
        self._stop_ids: dict[tuple[str, str], list[int]] = {}  # env workers: the env's end-of-turn ids

    # -- the rollout_func ----------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt and return what ``GRPOTrainer`` reads (see the module docstring)."""
        from agent_gym.rollout.async_runner import run_sync

        routes = [route_of(p) for p in prompts]
        if self._tokenizer is None:
            private.check(trainer)
            self._tokenizer = self._resolve_tokenizer(trainer)
            self._pool.tokenizer = self._tokenizer
            if self.env_workers is not None:
                from agent_gym.rollout.ray_pool import RayEnvPools

                self._envs = RayEnvPools(num_workers=self.env_workers, tokenizer=self._tokenizer_name(),
                                         envs_per_worker=self.envs_per_worker, ray_address=self.ray_address)
        budget = self.max_completion_tokens or getattr(trainer, "max_completion_length", None)
        if not budget:
            raise ValueError("no completion budget: set GRPOConfig(max_completion_length=...) or EnvRollout(max_completion_tokens=...)")
        budget = int(budget)
        backend = self._backend(trainer)
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        width = self._group_width(trainer, routes) if self.tree is not None else 1
        # a batch's episodes play at once: room for all of them, per env kind
        for (env_id, kwargs_json), episodes in Counter(_pool_key(r.env_id, {**r.env_kwargs, **self.env_kwargs}) for r in routes).items():
            self._envs.reserve(env_id, json.loads(kwargs_json), episodes)
        seed = f"{getattr(getattr(trainer, 'args', None), 'seed', 0)}:{step}:{_process_index(trainer)}"
        trajectories, trees = run_sync(lambda: self._play(routes, backend, budget, step, width, seed))
        self.last_trajectories = trajectories

        samples = [self._sample(t, budget) for t in trajectories]
        per_sample = [s[3] for s in samples]
        logprobs: list[list[float]] | None = None  # TRL takes log-probs for every sample or for none
        if all(lp is not None for lp in per_sample):
            logprobs = [lp for lp in per_sample if lp is not None]
        if self.log_metrics:
            self._log(trainer, trajectories, samples, trees)
        return {
            "prompt_ids": [s[0] for s in samples],
            "completion_ids": [s[1] for s in samples],
            "logprobs": logprobs,
            "env_mask": [s[2] for s in samples],
            "env_return": [float(t.return_) for t in trajectories],
            "env_info": [dict(t.final_info) for t in trajectories],
        }

    def close(self) -> None:
        """Close the envs kept for reuse between calls, and the Ray env workers (the Ray this rollout
        started, if it did)."""
        self._pool.close()
        if self._envs is not self._pool:
            self._envs.close()

    # -- episodes --------------------------------------------------------------------------------------

    async def _play(
        self, routes: list[Route], backend: "_Backend", budget: int, step: int, width: int, seed: str
    ) -> tuple[list[Trajectory], list[tuple[int, "TreeStats"]]]:
        """Every episode of the batch, in prompt order; with trees, also each group's branch step and cost."""
        jobs: list[Coroutine[Any, Any, Any]]
        if width > 1:
            starts = range(0, len(routes), width)
            rounds = _Rounds(backend, live=len(starts))  # a tree asks with its root first, its branches after
            jobs = [self._tree(routes[i], rounds, budget, step, width, group, seed) for group, i in enumerate(starts)]
        else:
            rounds = _Rounds(backend, live=len(routes))
            jobs = [self._episode(route, rounds, budget, step, k) for k, route in enumerate(routes)]
        runner = asyncio.ensure_future(rounds.run())
        tasks = [asyncio.ensure_future(job) for job in jobs]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
            await runner
        finally:
            if not runner.done():
                runner.cancel()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if width == 1:
            return list(results), []  # type: ignore[arg-type]
        trajectories = [t for group in results for t in group[0]]  # type: ignore[index]
        return trajectories, [(group[1], group[2]) for group in results]  # type: ignore[index]

    async def _episode(self, route: Route, rounds: "_Rounds", budget: int, step: int, slot: int) -> Trajectory:
        kwargs = {**route.env_kwargs, **self.env_kwargs}
        try:
            with self._envs.lease(route.env_id, kwargs) as env:
                if self.env_workers is not None:  # a proxy: the env's template lives in its worker
                    stop_ids = self._worker_stop_ids(route.env_id, kwargs)
                else:
                    _check_agent_env(route, env)
                    stop_ids = env.unwrapped.template.end_of_turn_ids
                return await self._play_one(env, route, _Budgeted(rounds, stop_ids, budget, slot), step)
        finally:
            rounds.finished()

    async def _play_one(self, env: Any, route: Route, generate: "_Budgeted", step: int) -> Trajectory:
        trajectory = await play_episode(
            env,
            generate,
            task_id=route.task_id,
            env_id=route.env_id,
            metadata={"route": json.loads(route.to_json()), "global_step": step},
        )
        if self.on_episode is not None:
            self.on_episode(trajectory, env)
        return trajectory

    async def _tree(
        self, route: Route, rounds: "_Rounds", budget: int, step: int, width: int, group: int, seed: str
    ) -> tuple[list[Trajectory], int, "TreeStats"]:
        """One group: a tree of ``width`` trajectories branched at one step of its root (module docstring).

        The tree holds one slot of the rounds while its root plays, ``width - 1`` while its branches do
        (each gives its slot back as it ends); whatever it still holds when it fails is given back."""
        from agent_gym.core.snapshot import SnapshotError
        from agent_gym.rollout.tree import TreeStats, play_tree

        kwargs = {**route.env_kwargs, **self.env_kwargs}
        held = 1
        chosen: list[int] = []
        leased: dict[int, PoolKey] = {}
        stats = TreeStats()

        def make_env() -> Any:
            key, env = self._pool.acquire(route.env_id, kwargs, tokenizer=self._tokenizer)
            leased[id(env)] = key
            return env

        def release_env(env: Any, played: bool) -> None:
            nonlocal held
            key = leased.pop(id(env))
            if played:
                self._pool.release(key, env)
            else:
                env.close()  # its state is unknown
            if held > 0:  # (a failed tree has given its slots back already)
                held -= 1
                rounds.finished()

        def branch_at(steps: list[StepRecord]) -> list[int]:
            nonlocal held
            k = self._branch_step(steps, generate.spent, group, seed)
            chosen.append(k)
            generate.base = len(steps[k].prompt_ids)  # the branches' budget counts from the branch state
            for _ in range(width - 1):
                rounds.started()
            held += width - 1
            held -= 1
            rounds.finished()  # the root asks no more
            return [k]

        try:
            with self._pool.lease(route.env_id, kwargs, tokenizer=self._tokenizer) as env:
                _check_agent_env(route, env)
                generate = _Budgeted(rounds, env.unwrapped.template.end_of_turn_ids, budget, group)
                try:
                    trajectories = await play_tree(
                        env, generate, width=width, branch_at=branch_at, max_leaves=width, make_env=make_env,
                        release_env=release_env, task_id=route.task_id, env_id=route.env_id, stats=stats,
                        metadata={"route": json.loads(route.to_json()), "global_step": step},
                    )
                except SnapshotError as exc:
                    raise SnapshotError(
                        f"EnvRollout(tree={self.tree!r}) branches each group from a copy of the env's state, and {exc}; "
                        f"train {route.env_id} without tree="
                    ) from exc
                for t in trajectories:
                    t.metadata["sample_step"] = chosen[0]
                if self.on_episode is not None:
                    for k, t in enumerate(trajectories):
                        self.on_episode(t, env if k == 0 else None)
        finally:
            while held > 0:
                held -= 1
                rounds.finished()
        return trajectories, chosen[0], stats

    def _branch_step(self, steps: list[StepRecord], spent: bool, group: int, seed: str) -> int:
        """The root step a group branches at (``tree``; step 0 when the root ran into the budget)."""
        if not steps:
            raise RuntimeError("the tree's root played no step: nothing to branch from")
        if self.tree == "entropy" and any(s.response_logprobs is None for s in steps):
            raise ValueError(
                "EnvRollout(tree='entropy') branches at the root's least likely turn, which needs the sampling "
                "log-probs of each turn; this generation reports none (TRL's transformers generation does not, its "
                "vLLM does): train with use_vllm=True, or use tree='random' or a step index"
            )
        if spent:
            return 0
        if self.tree == "entropy":
            surprisal = [_surprisal(s) for s in steps]
            return max(range(len(steps)), key=lambda k: (surprisal[k], -k))
        if self.tree == "random":
            return random.Random(f"{seed}:{group}").randrange(len(steps))
        return min(int(self.tree or 0), len(steps) - 1)

    def _group_width(self, trainer: Any, routes: list[Route]) -> int:
        """``tree``: the group size TRL normalises over (1: play flat), after checking that the prompts come
        in groups of that many repeats of one row."""
        training = bool(getattr(getattr(trainer, "model", None), "training", True))
        width = getattr(trainer, "num_generations" if training else "num_generations_eval", None)
        if width is None:
            width = getattr(getattr(trainer, "args", None), "num_generations", None)
        if width is None:
            raise ValueError("EnvRollout(tree=...) needs the trainer's num_generations (a GRPOTrainer's)")
        width = int(width)
        if width < 2:
            return 1
        for i in range(0, len(routes), width):
            group = routes[i : i + width]
            if len(group) < width or any(r != group[0] for r in group):
                raise ValueError(
                    f"EnvRollout(tree={self.tree!r}) plays one tree per group of num_generations={width} prompts of one "
                    f"row, but prompts {i}..{i + len(group) - 1} of this call's {len(routes)} are not one row repeated "
                    f"{width} times ({', '.join(r.to_json() for r in dict.fromkeys(group))}). TRL's sampler repeats each "
                    "row num_generations times in a row; with several processes make per_device_train_batch_size a "
                    "multiple of num_generations, so that no group is split between processes"
                )
        return width

    def _sample(self, trajectory: Trajectory, budget: int) -> tuple[list[int], list[int], list[int], list[float] | None]:
        try:
            segment = trajectory.sequence()
        except ValueError as exc:
            raise ValueError(
                f"{trajectory.env_id} (task {trajectory.task_id}): {exc}. TRL trains one sequence per sample: use "
                "an env that appends to its context (the games with context='full'), or the verl adapter's step "
                "mode for envs that rewrite it"
            ) from None
        # A tree's sample starts at its branch state: step k's prompt, the completion from there.
        k = int(trajectory.metadata.get("sample_step", 0))
        prompt = list(trajectory.steps[k].prompt_ids)
        skip = len(prompt) - len(segment.prompt_ids)
        # Generations were cut to the budget; only the env's reply after a stopped episode (the tail) can
        # reach past it, and it is masked out anyway.
        completion = segment.response_ids[skip : skip + budget]
        mask = segment.response_mask[skip : skip + budget]
        logprobs = None if segment.response_logprobs is None else segment.response_logprobs[skip : skip + budget]
        return prompt, list(completion), list(mask), logprobs

    # -- env workers on Ray ----------------------------------------------------------------------------

    def _tokenizer_name(self) -> str:
        """The name or path the env workers load the tokenizer from, checked to load the trainer's tokenizer."""
        if isinstance(self.tokenizer, (str, os.PathLike)):
            return os.fspath(self.tokenizer)
        from agent_gym.models import load_tokenizer

        fix = ("pass EnvRollout(tokenizer=NAME_OR_PATH), a name or folder every worker loads the model's tokenizer from "
               "(tokenizer.save_pretrained(DIR) writes one)")
        name = str(getattr(self._tokenizer, "name_or_path", "") or "")
        if not name:
            raise ValueError(f"env_workers: the env workers load the tokenizer by name, and the trainer's has no name_or_path: {fix}")
        try:
            loaded = load_tokenizer(name)
        except Exception as exc:  # noqa: BLE001 - whatever fails to load, the fix is the same
            raise ValueError(
                f"env_workers: the env workers load the tokenizer by name, and the trainer's tokenizer's name_or_path "
                f"{name!r} does not load ({type(exc).__name__}: {exc}): {fix}"
            ) from None
        if loaded is not self._tokenizer and (
            loaded.get_vocab() != self._tokenizer.get_vocab() or loaded.chat_template != self._tokenizer.chat_template
        ):
            raise ValueError(
                f"env_workers: the env workers load the tokenizer by name, and {name!r} (the trainer's tokenizer's "
                f"name_or_path) loads another vocabulary or chat template than the trainer's tokenizer: {fix}"
            )
        return name

    def _worker_stop_ids(self, env_id: str, kwargs: dict[str, Any]) -> list[int]:
        """The end-of-turn ids of an env in a worker: its chat template's, built here from the same tokenizer
        and ``chat_template`` argument (as :class:`~agent_gym.core.env.AgentEnv` builds it)."""
        key = _pool_key(env_id, kwargs)
        if key not in self._stop_ids:
            from agent_gym.chat.template import ChatTemplate

            self._stop_ids[key] = list(ChatTemplate(self._tokenizer, chat_template=kwargs.get("chat_template")).end_of_turn_ids)
        return self._stop_ids[key]

    # -- generation backends -------------------------------------------------------------------------

    def _resolve_tokenizer(self, trainer: Any) -> Any:
        if self.tokenizer is not None:
            from agent_gym.models import load_tokenizer

            return load_tokenizer(self.tokenizer)
        tokenizer = getattr(trainer, "processing_class", None)
        if tokenizer is None:
            raise ValueError("the trainer has no tokenizer (processing_class); pass EnvRollout(tokenizer=...)")
        return getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer

    def _backend(self, trainer: Any) -> "_Backend":
        if self.policy is not None:
            return _PolicyBackend(self.policy, self.max_new_tokens or int(trainer.max_completion_length))
        backend = _TRLBackend(trainer)
        if not self._warned_stop:
            self._warned_stop = True
            from agent_gym.chat.template import ChatTemplate

            end = set(ChatTemplate(self._tokenizer).end_of_turn_ids)
            if not end <= set(backend.stop_ids):
                warnings.warn(
                    f"the trainer stops generating at ids {sorted(backend.stop_ids)} but the env's turns end with "
                    f"{sorted(end)}: every turn runs to max_completion_length before it is cut after its end of "
                    "turn; set model.generation_config.eos_token_id to the end-of-turn id",
                    stacklevel=3,
                )
        return backend

    # -- metrics ---------------------------------------------------------------------------------------

    def _log(self, trainer: Any, trajectories: list[Trajectory], samples: list[Any], trees: list[tuple[int, "TreeStats"]]) -> None:
        log = private.metric_logger(trainer)
        if trees:  # what the trees generated against flat episodes of the same samples, per sample
            n = len(trajectories)
            log("env/tree_generated_tokens", sum(stats.generated_tokens for _, stats in trees) / n)
            log("env/tree_flat_tokens", sum(stats.flat_tokens for _, stats in trees) / n)
            log("env/tree_branch_step", sum(k for k, _ in trees) / len(trees))
        by_env: dict[str, list[int]] = defaultdict(list)
        for k, t in enumerate(trajectories):
            by_env[t.env_id].append(k)
        groups: list[tuple[str, list[Trajectory], list[Any]]] = [("env", trajectories, samples)]
        if len(by_env) > 1:  # a mixed run: each env's own figures too
            for env_id, rows in sorted(by_env.items()):
                groups.append((f"env/{env_id}", [trajectories[k] for k in rows], [samples[k] for k in rows]))
        for prefix, group, group_samples in groups:
            for name, value in _episode_metrics(group, group_samples).items():
                log(f"{prefix}/{name}", value)


def _episode_metrics(trajectories: list[Trajectory], samples: list[Any]) -> dict[str, float]:
    n = len(trajectories)
    finals = [t.final_info for t in trajectories]
    out = {
        "return": math.fsum(t.return_ for t in trajectories) / n,
        "correct": sum(1 for i in finals if i.get("correct") is True) / n,
        "turns": sum(len(t.steps) for t in trajectories) / n,
    }
    for name in COUNTERS:
        out[name] = sum(float(i.get(name, 0) or 0) for i in finals) / n
    out["truncated"] = sum(1 for t in trajectories if t.metadata.get("truncated_reason") is not None) / n
    out["stopped_by_budget"] = sum(1 for t in trajectories if t.metadata.get("truncated_reason") == "max_completion_tokens") / n
    out["env_tokens"] = sum(len(s[2]) - sum(s[2]) for s in samples) / n
    out["env_seconds"] = math.fsum(float(t.metadata.get("env_s", 0.0)) for t in trajectories) / n
    return out


def _check_agent_env(route: Route, env: Any) -> None:
    if not hasattr(env.unwrapped, "template"):
        raise TypeError(f"{route.env_id} is not an agent-r1-gym env (no chat template)")


def _pool_key(env_id: str, kwargs: dict[str, Any]) -> tuple[str, str]:
    return env_id, json.dumps(kwargs, sort_keys=True)


def _process_index(trainer: Any) -> int:
    return int(getattr(getattr(trainer, "accelerator", None), "process_index", 0) or 0)


def _surprisal(record: StepRecord) -> float:
    """The mean ``-log p`` of a step's sampled ids (``-inf`` for none, or unknown ones)."""
    lps = record.response_logprobs or []
    value = -math.fsum(lps) / len(lps) if lps else -math.inf
    return -math.inf if math.isnan(value) else value


class _Budgeted:
    """An episode's (or a tree's) ``generate``: a turn from the round, cut after its first stop id and to
    what the completion budget leaves, counted from ``base`` (the first prompt, or a tree's branch
    state); ``EndEpisode`` once the budget is spent. ``spent`` says whether the budget stopped or cut a turn."""

    def __init__(self, rounds: "_Rounds", end_of_turn_ids: Sequence[int], budget: int, slot: int):
        self.rounds = rounds
        self.stop_ids = set(end_of_turn_ids) | set(rounds.backend.stop_ids)
        self.budget = budget
        self.slot = slot  # orders the round: the batches do not depend on which env answered first
        self.base: int | None = None
        self.spent = False

    async def __call__(self, prompt_ids: list[int]) -> Generation:
        if self.base is None:
            self.base = len(prompt_ids)
        left = self.budget - (len(prompt_ids) - self.base)
        if left <= 0:
            self.spent = True
            raise EndEpisode("max_completion_tokens")
        generation = await self.rounds.generate(prompt_ids, self.slot)
        if _turn_end(generation.ids, self.stop_ids) > left:
            self.spent = True
        return _cut(generation, self.stop_ids, left)


def _turn_end(ids: Sequence[int], stop_ids: set[int]) -> int:
    """The length of a turn: up to and including its first stop id (all of ``ids`` without one)."""
    return next((k + 1 for k, t in enumerate(ids) if t in stop_ids), len(ids))


def _cut(generation: Generation, stop_ids: set[int], limit: int) -> Generation:
    """``generation`` up to and including its first stop id, and at most ``limit`` ids."""
    ids = list(generation.ids)
    end = next((k + 1 for k, t in enumerate(ids) if t in stop_ids), None)
    finish = "stop" if end is not None else "length"
    end = len(ids) if end is None else end
    if end > limit:
        end, finish = limit, "length"
    if end == len(ids) and finish == generation.finish_reason:
        return generation
    logprobs = None if generation.logprobs is None else list(generation.logprobs[:end])
    return Generation(ids=ids[:end], logprobs=logprobs, finish_reason=finish)


class _Backend:
    """Generates one round: a batch of prompts, one continuation each."""

    stop_ids: Sequence[int] = ()
    #: whether every process must call ``generate`` in the same rounds with as many prompts (collectives).
    collective = False

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        raise NotImplementedError

    def round_size(self, local: int) -> int:
        return local


class _TRLBackend(_Backend):
    """TRL's own generation (``GRPOTrainer._generate_single_turn``), the call its multi-turn tool loop makes."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self._generate = private.single_turn_generator(trainer)
        self.stop_ids = [int(t) for t in getattr(trainer, "eos_token_ids", []) or []]
        accelerator = getattr(trainer, "accelerator", None)
        # With several processes TRL's backends are collectives (vLLM server mode gathers every process's
        # prompts and hands back equal slices; ZeRO-3 and tensor parallelism need every rank to generate),
        # so every process generates in the same rounds with as many prompts, padding with dummies.
        self.collective = bool(accelerator is not None and accelerator.num_processes > 1)
        self._accelerator = accelerator

    def round_size(self, local: int) -> int:
        if not self.collective:
            return local
        from accelerate.utils import gather_object

        return max(int(n) for n in gather_object([local]))

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        completion_ids, logprobs = self._generate(prompts)
        out = []
        for k, ids in enumerate(completion_ids):
            ids = [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]
            lps = None if logprobs is None else [float("nan") if x is None else float(x) for x in logprobs[k]]
            if lps is not None and len(lps) != len(ids):
                lps = None
            finish = "stop" if ids and ids[-1] in self.stop_ids else "length"
            out.append(Generation(ids=ids, logprobs=lps, finish_reason=finish))
        return out


class _PolicyBackend(_Backend):
    """A user's policy: ``generate(prompts, *, max_new_tokens)`` or an async per-prompt function."""

    def __init__(self, policy: Any, max_new_tokens: int):
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.per_prompt = not hasattr(policy, "generate")
        self.stop_ids = [int(t) for t in getattr(policy, "stop_ids", []) or []]

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        return list(self.policy.generate(prompts, max_new_tokens=self.max_new_tokens))


class _Rounds(Batcher):
    """agent_gym's one :class:`~agent_gym.rollout.batcher.Batcher`, in rounds over a generation backend.

    A round starts when every live episode is waiting for tokens (the others are done), so a batch holds
    one turn of each episode still playing. With a collective backend each process pads its round to the
    largest round of any process, and keeps joining rounds (with dummies only) until no process has an
    episode left. A failed round fails the rollout (``fail_fast``): a trainer step cannot go on without
    its samples. A per-prompt async policy is awaited directly (it batches by itself).
    """

    def __init__(self, backend: _Backend, *, live: int):
        super().__init__(
            backend.generate,
            lockstep=True,
            live=live,
            round_size=backend.round_size if backend.collective else None,
            fail_fast=True,
        )
        self.backend = backend

    async def generate(self, prompt: list[int], slot: int = 0) -> Generation:
        if isinstance(self.backend, _PolicyBackend) and self.backend.per_prompt:
            generation: Generation = await self.backend.policy(prompt)
            return generation
        return await super().generate(prompt, slot)
