// The other motifs of partitioned modules (generator.h): all-reduce, all-to-all before or
// after a dot, collective-permute, two dots sharing an operand, elementwise values.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

void Generator::MotifAllReduce() {
  const int64_t n = Ring();
  Groups g = MakeGroups(n, true, true);
  const std::string wide = Wide();
  std::string desc;
  Val v;
  if (c_.Percent(60)) {
    std::vector<int64_t> x = {Size(), Size()};
    DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
    std::string ld, rd;
    Val lhs = Operand(wide, p.Dims(0), 50, 10, &ld);
    Val rhs = Operand(wide, p.Dims(1), 50, 10, &rd);
    v = Dot(p, lhs, rhs, ResultType(wide));
    desc = "dot";
  } else {
    v = Operand(wide, {Size(), Size()}, 40, 30, &desc);
  }
  const std::string attrs = absl::StrCat(CollectiveAttrs(g, ""), ", to_apply=", b_.Reducer("add", v.type));
  Val r;
  const bool async = c_.Percent(25) && o_.async_forms;
  if (async) {
    Val s = b_.Op("all-reduce-start", v.type, v.dims, {v}, attrs, "ars");
    r = b_.Op("all-reduce-done", v.type, v.dims, {s}, "", "ar");
  } else {
    r = b_.Op("all-reduce", v.type, v.dims, {v}, attrs, "ar");
  }
  outputs_.push_back(Epilogue(r));
  motifs_.push_back(absl::StrCat("ar N=", n, " P=", P_, " ", g.form, async ? " async" : "", " of ", desc));
}

// all-to-all before a dot (through a layout chain), after one, or alone.
void Generator::MotifAllToAll() {
  const int64_t n = Ring();
  Groups g = MakeGroups(n, /*allow_empty=*/false, /*allow_channel_only=*/false);
  const std::string wide = Wide();
  const size_t pattern = c_.Weighted({45, 40, 15});
  std::string desc, form;
  auto a2a = [&](const Val& v, int64_t s) {
    std::string attrs = absl::StrCat("channel_id=", b_.NextChannel(), ", replica_groups=",
                                     GroupsListText(g.groups), ", dimensions={", s, "}");
    if (c_.Percent(12) && o_.async_forms) {
      form = "async";
      const std::string shape = absl::StrCat("((", v.Shape(), "), ", v.Shape(), ")");
      std::string st = b_.OpRaw("all-to-all-start", shape, {v.name}, attrs, "a2as");
      return b_.Op("all-to-all-done", v.type, v.dims, {Val{st, v.type, {}}}, "", "a2a");
    }
    return b_.Op("all-to-all", v.type, v.dims, {v}, attrs, "a2a");
  };
  if (pattern == 0 || pattern == 2) {  // A: all-to-all -> chain -> dot (or alone)
    const int64_t rank = 2 + static_cast<int64_t>(c_.Below(2));
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < rank; ++i) dims.push_back(Size());
    int64_t s = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
    dims[static_cast<size_t>(s)] = n * Block();
    while (Product(dims) > o_.max_elements / 2) {
      for (size_t i = 0; i < dims.size(); ++i) {
        if (static_cast<int64_t>(i) != s) dims[i] = std::max<int64_t>(1, dims[i] / 2);
      }
      if (Product(dims) > o_.max_elements / 2) dims[static_cast<size_t>(s)] = n;
    }
    Val y = Operand(wide, dims, 50, 10, &desc);
    Val t = a2a(y, s);
    if (pattern == 2) {
      outputs_.push_back(Epilogue(t));
      motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " alone split=", s, " of ", desc, " ", form));
      return;
    }
    Val x = t;
    int64_t keep = s;
    const int chain = static_cast<int>(c_.Weighted({50, 35, 15}));
    for (int k = 0; k < chain; ++k) x = ForwardView(x, &keep);
    DotPlan p = PlanAround(x.dims, 0, -1, Role::kFree,
                           std::max<int64_t>(1, o_.max_elements / std::max<int64_t>(1, Product(x.dims))));
    std::string wd;
    Val w = Operand(wide, p.Dims(1), 50, 10, &wd);
    outputs_.push_back(Epilogue(Dot(p, x, w, ResultType(wide))));
    motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " before-dot split=", s, " chain=", chain,
                                   " of ", desc, " ", form));
    return;
  }
  // B: dot -> chain -> all-to-all.
  std::vector<int64_t> x = {Size(), Size()};
  DotPlan p = PlanAround(x, 0, -1, Role::kFree, 64);
  std::vector<int> out = p.OutClasses();
  if (out.empty()) {
    p.cls.push_back({Role::kFree, n});
    p.side[1].push_back(static_cast<int>(p.cls.size()) - 1);
    out = p.OutClasses();
  }
  int64_t s = static_cast<int64_t>(c_.Below(out.size()));
  p.cls[static_cast<size_t>(out[static_cast<size_t>(s)])].size = n * Block();
  for (int iter = 0; iter < 6; ++iter) {
    if (std::max({Product(p.Dims(0)), Product(p.Dims(1)), Product(p.OutDims())}) <= o_.max_elements) break;
    for (size_t c = 0; c < p.cls.size(); ++c) {
      if (static_cast<int>(c) != out[static_cast<size_t>(s)]) p.cls[c].size = std::max<int64_t>(1, p.cls[c].size / 2);
    }
  }
  std::string ld, rd;
  Val lhs = Operand(wide, p.Dims(0), 50, 10, &ld);
  Val rhs = Operand(wide, p.Dims(1), 50, 10, &rd);
  Val v = Dot(p, lhs, rhs, ResultType(wide));
  int64_t keep = s;
  const int chain = static_cast<int>(c_.Weighted({50, 35, 15}));
  for (int k = 0; k < chain; ++k) v = ForwardView(v, &keep);
  outputs_.push_back(Epilogue(a2a(v, keep)));
  motifs_.push_back(absl::StrCat("a2a N=", n, " P=", P_, " after-dot split=", keep, " chain=", chain,
                                 " lhs=", ld, " rhs=", rd, " ", form));
}

void Generator::MotifPermute() {
  const std::string wide = Wide();
  std::string desc;
  std::vector<int64_t> dims = {Size(), Size()};
  Val v = Operand(wide, dims, 60, 30, &desc);
  // Pairs: a shift by k inside groups of n, sometimes with one pair dropped.
  const int64_t n = Ring();
  Groups g = MakeGroups(n, true, true);
  const int64_t k = 1 + static_cast<int64_t>(c_.Below(static_cast<uint64_t>(n - 1)));
  std::vector<std::string> pairs;
  const bool drop = c_.Percent(20);
  for (const auto& grp : g.groups) {
    for (size_t i = 0; i < grp.size(); ++i) {
      if (drop && i == 0) continue;
      pairs.push_back(absl::StrCat("{", grp[i], ",", grp[(i + static_cast<size_t>(k)) % grp.size()], "}"));
    }
  }
  const std::string attrs = absl::StrCat("channel_id=", b_.NextChannel(), ", source_target_pairs={",
                                         absl::StrJoin(pairs, ","), "}");
  Val r;
  const bool async = c_.Percent(25) && o_.async_forms;
  if (async) {
    const std::string shape = absl::StrCat("(", v.Shape(), ", ", v.Shape(), ")");
    std::string s = b_.OpRaw("collective-permute-start", shape, {v.name}, attrs, "cps");
    r = b_.Op("collective-permute-done", v.type, v.dims, {Val{s, v.type, {}}}, "", "cp");
  } else {
    r = b_.Op("collective-permute", v.type, v.dims, {v}, attrs, "cp");
  }
  if (c_.Percent(50)) {
    const int side = static_cast<int>(c_.Below(2));
    DotPlan p = PlanAround(r.dims, side, -1, Role::kFree, 64);
    std::string wd;
    Val w = Operand(wide, p.Dims(1 - side), 50, 0, &wd);
    r = side == 0 ? Dot(p, r, w, ResultType(wide)) : Dot(p, w, r, ResultType(wide));
  }
  outputs_.push_back(Epilogue(r));
  motifs_.push_back(absl::StrCat("cp N=", n, " P=", P_, " shift=", k, drop ? " partial" : "",
                                 async ? " async" : "", " of ", desc));
}

// Two dots sharing an operand (dot-merger's pattern), wide or FP8.
void Generator::MotifDotMerger() {
  const std::string wide = Wide();
  const int64_t m = Size(), k = Size() * 2;
  std::string d0, d1, d2;
  Val shared = Operand(wide, {m, k}, 25, 0, &d0);
  Val w0 = Operand(wide, {k, Size()}, 25, 0, &d1);
  Val w1 = Operand(wide, {k, Size()}, 25, 0, &d2);
  const std::string rt = ResultType(wide);
  const std::string attrs = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
  outputs_.push_back(Epilogue(b_.Op("dot", rt, {m, w0.dims[1]}, {shared, w0}, attrs, "dot")));
  outputs_.push_back(Epilogue(b_.Op("dot", rt, {m, w1.dims[1]}, {shared, w1}, attrs, "dot")));
  motifs_.push_back(absl::StrCat("merge shared=", d0, " w=", d1, ",", d2, " ", wide, "->", rt));
}

void Generator::MotifElementwise() {
  const std::string wide = Wide();
  std::vector<int64_t> dims = {Size(), Size()};
  std::string d0, d1;
  Val a = Operand(wide, dims, 30, 40, &d0);
  Val b = Operand(wide, dims, 30, 40, &d1);
  static const char* kOps[] = {"add", "multiply", "subtract", "maximum", "minimum"};
  const char* op = kOps[c_.Below(5)];
  outputs_.push_back(Epilogue(b_.Op(op, wide, dims, {a, b})));
  motifs_.push_back(absl::StrCat("elementwise ", op, " ", d0, ",", d1));
}

}  // namespace weave::fuzz
