// Reading a pre-training corpus: a file of plain-text documents. The SFT formats (alpaca,
// sharegpt, LlamaFactory v1 messages) and chat templates are later dataset work; a file in one of
// those formats is rejected with a message that says so.
#pragma once

#include <string>
#include <vector>

namespace lft::data {

// The documents of the text corpus at `path`, in file order. The format follows the extension
// (case-insensitive):
//   .txt    one document per line; empty and whitespace-only lines are skipped
//   .jsonl  one JSON object per line with a string field "text"; blank lines are skipped
//   .json   a JSON array of objects with a string field "text" (a file that holds JSON lines
//           instead of an array is read as .jsonl, as Hugging Face `datasets` does)
// Records whose "text" is empty are skipped. A trailing '\r' (CRLF files) and a leading UTF-8 BOM
// are removed; everything else is kept byte for byte.
// Throws lft::UsageError, naming "path:line" where there is one, for an unreadable file, an
// unsupported extension, invalid JSON, a record that is not an object, a missing or non-string
// "text" field (SFT-format records get a message naming their format and fields), and a corpus
// with no documents.
std::vector<std::string> read_text_corpus(const std::string& path);

}  // namespace lft::data
