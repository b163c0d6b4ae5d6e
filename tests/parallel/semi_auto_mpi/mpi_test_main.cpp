// SEMI_AUTO_PARALLEL's tests run as one job of 2 or 4 ranks (ctest starts both under mpirun):
// every rank runs every test, in the same order, so the collectives inside them match.
#include <gtest/gtest.h>

#include "kiln/comm/communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kiln::comm::init();
  if (kiln::comm::rank() != 0) {
    // One rank's report is enough; a failure on another rank still fails its exit status.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
