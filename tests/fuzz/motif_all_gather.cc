// The all-gather matmul motif (generator.h): dot(all-gather(x), w) with 1-3 dots on the
// gathered value, sometimes a second all-gather of the same shard.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

// dot(all-gather(x), w) with 1-3 dots on the gathered value.
void Generator::MotifAllGather() {
  const int64_t n = Ring();
  Groups g = MakeGroups(n, true, true);
  const std::string wide = Wide();
  // The gathered operand (global dims): rank 2-3, one dim N blocks long.
  const int64_t rank = 2 + static_cast<int64_t>(c_.Weighted({55, 35, 10}));
  std::vector<int64_t> global;
  for (int64_t i = 0; i < rank; ++i) global.push_back(Size());
  const int64_t gd = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
  global[static_cast<size_t>(gd)] = n * Block();
  while (Product(global) > o_.max_elements / 2) {
    auto it = std::max_element(global.begin(), global.end());
    if (std::distance(global.begin(), it) == gd) {
      global[static_cast<size_t>(gd)] = n;
      if (Product(global) <= o_.max_elements / 2) break;
      for (size_t i = 0; i < global.size(); ++i) {
        if (static_cast<int64_t>(i) != gd && global[i] > 1) global[i] = std::max<int64_t>(1, global[i] / 2);
      }
    } else {
      *it = std::max<int64_t>(1, *it / 2);
    }
  }
  std::vector<int64_t> local = global;
  local[static_cast<size_t>(gd)] /= n;
  std::string xdesc;
  // FP8 in front of the all-gather: the dequantization is its operand (the handler's FP8
  // shift needs that) unless views come between.
  const int view_percent = c_.Percent(80) ? 0 : 60;
  Val x = Operand(wide, local, 55, view_percent, &xdesc);
  pool_.push_back(x);
  Val xg = AllGather(x, g, gd, global);
  Val src = xg;
  if (c_.Percent(6)) {  // a view between the all-gather and its dots (not windowed)
    int64_t keep = -1;
    src = ForwardView(xg, &keep);
  }
  const int ndots = 1 + static_cast<int>(c_.Weighted({45, 35, 20}));
  std::vector<std::string> roles;
  for (int k = 0; k < ndots; ++k) {
    if (k > 0 && c_.Percent(5)) {  // a consumer that is not a dot
      outputs_.push_back(b_.Op("negate", src.type, src.dims, {src}, "", "ag_user"));
      roles.push_back("other");
      continue;
    }
    roles.push_back(GatheredDot(src, src.name == xg.name ? gd : -1, wide));
  }
  std::string extra;
  if (c_.Percent(12)) {  // the same shard gathered again, on another dim or other groups
    const int64_t gd2 = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(rank)));
    const int64_t n2 = c_.Percent(50) ? n : Ring();
    Groups g2 = MakeGroups(n2, true, true);
    std::vector<int64_t> global2 = local;
    global2[static_cast<size_t>(gd2)] *= n2;
    if (Product(global2) <= o_.max_elements) {
      Val xg2 = AllGather(x, g2, gd2, global2);
      extra = absl::StrCat(" again(dim=", gd2, ",N=", n2, ",", g2.form, ")=",
                           GatheredDot(xg2, gd2, wide));
    }
  }
  motifs_.push_back(absl::StrCat("ag N=", n, " P=", P_, " ", g.form,
                                 g.global_ids ? "" : " channel-only", " dim=", gd, " x=", xdesc,
                                 " ", wide, " dots=[", absl::StrJoin(roles, ","), "]", extra));
}

Val Generator::AllGather(const Val& x, const Groups& g, int64_t gd, const std::vector<int64_t>& global) {
  const std::string attrs = CollectiveAttrs(g, absl::StrCat("dimensions={", gd, "}"));
  if (c_.Percent(12) && o_.async_forms) {
    const std::string shape = absl::StrCat("(", x.Shape(), ", ", ShapeText(x.type, global), ")");
    std::string s = b_.OpRaw("all-gather-start", shape, {x.name}, attrs, "ags");
    return b_.Op("all-gather-done", x.type, global, {Val{s, x.type, {}}}, "", "ag");
  }
  return b_.Op("all-gather", x.type, global, {x}, attrs, "ag");
}

// One dot reading the gathered value `xg` (gathered on dim gd, or -1 after a view), with a
// fresh weight, an earlier shard (stationary operand), or a partition-dependent one.
std::string Generator::GatheredDot(const Val& xg, int64_t gd, const std::string& wide) {
  const int side = static_cast<int>(c_.Below(2));
  std::optional<DotPlan> plan;
  Val w;
  std::string wdesc;
  if (!pool_.empty() && c_.Percent(15)) {
    const Val& y = c_.Pick(pool_);
    if (y.type == xg.type) {
      plan = FitAround(xg.dims, side, y.dims);
      if (plan) {
        w = y;
        wdesc = "pool";
      }
    }
  }
  if (!plan) {
    Role forced = static_cast<Role>(c_.Weighted({40, 40, 20}));
    plan = PlanAround(xg.dims, side, gd, forced,
                      std::max<int64_t>(1, o_.max_elements / std::max<int64_t>(1, Product(xg.dims))));
    w = Operand(wide, plan->Dims(1 - side), 55, 15, &wdesc);
  }
  const std::string rt = ResultType(wide);
  Val d = side == 0 ? Dot(*plan, xg, w, rt) : Dot(*plan, w, xg, rt);
  outputs_.push_back(Epilogue(d));
  const std::string role = gd >= 0 ? RoleName(plan->cls[static_cast<size_t>(gd)].role) : "view";
  return absl::StrCat(side == 0 ? "lhs:" : "rhs:", role, "/w=", wdesc, "->", rt);
}

}  // namespace weave::fuzz
