"""The waiting queue of each scheduling policy, as vLLM v1's (vllm/v1/core/sched/request_queue.py).

`fcfs`: arrival order; a preempted request goes back to the front.
`priority`: ordered by (priority, arrival_time, request_id), lower first, as
vLLM's `Request.__lt__`; "prepending" a preempted request just re-inserts it
at its place in that order (vLLM's `PriorityRequestQueue.prepend_request`).

Both are read the same way: `queue[0]` is the head, iteration goes in queue
order, `len()` counts the requests.
"""

from __future__ import annotations

from collections import deque

from sortedcontainers import SortedKeyList

from pagesim.request import Request


class FCFSRequestQueue(deque):
    # deque's own methods under the queue's names (no Python call of a wrapper per request)
    add_request = deque.append  # (request) -> None
    pop_request = deque.popleft  # () -> Request
    prepend_request = deque.appendleft  # (request) -> None


def priority_key(request: Request) -> tuple[int, float, str]:
    """vLLM's order under policy priority: lower priority value first, then earlier arrival, then request id."""
    return (request.priority, request.arrival_time, request.request_id)


class PriorityRequestQueue(SortedKeyList):
    def __init__(self):
        super().__init__(key=priority_key)

    def add_request(self, request: Request) -> None:
        self.add(request)

    def pop_request(self) -> Request:
        return self.pop(0)

    prepend_request = add_request


def create_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    return PriorityRequestQueue() if policy == "priority" else FCFSRequestQueue()
