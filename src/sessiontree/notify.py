"""Tell someone a pause is waiting: a signed webhook, delivered in the background.

Contract:
- ``Webhook(url, secret)`` is an ``on_pause`` hook (``loop.arun(on_pause=...)``, and
  ``resume``/``worker`` through their run options). Called with a committed pause, it
  only queues the delivery and returns: the run's commit never waits for the receiver.
- A delivery is one ``POST`` of ``pause_document(pause)`` as JSON, with the headers
  ``X-Sessiontree-Signature: sha256=<hex>`` (HMAC-SHA256 of the exact body bytes under
  ``secret``; ``verify`` checks one), ``X-Sessiontree-Event: pause`` and
  ``X-Sessiontree-Delivery: <pause id>`` (the same on every retry: a receiver drops
  repeats by it). The body's ``sent_at`` says when it was written, so a receiver can
  refuse an old one replayed.
- A 2xx answer ends it. A refused connection, a timeout, a 408, a 429 or a 5xx is
  tried again after ``backoff`` seconds, doubling, at most ``attempts`` times, and
  never past ``deadline`` seconds after the pause was queued (each attempt's timeout is
  cut to what is left). Any other answer is final. A delivery that fails is logged
  (logger ``sessiontree.notify``, a warning naming the pause and why), never raised.
- Deliveries run in one daemon thread per webhook, in order. ``wait(timeout)`` waits
  for the queued ones to finish (a command calls it before it exits, so a short-lived
  process does not cut off a delivery; it is bounded by ``deadline`` anyway) and says
  whether all did. ``delivered`` and ``failed`` count outcomes.
- Only ``http`` and ``https`` URLs are taken; the secret must not be empty.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from .ids import now
from .kinds import PausePayload
from .model import Node

log = logging.getLogger("sessiontree.notify")

SIGNATURE_HEADER = "X-Sessiontree-Signature"
DELIVERY_HEADER = "X-Sessiontree-Delivery"
EVENT_HEADER = "X-Sessiontree-Event"
_RETRY_STATUS = {408, 429}


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``: ``sha256=`` and the hex HMAC."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` (the header as received) signs ``body`` under ``secret``."""
    return bool(signature) and hmac.compare_digest(sign(secret, body), str(signature))


def pause_document(pause: Node) -> dict[str, Any]:
    """What a webhook sends about ``pause``: enough to decide it, and nothing of the run."""
    record = PausePayload.from_node(pause)
    return {
        "event": "pause",
        "pause": pause.id,
        "session": pause.session_id,
        "created_at": pause.created_at,
        "reason": record.reason,
        "expires_at": record.expires_at,
        "calls": record.call_payloads(),
        "sent_at": now(),
    }


class Webhook:
    """An ``on_pause`` hook that POSTs each pause to ``url`` (see the module docstring)."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        attempts: int = 5,
        backoff: float = 0.5,
        deadline: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ValueError(f"a webhook URL is http:// or https://, not {url[:100]!r}")
        if not secret:
            raise ValueError("a webhook needs a secret to sign its deliveries with")
        if attempts < 1 or backoff < 0 or deadline <= 0 or timeout <= 0:
            raise ValueError("attempts must be at least 1, backoff at least 0, deadline and timeout positive")
        self.url, self._secret = url, secret
        self.attempts, self.backoff, self.deadline, self.timeout = attempts, backoff, deadline, timeout
        self.delivered = self.failed = 0
        self._queue: queue.Queue[tuple[dict[str, Any], float]] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __call__(self, pause: Node) -> None:
        """Queue the delivery of ``pause``; return at once."""
        self._queue.put((pause_document(pause), time.monotonic() + self.deadline))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._deliver_all, name="sessiontree-webhook", daemon=True
                )
                self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued delivery has ended (at most ``timeout`` seconds); whether
        they all did."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._queue.all_tasks_done:
                self._queue.all_tasks_done.wait(0.05 if left is None else min(left, 0.05))
        return True

    def _deliver_all(self) -> None:
        while True:
            try:
                document, until = self._queue.get(timeout=1.0)
            except queue.Empty:
                return  # idle: the thread ends, and the next pause starts another
            try:
                problem = self._deliver(document, until)
                with self._lock:
                    if problem is None:
                        self.delivered += 1
                    else:
                        self.failed += 1
                if problem is not None:
                    log.warning(
                        "webhook %s: pause %s not delivered: %s", self.url, document["pause"], problem
                    )
            finally:
                self._queue.task_done()

    def _deliver(self, document: dict[str, Any], until: float) -> str | None:
        """Try to deliver one pause until it is done or out of time; why it failed, or None."""
        body = json.dumps(document, ensure_ascii=False).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(self._secret, body),
            EVENT_HEADER: "pause",
            DELIVERY_HEADER: document["pause"],
            "User-Agent": "sessiontree-webhook",
        }
        wait, problem = self.backoff, "no attempt was made"
        for attempt in range(1, self.attempts + 1):
            left = until - time.monotonic()
            if left <= 0:
                return f"{problem}; gave up after {self.deadline:g} s"
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=min(self.timeout, left)) as response:
                    response.read(1024)
                return None
            except urllib.error.HTTPError as e:
                problem = f"the receiver answered {e.code}"
                if e.code not in _RETRY_STATUS and e.code < 500:
                    return problem
            except (OSError, ValueError) as e:  # refused, reset, timed out, a bad reply
                problem = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
            if attempt < self.attempts:
                time.sleep(max(0.0, min(wait, until - time.monotonic())))
                wait *= 2
        return f"{problem} (after {self.attempts} attempts)"
