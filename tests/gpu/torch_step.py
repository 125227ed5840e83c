"""One PyTorch training step, timed (make gpu-bench, tests/gpu/bench.sh): a stack of four
WIDTH x WIDTH linear layers with GELU on the CUDA device, a batch of 256, AdamW; WARMUP steps,
then STEPS timed with the device synchronised at both ends. Gradients are set to None at every
step, so each step allocates them again (through the caching allocator, or with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 through cudaMalloc itself). Prints one JSON line."""
import json
import os
import time

import torch

steps = int(os.environ.get("STEPS", "50"))
warmup = int(os.environ.get("WARMUP", "10"))
width = int(os.environ.get("WIDTH", "2048"))
dev = torch.device("cuda")
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, width, device=dev)
y = torch.randint(0, 10, (256,), device=dev)


def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for _ in range(warmup):
    step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
ms = (time.perf_counter() - start) * 1e3 / steps
print(json.dumps({"ms_per_step": round(ms, 4), "steps": steps, "width": width,
                  "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "max_allocated_bytes": torch.cuda.max_memory_allocated()}))
