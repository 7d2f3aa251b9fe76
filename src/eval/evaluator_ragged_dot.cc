// XLA's ragged-dot in the reference evaluator (the semantics of xla/hlo/evaluator's
// HandleRaggedDot*; XLA's RaggedDotDimensionNumbers: the dot's dimension numbers plus
// lhs_ragged_dims={r} and rhs_group_dims={g}). Operands lhs, rhs, group_sizes (integers, shape
// [batch.., (other lhs free dims..), G]: its leading dims index the output's batch dims, then,
// in the non-contracting mode, the lhs free dims other than r). By where r is:
//   non-contracting  lhs rows along r are split into G consecutive groups; a row in group i
//                    multiplies rhs[i] (rhs's group dim g sliced at i); rows past the last group
//                    give 0. Output [batch.., lhs free.., rhs free..].
//   contracting      the contracting dim r is split into G groups; output [G, batch.., lhs free..,
//                    rhs free..] holds each group's partial product (group bounds clamped to r).
//   batch            an ordinary batched dot whose batch elements past the sum of the group sizes
//                    give 0.
// Products accumulate in double and round once to the result type.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "eval/evaluator_internal.h"
#include "hlo/dot_dims.h"
#include "hlo/raw_dims_attribute.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {
namespace {

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

int64_t Flat(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t k = 0;
  for (size_t i = 0; i < idx.size(); ++i) k += idx[i] * strides[i];
  return k;
}

// A ragged-dot's dims as its checks accept them.
struct RaggedDotDims {
  int64_t r = 0;            // the lhs ragged dim
  int64_t rg = -1;          // the rhs group dim (a ragged non-contracting dim), -1 otherwise
  bool contracting = false, batch = false, grouped = false;  // where r is
  int64_t gs_rank = 0, num_groups = 0;  // the group sizes' rank and its last dim
  std::vector<int64_t> lhs_free, rhs_free;  // neither batch nor contracting (nor rg), in order
  std::vector<int64_t> csize;  // the contracting dims' sizes
  size_t ragged_c = 0;  // r's position among the lhs contracting dims (contracting mode)
  size_t lead = 0;      // the result's leading group dim (contracting mode: 1)
};

// The dims of ragged-dot `instr` of lhs, rhs and group_sizes; InvalidArgument for bad or missing
// lhs_ragged_dims or rhs_group_dims, group sizes that are not an integer array, or operand and
// result dims that do not fit each other.
absl::StatusOr<RaggedDotDims> CheckRaggedDot(const HloInstruction& instr, const Value& lhs,
                                             const Value& rhs, const Value& group_sizes) {
  const DotDims& dd = instr.dot_dims();
  absl::StatusOr<std::vector<int64_t>> ragged = RawDimsAttribute(instr, "lhs_ragged_dims");
  if (!ragged.ok()) return ragged.status();
  absl::StatusOr<std::vector<int64_t>> group = RawDimsAttribute(instr, "rhs_group_dims");
  if (!group.ok()) return group.status();
  const int64_t lr = static_cast<int64_t>(lhs.shape.rank()), rr = static_cast<int64_t>(rhs.shape.rank());
  if (ragged->size() != 1 || (*ragged)[0] < 0 || (*ragged)[0] >= lr) {
    return absl::InvalidArgumentError("ragged-dot needs exactly one lhs_ragged_dims entry within the lhs rank");
  }
  RaggedDotDims rd;
  const int64_t r = rd.r = (*ragged)[0];
  const bool contracting = rd.contracting = Has(dd.lhs_contracting, r);
  rd.batch = Has(dd.lhs_batch, r);
  const bool grouped = rd.grouped = !contracting && !rd.batch;
  if (grouped != (group->size() == 1) || (grouped && ((*group)[0] < 0 || (*group)[0] >= rr))) {
    return absl::InvalidArgumentError(grouped ? "a ragged non-contracting dim needs one rhs_group_dims entry"
                                              : "rhs_group_dims is only for a ragged non-contracting dim");
  }
  if (dd.lhs_batch.size() != dd.rhs_batch.size() || dd.lhs_contracting.size() != dd.rhs_contracting.size()) {
    return absl::InvalidArgumentError("ragged-dot batch or contracting dim counts differ between the operands");
  }
  rd.gs_rank = static_cast<int64_t>(group_sizes.shape.rank());
  if (rd.gs_rank < 1 || group_sizes.storage() != Storage::kInt) {
    return absl::InvalidArgumentError("ragged-dot group sizes must be an integer array of rank >= 1");
  }
  const int64_t num_groups = rd.num_groups = group_sizes.shape.dims.back();
  const int64_t rg = rd.rg = grouped ? (*group)[0] : -1;
  for (int64_t d = 0; d < lr; ++d) {
    if (!Has(dd.lhs_batch, d) && !Has(dd.lhs_contracting, d)) rd.lhs_free.push_back(d);
  }
  for (int64_t d = 0; d < rr; ++d) {
    if (!Has(dd.rhs_batch, d) && !Has(dd.rhs_contracting, d) && d != rg) rd.rhs_free.push_back(d);
  }
  const Shape& out = instr.shape();
  rd.lead = contracting ? 1 : 0;
  // The result the operands give (the verifier's rule, checked again: every index below reads
  // within the operands only for this shape).
  const std::vector<int64_t> want = RaggedDotResultDims(
      lhs.shape, rhs.shape, dd, contracting, num_groups,
      grouped ? std::vector<int64_t>{rg} : std::vector<int64_t>{});
  if (out.dims != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ragged-dot result ", absl::StrJoin(out.dims, ","), " is not the [",
        absl::StrJoin(want, ","), "] its operands give"));
  }
  for (size_t i = 0; i < dd.lhs_batch.size(); ++i) {
    if (lhs.shape.dims[static_cast<size_t>(dd.lhs_batch[i])] !=
        rhs.shape.dims[static_cast<size_t>(dd.rhs_batch[i])]) {
      return absl::InvalidArgumentError("ragged-dot batch dim sizes differ between the operands");
    }
  }
  if (grouped && rhs.shape.dims[static_cast<size_t>(rg)] < num_groups) {
    return absl::InvalidArgumentError("ragged-dot rhs group dim is smaller than the group count");
  }
  for (size_t i = 0; i < dd.lhs_contracting.size(); ++i) {
    rd.csize.push_back(lhs.shape.dims[static_cast<size_t>(dd.lhs_contracting[i])]);
    if (rhs.shape.dims[static_cast<size_t>(dd.rhs_contracting[i])] != rd.csize.back()) {
      return absl::InvalidArgumentError("ragged-dot contracting dim sizes differ between the operands");
    }
  }
  while (contracting && dd.lhs_contracting[rd.ragged_c] != r) ++rd.ragged_c;
  return rd;
}

}  // namespace

absl::StatusOr<Value> RaggedDot(const HloInstruction& instr, const Value& lhs, const Value& rhs,
                                const Value& group_sizes) {
  const DotDims& dd = instr.dot_dims();
  ASSIGN_OR_RETURN(const RaggedDotDims rd, CheckRaggedDot(instr, lhs, rhs, group_sizes));
  const int64_t r = rd.r, rg = rd.rg, gs_rank = rd.gs_rank, num_groups = rd.num_groups;
  const bool contracting = rd.contracting, batch = rd.batch, grouped = rd.grouped;
  const std::vector<int64_t>& csize = rd.csize;
  const size_t ragged_c = rd.ragged_c, lead = rd.lead;
  const int64_t lr = static_cast<int64_t>(lhs.shape.rank()), rr = static_cast<int64_t>(rhs.shape.rank());
  const Shape& out = instr.shape();
  const std::vector<int64_t> ls = Strides(lhs.shape.dims), rs = Strides(rhs.shape.dims);
  const std::vector<int64_t> gss = Strides(group_sizes.shape.dims), os = Strides(out.dims);
  Value result = Value::Zeros(out);
  const bool is_int = result.storage() == Storage::kInt;
  std::vector<int64_t> oi(out.rank()), li(static_cast<size_t>(lr)), ri(static_cast<size_t>(rr));
  std::vector<int64_t> gi(static_cast<size_t>(gs_rank)), ci(csize.size());
  const int64_t total = result.size();
  for (int64_t k = 0; k < total; ++k) {
    for (size_t d = 0; d < oi.size(); ++d) oi[d] = (k / os[d]) % out.dims[d];
    size_t idx = lead, g_at = 0;
    for (size_t i = 0; i < dd.lhs_batch.size(); ++i, ++idx) {
      li[static_cast<size_t>(dd.lhs_batch[i])] = ri[static_cast<size_t>(dd.rhs_batch[i])] = oi[idx];
      if (static_cast<int64_t>(g_at) < gs_rank - 1) gi[g_at++] = oi[idx];
    }
    for (int64_t d : rd.lhs_free) {
      if (grouped && d != r && static_cast<int64_t>(g_at) < gs_rank - 1) gi[g_at++] = oi[idx];
      li[static_cast<size_t>(d)] = oi[idx++];
    }
    for (int64_t d : rd.rhs_free) ri[static_cast<size_t>(d)] = oi[idx++];
    // The group sizes' leading dims index the output's batch dims and, grouped, the lhs free dims
    // other than the ragged one: each index must be within the group sizes.
    for (int64_t i = 0; i + 1 < gs_rank; ++i) {
      if (gi[static_cast<size_t>(i)] >= group_sizes.shape.dims[static_cast<size_t>(i)]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ragged-dot group sizes ", absl::StrJoin(group_sizes.shape.dims, ","),
            " do not cover the result's leading dims"));
      }
    }
    // The group bounds this element reads.
    int64_t lo = 0, hi = 0;
    bool zero = false;
    if (grouped) {
      int64_t end = 0, g = 0;
      for (; g < num_groups; ++g) {
        gi.back() = g;
        end += group_sizes.GetInt(Flat(gi, gss));
        if (li[static_cast<size_t>(r)] < end) break;
      }
      zero = g >= num_groups;
      ri[static_cast<size_t>(rg)] = g;
    } else if (batch) {
      int64_t handled = 0;
      for (int64_t g = 0; g < num_groups; ++g) {
        gi.back() = g;
        handled += group_sizes.GetInt(Flat(gi, gss));
      }
      zero = li[static_cast<size_t>(r)] >= handled;
    } else {
      for (int64_t g = 0; g <= oi[0]; ++g) {
        gi.back() = g;
        lo = hi;
        hi += group_sizes.GetInt(Flat(gi, gss));
      }
      lo = std::clamp<int64_t>(lo, 0, csize[ragged_c]);
      hi = std::clamp<int64_t>(hi, 0, csize[ragged_c]);
    }
    if (zero) continue;
    double acc = 0;
    int64_t iacc = 0;
    std::fill(ci.begin(), ci.end(), 0);
    while (true) {
      bool take = true;
      if (contracting) take = ci[ragged_c] >= lo && ci[ragged_c] < hi;
      if (take) {
        for (size_t i = 0; i < ci.size(); ++i) {
          li[static_cast<size_t>(dd.lhs_contracting[i])] = ci[i];
          ri[static_cast<size_t>(dd.rhs_contracting[i])] = ci[i];
        }
        const int64_t a = Flat(li, ls), b = Flat(ri, rs);
        if (is_int) {
          iacc += lhs.GetInt(a) * rhs.GetInt(b);
        } else {
          acc += lhs.GetDouble(a) * rhs.GetDouble(b);
        }
      }
      size_t d = ci.size();
      while (d > 0 && ++ci[d - 1] == csize[d - 1]) ci[--d] = 0;
      if (d == 0) break;
    }
    if (is_int) {
      result.SetInt(k, iacc);
    } else {
      result.SetDouble(k, acc);
    }
  }
  return result;
}

}  // namespace weave::eval::internal
