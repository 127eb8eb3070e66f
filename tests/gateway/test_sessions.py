"""Sessions through the in-process gateway (``gateway`` fixture, embedded Redis): a turn
records the messages the route decoded, then the reply the client got."""

from __future__ import annotations

from tests.support.http import chat_body, check_chat_stream, parse_sse, wait_for


def test_a_session_records_each_turn_with_the_decoded_messages_and_the_reply(gateway):
    headers = {**gateway.headers, "X-Session-Id": "in-process-session"}
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look it up"}]},
        {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None},  # refusal: not ours
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]
    plain = gateway.client.post(
        "/v1/chat/completions", json=chat_body(3, stream=False, messages=messages), headers=headers
    )
    assert plain.status_code == 200
    streamed = gateway.client.post("/v1/chat/completions", json=chat_body(2, messages=messages[:1]), headers=headers)
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\r\n\r\n")

    def recorded() -> dict:
        return gateway.client.get("/v1/sessions/in-process-session", headers=headers).json()

    wait_for(lambda: recorded()["turns"] == 2, message="both turns recorded")
    session = recorded()
    assert session["usage"]["completion_tokens"] == 5 and session["engine"] and session["requests_in_flight"] == []
    # the latest turn: what the client sent (as the gateway decoded it), then the streamed reply
    reply = check_chat_stream(parse_sse(streamed.text))["texts"][0]
    assert session["messages"] == [messages[0], {"role": "assistant", "content": reply}]
