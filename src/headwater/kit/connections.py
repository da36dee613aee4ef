"""Connections a channel holds at once, counted in all and per address: what keeps one
client's flood (idle SSH connections, SMTP sessions) from taking every place."""

from __future__ import annotations


class Connections:
    """At most `most` connections at once, and `per_address` from one address."""

    def __init__(self, *, most: int, per_address: int) -> None:
        self.most = most
        self.per_address = per_address
        self.open: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        """Count a new connection; False (and not counted) past either bound."""
        if sum(self.open.values()) >= self.most or self.open.get(address, 0) >= self.per_address:
            return False
        self.open[address] = self.open.get(address, 0) + 1
        return True

    def leave(self, address: str) -> None:
        """An admitted connection has gone (or, for SSH, logged in)."""
        left = self.open.get(address, 0) - 1
        if left > 0:
            self.open[address] = left
        else:
            self.open.pop(address, None)
