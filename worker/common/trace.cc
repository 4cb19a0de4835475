#include "worker/common/trace.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace k3 {

Tracer::Tracer(int pid, std::string name, size_t max_events)
    : pid_(pid), name_(std::move(name)), max_events_(max_events) {
  events_.reserve(std::min<size_t>(max_events_, 1 << 16));
}

void Tracer::Span(const char* name, const char* category, int64_t begin_us, int64_t arg) {
  const int64_t end = NowUs();
  std::lock_guard<std::mutex> l(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back({name, category, begin_us, end - begin_us, arg});
}

size_t Tracer::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_.size();
}

size_t Tracer::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

std::string Tracer::ToJson() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string s = "[\n";
  absl::StrAppendFormat(&s, R"({"name":"process_name","ph":"M","pid":%d,"tid":0,"args":{"name":"%s"}})", pid_, name_);
  for (const Event& e : events_) {
    absl::StrAppendFormat(&s, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%d,\"dur\":%d",
                          e.name, e.category, pid_, e.ts_us, e.dur_us);
    if (e.arg >= 0) absl::StrAppendFormat(&s, ",\"args\":{\"n\":%d}", e.arg);
    s += "}";
  }
  s += "\n]\n";
  return s;
}

absl::Status Tracer::WriteFile(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write trace ", path));
  out << ToJson();
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("error writing trace ", path));
  return absl::OkStatus();
}

}  // namespace k3
