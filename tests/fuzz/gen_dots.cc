// The generator's dot plans (generator.h): which dims of a dot are batch, contracting or free,
// around an operand whose dims are fixed.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

std::vector<int64_t> DotPlan::Dims(int s) const {
  std::vector<int64_t> d;
  for (int c : side[s]) d.push_back(cls[static_cast<size_t>(c)].size);
  return d;
}

int64_t DotPlan::Pos(int s, int c) const {
  for (size_t i = 0; i < side[s].size(); ++i) {
    if (side[s][i] == c) return static_cast<int64_t>(i);
  }
  return -1;
}

// Output dims: batch classes (in batch_order), then lhs free, then rhs free (operand order).
std::vector<int> DotPlan::OutClasses() const {
  std::vector<int> o = batch_order;
  for (int s = 0; s < 2; ++s) {
    for (int c : side[s]) {
      if (cls[static_cast<size_t>(c)].role == Role::kFree) o.push_back(c);
    }
  }
  return o;
}

std::vector<int64_t> DotPlan::OutDims() const {
  std::vector<int64_t> d;
  for (int c : OutClasses()) d.push_back(cls[static_cast<size_t>(c)].size);
  return d;
}

std::string DotPlan::Attrs() const {
  std::vector<int64_t> lb, rb, lc, rc;
  for (int c : batch_order) {
    lb.push_back(Pos(0, c));
    rb.push_back(Pos(1, c));
  }
  for (int c : contract_order) {
    lc.push_back(Pos(0, c));
    rc.push_back(Pos(1, c));
  }
  std::string s;
  if (!lb.empty()) absl::StrAppend(&s, "lhs_batch_dims={", IntList(lb), "}, ");
  absl::StrAppend(&s, "lhs_contracting_dims={", IntList(lc), "}, ");
  if (!rb.empty()) absl::StrAppend(&s, "rhs_batch_dims={", IntList(rb), "}, ");
  absl::StrAppend(&s, "rhs_contracting_dims={", IntList(rc), "}");
  return s;
}

const char* RoleName(Role r) {
  switch (r) {
    case Role::kContract: return "contracting";
    case Role::kFree: return "free";
    case Role::kBatch: return "batch";
  }
  return "?";
}

int64_t Product(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// A dot plan around a fixed operand of dims `x` on side `side`. `forced` (if >= 0) gets role
// `forced_role`. The other side gets matching batch/contracting dims and 0-2 free dims, in a
// random order.
DotPlan Generator::PlanAround(const std::vector<int64_t>& x, int side, int64_t forced, Role forced_role,
                   int64_t other_free_limit) {
  DotPlan p;
  std::vector<int> mine;
  for (size_t i = 0; i < x.size(); ++i) {
    Role r;
    if (static_cast<int64_t>(i) == forced) {
      r = forced_role;
    } else {
      r = static_cast<Role>(c_.Weighted({40, 45, 15}));
    }
    p.cls.push_back({r, x[i]});
    mine.push_back(static_cast<int>(i));
  }
  bool any_contract = false;
  for (const DimClass& d : p.cls) any_contract |= d.role == Role::kContract;
  if (!any_contract && !c_.Percent(5)) {
    std::vector<int> cand;
    for (size_t i = 0; i < x.size(); ++i) {
      if (static_cast<int64_t>(i) != forced) cand.push_back(static_cast<int>(i));
    }
    if (!cand.empty()) p.cls[static_cast<size_t>(c_.Pick(cand))].role = Role::kContract;
  }
  std::vector<int> other;
  for (size_t i = 0; i < p.cls.size(); ++i) {
    if (p.cls[i].role != Role::kFree) other.push_back(static_cast<int>(i));
  }
  const int64_t nfree = static_cast<int64_t>(c_.Weighted({60, 25, 15}));
  const int64_t free_count = nfree == 0 ? 1 : (nfree == 1 ? 2 : 0);
  int64_t budget = other_free_limit;
  for (int64_t k = 0; k < free_count; ++k) {
    int64_t s = Size();
    while (s > 1 && s > budget) s /= 2;
    budget = std::max<int64_t>(1, budget / std::max<int64_t>(s, 1));
    p.cls.push_back({Role::kFree, s});
    other.push_back(static_cast<int>(p.cls.size()) - 1);
  }
  c_.Shuffle(other);
  p.side[side] = mine;
  p.side[1 - side] = other;
  for (int c : mine) {
    if (p.cls[static_cast<size_t>(c)].role == Role::kBatch) p.batch_order.push_back(c);
    if (p.cls[static_cast<size_t>(c)].role == Role::kContract) p.contract_order.push_back(c);
  }
  if (c_.Percent(20)) c_.Shuffle(p.batch_order);
  if (c_.Percent(20)) c_.Shuffle(p.contract_order);
  return p;
}

// A plan reading `x` (side `side`) and an existing value of dims `y` on the other side: each
// dim of y matches an unused dim of x of the same extent (batch or contracting) or is free.
std::optional<DotPlan> Generator::FitAround(const std::vector<int64_t>& x, int side,
                                 const std::vector<int64_t>& y) {
  DotPlan p;
  for (int64_t s : x) p.cls.push_back({Role::kFree, s});
  std::vector<int> other(y.size(), -1);
  std::vector<bool> used(x.size(), false);
  std::vector<size_t> order(y.size());
  std::iota(order.begin(), order.end(), 0);
  c_.Shuffle(order);
  bool contract = false;
  for (size_t j : order) {
    std::vector<size_t> cand;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!used[i] && x[i] == y[j]) cand.push_back(i);
    }
    if (cand.empty() || c_.Percent(25)) continue;
    const size_t i = c_.Pick(cand);
    used[i] = true;
    const Role r = c_.Percent(20) ? Role::kBatch : Role::kContract;
    contract |= r == Role::kContract;
    p.cls[i].role = r;
    other[j] = static_cast<int>(i);
  }
  if (!contract) return std::nullopt;
  for (size_t j = 0; j < y.size(); ++j) {
    if (other[j] < 0) {
      p.cls.push_back({Role::kFree, y[j]});
      other[j] = static_cast<int>(p.cls.size()) - 1;
    }
  }
  for (size_t i = 0; i < x.size(); ++i) p.side[side].push_back(static_cast<int>(i));
  p.side[1 - side] = other;
  for (int c : p.side[side]) {
    if (p.cls[static_cast<size_t>(c)].role == Role::kBatch) p.batch_order.push_back(c);
    if (p.cls[static_cast<size_t>(c)].role == Role::kContract) p.contract_order.push_back(c);
  }
  if (Product(p.OutDims()) > o_.max_elements) return std::nullopt;
  return p;
}

Val Generator::Dot(const DotPlan& p, const Val& lhs, const Val& rhs, const std::string& result_type) {
  return b_.Op("dot", result_type, p.OutDims(), {lhs, rhs}, p.Attrs(), "dot");
}

}  // namespace weave::fuzz
