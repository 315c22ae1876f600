"""The one table of commands a run obeys: what each is called, what its payload holds and which values it
accepts, where in a step it may be obeyed, which drivers obey it, and its key in the UI.

Everything else reads this table: the store refuses kinds not in it (`store.commands.KINDS`, a plain copy of
`NAMES` that a test holds equal, since the store may not import the engine), `View.enqueue` and the UI's
prompts check payloads with it before a row is written, `CommandLoop` dispatches by it and checks the payload
again when a command is claimed (a row written by another tool), and `workbench.view.run_state.ACTIONS` (the
UI's keys, footer, palette and help) is built from it. Torch-free: the UI process reads it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.errors import InputError

DRIVERS = ("worker", "trl")  # workbench.worker (our trainer) and workbench.integrations.trl (TRL's callback)
Driver = Literal["worker", "trl"]


class PayloadError(InputError, ValueError):
    """A command's payload is missing a value or holds one outside its valid range (the message names it)."""


@dataclass(frozen=True)
class Range:
    """The values a numeric payload field accepts. NaN and infinities never pass; a bool is not a number."""

    lo: float
    hi: float = math.inf
    lo_open: bool = False  # lo itself is refused (a learning rate or temperature of 0)
    integer: bool = False

    def describe(self, name: str) -> str:
        num = (lambda x: str(int(x))) if self.integer else (lambda x: f"{x:g}")
        text = f"{num(self.lo)} {'<' if self.lo_open else '<='} {name}"
        return text if math.isinf(self.hi) else f"{text} <= {num(self.hi)}"

    def check(self, kind: str, name: str, value: Any) -> float | int:
        """The value as a number, or PayloadError naming the valid range. Text is read as a number (the UI's
        prompt, a hand-written row)."""
        x: float | int | None = None
        if isinstance(value, str):
            try:
                x = int(value.strip()) if self.integer else float(value.strip())
            except ValueError:
                x = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            x = value
        ok = (
            x is not None
            and math.isfinite(x)
            and self.lo <= x <= self.hi
            and not (self.lo_open and x == self.lo)
        )
        if ok and self.integer and x != int(x):  # type: ignore[arg-type]
            ok = False
        if not ok:
            what = "an integer" if self.integer else "a number"
            raise PayloadError(f"{kind}: {name} must be {what} with {self.describe(name)} (got {value!r})")
        return int(x) if self.integer else float(x)  # type: ignore[arg-type]


def _field(rng: Range, default: Any = dataclasses.MISSING) -> Any:
    return field(default=default, metadata={"range": rng})


# Bounds wide enough for any sane run, narrow enough to refuse a typo by orders of magnitude (an lr of 5
# flips a LoRA adapter's sign within a step; a temperature of 0 divides by zero in the sampler).
LR_RANGE = Range(0.0, 1.0, lo_open=True)
TEMPERATURE_RANGE = Range(0.0, 10.0, lo_open=True)
ID_RANGE = Range(1, integer=True)
SAMPLE_N_RANGE = Range(1, 64, integer=True)  # completions a probe asks for (the UI sends 8)


@dataclass(frozen=True)
class StepSetting:
    """A payload of one number that the worker sets on the trainer at a step boundary: the field's name is
    the trainer attribute (`lr`, `temperature`)."""

    @property
    def name(self) -> str:
        return dataclasses.fields(self)[0].name

    @property
    def value(self) -> float:
        return float(getattr(self, self.name))


@dataclass(frozen=True)
class SetLr(StepSetting):
    lr: float = _field(LR_RANGE)


@dataclass(frozen=True)
class SetTemperature(StepSetting):
    temperature: float = _field(TEMPERATURE_RANGE)


@dataclass(frozen=True)
class SetVerifier:
    verifier_id: int = _field(ID_RANGE)


@dataclass(frozen=True)
class Sample:
    task_id: int = _field(ID_RANGE)
    n: int = _field(SAMPLE_N_RANGE, 4)


@dataclass(frozen=True)
class CommandSpec:
    """One command. `mid_phase`: obeyed at the inner safe points too (every few tokens of decoding, per layer
    in SFT and the update); the others are claimed there but answered at the next outer safe point (after a
    rollout group, before the update, after a step), except while paused, when everything runs at once but
    in the phases of `never_while_paused_in`. `next_step`: it changes how a step is taken, so it takes
    effect at a step boundary only. `unsupported`: (driver, why) pairs; the driver answers with the why."""

    name: str
    key: str  # its key in the UI; "" when it is reached through the command palette only
    payload: type | None = None
    mid_phase: bool = False
    never_while_paused_in: tuple[str, ...] = ()
    next_step: bool = False
    unsupported: tuple[tuple[Driver, str], ...] = ()

    def refusal(self, driver: str) -> str | None:
        """Why `driver` does not obey this command (None: it does)."""
        return dict(self.unsupported).get(driver)  # type: ignore[arg-type]

    def may_run(self, where: str, *, outer: bool, paused: bool) -> bool:
        """Whether it may be obeyed at safe point `where` (`outer`: a safe point between a step's parts)."""
        if outer or self.mid_phase:
            return True
        return paused and where not in self.never_while_paused_in

    def parse(self, payload: Mapping[str, Any] | None) -> Any:
        """The typed payload (None for a command without one; its row's payload is then ignored, e.g. the
        launcher's `{"by": ...}` note on a stop), or PayloadError. Keys the type does not name are ignored."""
        if self.payload is None:
            return None
        raw = payload or {}
        if not isinstance(raw, Mapping):
            raise PayloadError(f"{self.name}: the payload must be an object, got {type(raw).__name__}")
        values = {}
        for f in dataclasses.fields(self.payload):
            rng: Range = f.metadata["range"]
            if f.name in raw:
                values[f.name] = rng.check(self.name, f.name, raw[f.name])
            elif f.default is dataclasses.MISSING:
                raise PayloadError(f"{self.name} needs {f.name} ({rng.describe(f.name)})")
        return self.payload(**values)

    @property
    def value_field(self) -> str | None:
        """The payload's one required field when there is one (what a UI prompt asks for), else None."""
        if self.payload is None:
            return None
        required = [f.name for f in dataclasses.fields(self.payload) if f.default is dataclasses.MISSING]
        return required[0] if len(required) == 1 else None

    def from_text(self, text: str) -> dict[str, Any]:
        """A prompt's answer as this command's payload dict, checked (PayloadError names the valid range)."""
        name = self.value_field
        if name is None:
            raise ValueError(f"{self.name} does not take one value")
        return payload_dict(self.parse({name: text}))

    def describe(self) -> str:
        """The valid values of the payload's fields, for a prompt's hint."""
        if self.payload is None:
            return ""
        return ", ".join(f.metadata["range"].describe(f.name) for f in dataclasses.fields(self.payload))


# In the order the UI lists them (the palette, the help screen).
COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("pause", "p", mid_phase=True),
    CommandSpec("resume", "r", mid_phase=True),
    # A checkpoint taken inside the update could hold weights between two of its optimizer steps.
    CommandSpec("checkpoint", "c", never_while_paused_in=("update",)),
    CommandSpec(
        "eval",
        "e",
        unsupported=(("trl", "TRL owns evaluation: set eval_strategy / eval_steps in GRPOConfig"),),
    ),
    CommandSpec("set_lr", "", SetLr, mid_phase=True, next_step=True),
    CommandSpec(
        "set_temperature",
        "",
        SetTemperature,
        mid_phase=True,
        next_step=True,
        unsupported=(("trl", "TRL owns sampling: the temperature is fixed by GRPOConfig for the whole run"),),
    ),
    CommandSpec(
        "sample",
        "",
        Sample,
        unsupported=(("trl", "TRL owns generation: probes are not available on a TRL run"),),
    ),
    CommandSpec("set_verifier", "ctrl+a", SetVerifier, mid_phase=True, next_step=True),
    CommandSpec("stop", "s", mid_phase=True),  # the worker checkpoints the last completed step on its way out
)
COMMAND_BY_NAME: dict[str, CommandSpec] = {c.name: c for c in COMMANDS}
NAMES: tuple[str, ...] = tuple(c.name for c in COMMANDS)


def command_spec(kind: str) -> CommandSpec:
    spec = COMMAND_BY_NAME.get(kind)
    if spec is None:
        raise PayloadError(f"unknown command {kind!r}; one of {NAMES}")
    return spec


def check_command(kind: str, payload: Mapping[str, Any] | None) -> Any:
    """The typed payload of command `kind`, or PayloadError (an unknown kind, a missing or bad value)."""
    return command_spec(kind).parse(payload)


def payload_dict(payload: Any) -> dict[str, Any]:
    """A typed payload as the JSON object stored in the command's row."""
    return dataclasses.asdict(payload)


def supported(driver: str) -> tuple[CommandSpec, ...]:
    """The commands `driver` obeys."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}; one of {DRIVERS}")
    return tuple(c for c in COMMANDS if c.refusal(driver) is None)
