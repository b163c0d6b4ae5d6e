#include "kiln/graph/dump.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph_test_util.h"

namespace kiln::graph::dump_test {
namespace {
using namespace testing;

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Dump, WritesTextAndDotBeforeAndAfterPasses) {
  std::string dir = ::testing::TempDir() + "/kiln_dump_test";
  std::filesystem::remove_all(dir);
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::add(ops::mul(in[0], in[0]), in[0]))};
  };
  std::vector<Tensor> in{random_tensor({8}, 1)};
  Executable exe(trace(fn, in), {.fusion = true, .dump_dir = dir, .dump_name = "t"});
  std::string before = read(dir + "/t_0_traced.txt"), after = read(dir + "/t_1_compiled.txt");
  EXPECT_NE(before.find("= mul("), std::string::npos) << before;
  EXPECT_NE(after.find("fused[mul,add,relu]"), std::string::npos) << after;
  std::string dot = read(dir + "/t_1_compiled.dot");
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("fused kernel\\nmul\\nadd\\nrelu"), std::string::npos) << dot;
  EXPECT_NE(read(dir + "/t_0_traced.dot").find("-> out"), std::string::npos);
}

TEST(Dump, UnwritableDirectoryIsAFileError) {
  Graph g =
      trace([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::neg(in[0])}; },
            {random_tensor({2}, 1)});
  EXPECT_THROW(dump(g, "/proc/kiln_cannot_write_here", "x"), FileError);
}

}  // namespace
}  // namespace kiln::graph::dump_test
