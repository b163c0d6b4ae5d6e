// Kiln's all-reduce against OpenMPI's own MPI_Allreduce called directly, all in place on buffers
// kept across calls, sizes 4 KiB to 64 MiB, alternating rounds so all see the same machine:
//  - Kiln blocking: comm::all_reduce (MPI_Allreduce on the caller's thread when the
//    communicator's thread is idle);
//  - Kiln async: comm::all_reduce_async + wait, the path data parallelism's buckets take
//    (MPI_Iallreduce on the communicator's thread, polled).
// Prints, per size, each one's median time, bus bandwidth (2 (n-1)/n · bytes / time, the traffic
// a ring all-reduce moves per rank) and ratio to MPI's, and a CSV for alpha_beta.py.
//
//   mpirun -np 2 build/bench/kiln_allreduce_bench [--csv FILE]
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds per call over `rounds` rounds of `reps` calls (every rank runs the same count).
template <class F>
double time_calls(F call, int reps) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = seconds_now();
  for (int i = 0; i < reps; ++i) call();
  double t = (seconds_now() - t0) / reps;
  // The slowest rank's time is the collective's.
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--csv") csv_path = argv[i + 1];
  }
  kiln::comm::init();
  const int rank = kiln::comm::rank(), n = kiln::comm::size();
  if (n < 2) {
    std::fprintf(stderr, "run under mpirun with 2 or more ranks\n");
    return 2;
  }
  FILE* csv = nullptr;
  if (rank == 0 && !csv_path.empty()) {
    csv = std::fopen(csv_path.c_str(), "w");
    if (csv) std::fprintf(csv, "ranks,bytes,mpi_s,kiln_s,kiln_async_s\n");
  }
  if (rank == 0) {
    std::printf("%10s %10s %10s %10s %9s %9s %9s %9s %9s\n", "bytes", "MPI us", "Kiln us",
                "async us", "MPI GB/s", "Kiln GB/s", "async GB/s", "Kiln/MPI", "async/MPI");
  }
  for (int64_t bytes = 4096; bytes <= (int64_t(64) << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    std::vector<float> a(size_t(count), 1.0f), b(size_t(count), 1.0f), c(size_t(count), 1.0f);
    const int reps = int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 4, 2000));
    auto mpi = [&] {
      MPI_Allreduce(MPI_IN_PLACE, a.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    auto kiln = [&] { kiln::comm::all_reduce(b.data(), count, kiln::DType::f32); };
    auto async = [&] { kiln::comm::all_reduce_async(c.data(), count, kiln::DType::f32).wait(); };
    // Warm both paths (first touch, OpenMPI's connection set-up).
    time_calls(mpi, 2);
    time_calls(kiln, 2);
    time_calls(async, 2);
    std::vector<double> mpi_s, kiln_s, async_s;
    for (int round = 0; round < 5; ++round) {
      mpi_s.push_back(time_calls(mpi, reps));
      kiln_s.push_back(time_calls(kiln, reps));
      async_s.push_back(time_calls(async, reps));
    }
    const double tm = median(mpi_s), tk = median(kiln_s), ta = median(async_s);
    const double traffic = 2.0 * (n - 1) / n * double(bytes);
    if (rank == 0) {
      std::printf("%10lld %10.1f %10.1f %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  static_cast<long long>(bytes), tm * 1e6, tk * 1e6, ta * 1e6, traffic / tm / 1e9,
                  traffic / tk / 1e9, traffic / ta / 1e9, tm / tk, tm / ta);
      if (csv) {
        std::fprintf(csv, "%d,%lld,%.9f,%.9f,%.9f\n", n, static_cast<long long>(bytes), tm, tk, ta);
      }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
