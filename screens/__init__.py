"""Workbench's Textual UI. It reads the store and writes only commands, verifier versions, labels and
notes; the engine (`workbench`) never imports it. Entry point: `screens.app.run_tui(db_path, run_id)`."""
