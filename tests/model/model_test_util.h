// Makes edited copies of a GGUF's header (metadata and tensor table, no data) for config and
// manifest tests: drop a key, change a value, reshape or retype a tensor.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::testing {

struct EditableModel {
  std::vector<std::pair<std::string, gguf::Value>> kv;
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    quant::GgmlType type;
  };
  std::vector<Tensor> tensors;

  static EditableModel From(const gguf::GgufFile& f) {
    EditableModel m;
    for (const std::string& k : f.Keys()) m.kv.push_back({k, *f.FindValue(k)});
    for (const gguf::TensorInfo& t : f.tensors()) m.tensors.push_back({t.name, t.ne, t.type});
    return m;
  }
  void Drop(const std::string& key) {
    std::erase_if(kv, [&](const auto& p) { return p.first == key; });
  }
  void Set(const std::string& key, gguf::Value v) {
    for (auto& p : kv) {
      if (p.first == key) {
        p.second = std::move(v);
        return;
      }
    }
    kv.push_back({key, std::move(v)});
  }
  Tensor* Find(const std::string& name) {
    for (Tensor& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  // Writes a header-only file and opens it.
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> WriteAndOpen(const std::string& path) const {
    gguf::GgufWriterOptions opt;
    opt.header_only = true;
    gguf::GgufWriter w(path, opt);
    for (const auto& [k, v] : kv) {
      if (auto s = w.Set(k, v); !s.ok()) return s;
    }
    for (const Tensor& t : tensors) {
      if (auto s = w.AddTensor(t.name, t.ne, t.type); !s.ok()) return s;
    }
    if (auto s = w.Finish(); !s.ok()) return s;
    return gguf::GgufFile::Open(path, /*allow_header_only=*/true);
  }
};

}  // namespace k3::testing
