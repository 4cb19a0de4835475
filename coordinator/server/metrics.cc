#include "coordinator/server/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace k3::coord {

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> l(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

std::string Histogram::Render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string s = absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    absl::StrAppendFormat(&s, "%s_bucket{le=\"%g\"} %d\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  absl::StrAppendFormat(&s, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, cum, name, sum_, name, n_);
  return s;
}

std::string Metrics::Render() const {
  std::string s;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    absl::StrAppendFormat(&s, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v);
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    absl::StrAppendFormat(&s, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v);
  };
  counter("k3_requests_total", "Generation requests received.", requests_total.load());
  counter("k3_requests_failed_total", "Requests that ended with an error.", requests_failed.load());
  counter("k3_requests_cancelled_total", "Requests cancelled by the client or its deadline.", requests_cancelled.load());
  counter("k3_prompt_tokens_total", "Prompt tokens processed.", prompt_tokens.load());
  counter("k3_generated_tokens_total", "Tokens generated.", generated_tokens.load());
  counter("k3_steps_total", "Worker steps run.", steps.load());
  gauge("k3_queue_depth", "Requests waiting for admission.", queued.load());
  gauge("k3_requests_running", "Requests being generated.", running.load());
  gauge("k3_worker_groups_up", "Worker groups healthy.", groups_up.load());
  gauge("k3_worker_groups", "Worker groups configured.", groups_total.load());
  s += ttft_seconds.Render("k3_time_to_first_token_seconds", "Time from arrival to the first token.");
  s += itl_seconds.Render("k3_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  s += step_seconds.Render("k3_step_seconds", "Worker step round trip.");
  return s;
}

}  // namespace k3::coord
