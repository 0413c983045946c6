"""Small objects between ranks as JSON, never as pickles.

``torch.distributed.gather_object`` and ``all_gather_object`` pickle what they send and unpickle
what they receive: whatever reaches a rank's socket (a peer, or someone who redirected the
group's connections through the unauthenticated store) would run in it. The ranks exchange
only numbers, text and lists (their rows, their node), so JSON carries all of it: a
malformed or hostile message is a failed job, never code.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist


def all_gather_json(obj: Any, group: Any = None) -> list[Any]:
    """Every rank's ``obj`` (JSON-able; tuples come back as lists), in rank order."""
    data = json.dumps(obj).encode()
    world = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    parts = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(parts, mine, group=group)
    lengths = [int(n.item()) for n in sizes]
    return [json.loads(p[:n].numpy().tobytes()) for p, n in zip(parts, lengths, strict=True)]


def gather_json(obj: Any, dst: int = 0, group: Any = None) -> list[Any] | None:
    """Every rank's ``obj`` on rank ``dst`` (its rank in ``group``), None elsewhere."""
    gathered = all_gather_json(obj, group)
    return gathered if dist.get_rank(group) == dst else None
