"""A training run's protocol with the store, written once for every driver (the worker, the TRL callback):

- `commands`: the one table of commands (name, payload type and its checks, where each may be obeyed, which
  drivers obey it, its key in the UI). The store, the UI's actions, keys, palette and help read it.
- `session`: `RunSession`, the run's lock and heartbeat, its status writes, the crash reason, the release.
- `loop`: `CommandLoop`, claim -> obey -> answer, the pause loop, dispatch by the table.

Torch-free (an import-linter contract holds it): the view layer reads `commands`. Nothing is imported here
so that reading the table never loads the session's store code, nor the other way round.
"""
