"""Kernel and API names are classified by words, never by substrings: one table of real names from
CUDA/ROCm/Ascend profiles (NCCL/RCCL/HCCL old and new, copies, syncs, launches, compute kernels whose
names merely contain "sync", "memcpy" or "nccl") against the category, task and collective each must get."""

from __future__ import annotations

import pandas as pd
import pytest

from fsdpbench.trace.table import collective_of, kernel_category, task_of

# (name as the profiler writes it, category as device work, collective type or "")
KERNELS = [
    # NCCL ≤ 2.18
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "comm", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "comm", "all_gather"),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_bf16(ncclWorkElem)", "comm", "reduce_scatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", "comm", "broadcast"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "comm", "send_recv"),
    # NCCL ≥ 2.19
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", "all_gather"),
    (
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "comm",
        "reduce_scatter",
    ),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", "all_reduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm", "send_recv"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "comm", "other"),
    ("nccldevkernel_allreduce_sum_f32_ring_ll", "comm", "all_reduce"),
    # NCCL 2.4-era names, RCCL, MSCCL
    ("void ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "comm", "all_reduce"),
    ("void ncclBroadcastRingLLKernel_copy_i8(ncclColl)", "comm", "broadcast"),
    ("rcclKernel_AllToAll_RING_SIMPLE", "comm", "all_to_all"),
    ("mscclKernel_Sum_float_LL128", "comm", "other"),
    # Ascend HCCL kernel names
    ("hcom_allReduce__471_0_1", "comm", "all_reduce"),
    ("hcom_allGather__123_1_1", "comm", "all_gather"),
    ("hcom_reduceScatter__9_0_1", "comm", "reduce_scatter"),
    ("hcom_send__1_0_1", "comm", "send_recv"),
    ("hcom_receive__1_0_1", "comm", "send_recv"),
    ("hcom_broadcast__3_0_1", "comm", "broadcast"),
    ("HcclAllreduce", "comm", "all_reduce"),
    # copies and fills
    ("Memcpy DtoD (Device -> Device)", "memcpy", ""),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy", ""),
    ("Memcpy DtoH (Device -> Pageable)", "memcpy", ""),
    ("Memcpy PtoP (Device -> Device)", "memcpy", ""),
    ("hipMemcpyDtoD", "memcpy", ""),
    ("Memset (Device)", "memset", ""),
    ("hipMemset", "memset", ""),
    ("dma_copy_h2d", "memcpy", ""),
    # device-side syncs
    ("Stream Wait Event", "sync", ""),
    ("Context Sync", "sync", ""),
    ("Stream Sync", "sync", ""),
    ("Event Sync", "sync", ""),
    # compute kernels whose names contain the words of other rules
    (
        "void recat_copy_async_kernel<float>(long const*, long const*, float const*, float*, long, long, long)",
        "compute",
        "",
    ),
    ("void fbgemm_gpu::asynchronous_complete_cumsum_kernel<long>(long const*, long*, int)", "compute", ""),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<float, 1, 128, 1>(...)",
        "compute",
        "",
    ),
    ("void cub::DeviceMemcpy::BatchMemcpyKernel<...>(...)", "compute", ""),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >",
        "compute",
        "",
    ),
    ("void syncbn_forward_kernel<float>(float const*, float*, int)", "compute", ""),
    ("triton_poi_fused_nccl_buffer_copy_0", "compute", ""),
    ("ampere_sgemm_32x32_sliced1x4_tn", "compute", ""),
    ("flash_fwd_kernel", "compute", ""),
    ("MatMulV3", "compute", ""),
    ("aclnnInplaceCopy_TensorMoveAiCore_TensorMove", "compute", ""),
]

# (host API or device event name, sync/launch task or "")
TASKS = [
    ("cudaStreamSynchronize", "stream_synchronize"),
    ("cudaDeviceSynchronize", "device_synchronize"),
    ("cudaEventSynchronize", "event_synchronize"),
    ("cuCtxSynchronize", "device_synchronize"),
    ("hipDeviceSynchronize", "device_synchronize"),
    ("hipStreamSynchronize", "stream_synchronize"),
    ("Context Sync", "device_synchronize"),
    ("Stream Sync", "stream_synchronize"),
    ("Event Sync", "event_synchronize"),
    ("AscendCL@aclrtSynchronizeDevice", "device_synchronize"),
    ("Runtime@DeviceSynchronize", "device_synchronize"),
    ("AscendCL@aclrtSynchronizeStream", "stream_synchronize"),
    ("AscendCL@aclrtSynchronizeStreamWithTimeout", "stream_synchronize"),
    ("Runtime@StreamSynchronize", "stream_synchronize"),
    ("Hccl@Launch_Ffts", "launch_ffts"),
    ("BARRIER", "barrier"),
    ("Node@launch", "kernel_launch"),
    ("cudaLaunchKernel", "kernel_launch"),
    ("cudaLaunchKernelExC", "kernel_launch"),
    ("cuLaunchKernel", "kernel_launch"),
    ("hipLaunchKernel", "kernel_launch"),
    ("hipExtModuleLaunchKernel", "kernel_launch"),
    ("cudaLaunchCooperativeKernel", "kernel_launch"),
    # not a sync or launch, though the words are inside
    ("Stream Wait Event", ""),
    ("cudaStreamWaitEvent", ""),
    ("cudaMemcpyAsync", ""),
    ("fbgemm::asynchronous_complete_cumsum", ""),
    (
        "void recat_copy_async_kernel<float>(long const*, long const*, float const*, float*, long, long, long)",
        "",
    ),
    ("aten::_local_scalar_dense", ""),
    ("AscendCL@hcom_allReduce_", ""),
    ("barrier_kernel_of_mine", ""),
    ("ProfilerStep#5", ""),
]


@pytest.mark.parametrize(("name", "category", "collective"), KERNELS)
def test_device_work_names_are_classified_by_words(name, category, collective):
    names = pd.Categorical([name])
    assert kernel_category(names)[0] == category
    if collective:
        assert collective_of(names)[0] == collective


@pytest.mark.parametrize(("name", "task"), TASKS)
def test_sync_and_launch_names_are_whole_api_names(name, task):
    assert task_of(pd.Categorical([name]))[0] == task


def test_the_table_holds_about_fifty_real_names():
    assert len(KERNELS) + len(TASKS) >= 50
