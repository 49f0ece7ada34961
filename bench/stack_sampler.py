"""Where one thread's wall time goes, by sampling its Python stack (no py-spy on the GPU machine).

    with StackSampler() as s:            # samples the calling thread every ``interval`` seconds
        engine.generate(...)
    print(s.table(25))                   # functions by inclusive and by leaf share of the samples

A sampler thread reads ``sys._current_frames()`` for the watched thread. While the watched thread waits in C code
that releases the GIL (a CUDA synchronize, a lock) the sample lands on that call at once; while it runs Python, the
sampler waits for the GIL (the switch interval is lowered to 0.5 ms inside the block), so shares are close to the
thread's time, not exact. A function counts once per sample however deep its recursion.
"""

from __future__ import annotations

import collections
import sys
import threading
import time


def _name(code) -> str:
    path = code.co_filename
    cut = path.rfind("site-packages/")
    short = path[cut + 14:] if cut >= 0 else path.rsplit("/", 2)[-1] if path.count("/") > 1 else path
    return f"{short}:{code.co_name}"


class StackSampler:
    def __init__(self, interval: float = 0.001, thread_id: int | None = None) -> None:
        self.interval = interval
        self.thread_id = thread_id
        self.samples = 0
        self.inclusive: collections.Counter = collections.Counter()
        self.leaf: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._switch = sys.getswitchinterval()
        self.wall_s = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self.samples += 1
                self.leaf[_name(frame.f_code)] += 1
                seen = set()
                while frame is not None:
                    seen.add(_name(frame.f_code))
                    frame = frame.f_back
                self.inclusive.update(seen)
            time.sleep(self.interval)

    def __enter__(self) -> "StackSampler":
        self.thread_id = self.thread_id or threading.get_ident()
        sys.setswitchinterval(0.0005)
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.perf_counter() - self._t0
        sys.setswitchinterval(self._switch)

    def table(self, top: int = 25) -> str:
        n = max(self.samples, 1)
        lines = [f"{self.samples} samples over {self.wall_s:.2f} s", "", "| inclusive | function |", "|---:|---|"]
        lines += [f"| {100 * c / n:.1f}% | `{f}` |" for f, c in self.inclusive.most_common(top)]
        lines += ["", "| leaf | function |", "|---:|---|"]
        lines += [f"| {100 * c / n:.1f}% | `{f}` |" for f, c in self.leaf.most_common(top)]
        return "\n".join(lines)
