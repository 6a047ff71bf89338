"""Agent start-up choices: how GPUs are split into slots."""

from spotsweep.services.agent.main import gpu_groups


def test_gpu_groups_give_each_slot_its_own_devices() -> None:
    gpus = [str(i) for i in range(8)]
    assert gpu_groups(gpus, 1) == gpus
    assert gpu_groups(gpus, 2) == ["0,1", "2,3", "4,5", "6,7"]
    assert gpu_groups(gpus, 3) == ["0,1,2", "3,4,5"]  # the odd GPUs out stay idle
    assert gpu_groups([], 2) == []
