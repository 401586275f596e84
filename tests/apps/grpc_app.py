"""An app whose refund goes to a payments service over gRPC, whose C core connects from threads of its
own, past Python's sockets. ``payments()`` is the service (a generic handler: no generated code) on
127.0.0.1; ``build_for(target)`` the agent's factory, for a service at ``target`` (``host:port``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

CASE = {  # a case that records no tool call: the seal alone decides what the refund reaches
    "id": "refund",
    "status": "accepted",
    "prompt": "Refund order A1001",
    "why": "refunds go through the payments service",
    "recorded": {"trajectory": [], "stop": "answered"},
}


@contextmanager
def payments() -> Iterator[tuple[int, list[bytes]]]:
    """The service: its port, and each request that reached it."""
    seen: list[bytes] = []

    def refund(request: bytes, context: object) -> bytes:
        seen.append(request)
        return b"refunded"

    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler("pay", {"Refund": grpc.unary_unary_rpc_method_handler(refund)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, seen
    finally:
        server.stop(None)


def build_for(target: str) -> Callable[[], Callable[[str], str]]:
    def build() -> Callable[[str], str]:
        def agent(prompt: str) -> str:
            try:
                # a channel of its own subchannels: gRPC's shared pool keeps a refused address in its
                # reconnect backoff, and the next case's channel would fail at once, without trying
                with grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
                    return "Refund: " + channel.unary_unary("/pay/Refund")(b"A1001", timeout=5).decode()
            except grpc.RpcError as exc:
                return f"Refund failed: {exc.code()}"  # type: ignore[attr-defined]

        return agent

    return build
