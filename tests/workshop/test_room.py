"""Tests for workbench.workshop.room: the spawner hook's GPU for each person (the instructor
admitted, no silent doubling, the same GPU every time), and that a hub without torch can import
it."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from workbench.core.errors import InputError
from workbench.workshop.room import RoomError, assign_device, seats

GPUS = ["0", "1", "2", "3"]
ROSTER = ["alice", "bob", "chen"]
TEACHER = ["ines"]


def test_the_instructor_gets_a_gpu_and_the_first_seat() -> None:
    """The guide's old hook raised for anyone not on the roster, the instructor included."""
    assert assign_device("ines", ROSTER, TEACHER, GPUS) == "0"
    assert [assign_device(u, ROSTER, TEACHER, GPUS) for u in ROSTER] == ["1", "2", "3"]


def test_everyone_gets_a_gpu_of_their_own() -> None:
    got = [assign_device(u, ROSTER, TEACHER, GPUS) for u in seats(ROSTER, TEACHER)]
    assert sorted(got) == sorted(GPUS) and len(set(got)) == len(got)


def test_the_same_user_always_gets_the_same_gpu_and_late_learners_move_nobody() -> None:
    first = {u: assign_device(u, ROSTER, TEACHER, [*GPUS, "4"]) for u in ROSTER + TEACHER}
    again = {u: assign_device(u, ROSTER, TEACHER, [*GPUS, "4"]) for u in ROSTER + TEACHER}
    assert first == again
    later = [*ROSTER, "dara"]  # appended on the day
    assert {u: assign_device(u, later, TEACHER, [*GPUS, "4"]) for u in ROSTER + TEACHER} == first


def test_someone_on_neither_list_is_refused_by_name_without_the_class_list() -> None:
    with pytest.raises(RoomError) as err:
        assign_device("mallory", ROSTER, TEACHER, GPUS)
    message = str(err.value)
    assert "'mallory'" in message and "1 instructor(s) and the 3 learner(s)" in message
    assert "ROSTER" in message and "INSTRUCTORS" in message
    assert not any(name in message for name in ROSTER + TEACHER)  # no names to a stranger
    assert isinstance(err.value, InputError)


def test_more_people_than_gpus_is_refused_for_everyone_with_the_numbers() -> None:
    roster = [*ROSTER, "dara"]  # 5 people, 4 GPUs: the old hook put two on GPU 0 silently
    for user in ["ines", "dara"]:
        said = rf"user '{user}': the room has 5 people \(1 instructor\(s\), 4 learner\(s\)\) for 4"
        with pytest.raises(RoomError, match=said):
            assign_device(user, roster, TEACHER, GPUS)
    with pytest.raises(RoomError, match="set learners_per_gpu=2"):
        assign_device("ines", roster, TEACHER, GPUS)


def test_sharing_on_purpose_is_spread_evenly() -> None:
    roster = [f"learner{i:02d}" for i in range(13)]
    got = [assign_device(u, roster, TEACHER, GPUS, learners_per_gpu=4) for u in
           seats(roster, TEACHER)]  # fmt: skip
    assert Counter(got) == {"0": 4, "1": 4, "2": 3, "3": 3}  # 14 people on 4 GPUs
    with pytest.raises(RoomError, match="= 12 seat"):
        assign_device("ines", roster, TEACHER, GPUS, learners_per_gpu=3)


def test_an_instructor_on_the_roster_takes_one_seat() -> None:
    assert seats(["alice", "ines"], ["ines"]) == ["ines", "alice"]
    assert assign_device("ines", ["alice", "ines"], ["ines"], ["0", "1"]) == "0"
    assert assign_device("alice", ["alice", "ines"], ["ines"], ["0", "1"]) == "1"


@pytest.mark.parametrize(
    "gpu",
    ["0", "GPU-5a1c0e7d-0000-4000-8000-00000000a100", "MIG-0f1e2d3c-4b5a-5968-8776-65544332a211",
     "MIG-GPU-6482a92e-d06b-dc68-c272-e3d8f7ecabbf/7/0"],
)  # fmt: skip
def test_gpus_as_nvidia_smi_lists_them(gpu: str) -> None:
    assert assign_device("ines", [], TEACHER, [gpu]) == gpu


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"gpus": []}, "gpus=[]"),
        ({"gpus": "0123"}, "gpus='0123'"),
        ({"gpus": [0, 1]}, "gpus=[0, 1]"),
        ({"gpus": ["cuda:0"]}, "gpus=['cuda:0']"),
        ({"gpus": ["0", "1", "0"]}, "gpus=['0'] is not allowed: each GPU once"),
        ({"learners_per_gpu": 0}, "learners_per_gpu=0"),
        ({"learners_per_gpu": 1.5}, "learners_per_gpu=1.5"),
        ({"learners_per_gpu": True}, "learners_per_gpu=True"),
        ({"roster": "alice"}, "roster='alice'"),
        ({"instructors": [""]}, "instructors=['']"),
    ],
)
def test_bad_lists_are_refused_naming_the_field(kwargs: dict, named: str) -> None:
    args = {"roster": ROSTER, "instructors": TEACHER, "gpus": GPUS, **kwargs}
    with pytest.raises(RoomError) as err:
        assign_device("ines", **args)
    assert named in str(err.value) and "is not allowed" in str(err.value)


def test_a_hub_without_torch_can_import_it() -> None:
    """The guide installs the package into the hub's environment with --no-deps: importing the
    hook must need nothing beyond the standard library."""
    code = (
        "import sys; before = set(sys.modules); "
        "from workbench.workshop.room import assign_device; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
        "- set(sys.stdlib_module_names)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['workbench']"
