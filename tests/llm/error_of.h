// SPDX-License-Identifier: Apache-2.0
// A helper of the LLM runtime's tests: the message of the error a call must throw.
#ifndef KILN_TESTS_LLM_ERROR_OF_H_
#define KILN_TESTS_LLM_ERROR_OF_H_

#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace kiln::llm::testing {

// Runs `f`, which must throw E; returns the message (a test failure and "" otherwise).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace kiln::llm::testing

#endif  // KILN_TESTS_LLM_ERROR_OF_H_
