"""The console in a real headless browser (Debian's chromium through chromium-driver, selenium): two servo nodes and
the console on the worker's own network. The page lists both nodes; a register edited on the page is read back with
``y r``; a refused write shows the node's reason; holding the jog control moves one axis and its plot follows;
letting go stops it at rest by the servo's own deadman, and so does closing the tab while holding. The servo's
behaviour is judged from its own registers (``sys.status``, ``sys.motion``, ``sys.counters``), never from timing.

``CONSOLE_SCREENSHOT=docs/console.png`` keeps the page's screenshot, taken after the jog (the README shows it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.console import browser
from tests.console.rig import start_console, start_servos
from tests.procs import Processes, RegisterClient, base_env, wait_for, y

pytestmark = pytest.mark.skipif(browser.missing() is not None and not os.environ.get("CI"),
                                reason=f"{browser.missing()} (CI installs it: .ci/run)")
"""Skipped where no browser can be had (a developer without root); never in CI, which installs it."""

JOG_VELOCITY = 2.0


def _css(driver: Any, selector: str) -> Any:
    return driver.find_element("css selector", selector)


def _said(driver: Any) -> str:
    """What the page shows and counts now: its connection, register state line, message, node chosen, plotted
    boxes, and its frame statistics (for a failure's report)."""
    return str(driver.execute_script(
        "const q = (s) => document.querySelector(s); const st = window.consoleStats;"
        "return [q('#conn').textContent, q('#reg-state').textContent, q('#message').textContent, q('#reg-node').value,"
        " 'plotted ' + [...document.querySelectorAll('input.plot')].map((e) => e.closest('tr').id + '=' + e.checked),"
        " 'frames ' + st.frames + ' samples ' + st.samples + ' last ' + JSON.stringify(st.lastPosition),"
        " 'errors ' + JSON.stringify(st.errors)].join(' | ')"))


def _text(driver: Any, selector: str) -> str | None:
    """An element's text, read in one script call: the page replaces the bus table's rows as heartbeats come, and a
    reference held across two calls goes stale (StaleElementReferenceException)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e && e.offsetParent !== null ? e.innerText : null",
        selector)


def _stats(driver: Any) -> dict[str, Any]:
    return dict(driver.execute_script("return window.consoleStats"))


def _retried(action: Any, what: str) -> None:
    """Do ``action`` until the elements it touches are not replaced under it by the page's next update."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt() -> bool:
        try:
            action()
        except StaleElementReferenceException:
            return False
        return True

    wait_for(attempt, 30, 0.1, what)


def _hold(driver: Any, selector: str) -> None:
    """Press and keep holding the button at ``selector``, found again should the page replace its row meanwhile."""
    from selenium.webdriver import ActionChains

    def press() -> None:
        button = _css(driver, selector)
        ActionChains(driver).move_to_element(button).click_and_hold(button).perform()

    _retried(press, f"{selector} held")


def _type(driver: Any, selector: str, text: str) -> None:
    """Replace the text of the input at ``selector`` (one found element for both steps)."""
    field = _css(driver, selector)
    field.clear()
    field.send_keys(text)


def _tick(driver: Any, selector: str) -> None:
    """Tick the checkbox at ``selector`` until the page shows it ticked: a click lands where the box was when it was
    aimed, and the page may have moved it meanwhile (a bus table row or message line grown above it)."""

    def tick() -> bool:
        box = _css(driver, selector)
        if not box.is_selected():
            box.click()
        return bool(_css(driver, selector).is_selected())

    def attempt() -> bool:
        from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException

        try:
            return tick()
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False

    wait_for(attempt, 30, 0.2, f"{selector} ticked")


def _release(driver: Any) -> None:
    from selenium.webdriver import ActionChains

    ActionChains(driver).release().perform()


def _state(reader: RegisterClient) -> str:
    return str(reader.json("sys.status")["servo"]["state"])


def _stopped_by_deadman(reader: RegisterClient) -> bool:
    """The node's own verdict: its command expired (the deadman) and the joint is at rest, force removed."""
    status, motion = reader.json("sys.status"), reader.json("sys.motion")
    return bool(status["servo"]["state"] == "expired" and motion["meas"][1] == 0.0 and not motion.get("engaged"))


def _moves_while_held(driver: Any, reader: RegisterClient, key: str) -> float:
    """Hold the axis's forward jog until the node says it is engaged and the page's plot has moved forward by a
    tenth of a unit at least; returns the plotted position then."""
    start = _stats(driver)["lastPosition"][key]
    _hold(driver, f"#axis-{key} button.jog-fwd")
    try:
        wait_for(lambda: _state(reader) == "engaged", 30, what=f"axis {key} engaged by the hold")
    except AssertionError as ex:  # What the node and the page said, for the report.
        raise AssertionError(f"{ex}; node: {reader.read('sys.status')} {reader.read('sys.counters')} "
                             f"{reader.read('sys.last_rejection')}; page: {_css(driver, '#message').text} "
                             f"{_stats(driver)['errors']}") from None
    return float(wait_for(lambda: (p := _stats(driver)["lastPosition"][key]) > start + 0.1 and p, 30,
                          what=f"the plot of axis {key} to move forward"))


def test_the_page_lists_edits_and_jogs_the_servos(tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import Select

    with Processes() as group:
        start_servos(group, tmp_path)
        console = start_console(group, tmp_path, "--allow-motion")
        r21, r22 = (RegisterClient(base_env(), n, client_node_id=c) for n, c in ((21, 96), (22, 97)))
        try:
            with browser.chromium() as driver:
                driver.get(console.url)
                # The bus: both nodes, both servo axes.
                wait_for(lambda: len(driver.find_elements("css selector", "#axes tbody tr")) == 2, 60,
                         what="both servo axes on the page")
                wait_for(lambda: all(_text(driver, f"#node-{n}") for n in (21, 22)), 30, what="both nodes shown")
                assert "servo_node" in (_text(driver, "#node-21") or "")

                # A register edited on the page, read back with yakut.
                _retried(lambda: Select(_css(driver, "#reg-node")).select_by_value("21"), "node 21 chosen")
                _css(driver, "#reg-filter").send_keys("servo.profile")
                _css(driver, "#reg-load").click()
                row = '[id="reg-21-servo.profile.jerk"]'
                try:
                    wait_for(lambda: driver.find_elements("css selector", row), 120, what="the register table")
                except AssertionError as ex:  # What the page said by then (its state line, its message).
                    raise AssertionError(f"{ex}; the page: {_said(driver)}") from None
                _retried(lambda: _type(driver, f"{row} input.value", "123"), "123 typed")
                _retried(lambda: _css(driver, f"{row} button.write").click(), "write clicked")
                wait_for(lambda: _css(driver, f"{row} .reason").text == "written", 30, what="the write's verdict")
                assert float(y("r", "21", "servo.profile.jerk").split()[-1].strip("[]")) == 123.0

                # A refused write shows the node's own reason; the old value stays.
                _retried(lambda: _type(driver, f"{row} input.value", "-5"), "-5 typed")
                _retried(lambda: _css(driver, f"{row} button.write").click(), "write clicked")
                wait_for(lambda: _css(driver, f"{row} .reason").text.startswith("refused"), 30, what="the refusal")
                reason = _text(driver, f"{row} .reason") or ""
                assert "servo.profile.jerk" in reason and "> 0" in reason, reason  # The node's diagnostic.
                assert float(y("r", "21", "servo.profile.jerk").split()[-1].strip("[]")) == 123.0
                assert r21.json("sys.counters")["refused_writes"] >= 1

                # Plot both axes; hold-to-move jogs axis 21 only, and its plot follows.
                for key in ("21", "22"):
                    _tick(driver, f"#axis-{key} input.plot")
                try:
                    wait_for(lambda: {"21", "22"} <= set(_stats(driver)["lastPosition"]), 60, what="both axes plotted")
                except AssertionError as ex:
                    raise AssertionError(f"{ex}; the page: {_said(driver)}") from None
                _retried(lambda: _type(driver, "#axis-21 input.speed", str(JOG_VELOCITY)), "jog speed typed")
                p22 = r22.json("sys.motion")["meas"][0]
                plotted = _moves_while_held(driver, r21, "21")
                assert r21.json("sys.motion")["meas"][0] > 0.1
                assert _state(r22) == "standby" and r22.json("sys.motion")["meas"][0] == p22
                shot = tmp_path / "console.png"
                driver.save_screenshot(str(shot))
                _release(driver)
                wait_for(lambda: _stopped_by_deadman(r21), 30, what="axis 21 stopped at rest by its deadman")
                accepted = r21.json("sys.counters")["accepted"]
                stopped_at = r21.json("sys.motion")["meas"][0]
                assert stopped_at >= plotted
                wait_for(lambda: _stats(driver)["lastPosition"]["21"] == pytest.approx(stopped_at, abs=1e-4), 30,
                         what="the plot to show the axis where it stopped")
                assert r21.json("sys.counters")["accepted"] == accepted  # Nothing published since the release.
                if os.environ.get("CONSOLE_SCREENSHOT"):
                    shutil.copyfile(shot, os.environ["CONSOLE_SCREENSHOT"])

                # A closed tab while holding: the hold ends with the page, the deadman stops the axis.
                first = driver.current_window_handle
                driver.switch_to.new_window("tab")
                driver.get(console.url)
                wait_for(lambda: len(driver.find_elements("css selector", "#axes tbody tr")) == 2, 60,
                         what="the axes on the second tab")
                _tick(driver, "#axis-22 input.plot")
                wait_for(lambda: "22" in _stats(driver)["lastPosition"], 60, what="axis 22 plotted")
                _moves_while_held(driver, r22, "22")
                driver.close()  # The tab goes, the mouse button still down.
                driver.switch_to.window(first)
                wait_for(lambda: _stopped_by_deadman(r22), 30, what="axis 22 stopped at rest by its deadman")
                accepted = r22.json("sys.counters")["accepted"]
                assert accepted > 0 and r22.json("sys.motion")["meas"][0] > 0.1
                wait_for(lambda: _stopped_by_deadman(r22), 5, what="axis 22 still at rest")
                assert r22.json("sys.counters")["accepted"] == accepted
        finally:
            r21.close()
            r22.close()
