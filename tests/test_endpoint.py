"""The OpenAI-compatible endpoint (agent_gym.endpoint): the wire format, the HTTP server over a real
localhost socket (urllib as the client), and a program's requests as exact prompt ids (append vs rewrite)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from agent_gym.chat.template import ChatTemplate
from agent_gym.endpoint.conversation import Conversation, same_reply
from agent_gym.endpoint.server import ChatCompletionsServer, ProgramEnd, Request
from agent_gym.endpoint.wire import APIError, completion, parse_request

CALC = {"type": "function", "function": {"name": "calculate", "description": "Evaluate arithmetic.",
                                          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                                         "required": ["expression"]}}}


def post(url: str, body: dict, key: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def server():
    s = ChatCompletionsServer(models=["policy"])
    yield s
    s.close()


# -- wire ------------------------------------------------------------------------------------------


def test_a_request_is_normalised_to_the_chat_format():
    request = parse_request(json.dumps({
        "model": "gpt-4o-mini", "temperature": 0.5, "max_tokens": 7, "tools": [CALC],
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": {"expression": "2+2"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
        ],
    }))
    assert request.model == "gpt-4o-mini"
    assert request.params == {"temperature": 0.5, "max_tokens": 7}
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "2+2"}'}}]},
        {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "calculate"},  # the name of the call it answers
    ]
    assert request.tools == [CALC]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"stream": True}, "stream", "stream=true is not supported yet"),
    ({"n": 2}, "n", "n=2 is not supported"),
    ({"messages": []}, "messages", "messages must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages", "unknown role 'robot'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages", "'image_url' is not supported"),
    ({"messages": [{"role": "tool", "content": "4"}]}, "messages", "needs the tool_call_id"),
    ({"tools": [{"type": "function"}]}, "tools", "tools[0] must be"),
    ({"functions": []}, "functions", "send tools=[...] instead"),
])
def test_a_request_that_cannot_be_answered_as_asked_is_a_400_naming_the_field(body, param, words):
    with pytest.raises(APIError) as caught:
        parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})
    assert caught.value.status == 400
    assert caught.value.param == param
    assert words in caught.value.message


# -- server ----------------------------------------------------------------------------------------


def test_models_and_a_completion_over_http(server):
    with urllib.request.urlopen(server.base_url + "/models", timeout=30) as response:
        assert json.loads(response.read()) == {"object": "list", "data": [
            {"id": "policy", "object": "model", "created": 0, "owned_by": "agent-gym"}]}
    session = server.open_session()
    seen = []

    def owner():
        event = session.next_event().result(timeout=30)
        seen.append(event)
        event.reply(completion(completion_id=event.completion_id, model=event.request.model, content="4",
                               finish_reason="stop", prompt_tokens=10, completion_tokens=2))

    thread = threading.Thread(target=owner)
    thread.start()
    status, body = post(server.base_url + "/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}, session.key)
    thread.join()
    assert status == 200
    assert isinstance(seen[0], Request) and seen[0].request.messages == [{"role": "user", "content": "2+2?"}]
    assert body["object"] == "chat.completion" and body["model"] == "m"
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "4", "refusal": None},
                                "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}


def test_errors_are_answered_in_openais_shape(server):
    session = server.open_session()
    url = server.base_url + "/chat/completions"
    ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, body = post(url, {**ok, "stream": True}, session.key)
    assert status == 400 and body["error"]["code"] == "stream_not_supported"
    assert body["error"]["message"].startswith("stream=true is not supported yet")
    status, body = post(url, ok, "not-a-key")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    status, body = post(server.base_url + "/embeddings", ok, session.key)
    assert status == 404 and body["error"]["code"] == "unknown_url"
    server.close_session(session, "the episode ended")
    status, body = post(url, ok, session.key)
    assert status == 401  # a closed session's key is forgotten


def test_closing_a_session_answers_its_waiting_request_410(server):
    session = server.open_session()
    url = server.base_url + "/chat/completions"
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("r", post(url, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, session.key)))
    thread.start()
    event = session.next_event().result(timeout=30)
    assert isinstance(event, Request)
    session.close("time limit")
    thread.join(timeout=30)
    status, body = got["r"]
    assert status == 410 and body["error"]["code"] == "episode_over" and "(time limit)" in body["error"]["message"]


def test_events_queue_in_order_and_a_cancelled_wait_loses_nothing(server):
    session = server.open_session()
    waiting = session.next_event()
    assert waiting.cancel()  # the owner gave up waiting (a time-out)
    session.finish(value=42)
    assert session.next_event().result(timeout=1) == ProgramEnd(42, None)


# -- conversation: exact prompt ids ------------------------------------------------------------------


def ask(messages, tools=(CALC,)):
    return parse_request({"model": "m", "messages": messages, "tools": list(tools)})


def test_a_request_that_appends_continues_the_prompt_ids_verbatim(tokenizer):
    template = ChatTemplate(tokenizer)
    conv = Conversation(template)
    first = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "What is 6 * 7?"}]
    conv.open(ask(first))
    prompt = list(conv.context.ids)
    rendered = tokenizer.decode(prompt)
    assert rendered.startswith("<|im_start|>system\nUse the tool.\n\nYou can call these tools:\n<tools>\n")
    assert rendered.endswith("<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n")
    # the policy's turn, with ids that a re-tokenisation of its text would not give back
    text = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
    head, tail = text.split("calculate", 1)
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    action = enc(head) + [i for ch in "calculate" for i in enc(ch)] + enc(tail)
    assert tokenizer.decode(action) == text and action != enc(text)
    action = action + template.end_of_turn_ids
    call = {"id": "call_1_0", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "6 * 7"}'}}
    reply = {"role": "assistant", "content": None, "tool_calls": [call]}
    sent_back = {**reply, "content": ""}
    nxt = ask([*first, sent_back, {"role": "tool", "tool_call_id": "call_1_0", "content": "42"}])
    new_segment = conv.follow(action, {"role": "assistant", "content": text, "tool_calls": [call]}, reply, nxt)
    assert new_segment is False
    ids = list(conv.context.ids)
    assert ids[: len(prompt) + len(action)] == prompt + action
    assert tokenizer.decode(ids[len(prompt) + len(action):]) == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"


def test_a_request_that_rewrites_history_is_rendered_afresh(tokenizer):
    template = ChatTemplate(tokenizer)
    conv = Conversation(template)
    first = [{"role": "user", "content": "Hello"}]
    conv.open(ask(first, tools=()))
    action = tokenizer.encode("Hi there", add_special_tokens=False) + template.end_of_turn_ids
    reply = {"role": "assistant", "content": "Hi there"}
    summary = [{"role": "system", "content": "Summary: the user said hello."}, {"role": "user", "content": "And now?"}]
    assert conv.follow(action, dict(reply), reply, ask(summary, tools=())) is True
    assert conv.context.ids == template.encode_prompt(template.render(summary))
    assert conv.context.segment == 1


def test_an_edited_reply_or_changed_tools_is_a_rewrite_and_a_long_request_is_refused(tokenizer):
    template = ChatTemplate(tokenizer)
    conv = Conversation(template, max_context_tokens=200)
    first = [{"role": "user", "content": "Hello"}]
    conv.open(ask(first, tools=()))
    before = list(conv.context.ids)
    action = tokenizer.encode("Hi there", add_special_tokens=False) + template.end_of_turn_ids
    reply = {"role": "assistant", "content": "Hi there"}
    long = [*first, reply, {"role": "user", "content": "blah " * 400}]
    with pytest.raises(APIError) as caught:
        conv.follow(action, dict(reply), reply, ask(long, tools=()))
    assert caught.value.code == "context_length_exceeded" and "maximum context length is 200 tokens" in caught.value.message
    assert conv.context.ids == before  # refused: as it was
    assert not same_reply({"role": "assistant", "content": "Hi!"}, reply)
    edited = [*first, {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Bye"}]
    assert conv.follow(action, dict(reply), reply, ask(edited, tools=())) is True
