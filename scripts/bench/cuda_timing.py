"""Timing a CUDA callable with CUDA events, shared by the PyTorch baselines of the GPU benchmarks."""
import torch


def event_times_ms(fn, warmup, reps):
    """Runs fn `warmup` times untimed, then `reps` times each between two CUDA events; the sorted times in ms."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)
