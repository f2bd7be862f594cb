// The CUDA backend's kernels, compiled by the host compiler to run under
// tests/trainer/simt_emulator.h: with tests/trainer/emulated_device.cc, the device of
// trainer_emulated_cuda_backend_test.
#include "tests/trainer/simt_emulator.h"
// (the emulator's macros must come first)
#include "trainer/cuda_kernels.cu"
#include "trainer/cuda_loss_kernels.cu"
#include "trainer/cuda_optimizer_kernels.cu"
// (SetBlockOrder, below)
#include "tests/trainer/emulated_device.h"

namespace sluice_emulated {

void SetBlockOrder(BlockOrder order) {
  switch (order) {
    case BlockOrder::kForward:
      return sluice_simt::SetOrder(sluice_simt::Order::kForward);
    case BlockOrder::kReverse:
      return sluice_simt::SetOrder(sluice_simt::Order::kReverse);
    case BlockOrder::kShuffled:
      return sluice_simt::SetOrder(sluice_simt::Order::kShuffled);
  }
}

}  // namespace sluice_emulated
