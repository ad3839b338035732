"""Download GPT-2 small (weights + vocabulary) from the Hugging Face hub, sha256-verified.

Optional: nothing in the course needs it; it lets `helpers.gpt2.load_gpt2` and
`helpers.gpt2_tokenizer.GPT2Tokenizer` run the real model. The files are pinned to one
revision of openai-community/gpt2 and each is checked against its size and sha256 before it
is moved into place (so a broken or partial download never looks like a good one).

    make gpt2                                   # into checkpoints/gpt2/
    python tools/download_gpt2.py --dest DIR

Then, in Python: ``load_gpt2("checkpoints/gpt2")`` and ``GPT2Tokenizer.from_folder("checkpoints/gpt2")``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

REPO = "openai-community/gpt2"
REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
BASE_URL = f"https://huggingface.co/{REPO}/resolve/{REVISION}"
# name: (size in bytes, sha256) of the files at REVISION
FILES = {
    "config.json": (665, "0daed7749b4f02b8f76240d5444551d7b08712dab4d0adb8239c56ba823bb7b4"),
    "vocab.json": (1_042_301, "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "merges.txt": (456_318, "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
    "model.safetensors": (548_105_171, "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707"),
}
DEFAULT_DEST = Path(__file__).resolve().parent.parent / "checkpoints" / "gpt2"


class DownloadError(RuntimeError):
    """The hub could not be reached (offline, firewall, timeout)."""


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch(url: str, part: Path, timeout: float) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
        while block := response.read(1 << 20):
            out.write(block)


def download(dest=DEFAULT_DEST, base_url: str = BASE_URL, files: dict | None = None, timeout: float = 30.0) -> Path:
    """Fetch every file of ``files`` (default: GPT-2 small) into ``dest``; verified files are kept."""
    dest, files = Path(dest), FILES if files is None else files
    dest.mkdir(parents=True, exist_ok=True)
    for name, (size, digest) in files.items():
        target = dest / name
        if target.is_file() and target.stat().st_size == size and sha256(target) == digest:
            print(f"{name}: already here, sha256 verified")
            continue
        url, part = f"{base_url}/{name}", dest / (name + ".part")
        print(f"{name}: downloading {size:,} bytes from {url}", flush=True)
        try:
            _fetch(url, part, timeout)
        except (urllib.error.URLError, OSError) as e:
            part.unlink(missing_ok=True)
            if isinstance(e, urllib.error.HTTPError):
                why = f"the server answered HTTP {e.code} {e.reason}."
            else:
                why = f"{getattr(e, 'reason', e)}.\nYou seem to be offline, or the Hugging Face hub is blocked from here."
            raise DownloadError(
                f"could not download {url}: {why}\nNothing in the course "
                "needs GPT-2; to get it later, run `make gpt2` with internet access, or download these files\n"
                f"by hand from https://huggingface.co/{REPO}/tree/{REVISION} into {dest}: {', '.join(files)}"
            ) from None
        got_size, got = part.stat().st_size, sha256(part)
        if (got_size, got) != (size, digest):
            part.unlink()
            raise ValueError(f"{name} from {url} is damaged: {got_size} bytes, sha256 {got}; expected "
                             f"{size} bytes, sha256 {digest}. Nothing was kept; run `make gpt2` again.")
        os.replace(part, target)  # atomic: a file under its real name is always a verified one
        print(f"{name}: sha256 verified")
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="folder to fill (default: checkpoints/gpt2)")
    parser.add_argument("--base-url", default=BASE_URL, help="where the files are (default: the pinned hub revision)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the network")
    args = parser.parse_args(argv)
    try:
        dest = download(args.dest, args.base_url, timeout=args.timeout)
    except (DownloadError, ValueError) as e:
        print(f"make gpt2: {e}", file=sys.stderr)
        return 1
    print(f"GPT-2 small is in {dest}: helpers.gpt2.load_gpt2({str(dest)!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
