"""The nvidia_gpu driver's concerns, one module each, as NVIDIA's own DRA driver keeps
them: ``discovery`` (the GPUs and their devices, nvidia-smi and NVML), ``vgpu`` (mediated
devices and the install step), ``mig`` (MIG instances), ``health`` (AER and NVML) and
``cdi`` (container edits). The driver class, which mixes them, and its entry point are
exosuit/drivers/nvidia_gpu.py (``exosuit.drivers.nvidia_gpu:NvidiaGpuDriver``); its
partitions are exosuit/drivers/nvidia_partitions.py.
"""

__all__: list[str] = []
