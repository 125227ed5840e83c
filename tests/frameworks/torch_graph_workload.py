"""PyTorch: warm up, then capture and replay a CUDA graph of a training step (cuBLAS matmuls,
their workspace, new segments allocated during the capture), as inference servers and
torch.compile's "reduce-overhead" mode do. torch.cuda.graph() empties PyTorch's cache before it
captures, so the capture's first segments are new allocations while everything PyTorch freed
may still be in use on the device. The fake driver runs no kernels, so the replays are checked
for their answers, not their numbers. Then an over-size allocation must raise PyTorch's own error (EXPECT_OOM), after which the program goes
on."""
import gc
import os
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402

import check  # noqa: E402

dev = torch.device("cuda")
free, total = torch.cuda.mem_get_info()
check.ok(total == check.expected_total(), f"mem_get_info total {total}")
model = torch.nn.Sequential(
    torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
static_x = torch.randn(64, 256, device=dev)
static_y = torch.randn(64, 256, device=dev)


def step():
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(model(static_x), static_y)
    loss.backward()
    opt.step()
    return loss


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):  # warm-up on a side stream, as the CUDA graphs documentation says
        step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
raised = None
try:
    with torch.cuda.graph(graph):
        static_loss = step()
except Exception as e:
    raised = f"{type(e).__name__}: {e}"
check.ok(raised is None, f"the training step captured as a CUDA graph ({raised})")
replayed = None
try:
    for _ in range(5):
        static_x.copy_(torch.randn(64, 256, device=dev))
        graph.replay()
    torch.cuda.synchronize()
    replayed = "ok"
except Exception as e:
    replayed = f"{type(e).__name__}: {e}"
check.ok(raised is None and replayed == "ok", f"the graph replayed five times ({replayed})")
del graph
torch.cuda.empty_cache()
raised = None
try:
    a = torch.empty(total // 4 * 3, dtype=torch.uint8, device=dev)
    b = torch.empty(total // 4 * 3, dtype=torch.uint8, device=dev)
except Exception as e:  # the class is checked below
    raised = type(e).__name__
check.ok(raised == os.environ["EXPECT_OOM"], f"two 3/4-device tensors: {raised}")
a = b = None
torch.cuda.empty_cache()
c = torch.ones(1 << 20, device=dev)
torch.cuda.synchronize()
check.ok(c.numel() == 1 << 20, "an allocation after the out-of-memory error works")
# Tensors with autograd history that die while the interpreter finalizes can wake PyTorch's
# autograd device thread into an abort at exit ("terminate called without an active exception",
# pytorch/pytorch#38230; seen here with and without gpucap): they go, and the device settles,
# before the exit.
del static_loss, opt, model, static_x, static_y, c
gc.collect()
torch.cuda.synchronize()
check.done()
