"""agentbus: Python clients of the agentbus message bus, written from docs/PROTOCOL.md.

Blocking: Client, Producer, Subscriber, Worker.  asyncio: AsyncClient, AsyncProducer,
AsyncSubscriber, AsyncWorker — the one implementation the blocking classes run on.
Errors: agentbus.errors (one exception class per wire code).
"""

__version__ = "0.1.0"  # follows the project's (CMakeLists.txt project VERSION)

from . import errors, wire  # noqa: E402
from ._client import AsyncClient, Head, Replay  # noqa: E402
from ._conn import AsyncConnection, Keys  # noqa: E402
from ._producer import AsyncProducer  # noqa: E402
from ._subscriber import AsyncSubscriber  # noqa: E402
from ._sync import Client, Producer, Subscriber, SyncReplay, Worker  # noqa: E402
from ._worker import ActionCall, AsyncRun, AsyncWorker, Decline, SyncRun, new_key  # noqa: E402
from .errors import AgentbusError  # noqa: E402
from .wire import Event  # noqa: E402

__all__ = ["AsyncClient", "AsyncConnection", "AsyncProducer", "AsyncRun", "AsyncSubscriber",
           "AsyncWorker", "ActionCall", "AgentbusError", "Client", "Decline", "Event", "Head",
           "Keys", "Producer", "Replay", "Subscriber", "SyncReplay", "SyncRun", "Worker",
           "errors", "new_key", "wire"]
