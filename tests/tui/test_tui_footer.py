"""The key footer is rebuilt when the keys it shows change, and only then (screens/widgets/footer.py)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from screens.widgets.footer import KeyFooter


class Modal(ModalScreen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        yield Static("modal")


class Main(Screen):
    BINDINGS = [Binding("p", "pause", "pause"), Binding("r", "resume", "resume")]
    paused = False

    def compose(self) -> ComposeResult:
        yield Static("main", id="body")
        yield KeyFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pause":  # None: shown, greyed out
            return None if self.paused else True
        if action == "resume":
            return True if self.paused else None
        return True


class Demo(App[None]):
    def on_mount(self) -> None:
        self.push_screen(Main())


def keys(screen: Screen) -> dict[str, FooterKey]:
    return {k.key: k for k in screen.query(FooterKey)}


def greyed(screen: Screen, key: str) -> bool:
    return keys(screen)[key].has_class("-disabled")


async def test_closing_a_modal_keeps_the_footer_widgets() -> None:
    app = Demo()
    async with app.run_test() as pilot:
        await pilot.pause()
        main = app.screen
        before = keys(main)
        assert {"p", "r"} <= set(before)
        await app.push_screen(Modal())
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is main
        after = keys(main)
        assert all(after[k] is before[k] for k in before), (
            "the footer was rebuilt though its keys did not change"
        )


async def test_the_footer_follows_a_key_that_turns_on_or_off() -> None:
    app = Demo()
    async with app.run_test() as pilot:
        await pilot.pause()
        main = app.screen
        assert not greyed(main, "p") and greyed(main, "r")
        main.paused = True
        main.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert greyed(main, "p") and not greyed(main, "r")
