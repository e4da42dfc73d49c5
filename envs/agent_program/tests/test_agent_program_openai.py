"""The openai SDK's own client against the real endpoint, answered by the real default model (SmolLM2-135M
with its tool-use LoRA, on CPU, a few tokens a request): examples/agent_program_openai.py's program played
by the episode engine gives valid trajectories with the exact ids the model generated."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401
from agent_gym.endpoint.server import ChatCompletionsServer

openai = pytest.importorskip("openai", reason="the openai SDK: pip install openai (in agent-r1-gym's [test] extra)")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "agent_program_openai.py"


def load_example():
    spec = importlib.util.spec_from_file_location("agent_program_openai_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sdk_lists_models_and_gets_a_clear_400_for_streaming():
    server = ChatCompletionsServer(models=["policy"])
    try:
        session = server.open_session()
        client = openai.OpenAI(base_url=server.base_url, api_key=session.key, max_retries=0)
        assert [m.id for m in client.models.list()] == ["policy"]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert "stream=true is not supported yet" in str(caught.value)
        assert caught.value.code == "stream_not_supported"

        def owner():  # answers like the env does: content from the policy, usage from the ids
            from agent_gym.endpoint.wire import completion

            event = session.next_event().result(timeout=30)
            event.reply(completion(completion_id=event.completion_id, model=event.request.model, content=None,
                                   tool_calls=[{"id": "call_1_0", "type": "function",
                                                "function": {"name": "calculate", "arguments": '{"expression": "6 * 7"}'}}],
                                   finish_reason="tool_calls", prompt_tokens=30, completion_tokens=20))

        thread = threading.Thread(target=owner)
        thread.start()
        response = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "6*7?"}])
        thread.join()
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls[0].function.name == "calculate"
        assert response.usage.total_tokens == 50
    finally:
        server.close()


@pytest.mark.slow
def test_the_openai_program_with_the_real_model_gives_valid_trajectories():
    from agent_gym.rollout import HFPolicy, run_episodes

    example = load_example()
    policy = HFPolicy()  # the embedded default model, greedy
    result = run_episodes(
        lambda: gym.make("AgentR1/AgentProgram-v0", tokenizer=policy.tokenizer, program=example.PROGRAM, split="test"),
        policy, episodes=2, max_new_tokens=6, batch_size=2, progress=False)
    template = ChatTemplateOf(policy.tokenizer)
    for t in result.trajectories:
        first = t.steps[0]
        task = agent_gym_task(t.task_id)
        # the first request rendered by the project's template: the SDK's messages, the tools offered in the system turn
        assert policy.tokenizer.decode(first.prompt_ids).endswith(
            f"<|im_start|>user\n{task['prompt']}<|im_end|>\n<|im_start|>assistant\n")
        assert "You can call these tools:" in policy.tokenizer.decode(first.prompt_ids)
        assert len(first.response_ids) <= 6 and first.response_logprobs is not None
        segments = t.segments()  # no drift within a segment, or this raises
        assert sum(s.response_mask.count(1) for s in segments) == sum(len(s.response_ids) for s in t.steps)
        info = t.final_info
        assert t.terminated and info["correct"] in (True, False)
        last = t.steps[-1]
        text = template.decode(last.response_ids[: len(last.response_ids) - template_end(template, last.response_ids)])
        assert info["program_result"].strip() == text.strip()  # the SDK got exactly what the model generated


def ChatTemplateOf(tokenizer):  # noqa: N802 - reads as a type
    from agent_gym.chat.template import ChatTemplate

    return ChatTemplate(tokenizer)


def template_end(template, ids):
    eot = template.end_of_turn_ids
    return len(eot) if eot and list(ids[-len(eot):]) == eot else 0


def agent_gym_task(task_id):
    from agent_gym_agent_program.demo import demo_task

    split, _, n = task_id.rpartition("-")
    return demo_task(split, int(n))
