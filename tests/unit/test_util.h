// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

// Passes when `needle` occurs in `haystack`; prints both when it does not.
#define EXPECT_CONTAINS(haystack, needle)                                                   \
  do {                                                                                      \
    const std::string lft_h_ = (haystack);                                                  \
    const std::string lft_n_ = (needle);                                                    \
    EXPECT_NE(lft_h_.find(lft_n_), std::string::npos) << "missing: " << lft_n_ << "\nin:\n" \
                                                      << lft_h_;                            \
  } while (0)

namespace lft::test {

// The message of the `Error` that `action` throws, or "" and a test failure.
template <class Error, class Action>
std::string message_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected another exception type, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception; none was thrown";
  return "";
}

}  // namespace lft::test
