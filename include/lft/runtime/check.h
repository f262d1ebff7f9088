// Check macros for library calls that report failure through a return code. A failure is a
// one-rank error: it names the failing call, file:line, the rank and the library's own message,
// then aborts the job (error.h). CUDA and NCCL have theirs in cuda_check.h.
#pragma once

namespace lft::detail {
[[noreturn]] void mpi_call_failed(int code, const char* call, const char* file, int line);
[[noreturn]] void hdf5_call_failed(long long code, const char* call, const char* file, int line);
}  // namespace lft::detail

#define LFT_MPI_CHECK(call)                                             \
  do {                                                                  \
    int lft_mpi_rc_ = (call);                                           \
    if (lft_mpi_rc_ != 0 /* MPI_SUCCESS */)                             \
      ::lft::detail::mpi_call_failed(lft_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative herr_t/hid_t on failure.
#define LFT_H5_CHECK(call)                                                  \
  ([&]() {                                                                  \
    auto lft_h5_rc_ = (call);                                               \
    if (lft_h5_rc_ < 0)                                                     \
      ::lft::detail::hdf5_call_failed(static_cast<long long>(lft_h5_rc_), #call, __FILE__, __LINE__); \
    return lft_h5_rc_;                                                      \
  }())
