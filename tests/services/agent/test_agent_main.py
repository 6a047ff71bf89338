"""Agent start-up choices: how GPUs are split into slots."""

from spotsweep.services.agent.main import gpu_groups


def test_gpu_groups_give_each_slot_its_own_devices() -> None:
    gpus = [str(i) for i in range(8)]
    assert gpu_groups(gpus, 1) == gpus
    assert gpu_groups(gpus, 2) == ["0,1", "2,3", "4,5", "6,7"]
    assert gpu_groups(gpus, 3) == ["0,1,2", "3,4,5"]  # the odd GPUs out stay idle
    assert gpu_groups([], 2) == []


def test_more_slots_than_gpus_share_them_and_never_see_all_gpus() -> None:
    from spotsweep.services.agent.handlers import Slots

    pool = Slots(3, ["0", "1"])
    taken = []
    with pool.take() as a, pool.take() as b, pool.take() as c:
        taken = [a[1], b[1], c[1]]
    assert sorted(taken) == ["0", "0", "1"]
    with Slots(2, []).take() as (_, gpu):
        assert gpu is None  # a CPU node: CUDA_VISIBLE_DEVICES is left alone
