// Latency of one all-reduce (in place, f32) over NCCL and over peer memory (PeerAllReduce: both
// protocols, a few block configurations), nccl-tests style, under mpirun with one GPU per rank:
//
//   mpirun -np 2 k3_allreduce_bench [iters]        (default 1000)
//
// eager: `iters` all-reduces back to back on one stream between two CUDA events, time / iters.
// graph: 100 back-to-back all-reduces captured in one CUDA graph, replayed iters / 100 times
// between two events, time / iters. Each figure is the slowest rank's. Prints a markdown table.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/nccl_communicator.h"
#include "collectives/peer_allreduce.h"

using namespace k3;

namespace {

#define BENCH_CU(expr)                                                                      \
  do {                                                                                      \
    const cudaError_t e_ = (expr);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)

using AllReduceFn = std::function<absl::Status(float*, int64_t)>;

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Microseconds per all-reduce, the slowest rank's.
double Eager(const AllReduceFn& f, float* d, int64_t n, int iters, cudaStream_t s) {
  cudaEvent_t a, b;
  BENCH_CU(cudaEventCreate(&a));
  BENCH_CU(cudaEventCreate(&b));
  for (int i = 0; i < 50; ++i) Check(f(d, n));
  BENCH_CU(cudaStreamSynchronize(s));
  MPI_Barrier(MPI_COMM_WORLD);
  BENCH_CU(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) Check(f(d, n));
  BENCH_CU(cudaEventRecord(b, s));
  BENCH_CU(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CU(cudaEventElapsedTime(&ms, a, b));
  double us = 1e3 * ms / iters, worst = 0;
  MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return worst;
}

double Graph(const AllReduceFn& f, float* d, int64_t n, int iters, cudaStream_t s) {
  constexpr int kPerGraph = 100;
  cudaGraph_t g;
  cudaGraphExec_t exec;
  BENCH_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kPerGraph; ++i) Check(f(d, n));
  BENCH_CU(cudaStreamEndCapture(s, &g));
  BENCH_CU(cudaGraphInstantiate(&exec, g, 0));
  BENCH_CU(cudaGraphLaunch(exec, s));  // warm-up replay
  BENCH_CU(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  BENCH_CU(cudaEventCreate(&a));
  BENCH_CU(cudaEventCreate(&b));
  const int reps = std::max(1, iters / kPerGraph);
  MPI_Barrier(MPI_COMM_WORLD);
  BENCH_CU(cudaEventRecord(a, s));
  for (int r = 0; r < reps; ++r) BENCH_CU(cudaGraphLaunch(exec, s));
  BENCH_CU(cudaEventRecord(b, s));
  BENCH_CU(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CU(cudaEventElapsedTime(&ms, a, b));
  double us = 1e3 * ms / (reps * kPerGraph), worst = 0;
  MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int iters = argc > 1 ? std::atoi(argv[1]) : 1000;
  int n_dev = 0;
  BENCH_CU(cudaGetDeviceCount(&n_dev));
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  BENCH_CU(cudaSetDevice((local != nullptr ? std::atoi(local) : rank) % n_dev));
  cudaStream_t s;
  BENCH_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  coll::NcclOptions nccl_only{s};
  nccl_only.peer_max_bytes = 0;
  auto nccl = coll::MakeNcclCommunicator(MPI_COMM_WORLD, nccl_only);
  Check(nccl.status());
  // Peer configurations: (floats per block, threads per block); 65536 floats = one 256 KB slot.
  // flags: pull protocol (own slot, fence, flag, read the peers); inline: data pushed, its own flag.
  struct Config {
    std::string name;
    coll::PeerProtocol protocol;
    int64_t block_floats;
    int threads;
  };
  const coll::PeerProtocol kF = coll::PeerProtocol::kFlags, kI = coll::PeerProtocol::kInline;
  const std::vector<Config> configs = {{"flags 2K/512", kF, 2048, 512},   {"flags 1blk/1024", kF, 65536, 1024},
                                       {"inline 1K/256", kI, 1024, 256},  {"inline 2K/512", kI, 2048, 512},
                                       {"inline 4K/1024", kI, 4096, 1024}, {"inline 1blk/1024", kI, 65536, 1024}};
  std::vector<std::unique_ptr<coll::PeerAllReduce>> peers;
  for (const Config& c : configs) {
    coll::PeerAllReduceParams p;
    p.slot_bytes = 65536 * 4;
    p.protocol = c.protocol;
    p.block_floats = c.block_floats;
    p.threads = c.threads;
    auto made = coll::PeerAllReduce::Create(MPI_COMM_WORLD, p);
    Check(made.status());
    peers.push_back(std::move(*made));
  }
  const std::vector<int64_t> sizes = {3584, 7168, 10752, 14336, 65536};
  float* d = nullptr;
  BENCH_CU(cudaMalloc(&d, 65536 * sizeof(float)));
  BENCH_CU(cudaMemset(d, 0, 65536 * sizeof(float)));  // zeros stay zeros: no overflow over iterations
  // NCCL connects on first use, outside any capture.
  Check((*nccl)->AllReduceSum(d, 65536));
  BENCH_CU(cudaStreamSynchronize(s));

  std::vector<std::pair<std::string, AllReduceFn>> paths;
  paths.emplace_back("NCCL", [&](float* p, int64_t n) { return (*nccl)->AllReduceSum(p, n); });
  for (size_t i = 0; i < peers.size(); ++i) {
    coll::PeerAllReduce* pr = peers[i].get();
    paths.emplace_back(configs[i].name, [pr, s](float* p, int64_t n) { return pr->AllReduceSum(p, n, s); });
  }
  std::vector<std::vector<double>> eager(sizes.size()), graph(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (const auto& [name, f] : paths) {
      eager[k].push_back(Eager(f, d, sizes[k], iters, s));
      graph[k].push_back(Graph(f, d, sizes[k], iters, s));
    }
  }
  for (const auto& pr : peers) Check(pr->CheckHealth());
  if (rank == 0) {
    std::printf("\nall-reduce latency, us per call (slowest of %d ranks), %d iterations; eager | graph\n\n", ranks, iters);
    std::printf("| floats | KB |");
    for (const auto& [name, f] : paths) std::printf(" %s eager | %s graph |", name.c_str(), name.c_str());
    std::printf(" best peer graph vs NCCL graph |\n|---:|---:|");
    for (size_t i = 0; i < paths.size(); ++i) std::printf("---:|---:|");
    std::printf("---:|\n");
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::printf("| %lld | %.1f |", static_cast<long long>(sizes[k]), sizes[k] * 4 / 1024.0);
      double best = 1e30;
      for (size_t i = 0; i < paths.size(); ++i) {
        std::printf(" %.2f | %.2f |", eager[k][i], graph[k][i]);
        if (i > 0) best = std::min(best, graph[k][i]);
      }
      std::printf(" %.2fx |\n", graph[k][0] / best);
    }
    std::fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  peers.clear();
  nccl->reset();
  cudaFree(d);
  cudaStreamDestroy(s);
  MPI_Finalize();
  return 0;
}
