"""Shared fixtures: the devices to run on (cuda only where a GPU is present; those cases carry
the `cuda` mark, which the cpu ctest run deselects)."""

import numpy as np
import pytest

import flexkit as fk

HAVE_GPU = fk.cuda.device_count() > 0


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device")


def _device_params():
    return [
        "cpu",
        pytest.param("cuda", marks=[pytest.mark.cuda,
                                    pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device")]),
    ]


@pytest.fixture(params=_device_params())
def device(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)
