"""A userspace TCP proxy that delays every byte by a fixed time each way: a remote S3 on loopback.

Kernel ``netem`` is not available on these machines, so the checkpoint benchmark
(bench/checkpoint.py) puts this in front of moto's S3 server for every client
alike. Each direction reads what arrives, stamps it, and a writer sends it on
once ``delay`` has passed since it arrived: a pipe of that latency, not a
stop-and-wait, so bandwidth is not limited (bar the proxy's own CPU) and many
requests are in flight at once, as on a long link. ``rate`` (bytes per second,
over all connections together) throttles it too: a test uses that for an object
store too slow to take a checkpoint within a preemption's grace.

Runs its event loop in a daemon thread: ``with DelayProxy(port, 0.010) as proxy: proxy.port``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType

_READ = 256 * 1024


class _Rate:
    """A token bucket shared by every connection of one proxy."""

    def __init__(self, rate: float) -> None:
        self.rate, self.next = rate, time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        async with self.lock:
            now = time.monotonic()
            self.next = max(self.next, now) + n / self.rate
            wait = self.next - now - n / self.rate
        if wait > 0:
            await asyncio.sleep(wait)


class DelayProxy:
    """Forward 127.0.0.1:``port`` to ``target_port``, ``delay`` seconds each way (``rate`` bytes/s at most, if given)."""

    def __init__(self, target_port: int, delay: float, rate: float | None = None, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.delay, self.rate = delay, rate
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._bucket: _Rate | None = None
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        """Stop listening and end every connection's tasks, so the loop stops clean."""
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._bucket = _Rate(self.rate) if self.rate else None
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the proxy is closing

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction: a reader stamps chunks, a sender releases each ``delay`` after its arrival."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=64)  # 16 MiB in flight: back-pressure

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                pause = due - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                if self._bucket is not None:
                    await self._bucket.take(len(data))
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(_READ)
                await queue.put((time.monotonic() + self.delay, data))
                if not data:
                    break
            await sender
        except (ConnectionError, OSError):
            sender.cancel()
        finally:
            writer.close()
