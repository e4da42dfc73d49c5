"""Group-normalised REINFORCE on any agent-r1-gym env, in plain PyTorch and the public API only.

    python examples/reinforce.py --iterations 60 --csv runs/reinforce.csv --png runs/reinforce.png
    python examples/reinforce.py --env-id AgentR1/Countdown-v0 --env-kwarg difficulty=easy --max-new-tokens 128

Defaults: AgentR1/Arithmetic-v0 at level 1 (`What is 7 + 9?`) with SmolLM2-135M-Instruct, the whole
model trained (135M parameters, fp32, fits a laptop's CPU), 4 tasks x 8 samples per iteration.

Each iteration samples `--prompts` tasks, plays `--group` episodes of each at temperature 1 (the
policy's exact token ids go to `env.step`), scores every episode by its return relative to its own
group, advantage = (r - mean) / (std + eps), and takes one AdamW step on
loss = -mean(advantage * sum of the log-probs of the episode's action tokens). A greedy eval on fixed
test-split tasks before and after training shows that the rise is not sampling noise.

With `--tree WIDTH` each task is one tree of episodes instead (`agent_gym.rollout.play_tree`): the
episode branches `WIDTH` ways at every step (env snapshots, the shared prefix generated once) up to
`--group` leaves, and each generated action gets its per-state advantage (`tree_advantages`: the
continuations from one state form the group); a single-turn env's tree is a flat group of `WIDTH`.
The branches play in envs of one `EnvPool`, made in the first iteration and reused by every later one.

The CSV's `tokens` column (and the progress bar) counts the action tokens the policy generated in the
iteration, `tokens_total` those of the run so far: a tree generates a shared prefix once, so tree and
flat runs are compared at equal `tokens_total`, not at equal iterations.
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

import gymnasium as gym
import torch
from tqdm import tqdm

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.models import load_causal_lm, load_tokenizer
from agent_gym.rollout import Generation, play_episode
from agent_gym.rollout.async_runner import run_sync
from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.pool import EnvPool, PoolKey
from agent_gym.rollout.tree import TreeStats, play_tree, tree_advantages

COLUMNS = ["iteration", "mean_reward", "accuracy", "loss", "tokens", "tokens_total", "seconds", "greedy_accuracy", "greedy_se"]


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


def generate(model, prompts: list[list[int]], eot: list[int], pad: int, greedy: bool, max_new: int) -> list[list[int]]:
    """One batched generate (left-padded); each row cut after its first end-of-turn id, as the env wants."""
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(q)) + q for q in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in prompts], device=model.device)
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=eot, pad_token_id=pad, **sampling)
    rows = out[:, width:].tolist()
    return [next((row[: i + 1] for i, t in enumerate(row) if t in eot), row) for row in rows]


def play(model, envs, resets, eot, pad, greedy, max_new):
    """Play one episode per env (reset with the kwargs in `resets`) through agent_gym's episode engine;
    returns (return, correct, turns) each, turns being the (prompt ids, action ids) of every policy turn.

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

    return [
        [t.return_, bool(t.final_info.get("correct", False)), [(s.prompt_ids, s.response_ids) for s in t.steps]]
        for t in run_sync(episodes)
    ]


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


def sum_logprobs(model, seqs: list[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """Sum of log p(action token | everything before it) for each (prompt, action), right-padded batch."""
    width = max(len(q) + len(a) for q, a in seqs)
    ids = torch.tensor([q + a + [pad] * (width - len(q) - len(a)) for q, a in seqs], device=model.device)
    attn = torch.tensor([[1] * (len(q) + len(a)) + [0] * (width - len(q) - len(a)) for q, a in seqs], device=model.device)
    act = torch.tensor([[0] * len(q) + [1] * len(a) + [0] * (width - len(q) - len(a)) for q, a in seqs], device=model.device)
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits[:, :-1].float(), dim=-1)
    return (logp.gather(-1, ids[:, 1:, None]).squeeze(-1) * act[:, 1:]).sum(-1)


def evaluate(model, envs, eot, pad, max_new):
    """Greedy accuracy on test tasks seed=0..len(envs)-1 (the same tasks every time) and its standard error."""
    acc = sum(c for _, c, _ in play(model, envs, [{"seed": i} for i in range(len(envs))], eot, pad, True, max_new)) / len(envs)
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
            leaves = [t for tree, _, _ in trees for t in tree]
            episodes = [[t.return_, bool(t.final_info.get("correct", False)), []] for t in leaves]
            seqs = [turn for _, turns, _ in trees for turn in turns]
            r = torch.tensor([e[0] for e in episodes])
            generated = sum(stats.generated_tokens for _, _, stats in trees)  # a shared prefix counts once
        else:
            resets = [{"seed": args.seed * 1_000_003 + it * args.prompts + p} for p in range(args.prompts) for _ in range(args.group)]
            episodes = play(model, envs, resets, eot, pad, False, args.max_new_tokens)
            r = torch.tensor([e[0] for e in episodes]).view(args.prompts, args.group)
            adv = torch.nan_to_num(((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten())  # G=1: 0
            seqs = [(turn, float(adv[i])) for i, e in enumerate(episodes) for turn in e[2] if adv[i] != 0]
            generated = sum(len(a) for e in episodes for _, a in e[2])
        total += generated
        opt.zero_grad()
        loss_total = 0.0
        for b in range(0, len(seqs), 8):  # micro-batches keep the (batch, length, vocab) logits small
            chunk = seqs[b: b + 8]
            loss = -(torch.tensor([a for _, a in chunk], device=model.device) * sum_logprobs(model, [t for t, _ in chunk], pad)).sum() / len(episodes)
            loss.backward()
            loss_total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        row = {**blank, "iteration": it, "mean_reward": round(r.mean().item(), 4),
               "accuracy": round(sum(e[1] for e in episodes) / len(episodes), 4), "loss": round(loss_total, 6),
               "tokens": generated, "tokens_total": total, "seconds": round(time.time() - start, 2)}
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
