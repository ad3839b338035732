"""Root conftest: environment for pytest and for the kernels nbval starts.

nbval's kernels inherit this process's environment, so the settings below make
notebook outputs reproducible: fixed hash seed (set order), no progress bars,
and CPU only (GPU random streams differ from the CPU's stored outputs).
MPLBACKEND is left alone: the kernels must keep their inline backend.
"""

import os

os.environ["PYTHONHASHSEED"] = "0"
os.environ["TQDM_DISABLE"] = "1"
os.environ.setdefault("HELPERS_DEVICE", "cpu")
