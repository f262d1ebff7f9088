// Built only when LFT_HAS_NCCL (CMake drops nccl_*.cpp otherwise).
#include <string>

#include "lft/runtime/cuda_check.h"
#include "lft/runtime/error.h"

namespace lft::detail {

void cuda_call_failed(cudaError_t code, const char* call, const char* file, int line) {
  fatal_one(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
            cudaGetErrorName(code) + ": " + cudaGetErrorString(code));
}

void nccl_call_failed(ncclResult_t code, const char* call, const char* file, int line) {
  fatal_one(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
            ncclGetErrorString(code) + " (run with NCCL_DEBUG=WARN for NCCL's own report)");
}

}  // namespace lft::detail
