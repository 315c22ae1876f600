"""Command palette entries that follow the run's state (Resume only when paused, Start worker only when
none is alive...). The list itself comes from WorkbenchApp.palette_commands()."""

from __future__ import annotations

from textual.command import DiscoveryHit, Hit, Hits, Provider


class WorkbenchCommands(Provider):
    def _entries(self) -> list:
        entries = getattr(self.app, "palette_commands", None)
        return entries() if entries else []

    async def discover(self) -> Hits:
        for name, help_text, callback in self._entries():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._entries():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
