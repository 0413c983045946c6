"""workbench.core.trusted: which variables can run code or touch files, and what each does."""

from __future__ import annotations

from workbench.core.trusted import POWERS, power_of, powers


def test_plugins_files_and_loader_paths_are_named_with_what_they_do():
    found = powers(["NCCL_ALGO", "NCCL_NET_PLUGIN", "NCCL_DEBUG_FILE", "NCCL_TOPO_FILE",
                    "LD_PRELOAD", "PYTHONPATH", "OMP_NUM_THREADS"])  # fmt: skip
    assert list(found) == ["LD_PRELOAD", "NCCL_DEBUG_FILE", "NCCL_NET_PLUGIN", "NCCL_TOPO_FILE",
                           "PYTHONPATH"]  # fmt: skip
    assert "plugin" in found["NCCL_NET_PLUGIN"] and "code runs" in found["NCCL_NET_PLUGIN"]
    assert "truncated" in found["NCCL_DEBUG_FILE"]
    assert "reads" in found["NCCL_TOPO_FILE"]
    assert "torch.py" in found["PYTHONPATH"]


def test_plugins_and_loader_variables_not_in_the_table_are_caught_by_their_names():
    assert "plugin" in (power_of("NCCL_FUTURE_PLUGIN") or "")
    assert "dynamic loader" in (power_of("LD_BIND_NOW") or "")
    assert power_of("NCCL_SOCKET_IFNAME") is None and power_of("PYTORCH_CUDA_ALLOC_CONF") is None


def test_every_entry_says_something():
    assert all(name.isupper() and len(what) > 30 for name, what in POWERS.items())


def test_an_env_value_with_a_control_character_is_refused_naming_it():
    import pytest

    from workbench.core.envvars import EnvVarError, check_variable

    with pytest.raises(EnvVarError, match=r"LD_LIBRARY_PATH='/a\\n/b' is not allowed: text on"):
        check_variable("LD_LIBRARY_PATH", "/a\n/b")
