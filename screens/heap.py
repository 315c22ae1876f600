"""Keep CPython's full garbage collections off the key -> repaint path.

Once a run's dashboard has loaded, the UI holds ~134k objects that live as long as it does (~92k of them from
imports). CPython 3.11's generation-2 collection walks every one of them: 316-490 ms pauses beside a training
worker, the tail of key -> repaint (docs/benchmarks.md, "Full garbage collections and a lone Esc").
`gc.freeze()` moves them to a permanent generation that collections skip, so a full collection walks only what
came after.
Frozen objects are never collected, so `release()` unfreezes before the app drops a dashboard for another
run's (its widgets hold reference cycles that only the collector frees). A dropped screen that something still
references when the next dashboard settles (Textual's contexts can keep a finished worker, and through its
arguments the screen, for a while) is frozen with the rest until the following switch: at most one dashboard.
"""

from __future__ import annotations

import gc

_settled = False


def settled() -> bool:
    return _settled


def settle() -> int:
    """Freeze what is tracked now; returns how many objects are frozen. No collection first: that would be
    the very pause this avoids (a full one, 100-500 ms), and what young garbage it would have found stays
    frozen only until the next `release()`."""
    global _settled
    gc.freeze()
    _settled = True
    return gc.get_freeze_count()


def release() -> None:
    """Unfreeze (the next full collection walks everything again) until the next `settle()`."""
    global _settled
    gc.unfreeze()
    _settled = False
