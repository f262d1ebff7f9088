// The tokenized-data cache (`tokenized_path`): PackedSequences saved once and reused while the
// inputs that made them are unchanged.
//
// File layout, native byte order (little-endian on every supported machine):
//   "LFTTOK01" | u64 0x0102030405060708 (byte-order check) | u64 key hash | u64 key length | key
//   | i64 seq_len, num_sequences, num_tokens | i64 stats (examples, truncated,
//   dropped_untrained, dropped_tokens) | i64 offsets[num_sequences + 1] | i32 tokens[num_tokens]
//   | f32 weights[num_tokens] | i32 segments[num_tokens] | u64 FNV-1a of every byte before it
// The key is readable text, one input per line, so that a mismatch can say what changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lft/data/sft_sequences.h"

namespace lft::data {

// 64-bit FNV-1a of `bytes`, continuing from `hash`.
std::uint64_t fnv1a(const void* bytes, std::size_t size,
                    std::uint64_t hash = 0xcbf29ce484222325ULL);

// "size=<bytes> mtime=<s>.<ns>" of a file, for cache keys; throws lft::UsageError if it cannot be
// read.
std::string file_stamp(const std::string& path);

// "fnv1a64=<hex> size=<bytes>" of a file's content (e.g. a tokenizer.json); throws
// lft::UsageError if it cannot be read.
std::string file_fingerprint(const std::string& path);

// Writes `seqs` with `key` to `path` atomically (a temporary file in the same folder, renamed
// over `path`). Throws lft::UsageError naming the path when the file cannot be written.
void save_sequences(const std::string& path, const std::string& key, const PackedSequences& seqs);

// The sequences cached at `path` when the file exists, is intact and was made with `key`;
// otherwise std::nullopt with `why` saying so ("no cache", "made for other inputs: ...",
// "corrupt: ...").
std::optional<PackedSequences> load_sequences(const std::string& path, const std::string& key,
                                              std::string& why);

}  // namespace lft::data
