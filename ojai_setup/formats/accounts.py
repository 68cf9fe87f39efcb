"""``/etc/passwd`` as text -> what ojai needs to know of it."""

from __future__ import annotations


def users(text: str) -> dict[str, int]:
    """User name -> uid of every well-formed line of a ``passwd`` file."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[0] and fields[2].isdigit():
            found[fields[0]] = int(fields[2])
    return found


def has_user(text: str, name: str) -> bool:
    return name in users(text)
