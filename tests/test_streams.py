"""Which stream a call runs on (CPU only): the caller's stream objects are read without a GPU,
and a stream of another device is refused with both devices named."""

from __future__ import annotations

import pytest

from autotranspose.errors import DeviceError
from autotranspose.runtime import streams


class FakeTorchStream:
    __module__ = "torch.cuda.streams"

    def __init__(self, handle: int, device: int) -> None:
        self.cuda_stream, self.device_index = handle, device


class FakeCupyStream:
    __module__ = "cupy.cuda.stream"

    def __init__(self, handle: int, device: int) -> None:
        self.ptr, self.device_id = handle, device


@pytest.mark.parametrize("make", [FakeTorchStream, FakeCupyStream])
def test_library_streams_carry_their_device(rng, make):
    handle, device = int(rng.integers(1 << 20, 1 << 40)), int(rng.integers(0, 8))
    s = streams.explicit(make(handle, device))
    assert (s.handle, s.device, s.ctx) == (handle, device, None)
    streams.check_device(s, device)  # same device: accepted


@pytest.mark.parametrize("make", [FakeTorchStream, FakeCupyStream])
def test_a_stream_of_another_device_is_refused_naming_both(make):
    s = streams.explicit(make(0xABC000, 1))
    with pytest.raises(DeviceError, match=r"GPU 1.*GPU 0.*GPU 0"):
        streams.check_device(s, 0)


@pytest.mark.parametrize("handle", [0, 1, 2])
def test_default_stream_handles_need_no_driver(handle):
    class Proto:
        def __cuda_stream__(self):
            return (0, handle)

    for given in (handle, Proto()):
        s = streams.explicit(given)
        assert (s.handle, s.device, s.ctx) == (handle, None, None)


@pytest.mark.parametrize("bad", ["0x10", 1.5, True, object()])
def test_what_is_not_a_stream_is_named(bad):
    with pytest.raises(TypeError, match="stream must be"):
        streams.explicit(bad)


def test_negative_handles_are_refused():
    with pytest.raises(ValueError, match="negative"):
        streams.explicit(-3)


@pytest.mark.parametrize(
    ("kind", "named", "expected"),
    [
        ("cai", 0x1234, 0x1234),
        ("cai", None, streams.LEGACY),
        ("jax", 0x99, 0x99),
        ("gpuarray", None, streams.LEGACY),
        ("gpuarray", 0x77, streams.LEGACY),
    ],
)
def test_default_stream_per_kind(kind, named, expected):
    assert streams.default(kind, 0, named) == expected
