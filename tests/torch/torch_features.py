# Small PyTorch programs that use a feature of PyTorch users rely on, whose memory truths
# tests/torch/torch_features.sh checks gpumem's outputs against (argv[1] the kind):
#   stream  3 tensors of 32 MiB kept, each copied on a side stream from a 32 MiB tensor that is
#         freed after record_stream(side): the last one's free has not completed at the end
#         (PyTorch processes the side stream's events at its next allocation), yet the program
#         freed it: memory_allocated() at the end is the 96 MiB kept (printed).
#   ckpt  a model of 4 residual MLP blocks, each under torch.utils.checkpoint, one forward and
#         one backward a step: the backward's recompute of each block is no forward pass of the
#         loop, and its tensors are no saved activations. Under save_on_cpu (argv[2] "offload",
#         below), which packs nothing inside a checkpointed block, max_memory_reserved (printed)
#         is the same.
#   ckptr  the same blocks called from the loop (no module around them), each under
#         torch.utils.checkpoint with use_reentrant=True: the re-run is the backward's too.
#   expand  (under expandable_segments:True) one 256 MiB tensor: PyTorch maps its segment's pages
#         one by one and records them as one range; the device's peak reserved, its last page,
#         is PyTorch's reserve (max_memory_reserved, printed), no other program VMM.
#   amp   a small MLP trained 3 steps under torch.autocast(float16) with a GradScaler.
#   empty  a 256 MiB tensor freed, torch.cuda.empty_cache(), then a 64 MiB one: PyTorch's
#         reserve at the end is the 64 MiB segment (memory_reserved, printed), and so is what
#         the process holds of the device beyond its context.
#   stepend  a small MLP trained 3 steps on one input made before the loop, its gradients set to
#         None after each update (optimizer.zero_grad()) and its loss let go: memory_allocated()
#         at the end of each iteration (printed, step_allocated) is what is allocated from there
#         until the next step's forward, without the gradients.
#   gc    (under PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.5, or without it) a memory
#         fraction of 0.004 (324 MiB of the virtual GPU's 79.11 GiB), then 12 rounds of two
#         growing tensors freed and an 8 MiB one kept: PyTorch's garbage collection gives back
#         cached segments as reserved memory passes half the fraction (max_memory_reserved,
#         printed: 274 MiB; 320 MiB without the threshold).
#   split  (under PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:40) the same fraction, 10 rounds of two
#         growing tensors freed and a 6 MiB one kept: at the cap PyTorch gives back some of its
#         blocks over max_split_size (release_available_cached_blocks), not its cache, and
#         retries (max_memory_reserved, printed: 320 MiB; 308 MiB without the key).
#   retry  the gc loop without a key, with an empty_cache of its own halfway: PyTorch meets its
#         cap, frees its cache and retries (memory_stats' num_alloc_retries, printed: 5), and the
#         empty_cache frees the same way, outside an allocation.
#   shrink  (under max_split_size_mb) the same fraction, then one tensor a round, freed, each 30 MiB
#         smaller than the last, from 300 MiB to 150 MiB: the cached one is over max_split_size and
#         20 MiB or more over the request, so not handed out, and the two pass the cap; PyTorch gives
#         it back (release_available_cached_blocks), its cache then empty, and the allocation
#         succeeds: no retry (num_alloc_retries, printed: 0).
#   tied  a small model whose output layer's weight is its embedding's, trained 3 steps: offloading
#         its saved activations lowers the peak allocated (156.03 to 146.03 MiB,
#         max_memory_allocated, printed) and leaves the reserved (160 MiB, max_memory_reserved) as
#         it is. Its head returns the model's output and its Sequential's last Linear the
#         Sequential's, as amp's last Linear returns its root's: a module's output that is its
#         parent's.
#   mempool  a torch.cuda.MemPool, no CUDA graph: a 20 MiB tensor made under use_mem_pool, kept.
# argv[2] "offload" (ckpt, amp, stepend, tied): each step's forward under
# torch.autograd.graph.save_on_cpu(pin_memory=True), what advise's offload of saved activations
# would do (max_memory_allocated and max_memory_reserved, printed, are what it predicts).
import contextlib
import os
import sys
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
kind = sys.argv[1]
gpumem_allocator = os.environ.get("GPUMEM_TORCH_ALLOCATOR") == "gpumem"  # gpumem record --allocator gpumem
offload = len(sys.argv) > 2 and sys.argv[2] == "offload"


def forward_scope():
    return torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()


if kind == "stream":
    side = torch.cuda.Stream()
    kept = []
    for step in range(3):
        x = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(side):
            kept.append(x.clone())  # the clone line
        x.record_stream(side)
        del x
elif kind in ("ckpt", "ckptr"):

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.l1, self.l2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.l2(torch.relu(self.l1(x)))

    class Net(nn.Module):
        def __init__(self, d=512, n=4):
            super().__init__()
            self.blocks = nn.ModuleList([Block(d) for _ in range(n)])

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=False)
            return x

    model = Net().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(1024, 512, device="cuda", requires_grad=kind == "ckptr")
        with forward_scope():
            if kind == "ckptr":  # the blocks called from the loop, no module around them
                for b in model.blocks:
                    x = checkpoint(b, x, use_reentrant=True)
                loss = x.square().mean()
            else:
                loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
elif kind == "expand":
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
elif kind == "amp":
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for step in range(3):
        x = torch.randn(256, 512, device="cuda")
        with forward_scope(), torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
elif kind == "empty":
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.empty_cache()
    y = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
elif kind == "stepend":
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device="cuda")  # made once: nothing is made between two steps
    for step in range(3):
        with forward_scope():
            loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()  # after the update: the step ends without its gradients
        del loss
        if not gpumem_allocator:
            print("step_allocated", torch.cuda.memory_allocated())
elif kind in ("gc", "split"):
    # rounds; two growing temporaries (MiB: first, growth) and one kept buffer (MiB) a round
    rounds, (a0, da), (b0, db), keep = {"gc": (12, (30, 7), (12, 3), 8),
                                         "split": (10, (40, 9), (20, 5), 6)}[kind]
    torch.cuda.set_per_process_memory_fraction(0.004)
    kept = []
    for i in range(rounds):
        a = torch.empty((a0 + da * i) << 20, dtype=torch.uint8, device="cuda")
        b = torch.empty((b0 + db * i) << 20, dtype=torch.uint8, device="cuda")
        kept.append(torch.empty(keep << 20, dtype=torch.uint8, device="cuda"))
        del a, b
elif kind == "shrink":
    torch.cuda.set_per_process_memory_fraction(0.004)
    for i in range(6):
        a = torch.empty((300 - 30 * i) << 20, dtype=torch.uint8, device="cuda")
        del a
elif kind == "tied":

    class Tied(nn.Module):
        def __init__(self, v=4096, d=256):
            super().__init__()
            self.emb = nn.Embedding(v, d)
            self.body = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, v, bias=False)
            self.head.weight = self.emb.weight  # tied

        def forward(self, x):
            return self.head(self.body(self.emb(x)))

    model = Tied().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randint(0, 4096, (8, 128), device="cuda")
        with forward_scope():
            loss = model(x).float().logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
elif kind == "retry":
    torch.cuda.set_per_process_memory_fraction(0.004)
    kept = []
    for i in range(12):
        a = torch.empty((30 + 7 * i) << 20, dtype=torch.uint8, device="cuda")
        b = torch.empty((12 + 3 * i) << 20, dtype=torch.uint8, device="cuda")
        kept.append(torch.empty(8 << 20, dtype=torch.uint8, device="cuda"))
        del a, b
        if i == 5:  # the program's own release of the cache: no retry
            torch.cuda.empty_cache()
elif kind == "mempool":
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
if not gpumem_allocator:  # gpumem's allocator: gpumem's figures, the rows read the recording's
    print("memory_allocated", torch.cuda.memory_allocated())
    print("max_memory_allocated", torch.cuda.max_memory_allocated())
    print("max_memory_reserved", torch.cuda.max_memory_reserved())
    print("memory_reserved", torch.cuda.memory_reserved())
    print("num_alloc_retries", torch.cuda.memory_stats()["num_alloc_retries"])
