// The matmul reduce-scatter motif (generator.h): reduce-scatter(dot(a, b)) on any output dim,
// sync or async, or dynamic-slice(all-reduce(dot)).
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

// reduce-scatter(dot(a, b)) on any output dim, or dynamic-slice(all-reduce(dot)).
void Generator::MotifReduceScatter() {
  const int64_t n = Ring();
  Groups g = MakeGroups(n, true, true);
  const std::string wide = Wide();
  const int64_t rank = 1 + static_cast<int64_t>(c_.Weighted({40, 45, 15}));
  std::vector<int64_t> x;
  for (int64_t i = 0; i < rank; ++i) x.push_back(Size());
  DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
  std::vector<int> out = p.OutClasses();
  if (out.empty()) {  // scalar result: give the rhs a free dim
    p.cls.push_back({Role::kFree, n});
    p.side[1].push_back(static_cast<int>(p.cls.size()) - 1);
    out = p.OutClasses();
  }
  const int64_t d = static_cast<int64_t>(c_.Below(out.size()));
  p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].size = n * Block();
  for (int iter = 0; iter < 8; ++iter) {
    const int64_t worst = std::max({Product(p.Dims(0)), Product(p.Dims(1)), Product(p.OutDims())});
    if (worst <= o_.max_elements) break;
    for (size_t c = 0; c < p.cls.size(); ++c) {
      if (static_cast<int>(c) != out[static_cast<size_t>(d)] && p.cls[c].size > 1) {
        p.cls[c].size = std::max<int64_t>(1, p.cls[c].size / 2);
      }
    }
    if (iter == 7) p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].size = n;
  }
  std::string ldesc, rdesc;
  Val lhs = Operand(wide, p.Dims(0), 55, 15, &ldesc);
  Val rhs = Operand(wide, p.Dims(1), 55, 15, &rdesc);
  const std::string rt = ResultType(wide);
  Val dot = Dot(p, lhs, rhs, rt);
  const std::string role = RoleName(p.cls[static_cast<size_t>(out[static_cast<size_t>(d)])].role);
  Val src = dot;
  std::string between;
  if (c_.Percent(5)) {  // something between the dot and the reduce-scatter (not windowed)
    Val two = b_.Splat(rt, "2", dot.dims);
    src = b_.Op("multiply", rt, dot.dims, {dot, two}, "", "pre_rs");
    between = " pre-op";
  }
  if (c_.Percent(5)) {  // the full dot has another user
    outputs_.push_back(b_.Op("negate", rt, dot.dims, {dot}, "", "dot_user"));
    between += " dot-user";
  }
  std::vector<int64_t> scattered = src.dims;
  scattered[static_cast<size_t>(d)] /= n;
  const bool sum = !c_.Percent(4);
  const std::string red = b_.Reducer(sum ? "add" : "maximum", rt);
  Val r;
  std::string form;
  switch (c_.Weighted({62, 22, o_.async_forms ? 8 : 0, o_.async_forms ? 8 : 0})) {
    case 0:
      form = "reduce-scatter";
      r = b_.Op("reduce-scatter", rt, scattered, {src},
                absl::StrCat(CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
                             ", to_apply=", red),
                "rs");
      break;
    case 1:
      form = "all-reduce+dynamic-slice";
      r = AllReduceDynamicSlice(src, g, d, red);
      break;
    case 2: {
      form = "reduce-scatter-start";
      const std::string shape = absl::StrCat("((", src.Shape(), "), ", ShapeText(rt, scattered), ")");
      std::string s = b_.OpRaw("reduce-scatter-start", shape, {src.name},
                               absl::StrCat(CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
                                            ", to_apply=", red),
                               "rss");
      r = b_.Op("reduce-scatter-done", rt, scattered, {Val{s, rt, {}}}, "", "rs");
      break;
    }
    default: {
      form = "async-start(reduce-scatter)";
      const std::string body = absl::StrCat(
          "  p = ", src.Shape(), " parameter(0)\n  ROOT r = ", ShapeText(rt, scattered),
          " reduce-scatter(p), ", CollectiveAttrs(g, absl::StrCat("dimensions={", d, "}")),
          ", to_apply=", red, "\n");
      const std::string comp = b_.AddComputation("wrapped_reduce_scatter", body, "r");
      const std::string shape = absl::StrCat("((", src.Shape(), "), ", ShapeText(rt, scattered), ")");
      std::string s = b_.OpRaw("async-start", shape, {src.name}, absl::StrCat("calls=", comp), "rss");
      r = b_.Op("async-done", rt, scattered, {Val{s, rt, {}}}, "", "rs");
      break;
    }
  }
  outputs_.push_back(Epilogue(r));
  motifs_.push_back(absl::StrCat("rs N=", n, " P=", P_, " ", g.form, g.global_ids ? "" : " channel-only",
                                 " ", form, sum ? "" : "(max)", " dim=", d, "(", role, ")",
                                 " lhs=", ldesc, " rhs=", rdesc, " ", wide, "->", rt, between));
}

// dynamic-slice(all-reduce(v)) at block index_in_group(partition) of dim d (XLA's form of a
// reduce-scatter before its collective pipeliner).
Val Generator::AllReduceDynamicSlice(const Val& v, const Groups& g, int64_t d, const std::string& red) {
  Val ar = b_.Op("all-reduce", v.type, v.dims, {v},
                 absl::StrCat(CollectiveAttrs(g, ""), ", to_apply=", red), "ar");
  const int64_t block = v.dims[static_cast<size_t>(d)] / g.n;
  std::vector<int64_t> table(static_cast<size_t>(P_));
  for (const auto& grp : g.groups) {
    for (size_t i = 0; i < grp.size(); ++i) table[static_cast<size_t>(grp[i])] = static_cast<int64_t>(i) * block;
  }
  Val pid = b_.Op("partition-id", "u32", {}, {}, "", "pid");
  Val off;
  bool identity = true;
  for (int64_t p = 0; p < P_; ++p) identity &= table[static_cast<size_t>(p)] == p * block;
  if (identity && c_.Percent(40)) {
    Val pc = b_.Op("convert", "s32", {}, {pid}, "", "pid_s32");
    Val bc = b_.ScalarConstant("s32", absl::StrCat(block));
    off = b_.Op("multiply", "s32", {}, {pc, bc}, "", "offset");
  } else {
    // A constant carries its literal inside the parentheses.
    const std::string tname = b_.OpRaw("constant", ShapeText("s32", {P_}),
                                       {absl::StrCat("{", IntList(table), "}")}, "", "offset_table");
    Val tv{tname, "s32", {P_}};
    Val ds = b_.Op("dynamic-slice", "s32", {1}, {tv, pid}, "dynamic_slice_sizes={1}", "offset1");
    off = b_.Op("reshape", "s32", {}, {ds}, "", "offset");
  }
  Val zero = b_.ScalarConstant("s32", "0");
  std::vector<Val> ops = {ar};
  std::vector<int64_t> sizes = v.dims;
  sizes[static_cast<size_t>(d)] = block;
  for (size_t i = 0; i < v.dims.size(); ++i) ops.push_back(static_cast<int64_t>(i) == d ? off : zero);
  return b_.Op("dynamic-slice", v.type, sizes, ops,
               absl::StrCat("dynamic_slice_sizes={", IntList(sizes), "}"), "rs");
}

}  // namespace weave::fuzz
