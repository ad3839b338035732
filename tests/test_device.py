"""helpers.device: forcing a device by environment variable, and reproducible seeding."""

import random

import numpy as np
import pytest
import torch

from helpers.device import ENV_VAR, get_device, set_seed


def test_env_var_forces_cpu(monkeypatch):
    monkeypatch.setenv(ENV_VAR, " CPU ")
    assert get_device() == torch.device("cpu")


def test_bad_env_value_is_rejected(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="'tpu' is not one of cpu, cuda, mps"):
        get_device()


def test_unavailable_device_is_rejected(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="not available"):
        get_device()


def test_default_is_an_available_device(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    device = get_device()
    assert device.type in ("cpu", "cuda", "mps")
    assert torch.zeros(1, device=device).device.type == device.type


def draws():
    return random.random(), float(np.random.rand()), torch.rand(3)  # noqa: NPY002  (the global generator is what set_seed seeds)


def test_set_seed_reproduces_every_generator():
    threads = torch.get_num_threads()
    try:
        set_seed(7)
        a = draws()
        set_seed(7)
        b = draws()
        set_seed(8)
        c = draws()
        assert a[:2] == b[:2] and torch.equal(a[2], b[2])
        assert a[0] != c[0] and not torch.equal(a[2], c[2])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2**32, ValueError), (1.0, TypeError),
                                         ("0", TypeError), (True, TypeError)])
def test_set_seed_rejects_bad_seeds(seed, error):
    with pytest.raises(error, match="seed"):
        set_seed(seed)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_set_seed_rejects_bad_threads(threads):
    with pytest.raises(ValueError, match="threads"):
        set_seed(0, threads=threads)
