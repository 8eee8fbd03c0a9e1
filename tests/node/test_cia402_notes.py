"""What a CiA 402 drive tells the diagnostics costs the same whatever a stranger sends (``cia402/_notes.py``): a
tally says the first occurrence in full, then one summary per interval however many came."""

from __future__ import annotations

from servo_node.drive.cia402._notes import SUMMARY_PERIOD_S, Notes, Tally


def test_a_flood_is_the_first_then_one_summary_per_interval() -> None:
    tally = Tally("drive 5: ", "EMCY", lambda code: f"EMCY 0x{code:04X}")
    lines = []
    t = 100.0
    for k in range(8000):  # 2,000 a second for 4 s, the supervision looking every 10 ms.
        tally.hit(0x1000 + k)
        if k % 20 == 0:
            t += 0.01
            line = tally.take(t)
            if line is not None:
                lines.append(line)
    t += SUMMARY_PERIOD_S
    last = tally.take(t)
    assert last is not None
    lines.append(last)
    assert len(lines) <= 4.0 / SUMMARY_PERIOD_S + 2, lines
    assert lines[0] == "drive 5: EMCY 0x1000", lines[0]  # The first, alone at its first look.
    assert "(total 8000)" in lines[-1] and "the last EMCY 0x2F3F" in lines[-1], lines[-1]
    assert tally.take(t + 10 * SUMMARY_PERIOD_S) is None  # Nothing new: nothing said.


def test_a_lone_event_after_quiet_is_said_in_full() -> None:
    tally = Tally("drive 5: ", "EMCY", lambda code: f"EMCY 0x{code:04X}")
    tally.hit(0x2310)
    assert tally.take(10.0) == "drive 5: EMCY 0x2310"
    tally.hit(0x8130)
    assert tally.take(10.5) is None  # Within the interval: kept…
    assert tally.take(11.0) == "drive 5: EMCY 0x8130"  # …and said once it is over.


def test_steps_are_said_once_each_and_bounded() -> None:
    notes = Notes()
    for k in range(1000):
        notes.step(f"step {k}")
    taken = notes.take()
    assert len(taken) <= 64 and taken[-1] == "step 999"
    assert notes.take() == []
