"""The message broker port and its adapters (RabbitMQ and in-memory)."""

from spotsweep.shared.broker.port import Broker, Delivery, Handler, Outgoing

__all__ = ["Broker", "Delivery", "Handler", "Outgoing", "connect"]


def connect(url: str | None, **kwargs: object) -> Broker:
    """A broker for ``url``: ``memory://`` gives the in-process broker, else RabbitMQ."""
    if url is None or url.startswith("memory://"):
        from spotsweep.shared.broker.memory import MemoryBroker  # deferred: only the adapter asked for loads

        return MemoryBroker()
    from spotsweep.shared.broker.rabbit import RabbitBroker  # deferred: pika, for RabbitMQ only

    return RabbitBroker(url, **kwargs)  # type: ignore[arg-type]
