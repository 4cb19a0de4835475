// The one-shot peer-memory all-reduce (collectives/peer_allreduce.h) and its use by the NCCL
// communicator, under mpirun, one GPU per rank:
//
//   mpirun -np 2 peer_allreduce_test
//
// Every rank generates every rank's random input (seeded by rank and case), so each checks its
// result against the CPU sum in rank order, bit for bit, and against NCCL's within 1e-6 relative.
// Cases: the decode step's sizes and odd ones; long runs of calls without a sync (epochs through
// both slots, blocks of every config); an unaligned pointer; a CUDA graph replayed 100 times with
// new inputs between replays; sizes above the peer maximum (the NCCL fallback); the bounded wait
// (one rank calls alone and must time out, not hang). Failures are checked on every rank alike:
// no rank leaves a collective that another entered.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/nccl_communicator.h"
#include "collectives/peer_allreduce.h"

namespace k3::coll {
namespace {

int g_rank = 0, g_size = 1;
cudaStream_t g_stream = nullptr;
std::unique_ptr<Communicator> g_comm;  // NCCL communicator with the peer path (the default)
std::unique_ptr<Communicator> g_nccl;  // NCCL only (peer_max_bytes = 0): the reference

#define CU(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Rank r's input of case `seed`: n floats in [-1, 1).
std::vector<float> Input(uint32_t seed, int r, int64_t n) {
  std::mt19937 gen(seed * 131u + static_cast<uint32_t>(r));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  return v;
}

// Σ over ranks in rank order, in float: what every rank must hold after the all-reduce.
std::vector<float> CpuSum(uint32_t seed, int64_t n) {
  std::vector<float> acc = Input(seed, 0, n);
  for (int r = 1; r < g_size; ++r) {
    const std::vector<float> v = Input(seed, r, n);
    for (int64_t i = 0; i < n; ++i) acc[i] += v[i];
  }
  return acc;
}

// Elements whose bits differ; the first one printed.
int64_t BitMismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (bad == 0) std::printf("rank %d %s: [%zu] %.9g != %.9g\n", g_rank, what, i, got[i], want[i]);
      ++bad;
    }
  }
  return bad;
}

std::vector<float> Download(const float* d, int64_t n) {
  std::vector<float> h(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, g_stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(g_stream), cudaSuccess);
  return h;
}

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(int64_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(float)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

TEST(PeerAllReduce, IsAvailable) {
  const absl::Status s = PeerAllReduceStatus(*g_comm);
  std::printf("rank %d: peer path %s\n", g_rank, s.ok() ? "on" : std::string(s.message()).c_str());
  EXPECT_TRUE(s.ok()) << s;
}

// The decode step's sizes, odd ones and the exact maximum: bit-exact to the CPU's rank-order sum;
// within 1e-6 relative of NCCL.
TEST(PeerAllReduce, SizesMatchCpuAndNccl) {
  const int64_t max_floats = kPeerAllReduceMaxBytes / 4;
  uint32_t seed = 1;
  for (int64_t n : {int64_t{7168}, int64_t{3584}, int64_t{10752}, int64_t{1}, int64_t{33}, int64_t{4099}, max_floats}) {
    ++seed;
    const std::vector<float> in = Input(seed, g_rank, n), want = CpuSum(seed, n);
    DeviceBuffer peer(n), nccl(n);
    CU(cudaMemcpy(peer.p, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(nccl.p, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    ASSERT_TRUE(g_comm->AllReduceSum(peer.p, n).ok());
    ASSERT_TRUE(g_nccl->AllReduceSum(nccl.p, n).ok());
    const std::vector<float> got = Download(peer.p, n), ref = Download(nccl.p, n);
    EXPECT_EQ(BitMismatches(got, want, "peer vs cpu"), 0) << "n=" << n;
    double worst = 0;
    int64_t nccl_bits = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - ref[i]) / std::max(1e-30, std::abs(double(ref[i]))));
      nccl_bits += std::memcmp(&got[i], &ref[i], 4) != 0;
    }
    EXPECT_LE(worst, 1e-6) << "n=" << n;
    if (g_rank == 0) std::printf("n=%lld: peer == cpu; vs NCCL worst rel %.3g, %lld elements differ in bits\n",
                                 static_cast<long long>(n), worst, static_cast<long long>(nccl_bits));
  }
}

// Many calls enqueued back to back (no sync), each on its own buffer: epochs advance through both
// slots many times, with fast ranks starting the next call while a peer still reads. Both
// protocols of PeerAllReduce itself, each with several blocks and with one block for every size,
// then the communicator; one buffer unaligned (the scalar path).
TEST(PeerAllReduce, BackToBack) {
  std::vector<PeerAllReduceParams> configs;
  for (PeerProtocol proto : {PeerProtocol::kInline, PeerProtocol::kFlags}) {
    PeerAllReduceParams several;
    several.protocol = proto;
    PeerAllReduceParams one_block = several;
    one_block.block_floats = one_block.slot_bytes / 4;
    one_block.threads = 1024;
    configs.push_back(several);
    configs.push_back(one_block);
  }
  std::vector<std::unique_ptr<PeerAllReduce>> peers;
  for (const PeerAllReduceParams& p : configs) {
    auto made = PeerAllReduce::Create(MPI_COMM_WORLD, p);
    ASSERT_TRUE(made.ok()) << made.status();
    peers.push_back(std::move(*made));
  }
  const int64_t sizes[] = {7168, 3584, 10752, 1, 33, 4099, 14336};
  constexpr int kCalls = 300;
  for (int path = 0; path <= static_cast<int>(peers.size()); ++path) {
    std::vector<int64_t> off(kCalls + 1, 0);
    for (int c = 0; c < kCalls; ++c) off[c + 1] = off[c] + sizes[c % 7] + 4;
    DeviceBuffer buf(off[kCalls] + 1);
    std::vector<float> host(static_cast<size_t>(off[kCalls] + 1));
    for (int c = 0; c < kCalls; ++c) {
      const std::vector<float> in = Input(1000 * (path + 1) + c, g_rank, sizes[c % 7]);
      std::copy(in.begin(), in.end(), host.begin() + off[c] + (c == 5 ? 1 : 0));  // call 5 unaligned
    }
    CU(cudaMemcpy(buf.p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (int c = 0; c < kCalls; ++c) {
      float* d = buf.p + off[c] + (c == 5 ? 1 : 0);
      const int64_t n = sizes[c % 7];
      const absl::Status s = path < static_cast<int>(peers.size()) ? peers[path]->AllReduceSum(d, n, g_stream)
                                                                   : g_comm->AllReduceSum(d, n);
      ASSERT_TRUE(s.ok()) << s;
    }
    const std::vector<float> got = Download(buf.p, off[kCalls] + 1);
    int64_t bad_calls = 0;
    for (int c = 0; c < kCalls; ++c) {
      const int64_t n = sizes[c % 7];
      const std::vector<float> want = CpuSum(1000 * (path + 1) + c, n);
      const auto first = got.begin() + off[c] + (c == 5 ? 1 : 0);
      bad_calls += BitMismatches(std::vector<float>(first, first + n), want, "back-to-back") != 0;
    }
    EXPECT_EQ(bad_calls, 0) << "path " << path << " (0/1: inline, several blocks/one block; 2/3: flags; 4: communicator)";
  }
  for (const auto& p : peers) EXPECT_TRUE(p->CheckHealth().ok());
  MPI_Barrier(MPI_COMM_WORLD);  // no rank frees its buffers while a peer may still read them
}

// kInline sends -0.0 as +0.0 (-0.0 marks an empty slot): still the sum, up to the sign of a zero.
TEST(PeerAllReduce, InlineNegativeZero) {
  const int64_t n = 4099;
  std::vector<float> in = Input(99, g_rank, n), want = CpuSum(99, n);
  for (int64_t i = 0; i < n; i += 7) in[i] = -0.f;
  DeviceBuffer d(n);
  CU(cudaMemcpy(d.p, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  ASSERT_TRUE(g_comm->AllReduceSum(d.p, n).ok());
  const std::vector<float> got = Download(d.p, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float w = i % 7 == 0 ? 0.f : want[i];  // every rank's term is a zero there
    bad += got[i] != w;
  }
  EXPECT_EQ(bad, 0);
}

// A graph of the decode step's three all-reduces plus one above the peer maximum (NCCL inside the
// same graph), replayed 100 times with new inputs copied in between replays.
TEST(PeerAllReduce, GraphReplays) {
  const int64_t big = kPeerAllReduceMaxBytes / 4 + 1000;
  const int64_t sizes[] = {7168, 3584, 10752, big};
  DeviceBuffer bufs[] = {DeviceBuffer(sizes[0]), DeviceBuffer(sizes[1]), DeviceBuffer(sizes[2]), DeviceBuffer(sizes[3])};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CU(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(g_comm->AllReduceSum(bufs[k].p, sizes[k]).ok());
  CU(cudaStreamEndCapture(g_stream, &graph));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  int64_t bad = 0;
  double worst_big = 0;
  for (int rep = 0; rep < 100; ++rep) {
    std::vector<std::vector<float>> in(4);
    for (int k = 0; k < 4; ++k) {
      in[k] = Input(5000 + 10 * rep + k, g_rank, sizes[k]);
      CU(cudaMemcpyAsync(bufs[k].p, in[k].data(), sizes[k] * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    }
    CU(cudaGraphLaunch(exec, g_stream));
    for (int k = 0; k < 4; ++k) {
      const std::vector<float> got = Download(bufs[k].p, sizes[k]), want = CpuSum(5000 + 10 * rep + k, sizes[k]);
      if (k < 3) {
        bad += BitMismatches(got, want, "graph replay") != 0;
      } else {
        for (int64_t i = 0; i < sizes[k]; ++i) {
          worst_big = std::max(worst_big, std::abs(double(got[i]) - want[i]) / std::max(1e-30, std::abs(double(want[i]))));
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "replays with a peer all-reduce that differs from the CPU";
  EXPECT_LE(worst_big, 1e-6) << "the NCCL all-reduce in the graph";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_TRUE(CheckPeerHealth(*g_comm).ok());
}

// Above the peer maximum the communicator takes NCCL: still the sum.
TEST(PeerAllReduce, FallbackAboveMax) {
  for (int64_t n : {kPeerAllReduceMaxBytes / 4 + 1, int64_t{65536}, int64_t{1} << 20}) {
    const std::vector<float> in = Input(77, g_rank, n), want = CpuSum(77, n);
    DeviceBuffer d(n);
    CU(cudaMemcpy(d.p, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    ASSERT_TRUE(g_comm->AllReduceSum(d.p, n).ok());
    const std::vector<float> got = Download(d.p, n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::max(1e-30, std::abs(double(want[i]))));
    }
    EXPECT_LE(worst, 1e-6) << "n=" << n;
  }
  EXPECT_TRUE(g_comm->Barrier().ok());
}

// Only rank 0 calls: its wait for rank 1's flag must end after the bound (0.2 s) with the sticky
// error, not hang; the next call fails at once. Rank 1's buffer is healthy (it never called).
TEST(PeerAllReduce, TimeoutInsteadOfHang) {
  PeerAllReduceParams p;
  p.timeout_s = 0.2;
  auto lone = PeerAllReduce::Create(MPI_COMM_WORLD, p);
  ASSERT_TRUE(lone.ok()) << lone.status();
  DeviceBuffer d(7168);
  CU(cudaMemset(d.p, 0, 7168 * sizeof(float)));
  if (g_rank == 0) {
    EXPECT_TRUE((*lone)->AllReduceSum(d.p, 7168, g_stream).ok());
    CU(cudaStreamSynchronize(g_stream));
    const absl::Status h = (*lone)->CheckHealth();
    EXPECT_EQ(h.code(), absl::StatusCode::kDeadlineExceeded) << h;
    EXPECT_FALSE((*lone)->AllReduceSum(d.p, 7168, g_stream).ok());
  } else {
    EXPECT_TRUE((*lone)->CheckHealth().ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerAllReduce, StaysHealthy) {
  EXPECT_TRUE(CheckPeerHealth(*g_comm).ok());
  EXPECT_TRUE(g_comm->Barrier().ok());
}

}  // namespace
}  // namespace k3::coll

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  using namespace k3::coll;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  ::testing::InitGoogleTest(&argc, argv);
  if (g_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || g_size < 2) {
    std::printf("needs a CUDA device per rank and at least 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 0;
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int dev = (local != nullptr ? std::atoi(local) : g_rank) % n_dev;
  cudaSetDevice(dev);
  cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
  auto comm = MakeNcclCommunicator(MPI_COMM_WORLD, {g_stream});
  NcclOptions nccl_only{g_stream};
  nccl_only.peer_max_bytes = 0;
  auto nccl = MakeNcclCommunicator(MPI_COMM_WORLD, nccl_only);
  if (!comm.ok() || !nccl.ok()) {
    std::fprintf(stderr, "rank %d: NCCL: %s %s\n", g_rank, std::string(comm.status().message()).c_str(),
                 std::string(nccl.status().message()).c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  g_comm = std::move(*comm);
  g_nccl = std::move(*nccl);
  // NCCL connects on first use, which must not happen inside a graph capture.
  float* warm = nullptr;
  cudaMalloc(&warm, (1 << 20) * sizeof(float));
  cudaMemset(warm, 0, (1 << 20) * sizeof(float));
  (void)g_comm->AllReduceSum(warm, 1 << 20);
  (void)g_nccl->AllReduceSum(warm, 1 << 20);
  cudaStreamSynchronize(g_stream);
  cudaFree(warm);
  std::printf("rank %d of %d on GPU %d of %d\n", g_rank, g_size, dev, n_dev);
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  g_comm.reset();
  g_nccl.reset();
  cudaStreamDestroy(g_stream);
  MPI_Finalize();
  return worst;
}
