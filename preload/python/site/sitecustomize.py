"""gpumem's sitecustomize: `gpumem record` puts this folder first on PYTHONPATH for a Python
program, so that PyTorch is recorded tensor by tensor without an edit of the script
(preload/python/gpumem/_torch.py says what it turns on). The sitecustomize it shadows, if the
program's environment has one, still runs: it is found further along sys.path and executed
first."""
import importlib.machinery
import importlib.util
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


try:
    _chain()
finally:
    try:
        from gpumem import _torch
        _torch.install()
    except Exception as e:  # noqa: BLE001 - a recording must never stop the program
        import warnings
        warnings.warn("gpumem: the PyTorch recording could not be set up (%s: %s)"
                      % (type(e).__name__, e), RuntimeWarning)
