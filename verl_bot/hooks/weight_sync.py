"""Hook: verl's vLLM weight sync (`vllm_rollout.ServerAdapter`, `BucketedWeightSender`): a rollout engine that cannot
load the trainer's weights ends the run with its cause.

verl 0.9.1 waits for each bucket's acknowledgement with a blocking `recv()` without a timeout
(`BucketedWeightSender.async_send_weights`), while the vLLM workers receive the buckets in a Ray RPC
(`update_weights_from_ipc`); when loading a bucket fails there, no acknowledgement ever comes, the trainer blocks
forever and the error is only in the rollout server's log. W1 (`install_adapter`) keeps the RPC's reference, W2
(`install_sender`) watches the socket. Active in any run whose processes import verl's vLLM rollout (the ranks that
send weights see no config that says whose run it is): docs/PLUGIN.md, section What it changes in a run that does
not use it. The error reaches the driver's last line (`verl_bot.hooks.driver`).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import os
import re
import time
from typing import Any

from verl_bot.errors import RolloutEngineError
from verl_bot.hooks.wrap import wrap

ROLLOUT_MODULE = "verl.workers.rollout.vllm_rollout.vllm_rollout"
TRANSFER_MODULE = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
RPC = "update_weights_from_ipc"
TIMEOUT_ENV = "VERL_BOT_WEIGHT_SYNC_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0
POLL_S = 1.0
WORKER_ERROR = re.compile(r"Worker failed with error '(.*?)', please check")

_receiver: contextvars.ContextVar[Any] = contextvars.ContextVar("verl_bot_weight_sync_rpc", default=None)


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)


def rpc_failure(ref: Any) -> RolloutEngineError | None:
    """The error of a finished Ray RPC `ref` as a `RolloutEngineError`; None while it runs or when it succeeded."""
    import ray

    if ref is None or not ray.wait([ref], timeout=0)[0]:
        return None
    try:
        ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - any failure of the engine's RPC ends the update
        from verl_bot.hooks.driver import root_cause

        cause = root_cause(exc)
        text = str(cause).strip()
        worker = WORKER_ERROR.search(text)  # vLLM's collective_rpc quotes the worker's own error
        first = worker.group(1) if worker else f"{type(cause).__name__}: {(text.splitlines() or [''])[0]}"
        return RolloutEngineError(f"the rollout engine failed to load the trainer's weights ({RPC}): {first}")
    return None


class WatchedSocket:
    """A ZMQ socket whose sends and receives give up when the receiving RPC failed, or after `timeout` seconds
    without progress (a REQ socket's send blocks while no receiver is connected, its recv until the ack)."""

    def __init__(self, socket: Any, timeout: float):
        self._socket, self._timeout = socket, timeout

    def _wait(self, event: int, what: str) -> None:
        start = time.monotonic()
        while not self._socket.poll(int(POLL_S * 1000), event):
            failure = rpc_failure(_receiver.get())
            if failure is not None:
                raise failure
            if time.monotonic() - start > self._timeout:
                raise RolloutEngineError(
                    f"the rollout engine did not {what} within {self._timeout:.0f}s ({RPC}; {TIMEOUT_ENV} sets the "
                    "limit)"
                )

    def send_pyobj(self, *args: Any, **kwargs: Any) -> Any:
        import zmq

        self._wait(zmq.POLLOUT, "connect to receive the trainer's weights")
        return self._socket.send_pyobj(*args, **kwargs)

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        import zmq

        self._wait(zmq.POLLIN, "acknowledge a bucket of the trainer's weights")
        return self._socket.recv(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


def _make_execute_method(original):
    @functools.wraps(original)
    async def _execute_method(self, method, *args, **kwargs):
        result = await original(self, method, *args, **kwargs)
        if method == RPC:
            _receiver.set(result)  # the ObjectRef (non_block=True) or the finished result
        return result

    return _execute_method


def _make_init_socket(original):
    @functools.wraps(original)
    def _init_socket(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not isinstance(self.socket, WatchedSocket):
            self.socket = WatchedSocket(self.socket, timeout_s())

    return _init_socket


def install_adapter() -> list[str]:
    """W1, when verl imports its vLLM rollout (`ROLLOUT_MODULE`): `ServerAdapter._execute_method` keeps the Ray
    ObjectRef of the `update_weights_from_ipc` RPC for the update in progress (a context variable of the update's
    task)."""
    return [wrap(importlib.import_module(ROLLOUT_MODULE).ServerAdapter, "_execute_method", ["self", "method"],
                 _make_execute_method)]


def install_sender() -> list[str]:
    """W2, when verl imports its weight transfer (`TRANSFER_MODULE`); nothing with a timeout of 0.

    `BucketedWeightSender._init_socket`: the REQ socket's `send_pyobj` and `recv` wait in slices of `POLL_S` (a REQ
    send blocks while no receiver is connected: a dead engine never connects); between slices, an RPC that ended
    with an error ends the update with `RolloutEngineError` naming the RPC and the root cause (the vLLM worker's
    exception), and no progress within `timeout_s()` (`VERL_BOT_WEIGHT_SYNC_TIMEOUT_S`, default 120 s; one bucket
    takes well under a second to load) ends it too. Nothing changes while the transfer moves.
    """
    if timeout_s() <= 0:
        return []
    return [wrap(importlib.import_module(TRANSFER_MODULE).BucketedWeightSender, "_init_socket", ["self"],
                 _make_init_socket)]
