"""The driver's VERL_USE_EXTERNAL_MODULES reaches every Ray worker of the job, also on a cluster started
with ``ray start`` (whose workers do not inherit the driver's environment): ``agent_gym_verl.main_ppo``
wraps verl's own runtime-env function, which leaves the variable out. Against the real verl."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

import verl.trainer.main_ppo as verl_main  # noqa: E402

from agent_gym_verl import compat, patches  # noqa: E402


def test_the_hook_variable_is_in_the_jobs_runtime_env(monkeypatch):
    monkeypatch.setattr(verl_main, "get_ppo_ray_runtime_env", verl_main.get_ppo_ray_runtime_env)  # restored after
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "agent_gym_verl.fast_logprobs")
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    verls = getattr(verl_main, "_agent_gym_original_get_ppo_ray_runtime_env", verl_main.get_ppo_ray_runtime_env)
    unwrapped = verls()
    assert "VERL_USE_EXTERNAL_MODULES" not in unwrapped.get("env_vars", {})  # what verl alone gives the job

    patches.forward_env_to_ray_workers()
    patches.forward_env_to_ray_workers()  # idempotent: one wrapper, over verl's own function
    assert verl_main._agent_gym_original_get_ppo_ray_runtime_env is verls
    runtime_env = verl_main.get_ppo_ray_runtime_env()
    assert runtime_env["env_vars"].pop("VERL_USE_EXTERNAL_MODULES") == "agent_gym_verl.fast_logprobs"
    assert runtime_env == unwrapped  # everything else as verl made it

    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "")  # switched off: nothing forwarded
    assert "VERL_USE_EXTERNAL_MODULES" not in verl_main.get_ppo_ray_runtime_env().get("env_vars", {})


def test_the_file_loggers_path_reaches_the_task_runner_absolute(monkeypatch, tmp_path):
    """verl's file logger runs in the TaskRunner actor: without the variable there it writes
    ./<project_name>/<experiment_name>.jsonl in the worker's directory, not where the user asked."""
    monkeypatch.setattr(verl_main, "get_ppo_ray_runtime_env", verl_main.get_ppo_ray_runtime_env)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "runs/metrics.jsonl")
    patches.forward_env_to_ray_workers()
    env_vars = verl_main.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars["VERL_FILE_LOGGER_PATH"] == str(tmp_path / "runs" / "metrics.jsonl")


def test_main_installs_the_forwarding_before_verl_starts(monkeypatch):
    import sys

    import agent_gym_verl.main_ppo as ours

    runner_module = compat.task_runner_module()
    monkeypatch.setattr(runner_module, "TaskRunner", runner_module.TaskRunner)  # main installs ours: restored after
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(verl_main, "get_ppo_ray_runtime_env", verl_main.get_ppo_ray_runtime_env)
    monkeypatch.setattr(verl_main, "main", lambda: None)  # stop where verl would start Ray
    monkeypatch.delenv("AGENT_GYM_VERL_DRY_RUN", raising=False)
    ours.main([])
    assert verl_main.get_ppo_ray_runtime_env.__qualname__.startswith("forward_env_to_ray_workers")
