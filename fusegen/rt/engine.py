"""``fg.Engine``: run kernel calls asynchronously on worker threads, ordered by the memory they
read and write (MXNet's dependency engine, with byte ranges in the role of its variables).

    with fg.Engine() as eng:
        eng.push(k1, (x, y), h)          # h = k1(x, y)
        eng.push(k2, (h,), z, axis=0)    # reads h: runs after k1
        eng.push(k3, (x,), w)            # independent of both: may run beside them
        eng.wait_for(z)

Why threads are enough: fusegen's Numba kernels are compiled ``nogil`` and the AOT kernels are
called through ctypes, which releases the GIL, so calls on different workers run on different
cores; only the short Python part of a call (argument checks, the runner) is serialized.

**The rule** (MXNet's): two calls that touch a common byte, at least one of them writing it, run
in push order; any other two may run concurrently. Memory, not Python identity, decides: every
array is reduced to ``(address space, first byte, end byte)`` from ``__array_interface__`` or
``__cuda_array_interface__``, so two views of one buffer are ordered exactly when their byte
extents overlap (conservatively: interleaved strided views such as ``a[::2]`` and ``a[1::2]``
share an extent and are ordered too).

**The bookkeeping** (``fusegen.rt.ranges``) mirrors MXNet's per-variable queues, per byte range.
One lock guards it and the ready queue; it is never held while a kernel runs.

**Failures.** A call that raises is *failed*; calls that depend on it (directly or through other
such calls) are *skipped*, never run, and report the upstream failure. A failure is raised, as an
``EngineError`` naming the call with the original exception as ``__cause__``, by the first wait
that covers it (``wait_for`` of memory it wrote, ``wait_all``, or its handle's ``result()``); from
then on it is *reported*: later calls touching that memory run normally. Until then, a call
pushed on memory a failed call wrote is skipped too, so what runs does not depend on timing.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections import deque

from ..errors import ArgumentError, FusegenError
from .cuda import run_on_stream, runs_on_stream
from .ranges import Ranges, extent


class EngineError(FusegenError, RuntimeError):
    """A pushed call failed, was skipped because a call it depends on failed, or was cancelled;
    or the engine was misused (a push after ``close()``, a wait inside a pushed call)."""


# Task states, in order: the first three are "live", the rest final.
_WAITING, _READY, _RUNNING, _DONE, _FAILED, _SKIPPED, _CANCELLED = range(7)


def _matters(t) -> bool:
    """Does ``t`` still constrain a new call? Yes while it is live, and while it is a failure (or
    skipped because of one) that no wait has reported yet."""
    return t._state < _DONE or (t._root is not None and not t._root._reported)


def _live(t) -> bool:
    """Has ``t`` not reached a final state yet?"""
    return t._state < _DONE


class Task:
    """The handle ``Engine.push`` returns: ``done()``, ``wait()``, ``result()``, ``exception()``."""

    __slots__ = ("seq", "kernel", "site", "_args", "_state", "_waiting", "_dependents", "_followers", "_root",
                 "_reported", "_error", "_value", "_event", "_shared")

    def __init__(self, state, kernel, site, args):
        self.seq = -1             # push order (the order push() took the engine's lock)
        self.kernel, self.site, self._args = kernel, site, args
        self._state, self._waiting, self._dependents = _WAITING, 0, []
        self._followers: list = []  # calls that overwrite memory this one only reads: they wait, not fail
        self._root = None         # the failed call this one was skipped for (itself when it failed)
        self._reported = False    # (on a failed call) a wait has raised its error
        self._error = self._value = self._event = None
        self._shared = state

    @property
    def label(self) -> str:
        """``call #N (what, pushed at file:line)``: how errors name this call."""
        k = self.kernel
        op = getattr(k, "op", None)
        what = (f"op {op.name}" if op is not None and hasattr(op, "name") else
                f"kernel {k.name}" if isinstance(getattr(k, "name", None), str) else
                getattr(k, "__qualname__", None) or repr(k))
        return f"call #{self.seq} ({what}, pushed at {self.site})"

    def __repr__(self) -> str:
        states = ("waiting", "ready", "running", "done", "failed", "skipped", "cancelled")
        return f"<fusegen.rt.engine.Task {self.label}: {states[self._state]}>"

    def done(self) -> bool:
        """True once the call finished, failed, was skipped or cancelled."""
        return self._state >= _DONE

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def exception(self, timeout: float | None = None):
        """Wait; then the call's ``EngineError`` (None if it succeeded). When this call is the one
        that failed, that counts as reporting the failure (a skipped call's handle does not report
        the failure it was skipped for)."""
        self._shared.wait([self], timeout)
        if self._state == _FAILED:
            self._shared.report([self])
        return self._error

    def result(self, timeout: float | None = None):
        """Wait; then what the kernel returned, or raise the call's ``EngineError``."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._value

    def wait(self, timeout: float | None = None) -> None:
        """``result()`` without the value."""
        self.result(timeout)


class _State:
    """What the engine and its worker threads share (the workers never hold the ``Engine``, so
    dropping it lets a finalizer stop them)."""

    def __init__(self):
        self.cond = threading.Condition(threading.Lock())
        self.ready: deque[Task] = deque()
        self.live: dict[int, Task] = {}        # seq -> task, in push order
        self.unreported: dict[int, Task] = {}  # failed calls no wait has raised yet
        self.spaces: dict[str, Ranges] = {}
        self.segments_at_prune = 0
        self.next_seq = 0
        self.closing = False
        self.worker_ids: set[int] = set()

    def settle(self, task: Task) -> None:
        """``task`` reached a final state (lock held): release its dependents, transitively
        skipping those that depend on a failure."""
        stack = [task]
        while stack:
            t = stack.pop()
            self.live.pop(t.seq, None)
            if t._state == _FAILED:
                self.unreported[t.seq] = t
            for d in t._dependents:
                if d._state >= _DONE:  # cancelled meanwhile
                    continue
                if t._root is not None and (d._root is None or t._root.seq < d._root.seq):
                    d._root = t._root
                d._waiting -= 1
                if d._waiting == 0:
                    self.start_or_skip(d, stack)
            for d in t._followers:   # (a failed reader left what they overwrite as it was)
                if d._state < _DONE:
                    d._waiting -= 1
                    if d._waiting == 0:
                        self.start_or_skip(d, stack)
            t._dependents, t._followers, t._args = [], [], None  # free the arrays as soon as possible
            if t._event is not None:
                t._event.set()
        if not self.live:
            if not self.unreported:
                self.spaces.clear()  # idle: nothing can constrain a new call
            if self.closing:
                self.cond.notify_all()  # let the workers exit

    def start_or_skip(self, t: Task, stack: list) -> None:
        if t._root is None:
            t._state = _READY
            self.ready.append(t)
            self.cond.notify()
            return
        t._state = _SKIPPED
        root = t._root
        t._error = EngineError(f"{t.label} was not run: it depends on {root.label}, which failed")
        t._error.__cause__ = root._error.__cause__
        stack.append(t)

    def wait(self, tasks, timeout: float | None) -> None:
        if threading.get_ident() in self.worker_ids:  # always, not only when it would block: no timing-dependent errors
            raise EngineError("a pushed call cannot wait on its engine (its worker could wait on itself); "
                              "push the follow-up work instead")
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in tasks:
            with self.cond:
                if t._state >= _DONE:
                    continue
                if t._event is None:
                    t._event = threading.Event()
                event = t._event
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not event.wait(left):
                raise TimeoutError(f"{t.label} has not finished after {timeout} s")

    def report(self, roots) -> None:
        with self.cond:
            for r in roots:
                r._reported = True
                self.unreported.pop(r.seq, None)

    def raise_first(self, roots) -> None:
        """Mark ``roots`` (failed calls) reported and raise the earliest one's error."""
        roots = sorted(set(roots), key=lambda r: r.seq)
        if not roots:
            return
        self.report(roots)
        error = roots[0]._error
        if len(roots) > 1 and hasattr(error, "add_note"):  # Python 3.11+
            error.add_note("also failed: " + "; ".join(r.label for r in roots[1:]))
        raise error


def _shutdown(state: _State, threads: list, cancel: bool) -> None:
    """Stop accepting pushes, optionally cancel what has not started, let the workers finish the
    rest and exit, and join them; but not from a worker (a pushed call that closes or drops its
    engine), since the other workers wait for that very call to finish."""
    with state.cond:
        state.closing = True
        if cancel:
            for t in list(state.live.values()):
                if t._state < _RUNNING:
                    t._state = _CANCELLED
                    t._error = EngineError(f"{t.label} was cancelled by Engine.close(cancel=True)")
                    state.live.pop(t.seq)
                    t._dependents, t._followers, t._args = [], [], None
                    if t._event is not None:
                        t._event.set()
            state.ready.clear()
        state.cond.notify_all()
    if threading.current_thread() not in threads:
        for th in threads:
            th.join()


def _worker(state: _State) -> None:
    stream = None  # this worker's CUDA stream, created on its first CUDA call
    cond = state.cond
    while True:
        with cond:
            while not state.ready:
                if state.closing and not state.live:
                    return
                cond.wait()
            task = state.ready.popleft()
            task._state = _RUNNING
        kernel, inputs, kw, cuda = task._args
        try:
            if cuda:
                if stream is None and "stream" not in kw:
                    from numba import cuda as nbcuda
                    stream = nbcuda.stream()
                task._value = run_on_stream(kernel, inputs, kw, stream)
            elif _needs_layer_lock(kernel):
                with _WORKQUEUE_LOCK:
                    task._value = kernel(*inputs, **kw)
            else:
                task._value = kernel(*inputs, **kw)
            error = None
        except BaseException as exc:  # noqa: BLE001 - every failure must reach a wait, not kill the worker
            error = exc
        with cond:
            if error is None:
                task._state = _DONE
            else:
                task._state, task._root = _FAILED, task
                task._error = EngineError(f"{task.label} failed: {type(error).__name__}: {error}")
                task._error.__cause__ = error
            state.settle(task)


# Numba's fallback ``workqueue`` threading layer aborts the process when two threads run
# parallel kernels at once ("Terminating: Nested parallel kernel launch detected"); ``omp`` and
# ``tbb`` do not. Numba picks its layer on the first parallel launch; the engine makes it pick
# now (``_launch_threads``, what that launch calls) and, if it is ``workqueue`` or cannot be
# known, makes Numba CPU kernels take turns: slower, never a crash.
_WORKQUEUE_LOCK = threading.Lock()
_layer_safe: bool | None = None


def _needs_layer_lock(kernel) -> bool:
    global _layer_safe
    if _layer_safe or getattr(kernel, "backend", None) != "numba" or getattr(kernel, "device", None) != "cpu":
        return False
    if _layer_safe is None:
        with _WORKQUEUE_LOCK:
            try:
                import numba
                from numba.np.ufunc import parallel
                parallel._launch_threads()
                _layer_safe = numba.threading_layer() != "workqueue"
            except Exception:  # noqa: BLE001 - unknown layer: assume the unsafe one
                _layer_safe = False
    return not _layer_safe


def _arrays(value, what: str) -> tuple:
    """A sequence of arrays; a lone array (anything with a shape) stands for a sequence of one."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if hasattr(value, "shape"):
        return (value,)
    raise ArgumentError(f"Engine.push: {what} must be an array or a sequence of arrays, got {type(value).__name__}")


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Engine:
    """Executes pushed kernel calls on worker threads, ordered by the memory they touch.

    ``workers``: the number of threads (default: the cores this process may use). Threads start
    with the engine and stop at ``close()``, at the end of a ``with`` block, when the engine is
    garbage-collected, or at interpreter exit (pending calls are finished first in each case
    except ``close(cancel=True)``).
    """

    def __init__(self, workers: int | None = None):
        workers = _default_workers() if workers is None else workers
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ArgumentError(f"Engine(workers=...) must be a positive int, got {workers!r}")
        self.workers = workers
        self._state = _State()
        self._threads = [threading.Thread(target=_worker, args=(self._state,), daemon=True,
                                          name=f"fusegen-engine-{i}") for i in range(workers)]
        for th in self._threads:
            th.start()
            self._state.worker_ids.add(th.ident)
        # Daemon threads plus a finalizer (which also runs at exit): an engine nobody closed
        # neither blocks interpreter exit nor is killed mid-call.
        self._finalizer = weakref.finalize(self, _shutdown, self._state, self._threads, False)

    def __repr__(self) -> str:
        st = self._state
        return (f"<fusegen.Engine workers={self.workers} pending={len(st.live)}"
                f"{' closed' if st.closing else ''}>")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # the block failed: don't run (or mask it with) what it pushed
            self.close(cancel=True)
            return
        try:
            self.wait_all()
        finally:
            self.close()

    # --- pushing ------------------------------------------------------------------------------
    def push(self, kernel, inputs=(), outputs=(), *, reads=(), writes=(), accumulate=False, **attrs) -> Task:
        """Schedule ``kernel(*inputs, out=outputs, **attrs)``; returns its ``Task`` at once.

        ``kernel``: any fusegen kernel or any callable of that form. ``outputs``: preallocated
        arrays the call writes, passed as ``out=`` (the array itself when there is one, a tuple
        when several; no ``out=`` when none: the kernel allocates and ``result()`` returns it).
        ``reads``/``writes``: further arrays the call touches without receiving them as
        arguments (a closure's arrays). ``accumulate`` (True, or which outputs): the outputs are
        read too, and ``accumulate`` is passed on to the kernel. ``inplace=True`` (a kernel
        option: outputs written over inputs) marks the inputs the op declares as overwritable
        (all inputs, for a kernel without an op) as written. Concurrent pushers are ordered by
        the moment each ``push`` takes the engine's lock.
        """
        if not callable(kernel):
            raise ArgumentError(f"Engine.push: kernel must be callable, got {type(kernel).__name__}")
        inputs, outputs = _arrays(inputs, "inputs"), _arrays(outputs, "outputs")
        reads, writes = _arrays(reads, "reads"), _arrays(writes, "writes")
        for k, o in enumerate(outputs + writes):
            flags = getattr(o, "flags", None)
            if flags is not None and not getattr(flags, "writeable", True):
                raise ArgumentError(f"Engine.push: written array {k} is read-only")
        kw = dict(attrs)
        if outputs:
            kw["out"] = outputs[0] if len(outputs) == 1 else outputs
        accumulating = accumulate is not False and accumulate is not None
        if accumulating:
            if not outputs:
                raise ArgumentError("Engine.push: accumulate needs outputs to accumulate into")
            kw["accumulate"] = accumulate
        if attrs.get("inplace"):
            over = getattr(getattr(kernel, "op", None), "inplace", None)
            writes += (tuple(inputs[i] for i in set(over.values()) if i < len(inputs))
                       if isinstance(over, dict) else inputs)
        # Reads first: an array a call both reads and writes ends up recorded as written.
        accesses = [(e, False) for e in map(extent, inputs + reads + (outputs if accumulating else ()))
                    if e is not None]
        accesses += [(e, True) for e in map(extent, outputs + writes) if e is not None]
        caller = sys._getframe(1)
        site = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
        task = Task(self._state, kernel, site, (kernel, inputs, kw, runs_on_stream(kernel)))
        st = self._state
        with st.cond:
            if st.closing:
                raise EngineError("Engine.push: the engine is closed")
            task.seq, st.next_seq = st.next_seq, st.next_seq + 1
            deps: set = set()
            anti: set = set()   # calls that only read what this one writes: an order, not a data flow
            for (space, lo, hi), write in accesses:
                ranges = st.spaces.get(space)
                if ranges is None:
                    ranges = st.spaces[space] = Ranges(_matters, _live)
                ranges.touch(lo, hi, task, write, deps, anti)
            deps.discard(task)
            for d in anti - deps - {task}:
                if d._state < _DONE:
                    d._followers.append(task)
                    task._waiting += 1
            for d in deps:
                if d._state < _DONE:
                    d._dependents.append(task)
                    task._waiting += 1
                elif task._root is None or d._root.seq < task._root.seq:
                    task._root = d._root  # an unreported failure wrote this memory
            st.live[task.seq] = task
            if task._waiting == 0:
                stack: list = []
                st.start_or_skip(task, stack)
                if stack:
                    st.settle(task)
            self._maybe_prune()
        return task

    def _maybe_prune(self) -> None:
        st = self._state
        n = sum(len(r.segs) for r in st.spaces.values())
        if n > 1024 and n > 4 * st.segments_at_prune:
            for r in st.spaces.values():
                r.prune()
            st.segments_at_prune = sum(len(r.segs) for r in st.spaces.values())

    # --- waiting ------------------------------------------------------------------------------
    def wait_for(self, *arrays, timeout: float | None = None) -> None:
        """Wait for every pushed call that writes *or reads* memory overlapping ``arrays``, so the
        caller may then both read and overwrite them. Raises the unreported failure of a call that
        wrote that memory (or was skipped instead of writing it); failures of calls that only read
        it surface at their own waits."""
        writers: list = []
        readers: list = []
        with self._state.cond:
            for e in map(extent, arrays):
                if e is not None and e[0] in self._state.spaces:
                    self._state.spaces[e[0]].scan(e[1], e[2], writers, readers)
        self._state.wait(writers + readers, timeout)
        self._state.raise_first(w._root for w in writers if w._root is not None and not w._root._reported)

    def wait_all(self, timeout: float | None = None) -> None:
        """Wait for every call pushed so far; raise the earliest unreported failure (noting the
        others: all count as reported)."""
        with self._state.cond:
            tasks = list(self._state.live.values())
        self._state.wait(tasks, timeout)
        with self._state.cond:
            roots = list(self._state.unreported.values())
        self._state.raise_first(roots)

    @property
    def pending(self) -> int:
        """How many pushed calls have not reached a final state."""
        return len(self._state.live)

    # --- shutting down ------------------------------------------------------------------------
    def close(self, cancel: bool = False) -> None:
        """Stop accepting pushes and stop the workers once the pending calls are done; with
        ``cancel=True``, calls that have not started are cancelled instead (their handles raise
        an ``EngineError``). Does not raise the calls' failures: ``wait_all()`` first for that."""
        if cancel and self._finalizer.alive:
            _shutdown(self._state, [], True)  # cancel now; the finalizer below joins
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._state.closing
