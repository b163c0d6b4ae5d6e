#pragma once
// What oneDNN reports (its verbose mode, level 2: every primitive built and run) while `run`
// runs, for tests that check which primitives a kernel builds.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>
#include <string>

namespace kiln::testing {

template <class F>
std::string dnnl_verbose_output(F run) {
  ::testing::internal::CaptureStdout();
  dnnl::set_verbose(2);
  run();
  dnnl::set_verbose(0);
  std::fflush(stdout);
  return ::testing::internal::GetCapturedStdout();
}

}  // namespace kiln::testing
