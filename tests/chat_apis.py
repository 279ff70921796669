"""Local fakes of the chat APIs that edit messages, answering as the real services do (the
``serve`` callback of :class:`tests.notify_helpers.Receiver`).

- :class:`SlackApi`: ``POST /api/chat.postMessage`` and ``/api/chat.update`` with a bearer
  token; HTTP 200 and ``{"ok": true, "channel": …, "ts": …, "message": {…}}``, or ``{"ok":
  false, "error": "message_not_found" | "invalid_auth" | "channel_not_found"}`` (Slack API
  reference, chat.postMessage and chat.update).
- :class:`DiscordApi`: ``POST /api/webhooks/<id>/<token>`` (204, or with ``?wait=true`` 200
  and the message object with its ``id``) and ``PATCH …/messages/<id>`` (200 and the message,
  or 404 ``{"message": "Unknown Message", "code": 10008}``) (Discord "Execute Webhook", "Edit
  Webhook Message").
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.notify_helpers import Answer, Received

JSON = {"Content-Type": "application/json; charset=utf-8"}


def _answer(status: int, body: dict[str, Any] | None = None) -> Answer:
    return Answer(status, json.dumps(body).encode() if body is not None else b"", JSON)


class SlackApi:
    """Slack's Web API for one bot token: ``messages`` (ts → the message's last body),
    ``replies`` (thread ts → reply texts). ``delete(ts)`` removes a message (as a user
    deleting it): a later chat.update answers ``message_not_found``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.messages: dict[str, dict[str, Any]] = {}
        self.replies: dict[str, list[str]] = {}
        #: Answers given, in order, to the next chat.update calls instead of the real one.
        self.update_failures: list[Answer] = []
        self._next = 1503435956

    def delete(self, ts: str) -> None:
        self.messages.pop(ts)

    def __call__(self, got: Received) -> Answer:
        if got.headers.get("Authorization") != f"Bearer {self.token}":
            return _answer(200, {"ok": False, "error": "invalid_auth"})
        body = got.json()
        channel = body.get("channel")
        if not isinstance(channel, str) or not channel.startswith("C"):
            return _answer(200, {"ok": False, "error": "channel_not_found"})
        if got.path == "/api/chat.postMessage":
            self._next += 1
            ts = f"{self._next}.000200"
            if "thread_ts" in body:
                if body["thread_ts"] not in self.messages:
                    return _answer(200, {"ok": False, "error": "thread_not_found"})
                self.replies.setdefault(body["thread_ts"], []).append(body["text"])
            else:
                self.messages[ts] = body
            message = {"type": "message", "text": body.get("text", ""), "ts": ts}
            return _answer(200, {"ok": True, "channel": channel, "ts": ts, "message": message})
        if got.path == "/api/chat.update":
            if self.update_failures:
                return self.update_failures.pop(0)
            ts = body.get("ts")
            if ts not in self.messages:
                return _answer(200, {"ok": False, "error": "message_not_found"})
            self.messages[ts] = body
            return _answer(200, {"ok": True, "channel": channel, "ts": ts, "text": body["text"]})
        return _answer(404, {"ok": False, "error": "unknown_method"})


class DiscordApi:
    """One Discord webhook (``/api/webhooks/<id>/<token>``): ``messages`` (id → the message's
    last body). ``delete(id)`` removes a message: a later edit answers 10008."""

    def __init__(self, webhook_path: str) -> None:
        self.path = webhook_path
        self.messages: dict[str, dict[str, Any]] = {}
        self._next = 1100000000000000000

    def delete(self, message_id: str) -> None:
        self.messages.pop(message_id)

    def __call__(self, got: Received) -> Answer:
        parts = urlsplit(got.path)
        body = got.json()
        if got.method == "POST" and parts.path == self.path:
            self._next += 1
            message_id = str(self._next)
            self.messages[message_id] = body
            if parse_qs(parts.query).get("wait") != ["true"]:
                return Answer(204)
            return _answer(200, self._message(message_id, body))
        prefix = self.path + "/messages/"
        if got.method == "PATCH" and parts.path.startswith(prefix):
            message_id = parts.path[len(prefix) :]
            if message_id not in self.messages:
                return _answer(404, {"message": "Unknown Message", "code": 10008})
            self.messages[message_id] = {**self.messages[message_id], **body}
            return _answer(200, self._message(message_id, self.messages[message_id]))
        return _answer(404, {"message": "Unknown Webhook", "code": 10015})

    @staticmethod
    def _message(message_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": message_id,
            "type": 0,
            "channel_id": "1000000000000000001",
            "content": body.get("content", ""),
            "embeds": body.get("embeds", []),
            "webhook_id": "1000000000000000002",
        }
