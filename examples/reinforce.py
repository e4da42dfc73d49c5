"""Group-normalised REINFORCE on any agent-r1-gym env, in plain PyTorch and the public API only.

    python examples/reinforce.py --iterations 60 --csv runs/reinforce.csv --png runs/reinforce.png
    python examples/reinforce.py --env-id AgentR1/Countdown-v0 --env-kwarg difficulty=easy --max-new-tokens 128

Defaults: AgentR1/Arithmetic-v0 at level 1 (`What is 7 + 9?`) with SmolLM2-135M-Instruct, the whole
model trained (135M parameters, fp32, fits a laptop's CPU), 4 tasks x 8 samples per iteration.

Each iteration samples `--prompts` tasks, plays `--group` episodes of each at temperature 1 (the
policy's exact token ids go to `env.step`), scores every episode by its return relative to its own
group, advantage = (r - mean) / (std + eps), and takes one AdamW step on
loss = -mean(advantage * sum of the log-probs of the episode's action tokens) (the default layout and
aggregation, below). A greedy eval on fixed test-split tasks before and after training shows that the
rise is not sampling noise. Generation and the update run the ids that every row of a batch starts with
(the system prompt, a demonstration) once, through a key/value cache shared by the rows (its gradient
flows through every row): the same numbers as running each row whole, for a fraction of the cost.

With `--tree WIDTH` each task is one tree of episodes instead (`agent_gym.rollout.play_tree`): the
episode branches `WIDTH` ways at every step (env snapshots, the shared prefix generated once) up to
`--group` leaves, and each generated action gets its per-state advantage (`tree_advantages`: the
continuations from one state form the group); a single-turn env's tree is a flat group of `WIDTH`.
The branches play in envs of one `EnvPool`, made in the first iteration and reused by every later one.

The CSV's `tokens` column (and the progress bar) counts the action tokens the policy generated in the
iteration, `tokens_total` those of the run so far: a tree generates a shared prefix once, so tree and
flat runs are compared at equal `tokens_total`, not at equal iterations. `samples` counts the rows the
update trained on, `trained_tokens` their ids (prompt + response, the update's cost), `turns` the mean
policy steps per episode.

Sample layouts (`--samples`, flat episodes; the two layouts of the verl adapter's concat mode and its
`agent_gym.samples=step`). Both arms play the same episodes and give every step of an episode the
episode's GRPO advantage A_e (its return normalised within its task's group); they differ only in the
rows the update sees and so in how `--loss-agg` weights each policy token:

  concat  one row per episode: its first prompt, then every action and env turn after it, the env's ids
          masked out; one loss term per episode (N terms, N = the iteration's episodes)
  step    one row per step (Agent-R1's layout): the step's whole context as prompt, its action as
          response; one loss term per step (S terms, S = the iteration's steps, all episodes)

loss = -sum over policy tokens of w * log p(token), with for a token of step k of episode e
(T_e = the episode's policy tokens, t_ek = the step's, M = all policy tokens of the iteration):

  --loss-agg            concat           step
  seq-mean-token-sum    A_e / N          A_e / S           (the default; the same up to the scale N/S)
  seq-mean-token-mean   A_e / (N T_e)    A_e / (S t_ek)
  token-mean            A_e / M          A_e / M           (identical: the layout cannot matter)

So with seq-mean-token-mean an episode's tokens weigh A_e / N in all under concat and A_e K_e / S under
step (K_e its steps, S / N the mean): step gives an episode of more turns more weight and splits it
equally between its turns, so a short turn's tokens (a tool call) weigh more than a long turn's. The
log-probs are the same in both layouts (an append-only env's step context is a prefix of the episode's
row); an env that rewrites its context gives concat one row per segment, still one loss term per
episode. `--tree` trains step rows (its advantages are per step), seq-mean-token-sum over the leaves.
docs/performance.md compares the two layouts (examples/compare_reinforce_layouts.py).
"""

from __future__ import annotations

import os

# Threads sleep rather than spin while they wait: on a CPU shared with other work, spinning OpenMP
# threads made a decode step 8x slower. Read once when torch loads, so it is set before the import
# (and only when run as a script: importing this file leaves the importer's process alone).
if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import asyncio
import csv
import json
import math
import time
from dataclasses import dataclass

import gymnasium as gym
import torch
from tqdm import tqdm

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.models import load_causal_lm, load_tokenizer
from agent_gym.rollout import Generation, play_episode
from agent_gym.rollout.async_runner import run_sync
from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.pool import EnvPool, PoolKey
from agent_gym.rollout.prefix_cache import cache_keyword, cache_layers, make_cache, supports_prefix_cache
from agent_gym.rollout.tree import TreeStats, play_tree, tree_advantages

COLUMNS = ["iteration", "mean_reward", "accuracy", "loss", "tokens", "tokens_total", "seconds", "greedy_accuracy", "greedy_se",
           "samples", "trained_tokens", "turns"]
#: `--samples`: the update's rows, one per episode or one per step (see the module docstring).
LAYOUTS = ("concat", "step")
#: `--loss-agg`: verl's names (actor.loss_agg_mode) for how token log-probs combine into the loss.
LOSS_AGGS = ("seq-mean-token-sum", "seq-mean-token-mean", "token-mean")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", default="AgentR1/Arithmetic-v0", help="a registered env id (default: %(default)s)")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="constructor argument for gym.make, VALUE read as JSON if it parses (repeatable; default for Arithmetic-v0: level=1)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="load_causal_lm name or path (default: %(default)s)")
    p.add_argument("--iterations", type=int, default=30, help="optimizer steps (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=4, help="tasks per iteration (default: %(default)s)")
    p.add_argument("--group", type=int, default=8, help="episodes sampled per task, G (default: %(default)s)")
    p.add_argument("--tree", type=int, default=0, metavar="WIDTH",
                   help="tree rollouts: per task one tree branching WIDTH ways at every step, up to --group leaves, "
                        "per-state advantages (0: --group flat episodes per task; default: %(default)s)")
    p.add_argument("--samples", choices=LAYOUTS, default=None,
                   help="the update's rows: concat = one per episode (env ids masked, one loss term per episode), "
                        "step = one per step (its whole context + its action, one loss term per step); same episodes, "
                        "same advantages (default: concat; --tree trains per step)")
    p.add_argument("--loss-agg", choices=LOSS_AGGS, default=None,
                   help="how token log-probs combine: seq-mean-token-sum = mean over loss terms of each term's sum, "
                        "seq-mean-token-mean = mean over terms of each term's token mean, token-mean = mean over every "
                        "policy token (identical for both --samples). Per-token weight of a token of step k of episode e, "
                        "advantage A_e: concat A_e/N, A_e/(N*T_e), A_e/M; step A_e/S, A_e/(S*t_ek), A_e/M (N episodes, "
                        "S steps, M policy tokens in the iteration; T_e, t_ek the episode's and the step's policy tokens) "
                        "(default: seq-mean-token-sum)")
    p.add_argument("--lr", type=float, default=5e-6, help="AdamW learning rate, full model (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens generated per turn at most (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seeds torch sampling and the training tasks (default: %(default)s)")
    p.add_argument("--eval-tasks", type=int, default=64, help="test-split tasks of the greedy eval, 0: none (default: %(default)s)")
    p.add_argument("--eval-every", type=int, default=10, help="greedy eval every N iterations too, 0: only at start and end (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device of the model, e.g. cuda (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    p.add_argument("--csv", default="runs/reinforce.csv", help="per-iteration CSV (default: %(default)s)")
    p.add_argument("--png", default=None, help="plot of the CSV, written at the end (default: none)")
    args = p.parse_args(argv)
    if args.tree and (args.samples == "concat" or args.loss_agg not in (None, "seq-mean-token-sum")):
        p.error("--tree trains each generated step as its own row with its per-state advantage, summed and divided by "
                "the leaves: drop --samples concat and --loss-agg")
    args.samples = args.samples or ("step" if args.tree else "concat")
    args.loss_agg = args.loss_agg or "seq-mean-token-sum"
    args.kwargs = {"level": 1} if not args.env_kwarg and args.env_id == "AgentR1/Arithmetic-v0" else {}
    for item in args.env_kwarg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--env-kwarg wants KEY=VALUE, got {item!r}")
        try:
            args.kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            args.kwargs[key] = value
    return args


def shared_prefix(rows: list[list[int]], keep: int = 1) -> int:
    """Length of the ids every row starts with, leaving at least `keep` ids of each row after it (the
    system prompt and demonstration every episode of a batch shares; computed once, not per row)."""
    n = min(len(r) for r in rows) - keep
    first = rows[0]
    for r in rows[1:]:
        k = 0
        while k < n and r[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def prefix_cache(model, prefix: list[int], rows: int):
    """The key/value cache of `prefix` run once, repeated for `rows` rows (None for an empty prefix). With
    grad enabled the prefix's graph is shared by the rows: its gradient is the rows' sum, exactly as if
    every row ran the prefix itself."""
    if not prefix:
        return None
    out = model(input_ids=torch.tensor([prefix], device=model.device), use_cache=True)
    layers = cache_layers(getattr(out, "cache", None) or out.past_key_values)
    return make_cache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in layers])


def generate(model, prompts: list[list[int]], eot: list[int], pad: int, greedy: bool, max_new: int) -> list[list[int]]:
    """One batched decode: greedy, or sampling at temperature 1 from the full distribution; each row ends at
    its first end-of-turn id, as the env wants. The ids all prompts share (system prompt, demonstration) run
    once; the rest are left-padded after them, the padding masked and skipped by the position ids."""
    with torch.no_grad():
        start = shared_prefix(prompts) if supports_prefix_cache(model) else 0  # a sliding window cannot be shared
        kw = cache_keyword(model)
        cache = prefix_cache(model, prompts[0][:start], len(prompts))
        tails = [q[start:] for q in prompts]
        width = max(map(len, tails))
        ids = torch.tensor([[pad] * (width - len(t)) + t for t in tails], device=model.device)
        mask = torch.tensor([[1] * start + [0] * (width - len(t)) + [1] * len(t) for t in tails], device=model.device)
        position = (mask.cumsum(-1) - 1).clamp(min=0)[:, start:]
        out: list[list[int]] = [[] for _ in prompts]
        done = torch.zeros(len(prompts), dtype=torch.bool, device=model.device)
        stop = torch.tensor(eot, device=model.device)
        for _ in range(max_new):
            step = model(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True, logits_to_keep=1, **{kw: cache})
            cache = getattr(step, "cache", None) or step.past_key_values
            logits = step.logits[:, -1].float()
            nxt = logits.argmax(-1) if greedy else torch.multinomial(torch.softmax(logits, -1), 1).squeeze(-1)
            for i in torch.nonzero(~done).flatten().tolist():
                out[i].append(int(nxt[i]))
            done |= torch.isin(nxt, stop)
            if bool(done.all()):
                break
            ids = torch.where(done, torch.tensor(pad, device=model.device), nxt)[:, None]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            position = position[:, -1:] + 1
    return out


def play(model, envs, resets, eot, pad, greedy, max_new):
    """Play one episode per env (reset with the kwargs in `resets`) through agent_gym's episode engine;
    returns their `Trajectory`s, in env order.

    Each episode is one `play_episode`; the Batcher puts one turn of every live episode into each batched
    `generate` (in env order), so the model runs once per round, not once per episode."""

    def batch(prompts):
        return [Generation(ids, None, "stop") for ids in generate(model, prompts, eot, pad, greedy, max_new)]

    async def episodes():
        batcher = Batcher(batch, lockstep=True, live=len(envs))
        runner = asyncio.ensure_future(batcher.run())

        async def one(i):
            try:
                return await play_episode(envs[i], lambda prompt: batcher.generate(prompt, slot=i), seed=resets[i].get("seed"))
            finally:
                batcher.finished()

        trajectories = await asyncio.gather(*(one(i) for i in range(len(envs))))
        await runner
        return trajectories

    return run_sync(episodes)


def branch_pool(tokenizer, trees: int, leaves: int) -> EnvPool:
    """The pool the branches of `trees` concurrent trees of at most `leaves` leaves play in: a tree plays
    at most `leaves - 1` branches at once (its root plays in the caller's env), so keeping that many idle
    envs per tree means no iteration after the first makes an env."""
    return EnvPool(tokenizer, max_idle=trees * max(leaves - 1, 1))


def play_trees(generate_batch, envs, resets, width: int, leaves: int, pool: EnvPool | None = None):
    """One tree per env (`play_tree`, branching `width` ways at every step, at most `leaves` leaves), all
    trees at once, their turns batched as they come. Returns per tree: its trajectories, the training
    turns ((prompt ids, action ids), advantage) of every generated step with a nonzero advantage (a step
    a branch shares with its parent is trained once, in the parent), and its `TreeStats`.

    Each branch plays in an env of `pool` (envs of the root's id and arguments), given back to it when the
    branch ends and closed if the branch raised (its state is unknown). Without `pool`, one made here and
    closed on return: pass the run's pool so that later calls reuse its envs instead of making new ones."""
    own = pool is None
    if pool is None:
        pool = branch_pool(None, len(envs), leaves)
    leased: dict[int, PoolKey] = {}  # id(env) -> its key, for the release

    def env_source(env):
        spec = env.unwrapped.spec  # the root's gym.make arguments: a branch env must be interchangeable
        kwargs = dict(spec.kwargs)
        tokenizer = kwargs.pop("tokenizer", None)

        def make_env():
            key, branch = pool.acquire(spec.id, kwargs, tokenizer=tokenizer)
            leased[id(branch)] = key
            return branch

        return make_env

    def release_env(env, played: bool) -> None:
        key = leased.pop(id(env))
        if played:
            pool.release(key, env)
        else:
            env.close()

    async def trees():
        batcher = Batcher(generate_batch, max_wait_s=0.05)  # branches appear and end: no fixed rounds
        runner = asyncio.ensure_future(batcher.run())

        async def one(i):
            batcher.started()
            stats = TreeStats()
            try:
                tree = await play_tree(envs[i], batcher.generate, width=width, branch_at="every", max_leaves=leaves,
                                       make_env=env_source(envs[i]), release_env=release_env,
                                       seed=resets[i].get("seed"), task_id=resets[i].get("task_id"), stats=stats)
            finally:
                batcher.finished()
            return tree, stats

        try:
            return await asyncio.gather(*(one(i) for i in range(len(envs))))
        finally:
            runner.cancel()

    try:
        played = run_sync(trees)
    finally:
        if own:
            pool.close()
    out = []
    for tree, stats in played:
        advantages = tree_advantages(tree)
        turns = [((s.prompt_ids, s.response_ids), a) for t in tree for s, a in zip(t.steps, advantages[t.id]) if a]
        out.append((tree, turns, stats))
    return out


def grpo_advantages(returns: list[float], group: int) -> list[float]:
    """(r - group mean) / (group std + 1e-4) of consecutive groups of `group` returns (std with Bessel's
    correction; a group of one gets 0)."""
    if group == 1:  # no one to compare with
        return [0.0] * len(returns)
    r = torch.tensor(returns, dtype=torch.float32).view(-1, group)
    return torch.nan_to_num((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten().tolist()


@dataclass
class Sample:
    """One row of the update: `prompt_ids`, then `response_ids` with `mask` 1 on the policy's ids and 0 on
    the env's; `advantage` is its episode's; `term` numbers the loss term it belongs to (its episode in
    concat, its own step in step layout)."""

    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    advantage: float
    term: int


def layout(trajectories: list, advantages: list[float], kind: str) -> tuple[list[Sample], int]:
    """The update's rows for `trajectories` (episode i has advantage `advantages[i]`) in layout `kind`
    ("concat" or "step", see the module docstring), and the number of loss terms (N or S)."""
    if kind not in LAYOUTS:
        raise ValueError(f"sample layout must be one of {LAYOUTS}, got {kind!r}")
    samples: list[Sample] = []
    if kind == "concat":
        for i, (t, a) in enumerate(zip(trajectories, advantages)):
            for seg in t.segments():  # one for an append-only env; a context rewrite starts another
                keep = max((j + 1 for j, m in enumerate(seg.response_mask) if m), default=0)  # a tail of env ids trains nothing
                samples.append(Sample(list(seg.prompt_ids), list(seg.response_ids[:keep]), list(seg.response_mask[:keep]), a, i))
        return samples, len(trajectories)
    for t, a in zip(trajectories, advantages):
        for s in t.steps:
            samples.append(Sample(list(s.prompt_ids), list(s.response_ids), [1] * len(s.response_ids), a, len(samples)))
    return samples, len(samples)


def token_weights(samples: list[Sample], terms: int, loss_agg: str) -> list[list[float]]:
    """Each sample's per-response-id loss weight w (loss = -sum w log p; 0 on env ids), as the module
    docstring's table gives it for `loss_agg`, with `terms` loss terms (N or S; terms without a sample, or
    without a policy id, count too: a zero-advantage episode still counts in the mean)."""
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss aggregation must be one of {LOSS_AGGS}, got {loss_agg!r}")
    per_term: dict[int, int] = {}
    for s in samples:
        per_term[s.term] = per_term.get(s.term, 0) + sum(s.mask)
    every = sum(per_term.values())
    out = []
    for s in samples:
        if loss_agg == "token-mean":
            w = s.advantage / every if every else 0.0
        elif loss_agg == "seq-mean-token-sum":
            w = s.advantage / terms
        else:
            w = s.advantage / (terms * per_term[s.term]) if per_term[s.term] else 0.0
        out.append([w * m for m in s.mask])
    return out


def weighted_logprob_sum(model, rows: list[tuple[list[int], list[int], list[float]]], pad: int) -> torch.Tensor:
    """sum over rows and response ids of w * log p(id | everything before it), for (prompt, response,
    per-response-id weights w) rows run as one batch: the ids all rows share once (`prefix_cache`, its
    gradient through every row), the rest right-padded, logits only where a weight is."""
    seqs = [q + a for q, a, _ in rows]
    # at least one prompt id of each row left to predict from
    start = shared_prefix([q for q, _, _ in rows]) if supports_prefix_cache(model) else 0
    cache = prefix_cache(model, seqs[0][:start], len(rows))
    tails = [x[start:] for x in seqs]
    width = max(map(len, tails))
    ids = torch.tensor([t + [pad] * (width - len(t)) for t in tails], device=model.device)
    mask = torch.tensor([[1] * (start + len(t)) + [0] * (width - len(t)) for t in tails], device=model.device)
    # the weight of the id at tail position j sits at j - 1, where the logits predict it
    w = torch.tensor([[0.0] * (len(q) - start - 1) + list(ws) + [0.0] * (width - len(q) - len(a) + start) for q, a, ws in rows],
                     device=model.device, dtype=torch.float32)
    keep = torch.nonzero(w.ne(0).any(0)).flatten()  # the positions whose logits any row needs
    logits = model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(start, start + width, device=model.device).expand(len(rows), -1),
                   logits_to_keep=keep, **{cache_keyword(model): cache}).logits.float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, keep + 1, None]).squeeze(-1)
    return (logp * w[:, keep]).sum()


def policy_loss_backward(model, rows: list[tuple[list[int], list[int], list[float]]], pad: int, micro: int = 8) -> float:
    """Backpropagate loss = -sum w log p over `rows` in micro-batches (which keep the (batch, length,
    vocab) logits small); rows whose weights are all 0 are skipped. Returns the loss."""
    rows = [r for r in rows if any(r[2])]
    total = 0.0
    for b in range(0, len(rows), micro):
        loss = -weighted_logprob_sum(model, rows[b: b + micro], pad)
        loss.backward()
        total += loss.item()
    return total


def evaluate(model, envs, eot, pad, max_new):
    """Greedy accuracy on test tasks seed=0..len(envs)-1 (the same tasks every time) and its standard error."""
    played = play(model, envs, [{"seed": i} for i in range(len(envs))], eot, pad, True, max_new)
    acc = sum(bool(t.final_info.get("correct", False)) for t in played) / len(envs)
    return acc, math.sqrt(acc * (1 - acc) / len(envs))


def plot(rows: list[dict], path: str, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    train = [r for r in rows if r["mean_reward"] != ""]
    x, y = [r["iteration"] for r in train], [r["mean_reward"] for r in train]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, color="tab:blue", alpha=0.35, label="mean reward (sampled, T=1)")
    k = 5
    smooth = [sum(y[max(0, i - k + 1): i + 1]) / len(y[max(0, i - k + 1): i + 1]) for i in range(len(y))]
    ax.plot(x, smooth, color="tab:blue", label=f"mean reward, {k}-iteration mean")
    ev = [r for r in rows if r["greedy_accuracy"] != ""]
    if ev:
        ax.errorbar([r["iteration"] for r in ev], [r["greedy_accuracy"] for r in ev], yerr=[r["greedy_se"] for r in ev],
                    fmt="o", color="tab:red", capsize=4, label="greedy accuracy, fixed test-split tasks (±1 SE)")
    ax.set(xlabel="iteration (optimizer step)", ylabel="reward / accuracy", ylim=(0, 1.05), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok, model = load_tokenizer(args.model), load_causal_lm(args.model, dtype=torch.float32).to(args.device)
    envs: list = []
    eval_envs: list = []
    # --tree: one pool for the run, so the branches of every iteration after the first reuse its envs
    # instead of each making (and building the task source of) a fresh one
    pool = branch_pool(tok, args.prompts, args.group) if args.tree else None
    try:
        envs += [gym.make(args.env_id, tokenizer=tok, **args.kwargs) for _ in range(args.prompts * (1 if args.tree else args.group))]
        eval_envs += [gym.make(args.env_id, tokenizer=tok, **{**args.kwargs, "split": "test"}) for _ in range(args.eval_tasks)]
        return model, train(args, tok, model, envs, eval_envs, pool)
    finally:  # also when training raised: a branch that failed closed its own env, the idle ones are here
        if pool is not None:
            pool.close()
        for env in envs + eval_envs:
            env.close()


def train(args: argparse.Namespace, tok, model, envs: list, eval_envs: list, pool: EnvPool | None) -> list[dict]:
    """The training loop of `main` (its envs made, and closed by `main` afterwards); returns the CSV rows."""
    eot = list(envs[0].unwrapped.template.end_of_turn_ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eot[0]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    blank = dict.fromkeys(COLUMNS, "")
    rows = [{**blank, "iteration": 0, **dict(zip(["greedy_accuracy", "greedy_se"], evaluate(model, eval_envs, eot, pad, args.max_new_tokens)))}] if eval_envs else []
    if rows:
        print(f"greedy accuracy before training: {rows[0]['greedy_accuracy']:.3f} ± {rows[0]['greedy_se']:.3f} ({len(eval_envs)} test tasks)")
    total = 0  # action tokens generated so far: the x axis on which tree and flat runs compare
    bar = tqdm(range(1, args.iterations + 1), desc="reinforce")
    for it in bar:
        start = time.time()
        if args.tree:
            resets = [{"seed": args.seed * 1_000_003 + it * args.prompts + p} for p in range(args.prompts)]
            trees = play_trees(lambda prompts: [Generation(ids, None, "stop") for ids in generate(model, prompts, eot, pad, False, args.max_new_tokens)],
                               envs, resets, args.tree, args.group, pool=pool)
            episodes = [t for tree, _, _ in trees for t in tree]  # the leaves
            r = torch.tensor([t.return_ for t in episodes])
            # every generated step once, with its per-state advantage, summed and divided by the leaves
            batch = [(q, a, [adv / len(episodes)] * len(a)) for _, turns, _ in trees for (q, a), adv in turns]
            generated = sum(stats.generated_tokens for _, _, stats in trees)  # a shared prefix counts once
        else:
            resets = [{"seed": args.seed * 1_000_003 + it * args.prompts + p} for p in range(args.prompts) for _ in range(args.group)]
            episodes = play(model, envs, resets, eot, pad, False, args.max_new_tokens)
            r = torch.tensor([t.return_ for t in episodes])
            samples, terms = layout(episodes, grpo_advantages([t.return_ for t in episodes], args.group), args.samples)
            batch = [(s.prompt_ids, s.response_ids, w) for s, w in zip(samples, token_weights(samples, terms, args.loss_agg))]
            generated = sum(len(s.response_ids) for t in episodes for s in t.steps)
        total += generated
        opt.zero_grad()
        loss_total = policy_loss_backward(model, batch, pad)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        trained = [x for x in batch if any(x[2])]
        row = {**blank, "iteration": it, "mean_reward": round(r.mean().item(), 4),
               "accuracy": round(sum(bool(t.final_info.get("correct", False)) for t in episodes) / len(episodes), 4),
               "loss": round(loss_total, 6), "tokens": generated, "tokens_total": total, "seconds": round(time.time() - start, 2),
               "samples": len(trained), "trained_tokens": sum(len(q) + len(a) for q, a, _ in trained),
               "turns": round(sum(len(t.steps) for t in episodes) / len(episodes), 4)}
        if eval_envs and (it == args.iterations or (args.eval_every and it % args.eval_every == 0)):
            row["greedy_accuracy"], row["greedy_se"] = evaluate(model, eval_envs, eot, pad, args.max_new_tokens)
            tqdm.write(f"iteration {it}: greedy accuracy {row['greedy_accuracy']:.3f} ± {row['greedy_se']:.3f}")
        rows.append(row)
        rewards = [x["mean_reward"] for x in rows if x["mean_reward"] != ""]
        bar.set_postfix(reward=row["mean_reward"], last10=round(sum(rewards[-10:]) / len(rewards[-10:]), 3),
                        tokens=generated, tokens_total=total)
        with open(args.csv, "w", newline="") as fh:  # rewritten each iteration: a killed run keeps its rows
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    if args.png:
        plot(rows, args.png, f"REINFORCE on {args.env_id} {args.kwargs or ''}, {args.model}")
    return rows


if __name__ == "__main__":
    main()
