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
