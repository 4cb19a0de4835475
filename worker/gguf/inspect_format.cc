#include "worker/gguf/inspect_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/quant/ggml_type.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf {
namespace {

struct TypeTotals {
  uint64_t tensors = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

struct Totals {
  std::map<uint32_t, TypeTotals> by_type;  // by ggml type id
  TypeTotals all;
  std::vector<uint64_t> tensors_per_shard;
};

Totals Summarize(const GgufFile& f) {
  Totals t;
  t.tensors_per_shard.assign(f.shard_paths().size(), 0);
  for (const TensorInfo& ti : f.tensors()) {
    for (TypeTotals* tt : {&t.by_type[static_cast<uint32_t>(ti.type)], &t.all}) {
      tt->tensors += 1;
      tt->elements += ti.n_elems;
      tt->bytes += ti.n_bytes;
    }
    t.tensors_per_shard[ti.shard] += 1;
  }
  return t;
}

// Names as they are when they print cleanly, quoted and escaped otherwise.
std::string Display(std::string_view s) {
  std::string q = QuoteForDisplay(s);
  if (!s.empty() && s.find(' ') == std::string_view::npos && q.size() == s.size() + 2) {
    return std::string(s);
  }
  return q;
}

std::string Shape(const std::vector<int64_t>& ne) {
  return absl::StrCat("{", absl::StrJoin(ne, ", "), "}");
}

std::string HumanBytes(uint64_t b) {
  const double mib = static_cast<double>(b) / (1024.0 * 1024.0);
  if (mib >= 1024.0) return absl::StrFormat("%.2f GiB", mib / 1024.0);
  return absl::StrFormat("%.2f MiB", mib);
}

std::string BitsPerElement(const TypeTotals& t) {
  if (t.elements == 0) return "-";
  return absl::StrFormat("%.3f",
                         8.0 * static_cast<double>(t.bytes) / static_cast<double>(t.elements));
}

std::string FormatText(const GgufFile& f, const InspectOptions& opt) {
  const Totals totals = Summarize(f);
  const std::vector<std::string> keys = f.Keys();
  std::string out =
      absl::StrFormat("%s: GGUF v%d, alignment %d, %d keys, %d tensors", f.shard_paths()[0],
                      f.version(), f.alignment(), keys.size(), f.tensors().size());
  if (f.shard_paths().size() > 1) absl::StrAppend(&out, ", ", f.shard_paths().size(), " shards");
  if (f.header_only()) absl::StrAppend(&out, ", header only (no tensor data)");
  out += "\n";
  if (f.shard_paths().size() > 1) {
    out += "\nshards:\n";
    for (size_t i = 0; i < f.shard_paths().size(); ++i) {
      absl::StrAppendFormat(&out, "  %5d  %s (%d tensors)\n", i + 1, f.shard_paths()[i],
                            totals.tensors_per_shard[i]);
    }
  }

  out += "\nmetadata:\n";
  size_t key_w = 0;
  size_t type_w = 0;
  for (const std::string& k : keys) {
    key_w = std::max(key_w, Display(k).size());
    type_w = std::max(type_w, ValueTypeLabel(*f.FindValue(k)).size());
  }
  for (const std::string& k : keys) {
    absl::StrAppendFormat(&out, "  %-*s  %-*s  %s\n", key_w, Display(k), type_w,
                          ValueTypeLabel(*f.FindValue(k)), f.ValueToString(k, opt.max_array_items));
  }

  if (opt.show_tensors) {
    out += "\ntensors:\n";
    size_t name_w = 4;
    size_t shape_w = 5;
    for (const TensorInfo& t : f.tensors()) {
      name_w = std::max(name_w, Display(t.name).size());
      shape_w = std::max(shape_w, Shape(t.ne).size());
    }
    absl::StrAppendFormat(&out, "  %5s  %-*s  %-7s  %-*s  %12s  %5s  %12s\n", "#", name_w, "name",
                          "type", shape_w, "shape", "bytes", "shard", "offset");
    size_t i = 0;
    for (const TensorInfo& t : f.tensors()) {
      absl::StrAppendFormat(&out, "  %5d  %-*s  %-7s  %-*s  %12d  %5d  %12d\n", i++, name_w,
                            Display(t.name), quant::TypeName(t.type), shape_w, Shape(t.ne),
                            t.n_bytes, t.shard + 1, t.file_offset);
    }
  }

  out += "\nby type:\n";
  absl::StrAppendFormat(&out, "  %-7s  %8s  %16s  %16s  %12s  %7s\n", "type", "tensors", "elements",
                        "bytes", "size", "bits/el");
  for (const auto& [id, tt] : totals.by_type) {
    absl::StrAppendFormat(&out, "  %-7s  %8d  %16d  %16d  %12s  %7s\n",
                          quant::TypeName(static_cast<quant::GgmlType>(id)), tt.tensors,
                          tt.elements, tt.bytes, HumanBytes(tt.bytes), BitsPerElement(tt));
  }
  absl::StrAppendFormat(&out, "  %-7s  %8d  %16d  %16d  %12s  %7s\n", "total", totals.all.tensors,
                        totals.all.elements, totals.all.bytes, HumanBytes(totals.all.bytes),
                        BitsPerElement(totals.all));
  return out;
}

// ---- JSON ----

std::string JsonFloat(double v) {
  if (!std::isfinite(v)) return JsonQuote(absl::StrCat(v));  // JSON has no nan / inf
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string JsonElement(const Value& v, uint64_t i) {
  switch (v.elem_type) {
    case ValueType::kF32: {
      const float x = v.Element<float>(i);
      if (!std::isfinite(x)) return JsonFloat(x);
      char buf[64];
      const auto res = std::to_chars(buf, buf + sizeof(buf), x);  // float's shortest form
      return std::string(buf, res.ptr);
    }
    case ValueType::kF64:
      return JsonFloat(v.Element<double>(i));
    case ValueType::kString:
      return JsonQuote(v.strings[i]);
    case ValueType::kArray:
      return "null";
    default:
      return FormatElement(v, i);  // integers and bools print as JSON already
  }
}

std::string JsonValue(const Value& v, size_t max_items) {
  std::string out = absl::StrFormat("{\"type\": %s", JsonQuote(ValueTypeName(v.type)));
  if (!v.is_array()) return absl::StrCat(out, ", \"value\": ", JsonElement(v, 0), "}");
  absl::StrAppendFormat(&out, ", \"element_type\": %s, \"count\": %d",
                        JsonQuote(ValueTypeName(v.elem_type)), v.count);
  if (v.elem_type == ValueType::kArray) return out + "}";  // nested arrays are not read
  const uint64_t shown = std::min<uint64_t>(v.count, max_items);
  std::vector<std::string> items;
  for (uint64_t i = 0; i < shown; ++i) items.push_back(JsonElement(v, i));
  absl::StrAppend(&out, ", \"value\": [", absl::StrJoin(items, ", "), "]");
  if (shown < v.count) out += ", \"truncated\": true";
  return out + "}";
}

std::string JsonTotals(const TypeTotals& t) {
  return absl::StrFormat("\"tensors\": %d, \"elements\": %d, \"bytes\": %d", t.tensors, t.elements,
                         t.bytes);
}

std::string FormatJson(const GgufFile& f, const InspectOptions& opt) {
  const Totals totals = Summarize(f);
  std::vector<std::string> shards;
  for (const std::string& p : f.shard_paths()) shards.push_back(JsonQuote(p));
  std::string out = "{\n";
  absl::StrAppendFormat(&out, "  \"path\": %s,\n  \"shards\": [%s],\n",
                        JsonQuote(f.shard_paths()[0]), absl::StrJoin(shards, ", "));
  absl::StrAppendFormat(&out, "  \"version\": %d,\n  \"alignment\": %d,\n  \"header_only\": %s,\n",
                        f.version(), f.alignment(), f.header_only() ? "true" : "false");
  std::vector<std::string> kvs;
  for (const std::string& k : f.Keys()) {
    kvs.push_back(
        absl::StrCat("    ", JsonQuote(k), ": ", JsonValue(*f.FindValue(k), opt.max_array_items)));
  }
  absl::StrAppend(&out, "  \"metadata\": {\n", absl::StrJoin(kvs, ",\n"), "\n  },\n");
  if (opt.show_tensors) {
    std::vector<std::string> ts;
    for (const TensorInfo& t : f.tensors()) {
      ts.push_back(absl::StrFormat(
          "    {\"name\": %s, \"type\": %s, \"shape\": [%s], \"bytes\": %d, \"shard\": %d, "
          "\"offset\": %d}",
          JsonQuote(t.name), JsonQuote(quant::TypeName(t.type)), absl::StrJoin(t.ne, ", "),
          t.n_bytes, t.shard, t.file_offset));
    }
    absl::StrAppend(&out, "  \"tensors\": [\n", absl::StrJoin(ts, ",\n"), "\n  ],\n");
  }
  std::vector<std::string> types;
  for (const auto& [id, tt] : totals.by_type) {
    types.push_back(absl::StrFormat("    %s: {%s}",
                                    JsonQuote(quant::TypeName(static_cast<quant::GgmlType>(id))),
                                    JsonTotals(tt)));
  }
  absl::StrAppend(&out, "  \"by_type\": {\n", absl::StrJoin(types, ",\n"), "\n  },\n");
  absl::StrAppend(&out, "  \"total\": {", JsonTotals(totals.all), "}\n}\n");
  return out;
}

}  // namespace

std::string FormatInspection(const GgufFile& file, const InspectOptions& options) {
  return options.json ? FormatJson(file, options) : FormatText(file, options);
}

}  // namespace k3::gguf
