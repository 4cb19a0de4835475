// The launch configuration as typed data: what the YAML file says, with every path made
// absolute and the place of every key in the file kept, so that later checks (placement, fit)
// can name the line at fault. Parsed by config_parser.h, checked by config_check.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace k3::launch {

// A position in the config file, 1-based. Line 0: not from the file (a --set override).
struct Loc {
  int line = 0;
  int column = 0;
};

// Where the keys of one YAML map sit. Values of list keys are kept per element too, as
// "gpus[2]". A key that is absent falls back to the map itself.
struct KeyLocs {
  Loc self;
  std::map<std::string, Loc> keys;
  Loc At(const std::string& key) const {
    auto it = keys.find(key);
    return it == keys.end() ? self : it->second;
  }
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

// A model made by k3-synth when its file is absent.
struct SyntheticModel {
  std::string preset;              // tiny|small|tp8|slice|full
  int64_t seed = 1;
  std::string output;              // absolute: the path given to k3-synth -o
  std::string quant = "UD-IQ1_S";  // k3-synth --quant
  int shards = 1;                  // k3-synth --shards (full: 14 by default)
  // No weights on disk: every rank fills its shard on its GPU from the seed (k3-worker --synth) and
  // only the metadata is written (k3-synth --header-only), for the coordinator. GPU groups only.
  bool in_memory = false;
};

struct ModelSpec {
  std::string path;  // absolute: what the workers open (synthetic: the first generated file)
  std::optional<SyntheticModel> synthetic;
  KeyLocs where;
};

enum class Backend { kCpu, kCuda };

// k3-worker's own prefill chunk (CudaEngineOptions::prefill_chunk) when a group names none.
inline constexpr int64_t kWorkerPrefillChunk = 512;

struct WorkerGroupSpec {
  std::string name;
  Backend backend = Backend::kCpu;
  std::vector<std::string> hosts;  // from `hosts`, or read from `hostfile`
  std::vector<int> host_slots;     // slots=N of each hostfile line, 0 when not given
  std::vector<int> host_lines;     // the hostfile line of each host, 0 for `hosts`
  std::string hostfile;            // absolute; empty when `hosts` was given
  int ranks_per_host = 1;
  int gpus_per_host = 0;           // 0: not given (no range check)
  std::vector<int> gpus;           // GPU of each local rank (length ranks_per_host) or of each rank
  std::vector<int> numa_nodes;     // NUMA node of each local rank or rank (numactl); empty: none
  std::string bind_to;             // mpirun --bind-to; empty: Open MPI's default
  std::string map_by;              // mpirun --map-by; empty: Open MPI's default
  int tensor_parallel = 0;         // 0: not given; else must equal ranks()
  int expert_groups = 0;           // 0: not given (= ranks())
  std::string listen;              // the leader's --serve address
  std::string address;             // what the coordinator dials; empty: derived from listen
  int64_t max_seqs = 8;
  int64_t cache_tokens = 0;        // 0: max_seqs x context (the worker's default)
  int64_t timeout_ms = 60000;
  double gpu_memory_gib = 0;       // 0: an H200
  EnvList env;
  std::vector<std::string> mpirun_args;
  std::vector<std::string> worker_args;
  // The leader's access control (absolute paths; empty: off): k3-worker --auth-token-file,
  // --tls-cert/--tls-key, --coordinator-timeout (seconds; 0: wait for a coordinator forever).
  std::string auth_token_file, tls_cert, tls_key;
  int64_t coordinator_timeout_s = 0;
  int step_port = 0;  // k3-worker --step-port: steps over the step channel; 0: gRPC steps
  // cuda groups: k3-worker --prefill-chunk, prompt tokens per prefill forward (its working buffers,
  // and the fit check's); 0: the worker's default, kWorkerPrefillChunk.
  int64_t prefill_chunk = 0;
  KeyLocs where;

  int ranks() const { return static_cast<int>(hosts.size()) * ranks_per_host; }
  int expert_groups_or_default() const { return expert_groups > 0 ? expert_groups : ranks(); }
};

struct CoordinatorSpec {
  std::string listen = "127.0.0.1:50051";
  int64_t metrics_port = 0;  // 0: no metrics endpoint
  int64_t token_budget = 512;
  int64_t prefill_chunk = 256;
  int64_t idle_prefill_chunk = 16384;  // prompt tokens per step while no sequence decodes
  int64_t max_queue = 256;
  int64_t max_tokens_limit = 0;
  int64_t max_prompt_tokens = 0;
  int64_t max_concurrent_per_client = 0;  // 0: no limit
  // Access control (absolute paths; empty: off): the clients' token and TLS, the CA clients (and
  // the launcher's smoke test) trust (default tls_cert, right for a self-signed one), and what
  // the leaders want (their token, the CA of their certificates).
  std::string auth_token_file, tls_cert, tls_key, tls_ca, worker_token_file, worker_tls_ca;
  EnvList env;
  KeyLocs where;
};

struct LoggingSpec {
  std::string dir;  // absolute; default /tmp/k3-launch-<config name>
  std::string level = "info";
  KeyLocs where;
};

enum class ProfTool { kNcu, kNsys, kComputeSanitizer };

struct ProfilingSpec {
  bool enabled = false;
  ProfTool tool = ProfTool::kNsys;
  std::string path;                 // the tool's executable; default its name (PATH of each host)
  bool all_ranks = false;
  std::vector<int> ranks;           // ranks of each profiled group
  std::vector<std::string> groups;  // empty: every group
  std::vector<std::string> args;    // extra tool arguments, before the program
  KeyLocs where;

  bool Profiles(const std::string& group, int rank) const;
};

struct LaunchConfig {
  std::string file;      // the config file as given (for messages)
  std::string base_dir;  // relative paths in the file are relative to this (the file's folder)
  ModelSpec model;
  std::vector<WorkerGroupSpec> groups;
  CoordinatorSpec coordinator;
  LoggingSpec logging;
  ProfilingSpec profiling;
  KeyLocs where;  // the top-level keys
};

std::string BackendName(Backend b);
std::string ToolName(ProfTool t);
// "file:line:col: " (or "file (--set): " for a value from an override).
std::string Where(const std::string& file, Loc loc);

}  // namespace k3::launch
