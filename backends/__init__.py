"""Two small business services the gateway fronts in demo mode and in tests: rooms and orders.

They are real HTTP services, not mocks: each checks the gateway's bearer token, scopes every object to
the caller's org (another org's object answers exactly like a missing one), makes writes idempotent by
``Idempotency-Key`` and can be told to misbehave (latency, error status, hang, dropped response) through
``/_faults``. Each app is built by a factory and holds all of its state on ``app.state.service``.
"""

from backends.orders import OrdersService, create_orders_app
from backends.rooms import RoomsService, create_rooms_app
from backends.serve import serve_app, serve_app_in_thread

__all__ = [
    "OrdersService",
    "RoomsService",
    "create_orders_app",
    "create_rooms_app",
    "serve_app",
    "serve_app_in_thread",
]
