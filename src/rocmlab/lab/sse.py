"""A scripted OpenAI-compatible streaming server on loopback, for the streaming exercise of lab 02.

It speaks the part of the API that vLLM's OpenAI-compatible server exposes that a benchmark
client needs (``POST /v1/completions`` and ``POST /v1/chat/completions`` with
``"stream": true``, ``GET /v1/models``), so that a learner can write and check a streaming
client offline. The reply is a script of *pieces*: the text of one server-sent event each
(``data: {json}`` lines, ending with ``data: [DONE]``), sent on a fixed schedule: the first
after ``ttft_s``, piece i after a further ``itl_s[i-1]`` seconds.

Like vLLM, a piece can carry several tokens (``tokens_per_piece``), and a piece can be empty
text: an incremental detokenizer holds back the bytes of a character that is not complete yet
(a Chinese character is three UTF-8 bytes, and a byte-level tokenizer may split it), and sends
them with a later piece. ``incremental_pieces`` turns token ids into such pieces. A client that
counts events therefore does not count tokens; the server's ``usage`` does:

- with ``"stream_options": {"include_usage": true}`` the last event before ``[DONE]`` has
  ``"choices": []`` and ``"usage": {"prompt_tokens", "completion_tokens", "total_tokens"}``
  (the OpenAI API reference for ``stream_options``; vLLM ``completion/serving.py``);
- with ``"continuous_usage_stats": true`` as well (a vLLM extension), every piece's event also
  carries the usage so far;
- a chat stream opens with an event whose delta only announces ``"role": "assistant"`` (vLLM's
  ``chat_completion/serving.py`` sends it when the first output is ready).

``usage=False`` models a server that ignores ``stream_options``. Prompt tokens are counted with
``count_tokens`` when given, else one per character (the server has no tokenizer).

    with ScriptedSSEServer(["质检", "", "通过"], tokens_per_piece=[2, 1, 2], ttft_s=0.2, itl_s=0.05) as server:
        ...  # POST to server.url("/v1/completions")

The server binds 127.0.0.1 on a free port, runs in daemon threads named ``rocmlab-sse-*``,
and stops itself after ``max_lifetime_s`` even if nobody calls ``stop()``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

THREAD_PREFIX = "rocmlab-sse"
_ACTIVE: set[ScriptedSSEServer] = set()
_ACTIVE_LOCK = threading.Lock()
REPLACEMENT = "\ufffd"  # what a decoder yields for the bytes of an incomplete character


def active_servers() -> list[ScriptedSSEServer]:
    """Scripted servers started in this process and not yet stopped."""
    with _ACTIVE_LOCK:
        return [s for s in _ACTIVE if s.running]


def incremental_pieces(token_ids: Sequence[int], decode: Callable[[list[int]], str]) -> list[str]:
    """The text a streaming server sends after each token: what ``decode`` of the tokens so far
    adds to the text already sent, or "" while the decoded text ends in an incomplete character
    (U+FFFD), whose bytes then go out with a later piece. The pieces join to ``decode(token_ids)``
    unless the last token leaves a character incomplete."""
    pieces, sent = [], ""
    for end in range(1, len(token_ids) + 1):
        text = decode(list(token_ids[:end]))
        if text.endswith(REPLACEMENT):
            pieces.append("")
            continue
        pieces.append(text[len(os.path.commonprefix([sent, text])) :])
        sent = text
    return pieces


def _schedule(n_pieces: int, ttft_s: float, itl_s) -> list[float]:
    """Delay before each piece: ``[ttft_s, itl_1, ..., itl_{n-1}]``; validates the script."""
    if ttft_s < 0:
        raise ValueError(f"ttft_s must be >= 0 seconds, got {ttft_s!r}")
    if isinstance(itl_s, (int, float)):
        gaps = [float(itl_s)] * max(n_pieces - 1, 0)
    else:
        gaps = [float(g) for g in itl_s]
        if len(gaps) != max(n_pieces - 1, 0):
            raise ValueError(
                f"itl_s has {len(gaps)} gaps; {n_pieces} pieces need "
                f"{max(n_pieces - 1, 0)} (one between each pair of pieces)"
            )
    if any(g < 0 for g in gaps):
        raise ValueError(f"itl_s gaps must be >= 0 seconds, got {gaps!r}")
    return [float(ttft_s)] + gaps if n_pieces else []


def _token_counts(n_pieces: int, tokens_per_piece) -> list[int]:
    if tokens_per_piece is None:
        return [1] * n_pieces
    counts = list(tokens_per_piece)
    if len(counts) != n_pieces:
        raise ValueError(f"tokens_per_piece has {len(counts)} entries; the script has {n_pieces} pieces")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts):
        raise ValueError(f"tokens_per_piece must be integers >= 1 (a piece carries at least one token), got {counts}")
    return counts


class ScriptedSSEServer:
    """An OpenAI-style streaming endpoint that replays ``pieces`` on a fixed delay schedule.

    ``pieces``: the text of each event; ``tokens_per_piece``: the tokens each piece carries
    (default one each); ``ttft_s``: delay before the first piece; ``itl_s``: the gap before each
    later piece (one number, or a list of ``len(pieces) - 1`` numbers). A request's
    ``max_tokens`` (or ``max_completion_tokens``) ends the script once that many tokens are sent;
    a piece it cuts is sent whole with its count clipped, and ``finish_reason`` is "length".
    """

    def __init__(
        self,
        pieces: Sequence[str],
        *,
        tokens_per_piece: Sequence[int] | None = None,
        ttft_s: float = 0.1,
        itl_s=0.02,
        usage: bool = True,
        count_tokens: Callable[[str], int] | None = None,
        model: str = "scripted",
        max_lifetime_s: float = 300.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.pieces = [str(p) for p in pieces]
        if not self.pieces:
            raise ValueError("pieces must hold at least one piece to stream")
        self.tokens_per_piece = _token_counts(len(self.pieces), tokens_per_piece)
        self.delays = _schedule(len(self.pieces), ttft_s, itl_s)
        self.usage = bool(usage)
        self.count_tokens = count_tokens or len
        self.model = model
        self.max_lifetime_s = float(max_lifetime_s)
        self.requests_served = 0
        self._host, self._port = host, port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._deadline: threading.Timer | None = None
        self._stopping = threading.Event()

    @property
    def total_tokens(self) -> int:
        """Tokens of the whole script (what ``usage.completion_tokens`` says without max_tokens)."""
        return sum(self.tokens_per_piece)

    def plan(self, max_tokens: int | None) -> tuple[list[tuple[int, int]], str]:
        """([(piece index, tokens it carries)], finish_reason) for a request's token budget."""
        budget = math.inf if max_tokens is None else max_tokens
        sent, used = [], 0
        for index, count in enumerate(self.tokens_per_piece):
            take = int(min(count, budget - used))
            if take <= 0:
                break
            sent.append((index, take))
            used += take
        return sent, ("length" if used < self.total_tokens else "stop")

    # lifecycle -------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> ScriptedSSEServer:
        """Bind, serve in a daemon thread and wait until the port answers (or raise)."""
        if self.running:
            return self
        self._stopping.clear()
        self._httpd = ThreadingHTTPServer((self._host, self._port), self._handler_class())
        self._httpd.daemon_threads = True
        name = f"{THREAD_PREFIX}-{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()
        self._deadline = threading.Timer(self.max_lifetime_s, self.stop)
        self._deadline.name = f"{name}-deadline"
        self._deadline.daemon = True
        self._deadline.start()
        with _ACTIVE_LOCK:
            _ACTIVE.add(self)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        import socket

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                with socket.create_connection((self._host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise TimeoutError(
            f"scripted SSE server on {self._host}:{self.port} did not accept connections within {timeout_s} s"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving, close the socket and join the thread; safe to call twice."""
        self._stopping.set()
        httpd, thread, deadline = self._httpd, self._thread, self._deadline
        if deadline is not None and deadline is not threading.current_thread():
            deadline.cancel()
            deadline.join(timeout_s)  # a cancelled Timer lingers until its wait wakes
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                raise TimeoutError(f"scripted SSE server thread {thread.name} did not stop within {timeout_s} s")
        self._httpd = self._thread = self._deadline = None
        with _ACTIVE_LOCK:
            _ACTIVE.discard(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the scripted SSE server is not started; call start() first")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def url(self, path: str = "/v1/completions") -> str:
        return self.base_url + path

    # HTTP ------------------------------------------------------------------------------
    def _handler_class(self):
        server = self

        class Handler(_Handler):
            script = server

        return Handler


def _prompt_text(body: dict, chat: bool) -> str:
    if not chat:
        prompt = body.get("prompt") or ""
        return prompt if isinstance(prompt, str) else "".join(map(str, prompt))
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "".join(parts)


def _max_tokens(body: dict):
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"max_tokens must be a positive integer, got {value!r}")
    return value


class _Handler(BaseHTTPRequestHandler):
    script: ScriptedSSEServer
    protocol_version = "HTTP/1.0"  # one request per connection; the body ends when it closes

    def log_message(self, *args):  # keep notebooks quiet
        pass

    def do_GET(self):
        if self.path.rstrip("/") == "/v1/models":
            return self._json(
                200, {"object": "list", "data": [{"id": self.script.model, "object": "model", "owned_by": "rocmlab"}]}
            )
        self._json(404, {"error": {"message": f"no route GET {self.path}"}})

    def do_POST(self):
        route = self.path.rstrip("/")
        if route not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"error": {"message": f"no route POST {self.path}"}})
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")  # noqa: TRY004 (a malformed body is a value error)
            max_tokens = _max_tokens(body)
            options = body.get("stream_options") or {}
            if not isinstance(options, dict):
                raise ValueError(f"stream_options must be a JSON object, got {options!r}")  # noqa: TRY004 (answered as 400)
        except ValueError as err:
            return self._json(400, {"error": {"message": f"bad request: {err}"}})
        chat = route.endswith("chat/completions")
        plan, finish = self.script.plan(max_tokens)
        prompt_tokens = int(self.script.count_tokens(_prompt_text(body, chat)))
        self.script.requests_served += 1
        if body.get("stream"):
            include_usage = self.script.usage and bool(options.get("include_usage"))
            continuous = include_usage and bool(options.get("continuous_usage_stats"))
            return self._stream(chat, plan, finish, prompt_tokens, include_usage, continuous)
        time.sleep(sum(self.script.delays[: len(plan)]))
        text = "".join(self.script.pieces[i] for i, _ in plan)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
        choice["finish_reason"] = finish
        usage = _usage(prompt_tokens, sum(n for _, n in plan))
        self._json(200, self._envelope(chat, [choice], stream=False, usage=usage))

    def _stream(self, chat, plan, finish, prompt_tokens, include_usage, continuous):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:12]}"
        completion = 0
        try:
            for position, (index, tokens) in enumerate(plan):
                if self.script._stopping.wait(self.script.delays[index]):
                    return
                if chat and position == 0:
                    role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    self._event(self._envelope(chat, [role], stream=True, rid=rid))
                completion += tokens
                piece = self.script.pieces[index]
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                choice.update(logprobs=None, finish_reason=finish if position == len(plan) - 1 else None)
                usage = _usage(prompt_tokens, completion) if continuous else None
                self._event(self._envelope(chat, [choice], stream=True, rid=rid, usage=usage))
            if include_usage:
                self._event(self._envelope(chat, [], stream=True, rid=rid, usage=_usage(prompt_tokens, completion)))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; nothing to clean up

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")
        self.wfile.flush()

    def _envelope(self, chat, choices, *, stream, rid=None, usage=None):
        kind = ("chat.completion.chunk" if stream else "chat.completion") if chat else "text_completion"
        out = {
            "id": rid or f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": kind,
            "created": int(time.time()),
            "model": self.script.model,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage
        return out

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


active_sse_servers = active_servers  # the name rocmlab.lab exports
