"""A process pool for reward scorers that enforces a per-sample deadline (standard library only).

``ProcessPoolExecutor`` cannot stop one task, so a scorer that never returns would hang the run. Each worker here has
its own pipe and a shared-memory slot saying which sample it scores since when; a worker past ``timeout_s`` is
killed, the sample recorded as a timeout, the rest of its chunk requeued and the worker replaced (a worker that died
gets its sample recorded as an error). A worker has one chunk at a time (pipe writes never deadlock) and flushes its
results every ``flush_s`` (a kill loses little). Workers start with ``spawn`` / ``forkserver`` (never ``fork``, which copies
torch / CUDA state) with the parent's ``__main__`` hidden, so scorers travel as ``"module:attr"`` or file paths.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback
import weakref
from multiprocessing import connection
from typing import Iterable

from rl_core.rewards.outcome import ERROR, OK, TIMEOUT, Outcome
from rl_core.rewards.scoring import Sample, ScorerSpec, call_contained, call_scorer, load_scorer, normalize_result

_IDLE = -1.0


@contextlib.contextmanager
def _main_module_hidden():
    """Make multiprocessing's preparation data name no ``__main__`` to re-import in the child."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


# ----------------------------------------------------------------- worker
def _safe_extras(extras: dict) -> dict:
    out = {}
    for k, v in extras.items():
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001 - anything unpicklable becomes its repr
            v = repr(v)
        out[str(k)] = v
    return out


def _send(conn, kind: str, chunk_id: int, results: list) -> None:
    try:
        conn.send((kind, chunk_id, results))
    except (pickle.PicklingError, TypeError, AttributeError):
        results = [(i, st, sc, _safe_extras(ex or {}), err, det) for i, st, sc, ex, err, det in results]
        conn.send((kind, chunk_id, results))


def _worker_main(conn, state, flush_s: float) -> None:
    """Loop: receive ``(chunk_id, spec, kwargs, samples)``, send results back; ``None`` stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        chunk_id, spec, kwargs, samples = msg
        results: list = []
        try:
            fn = load_scorer(spec)
        except BaseException as exc:  # noqa: BLE001 - reported per sample
            err = f"loading reward {spec.label!r} failed: {type(exc).__name__}: {exc}"
            tb = traceback.format_exc(limit=20)
            _send(conn, "done", chunk_id, [(s.index, ERROR, 0.0, None, err, tb) for s in samples])
            continue
        last_flush = time.monotonic()
        last = len(samples) - 1
        for position, sample in enumerate(samples):
            state[1] = time.monotonic()
            state[0] = float(sample.index)
            try:
                score, extras = normalize_result(call_contained(lambda: call_scorer(fn, sample, kwargs)))
                results.append((sample.index, OK, score, extras, "", ""))
            except Exception as exc:  # noqa: BLE001 - reported, never kills the worker
                results.append((sample.index, ERROR, 0.0, None, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=20)))
            state[0] = _IDLE
            if position < last and time.monotonic() - last_flush > flush_s:
                _send(conn, "partial", chunk_id, results)
                results = []
                last_flush = time.monotonic()
        _send(conn, "done", chunk_id, results)


# ----------------------------------------------------------------- parent
class _Outcomes(dict):
    """Outcomes by sample index that remember whether any was an error."""

    saw_error = False

    def __setitem__(self, index: int, outcome: Outcome) -> None:
        if outcome.status == ERROR:
            self.saw_error = True
        super().__setitem__(index, outcome)


class _Chunk:
    __slots__ = ("id", "spec", "kwargs", "remaining")

    def __init__(self, chunk_id: int, spec: ScorerSpec, kwargs: dict, samples: Iterable[Sample]):
        self.id = chunk_id
        self.spec = spec
        self.kwargs = kwargs
        self.remaining = {s.index: s for s in samples}


class _Worker:
    __slots__ = ("proc", "conn", "state", "chunk", "last_progress")

    def __init__(self, proc, conn, state):
        self.proc = proc
        self.conn = conn
        self.state = state
        self.chunk: _Chunk | None = None
        self.last_progress = time.monotonic()


def _stop_processes(procs: list, owner_pid: int | None = None) -> None:
    if owner_pid is not None and owner_pid != os.getpid():
        return  # a forked copy of the parent: the workers are not its children
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5)


class ScorerPool:
    """``num_workers`` scorer processes, reusable across batches; ``close()`` when done."""

    def __init__(self, num_workers: int, timeout_s: float, *, start_method: str | None = None, max_chunk: int = 64,
                 flush_s: float = 0.2, load_timeout_s: float = 120.0) -> None:
        if num_workers < 1:
            raise ValueError(f"a scorer pool needs num_workers >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"reward.timeout_s must be > 0, got {timeout_s}")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.max_chunk = max_chunk
        self.flush_s = flush_s
        self.load_timeout_s = max(load_timeout_s, self.timeout_s)
        self._ctx = mp.get_context(start_method or "spawn")
        self._workers: list[_Worker] = []
        self._procs: list = []  # every process started, for the finalizer
        self._ids = itertools.count()
        self.restarts = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_processes, self._procs, os.getpid())

    # ---------------------------------------------------------- lifecycle
    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        state = self._ctx.RawArray("d", 2)
        state[0] = _IDLE
        proc = self._ctx.Process(target=_worker_main, args=(child, state, self.flush_s), name="rl-core-reward-worker", daemon=True)
        with _main_module_hidden():
            proc.start()
        child.close()
        self._procs[:] = [p for p in self._procs if p.is_alive()] + [proc]
        return _Worker(proc, parent, state)

    def start(self) -> None:
        if self._closed:
            raise RuntimeError("the reward pool is closed")
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn())

    def _replace(self, w: _Worker) -> None:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=5)
        w.conn.close()
        self._workers[self._workers.index(w)] = self._spawn()
        self.restarts += 1

    def close(self) -> None:
        """Stop every worker (idle ones politely, busy ones by kill)."""
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            if w.chunk is None:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + 2.0
        for w in self._workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
        _stop_processes([w.proc for w in self._workers])
        for w in self._workers:
            w.conn.close()
        self._workers = []
        self._finalizer.detach()

    def __enter__(self) -> "ScorerPool":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------- scoring
    def run(self, jobs: Iterable[tuple[ScorerSpec, dict, list[Sample]]], *, stop_on_error: bool = False) -> dict[int, Outcome]:
        """Outcomes by sample index of every ``(spec, kwargs, samples)`` job. ``stop_on_error``: no new chunk after the
        first error (running chunks finish; samples never scored are absent), so the caller can raise promptly."""
        self.start()
        jobs = list(jobs)
        total = sum(len(s) for _, _, s in jobs)
        size = max(1, min(self.max_chunk, -(-total // (self.num_workers * 8)) if total else 1))
        pending: collections.deque[_Chunk] = collections.deque()
        for spec, kwargs, samples in jobs:
            for i in range(0, len(samples), size):
                pending.append(_Chunk(next(self._ids), spec, kwargs, samples[i : i + size]))
        outcomes = _Outcomes()
        ok = False
        try:
            while True:
                stopping = stop_on_error and outcomes.saw_error
                if not stopping:
                    for w in list(self._workers):
                        if w.chunk is None and pending:
                            self._assign(w, pending.popleft(), pending, outcomes)
                busy = [w for w in self._workers if w.chunk is not None]
                if not busy:
                    if pending and not stopping:
                        continue
                    break
                waitables = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
                ready = set(connection.wait(waitables, timeout=self._wait_s(busy)))
                for w in busy:
                    if w.conn in ready or w.proc.sentinel in ready:
                        self._drain(w, pending, outcomes)
                self._check_deadlines(pending, outcomes)
            ok = True
        finally:
            if not ok:  # interrupted: busy workers hold chunks nobody will read
                for w in list(self._workers):
                    if w.chunk is not None:
                        w.chunk = None
                        self._replace(w)
        return dict(outcomes)

    def _assign(self, w: _Worker, chunk: _Chunk, pending, outcomes) -> None:
        try:
            w.conn.send((chunk.id, chunk.spec, chunk.kwargs, list(chunk.remaining.values())))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pending.appendleft(chunk)
            self._replace(w)
            return
        w.chunk = chunk
        w.last_progress = time.monotonic()

    def _wait_s(self, busy: list[_Worker]) -> float:
        now = time.monotonic()
        cap = max(0.01, min(0.5, self.timeout_s / 4))
        wait = cap
        for w in busy:
            if w.state[0] >= 0:
                wait = min(wait, w.state[1] + self.timeout_s - now)
            else:
                wait = min(wait, w.last_progress + self.load_timeout_s - now)
        return max(0.001, wait)

    def _drain(self, w: _Worker, pending, outcomes) -> None:
        """Read every message waiting on ``w``'s pipe; handle its death if it died."""
        while w.chunk is not None:
            try:
                if not w.conn.poll():
                    if not w.proc.is_alive():
                        self._died(w, pending, outcomes)
                    return
                kind, chunk_id, results = w.conn.recv()
            except (EOFError, OSError):
                self._died(w, pending, outcomes)
                return
            chunk = w.chunk
            if not self._record(w, chunk_id, results, outcomes):  # cannot happen with one chunk in flight; be safe
                continue
            w.last_progress = time.monotonic()
            if kind == "done":
                w.chunk = None
                for index in chunk.remaining:  # a worker must report every sample it was given
                    outcomes[index] = Outcome(ERROR, error="the reward worker did not report this sample")

    @staticmethod
    def _record(w: _Worker, chunk_id: int, results: list, outcomes) -> bool:
        """Record a message's results when it is about ``w``'s current chunk."""
        if w.chunk is None or chunk_id != w.chunk.id:
            return False
        for index, status, score, extras, err, detail in results:
            w.chunk.remaining.pop(index, None)
            outcomes[index] = Outcome(status, score, extras, err, detail)
        return True

    def _requeue_rest(self, chunk: _Chunk, pending) -> None:
        if chunk.remaining:
            pending.appendleft(_Chunk(next(self._ids), chunk.spec, chunk.kwargs, chunk.remaining.values()))

    def _died(self, w: _Worker, pending, outcomes) -> None:
        chunk, w.chunk = w.chunk, None
        w.proc.join(timeout=5)
        code = w.proc.exitcode
        current = int(w.state[0])
        if current >= 0 and current in chunk.remaining:
            chunk.remaining.pop(current)
            outcomes[current] = Outcome(ERROR, error=f"the reward worker process died (exit code {code}) while scoring this sample")
            self._requeue_rest(chunk, pending)
        else:  # died outside any sample: loading the scorer kills it; do not retry forever
            for index in chunk.remaining:
                outcomes[index] = Outcome(ERROR, error=f"the reward worker process died (exit code {code}) before scoring (loading the scorer?)")
        self._replace(w)

    def _check_deadlines(self, pending, outcomes) -> None:
        now = time.monotonic()
        for w in list(self._workers):
            if w.chunk is None:
                continue
            current, started = int(w.state[0]), w.state[1]
            scoring_late = current >= 0 and now - started > self.timeout_s
            if not scoring_late and not (current < 0 and now - w.last_progress > self.load_timeout_s):
                continue
            w.proc.kill()
            w.proc.join(timeout=5)
            self._drain_after_kill(w, outcomes)
            chunk, w.chunk = w.chunk, None
            if scoring_late:
                if current in chunk.remaining:
                    chunk.remaining.pop(current)
                    outcomes[current] = Outcome(TIMEOUT, error=f"no result within reward.timeout_s={self.timeout_s:g} s")
                self._requeue_rest(chunk, pending)
            else:
                for index in chunk.remaining:
                    outcomes[index] = Outcome(ERROR, error=f"the reward worker made no progress for {self.load_timeout_s:g} s (loading the scorer?)")
            self._replace(w)

    def _drain_after_kill(self, w: _Worker, outcomes) -> None:
        """Keep results the worker sent before it was killed."""
        try:
            while w.conn.poll():
                _kind, chunk_id, results = w.conn.recv()
                self._record(w, chunk_id, results, outcomes)
        except (EOFError, OSError):
            pass
