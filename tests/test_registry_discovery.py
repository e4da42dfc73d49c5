"""Entry-point discovery: a failed registration is reported with where its module came from, remembered,
and retried by ``require_env`` before ``gym.make`` (what the verl agent loop calls in its workers)."""

from __future__ import annotations

import sys
import textwrap
from importlib.metadata import EntryPoint

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (the real discovery first)
from agent_gym.registry import registry


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Entry points of our own (real EntryPoint objects over modules written to tmp_path), then a clean
    registry: the ids they register and the modules are removed afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    eps: list[EntryPoint] = []
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep for ep in eps if ep.group == group])
    monkeypatch.setattr(registry, "_FAILED", {})
    yield tmp_path, eps
    for env_id in ("AgentR1/FlakyTest-v0", "AgentR1/ShadowTest-v0"):
        registry._CARDS.pop(env_id, None)
        gym.registry.pop(env_id, None)
    for name in ("flaky_envs_pkg", "shadow_envs_pkg"):
        sys.modules.pop(name, None)


def test_a_registration_that_failed_once_is_retried_by_require_env(plugins):
    tmp_path, eps = plugins
    (tmp_path / "flaky_envs_pkg.py").write_text(textwrap.dedent('''
        calls = []
        def register():
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("first call fails")
            from agent_gym.registry import register_env
            register_env("FlakyTest-v0", "agent_gym_arithmetic.env:ArithmeticEnv", description="test")
    '''))
    eps.append(EntryPoint("flaky", "flaky_envs_pkg:register", registry.ENTRY_POINT_GROUP))
    with pytest.warns(RuntimeWarning, match=r"entry point 'flaky' \(flaky_envs_pkg:register\) failed to register: "
                                            r"RuntimeError: first call fails \['flaky_envs_pkg' from .*flaky_envs_pkg.py\]"):
        registry.discover_envs(force=True)
    assert "AgentR1/FlakyTest-v0" not in gym.registry
    assert registry._FAILED == {"flaky": f"RuntimeError: first call fails ['flaky_envs_pkg' from {tmp_path / 'flaky_envs_pkg.py'}]"}
    registry.require_env("AgentR1/FlakyTest-v0")  # discovers again: the second call registers
    assert "AgentR1/FlakyTest-v0" in gym.registry and registry._FAILED == {}
    assert sys.modules["flaky_envs_pkg"].calls == [1, 1]


def test_a_package_hidden_by_a_folder_of_its_name_is_named_in_the_error(plugins):
    tmp_path, eps = plugins
    (tmp_path / "shadow_envs_pkg").mkdir()  # no __init__.py: Python imports it as a namespace package
    eps.append(EntryPoint("shadow", "shadow_envs_pkg:register", registry.ENTRY_POINT_GROUP))
    with pytest.warns(RuntimeWarning, match="was imported as a namespace package"):
        with pytest.raises(gym.error.NameNotFound) as raised:
            registry.require_env("AgentR1/ShadowTest-v0")
    message = str(raised.value)
    assert message.startswith("AgentR1/ShadowTest-v0 is not registered in this process (registered: AgentR1/")
    assert ("env packages that failed to register here: 'shadow': AttributeError: module 'shadow_envs_pkg' has no "
            f"attribute 'register' ['shadow_envs_pkg' was imported as a namespace package from ['{tmp_path / 'shadow_envs_pkg'}']: "
            "a folder of that name without __init__.py, earlier on sys.path, hides the installed package]") in message


def test_an_unknown_id_with_every_package_registered_says_so(plugins):
    with pytest.raises(gym.error.NameNotFound, match=r"AgentR1/Nope-v0 is not registered in this process .*"
                                                       r"is its env package installed\? install it \(`pip install agent-r1-gym-<family>`, "
                                                       r"or `pip install -e envs/<family>` in a checkout\) and `agent-gym list` shows it"):
        registry.require_env("AgentR1/Nope-v0")


def test_make_env_names_the_closest_id_and_the_arguments_an_env_takes(plugins):
    from agent_gym.core.make import UnknownEnvError, make_env

    with pytest.raises(UnknownEnvError, match=r"AgentR1/GSM8KTol-v0 is not registered .*; did you mean AgentR1/GSM8KTool-v0\?") as raised:
        make_env("AgentR1/GSM8KTol-v0")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, gym.error.NameNotFound)
    with pytest.raises(TypeError) as bad:
        make_env("AgentR1/GSM8KTool-v0", colour="red")
    message = str(bad.value)
    assert message.startswith("AgentR1/GSM8KTool-v0 takes no argument 'colour'"), message
    assert "split" in message and "was raised from the environment creator" not in message


def test_a_registered_id_needs_no_discovery(monkeypatch):
    monkeypatch.setattr(registry, "discover_envs", lambda **kw: pytest.fail("discovery ran"))
    registry.require_env("AgentR1/GSM8KTool-v0")
