"""A child forked after gpumem's PyTorch hooks pushed module ranges in the parent
(tests/integration/preload_fork_ids.sh, the torch hooks' row): under `gpumem record`, a forward
on the CPU (the hooks push "fwd" and the module paths Net, lin_a, lin_b by kept recorder ids;
CUDA untouched, so the child records), then a fork; the child runs the same forward on the
device. Prints "CHILD <pid>"; exits with the child's status.

usage: python3 fork_hooks.py
"""
import os
import sys

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin_a = torch.nn.Linear(8, 8)
        self.lin_b = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin_b(self.lin_a(x))


net = Net()
net(torch.zeros(2, 8))
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    code = 1
    try:
        net.cuda()
        net(torch.zeros(2, 8, device="cuda"))
        torch.cuda.synchronize()
        code = 0
    except Exception as e:  # noqa: BLE001
        print("fork_hooks: child:", e)
    sys.stdout.flush()
    os._exit(code)
_, status = os.waitpid(pid, 0)
print("CHILD", pid)
sys.exit(os.waitstatus_to_exitcode(status))
