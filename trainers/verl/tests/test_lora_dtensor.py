"""agent_gym_verl.lora reads FSDP's DTensor shards through torch's public API (``DTensor.to_local``):
a real DTensor on a one-process gloo mesh (CPU), no verl needed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
# the verl adapter's distribution (trainers/verl), installed by .ci/verl.sh's virtualenvs, not the README's
pytest.importorskip("agent_gym_verl", reason="agent_gym_verl is not installed: pip install -e trainers/verl")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    from torch.distributed.device_mesh import init_device_mesh

    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def test_a_dtensor_shard_is_its_local_tensor_and_placement(mesh):
    from torch.distributed.tensor import Shard, distribute_tensor

    from agent_gym_verl.lora import _local

    whole = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    local, placement = _local(distribute_tensor(whole, mesh, [Shard(0)]), "lora_A.weight")
    assert type(local) is torch.Tensor and torch.equal(local, whole)
    assert placement == Shard(0)


def test_a_plain_tensor_has_no_placement():
    from agent_gym_verl.lora import CheckpointError, _local

    value = torch.ones(2)
    assert _local(value, "k") == (value, None)
    with pytest.raises(CheckpointError, match="k: unexpected value of type str"):
        _local("x", "k")
