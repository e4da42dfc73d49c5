"""The child process of :class:`agent_gym.rollout.vllm_process.VLLMProcessPolicy` (not a public API).

Run as ``python -m agent_gym.rollout._vllm_server FD``: ``FD`` is one end of a socket pair the
parent made. The first frame the parent sends is the policy's configuration; this process builds a
:class:`~agent_gym.rollout.vllm.VLLMPolicy` from it (vLLM's ``AsyncLLM`` frontend then runs here,
its engine core in a process of its own as always), answers ``{"op": "ready"}`` or
``{"op": "error"}``, and then serves ``generate`` requests concurrently until ``shutdown`` or until
the parent's end of the socket closes.

Frames are a 4-byte big-endian length and a JSON object (token ids and log-probs survive JSON
exactly: Python writes floats with ``repr``).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import json
import socket
import struct
import sys
import traceback
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


def encode_frame(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next frame, or ``None`` at end of stream (or when the peer reset the connection)."""
    try:
        (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
        if n > MAX_FRAME:
            raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
        return json.loads(await reader.readexactly(n))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def load_factory(spec: str) -> Any:
    """``"module:function"`` or ``"/path/file.py:function"``: a callable that builds an engine."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"engine_factory must be 'module:function' or 'file.py:function', got {spec!r}")
    if where.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location("_agent_gym_engine_factory", where)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot load {where}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module  # (dataclasses look their module up there)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


async def serve(sock: socket.socket, policy: Any) -> None:
    """Answer requests on ``sock`` until ``shutdown`` or end of stream (runs on the policy's loop)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    pending: set[asyncio.Task] = set()

    async def answer(msg: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"op": "result", "id": msg["id"]}
        try:
            gen = await policy._generate_on_loop(msg["prompt"], int(msg["max_new_tokens"]), msg.get("overrides") or {})
            reply.update(ids=gen.ids, logprobs=gen.logprobs, finish_reason=gen.finish_reason)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller that asked
            reply["error"] = f"{type(exc).__name__}: {exc}"
        writer.write(encode_frame(reply))

    writer.write(encode_frame({"op": "ready"}))
    while True:
        msg = await read_frame(reader)
        if msg is None or msg.get("op") == "shutdown":
            break
        if msg.get("op") == "generate":
            task = asyncio.create_task(answer(msg))
            pending.add(task)
            task.add_done_callback(pending.discard)
        else:
            writer.write(encode_frame({"op": "result", "id": msg.get("id"), "error": f"unknown op {msg.get('op')!r}"}))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    writer.close()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    policy = None
    try:
        (n,) = HEADER.unpack(sock.recv(HEADER.size, socket.MSG_WAITALL))
        config = json.loads(sock.recv(n, socket.MSG_WAITALL))
        from agent_gym.rollout.vllm import VLLMPolicy

        factory = config.pop("engine_factory", None)
        engine = load_factory(factory)() if factory else None
        policy = VLLMPolicy(config.pop("model"), engine=engine, **config)
    except BaseException as exc:  # noqa: BLE001 - the parent reports it; then this process exits
        sock.sendall(encode_frame({"op": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        raise SystemExit(1) from None
    sock.setblocking(False)
    # Everything built so far (vLLM, torch, the engine's frontend) lives as long as this process: keep
    # it out of the cyclic collector's full passes, which otherwise stall request handling for
    # hundreds of ms with vLLM's heap (measured in the caller's process: docs/results/gpu-runs.md).
    gc.collect()
    gc.freeze()
    try:
        policy._call(serve(sock, policy))
    finally:
        policy.close()


if __name__ == "__main__":
    main()
