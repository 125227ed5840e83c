"""A small GPT-style model (two transformer blocks, d=256, 128 tokens, batch 8) trained for
STEPS steps with AdamW: the PyTorch workload whose allocation trace `make bench` replays."""
import os
import warnings

import torch

warnings.filterwarnings("ignore")
torch.manual_seed(0)
dev = torch.device("cuda")


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


d, vocab, tokens, batch = 256, 1000, 128, 8
model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), Block(d, 4), Block(d, 4),
                            torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(int(os.environ.get("STEPS", "10"))):
    idx = torch.randint(0, vocab, (batch, tokens), device=dev)
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), idx.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
