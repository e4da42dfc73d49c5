"""JudgeReward on the real GSM8K env: the judge's verdict becomes reward in each mode, verdicts are cached,
a judge that fails or says nothing parsable leaves the env's reward in place (never an exception), astep
grades many episodes at once, and OpenAICompatibleJudge speaks HTTP to a real (local) server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the envs
from agent_gym.wrappers import (
    DEFAULT_RUBRIC,
    JudgeReward,
    OpenAICompatibleJudge,
    RewardShaping,
    ScriptedJudge,
    VerdictCache,
    default_extract,
    parse_verdict,
)

WORDS = "She makes eighteen dollars every day."  # right, but no "####": exact match gives 0.0
RIGHT = "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18"  # exact match gives 1.0


def make_env(tokenizer, judge, **kwargs):
    return JudgeReward(gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test"), judge, **kwargs)


def ids(tokenizer, text):
    """An action as the README builds it: the text's ids and the end-of-turn id."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def play(env, tokenizer, text, task_id="test-0"):
    env.reset(options={"task_id": task_id})
    _, reward, terminated, truncated, info = env.step(ids(tokenizer, text))
    assert terminated and not truncated
    return reward, info


def correct(prompt):
    return "The answer matches the reference.\nVERDICT: correct"


@pytest.mark.parametrize(
    ("mode", "weight", "text", "expected"),
    [
        ("replace", 1.0, WORDS, 1.0),
        ("add", 0.5, WORDS, 0.5),
        ("add", 0.5, RIGHT, 1.5),
        ("max", 0.5, WORDS, 0.5),
        ("max", 0.5, RIGHT, 1.0),
        ("replace", 0.5, RIGHT, 0.5),
    ],
)
def test_modes_turn_the_verdict_into_reward(tokenizer, mode, weight, text, expected):
    env = make_env(tokenizer, ScriptedJudge(correct), mode=mode, weight=weight)
    reward, info = play(env, tokenizer, text)
    assert reward == pytest.approx(expected)
    assert info["judge_verdict"] == 1.0
    assert info["env_reward"] == (1.0 if text == RIGHT else 0.0)
    assert sum(info["reward_components"].values()) == pytest.approx(reward)  # rewards stay the sum of components
    assert ("outcome" in info["reward_components"]) == (mode != "replace")
    assert (info["judge_cached"], info["judge_unparsable"], info["judge_errors"]) == (0, 0, 0)
    assert "judge_error" not in info
    assert info["correct"] is (text == RIGHT)  # the env's own check is left as it was


def test_the_rubric_carries_the_question_the_reference_and_the_extracted_answer(tokenizer):
    judge = ScriptedJudge(correct)
    play(make_env(tokenizer, judge), tokenizer, "<think>9 eggs</think>Working... <answer>18 dollars</answer>")
    (prompt,) = judge.prompts
    assert "Janet’s ducks lay 16 eggs per day" in prompt
    assert "Reference answer:\n18" in prompt
    assert "Answer to grade:\n18 dollars" in prompt and "9 eggs" not in prompt
    assert prompt.rstrip().endswith("VERDICT: incorrect")


def test_a_scripted_incorrect_verdict_turns_an_exact_match_into_zero(tokenizer):
    env = make_env(tokenizer, ScriptedJudge({"Answer to grade": "VERDICT: incorrect"}))
    reward, info = play(env, tokenizer, RIGHT)
    assert reward == 0.0 and info["judge_verdict"] == 0.0 and info["reward_components"] == {"judge": 0.0}


def test_identical_answers_call_the_judge_once(tokenizer):
    calls = []
    env = make_env(tokenizer, lambda prompt: calls.append(prompt) or "VERDICT: correct")
    first = play(env, tokenizer, WORDS)[1]
    second = play(env, tokenizer, WORDS)[1]
    assert len(calls) == 1
    assert (first["judge_cached"], second["judge_cached"]) == (0, 1)
    assert second["judge_verdict"] == 1.0
    play(env, tokenizer, WORDS, task_id="test-1")  # another task: another rubric text, another call
    assert len(calls) == 2
    assert env.stats == {"judged": 3, "calls": 2, "cached": 1, "unparsable": 0, "errors": 0}


def test_the_cache_is_a_bounded_lru():
    cache = VerdictCache(2)
    cache.put(("a", "1"), 1.0)
    cache.put(("b", "1"), 0.0)
    assert cache.get(("a", "1")) == 1.0  # "a" is now the most recent
    cache.put(("c", "1"), 0.5)
    assert len(cache) == 2 and cache.get(("b", "1")) is None and cache.get(("a", "1")) == 1.0
    with pytest.raises(ValueError, match="maxsize"):
        VerdictCache(-1)


def test_an_unparsable_verdict_is_counted_and_falls_back(tokenizer):
    calls = []
    env = make_env(tokenizer, lambda prompt: calls.append(prompt) or "Looks fine to me!")
    for text, env_reward in [(RIGHT, 1.0), (RIGHT, 1.0)]:
        reward, info = play(env, tokenizer, text)
        assert reward == env_reward == info["env_reward"]
        assert info["judge_unparsable"] == 1 and info["judge_errors"] == 0 and info["judge_verdict"] is None
        assert "VERDICT: correct|incorrect" in info["judge_error"] and "Looks fine" in info["judge_error"]
        assert info["reward_components"] == {"outcome": 1.0, "judge": 0.0}
    assert len(calls) == 2  # unparsable replies are not cached: the next episode asks again


def test_a_raising_judge_falls_back_with_the_error_in_info(tokenizer):
    def broken(prompt):
        raise ConnectionError("judge server gone")

    env = make_env(tokenizer, broken, mode="add")
    reward, info = play(env, tokenizer, RIGHT)
    assert reward == 1.0
    assert info["judge_errors"] == 1 and info["judge_error"] == "ConnectionError: judge server gone"
    assert env.stats["errors"] == 1


def test_a_judge_slower_than_timeout_s_falls_back(tokenizer):
    env = make_env(tokenizer, lambda prompt: time.sleep(2) or "VERDICT: correct", timeout_s=0.2)
    reward, info = play(env, tokenizer, WORDS)
    assert reward == 0.0 and info["judge_errors"] == 1 and "timed out after 0.2 s" in info["judge_error"]


def test_steps_that_are_not_answered_ends_are_not_judged(tokenizer):
    judge = ScriptedJudge(correct)
    env = make_env(tokenizer, judge)
    env.reset(options={"task_id": "test-0"})
    _, reward, terminated, _, info = env.step([10**9])  # an unknown id: an invalid action
    assert terminated and reward == 0.0 and "invalid_action" in info and "judge_verdict" not in info
    assert judge.prompts == []


def test_a_bad_rubric_is_refused_when_the_wrapper_is_built(tokenizer):
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test")
    with pytest.raises(ValueError, match=r"unknown variable\(s\) \['questoin'\]"):
        JudgeReward(env, correct, rubric="{{ questoin }}")
    with pytest.raises(ValueError, match="not a valid jinja2 template"):
        JudgeReward(env, correct, rubric="{% if %}")
    with pytest.raises(ValueError, match="mode must be one of replace, add, max"):
        JudgeReward(env, correct, mode="mean")  # type: ignore[arg-type]


def test_a_failing_extract_falls_back(tokenizer):
    def extract(text):
        raise KeyError("no answer")

    reward, info = play(make_env(tokenizer, correct, extract=extract), tokenizer, RIGHT)
    assert reward == 1.0 and info["judge_errors"] == 1 and "could not be rendered" in info["judge_error"]


def test_reward_shaping_adds_its_bonuses_to_the_judged_reward(tokenizer):
    env = RewardShaping(make_env(tokenizer, correct), format_bonus=0.25, tool_use_bonus=0.0)
    reward, info = play(env, tokenizer, RIGHT)
    assert reward == pytest.approx(1.25) and info["reward_components"]["judge"] == 1.0
    assert sum(info["reward_components"].values()) == pytest.approx(reward)


def test_astep_grades_64_episodes_at_once(tokenizer):
    lock = threading.Lock()
    running, peak, calls = 0, 0, []

    def slow_judge(prompt):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            calls.append(prompt)
        time.sleep(0.05)  # a served judge's latency: other episodes' judgings overlap it
        with lock:
            running -= 1
        return "VERDICT: correct"

    cache = VerdictCache()
    envs = [make_env(tokenizer, slow_judge, cache=cache) for _ in range(64)]

    async def episode(env, n):
        env.reset(options={"task_id": f"test-{n}"})
        return await env.astep(ids(tokenizer, WORDS))

    async def main():
        return await asyncio.gather(*(episode(env, n) for n, env in enumerate(envs)))

    results = asyncio.run(main())
    assert len(calls) == 64 and peak > 1  # the judge calls overlapped: the loop was never blocked by one
    assert all(r[1] == 1.0 and r[2] and r[4]["judge_verdict"] == 1.0 for r in results)
    assert len(cache) == 64


def test_an_async_judge_under_step_and_astep(tokenizer):
    async def judge(prompt):
        await asyncio.sleep(0)
        return "SCORE: 0.75"

    env = make_env(tokenizer, judge)
    assert play(env, tokenizer, WORDS)[0] == 0.75  # step runs the coroutine to completion

    async def main():
        env.reset(options={"task_id": "test-2"})
        return await env.astep(ids(tokenizer, WORDS))

    _, reward, _, _, info = asyncio.run(main())
    assert reward == 0.75 and info["judge_verdict"] == 0.75


def test_parse_verdict_reads_the_last_verdict_line():
    assert parse_verdict("VERDICT: correct") == 1.0
    assert parse_verdict("first VERDICT: correct?\nno...\n**Verdict:** Incorrect.") == 0.0
    assert parse_verdict("reasoning\nSCORE: 0.8") == 0.8
    assert parse_verdict("SCORE: 7") is None  # outside [0, 1]: unparsable, never clipped
    assert parse_verdict("It is correct.") is None
    assert parse_verdict("VERDICT: maybe") is None


def test_default_extract():
    assert default_extract("so <answer> 42 </answer>") == "42"
    assert default_extract("work\n#### 1,080") == "1,080"
    assert default_extract("<think>#### 3</think>Eighteen dollars.") == "Eighteen dollars."


def test_import_stays_light():
    code = "import sys, agent_gym.wrappers; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- OpenAICompatibleJudge against a real HTTP server ---------------------------------------------------


class ChatServer:
    """A tiny chat-completions server on localhost: answers as ``behaviour`` says, records requests."""

    def __init__(self):
        self.behaviour = "ok"
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                if server.behaviour == "500":
                    self._send(500, b'{"error": "engine crashed"}')
                    return
                if server.behaviour == "slow":
                    time.sleep(1.5)
                reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Same number.\nVERDICT: correct"}}]}
                self._send(200, json.dumps(reply).encode())

            def _send(self, code, data):
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (the time-out test)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = ChatServer()
    yield server
    server.close()


def test_openai_compatible_judge_over_http(tokenizer, chat_server):
    judge = OpenAICompatibleJudge(chat_server.url, "judge-model", api_key="k", timeout_s=0.5, max_tokens=64)
    env = make_env(tokenizer, judge)
    reward, info = play(env, tokenizer, WORDS)
    assert reward == 1.0 and info["judge_verdict"] == 1.0
    path, headers, body = chat_server.requests[-1]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer k"
    assert body["model"] == "judge-model" and body["max_tokens"] == 64 and body["temperature"] == 0.0
    assert body["messages"][-1]["role"] == "user" and "eighteen dollars" in body["messages"][-1]["content"]

    chat_server.behaviour = "500"
    reward, info = play(env, tokenizer, RIGHT)
    assert reward == 1.0 and info["judge_errors"] == 1
    assert "answered HTTP 500" in info["judge_error"] and "engine crashed" in info["judge_error"]

    chat_server.behaviour = "slow"
    reward, info = play(env, tokenizer, RIGHT)
    assert reward == 1.0 and info["judge_errors"] == 1 and "timed out after 0.5 s" in info["judge_error"]

    async def main():  # astep: the blocking HTTP call runs in a thread, errors fall back the same way
        env.reset(options={"task_id": "test-0"})
        return await env.astep(ids(tokenizer, RIGHT))

    _, reward, _, _, info = asyncio.run(main())
    assert reward == 1.0 and "timed out" in info["judge_error"]


def test_openai_compatible_judge_urls_and_an_unreachable_server():
    assert OpenAICompatibleJudge("http://h:8000", "m").url == "http://h:8000/v1/chat/completions"
    assert OpenAICompatibleJudge("http://h:8000/v1/", "m").url == "http://h:8000/v1/chat/completions"
    assert OpenAICompatibleJudge("http://h/x/chat/completions", "m").url == "http://h/x/chat/completions"
    assert "secret" not in repr(OpenAICompatibleJudge("http://h", "m", api_key="secret"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    with pytest.raises(Exception, match="unreachable"):
        OpenAICompatibleJudge(f"http://127.0.0.1:{port}", "m", timeout_s=2)("prompt")


def test_the_default_rubric_asks_for_the_verdict_line_parse_verdict_reads():
    for line in ("VERDICT: correct", "VERDICT: incorrect"):
        assert line in DEFAULT_RUBRIC and parse_verdict(line) is not None


@pytest.mark.slow
def test_hf_judge_with_the_embedded_model(tokenizer):
    from agent_gym.wrappers import HFJudge

    judge = HFJudge(max_new_tokens=8, device="cpu")
    reply = judge("Is 2 + 2 = 4? End with VERDICT: correct or VERDICT: incorrect.")
    assert isinstance(reply, str)
    reward, info = play(make_env(tokenizer, judge), tokenizer, RIGHT)  # a 135M judge: any outcome, never a raise
    assert "judge_verdict" in info and isinstance(reward, float)
