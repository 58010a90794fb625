"""The scripted OpenAI-compatible SSE server used by lab 02's streaming exercise."""

import itertools
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from rocmlab import lab
from rocmlab.lab.sse import THREAD_PREFIX, ScriptedSSEServer, active_servers, incremental_pieces


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
    pieces = ["质", "检", "报", "告"]
    with (
        ScriptedSSEServer(pieces, ttft_s=0.0, itl_s=0.0) as server,
        _post(server.url("/v1/completions"), {"prompt": "x", "stream": True}) as resp,
    ):
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = _read_events(resp)
    payloads = [json.loads(d) for _, d in events[:-1]]
    assert events[-1][1] == "[DONE]"
    assert [p["choices"][0]["text"] for p in payloads] == pieces
    assert [p["choices"][0]["finish_reason"] for p in payloads] == [None, None, None, "stop"]
    assert all(p["object"] == "text_completion" for p in payloads)


def _payloads(events):
    return [json.loads(d) for _, d in events if d != "[DONE]"]


def test_chat_stream_opens_with_role_then_delta_and_usage_chunk():
    with ScriptedSSEServer(["a", "b", "c"], ttft_s=0.0, itl_s=0.0) as server:
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 2,
            "stream_options": {"include_usage": True},
        }
        with _post(server.url("/v1/chat/completions"), body) as resp:
            payloads = _payloads(_read_events(resp))
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [p["choices"][0]["delta"]["content"] for p in payloads[1:] if p["choices"]]
    assert content == ["a", "b"]
    assert payloads[2]["choices"][0]["finish_reason"] == "length"
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 2,
        "total_tokens": 4,
    }


def test_pieces_carry_several_tokens_and_held_back_text_and_usage_counts_tokens():
    pieces, counts = ["焊缝", "", "气孔", "需返工"], [2, 1, 1, 3]
    with ScriptedSSEServer(pieces, tokens_per_piece=counts, ttft_s=0.0, itl_s=0.0) as server:
        body = {"prompt": "写", "stream": True, "stream_options": {"include_usage": True}}
        with _post(server.url(), body) as resp:
            payloads = _payloads(_read_events(resp))
    token_events = [p for p in payloads if p["choices"]]
    assert [p["choices"][0]["text"] for p in token_events] == pieces
    assert all("usage" not in p for p in token_events), "without continuous_usage_stats only the last event has usage"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == sum(counts) == 7
    assert payloads[-1]["object"] == "text_completion"


def test_max_tokens_clips_the_piece_it_cuts():
    with ScriptedSSEServer(["ab", "cd", "ef"], tokens_per_piece=[2, 2, 2], ttft_s=0.0, itl_s=0.0) as server:
        body = {"prompt": "p", "stream": True, "max_tokens": 3, "stream_options": {"include_usage": True}}
        with _post(server.url(), body) as resp:
            payloads = _payloads(_read_events(resp))
    assert [p["choices"][0]["text"] for p in payloads if p["choices"]] == ["ab", "cd"]
    assert payloads[-2]["choices"][0]["finish_reason"] == "length"
    assert payloads[-1]["usage"]["completion_tokens"] == 3


def test_continuous_usage_stats_put_running_usage_on_every_event():
    with ScriptedSSEServer(["a", "bc"], tokens_per_piece=[1, 2], ttft_s=0.0, itl_s=0.0) as server:
        options = {"include_usage": True, "continuous_usage_stats": True}
        body = {"prompt": "xy", "stream": True, "stream_options": options}
        with _post(server.url(), body) as resp:
            payloads = _payloads(_read_events(resp))
    assert [p["usage"]["completion_tokens"] for p in payloads] == [1, 3, 3]
    assert all(p["usage"]["prompt_tokens"] == 2 for p in payloads)


@pytest.mark.parametrize(
    "server_kwargs, options",
    [({}, None), ({}, {"include_usage": False}), ({"usage": False}, {"include_usage": True})],
    ids=["not-asked", "asked-false", "server-ignores-it"],
)
def test_no_usage_chunk_unless_asked_and_supported(server_kwargs, options):
    with ScriptedSSEServer(["a", "b"], ttft_s=0.0, itl_s=0.0, **server_kwargs) as server:
        body = {"prompt": "p", "stream": True} | ({"stream_options": options} if options is not None else {})
        with _post(server.url(), body) as resp:
            payloads = _payloads(_read_events(resp))
    assert all(p["choices"] for p in payloads) and all("usage" not in p for p in payloads)


def test_prompt_tokens_use_count_tokens_and_chat_reads_max_completion_tokens():
    with ScriptedSSEServer(["a", "b", "c"], ttft_s=0.0, itl_s=0.0, count_tokens=lambda s: len(s.encode())) as server:
        body = {
            "messages": [{"role": "user", "content": "质检"}],
            "stream": True,
            "max_completion_tokens": 1,
            "stream_options": {"include_usage": True},
        }
        with _post(server.url("/v1/chat/completions"), body) as resp:
            payloads = _payloads(_read_events(resp))
    assert payloads[-1]["usage"] == {"prompt_tokens": 6, "completion_tokens": 1, "total_tokens": 7}


def _utf8_decode(ids):
    return bytes(ids).decode("utf-8", errors="replace")


def test_incremental_pieces_hold_back_incomplete_characters():
    ids = list("焊缝a".encode())
    pieces = incremental_pieces(ids, _utf8_decode)
    assert pieces == ["", "", "焊", "", "", "缝", "a"]
    assert "".join(pieces) == "焊缝a" and len(pieces) == len(ids)
    assert incremental_pieces(list("气".encode())[:2], _utf8_decode) == ["", ""], (
        "an unfinished character is never sent"
    )
    assert incremental_pieces([], _utf8_decode) == []


def test_non_streaming_returns_whole_text():
    with ScriptedSSEServer(["x", "y"], ttft_s=0.0, itl_s=0.0) as server, _post(server.url(), {"prompt": "p"}) as resp:
        body = json.loads(resp.read())
    assert body["choices"][0]["text"] == "xy"
    assert body["usage"]["completion_tokens"] == 2


def test_schedule_is_not_shortened():
    """Each token arrives no earlier than the sum of the delays scripted up to it. Only that sum is a
    lower bound: the gap between two arrivals is not, as the client may read the earlier one late."""
    delays = [0.15, 0.0, 0.12, 0.0, 0.05]
    with ScriptedSSEServer(["a", "b", "c", "d", "e"], ttft_s=delays[0], itl_s=delays[1:]) as server:
        start = time.perf_counter()
        with _post(server.url(), {"prompt": "p", "stream": True}) as resp:
            events = _read_events(resp)
    arrivals = [t - start for t, d in events if d != "[DONE]"]
    earliest = list(itertools.accumulate(delays))
    assert len(arrivals) == len(earliest)
    for token, (arrived, due) in enumerate(zip(arrivals, earliest)):
        assert arrived >= due - 1e-3, f"token {token} arrived {arrived:.3f} s after the request, before {due:.2f} s"


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
            _post(server.url(), {"prompt": "p", "stream": True, "stream_options": "yes"})
        assert err.value.code == 400 and b"stream_options" in err.value.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(server.url("/v1/nothing"), {})
        assert err.value.code == 404
        with urllib.request.urlopen(server.url("/v1/models"), timeout=5) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "scripted"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pieces": []}, "at least one piece"),
        ({"pieces": ["a", "b"], "itl_s": [0.1, 0.2]}, "need 1"),
        ({"pieces": ["a"], "ttft_s": -1}, "ttft_s"),
        ({"pieces": ["a", "b"], "itl_s": -0.1}, "itl_s"),
        ({"pieces": ["a", "b"], "tokens_per_piece": [1]}, "2 pieces"),
        ({"pieces": ["a", "b"], "tokens_per_piece": [1, 0]}, "at least one token"),
    ],
)
def test_bad_scripts_are_rejected(kwargs, message):
    pieces = kwargs.pop("pieces")
    with pytest.raises(ValueError, match=message):
        ScriptedSSEServer(pieces, **kwargs)


def test_port_before_start_is_an_error():
    with pytest.raises(RuntimeError, match="not started"):
        _ = ScriptedSSEServer(["a"]).port
