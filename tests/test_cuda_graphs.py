"""CUDA graph capture: a captured call replays correctly on new input values."""

from __future__ import annotations

import pytest
from backends import Backend, capture_cuda_graph

import scale_lib

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("use_out", [False, True], ids=["new", "out"])
def test_torch_cuda_graph_replay(use_out: bool) -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    static_x = torch.randn(4099, device="cuda")
    static_out = torch.empty_like(static_x)

    def step():
        if use_out:
            return scale_lib.scale(static_x, 1.5, out=static_out)
        return scale_lib.scale(static_x, 1.5) + 1

    graph, static_y = capture_cuda_graph(step)

    for seed in range(3):
        new = torch.randn(4099, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        static_x.copy_(new)
        graph.replay()
        expected = new * 1.5 if use_out else new * 1.5 + 1
        torch.testing.assert_close(static_y, expected)


def test_torch_compile_reduce_overhead() -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    torch._dynamo.reset()
    f = torch.compile(lambda v: scale_lib.scale(v, 2.0) - 1, mode="reduce-overhead", fullgraph=True)
    for seed in range(4):  # the first calls record; later ones replay the CUDA graph
        x = torch.randn(1024, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        torch.testing.assert_close(f(x), x * 2 - 1)
