// The MPI-aware GoogleTest main: MPI is initialised once, every rank runs every test, rank 0
// prints the full report, other ranks print only their failures, and the exit status is the
// worst over all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include "lft/comm/mpi_progress.h"
#include "lft/comm/watchdog.h"
#include "lft/model/fused.h"
#include "lft/runtime/runtime.h"

namespace {

// On ranks other than 0: print failed assertions with the rank, nothing else.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  lft::Runtime rt(&argc, &argv);
  lft::Watchdog::set_timeouts(120, 120);  // a hung test ends with a report, not at ctest's limit
  lft::Watchdog::start();
  testing::InitGoogleTest(&argc, argv);
  // As lftrain's default (fused_kernels = "all"): the engines' parity tests run the fused kernels.
  if (lft::model::fused_kernels_supported()) lft::model::set_fused_kernels(lft::model::kFusedAll);
  if (rt.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rt.rank()));
  }
  int local = 0;
  {
    const lft::MpiProgressThread progress(std::chrono::microseconds(1000));  // as lftrain's default
    local = RUN_ALL_TESTS();
  }
  int worst = 0;
  MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  lft::Watchdog::stop();
  return worst;
}
