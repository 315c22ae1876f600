"""Workbench: the RL engine (config, tasks, environments, verifiers, rollouts, GRPO, SFT, eval, trainer).

It runs headless and never imports the UI (`screens`); it persists everything through `store`.
"""

__version__ = "0.1.0"
