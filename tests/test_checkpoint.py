"""Checkpoints: exact round trip, clear errors, and pickled code refused without running."""

import dataclasses
import pickle

import pytest
import torch
from torch import nn

from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.training import save_checkpoint as reexported


class Touch:
    """Unpickling this object would create ``path``: a stand-in for arbitrary code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def small(width=4):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, width), nn.LayerNorm(width), nn.Linear(width, 2))


def trained_pair(tmp_path):
    model = small()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 3)).pow(2).mean().backward()
        opt.step()
    return model, opt


def test_reexported_from_training():
    assert reexported is save_checkpoint


def test_round_trip_is_exact_and_training_continues_identically(tmp_path):
    model, opt = trained_pair(tmp_path)
    path = save_checkpoint(tmp_path / "sub" / "ck.pt", model, opt, step=3, note="hi", losses=[1.5, 1.25])
    torch.manual_seed(1)
    model2 = small()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    meta = load_checkpoint(path, model2, opt2)
    assert meta == {"step": 3, "note": "hi", "losses": [1.5, 1.25]}
    for (k, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    x = torch.randn(4, 3)
    for m, o in ((model, opt), (model2, opt2)):  # one more step each: Adam's moments were restored too
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True))
    assert not list(tmp_path.glob("sub/*.tmp"))


def test_dataclass_meta_is_stored_as_a_dict(tmp_path):
    @dataclasses.dataclass
    class Cfg:
        width: int = 4
        name: str = "x"

    path = save_checkpoint(tmp_path / "ck.pt", small(), config=Cfg())
    assert load_checkpoint(path, small())["config"] == {"width": 4, "name": "x"}


def test_meta_objects_are_refused_at_save_time(tmp_path):
    with pytest.raises(TypeError, match=r"meta\['bad'\]\[0\] is a object"):
        save_checkpoint(tmp_path / "ck.pt", small(), bad=[object()])


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "nope.pt", small())


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999, 0.0])
def test_truncated_file_gives_a_clear_error(tmp_path, keep):
    path = save_checkpoint(tmp_path / "ck.pt", small())
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        load_checkpoint(path, small())


@pytest.mark.parametrize("garbage", [b"this is not a checkpoint" * 10, b"x" * 100, bytes(range(256))])
def test_garbage_file_gives_a_clear_error(tmp_path, garbage):
    path = tmp_path / "ck.pt"
    path.write_bytes(garbage)
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(path, small())


def test_a_state_dict_that_is_not_ours(tmp_path):
    torch.save(small().state_dict(), tmp_path / "sd.pt")
    with pytest.raises(ValueError, match="not a checkpoint written by save_checkpoint"):
        load_checkpoint(tmp_path / "sd.pt", small())


def test_the_crafted_pickle_really_runs_code(tmp_path):
    # Guard for the next test: loading this payload unsafely DOES create the marker.
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps({"model": Touch(marker)}))  # noqa: S301
    assert marker.exists()


@pytest.mark.parametrize("container", ["torch.save", "pickle protocol 2", "pickle protocol 5"])
def test_pickled_code_is_refused_without_running(tmp_path, container):
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    payload = {"format": "helpers-checkpoint/1", "model": Touch(marker), "optimizer": None, "meta": {}}
    if container == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=int(container[-1])))
    with pytest.raises(ValueError, match="refused to load") as err:
        load_checkpoint(path, small())
    assert "nothing in it was run" in str(err.value)
    if container != "pickle protocol 5":  # protocol 5 is refused at its first opcode, before any global
        # Our own words only: Python 3.11 pickles `open` as io.open, 3.13 as _io.open.
        assert "it carries pickled code or objects" in str(err.value)
    assert not marker.exists()


def test_shape_mismatch_is_named(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", small(width=4))
    with pytest.raises(ValueError, match=r"shape mismatches: 0.weight: checkpoint \(4, 3\) vs model \(6, 3\)"):
        load_checkpoint(path, small(width=6))


def test_missing_and_unexpected_keys_are_named(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", small())
    other = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2), nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"missing keys: 3.bias, 3.weight"):
        load_checkpoint(path, other)
    with pytest.raises(ValueError, match=r"unexpected keys: 2.bias, 2.weight"):
        load_checkpoint(path, nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)))


def test_optimizer_asked_for_but_not_saved(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", small())
    model = small()
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(path, model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_optimizer_mismatch(tmp_path):
    model, opt = trained_pair(tmp_path)
    path = save_checkpoint(tmp_path / "ck.pt", model, opt)
    m2 = small()
    two_groups = torch.optim.AdamW([{"params": list(m2.parameters())[:2]}, {"params": list(m2.parameters())[2:]}])
    with pytest.raises(ValueError, match="optimizer state does not fit"):
        load_checkpoint(path, m2, two_groups)


def test_argument_types(tmp_path):
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        save_checkpoint(tmp_path / "ck.pt", {"w": 1})
    with pytest.raises(TypeError, match="optimizer must be"):
        save_checkpoint(tmp_path / "ck.pt", small(), optimizer="adam")
