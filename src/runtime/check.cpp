#include "lft/runtime/check.h"

#include <H5Epublic.h>
#include <mpi.h>

#include <string>

#include "lft/runtime/error.h"

namespace lft::detail {

void mpi_call_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  fatal_one(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + text);
}

void hdf5_call_failed(long long code, const char* call, const char* file, int line) {
  H5Eprint2(H5E_DEFAULT, stderr);  // HDF5's own error stack says which object and why
  fatal_one(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
            " (HDF5 returned " + std::to_string(code) + "; its error stack is printed above)");
}

}  // namespace lft::detail
