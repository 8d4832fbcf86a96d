"""On PYTHONPATH, makes ``import torch`` fail as in an environment without it (tests/test_torch_optional.py)."""

import sys


class _NoTorch:
    """A meta-path finder that refuses torch and its submodules."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
