"""Step mode: expand trajectory rows into step samples, and trajectory-aware advantages.

Batch expansion (:func:`expand_step_batch`)
    After rollout a step-mode batch has one row per trajectory (its first step) whose
    ``non_tensor_batch["agent_gym_steps"]`` holds the trajectory's training samples
    (:func:`agent_gym_verl.samples.step_samples`). By default they are *segments*: maximal runs of
    steps in which the env only appended, each one sample whose response holds every action and env turn
    after the segment's first prompt (``response_mask`` 1 on the policy's ids, 0 on the env's,
    ``rm_scores`` = each step's reward on that step's last action id, an empty action's on the nearest
    policy id, see :func:`~agent_gym_verl.samples.step_samples`). An append-only episode is one
    sample, token for token the concat-mode one, so the update costs what concat mode costs; a game
    that rewrites its context gives one sample per segment. With ``agent_gym.samples=step`` they are
    single steps (prompt = the step's whole context, response = its action, its reward on its last
    token): Agent-R1's layout, quadratic in the episode length, kept for comparison. Either way
    expansion turns each sample into one row: prompt left-padded, response right-padded,
    ``rollout_log_probs`` when the rollout recorded them. Every other
    per-row field (uid, data_source, extra_info, ...) is copied to each of the trajectory's steps, and
    three fields are added: ``agent_gym_traj`` (trajectory id, numbered in batch order), ``agent_gym_step``
    (0-based sample index within the trajectory) and ``agent_gym_num_steps``. A tree row (tree mode,
    :mod:`agent_gym_verl.tree`) carries the samples of several trajectories: each gets its own
    ``agent_gym_traj``, and the rows get ``agent_gym_tree`` (the tree's source row) and the per-id tree
    advantages and root-prefix flags the agent loop computed. Tensors are padded only to the batch's
    longest step prompt and longest step response (not to ``rollout.prompt_length``/``response_length``);
    the padding fraction is reported. Rows without steps (concat-mode rows) pass through as one sample each. A
    few padding rows (copies with an all-zero ``response_mask``, flagged ``agent_gym_is_pad``) make
    the row count divisible by the data-parallel size; they carry no loss.

Advantages (:func:`compute_step_advantage`)
    The trajectory is the unit. For each trajectory the policy tokens of all its samples are laid end
    to end in step order (the *trajectory view*: exactly the policy tokens concat mode would have,
    with their token-level rewards and, for GAE, the critic's values of each step's own context, which
    a segment row and a step row compute on the same ids), and
    verl's own ``compute_advantage`` runs on that view, one row per trajectory, with the prompt's
    ``uid`` as group index. The advantages are then written back to the step rows. So

    - GRPO normalises each trajectory's return within its uid group and every step of the trajectory
      gets that advantage; a trajectory counts once in the group statistics however many steps it
      has (RLOO, GRPO-pass@k, OPO, GPG, REINFORCE++(-baseline): likewise, with verl's own formulas);
    - GAE runs over the trajectory's policy tokens with each step's value estimates (critic needed);
    - REMAX and GDPO are rejected, and so is any estimator this module does not know (an estimator
      added to verl's ``AdvantageEstimator`` enum later is rejected at start-up, never run silently).

    Tree rows are the exception (:mod:`agent_gym_verl.tree` has the formula): a policy id at or after a
    branch point gets the per-state GRPO advantage of its step
    (:func:`agent_gym.rollout.tree.tree_advantages`, carried by the agent loop), and the root's ids before
    its first branch point verl's GRPO over the prompt's trees, each tree one member with its value (the
    mean return of its leaves) as score, computed here with verl's ``compute_advantage`` on a view of one
    row per tree. Tree mode runs ``grpo`` and ``grpo_vectorized`` only (:func:`check_tree_estimator`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from agent_gym_verl import compat
from agent_gym_verl import tree as tree_mode
from agent_gym_verl.samples import STEPS_KEY

__all__ = [
    "STEPS_KEY",
    "TRAJ_KEY",
    "STEP_KEY",
    "NUM_STEPS_KEY",
    "PAD_KEY",
    "TREE_KEY",
    "TREE_ADV_KEY",
    "TREE_ROOT_KEY",
    "TREE_ESTIMATORS",
    "check_tree_estimator",
    "SUPPORTED_ESTIMATORS",
    "REJECTED_ESTIMATORS",
    "StepModeError",
    "check_estimator",
    "estimator_support",
    "is_step_batch",
    "is_expanded",
    "expand_step_batch",
    "compute_step_advantage",
    "trajectory_metrics",
    "generated_tokens",
    "tool_call_validity",
]

TRAJ_KEY = "agent_gym_traj"
STEP_KEY = "agent_gym_step"
NUM_STEPS_KEY = "agent_gym_num_steps"
PAD_KEY = "agent_gym_is_pad"
#: Tree mode (:mod:`agent_gym_verl.tree`), columns of an expanded batch with tree rows: the tree (its
#: source row; -1 on other rows and pad rows), and per row its samples' per-response-id tree advantages and
#: root-prefix flags (object arrays; ``None`` off trees). :func:`compute_step_advantage` removes the last two.
TREE_KEY = "agent_gym_tree"
TREE_ADV_KEY = "agent_gym_tree_adv"
TREE_ROOT_KEY = "agent_gym_tree_root_prefix"
#: The estimators tree mode runs (per-state GRPO groups, and verl's GRPO across the prompt's trees).
TREE_ESTIMATORS: frozenset[str] = frozenset({"grpo", "grpo_vectorized"})

#: Estimators step mode runs on the trajectory view (their values in verl's enum).
SUPPORTED_ESTIMATORS: frozenset[str] = frozenset(
    {
        "gae",
        "grpo",
        "grpo_vectorized",
        "grpo_passk",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
)
#: Estimators step mode refuses, and why.
REJECTED_ESTIMATORS: dict[str, str] = {
    "remax": "REMAX's greedy baseline rollout is a second generation pass whose rows verl merges with "
    "the sampled ones before step expansion; use grpo, rloo or reinforce_plus_plus_baseline instead",
    "gdpo": "GDPO reads per-dimension rewards from reward_extra_info keyed by row; agent-gym envs report "
    "one scalar return per trajectory (components are in info['reward_components']); use grpo",
}

# Per-token tensors some estimators read besides rewards and mask (gathered into the view as well).
_TOKEN_KEYS = ("values", "old_log_probs", "sum_pi_squared", "rollout_is_weights")
# Per-row tensors whose width is a sequence length: rebuilt by expansion, never copied.
_SEQ_KEYS = (
    "prompts",
    "responses",
    "response_mask",
    "input_ids",
    "attention_mask",
    "position_ids",
    "rollout_log_probs",
    "rm_scores",
)


class StepModeError(ValueError):
    """A setting that step mode cannot honour (raised at start-up or on the first batch)."""


def estimator_support() -> dict[str, str | None]:
    """Every value of the installed verl's ``AdvantageEstimator`` enum -> ``None`` when step mode
    supports it, else the reason it is rejected (enumerated at run time)."""
    table: dict[str, str | None] = {}
    for name in compat.estimator_names():
        if name in SUPPORTED_ESTIMATORS:
            table[name] = None
        elif name in REJECTED_ESTIMATORS:
            table[name] = REJECTED_ESTIMATORS[name]
        else:
            table[name] = (
                f"it is new in verl {compat.VERL_VERSION} and agent_gym_verl does not know whether it is "
                "meaningful per trajectory"
            )
    return table


def check_estimator(name: Any, algo_config: Any = None) -> str:
    """Raise :class:`StepModeError` unless step mode supports advantage estimator ``name``."""
    value = name.value if hasattr(name, "value") else str(name)
    supported = sorted(k for k, v in estimator_support().items() if v is None)
    table = estimator_support()
    if value not in table:
        raise StepModeError(
            f"step mode: algorithm.adv_estimator={value!r} is not one of verl {compat.VERL_VERSION}'s "
            f"AdvantageEstimator values; step mode supports {supported}"
        )
    if table[value] is not None:
        raise StepModeError(
            f"step mode does not support algorithm.adv_estimator={value!r}: {table[value]}. Supported: {supported}"
        )
    if value == "gae" and algo_config is not None and _cfg_get(algo_config, "use_pf_ppo", False):
        raise StepModeError("step mode: algorithm.use_pf_ppo re-samples rows, which would split trajectories; turn it off")
    return value


def check_tree_estimator(name: Any, algo_config: Any = None, *, norm_adv_by_std_in_grpo: bool | None = None) -> str:
    """Raise :class:`StepModeError` unless tree mode (:mod:`agent_gym_verl.tree`) can run these settings:
    a GRPO estimator (:data:`TREE_ESTIMATORS`), ``norm_adv_by_std_in_grpo`` on and ``use_kl_in_reward`` off.

    Args:
        name: ``algorithm.adv_estimator``.
        algo_config: ``algorithm`` (read: ``norm_adv_by_std_in_grpo``, ``use_kl_in_reward``).
        norm_adv_by_std_in_grpo: the value verl passes to ``compute_advantage`` (wins over the config's).

    Returns:
        The estimator's name.
    """
    value = name.value if hasattr(name, "value") else str(name)
    if value not in TREE_ESTIMATORS:
        raise StepModeError(
            f"tree mode (agent_gym.tree) computes per-state GRPO advantages, so it runs "
            f"algorithm.adv_estimator={' or '.join(sorted(TREE_ESTIMATORS))}, not {value!r}; set "
            "algorithm.adv_estimator=grpo, or drop agent_gym.tree to train flat episodes with this estimator"
        )
    norm = norm_adv_by_std_in_grpo
    if norm is None and algo_config is not None:
        norm = _cfg_get(algo_config, "norm_adv_by_std_in_grpo", True)
    if norm is False:
        raise StepModeError(
            "tree mode (agent_gym.tree): its per-state groups are normalised by their standard deviation "
            "(agent_gym.rollout.tree.tree_advantages), so algorithm.norm_adv_by_std_in_grpo=False is not "
            "supported; set it to True or drop agent_gym.tree"
        )
    if algo_config is not None and _cfg_get(algo_config, "use_kl_in_reward", False):
        raise StepModeError(
            "tree mode (agent_gym.tree) compares env returns, so algorithm.use_kl_in_reward=True would be "
            "ignored; set it to False and use actor_rollout_ref.actor.use_kl_loss=True for a KL term"
        )
    return value


def _cfg_get(cfg: Any, key: str, default: Any) -> Any:
    try:
        return cfg.get(key, default)
    except AttributeError:
        return getattr(cfg, key, default)


def is_step_batch(batch: Any) -> bool:
    """True when ``batch`` holds step-mode trajectory rows still to expand."""
    steps = batch.non_tensor_batch.get(STEPS_KEY)
    return steps is not None and any(s is not None and len(s) > 0 for s in steps)


def is_expanded(batch: Any) -> bool:
    """True when ``batch`` has been through :func:`expand_step_batch`."""
    return TRAJ_KEY in batch.non_tensor_batch


# -- expansion -------------------------------------------------------------------------------------------


def _row_sample(batch: Any, i: int) -> dict[str, Any]:
    """A concat-mode (or any un-expanded) row as one sample: its unpadded pieces."""
    b = batch.batch
    width = b["prompts"].shape[1]
    attn = b["attention_mask"][i]
    p_valid = attn[:width].bool()
    r_valid = attn[width:].bool()
    sample = {
        "prompt": b["prompts"][i][p_valid].tolist(),
        "response": b["responses"][i][r_valid].tolist(),
        "mask": b["response_mask"][i][r_valid].tolist(),
        "logprobs": b["rollout_log_probs"][i][r_valid].tolist() if "rollout_log_probs" in b.keys() else None,
        "rewards": b["rm_scores"][i][r_valid].tolist() if "rm_scores" in b.keys() else None,
        # verl puts an empty response's score on a padding slot (its response_length - 1 is -1)
        "reward_no_tokens": float(b["rm_scores"][i][~r_valid].sum()) if "rm_scores" in b.keys() else 0.0,
    }
    return sample


def _step_sample(step: dict[str, Any]) -> dict[str, Any]:
    """A carried sample (a segment or a single step, see ``samples.step_samples``) as tensor rows."""
    response = [int(t) for t in np.asarray(step["response_ids"]).tolist()]
    lps = step.get("logprobs")
    if "response_mask" in step:  # a segment: policy ids and env ids
        mask = [int(m) for m in np.asarray(step["response_mask"]).tolist()]
    else:
        mask = [1] * len(response)
    if "token_rewards" in step:  # placed by step_samples (an empty action's reward included)
        rewards = [float(x) for x in np.asarray(step["token_rewards"]).tolist()]
        no_tokens = float(step.get("unplaced_reward", 0.0))
    else:  # a bare step: its reward on its last id
        rewards = [0.0] * len(response)
        if response:
            rewards[-1] = float(step.get("reward", 0.0))
        no_tokens = 0.0 if response else float(step.get("reward", 0.0))
    return {
        "prompt": [int(t) for t in np.asarray(step["prompt_ids"]).tolist()],
        "response": response,
        "mask": mask,
        "logprobs": None if lps is None else [float(x) for x in np.asarray(lps).tolist()],
        "rewards": rewards,
        "reward_no_tokens": no_tokens,
    }


def _copied_tensor_keys(batch: Any) -> list[str]:
    """The per-row tensors expansion copies to each sample of their row; raises :class:`StepModeError` for a
    batch it cannot expand (router replay, distillation, multi-modal inputs, a per-token field of its own)."""
    b = batch.batch
    for key in b.keys():
        if key in ("routed_experts", "teacher_logprobs", "teacher_ids"):
            raise StepModeError(f"step mode cannot expand rows carrying {key!r} (router replay / distillation)")
    if "position_ids" in b.keys() and b["position_ids"].dim() != 2:
        raise StepModeError("step mode supports text models only (position_ids must be 2-D)")
    if "multi_modal_inputs" in batch.non_tensor_batch and any(
        m for m in batch.non_tensor_batch["multi_modal_inputs"] if m
    ):
        raise StepModeError("step mode supports text models only (multi_modal_inputs found)")
    seq_widths = {b["prompts"].shape[1] + b["responses"].shape[1], b["responses"].shape[1]}
    copy_keys: list[str] = []
    for key in b.keys():
        if key in _SEQ_KEYS:
            continue
        t = b[key]
        if t.dim() >= 2 and t.shape[1] in seq_widths and key not in ("reward_baselines", "dummy_tensor"):
            raise StepModeError(
                f"step mode cannot expand the per-token field {key!r} (it was computed on trajectory rows)"
            )
        copy_keys.append(key)
    return copy_keys


@dataclass
class _SampleRows:
    """The rows of an expanded batch before packing: each row's unpadded sample and where it comes from."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    src: list[int] = field(default_factory=list)  # the trajectory row whose other fields the sample gets
    # trajectory id: numbered from 0 in batch order (the source row when every row is one trajectory),
    # negative on pad rows
    traj: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)  # 0-based sample index within its trajectory
    num_steps: list[int] = field(default_factory=list)  # samples in its trajectory
    tree: list[int] = field(default_factory=list)  # tree rows: the source row (the tree); -1 otherwise
    tree_adv: list[np.ndarray | None] = field(default_factory=list)  # tree rows: per-response-id advantages
    tree_root: list[np.ndarray | None] = field(default_factory=list)  # tree rows: per-response-id root-prefix flags
    n_real: int = 0  # rows before the pad rows

    def add(
        self, sample: dict[str, Any], *, src: int, traj: int, step: int, num_steps: int, carried: dict[str, Any] | None = None
    ) -> None:
        """Append a row: ``sample`` (packed later), its source row, trajectory, step and step count, and
        from ``carried`` (the sample as the agent loop carried it) a tree sample's advantages and flags."""
        self.samples.append(sample)
        self.src.append(src)
        self.traj.append(traj)
        self.step.append(step)
        self.num_steps.append(num_steps)
        if carried is not None and tree_mode.SAMPLE_ADVANTAGES in carried:
            self.tree.append(src)
            self.tree_adv.append(np.asarray(carried[tree_mode.SAMPLE_ADVANTAGES], dtype=np.float32))
            self.tree_root.append(np.asarray(carried[tree_mode.SAMPLE_ROOT_PREFIX], dtype=bool))
        else:
            self.tree.append(-1)
            self.tree_adv.append(None)
            self.tree_root.append(None)

    @property
    def n_pad(self) -> int:
        return len(self.samples) - self.n_real

    @property
    def has_trees(self) -> bool:
        return any(t >= 0 for t in self.tree)


def _trajectories_of(steps: Any) -> list[list[dict[str, Any]]]:
    """A row's carried samples grouped by trajectory, in order: one group, or a tree's trajectories."""
    groups: OrderedDict[Any, list[dict[str, Any]]] = OrderedDict()
    tree = tree_mode.SAMPLE_ADVANTAGES in steps[0]
    for step in steps:
        groups.setdefault(step.get("trajectory_id") if tree else None, []).append(step)
    return list(groups.values())


def _sample_rows(batch: Any) -> _SampleRows:
    """The batch's samples in row order: a step-mode row's carried samples (a tree row's trajectory by
    trajectory), any other row as one sample."""
    steps_col = batch.non_tensor_batch.get(STEPS_KEY)
    rows = _SampleRows()
    traj = 0
    for i in range(len(batch)):
        steps = None if steps_col is None else steps_col[i]
        if steps is not None and len(steps) > 0:
            for group in _trajectories_of(steps):
                for k, step in enumerate(group):
                    rows.add(_step_sample(step), src=i, traj=traj, step=k, num_steps=len(group), carried=step)
                traj += 1
        else:
            rows.add(_row_sample(batch, i), src=i, traj=traj, step=0, num_steps=1)
            traj += 1
    rows.n_real = len(rows.samples)
    return rows


def _add_pad_rows(rows: _SampleRows, pad_to_multiple: int) -> None:
    """Appends the pad rows that make the row count a multiple of ``pad_to_multiple``."""
    samples = rows.samples
    n_real = rows.n_real
    for k in range((-n_real) % max(1, int(pad_to_multiple))):
        # The shortest real sample, fully masked: a valid forward pass that carries no loss (nor any
        # tree advantage: the pad rows are left out of every group).
        j = min(range(n_real), key=lambda s: len(samples[s]["prompt"]) + len(samples[s]["response"]))
        pad = dict(samples[j])
        pad["mask"] = [0] * len(pad["response"])
        pad["rewards"] = [0.0] * len(pad["response"])
        pad["reward_no_tokens"] = 0.0
        rows.add(pad, src=rows.src[j], traj=-1 - k, step=0, num_steps=1)


@dataclass
class _Packed:
    """Samples as verl's row tensors, prompts left-padded to the longest prompt and responses right-padded
    to the longest response (``prompts`` ... ``position_ids``, ``rollout_log_probs``, ``rm_scores``)."""

    tensors: dict[str, torch.Tensor]
    prompt_width: int
    response_width: int


def _pack_samples(samples: list[dict[str, Any]], pad_token_id: int, *, with_logprobs: bool, with_rewards: bool) -> _Packed:
    """The samples' ids, masks, log-probs (``with_logprobs``) and token rewards (``with_rewards``) as padded
    tensors, plus the attention mask and position ids verl computes from them."""
    n = len(samples)
    p_len = max(1, max(len(s["prompt"]) for s in samples))
    r_len = max(1, max(len(s["response"]) for s in samples))
    prompts = torch.full((n, p_len), pad_token_id, dtype=torch.long)
    responses = torch.full((n, r_len), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((n, r_len), dtype=torch.long)
    attention = torch.zeros((n, p_len + r_len), dtype=torch.long)
    logprobs = torch.zeros((n, r_len), dtype=torch.float32) if with_logprobs else None
    rm_scores = torch.zeros((n, r_len), dtype=torch.float32) if with_rewards else None
    for row, s in enumerate(samples):
        pl, rl = len(s["prompt"]), len(s["response"])
        if pl:
            prompts[row, p_len - pl :] = torch.tensor(s["prompt"], dtype=torch.long)
            attention[row, p_len - pl : p_len] = 1
        if rl:
            responses[row, :rl] = torch.tensor(s["response"], dtype=torch.long)
            response_mask[row, :rl] = torch.tensor(s["mask"], dtype=torch.long)
            attention[row, p_len : p_len + rl] = 1
            if logprobs is not None and s["logprobs"] is not None:
                logprobs[row, :rl] = torch.tensor(s["logprobs"], dtype=torch.float32)
            if rm_scores is not None and s["rewards"] is not None:
                rm_scores[row, :rl] = torch.tensor(s["rewards"], dtype=torch.float32)
        if rm_scores is not None and s.get("reward_no_tokens"):
            # A trajectory with no policy id: where verl puts an empty response's score (its last
            # response slot, a padding slot when there is none), counted in the row's return only.
            rm_scores[row, rl - 1 if rl else r_len - 1] += float(s["reward_no_tokens"])
    tensors: dict[str, torch.Tensor] = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0),
    }
    if logprobs is not None:
        tensors["rollout_log_probs"] = logprobs
    if rm_scores is not None:
        tensors["rm_scores"] = rm_scores
    return _Packed(tensors, p_len, r_len)


def _expanded_non_tensors(batch: Any, rows: _SampleRows) -> dict[str, np.ndarray]:
    """The expanded rows' non-tensor fields: their source row's (the carried samples left out), the
    trajectory, step, step-count and pad columns, and a uid of its own for each pad row."""
    src = np.asarray(rows.src, dtype=np.int64)
    non_tensor: dict[str, np.ndarray] = {}
    for key, arr in batch.non_tensor_batch.items():
        if key == STEPS_KEY:
            continue
        non_tensor[key] = arr[src]
    n_real, n_pad = rows.n_real, rows.n_pad
    non_tensor[TRAJ_KEY] = np.asarray(rows.traj, dtype=np.int64)
    non_tensor[STEP_KEY] = np.asarray(rows.step, dtype=np.int64)
    non_tensor[NUM_STEPS_KEY] = np.asarray(rows.num_steps, dtype=np.int64)
    non_tensor[PAD_KEY] = np.asarray([False] * n_real + [True] * n_pad, dtype=bool)
    if rows.has_trees:
        non_tensor[TREE_KEY] = np.asarray(rows.tree, dtype=np.int64)
        for key, values in ((TREE_ADV_KEY, rows.tree_adv), (TREE_ROOT_KEY, rows.tree_root)):
            column = np.empty(len(values), dtype=object)
            column[:] = values
            non_tensor[key] = column
    if "uid" in non_tensor and n_pad:
        uid = non_tensor["uid"].copy()
        uid[n_real:] = [f"__agent_gym_pad_{k}__" for k in range(n_pad)]
        non_tensor["uid"] = uid
    return non_tensor


def _expansion_metrics(batch: Any, rows: _SampleRows, packed: _Packed) -> dict[str, float]:
    """``agent_gym/step/*``: the expansion's row counts and widths, and how much of it is padding."""
    b = batch.batch
    n_real = rows.n_real
    p_len, r_len = packed.prompt_width, packed.response_width
    steps_col = batch.non_tensor_batch.get(STEPS_KEY)
    slots = len(rows.samples) * (p_len + r_len)
    real_tokens = int(packed.tensors["attention_mask"][:n_real].sum())
    fixed_slots = n_real * (int(b["prompts"].shape[1]) + int(b["responses"].shape[1]))
    # samples per trajectory of the step-mode rows (a tree row holds several trajectories)
    carried = {t: n for t, n, src in zip(rows.traj[:n_real], rows.num_steps[:n_real], rows.src[:n_real])
               if steps_col is not None and steps_col[src] is not None and len(steps_col[src]) > 0}
    traj_steps = list(carried.values())
    return {
        "agent_gym/step/trajectories": float(len(set(rows.traj[:n_real]))),
        "agent_gym/step/samples": float(n_real),
        "agent_gym/step/pad_rows": float(rows.n_pad),
        "agent_gym/step/prompt_width": float(p_len),
        "agent_gym/step/response_width": float(r_len),
        # Share of the expanded tensors that is padding (incl. pad rows) ...
        "agent_gym/step/padding_fraction": 1.0 - real_tokens / slots if slots else 0.0,
        # ... and what padding every step to rollout.prompt_length + response_length would have cost.
        "agent_gym/step/padding_fraction_if_fixed": 1.0 - real_tokens / fixed_slots if fixed_slots else 0.0,
        # Samples per trajectory (segments, or steps with agent_gym.samples=step) ...
        "agent_gym/step/steps_per_traj/mean": float(np.mean(traj_steps)) if traj_steps else 1.0,
        "agent_gym/step/steps_per_traj/max": float(np.max(traj_steps)) if traj_steps else 1.0,
        # ... and the tokens the update trains on (prompt + response of every real sample).
        "agent_gym/step/trained_tokens": float(real_tokens),
    }


def expand_step_batch(batch: Any, *, pad_token_id: int = 0, pad_to_multiple: int = 1) -> tuple[Any, dict[str, float]]:
    """One row per env step (see the module docstring). Returns the new ``DataProto`` and metrics."""
    b = batch.batch
    copy_keys = _copied_tensor_keys(batch)
    rows = _sample_rows(batch)
    _add_pad_rows(rows, pad_to_multiple)
    packed = _pack_samples(
        rows.samples,
        pad_token_id,
        with_logprobs="rollout_log_probs" in b.keys() or any(s["logprobs"] is not None for s in rows.samples[: rows.n_real]),
        with_rewards="rm_scores" in b.keys() or batch.non_tensor_batch.get(STEPS_KEY) is not None,
    )
    src = torch.tensor(rows.src, dtype=torch.long)
    tensors = {**packed.tensors, **{key: b[key].index_select(0, src) for key in copy_keys}}
    non_tensor = _expanded_non_tensors(batch, rows)
    out = compat.DataProto.from_dict(tensors=tensors, non_tensors=non_tensor, meta_info=dict(batch.meta_info))
    return out, _expansion_metrics(batch, rows, packed)


# -- advantages ------------------------------------------------------------------------------------------


def _trajectory_rows(traj: np.ndarray, steps: np.ndarray, pad: np.ndarray, n: int) -> list[tuple[int, list[int]]]:
    """``(trajectory id, its rows in step order)`` for each trajectory among the first ``n`` rows, in the
    order of their first rows; pad rows left out."""
    groups: OrderedDict[int, list[int]] = OrderedDict()
    for row in range(n):
        if pad[row]:
            continue
        groups.setdefault(int(traj[row]), []).append(row)
    return [(t, sorted(rows, key=lambda r: int(steps[r]))) for t, rows in groups.items()]


def _policy_positions(mask: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The (row, column) indices of a trajectory's policy tokens (``response_mask`` > 0), in step order."""
    r_idx: list[torch.Tensor] = []
    c_idx: list[torch.Tensor] = []
    for row in rows:
        cols = torch.nonzero(mask[row] > 0, as_tuple=False).flatten()
        r_idx.append(torch.full_like(cols, row))
        c_idx.append(cols)
    return (torch.cat(r_idx) if r_idx else torch.zeros(0, dtype=torch.long),
            torch.cat(c_idx) if c_idx else torch.zeros(0, dtype=torch.long))


def _trajectory_view(
    b: Any, order: list[tuple[int, list[int]]], positions: list[tuple[torch.Tensor, torch.Tensor]], uid: np.ndarray
) -> Any:
    """The trajectory view (see the module docstring) as a ``DataProto``, one row per trajectory of ``order``:
    its policy tokens end to end with their rewards and the fields of :data:`_TOKEN_KEYS`, the first row's
    ``reward_baselines`` and ``uid``."""
    mask = b["response_mask"]
    rewards = b["token_level_rewards"]
    n_traj = len(order)
    width = max([1] + [len(p[0]) for p in positions])
    view_rewards = torch.zeros((n_traj, width), dtype=rewards.dtype)
    view_mask = torch.zeros((n_traj, width), dtype=mask.dtype)
    view_tokens = {k: torch.zeros((n_traj, width), dtype=b[k].dtype) for k in _TOKEN_KEYS if k in b.keys()}
    for t, ((_, rows), (r_idx, c_idx)) in enumerate(zip(order, positions)):
        k = len(r_idx)
        if k:
            view_rewards[t, :k] = rewards[r_idx, c_idx]
            view_mask[t, :k] = 1
            for key, view in view_tokens.items():
                view[t, :k] = b[key][r_idx, c_idx]
        # Reward that sits on no policy token (a trajectory without any, whose rewards the expansion
        # left on a response or padding slot) still counts for the trajectory.
        total = sum(float(rewards[row].sum()) for row in rows)
        leftover = total - float(view_rewards[t].sum())
        if abs(leftover) > 0:
            view_rewards[t, max(k - 1, 0)] += leftover

    view_tensors = {"token_level_rewards": view_rewards, "response_mask": view_mask, **view_tokens}
    if "reward_baselines" in b.keys():
        view_tensors["reward_baselines"] = torch.stack([b["reward_baselines"][rows[0]] for _, rows in order])
    view_uid = np.asarray([uid[rows[0]] for _, rows in order], dtype=object)
    return compat.DataProto.from_dict(tensors=view_tensors, non_tensors={"uid": view_uid})


def _advantages_on_rows(
    view: Any, positions: list[tuple[torch.Tensor, torch.Tensor]], like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` shaped like ``like``: the view's values put back on the step rows' policy
    tokens, 0 elsewhere."""
    advantages = torch.zeros_like(like, dtype=torch.float32)
    returns = torch.zeros_like(like, dtype=torch.float32)
    for t, (r_idx, c_idx) in enumerate(positions):
        k = len(r_idx)
        if k:
            advantages[r_idx, c_idx] = view.batch["advantages"][t, :k].to(advantages.dtype)
            returns[r_idx, c_idx] = view.batch["returns"][t, :k].to(returns.dtype)
    return advantages, returns


def _tree_advantages(
    data: Any,
    rows: list[int],
    *,
    adv_estimator: Any,
    base: Callable[..., Any],
    gamma: float,
    lam: float,
    num_repeat: int,
    norm_adv_by_std_in_grpo: bool,
    config: Any,
    advantages: torch.Tensor,
) -> None:
    """Tree rows' advantages into ``advantages`` (see :mod:`agent_gym_verl.tree`): each policy id's
    per-state advantage as the agent loop computed it, and on the root-prefix ids verl's GRPO over the
    prompt's trees (one member per tree, score = the tree's value ``V(T)``)."""
    nt = data.non_tensor_batch
    mask = data.batch["response_mask"]
    tree = nt[TREE_KEY]
    values = nt.get(tree_mode.VALUE_KEY)
    if values is None:
        raise StepModeError(f"tree rows without their tree's value ({tree_mode.VALUE_KEY}): rows of another agent loop?")
    order: OrderedDict[int, int] = OrderedDict()  # tree -> its first row
    for row in rows:
        order.setdefault(int(tree[row]), row)
    view = compat.DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.tensor([[float(values[r])] for r in order.values()], dtype=torch.float32),
            "response_mask": torch.ones((len(order), 1), dtype=mask.dtype),
        },
        non_tensors={"uid": np.asarray([nt["uid"][r] for r in order.values()], dtype=object)},
    )
    view = base(view, adv_estimator=adv_estimator, gamma=gamma, lam=lam, num_repeat=num_repeat,
                norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
    root = {t: float(view.batch["advantages"][i, 0]) for i, t in enumerate(order)}
    for row in rows:
        adv = torch.as_tensor(np.asarray(nt[TREE_ADV_KEY][row], dtype=np.float32))
        prefix = torch.as_tensor(np.asarray(nt[TREE_ROOT_KEY][row], dtype=bool))
        width = len(adv)
        adv = torch.where(prefix, torch.tensor(root[int(tree[row])], dtype=adv.dtype), adv)
        advantages[row, :width] = adv * (mask[row, :width] > 0)


def compute_step_advantage(
    data: Any,
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    *,
    base_compute_advantage: Callable[..., Any] | None = None,
) -> Any:
    """Trajectory-aware advantages for an expanded step batch (see the module docstring); tree rows
    (:mod:`agent_gym_verl.tree`) get their tree advantages.

    Same signature as verl's ``ray_trainer.compute_advantage``; ``base_compute_advantage`` is verl's
    function (it runs on the trajectory view), default: the one in ``verl.trainer.ppo.ray_trainer``.
    Writes ``advantages`` and ``returns`` into ``data.batch`` and returns ``data``.

    Raises:
        StepModeError: an estimator step mode (or, with tree rows, tree mode) does not support, or a batch
            without the trainer's ``uid``.
    """
    name = check_estimator(adv_estimator, config)
    nt = data.non_tensor_batch
    tree = nt.get(TREE_KEY)
    pad = nt.get(PAD_KEY, np.zeros(len(data), dtype=bool))
    n = data.batch["response_mask"].shape[0]
    tree_rows = [] if tree is None else [r for r in range(n) if int(tree[r]) >= 0 and not pad[r]]
    if tree_rows:
        check_tree_estimator(name, config, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    base = base_compute_advantage or compat.ray_trainer_module().compute_advantage
    b = data.batch
    mask = b["response_mask"]
    rewards = b["token_level_rewards"]
    traj = nt[TRAJ_KEY]
    steps = nt[STEP_KEY]
    uid = nt.get("uid")
    if uid is None:
        raise StepModeError("step mode needs the trainer's per-prompt 'uid' to group trajectories")

    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    skip = np.asarray(pad, dtype=bool).copy()
    skip[tree_rows] = True
    order = _trajectory_rows(traj, steps, skip, n)
    if order:
        positions = [_policy_positions(mask, rows) for _, rows in order]
        view = base(
            _trajectory_view(b, order, positions, uid),
            adv_estimator=adv_estimator,
            gamma=gamma,
            lam=lam,
            num_repeat=num_repeat,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )
        advantages, returns = _advantages_on_rows(view, positions, rewards)
    if tree_rows:
        _tree_advantages(data, tree_rows, adv_estimator=adv_estimator, base=base, gamma=gamma, lam=lam,
                         num_repeat=num_repeat, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config,
                         advantages=advantages)
        returns[tree_rows] = advantages[tree_rows]
    for key in (TREE_ADV_KEY, TREE_ROOT_KEY):  # per-token arrays the update has no use for
        nt.pop(key, None)
    b["advantages"] = advantages
    b["returns"] = returns
    data.meta_info.setdefault("agent_gym", {})["adv_estimator"] = name
    if tree_rows:
        data.meta_info["agent_gym"]["tree"] = True
    return data


# -- metrics ---------------------------------------------------------------------------------------------


def tool_call_validity(valid_mean: float | None, answered_mean: float | None) -> float | None:
    """Valid calls / answered calls from the two per-episode means over the same episodes (the ratio of
    the sums); None when either is missing or no call was answered."""
    if valid_mean is None or answered_mean is None or answered_mean <= 0:
        return None
    return float(valid_mean) / float(answered_mean)


def generated_tokens(batch: Any) -> int:
    """The tokens the policy sampled for a batch of trajectory rows (before expansion): the ids with
    response mask 1 of every step-mode sample a row carries (a tree's shared steps are carried once, by the
    trajectory that generated them) and of every other row's response. verl's own ``response_length``
    cannot give this: it counts the env's tokens (tool replies) too and, in step mode, the expanded rows,
    filler rows included."""
    steps_col = batch.non_tensor_batch.get(STEPS_KEY)
    mask = batch.batch["response_mask"] if "response_mask" in batch.batch.keys() else None
    total = 0
    for i in range(len(batch)):
        steps = None if steps_col is None else steps_col[i]
        if steps is not None and len(steps) > 0:
            for step in steps:  # a segment masks the env's ids; a single step is all policy ids
                total += int(np.sum(step["response_mask"])) if "response_mask" in step else len(step["response_ids"])
        elif mask is not None:
            total += int(mask[i].sum())
    return total


def trajectory_metrics(batch: Any) -> dict[str, float]:
    """Env metrics of a batch of trajectory rows (before expansion): turns, tool use, reward parts, and
    ``agent_gym/generated_tokens`` (:func:`generated_tokens`: summed over steps, the x-axis on which runs
    that sample differently, e.g. tree against flat rollouts, compare at equal cost)."""
    nt = batch.non_tensor_batch
    metrics: dict[str, float] = {"agent_gym/generated_tokens": float(generated_tokens(batch))}

    def mean(key: str) -> float | None:
        if key not in nt:
            return None
        vals = [float(v) for v in nt[key] if v is not None]
        return float(np.mean(vals)) if vals else None

    for key, name in (
        ("agent_gym_turns", "turns"),
        ("acc", "acc"),
        ("tool_calls", "tool_calls"),
        ("tool_errors", "tool_errors"),
        ("tool_calls_valid", "tool_calls_valid"),
        ("tool_calls_answered", "tool_calls_answered"),
        ("format_errors", "format_errors"),
        ("truncated", "truncated"),
        ("answer_f1", "answer_f1"),
    ):
        value = mean(key)
        if value is not None:
            metrics[f"agent_gym/{name}/mean"] = value
    for key, name in (
        (tree_mode.TRAJECTORIES_KEY, "trajectories"),
        (tree_mode.GENERATED_STEPS_KEY, "generated_steps"),
        (tree_mode.FLAT_STEPS_KEY, "flat_steps"),
        (tree_mode.VALUE_KEY, "value"),
    ):
        value = mean(key)
        if value is not None:  # tree mode: per tree
            metrics[f"agent_gym/tree/{name}/mean"] = value
    validity = tool_call_validity(metrics.get("agent_gym/tool_calls_valid/mean"), metrics.get("agent_gym/tool_calls_answered/mean"))
    if validity is not None:
        metrics["agent_gym/tool_call_validity"] = validity
    comps = nt.get("agent_gym_reward_components")
    if comps is not None:
        keys: Sequence[str] = sorted({k for c in comps if c for k in c})
        for k in keys:
            metrics[f"agent_gym/reward/{k}/mean"] = float(np.mean([float((c or {}).get(k, 0.0)) for c in comps]))
    return metrics
