"""Exact replay: recorded episodes replayed step by step, live or with the recorded tool answers, and the
first difference reported when the recording and the env disagree."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.cli.main import main
from agent_gym.models import load_tokenizer
from agent_gym.rollout import ScriptedPolicy, run_episodes
from agent_gym.tools import HermesParser
from agent_gym.trajectory import TrajectoryWriter, read_trajectories

CALC = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}])
TURNS = {1: CALC, 2: "She sells 9 eggs at $2 each.\n#### 18"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def recorded(tok, tmp_path_factory):
    """Three GSM8KTool episodes of a scripted policy, written gzipped as `agent-gym eval` would."""
    path = tmp_path_factory.mktemp("runs") / "gsm8k_tool.jsonl.gz"
    policy = ScriptedPolicy(tok, lambda conversation, turn: TURNS[min(turn, 2)])
    with TrajectoryWriter(path) as writer:
        run_episodes(lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test", max_turns=4), policy,
                     task_ids=["test-0", "test-1", "test-2"], progress=False, writer=writer)
    return path


def test_trajectories_record_what_replay_needs(recorded):
    [t, *_] = read_trajectories(recorded)
    assert t.metadata["env_kwargs"] == {"split": "test", "max_turns": 4}
    assert t.metadata["tokenizer"]
    assert t.steps[0].info["tool_outputs"] == ["9"] and t.steps[0].info["tool_results"] == ["ok"]


@pytest.mark.parametrize("tools", ["live", "recorded"])
def test_recorded_episodes_replay_identically(recorded, tools):
    reports = agent_gym.replay(recorded, tools=tools)
    assert [(r.task_id, r.matched, r.steps) for r in reports] == [("test-0", True, 2), ("test-1", True, 2), ("test-2", True, 2)]
    assert reports[0].line().endswith("task test-0: matched (2 steps)")


def _edited(recorded, tmp_path, edit):
    lines = [json.loads(line) for line in __import__("gzip").open(recorded, "rt")]
    edit(lines[0])
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_changed_reward_is_the_first_difference(recorded, tmp_path):
    path = _edited(recorded, tmp_path, lambda t: t["steps"][1].update(reward=0.5))
    first, second, _ = agent_gym.replay(path)
    assert not first.matched and second.matched
    d = first.difference
    assert (d.step, d.what, d.recorded, d.replayed) == (1, "reward", 0.5, 1.0)


def test_a_tool_that_answers_otherwise_diverges_live_and_is_served_from_the_recording(recorded, tmp_path):
    def edit(t):
        t["steps"][0]["info"]["tool_outputs"] = ["8"]  # as many tokens as "9"

    path = _edited(recorded, tmp_path, edit)
    [live, *_] = agent_gym.replay(path, tools="live")
    assert (live.difference.step, live.difference.what, live.difference.recorded, live.difference.replayed) == (
        0, "info['tool_outputs']", ["8"], ["9"])
    # With the recording's answer served, step 0 agrees, and the next prompt (which holds the live tool
    # turn "9" in the file) is where the recorded and the replayed episodes part.
    [cassette, *_] = agent_gym.replay(path, tools="recorded")
    assert (cassette.difference.step, cassette.difference.what) == (1, "prompt_ids")
    assert "prompt_ids differ at position" in cassette.line()


def test_replay_cli_prints_each_episode_and_exits_1_on_a_divergence(recorded, tmp_path, capsys):
    assert main(["replay", str(recorded), "--tools", "recorded"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "3 of 3 episodes matched (recorded tools)"
    assert all(line.endswith("matched (2 steps)") for line in out[:3])
    path = _edited(recorded, tmp_path, lambda t: t["steps"][1].update(reward=0.5))
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "diverged at step 1: reward recorded 0.5, replayed 1.0" in out[0]
    assert out[-1] == "2 of 3 episodes matched (live tools)"
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2


def test_recorded_tools_replay_a_sandbox_episode_without_running_the_sandbox(tok, tmp_path, monkeypatch):
    pytest.importorskip("agent_gym_python")
    code = HermesParser().format_calls([{"name": "python", "arguments": {"code": "print(16 - 3 - 4)"}}])
    policy = ScriptedPolicy(tok, lambda c, turn: code if turn == 1 else "#### 18")
    path = tmp_path / "py.jsonl"
    with TrajectoryWriter(path) as writer:
        run_episodes(lambda: gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok, split="test"), policy,
                     task_ids=["test-0"], progress=False, writer=writer)
    from agent_gym.sandbox.tool import PythonTool

    def no_sandbox(self, code):
        raise AssertionError("the sandbox ran under tools='recorded'")

    monkeypatch.setattr(PythonTool, "arun_code", no_sandbox)
    [report] = agent_gym.replay(path, tools="recorded")
    assert report.matched and report.steps == 2


@pytest.mark.slow  # the default model plays two episodes on CPU
def test_the_main_jobs_own_trajectories_replay_identically(tmp_path, capsys):
    out = tmp_path / "main_job.jsonl"
    assert main(["eval", "AgentR1/GSM8KTool-v0", "--episodes", "2", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["replay", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 of 2 episodes matched (live tools)"


# -- the recorded tokenizer, from any state of the model cache -------------------------------------------


def _fresh_tokenizer_cache(monkeypatch, cache):
    """AGENT_GYM_CACHE=cache (None: unset, with HOME in a temporary folder) and no tokenizer memoised."""
    from agent_gym import models

    if cache is None:
        monkeypatch.delenv("AGENT_GYM_CACHE", raising=False)
    else:
        monkeypatch.setenv("AGENT_GYM_CACHE", str(cache))
    models._load_tokenizer_cached.cache_clear()


@pytest.fixture
def clear_tokenizers():
    from agent_gym import models

    yield
    models._load_tokenizer_cached.cache_clear()


def test_a_builtin_tokenizer_is_named_by_its_builtin_name_cold_and_warm(tmp_path, monkeypatch, clear_tokenizers):
    """The name a trajectory records: the built-in's, not this machine's cache folder or the GGUF's
    package folder (which holds no tokenizer.json, so transformers would ask for sentencepiece)."""
    from agent_gym.models import BASE_MODEL

    _fresh_tokenizer_cache(monkeypatch, tmp_path / "cache")
    cold = load_tokenizer()  # converted from the GGUF into the empty cache
    assert cold.name_or_path == BASE_MODEL
    assert (tmp_path / "cache" / "tokenizers").is_dir()
    _fresh_tokenizer_cache(monkeypatch, tmp_path / "cache")
    warm = load_tokenizer("smollm2-135m-tool")  # read from the cache folder; a LoRA shares its base's
    assert warm.name_or_path == BASE_MODEL and warm is not cold
    assert warm.get_vocab() == cold.get_vocab()


def _edited_all(recorded, tmp_path, tokenizer_reference):
    """The recording with every trajectory's tokenizer reference replaced."""
    lines = [json.loads(line) for line in __import__("gzip").open(recorded, "rt")]
    for line in lines:
        line["metadata"]["tokenizer"] = tokenizer_reference
    path = tmp_path / "retokenized.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _gguf_package_folder():
    from agent_gym.models import _smollm2_gguf

    return str(_smollm2_gguf().parent)


@pytest.mark.parametrize("reference, cache", [
    ("builtin name", "warm"), ("builtin name", "missing"), ("GGUF package folder", "fresh"), ("GGUF package folder", "warm"),
    ("cache folder of another transformers", "fresh"), ("cache folder of another machine", "warm"),
])
def test_a_recording_replays_from_any_model_cache_state(recorded, tmp_path, monkeypatch, clear_tokenizers, reference,
                                                         cache):
    """What a trajectory says of its tokenizer now (the built-in's name) and what recordings said before
    (the folder of the GGUF when eval converted it, the cache folder when it read it: per transformers
    version, and per machine) all load the recorded tokenizer, whatever AGENT_GYM_CACHE holds: a fresh
    folder, none set (~/.cache/agent_gym of a new HOME), the one the recording was made with. No
    sentencepiece or tiktoken is needed (the README's install has neither)."""
    refs = {
        "builtin name": "smollm2-135m-instruct",
        "GGUF package folder": _gguf_package_folder(),
        "cache folder of another transformers": str(tmp_path / "old" / "tokenizers" / "smollm2-135m-instruct-transformers4.57"),
        "cache folder of another machine": "/home/someone/.cache/agent_gym/tokenizers/smollm2-135m-instruct-transformers5.24",
    }
    path = _edited_all(recorded, tmp_path, refs[reference])
    if cache == "missing":
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        _fresh_tokenizer_cache(monkeypatch, None)
    elif cache == "fresh":
        _fresh_tokenizer_cache(monkeypatch, tmp_path / "fresh")
    reports = agent_gym.replay(path, tools="recorded")
    assert [(r.task_id, r.matched, r.steps) for r in reports] == [("test-0", True, 2), ("test-1", True, 2), ("test-2", True, 2)]
    if cache == "missing":
        assert (tmp_path / "home" / ".cache" / "agent_gym" / "tokenizers").is_dir()


def test_a_recorded_tokenizer_that_does_not_load_is_one_line_naming_the_fix(recorded, tmp_path, capsys):
    path = _edited_all(recorded, tmp_path, str(tmp_path / "gone" / "my-tokenizer"))
    assert main(["replay", str(path), "--tools", "recorded"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"its recorded tokenizer '{tmp_path / 'gone' / 'my-tokenizer'}' does not load here" in err[0]
    assert err[0].endswith("name one that does: agent-gym replay FILE --tokenizer NAME_OR_PATH")
    assert main(["replay", str(path), "--tools", "recorded", "--tokenizer", "smollm2-135m-instruct"]) == 0
