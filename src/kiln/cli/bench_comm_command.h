#pragma once
// `kiln bench comm [-n RANKS] [--tcp] [--repeats R] [--no-save]`: measures the job's collectives
// (Kiln's communicator: all_reduce and all_gather from 4 KiB to 64 MiB, buffers kept across
// calls), fits the α-β model AUTO_PARALLEL plans with (parallel/comm_cost.h) and saves it where
// kiln plan and kiln train find it (train/machine_model_file.h). Started without mpirun it runs
// itself as an N-rank job (as kiln launch does).
namespace CLI {
class App;
}

namespace kiln::cli {

void add_bench_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_bench_command;
