"""The environment around a burst: which variables are recorded, which a knob replaces, which
keep a knob from acting, and which make a GPU burst's numbers suspect."""

from workbench.core import ambient
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult

ENV = {
    "NCCL_ALGO": "Tree",
    "NCCL_SOCKET_IFNAME": "eth0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "4",
    "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
    "TORCH_NCCL_BLOCKING_WAIT": "1",
    "HOME": "/home/someone",
    "WORKBENCH_HOME": "/tmp/wb",
    "PATH": "/usr/bin",
}


def test_only_variables_that_shape_a_burst_are_recorded_sorted():
    got = ambient.ambient_env(ENV, Knobs())
    assert list(got) == sorted(got)
    assert set(got) == {"NCCL_ALGO", "NCCL_SOCKET_IFNAME", "PYTORCH_CUDA_ALLOC_CONF",
                        "OMP_NUM_THREADS", "TORCHINDUCTOR_MAX_AUTOTUNE",
                        "TORCH_NCCL_BLOCKING_WAIT"}  # fmt: skip
    assert ambient.rule_for("TORCH_NCCL_BLOCKING_WAIT").acts_on == "nccl"  # longest prefix


def test_a_variable_a_knob_sets_is_not_ambient_and_its_replacement_is_said_once():
    knobs = Knobs(nccl={"NCCL_ALGO": "Ring"}, alloc_conf="expandable_segments:False")
    got = ambient.ambient_env(ENV, knobs)
    assert "NCCL_ALGO" not in got and "PYTORCH_CUDA_ALLOC_CONF" not in got
    notes = ambient.notes(ENV, knobs, "cpu")
    replaced = [n for n in notes if "replaced by the knob" in n]
    assert len(replaced) == 2
    assert any(n.startswith("NCCL_ALGO=Tree in the environment") and "'Ring'" in n for n in notes)
    assert not any(n.startswith("NCCL_ALGO=Tree came from") for n in notes)
    # the same value in the environment as in the knob: nothing to say
    same = ambient.notes({"NCCL_ALGO": "Ring"}, Knobs(nccl={"NCCL_ALGO": "Ring"}), "cuda")
    assert same == []


def test_notes_say_whether_the_variable_acted_on_this_device():
    env = {"NCCL_ALGO": "Tree", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "OMP_NUM_THREADS": "2"}  # fmt: skip
    on_cpu = {n.split("=")[0]: n for n in ambient.notes(env, Knobs(), "cpu")}
    assert "no effect on this CPU burst" in on_cpu["PYTORCH_CUDA_ALLOC_CONF"]
    assert "only in NCCL communicators" in on_cpu["NCCL_ALGO"]
    assert "it shaped this burst" in on_cpu["OMP_NUM_THREADS"]
    on_gpu = {n.split("=")[0]: n for n in ambient.notes(env, Knobs(), "cuda")}
    assert "it shaped this burst" in on_gpu["PYTORCH_CUDA_ALLOC_CONF"]
    assert "make it an NCCL knob" in on_gpu["NCCL_ALGO"]


def test_library_overrides_are_no_effect_entries_on_a_gpu_only():
    off = {"NVIDIA_TF32_OVERRIDE": "0"}
    assert "strict fp32" in ambient.conflicts(off, "tf32", "cuda")["precision"]
    assert ambient.conflicts(off, "bf16", "cuda") == {}
    assert ambient.conflicts(off, "tf32", "cpu") == {}
    forced = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    strict = ambient.conflicts(forced, "fp32-strict", "cuda")["precision"]
    assert "not strict" in strict
    assert "not PyTorch's default" in ambient.conflicts(forced, "default", "cuda")["precision"]
    assert "convolutions in IEEE" in ambient.conflicts(off, "default", "cuda")["precision"]


def test_launch_blocking_and_no_caching_make_a_gpu_burst_suspect():
    env = {"CUDA_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    assert len(ambient.suspects(env, "cuda")) == 2
    assert ambient.suspects(env, "cpu") == []
    assert ambient.suspects({"CUDA_LAUNCH_BLOCKING": "0"}, "cuda") == []


def test_stamp_fills_the_result_and_does_not_repeat_a_suspect():
    r = BurstResult(knobs=Knobs())
    env = {"CUDA_LAUNCH_BLOCKING": "1", "NCCL_DEBUG": "WARN"}
    ambient.stamp(r, r.knobs, "cuda", env)
    ambient.stamp(r, r.knobs, "cuda", env)
    assert r.ambient_env == env
    assert len(r.ambient_notes) == 2 and len(r.suspect) == 1
    d = r.to_dict()
    assert d["ambient_env"] == env and BurstResult.from_dict(d).ambient_notes == r.ambient_notes
