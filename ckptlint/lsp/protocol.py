"""JSON-RPC error replies for the malformed requests pygls 2 drops without a word.

pygls answers an unknown method (-32601) and a handler's exception (-32603), but a request
whose params do not fit the method's type (a hover without `position`) fails while the
message is decoded, before pygls knows it is a request, so it is only logged and the client
waits for ever. Here that failure becomes the request's reply: InvalidParams (-32602). A
message that is not JSON gets ParseError (-32700, id null), and an object with an id but
no `"jsonrpc": "2.0"` gets InvalidRequest (-32600), as JSON-RPC 2.0 asks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pygls.exceptions import JsonRpcException, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.protocol import LanguageServerProtocol


@dataclass(frozen=True)
class MalformedRequest:
    """A request that could not be decoded: what to answer it with."""

    id: int | str | None
    error: JsonRpcException


def _request_id(data: dict[str, Any]) -> int | str | None:
    value = data.get("id")
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


class CkptlintProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as error:  # raised for the whole message, so `data` is the message
            if "id" in data and "method" in data:
                return MalformedRequest(_request_id(data), error)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, MalformedRequest):
            self._reply_error(message.id, message.error)
        elif isinstance(message, dict):  # never decoded: not a JSON-RPC 2.0 message
            if "id" in message:
                self._reply_error(_request_id(message), JsonRpcInvalidRequest())
        else:
            super().handle_message(message)

    def reply_parse_error(self, error: Exception) -> None:
        """Called by the server's error handler for whatever the read loop could not handle."""
        if isinstance(error, json.JSONDecodeError):
            self._reply_error(None, JsonRpcParseError())

    def _reply_error(self, request_id: int | str | None, error: JsonRpcException) -> None:
        # a plain object: lsprotocol's converter would leave out `"id": null`, which JSON-RPC requires
        self._send_data({"jsonrpc": "2.0", "id": request_id, "error": {"code": error.code, "message": error.message}})
