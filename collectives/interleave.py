"""Running several algorithm generators as one, so one's computing overlaps another's messages.

A pipelined collective cuts its buffer into segments and runs one generator per segment on its
own tag. ``concurrently`` advances whichever segment has its messages, and polls the others'
requests between steps (MPI moves data only inside its calls), so while one segment is being
encoded or decoded the network carries the others. Engines whose requests complete only in a
blocking wait (gloo) wait for the segment that posted first.
"""

from __future__ import annotations

from .transport.base import Request, Steps


class AnyOf(Request):
    """Completes when any of its requests has (a wait that wakes for whichever comes first)."""

    def __init__(self, requests: list[Request]) -> None:
        super().__init__(requests[0].peer, requests[0].what, requests[0].owner)
        self.requests = requests
        self.blocking = any(r.blocking for r in requests)

    def test(self) -> bool:
        done = False
        for r in self.requests:  # test every one: each call drives the engine's progress
            done = r.test() or done
        return done

    def block(self, seconds: float) -> bool:
        return self.requests[0].block(seconds)


def concurrently(parts: list[Steps]) -> Steps:
    """One generator that runs ``parts`` to completion, interleaved.

    When no part can move, it waits for whichever has waited longest (the part whose
    requests were posted first). On engines that complete a request only inside a blocking
    wait (gloo) that is the order the messages arrive in: a part whose first messages went
    out when it started is taken up before the part that has just posted its second round,
    so one part's computing overlaps another's messages there too.
    """
    live: list[list] = []  # [generator, its pending requests, when they were posted]
    posted = 0

    def poll() -> None:
        for _, pending, _ in live:
            for r in pending:
                r.test()

    for gen in parts:  # start each (its first compute and sends), driving the others between
        try:
            live.append([gen, next(gen) or [], posted])
            posted += 1
        except StopIteration:
            pass
        poll()
    while live:
        moved = False
        for item in list(live):
            if all(r.test() for r in item[1]):
                try:
                    item[1], item[2] = next(item[0]) or [], posted
                    posted += 1
                except StopIteration:
                    live.remove(item)
                moved = True
                poll()
        if live and not moved:
            waiting = [r for _, pending, _ in sorted(live, key=lambda it: it[2])
                       for r in pending if not r.test()]
            if waiting:  # else one completed just now: go round again
                yield [AnyOf(waiting)]
