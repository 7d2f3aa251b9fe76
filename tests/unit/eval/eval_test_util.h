// Helpers for the evaluator tests: parse a module from text, build input values, run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave::eval::testing {

inline std::unique_ptr<HloModule> ParseOrDie(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  return std::move(*m);
}

// An array value of type t and dims from doubles (rounded/wrapped to t).
inline ValuePtr Arr(PrimitiveType t, std::vector<int64_t> dims, const std::vector<double>& vals) {
  Value v = Value::Zeros(Shape(t, std::move(dims)));
  for (size_t k = 0; k < vals.size(); ++k) {
    if (v.storage() == Storage::kInt) {
      v.SetInt(static_cast<int64_t>(k), static_cast<int64_t>(vals[k]));
    } else {
      v.SetDouble(static_cast<int64_t>(k), vals[k]);
    }
  }
  return Share(std::move(v));
}

inline std::vector<double> Doubles(const Value& v) {
  std::vector<double> out;
  for (int64_t k = 0; k < v.size(); ++k) out.push_back(v.GetDouble(k));
  return out;
}

// Runs `text` on `n` partitions with the same `args` on every partition; returns outputs per
// partition (flattened leaves).
inline absl::StatusOr<std::vector<std::vector<ValuePtr>>> RunWith(
    const std::string& text, const std::vector<ValuePtr>& args, int64_t n = 1) {
  auto m = ParseHloModule(text, "test");
  if (!m.ok()) return m.status();
  EvalOptions o;
  o.num_partitions = n;
  Inputs in;
  in.per_device.assign(static_cast<size_t>(n), args);
  auto r = RunModule(**m, o, &in);
  if (!r.ok()) return r.status();
  return r->outputs;
}

// Runs with per-partition args.
inline absl::StatusOr<std::vector<std::vector<ValuePtr>>> RunPer(
    const std::string& text, const std::vector<std::vector<ValuePtr>>& per, int64_t n) {
  auto m = ParseHloModule(text, "test");
  if (!m.ok()) return m.status();
  EvalOptions o;
  o.num_partitions = n;
  Inputs in;
  in.per_device = per;
  auto r = RunModule(**m, o, &in);
  if (!r.ok()) return r.status();
  return r->outputs;
}

}  // namespace weave::eval::testing
