"""Record the aten ops a block dispatches, in order: how the tests show that the forward after the self-check runs
exactly the ops of a forward that never had one."""

from torch.utils._python_dispatch import TorchDispatchMode


class AtenOps(TorchDispatchMode):
    """``with AtenOps() as rec: ...``; then ``rec.ops`` lists every aten op dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
