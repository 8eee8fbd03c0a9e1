"""The puzzle: the paper's iterative Tower of Hanoi rule and the stacks that refuse an illegal move. Pure logic.

The iterative rule (2^N − 1 moves, from A to C): on odd moves the smallest box steps one platform along a fixed
cycle — A → C → B → A for an odd N, A → B → C → A for an even N — and on even moves the only legal move that does
not touch the smallest box is made between the two other platforms.
"""

from __future__ import annotations

PLATFORMS = ("A", "B", "C")


class IllegalMoveError(RuntimeError):
    """A move from an empty platform, or of a larger box onto a smaller one."""


class Stacks:
    """Boxes on the three platforms, bottom first; box 0 is the smallest. Every change is checked."""

    def __init__(self, boxes: int) -> None:
        if boxes < 1:
            raise ValueError(f"at least one box, got {boxes}")
        self.boxes = boxes
        self.pegs: list[list[int]] = [list(range(boxes - 1, -1, -1)), [], []]

    def top(self, peg: int) -> int | None:
        """The box on top of ``peg`` (None: empty)."""
        return self.pegs[peg][-1] if self.pegs[peg] else None

    def check(self, src: int, dst: int) -> int:
        """The box a move from ``src`` to ``dst`` would carry; :raises IllegalMoveError: if it is not legal."""
        if src == dst:
            raise IllegalMoveError(f"a move from {PLATFORMS[src]} onto itself")
        box = self.top(src)
        if box is None:
            raise IllegalMoveError(f"platform {PLATFORMS[src]} is empty")
        under = self.top(dst)
        if under is not None and under < box:
            raise IllegalMoveError(f"box {box} onto the smaller box {under} on {PLATFORMS[dst]}")
        return box

    def move(self, src: int, dst: int) -> int:
        """Move the top box of ``src`` onto ``dst`` (checked); returns the box."""
        box = self.check(src, dst)
        self.pegs[dst].append(self.pegs[src].pop())
        return box

    def legal(self) -> bool:
        """Every platform holds its boxes largest at the bottom, and every box is on exactly one platform."""
        every = sorted(b for peg in self.pegs for b in peg)
        return every == list(range(self.boxes)) and all(peg == sorted(peg, reverse=True) for peg in self.pegs)

    def solved(self) -> bool:
        """All boxes on C."""
        return len(self.pegs[2]) == self.boxes and self.legal()


def iterative_moves(boxes: int) -> list[tuple[int, int]]:
    """The 2^N − 1 moves (source, destination platform index) of the iterative rule, from A to C."""
    stacks = Stacks(boxes)
    cycle = (0, 2, 1) if boxes % 2 else (0, 1, 2)  # The smallest box's platforms in order.
    step = {cycle[k]: cycle[(k + 1) % 3] for k in range(3)}
    small_at = 0
    moves: list[tuple[int, int]] = []
    for k in range(2**boxes - 1):
        if k % 2 == 0:
            src, dst = small_at, step[small_at]
            small_at = dst
        else:
            a, b = (p for p in range(3) if p != small_at)
            ta, tb = stacks.top(a), stacks.top(b)
            src, dst = (a, b) if tb is None or (ta is not None and ta < tb) else (b, a)
        stacks.move(src, dst)
        moves.append((src, dst))
    return moves
