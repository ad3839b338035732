"""Root conftest: environment for pytest and for the kernels nbval starts.

nbval's kernels inherit this process's environment, so the settings below make
notebook outputs reproducible: fixed hash seed (set order), no progress bars,
and CPU only (GPU random streams differ from the CPU's stored outputs).
MPLBACKEND is left alone: the kernels must keep their inline backend.

Two rules the whole test harness follows (README: "Stored outputs that reproduce on any
machine" and "Claims that hold for any seed"): a compared output never depends on the CPU,
thread count, Python version or OS; and a claim asserted after training, sampling or random
initialisation holds for any seed (`make seed-shift` re-runs the notebooks with every seed
shifted), so no test compares the bits of something trained or Python's own wording.
"""

import os

os.environ["PYTHONHASHSEED"] = "0"
os.environ["TQDM_DISABLE"] = "1"
os.environ.setdefault("HELPERS_DEVICE", "cpu")
