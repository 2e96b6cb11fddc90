"""Any Polars frame read in bounded batches, failing loudly and without quoting the data.

The lowest layer of the streamed paths: the schema's curator-side checks
(:meth:`~opendp_sketch.Schema.problems`) and the Polars and table backends
(:mod:`opendp_sketch.backends.streaming`, :mod:`opendp_sketch.backends.tables`) read frames
through :func:`stream_frames`, so a read that fails part-way is an error with a fixed message,
never a partial sum.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Iterator
from typing import Any

import polars as pl

__all__ = ["DEFAULT_BATCH_ROWS", "STREAM_FAILED", "StreamReadError", "stream_frames"]

#: rows per batch read from a frame (bounded memory: batch_rows × columns float64 at a time)
DEFAULT_BATCH_ROWS = 1 << 16


class StreamReadError(RuntimeError):
    """A streamed input could not be read to its end: nothing was released.

    The message names no value from the data (a reader's own message may quote file contents).
    """


#: what a stream error reads as inside a measurement: the reader's message is never shown
STREAM_FAILED = (
    "the input could not be read to its end (a value that does not parse, or a failed read), so "
    "nothing was released; check the table on the curator's side first (release_sketch and the CLI "
    "do), and scan CSV files with opendp_sketch.backends.streaming.scan(path), which parses every value leniently"
)

_END = object()
#: streams whose reader thread may still run: stopped at interpreter exit (a reader left running
#: then calls into a finalised interpreter, and the process aborts)
_OPEN_STREAMS: set[tuple[threading.Event, queue.Queue[Any], threading.Thread]] = set()


def _finish(stream: tuple[threading.Event, queue.Queue[Any], threading.Thread]) -> None:
    """Stop a stream's reader: set its flag and drain the queue until the thread ends."""
    stop, batches, worker = stream
    stop.set()
    while worker.is_alive():  # let a producer blocked on the full queue finish
        try:
            batches.get(timeout=0.05)
        except queue.Empty:
            pass
    worker.join()


@atexit.register
def _stop_open_streams() -> None:
    for stream in list(_OPEN_STREAMS):
        _finish(stream)
    _OPEN_STREAMS.clear()


def stream_frames(lf: pl.LazyFrame, batch_rows: int) -> Iterator[pl.DataFrame]:
    """The batches of ``lf`` (at most ``batch_rows`` rows each), from Polars' streaming engine.

    Unlike ``LazyFrame.collect_batches``, a query that fails part-way does not just end the
    batches early (Polars 1.36 runs it on a background thread and drops its error): a partial
    sum would then pass as the sum of the whole table, and one row that does not parse would
    change the release by every row after it. Here the failure raises :class:`StreamReadError`
    after the last batch read, with a fixed message (:data:`STREAM_FAILED`), never the reader's.
    The queue holds one batch ahead of the consumer (the reader may buffer more of its source: a
    CSV read as text takes about twice the memory of a typed read). A stream still open when the
    interpreter exits is stopped first (:func:`_stop_open_streams`).
    """
    batches: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()
    failed: list[bool] = []

    def put(batch: pl.DataFrame) -> bool:
        if not stop.is_set():
            batches.put(batch)
        return stop.is_set()

    def run() -> None:
        try:
            lf.sink_batches(put, chunk_size=batch_rows, maintain_order=False, lazy=False)
        except BaseException:  # noqa: BLE001 - any reader error ends the stream as a failure
            failed.append(True)
        finally:
            batches.put(_END)

    worker = threading.Thread(target=run, name="opendp_sketch-stream", daemon=True)
    stream = (stop, batches, worker)
    _OPEN_STREAMS.add(stream)
    worker.start()
    try:
        while (item := batches.get()) is not _END:
            yield item
    finally:
        if stream in _OPEN_STREAMS:  # not already stopped at interpreter exit
            _OPEN_STREAMS.discard(stream)
            _finish(stream)
    if failed:
        raise StreamReadError(STREAM_FAILED) from None
