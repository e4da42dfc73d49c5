"""``agent-gym check``: every registered env and the new-env scaffold pass the env contract, and the
checker catches each planted break of it with the check that names the fix."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.core.contract import CHECKS, ContractError, check_contract, type_problems
from agent_gym.core.env import AgentEnv, EnvReply, Grade, Turn, info_types
from agent_gym.core.types import ResetInfo, StepInfo

cli_main = importlib.import_module("agent_gym.cli.main")

REGISTERED = sorted(card.id for card in agent_gym.list_envs())


def test_the_registry_holds_the_suite():
    assert len(REGISTERED) >= 14 and "AgentR1/GSM8KTool-v0" in REGISTERED


@pytest.mark.parametrize("env_id", REGISTERED)
def test_every_registered_env_passes(env_id, tokenizer):
    report = check_contract(env_id, tokenizer=tokenizer, steps=3)
    report.raise_if_failed()
    assert [r.name for r in report.results] == list(CHECKS)
    for name in ("make", "spaces", "hooks", "reset", "step", "determinism", "no_drift", "invalid_action", "gymnasium"):
        if name == "hooks" and gym.spec(env_id).entry_point.endswith(":AgentProgramEnv"):
            # the one env whose context an outside program decides: it says so (own_episode_loop)
            assert report[name].status == "skip" and "reset is AgentEnv's; it runs its own step and astep" in report[name].detail
            continue
        assert report[name].status == "pass", report[name]
    snapshot = report["snapshot"]
    # Only an env that cannot fork (it says why) or whose first scripted step ends it skips the round trip.
    assert snapshot.status == "pass" or "cannot fork" in snapshot.detail or "ends the episode" in snapshot.detail


def test_the_scaffold_passes(tmp_path, tokenizer, monkeypatch):
    from agent_gym.cli.scaffold import new_env

    root = new_env("contract-probe", tmp_path)
    monkeypatch.syspath_prepend(str(root))
    module = importlib.import_module("agent_gym_contract_probe")
    try:
        module.register()
        report = check_contract("AgentR1/ContractProbe-v0", tokenizer=tokenizer)
        report.raise_if_failed()
        assert report["snapshot"].status == "pass" and report["no_drift"].status == "pass"
    finally:
        gym.registry.pop("AgentR1/ContractProbe-v0", None)
        for name in [m for m in sys.modules if m.startswith("agent_gym_contract_probe")]:
            del sys.modules[name]
    assert "check_contract" in (root / "tests" / "test_contract_probe.py").read_text()


# -- planted breaks: each fails its own check, with the fix ---------------------------------------------


class _Echo(AgentEnv[dict]):
    """A two-turn env: every non-final turn gets a user message back; the second turn is graded."""

    def __init__(self, tokenizer: Any = None, **kwargs: Any):
        kwargs.setdefault("max_turns", 2)
        super().__init__(tokenizer, **kwargs)

    def sample_task(self, rng: np.random.Generator) -> dict:
        return {"id": f"t-{int(rng.integers(0, 1000))}", "question": "Say one."}

    def get_task(self, task_id: str) -> dict:
        return {"id": task_id, "question": "Say one."}

    def initial_messages(self, task: dict) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"{task['id']}: {task['question']}"}]

    def grade(self, task: dict, turn: Turn) -> Grade:
        return Grade.from_check("1" in turn.text, "correct" if "1" in turn.text else "wrong_answer")

    def respond(self, turn: Turn) -> EnvReply:
        if turn.index < self.max_turns:
            return EnvReply(messages=[{"role": "user", "content": "Again."}])
        return super().respond(turn)


class _Unseeded(_Echo):
    def sample_task(self, rng: np.random.Generator) -> dict:
        return {"id": f"t-{np.random.default_rng().integers(0, 10**9)}", "question": "Say one."}


class _Drifting(_Echo):
    def respond(self, turn: Turn) -> EnvReply:
        reply = super().respond(turn)
        if not reply.terminated and self.context is not None:
            # Re-renders the whole context behind the base class's back: the ids the policy saw change.
            self.context.ids = self.template.encode("A different history.") + list(self.context.ids)
        return reply


class _Forgetful(_Echo):
    """Keeps a per-episode counter that it does not name in episode_state."""

    def __init__(self, tokenizer: Any = None, **kwargs: Any):
        super().__init__(tokenizer, max_turns=3, **kwargs)

    def on_reset(self, task: dict) -> dict[str, Any]:
        self.said = 0
        return {}

    def respond(self, turn: Turn) -> EnvReply:
        self.said = getattr(self, "said", 0) + 1
        return EnvReply(messages=[{"role": "user", "content": f"Heard {self.said}."}]) if turn.index < self.max_turns \
            else super().respond(turn)


class _NumpyReward(_Echo):
    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.float32(reward), terminated, truncated, info


class _BadInfo(_Echo):
    def grade(self, task: dict, turn: Turn) -> Grade:
        return Grade(reward=1.0, correct="yes")  # type: ignore[arg-type]  # planted: correct must be a bool


class _OwnReset(_Echo):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "extra": 1}


class _Undeclared(_Echo):
    def grade(self, task: dict, turn: Turn) -> Grade:
        return Grade.from_check(True, "correct", echoed=turn.text)


class EchoStepInfo(StepInfo, total=False):
    echoed: str
    """What the final turn said."""


class _Declared(_Undeclared, AgentEnv[dict, ResetInfo, EchoStepInfo]):
    pass


class _Raising(_Echo):
    def respond(self, turn: Turn) -> EnvReply:
        raise RuntimeError("the env's own bug")


@pytest.fixture
def planted():
    ids: list[str] = []

    def register(cls: type) -> str:
        env_id = f"ContractTest/{cls.__name__.strip('_')}-v0"
        gym.register(env_id, entry_point=cls)
        ids.append(env_id)
        return env_id

    yield register
    for env_id in ids:
        gym.registry.pop(env_id, None)


def test_a_sound_env_passes(planted, tokenizer):
    report = check_contract(planted(_Echo), tokenizer=tokenizer)
    assert report.ok, report
    assert report["snapshot"].status == "pass"


@pytest.mark.parametrize(
    "cls, check, found, fix",
    [
        (_Unseeded, "determinism", "two envs reset with seed=0 differ", "draw the task from the rng"),
        (_Drifting, "no_drift", "do not extend the previous prompt + action ids", "never re-render the context"),
        (_Forgetful, "snapshot", "restored after step 1, the next step differs from the original env's: obs['messages'][4]['content']: 'Heard 2.'", "episode_state"),
        (_NumpyReward, "step", "reward is np.float32(0.0) (float32), not a finite float", "finite float"),
        (_BadInfo, "step", "step 2: info['correct'] is str 'yes', not bool | None", "values of the declared types"),
        (_OwnReset, "hooks", "_OwnReset overrides reset", "customise reset through on_reset(task)"),
        (_Undeclared, "step", "step 2: info has the undeclared key 'echoed'", "declare every info key the env returns"),
        (_Raising, "step", "raised RuntimeError: the env's own bug", "must not raise"),
    ],
)
def test_each_planted_break_fails_its_check(planted, tokenizer, cls, check, found, fix):
    report = check_contract(planted(cls), tokenizer=tokenizer)
    assert not report.ok
    result = report[check]
    assert result.status == "fail", report
    assert found in result.detail and fix in result.fix, result
    with pytest.raises(ContractError, match=check):
        report.raise_if_failed()


def test_declared_info_keys_pass(planted, tokenizer):
    assert info_types(_Declared) == (ResetInfo, EchoStepInfo)
    assert info_types(_Echo) == (ResetInfo, StepInfo)
    report = check_contract(planted(_Declared), tokenizer=tokenizer)
    assert report.ok, report


def test_an_env_that_cannot_be_made_fails_make_and_skips_the_rest(planted, tokenizer):
    report = check_contract(planted(_Echo), tokenizer=tokenizer, env_kwargs={"max_turn": 3})
    assert report["make"].status == "fail" and "max_turn" in report["make"].detail
    assert {r.status for r in report.results[1:]} == {"skip"}


def test_type_problems():
    info = {"task_id": "a", "turn": 1, "tool_calls": 0, "tool_errors": 0, "tool_error_kinds": {}, "format_errors": 0,
            "new_segment": False, "segment": 0, "context_tokens": 5}
    assert type_problems(info, StepInfo, exact=True) == []
    assert type_problems({**info, "turn": True}, StepInfo, name="info") == ["info['turn'] is bool True, not int"]
    assert type_problems({k: v for k, v in info.items() if k != "segment"}, StepInfo) == ["value lacks the key 'segment'"]
    assert type_problems({**info, "extra": 1}, StepInfo, exact=True) == ["value has the undeclared key 'extra'"]
    assert type_problems({**info, "tool_error_kinds": {"timeout": "2"}}, StepInfo) == [
        "value['tool_error_kinds'] is dict {'timeout': '2'}, not dict[str, int]"]
    assert type_problems({**info, "truncated_reason": "max_turns", "reward_components": {"outcome": 1}}, StepInfo) == []


def test_cli_check(capsys, tokenizer):
    assert cli_main.main(["check", "Countdown-v0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("AgentR1/Countdown-v0: contract passed\n")
    assert all(f"  {name}" in out for name in CHECKS)


def test_cli_check_failure_exit_status(capsys, planted, tokenizer):
    env_id = planted(_Drifting)
    # A planted id lives outside the AgentR1 namespace, so list_envs does not name it: check it directly.
    assert not check_contract(env_id, tokenizer=tokenizer).ok
    assert cli_main.main(["check", "AgentR1/NoSuchEnv-v0"]) == 2
    assert "unknown env id 'AgentR1/NoSuchEnv-v0'" in capsys.readouterr().err


def test_cli_check_help(capsys):
    with pytest.raises(SystemExit):
        cli_main.main(["check", "--help"])
    out = capsys.readouterr().out
    assert "agent-gym check AgentR1/GSM8KTool-v0" in out and "no_drift" in out and "--env-kwarg" in out


def test_no_registered_env_class_overrides_reset_or_step():
    """reset and areset are AgentEnv's for every env; step and astep too, except for an env that says why
    (own_episode_loop). Read from the classes (imported, not made)."""
    from agent_gym.core.contract import hook_overrides
    from agent_gym.core.make import env_class

    found = {}
    for env_id in REGISTERED:
        cls = env_class(env_id)
        assert isinstance(cls, type) and issubclass(cls, AgentEnv), env_id
        overrides = hook_overrides(cls, own_step=bool(cls.own_episode_loop))
        if overrides:
            found[env_id] = overrides
    assert found == {}
    own = sorted(e for e in REGISTERED if env_class(e).own_episode_loop)
    assert own == ["AgentR1/AgentProgram-v0"]


def test_the_override_finder_catches_planted_overrides():
    from agent_gym.core.contract import hook_overrides

    class Base(AgentEnv):
        def sample_task(self, rng): return {}
        def get_task(self, task_id): return {}
        def initial_messages(self, task): return []
        def grade(self, task, turn): return Grade(0.0)

    class Resets(Base):
        def reset(self, *, seed=None, options=None): return super().reset(seed=seed, options=options)

    class Steps(Base):
        def step(self, action): return super().step(action)
        async def astep(self, action): return await super().astep(action)

    class Waits(Base):  # an async start through the hook: AgentEnv gives it areset
        async def aon_reset(self, task): return {}

    class OwnAreset(Base):
        async def areset(self, *, seed=None, options=None): ...

    assert hook_overrides(Base) == [] and hook_overrides(Waits) == []
    assert Waits.areset is AgentEnv._areset and not hasattr(Base, "areset")
    assert hook_overrides(Resets) == ["reset"]
    assert hook_overrides(Steps) == ["step", "astep"] and hook_overrides(Steps, own_step=True) == []
    assert hook_overrides(OwnAreset) == ["areset"]
