"""Whatever ojai asks the network is said while it waits: a command that shows its work on a
terminal registers how (:func:`say_with`, a spinner on the status line), and the functions
that talk to GitHub or the Hub wrap each request in :func:`asking`. Nothing is said when no
command registered a way (tests, ``--json``, output that is not a terminal).

Every such request also has a timeout (:data:`NETWORK_TIMEOUT`, for connecting and for each
read) that ends a dead address within about ten seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from urllib.parse import urlsplit

#: seconds to connect, and to wait for each read, before a request gives up
NETWORK_TIMEOUT = 10.0

_say: Callable[[str], AbstractContextManager[object]] | None = None


def say_with(say: Callable[[str], AbstractContextManager[object]] | None
             ) -> Callable[[str], AbstractContextManager[object]] | None:
    """Show what is asked through ``say`` (a sentence in, a context manager that shows it while
    the request runs); None stops saying it. Returns the previous one, to restore."""
    global _say
    previous, _say = _say, say
    return previous


@contextmanager
def asking(what: str, url: str) -> Iterator[None]:
    """Say ``asking HOST for WHAT`` while the block runs."""
    say = _say
    if say is None:
        yield
        return
    host = urlsplit(url).netloc or url
    with say(f"asking {host} for {what} (up to {NETWORK_TIMEOUT:.0f} s; Ctrl-C stops)"):
        yield
