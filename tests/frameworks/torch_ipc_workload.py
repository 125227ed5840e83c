"""PyTorch: torch.multiprocessing shares CUDA tensors with two spawned children and back. The
parent sends each child a 24 MiB tensor (a segment of its own, over several 2 MiB units), a
small one (inside a shared 2 MiB segment), a view at an offset of the large one, and a tensor
for the children to write into; each child checks the bytes it received, writes its row, and
sends the parent a tensor of its own, which the parent checks before letting the children go.
PyTorch sends an interprocess event with every CUDA tensor and the receiver waits for it.
The fake driver runs no kernels, so every byte is put and read by copies (FAKECUDA_BACKING=1:
the bytes really cross between the processes). The children report their checks to the
parent, which prints them."""
import os
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import check  # noqa: E402

BIG = 6 << 20  # float32 elements: 24 MiB
SMALL = 1000
ROW = 1 << 16
WAIT = 90  # seconds any side waits for another: a bound for failures, not a timing


def expected_big():
    return torch.arange(BIG, dtype=torch.float32)


def child(rank, inbox, outbox, done):
    results = []
    big, small, view, out = inbox.get(timeout=WAIT)
    results.append((big.is_cuda and big.numel() == BIG, f"child {rank}: a CUDA tensor arrived"))
    results.append((torch.equal(big.cpu(), expected_big()),
                    f"child {rank}: the 24 MiB tensor holds the parent's bytes"))
    results.append((torch.equal(small.cpu(), torch.full((SMALL,), 7.0)),
                    f"child {rank}: the small tensor holds the parent's bytes"))
    results.append((torch.equal(view.cpu(), expected_big()[1000:1000 + ROW]),
                    f"child {rank}: the view at an offset holds the parent's bytes"))
    out[rank].copy_(torch.full((ROW,), float(rank + 1)))
    mine = torch.full((ROW,), 100.0 + rank).cuda()
    torch.cuda.synchronize()
    outbox.put((rank, results, mine))
    done.wait(WAIT)  # the parent reads `mine` meanwhile: it must stay alive


def main():
    check.ok(torch.cuda.is_available(), "CUDA is available")
    free, total = torch.cuda.mem_get_info()
    check.ok(total == check.expected_total(), f"mem_get_info total {total}")
    big = expected_big().cuda()
    small = torch.full((SMALL,), 7.0).cuda()
    view = big[1000:1000 + ROW]
    out = torch.full((2, ROW), -1.0).cuda()
    torch.cuda.synchronize()
    ctx = mp.get_context("spawn")
    inboxes = [ctx.Queue() for _ in range(2)]
    outbox = ctx.Queue()
    done = ctx.Event()
    procs = [ctx.Process(target=child, args=(r, inboxes[r], outbox, done)) for r in range(2)]
    for p in procs:
        p.start()
    for q in inboxes:
        q.put((big, small, view, out))
    got = {}
    for _ in procs:
        try:
            rank, results, mine = outbox.get(timeout=WAIT)
        except Exception as e:  # a child died or hung: say so, the checks below fail
            check.ok(False, f"a child answered ({type(e).__name__})")
            break
        for cond, desc in results:
            check.ok(cond, desc)
        got[rank] = torch.equal(mine.cpu(), torch.full((ROW,), 100.0 + rank))
        del mine
    for rank in range(2):
        check.ok(got.get(rank, False), f"the parent reads the tensor child {rank} sent")
    rows = out.cpu()
    for rank in range(2):
        check.ok(torch.equal(rows[rank], torch.full((ROW,), float(rank + 1))),
                 f"the parent reads the row child {rank} wrote")
    done.set()
    for p in procs:
        p.join(WAIT)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()  # never leave a child behind
            p.join()
    check.ok(codes == [0, 0], f"both children exited cleanly ({codes})")
    check.ok(torch.equal(big.cpu(), expected_big()), "the parent's tensor is intact")
    check.done()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
