// SLUICE_HOST_DEVICE marks an inline function compiled for both the host and, under nvcc, the
// device, so the CPU backend and the CUDA kernels share one definition.
#pragma once

#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif
