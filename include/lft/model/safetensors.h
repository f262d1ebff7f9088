// The safetensors file format (hf-formats notes, section 1): an 8-byte little-endian header
// length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// optional "__metadata__": {str: str}}), then the tensor data, row-major, little-endian.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "lft/runtime/error.h"

namespace lft::model {

// A malformed or unreadable file. The message names the file and, where it applies, the tensor.
// A UsageError: every rank reading the same file reaches the same verdict.
class SafetensorsError : public lft::UsageError {
 public:
  using lft::UsageError::UsageError;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the file: "BF16", "F32", ...
  c10::ScalarType scalar_type = c10::ScalarType::Undefined;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the data buffer; end exclusive
  std::uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;  // file offset of the data buffer: 8 + N
  std::uint64_t file_size = 0;

  const SafetensorsEntry* find(const std::string& name) const;
};

// Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 U16 U32 U64 BOOL F8_E4M3 F8_E5M2.
// The safetensors dtype string of a scalar type (throws SafetensorsError when unsupported).
std::string safetensors_dtype(c10::ScalarType type);

// Reads and validates the header as the reference implementation does: N <= 100,000,000, valid
// JSON object, known dtypes, shapes of non-negative integers, end - begin == numel * element size,
// tensors tiling the data buffer exactly (no gaps, overlaps or trailing bytes), metadata values
// strings.
SafetensorsHeader read_safetensors_header(const std::string& path);

// One tensor (CPU, contiguous, its file dtype), read with pread.
at::Tensor read_safetensors_tensor(const std::string& path, const SafetensorsHeader& header,
                                   const std::string& name);

// Rows [row_begin, row_begin + rows) of dim 0 of one tensor (a 0-d tensor has one row), read
// with one pread of just those bytes: a rank that keeps a shard reads only the shard.
at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsHeader& header,
                                 const std::string& name, std::int64_t row_begin, std::int64_t rows);

// Every tensor of the file. `metadata`, when given, receives __metadata__.
std::map<std::string, at::Tensor> read_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes `tensors` (any device; they are copied to the CPU, made contiguous) as the reference
// writer does: compact JSON with __metadata__ first, header padded with spaces to a multiple of 8,
// tensors ordered by element size (largest first) then by name. Writes <path>.tmp and renames it,
// so a reader never sees a half-written file. Throws SafetensorsError on I/O errors.
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lft::model
