"""examples/reinforce.py: its options, and one real REINFORCE iteration with SmolLM2-135M-Instruct on CPU."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "reinforce.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reinforce_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reinforce = _load()


def test_help_explains_every_option(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        reinforce.parse_args(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for option in ["--iterations", "--group", "--prompts", "--lr", "--max-new-tokens", "--seed", "--csv", "--png",
                   "--eval-every", "--eval-tasks", "--env-id", "--env-kwarg", "--model", "--threads", "--tree", "--device"]:
        assert option in text


def test_env_kwargs_are_json_values_and_level_1_is_the_arithmetic_default() -> None:
    assert reinforce.parse_args([]).kwargs == {"level": 1}
    args = reinforce.parse_args(["--env-kwarg", "level=3", "--env-kwarg", "split=train", "--env-kwarg", "few_shot=true"])
    assert args.kwargs == {"level": 3, "split": "train", "few_shot": True}
    assert reinforce.parse_args(["--env-id", "AgentR1/Countdown-v0"]).kwargs == {}


def test_a_malformed_env_kwarg_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        reinforce.parse_args(["--env-kwarg", "level"])
    assert exit_.value.code == 2
    assert "--env-kwarg wants KEY=VALUE, got 'level'" in capsys.readouterr().err


@pytest.mark.slow
def test_one_iteration_writes_the_csv_and_steps_the_model(tmp_path) -> None:
    import torch
    from agent_gym.models import load_causal_lm

    # Seed 3: of this group of 4 short samples on 'train-L1-...' some are right and some wrong, so the
    # advantages are not all zero and the step must move the weights.
    out = tmp_path / "r.csv"
    argv = ["--iterations", "1", "--prompts", "1", "--group", "4", "--max-new-tokens", "16", "--seed", "3",
            "--eval-tasks", "2", "--csv", str(out), "--png", str(tmp_path / "r.png")]
    before = {k: v.clone() for k, v in load_causal_lm("smollm2-135m-instruct").state_dict().items()}
    model, rows = reinforce.main(argv)

    with open(out, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == reinforce.COLUMNS
    assert [r["iteration"] for r in table] == ["0", "1"]
    assert table[0]["mean_reward"] == "" and table[0]["greedy_accuracy"] != ""  # the eval before training
    step = table[1]
    assert 0.0 <= float(step["mean_reward"]) <= 1.0 and math.isfinite(float(step["loss"]))
    assert int(step["tokens"]) >= 4 and step["greedy_accuracy"] != ""  # the last iteration is evaluated
    assert step["tokens_total"] == step["tokens"]  # one iteration: the run's total is its own
    assert (tmp_path / "r.png").stat().st_size > 0

    after = model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    mixed = 0.0 < rows[1]["mean_reward"] < 1.0  # one group: mixed rewards <=> a nonzero advantage
    if mixed:
        assert len(changed) > 0.9 * len(before)
        assert rows[1]["loss"] != 0.0
    else:  # every advantage is zero: no gradient, and AdamW without weight decay leaves the weights alone
        assert changed == [] and rows[1]["loss"] == 0.0


class _Script:
    """A scripted GSM8KTool policy: two calculator calls, then an answer from ``answers`` in turn (a tree of
    three-step episodes that branches once at every step: 4 leaves with width 2). ``fail_after``: the
    prompt count after which it raises, as a failing model would."""

    def __init__(self, tokenizer, answers: list[str], fail_after: int | None = None):
        from agent_gym.chat.template import ChatTemplate
        from agent_gym.tools import HermesParser

        template = ChatTemplate(tokenizer)
        self.eot = list(template.end_of_turn_ids)
        self.calc = template.encode(HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}])) + self.eot
        self.answers = [template.encode(a) + self.eot for a in answers]
        self.answered = 0
        self.prompts = 0
        self.fail_after = fail_after

    def __call__(self, prompts: list[list[int]]) -> list[list[int]]:
        import numpy as np

        out = []
        for prompt in prompts:
            self.prompts += 1
            if self.fail_after is not None and self.prompts > self.fail_after:
                raise RuntimeError("the model failed")
            turn = (int(np.count_nonzero(np.isin(prompt, self.eot))) - 2) // 2  # system + user, then assistant + tool
            if turn < 2:
                out.append(self.calc)
            else:
                out.append(self.answers[self.answered % len(self.answers)])
                self.answered += 1
        return out


def test_tree_rollouts_train_each_generated_step_once_with_its_per_state_advantage(tokenizer) -> None:
    import gymnasium as gym

    from agent_gym.rollout import Generation
    from agent_gym.rollout.tree import tree_advantages

    script = _Script(tokenizer, ["#### 18", "#### 5"])  # right and wrong for test-0, in turn: the leaves' returns differ

    def generate_batch(prompts: list[list[int]]) -> list[Generation]:
        return [Generation(ids, None, "stop") for ids in script(prompts)]

    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")
    [(tree, turns, stats)] = reinforce.play_trees(generate_batch, [env], [{"seed": 0, "task_id": "test-0"}], width=2, leaves=4)
    # three steps (two calls, an answer); the root branches once at each step: 4 leaves
    assert len(tree) == 4 and [t.metadata["tree"]["branch_step"] for t in tree] == [None, 0, 1, 2]
    assert (stats.generated_steps, stats.flat_steps) == (3 + 3 + 2 + 1, 4 * 3)
    advantages = tree_advantages(tree)
    want = [((s.prompt_ids, s.response_ids), a) for t in tree for s, a in zip(t.steps, advantages[t.id]) if a]
    assert turns == want and turns  # some leaves right, some wrong: nonzero advantages
    for t in tree:  # a step a branch copied from its parent has no advantage of its own: trained in the parent
        assert advantages[t.id][: t.metadata["tree"]["shared_steps"]] == [None] * t.metadata["tree"]["shared_steps"]
    assert len(turns) == sum(1 for t in tree for a in advantages[t.id][t.metadata["tree"]["shared_steps"]:] if a)
    env.close()


def _tree_run(monkeypatch, tokenizer, script: _Script, tmp_path) -> tuple[list, list[str]]:
    """``reinforce.main`` with ``--tree 2`` on GSM8KTool, 2 iterations of one 4-leaf tree, ``script`` as the
    policy and a stand-in model (every leaf gets the same answer: all advantages are zero, so no forward
    pass). Returns the envs gym.make made and ``main``'s argv; every env records its closes."""
    import gymnasium
    import torch

    made: list = []
    make = gymnasium.make

    def counting_make(*args, **kwargs):
        env = make(*args, **kwargs)
        made.append(env)
        close = env.close
        env.closes = 0

        def counted_close() -> None:
            env.closes += 1
            close()

        env.close = counted_close
        return env

    monkeypatch.setattr(gymnasium, "make", counting_make)
    monkeypatch.setattr(reinforce, "load_tokenizer", lambda name: tokenizer)
    monkeypatch.setattr(reinforce, "load_causal_lm", lambda name, dtype: torch.nn.Linear(1, 1))
    monkeypatch.setattr(reinforce, "generate", lambda model, prompts, eot, pad, greedy, max_new: script(prompts))
    argv = ["--env-id", "AgentR1/GSM8KTool-v0", "--env-kwarg", "split=test", "--tree", "2", "--group", "4",
            "--prompts", "1", "--iterations", "2", "--eval-tasks", "0", "--csv", str(tmp_path / "t.csv")]
    return made, argv


def test_tree_mode_makes_its_branch_envs_once_and_counts_generated_tokens(monkeypatch, tokenizer, tmp_path) -> None:
    script = _Script(tokenizer, ["#### 5"])
    made, argv = _tree_run(monkeypatch, tokenizer, script, tmp_path)
    _, rows = reinforce.main(argv)

    # one root env, and the 3 branches of the first tree (each tree plays at most leaves - 1 = 3 at once):
    # the second tree takes them from the pool (making an env per branch per tree would make 1 + 3 + 3)
    assert len(made) == 1 + 3
    assert all(env.closes == 1 for env in made)  # the root and the pool's idle envs, closed at the end
    # per tree 9 generated steps: the root's 3 and its branches' 3 + 2 + 1 (a shared prefix is not generated again)
    per_tree = 5 * len(script.calc) + 4 * len(script.answers[0])
    assert script.prompts == 2 * 9
    with open(tmp_path / "t.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == reinforce.COLUMNS
    assert [(r["iteration"], int(r["tokens"]), int(r["tokens_total"])) for r in table] == [("1", per_tree, per_tree), ("2", per_tree, 2 * per_tree)]
    assert [(r["tokens"], r["tokens_total"]) for r in rows] == [(per_tree, per_tree), (per_tree, 2 * per_tree)]


def test_tree_mode_closes_every_env_when_the_model_fails(monkeypatch, tokenizer, tmp_path) -> None:
    # the first tree's 9 prompts, the second's root (3): it fails in the second tree's branches, with
    # pool envs in use
    script = _Script(tokenizer, ["#### 5"], fail_after=9 + 3)
    made, argv = _tree_run(monkeypatch, tokenizer, script, tmp_path)
    with pytest.raises(RuntimeError, match="the model failed"):
        reinforce.main(argv)
    assert len(made) == 1 + 3
    assert all(env.closes == 1 for env in made)  # the failed branches' envs by play_trees, the rest by main


# -- sample layouts (--samples) and loss aggregation (--loss-agg) ------------------------------------------


def _two_episodes():
    """A hand-made batch of two episodes of one task: A calls a tool (2 ids), gets a 2-id reply and answers
    (4 ids), return 1; B answers at once (4 ids), return 0."""
    from agent_gym.trajectory import StepRecord, Trajectory

    a = Trajectory(id="a", env_id="x", steps=[
        StepRecord(trajectory_id="a", step=0, prompt_ids=[1, 2, 3], response_ids=[10, 11], reward=0.0, terminated=False, truncated=False),
        StepRecord(trajectory_id="a", step=1, prompt_ids=[1, 2, 3, 10, 11, 20, 21], response_ids=[12, 13, 14, 15], reward=1.0,
                   terminated=True, truncated=False),
    ])
    b = Trajectory(id="b", env_id="x", steps=[
        StepRecord(trajectory_id="b", step=0, prompt_ids=[1, 2, 4], response_ids=[30, 31, 32, 33], reward=0.0, terminated=True, truncated=False),
    ])
    return [a, b]


def test_grpo_advantages_normalise_each_group_and_a_group_of_one_gets_zero() -> None:
    std = math.sqrt(0.5)  # of [1, 0], Bessel-corrected
    got = reinforce.grpo_advantages([1.0, 0.0, 1.0, 1.0], 2)
    assert got == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0], rel=1e-6)
    assert reinforce.grpo_advantages([1.0, 0.0], 1) == [0.0, 0.0]


def test_concat_is_one_row_per_episode_and_step_one_row_per_step() -> None:
    episodes = _two_episodes()
    concat, n = reinforce.layout(episodes, [1.0, -1.0], "concat")
    assert n == 2
    assert [(s.prompt_ids, s.response_ids, s.mask, s.advantage, s.term) for s in concat] == [
        ([1, 2, 3], [10, 11, 20, 21, 12, 13, 14, 15], [1, 1, 0, 0, 1, 1, 1, 1], 1.0, 0),  # the env's reply masked
        ([1, 2, 4], [30, 31, 32, 33], [1, 1, 1, 1], -1.0, 1),
    ]
    step, s = reinforce.layout(episodes, [1.0, -1.0], "step")
    assert s == 3
    assert [(x.prompt_ids, x.response_ids, x.mask, x.advantage, x.term) for x in step] == [
        ([1, 2, 3], [10, 11], [1, 1], 1.0, 0),
        ([1, 2, 3, 10, 11, 20, 21], [12, 13, 14, 15], [1, 1, 1, 1], 1.0, 1),  # the step's whole context
        ([1, 2, 4], [30, 31, 32, 33], [1, 1, 1, 1], -1.0, 2),
    ]
    with pytest.raises(ValueError, match="sample layout must be one of"):
        reinforce.layout(episodes, [1.0, -1.0], "tree")


def test_the_per_token_loss_weights_of_both_layouts() -> None:
    # A: advantage +1, T = 6 policy ids in K = 2 steps of 2 and 4; B: -1, 4 ids in 1 step. N = 2 episodes,
    # S = 3 steps, M = 10 policy ids.
    episodes = _two_episodes()
    concat, n = reinforce.layout(episodes, [1.0, -1.0], "concat")
    step, s = reinforce.layout(episodes, [1.0, -1.0], "step")
    weights = reinforce.token_weights

    # seq-mean-token-sum: A_e / N against A_e / S (the same direction, scaled by N / S)
    assert weights(concat, n, "seq-mean-token-sum") == [[0.5, 0.5, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5], [-0.5] * 4]
    assert weights(step, s, "seq-mean-token-sum") == [[1 / 3] * 2, [1 / 3] * 4, [-1 / 3] * 4]
    # seq-mean-token-mean: A_e / (N T_e) against A_e / (S t_ek)
    assert weights(concat, n, "seq-mean-token-mean") == [[1 / 12, 1 / 12, 0.0, 0.0, 1 / 12, 1 / 12, 1 / 12, 1 / 12], [-1 / 8] * 4]
    assert weights(step, s, "seq-mean-token-mean") == [[1 / 6] * 2, [1 / 12] * 4, [-1 / 12] * 4]
    # so an episode weighs A_e / N in all under concat, A_e K_e / S under step; a short step's ids weigh more
    assert sum(weights(concat, n, "seq-mean-token-mean")[0]) == pytest.approx(1 / 2)
    assert sum(sum(w) for w in weights(step, s, "seq-mean-token-mean")[:2]) == pytest.approx(2 / 3)
    assert sum(weights(step, s, "seq-mean-token-mean")[2]) == pytest.approx(-1 / 3)
    # token-mean: A_e / M, the same in both layouts
    assert weights(concat, n, "token-mean") == [[0.1, 0.1, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1], [-0.1] * 4]
    assert weights(step, s, "token-mean") == [[0.1] * 2, [0.1] * 4, [-0.1] * 4]
    with pytest.raises(ValueError, match="loss aggregation must be one of"):
        weights(step, s, "sum")


def test_samples_and_loss_agg_options(capsys) -> None:
    assert (reinforce.parse_args([]).samples, reinforce.parse_args([]).loss_agg) == ("concat", "seq-mean-token-sum")
    args = reinforce.parse_args(["--samples", "step", "--loss-agg", "seq-mean-token-mean"])
    assert (args.samples, args.loss_agg) == ("step", "seq-mean-token-mean")
    assert reinforce.parse_args(["--tree", "2"]).samples == "step"
    with pytest.raises(SystemExit) as exit_:
        reinforce.parse_args(["--tree", "2", "--samples", "concat"])
    assert exit_.value.code == 2
    assert "--tree trains each generated step as its own row" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        reinforce.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in ["--samples {concat,step}", "--loss-agg {seq-mean-token-sum,seq-mean-token-mean,token-mean}",
                   "concat A_e/N, A_e/(N*T_e), A_e/M; step A_e/S, A_e/(S*t_ek), A_e/M"]:
        assert needle in text


def _tiny_llama():
    """A randomly initialised 2-layer Llama (vocab 64): the real transformers forward, cache and
    `logits_to_keep`, small enough to compare gradients exactly."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).float().eval()


def _naive_loss(model, rows):
    """-sum w log p, each row run alone from its first id: what the shared-prefix batch must equal."""
    import torch

    total = torch.zeros(())
    for q, a, w in rows:
        ids = torch.tensor([q + a])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        total = total - (logp[len(q) - 1:] * torch.tensor(w)).sum()
    return total


@pytest.mark.parametrize("loss_agg", reinforce.LOSS_AGGS)
def test_the_loss_is_minus_the_weighted_log_probs_in_both_layouts(loss_agg) -> None:
    import torch

    model = _tiny_llama()
    episodes = _two_episodes()
    grads = {}
    for kind in reinforce.LAYOUTS:
        samples, terms = reinforce.layout(episodes, [1.0, -1.0], kind)
        rows = [(x.prompt_ids, x.response_ids, w) for x, w in zip(samples, reinforce.token_weights(samples, terms, loss_agg))]
        model.zero_grad()
        want = _naive_loss(model, rows)
        want.backward()
        want_grad = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        got = reinforce.policy_loss_backward(model, rows, pad=0, micro=2)  # micro-batches of a shared prefix [1, 2]
        got_grad = [p.grad.clone() for p in model.parameters()]
        assert got == pytest.approx(want.item(), rel=1e-5)
        for g, h in zip(got_grad, want_grad):
            torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)
        grads[kind] = got_grad
    same = all(torch.allclose(g, h, rtol=1e-4, atol=1e-6) for g, h in zip(grads["concat"], grads["step"]))
    assert same == (loss_agg == "token-mean")  # the layouts' log-probs are the same: only the weights differ


def test_generate_matches_transformers_generate_greedily() -> None:
    import torch

    model = _tiny_llama()
    prompts = [[1, 2, 3, 5, 7], [1, 2, 3, 9], [1, 2, 3, 4, 4, 4, 6]]  # a shared prefix, then left-padded tails
    eot = [63]
    got = reinforce.generate(model, prompts, eot, 0, True, 6)
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(q)) + q for q in prompts])
    mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in prompts])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=eot, pad_token_id=0)[:, width:].tolist()
    assert got == [next((r[: i + 1] for i, t in enumerate(r) if t in eot), r) for r in out]
    assert all(len(r) == 6 or r[-1] == 63 for r in got)


@pytest.mark.slow
def test_both_layouts_train_the_same_first_episodes_on_a_tool_env(tmp_path) -> None:
    # The CI's short version of docs/performance.md's step-vs-concat runs: one iteration of each layout
    # on ArithmeticTool with the default model, the script run as a user runs it (as a program it makes
    # OpenMP's threads sleep while they wait: in this process they would spin, 8x slower beside other
    # work). Same seed, same weights: the same episodes, so the same reward, tokens and turns; only the
    # update's rows differ.
    import subprocess

    argv = ["--env-id", "AgentR1/ArithmeticTool-v0", "--env-kwarg", "few_shot=true", "--env-kwarg", "level=3",
            "--model", "smollm2-135m-tool", "--iterations", "1", "--prompts", "1", "--group", "3", "--max-new-tokens", "40",
            "--eval-tasks", "1", "--loss-agg", "seq-mean-token-mean", "--seed", "1"]
    tables = {}
    for kind in reinforce.LAYOUTS:
        out = tmp_path / f"{kind}.csv"
        done = subprocess.run([sys.executable, str(SCRIPT), *argv, "--samples", kind, "--csv", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        with open(out, newline="") as fh:
            tables[kind] = list(csv.DictReader(fh))
        assert list(tables[kind][0]) == reinforce.COLUMNS
        assert [r["iteration"] for r in tables[kind]] == ["0", "1"]
    concat, step = tables["concat"][1], tables["step"][1]
    same = ["mean_reward", "accuracy", "tokens", "tokens_total", "turns", "greedy_accuracy"]
    assert {k: concat[k] for k in same} == {k: step[k] for k in same}
    assert int(concat["tokens"]) > 0 and float(concat["turns"]) >= 1
    assert tables["concat"][0]["greedy_accuracy"] == tables["step"][0]["greedy_accuracy"]
    # the rows: one per trained episode against one per step of those episodes, each with its whole context
    assert int(step["samples"]) >= int(concat["samples"])
    if int(concat["samples"]):
        assert int(step["trained_tokens"]) >= int(concat["trained_tokens"]) > 0
    else:  # one reward for the whole group: no advantage, nothing trained in either layout
        assert (int(step["samples"]), float(step["loss"]), float(concat["loss"])) == (0, 0.0, 0.0)
