"""A scripted OpenAI-compatible streaming server on loopback, for the streaming exercise of lab 02.

It speaks just enough of the API that vLLM exposes (``POST /v1/completions`` and
``POST /v1/chat/completions`` with ``"stream": true``, ``GET /v1/models``) to let a learner
write and check a streaming client offline. Tokens are sent as server-sent events
(``data: {json}`` lines, ending with ``data: [DONE]``) on a scripted schedule: the first
token after ``ttft_s``, token i after a further ``itl_s[i-1]`` seconds. A client that
timestamps each event on arrival recovers that schedule; one that buffers the body does not.

    with ScriptedSSEServer(["质", "检", "通", "过"], ttft_s=0.2, itl_s=0.05) as server:
        ...  # POST to server.url("/v1/completions")

The server binds 127.0.0.1 on a free port, runs in daemon threads named ``rocmlab-sse-*``,
and stops itself after ``max_lifetime_s`` even if nobody calls ``stop()``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

THREAD_PREFIX = "rocmlab-sse"
_ACTIVE: set[ScriptedSSEServer] = set()
_ACTIVE_LOCK = threading.Lock()


def active_servers() -> list[ScriptedSSEServer]:
    """Scripted servers started in this process and not yet stopped."""
    with _ACTIVE_LOCK:
        return [s for s in _ACTIVE if s.running]


def _schedule(n_tokens: int, ttft_s: float, itl_s) -> list[float]:
    """Delay before each token: ``[ttft_s, itl_1, ..., itl_{n-1}]``; validates the script."""
    if ttft_s < 0:
        raise ValueError(f"ttft_s must be >= 0 seconds, got {ttft_s!r}")
    if isinstance(itl_s, (int, float)):
        gaps = [float(itl_s)] * max(n_tokens - 1, 0)
    else:
        gaps = [float(g) for g in itl_s]
        if len(gaps) != max(n_tokens - 1, 0):
            raise ValueError(
                f"itl_s has {len(gaps)} gaps; {n_tokens} tokens need "
                f"{max(n_tokens - 1, 0)} (one between each pair of tokens)"
            )
    if any(g < 0 for g in gaps):
        raise ValueError(f"itl_s gaps must be >= 0 seconds, got {gaps!r}")
    return [float(ttft_s)] + gaps if n_tokens else []


class ScriptedSSEServer:
    """An OpenAI-style streaming endpoint that replays ``tokens`` on a fixed delay schedule.

    ``tokens``: the text pieces to stream (one SSE event each); ``ttft_s``: delay before
    the first; ``itl_s``: the gap before each later token (one number, or a list of
    ``len(tokens) - 1`` numbers). A request's ``max_tokens`` truncates the script.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        *,
        ttft_s: float = 0.1,
        itl_s=0.02,
        model: str = "scripted",
        max_lifetime_s: float = 300.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.tokens = [str(t) for t in tokens]
        if not self.tokens:
            raise ValueError("tokens must hold at least one token to stream")
        self.delays = _schedule(len(self.tokens), ttft_s, itl_s)
        self.model = model
        self.max_lifetime_s = float(max_lifetime_s)
        self.requests_served = 0
        self._host, self._port = host, port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._deadline: threading.Timer | None = None
        self._stopping = threading.Event()

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
                raise ValueError("the request body must be a JSON object")  # noqa: TRY004 (a malformed file is a value error)
            max_tokens = body.get("max_tokens")
            if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
                raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        except ValueError as err:
            return self._json(400, {"error": {"message": f"bad request: {err}"}})
        chat = route.endswith("chat/completions")
        n = min(len(self.script.tokens), max_tokens or len(self.script.tokens))
        finish = "length" if n < len(self.script.tokens) else "stop"
        self.script.requests_served += 1
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return self._stream(chat, n, finish, include_usage, body)
        time.sleep(sum(self.script.delays[:n]))
        text = "".join(self.script.tokens[:n])
        choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
        choice["finish_reason"] = finish
        self._json(200, self._envelope(chat, [choice], stream=False, usage=self._usage(n, body)))

    def _stream(self, chat, n, finish, include_usage, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:12]}"
        try:
            for i in range(n):
                if self.script._stopping.wait(self.script.delays[i]):
                    return
                piece = self.script.tokens[i]
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                choice["finish_reason"] = finish if i == n - 1 else None
                self._event(self._envelope(chat, [choice], stream=True, rid=rid))
            if include_usage:
                self._event(self._envelope(chat, [], stream=True, rid=rid, usage=self._usage(n, body)))
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

    @staticmethod
    def _usage(n, body):
        prompt = body.get("prompt") or body.get("messages") or ""
        prompt_tokens = len(json.dumps(prompt, ensure_ascii=False)) // 4  # a rough stand-in
        return {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


active_sse_servers = active_servers  # the name rocmlab.lab exports
