"""The room: which GPU each person's server gets, for a JupyterHub spawner hook.

``assign_device`` is what the instructor guide's ``pre_spawn_hook`` calls (notebooks/README.md,
*Room set-up*). It gives a seat to each instructor and each learner on the roster, and a GPU
(an index, a ``GPU-`` UUID or a ``MIG-`` slice) to each seat:

- **The instructor is admitted.** Instructors take the first seats, learners follow in roster
  order; someone on neither list is refused, by name, with what is allowed.
- **No silent doubling.** Two people on one GPU measure each other: every burst of one is
  slowed by the other's, and neither can tell. More people than ``GPUs x learners_per_gpu`` is
  refused unless ``learners_per_gpu`` says that sharing is meant; the same GPU listed twice is
  refused as well, since it would double two people up as quietly.
- **Deterministic.** The same lists give the same person the same GPU, at every spawn and
  restart; seats are spread over the GPUs (seat i gets GPU i mod n), so sharing, when
  allowed, is as even as it can be. Append late learners at the end of the roster: the others
  keep their GPUs.

The refusals never list the roster: the message reaches whoever tried to log in, and a
stranger has no business reading the class list. This module imports nothing beyond the
standard library and ``workbench.core.errors``, so a hub without torch can import it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from workbench.core.errors import InputError

__all__ = ["RoomError", "assign_device", "seats"]

_DEVICE = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-[\w/-]+)$")
"""A GPU as Docker's ``device_ids``, Kubernetes and CUDA_VISIBLE_DEVICES take one: an index,
``GPU-<uuid>``, or a MIG slice, ``MIG-<uuid>`` (``MIG-GPU-<uuid>/<gi>/<ci>`` on drivers before
R470), all as ``nvidia-smi -L`` prints them."""


class RoomError(InputError):
    """The room's set-up refuses this spawn: someone not on the lists, or more people than
    seats. An ``InputError``: the configuration is what to correct."""

    @classmethod
    def refuse(cls, name: str, value: object, allowed: str) -> RoomError:
        """``name=value is not allowed: allowed``, as every named refusal reads."""
        return cls(f"{name}={value!r} is not allowed: {allowed}", name=name, value=value,
                   allowed=allowed)  # fmt: skip


def seats(roster: Sequence[str], instructors: Sequence[str]) -> list[str]:
    """Everyone with a seat, in seat order: instructors first, then the roster; each person
    once (an instructor on the roster keeps the instructor's seat)."""
    out: list[str] = []
    for name in (*instructors, *roster):
        if name not in out:
            out.append(name)
    return out


def assign_device(
    user: str,
    roster: Sequence[str],
    instructors: Sequence[str],
    gpus: Sequence[str],
    learners_per_gpu: int = 1,
) -> str:
    """The GPU for ``user``'s server: one of ``gpus``, the same for the same lists every time.

    ``learners_per_gpu`` (default 1) is how many people may share one GPU: above 1, only when
    the room means it (each then measures the other too). Raises ``RoomError`` naming the user
    and what is allowed when the user is on neither list, when the room has more people than
    ``len(gpus) * learners_per_gpu``, or when the GPUs are not a list of distinct devices.
    """
    _check_gpus(gpus)
    _check_share(learners_per_gpu)
    teachers = seats([], _names("instructors", instructors))
    everyone = seats(_names("roster", roster), teachers)
    if user not in everyone:
        raise RoomError(
            f"user {user!r} has no seat in this room: only the {len(teachers)} "
            f"instructor(s) and the {len(everyone) - len(teachers)} learner(s) on the roster "
            f"get a GPU; add {user!r} to ROSTER (or INSTRUCTORS) in jupyterhub_config.py"
        )
    capacity = len(gpus) * learners_per_gpu
    if len(everyone) > capacity:
        raise RoomError(
            f"user {user!r}: the room has {len(everyone)} people ({len(teachers)} "
            f"instructor(s), {len(everyone) - len(teachers)} learner(s)) for {len(gpus)} "
            f"GPU(s) x learners_per_gpu={learners_per_gpu} = {capacity} seat(s); add GPUs or "
            f"MIG slices, or set learners_per_gpu={-(-len(everyone) // len(gpus))} to let "
            "people share a GPU (each then measures the other's bursts too)"
        )
    return gpus[everyone.index(user) % len(gpus)]


def _names(what: str, names: Sequence[str]) -> list[str]:
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise RoomError.refuse(what, names, "a list of user names (non-empty strings)")
    return list(names)


def _check_gpus(gpus: Sequence[str]) -> None:
    if isinstance(gpus, str) or not gpus:
        raise RoomError.refuse("gpus", gpus, "a non-empty list of GPUs, e.g. ['0', '1']")
    bad = [g for g in gpus if not isinstance(g, str) or not _DEVICE.match(g)]
    if bad:
        raise RoomError.refuse(
            "gpus", bad, "GPU indices ('0'), UUIDs ('GPU-...') or MIG slices ('MIG-...') as "
            "strings, as `nvidia-smi -L` lists them"
        )  # fmt: skip
    twice = sorted({g for g in gpus if list(gpus).count(g) > 1})
    if twice:
        raise RoomError.refuse(
            "gpus", twice, "each GPU once: a GPU listed twice puts two people on it "
            "(use learners_per_gpu to share on purpose)"
        )  # fmt: skip


def _check_share(learners_per_gpu: int) -> None:
    if isinstance(learners_per_gpu, bool) or not isinstance(learners_per_gpu, int) or \
            learners_per_gpu < 1:  # fmt: skip
        raise RoomError.refuse(
            "learners_per_gpu", learners_per_gpu, "an integer >= 1 (1: a GPU each)"
        )
