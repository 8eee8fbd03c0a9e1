"""The Tower of Hanoi with a five-joint arm of ``servo-node`` processes (after the Webots paper's example).

``python -m examples.hanoi --boxes 3`` (or ``make hanoi``): plan every move (:mod:`.tower`, :mod:`.cell`,
:mod:`.kinematics`), start the five joint nodes (:mod:`.joints`), execute and verify each move as coordinated
motions (:mod:`.run`), and draw the run (:mod:`.figure`). ``docs/hanoi.md`` describes the arm and the cell.
"""
