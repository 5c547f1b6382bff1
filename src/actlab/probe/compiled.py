"""What the probe does differently when (part of) the model runs under ``torch.compile``.

Dynamo guards a compiled graph on the hooks of every module it traces, so hooks registered
and removed around recorded steps would recompile the model at every switch. A probe on a
model holding ``torch.compile`` wrappers therefore keeps its hooks attached for its whole
life and gates their work on a flag: the compiled model has exactly two graphs, one that
records and one that does not, and switching between them costs a guard check.

Inside a compiled graph a hook must not read state that changes from pass to pass (each
read becomes a guard, each change a recompile). The hooks hand each pass's device-side
statistics to the eager side in one attribute write; a forward hook on each compiled
wrapper, which runs outside the graph after every compiled call, files them.

Backward statistics of activation sites need a hook on an intermediate tensor, which dynamo
compiles only under compiled autograd; such a hook would split the graph. They are not
recorded on compiled models (:data:`COMPILED_UNSUPPORTED`, with a warning); an eager probe
records them.
"""

from __future__ import annotations

from torch import nn

#: metrics an activation site's backward pass provides: not recorded on compiled models
COMPILED_UNSUPPORTED = ("preact_grad_mean", "preact_grad_cov")


def is_compiled_wrapper(module: nn.Module) -> bool:
    """Whether ``module`` is the wrapper ``torch.compile(module)`` returns."""
    # by name: importing torch._dynamo to check the class costs a second at import time
    return type(module).__name__ == "OptimizedModule" and isinstance(
        getattr(module, "_orig_mod", None), nn.Module)


def find_compiled(model: nn.Module) -> list[nn.Module]:
    """The ``torch.compile`` wrappers in ``model`` (the root or any submodule), outermost first.

    ``module.compile()`` (compiling in place) leaves no wrapper, hence no eager point after a
    compiled call: such a model is probed like an eager one (correct, but every switch of
    the recording on or off recompiles it).
    """
    return [m for m in model.modules() if is_compiled_wrapper(m)]
