"""tools/download_gpt2.py (`make gpt2`): verified downloads, and a clear message offline.

Nothing here touches the network: "offline" is a URL on this machine where nothing listens,
and a successful download is one from file:// URLs.
"""

import hashlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import download_gpt2  # noqa: E402


@pytest.fixture
def dead_url():
    """http://127.0.0.1:PORT with nothing listening: connecting fails at once, as offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/gpt2"


def test_pinned_files():
    assert set(download_gpt2.FILES) == {"config.json", "vocab.json", "merges.txt", "model.safetensors"}
    assert all(len(d) == 64 and int(d, 16) >= 0 for _, d in download_gpt2.FILES.values())
    assert download_gpt2.REVISION in download_gpt2.BASE_URL


def test_offline_message_is_clear(dead_url, tmp_path):
    with pytest.raises(download_gpt2.DownloadError) as info:
        download_gpt2.download(tmp_path, base_url=dead_url, timeout=5)
    msg = str(info.value)
    assert f"could not download {dead_url}/config.json" in msg
    assert "offline" in msg and "make gpt2" in msg and "Nothing in the course needs GPT-2" in msg
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


def test_make_target_fails_cleanly_offline(dead_url, tmp_path):
    run = subprocess.run([sys.executable, str(TOOLS / "download_gpt2.py"), "--dest", str(tmp_path),
                          "--base-url", dead_url, "--timeout", "5"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.startswith("make gpt2: could not download") and "Traceback" not in run.stderr


def test_download_verifies_sha256(tmp_path):
    server = tmp_path / "server"
    server.mkdir()
    (server / "a.txt").write_bytes(b"hello GPT-2\n")
    good = {"a.txt": (12, hashlib.sha256(b"hello GPT-2\n").hexdigest())}
    dest = download_gpt2.download(tmp_path / "dest", base_url=server.as_uri(), files=good)
    assert (dest / "a.txt").read_bytes() == b"hello GPT-2\n"
    download_gpt2.download(dest, base_url=server.as_uri() + "/missing", files=good)  # verified: not fetched again
    bad = {"a.txt": (12, "0" * 64)}
    with pytest.raises(ValueError, match=r"a\.txt .* is damaged: 12 bytes, sha256 [0-9a-f]{64}; expected"):
        download_gpt2.download(tmp_path / "dest2", base_url=server.as_uri(), files=bad)
    assert list((tmp_path / "dest2").iterdir()) == []  # the damaged file was not kept
