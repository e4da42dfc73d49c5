"""agent_gym_trl.private: the one check of the installed trl, and the only module that names TRL's privates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _trl_support import grpo_args

from agent_gym_trl import private
from agent_gym_trl.private import TESTED_TRL, UnsupportedTRL

PACKAGE = Path(private.__file__).resolve().parent


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tokenizer):
    from trl import GRPOTrainer

    from agent_gym.models import load_causal_lm
    from agent_gym_trl import EnvRollout, env_dataset, env_reward

    ds = env_dataset("AgentR1/Arithmetic-v0", n=2, env_kwargs={"level": 1}, tokenizer=tokenizer)
    return GRPOTrainer(
        model=load_causal_lm("smollm2-135m-instruct"),
        reward_funcs=env_reward,
        args=grpo_args(tmp_path_factory.mktemp("grpo")),
        train_dataset=ds,
        processing_class=tokenizer,
        rollout_func=EnvRollout(),
    )


def test_the_check_accepts_the_installed_trl_and_its_trainer(trainer):
    from importlib.metadata import version

    installed = version("trl")
    assert private.installed_trl_version() == installed
    assert private.check(trainer, installed=installed) == installed
    assert private.check(trainer) == installed
    assert private.check(trainer) == installed  # the second call returns what the first checked
    assert type(trainer) in private._verified


@pytest.mark.parametrize("version", ["1.13.0", "1.15.0", "1.17.0", "2.0.0", "0.29.1"])
def test_the_check_refuses_a_version_outside_the_tested_range(trainer, version):
    with pytest.raises(UnsupportedTRL) as caught:
        private.check(trainer, installed=version)
    assert str(caught.value) == (
        f"agent-r1-gym-trl supports trl{TESTED_TRL} (tested: 1.14.2, 1.16.0); trl {version} is installed: "
        f"pip install 'trl{TESTED_TRL}'"
    )


@pytest.mark.parametrize("version", ["1.14.2", "1.16.0", "1.16.1rc1"])
def test_the_check_accepts_the_tested_releases(trainer, version):
    assert private.check(trainer, installed=version) == version


def test_a_missing_private_method_is_named():
    class NotATrainer:
        def _log_metric(self, name, value):
            pass

    with pytest.raises(UnsupportedTRL) as caught:
        private.check(NotATrainer(), installed="1.16.0")
    assert str(caught.value) == (
        "trl 1.16.0's NotATrainer has no _generate_single_turn, a private method agent-r1-gym-trl calls "
        f"(agent_gym_trl.private); the adapter is tested with trl{TESTED_TRL}: pip install 'trl{TESTED_TRL}'"
    )
    with pytest.raises(UnsupportedTRL, match=r"'s object has no _generate_single_turn"):
        private.metric_logger(object())
    assert object not in private._verified


def test_a_trainer_whose_generation_lacks_the_keyword_is_named(trainer):
    from trl import GRPOTrainer

    class OldTrainer(GRPOTrainer):
        # the signature of trl before 1.14, which had no num_generations
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields):  # type: ignore[override]
            raise AssertionError("never called")

    old = object.__new__(OldTrainer)
    with pytest.raises(UnsupportedTRL) as caught:
        private.single_turn_generator(old)
    assert "OldTrainer._generate_single_turn takes no num_generations" in str(caught.value)
    assert f"pip install 'trl{TESTED_TRL}'" in str(caught.value)


def test_the_fence_calls_the_trainers_own_methods(trainer, tokenizer):
    trainer._pending_metrics.clear()
    private.metric_logger(trainer)("env/probe", 2.5)
    assert dict(trainer._pending_metrics) == {"env/probe": [2.5]}
    trainer._pending_metrics.clear()
    prompt = tokenizer.encode("1 + 1 =")
    completion_ids, logprobs = private.single_turn_generator(trainer)([prompt, prompt])
    assert len(completion_ids) == 2
    assert all(1 <= len(ids) <= trainer.max_completion_length for ids in completion_ids)


def _private_uses(path: Path) -> list[str]:
    """Every place of ``path`` that reads, sets, calls or overrides a private name of another object."""
    tree = ast.parse(path.read_text(), str(path))
    names = set(private.PRIVATE_NAMES)
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            private_attr = node.attr.startswith("_") and not node.attr.startswith("__")
            if node.attr in names or (private_attr and not mine):
                found.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("_"):
                    found.append(f"{where} {node.func.id}(..., {arg.value!r})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            found.append(f"{where} def {node.name}")
    return found


def test_no_other_module_touches_a_private_name_of_trl():
    modules = sorted(p for p in PACKAGE.glob("*.py") if p.name != "private.py")
    assert {p.name for p in modules} >= {"__init__.py", "dataset.py", "rollout.py"}
    assert [use for p in modules for use in _private_uses(p)] == []
    # and the check sees what it is for: the fence itself names every row
    assert {use.split(" .")[-1] for use in _private_uses(PACKAGE / "private.py") if " ." in use} == set(private.PRIVATE_NAMES)
