"""The controller manager: one thread draining the store's change feed, letting
every controller observe each event, then reconcile what became dirty.

One thread for all controllers keeps the simulation deterministic: a batch of
events is observed, then controllers run in a fixed order while holding the
store lock, so each reconcile sees a consistent state and writes atomically.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Protocol

from ..errors import ApiError
from ..store import ObjectStore, StoreEvent, Subscription

_LOG = logging.getLogger(__name__)
_IDLE_WAIT_SECONDS = 0.2


class Controller(Protocol):
    def observe(self, event: StoreEvent) -> None:
        """Note what this event makes dirty; no writes here."""

    def reconcile(self) -> None:
        """Act on everything dirty; writes go through ApiOperations."""


class ControllerManager:
    def __init__(self, store: ObjectStore, controllers: list[Controller]) -> None:
        self._store = store
        self._controllers = controllers
        self._stopping = threading.Event()
        self._progress = threading.Condition()
        self._handled_version = 0
        self._thread: threading.Thread | None = None
        self._subscription: Subscription | None = None

    def start(self) -> None:
        def note_start() -> list[StoreEvent]:
            self._handled_version = self._store.current_resource_version()
            return []

        self._subscription, _ = self._store.subscribe(None, prepare=note_start)
        self._thread = threading.Thread(target=self._run, name="sim-controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._subscription is not None:
            self._store.unsubscribe(self._subscription)

    def wait_idle(self, timeout: float) -> bool:
        """True once every change committed so far, including the controllers'
        own follow-up writes, has been handled; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while self._handled_version < self._store.current_resource_version():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))
        return True

    def _run(self) -> None:
        subscription = self._subscription
        if subscription is None:
            return
        while not self._stopping.is_set():
            try:
                first = subscription.events.get(timeout=_IDLE_WAIT_SECONDS)
            except queue.Empty:
                continue
            batch = [first]
            while True:
                try:
                    batch.append(subscription.events.get_nowait())
                except queue.Empty:
                    break
            self._handle(batch)
            with self._progress:
                self._handled_version = batch[-1].resource_version
                self._progress.notify_all()

    def _handle(self, batch: list[StoreEvent]) -> None:
        for event in batch:
            for controller in self._controllers:
                controller.observe(event)
        with self._store.lock:
            for controller in self._controllers:
                try:
                    controller.reconcile()
                except ApiError as error:
                    _LOG.warning("%s reconcile failed: %s", type(controller).__name__, error)
                except Exception:
                    _LOG.exception("%s reconcile crashed", type(controller).__name__)
