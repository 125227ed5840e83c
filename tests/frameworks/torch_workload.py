"""PyTorch: a small MLP training loop on the CUDA device, the device's memory as PyTorch sees
it, and an over-size allocation that must raise PyTorch's own out-of-memory error, after which
the program goes on. PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_CUDA_ALLOC_CONF select the
allocator mode (with expandable_segments:True every segment must be expandable: the VMM path);
EXPECT_OOM names the exception class PyTorch raises in that mode."""
import os
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402

import check  # noqa: E402

check.ok(torch.cuda.is_available(), "CUDA is available")
check.ok(torch.cuda.device_count() == 1, f"one device ({torch.cuda.device_count()})")
free, total = torch.cuda.mem_get_info()
check.ok(total == check.expected_total(), f"mem_get_info total {total}")
check.ok(0 < free <= total, f"mem_get_info free {free}")
dev = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    x = torch.randn(32, 64, device=dev)
    y = torch.randint(0, 10, (32,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
check.ok(True, "five training steps")
if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
    segments = torch.cuda.memory_snapshot()
    check.ok(segments and all(s.get("is_expandable") for s in segments),
             f"every segment is expandable ({len(segments)})")
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
check.done()
