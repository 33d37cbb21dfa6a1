"""An open-loop HTTP load generator for loopback: requests leave on a fixed schedule, whatever
the responses do, and latency is measured from the scheduled time (no coordinated omission).

Raw asyncio streams with keep-alive connections keep the client's own cost low; it still
shares the machine's two cores with the server, which the figures must say.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Run:
    rate: float
    seconds: float
    latencies_ms: list[float]
    errors: int
    statuses: dict[int, int]
    connections: int = 0  # keep-alive connections opened in all (the first ones, and any opened when all were busy)
    warmup_requests: int = 0  # sent before the timed part (run_open_loop's warmup_s), not in latencies_ms
    warmup_failures: int = 0  # requests of the uncounted warm-up that failed or were not answered 2xx

    @property
    def achieved(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> int:
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


def http_post(path: str, port: int, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _run(
    port: int,
    make_request: Callable[[int], bytes],
    rate: float,
    seconds: float,
    connections: int,
    max_connections: int,
    warmup_s: float,
) -> Run:
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    opened = connections
    uncounted = int(rate * warmup_s)
    result = Run(rate, seconds, [], 0, {}, warmup_requests=uncounted)
    tasks: set[asyncio.Task[None]] = set()

    async def connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An idle connection, or a new one while under ``max_connections``: the pool must not
        hold requests back (a closed loop in disguise), or a server whose answers take a few
        milliseconds would be capped at ``connections`` / latency requests per second."""
        nonlocal opened
        if pool.empty() and opened < max_connections:
            opened += 1
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                opened -= 1
                raise
        return await pool.get()

    def failed(counted: bool) -> None:
        if counted:
            result.errors += 1
        else:
            result.warmup_failures += 1

    async def one(i: int, scheduled: float, counted: bool) -> None:
        try:
            conn = await connection()
        except OSError:  # refused (e.g. the server's accept queue is full): a failed request
            failed(counted)
            return
        try:
            status = await _request(*conn, make_request(i))
            if counted:
                result.statuses[status] = result.statuses.get(status, 0) + 1
                result.latencies_ms.append((time.perf_counter() - scheduled) * 1000)
            elif not 200 <= status < 300:
                result.warmup_failures += 1
            pool.put_nowait(conn)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            failed(counted)
            pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))

    start = time.perf_counter() + 0.05
    total = uncounted + int(rate * seconds)
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i, scheduled, i >= uncounted))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    deadline = time.perf_counter() + 30  # a bounded drain: the run stops by itself
    while tasks and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    result.errors += len(tasks)
    result.connections = opened
    while not pool.empty():
        _, writer = pool.get_nowait()
        writer.close()
    return result


def run_open_loop(
    port: int,
    make_request: Callable[[int], bytes],
    *,
    rate: float,
    seconds: float,
    connections: int = 64,
    max_connections: int = 1024,
    warmup_s: float = 0.0,
) -> Run:
    """Send ``rate`` requests/s for ``seconds`` to 127.0.0.1:port and collect latencies.

    ``connections`` keep-alive connections are opened first; more are opened, up to
    ``max_connections``, whenever every one is busy when a request is due.

    ``warmup_s``: first send at ``rate`` for this long without timing it, on the same schedule
    and connections: the run then measures the steady state, not the burst of connections a
    server whose answers take longer needs at the start. A warm-up request that fails still
    counts (``Run.warmup_failures``), so a server that cannot take the rate from the start
    does not pass.
    """
    return asyncio.run(_run(port, make_request, rate, seconds, connections, max_connections, warmup_s))


def sustained(run: Run) -> bool:
    """Kept up: every request answered 2xx and p99 stayed under 100 ms (no queue building up)."""
    ok = sum(n for status, n in run.statuses.items() if 200 <= status < 300)
    answered = run.errors == 0 and run.warmup_failures == 0
    return answered and ok >= 0.999 * run.rate * run.seconds and run.percentile(0.99) < 100


def summary(run: Run) -> str:
    return (
        f"{run.rate:8.0f}/s offered, {run.achieved:8.0f}/s answered, p50 {run.percentile(0.5):7.1f} ms, "
        f"p99 {run.percentile(0.99):7.1f} ms, p999 {run.percentile(0.999):7.1f} ms, errors {run.errors}, "
        f"{run.connections} connections"
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
