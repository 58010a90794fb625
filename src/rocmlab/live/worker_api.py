"""The grading workers' side of the live service: the queue over HTTP (``rocmlab live worker
--service URL``, on Kubernetes, where the workers cannot open the queue's file).

Routes under the service prefix: ``POST api/worker/claim`` ``{"worker", "lease_s"}`` (the attempt
and its spooled folder as a base64 tar.gz, or 204 with none), and ``POST
api/worker/attempts/<id>/(renew|complete|fail|release)``. Only with the service's worker token
(``Authorization: Bearer <ROCMLAB_LIVE_WORKER_TOKEN>``, compared in constant time): a hub login,
a learner's token included, opens nothing here. A result from a worker that no longer holds the
attempt is answered 409 (``LeaseLost``).
"""

from __future__ import annotations

import base64
import hmac
import io
import tarfile
from pathlib import Path

from tornado import web

from .attempts import CheckOutcome, GradeResult
from .handlers import ApiHandler
from .queue import LeaseLost


class WorkerHandler(ApiHandler):
    """Only the workers, with the service's worker token (``Authorization: Bearer <token>``)."""

    def get_current_user(self):
        return None  # never a hub login: a learner's token opens nothing here

    def prepare(self) -> None:
        expected = self.live.worker_token
        given = self.request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise web.HTTPError(403, "the workers' API needs the service's worker token")

    def check_xsrf_cookie(self) -> None:
        return None  # token-authenticated only: no cookie to forge a request with


class WorkerClaimHandler(WorkerHandler):
    def post(self) -> None:
        body = self.body_json()
        worker = str(body.get("worker") or "")
        if not worker:
            raise web.HTTPError(400, 'expected {"worker": ID, "lease_s": seconds}')
        lease_s = min(float(body.get("lease_s") or self.live.lease_s), self.live.lease_s)
        attempt = self.queue.claim(worker, lease_s)
        if attempt is None:
            self.set_status(204)
            self.finish()
            return
        self.write_json({"attempt": attempt.to_json(), "files": folder_archive(Path(attempt.source).parent)})


def folder_archive(folder: Path) -> str:
    """The spooled submission folder as a base64 tar.gz (what the worker grades)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=".")
    return base64.b64encode(buffer.getvalue()).decode()


class WorkerResultHandler(WorkerHandler):
    def post(self, attempt_id: str, action: str) -> None:
        body = self.body_json()
        worker = str(body.get("worker") or "")
        try:
            if action == "renew":
                self.queue.renew(int(attempt_id), worker, min(float(body.get("lease_s") or 0), self.live.lease_s))
                self.write_json({"ok": True})
            elif action == "complete":
                result = GradeResult(
                    score=float(body["score"]),
                    max_score=float(body["max_score"]),
                    checks=[CheckOutcome.from_dict(c) for c in body.get("checks", [])],
                    flags=[str(f) for f in body.get("flags", [])],
                    seed=body.get("seed"),
                    lang=body.get("lang"),
                )
                self.write_json(self.queue.complete(int(attempt_id), worker, result).to_json())
            elif action == "release":
                self.queue.release(int(attempt_id), worker)
                self.write_json({"ok": True})
            else:
                counted = body.get("counted", True) is not False  # only an explicit false spares the learner
                failed = self.queue.fail(int(attempt_id), worker, str(body.get("error", "")), counted=counted)
                self.write_json(failed.to_json())
        except LeaseLost as exc:
            self.write_json({"error": str(exc)}, 409)
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPError(400, f"bad result: {type(exc).__name__}: {exc}") from None


def routes(prefix: str) -> list:
    return [
        (prefix + "api/worker/claim", WorkerClaimHandler),
        (prefix + r"api/worker/attempts/(\d+)/(renew|complete|fail|release)", WorkerResultHandler),
    ]
