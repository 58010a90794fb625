"""The scripted OpenAI-compatible SSE server used by lab 02's streaming exercise."""

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from rocmlab import lab
from rocmlab.lab.sse import THREAD_PREFIX, ScriptedSSEServer, active_servers


def _post(url, body, timeout=10):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def _read_events(resp):
    """(arrival time, payload) per SSE data line, up to [DONE]."""
    events = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        events.append((time.perf_counter(), data))
        if data == "[DONE]":
            break
    return events


def _port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_exported_from_lab():
    assert lab.ScriptedSSEServer is ScriptedSSEServer
    assert lab.active_sse_servers() == active_servers()


def test_completions_stream_tokens_in_order_then_done():
    tokens = ["质", "检", "报", "告"]
    with (
        ScriptedSSEServer(tokens, ttft_s=0.0, itl_s=0.0) as server,
        _post(server.url("/v1/completions"), {"prompt": "x", "stream": True}) as resp,
    ):
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = _read_events(resp)
    payloads = [json.loads(d) for _, d in events[:-1]]
    assert events[-1][1] == "[DONE]"
    assert [p["choices"][0]["text"] for p in payloads] == tokens
    assert [p["choices"][0]["finish_reason"] for p in payloads] == [None, None, None, "stop"]
    assert all(p["object"] == "text_completion" for p in payloads)


def test_chat_stream_uses_delta_and_usage_chunk():
    with ScriptedSSEServer(["a", "b", "c"], ttft_s=0.0, itl_s=0.0) as server:
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 2,
            "stream_options": {"include_usage": True},
        }
        with _post(server.url("/v1/chat/completions"), body) as resp:
            events = _read_events(resp)
    payloads = [json.loads(d) for _, d in events[:-1]]
    content = [p["choices"][0]["delta"]["content"] for p in payloads if p["choices"]]
    assert content == ["a", "b"]
    assert payloads[1]["choices"][0]["finish_reason"] == "length"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == 2


def test_non_streaming_returns_whole_text():
    with ScriptedSSEServer(["x", "y"], ttft_s=0.0, itl_s=0.0) as server, _post(server.url(), {"prompt": "p"}) as resp:
        body = json.loads(resp.read())
    assert body["choices"][0]["text"] == "xy"
    assert body["usage"]["completion_tokens"] == 2


def test_schedule_is_not_shortened():
    """Each token leaves no earlier than its scripted delay (a lower bound, not a timing race)."""
    delays = [0.15, 0.0, 0.12, 0.0]
    with ScriptedSSEServer(["a", "b", "c", "d", "e"], ttft_s=delays[0], itl_s=delays[1:] + [0.05]) as server:
        start = time.perf_counter()
        with _post(server.url(), {"prompt": "p", "stream": True}) as resp:
            events = _read_events(resp)
    arrivals = [t for t, d in events if d != "[DONE]"]
    assert arrivals[0] - start >= 0.15 - 1e-3
    assert arrivals[2] - arrivals[1] >= 0.12 - 1e-3
    assert arrivals[4] - start >= 0.15 + 0.12 + 0.05 - 1e-3


def test_stop_frees_port_thread_and_registry():
    server = ScriptedSSEServer(["a"]).start()
    port = server.port
    assert server.running and server in active_servers() and _port_open(port)
    server.stop()
    server.stop()  # idempotent
    assert not server.running and server not in active_servers()
    assert not _port_open(port)
    assert not [t for t in threading.enumerate() if t.name.startswith(f"{THREAD_PREFIX}-{port}")]


def test_max_lifetime_stops_a_forgotten_server():
    server = ScriptedSSEServer(["a"], max_lifetime_s=0.3).start()
    end = time.monotonic() + 10
    while server.running and time.monotonic() < end:
        time.sleep(0.05)
    assert not server.running and server not in active_servers()


def test_stop_interrupts_a_stream_in_progress():
    server = ScriptedSSEServer(["a", "b"], ttft_s=0.0, itl_s=30.0).start()
    resp = _post(server.url(), {"prompt": "p", "stream": True})
    resp.readline()
    t0 = time.monotonic()
    server.stop()
    resp.close()
    assert time.monotonic() - t0 < 10
    assert not server.running


def test_bad_requests_get_clear_errors():
    with ScriptedSSEServer(["a"]) as server:
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url(), {"prompt": "p", "max_tokens": 0})
        assert err.value.code == 400 and b"max_tokens" in err.value.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url("/v1/nothing"), {})
        assert err.value.code == 404
        with urllib.request.urlopen(server.url("/v1/models"), timeout=5) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "scripted"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": []}, "at least one token"),
        ({"tokens": ["a", "b"], "itl_s": [0.1, 0.2]}, "need 1"),
        ({"tokens": ["a"], "ttft_s": -1}, "ttft_s"),
        ({"tokens": ["a", "b"], "itl_s": -0.1}, "itl_s"),
    ],
)
def test_bad_scripts_are_rejected(kwargs, message):
    tokens = kwargs.pop("tokens")
    with pytest.raises(ValueError, match=message):
        ScriptedSSEServer(tokens, **kwargs)


def test_port_before_start_is_an_error():
    with pytest.raises(RuntimeError, match="not started"):
        _ = ScriptedSSEServer(["a"]).port
