// CompareModules: run two modules on identical inputs and compare every output.
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "eval/evaluator.h"
#include "eval/numerics.h"
#include "eval/output_precision.h"
#include "nlohmann/json.hpp"
#include "hlo/status_macros.h"

namespace weave::eval {

std::pair<double, double> DefaultTolerance(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F64:
    case PrimitiveType::C128: return {1e-9, 1e-12};  // complex: per part, as its part type
    case PrimitiveType::F32:
    case PrimitiveType::C64: return {1e-4, 1e-5};
    case PrimitiveType::BF16: return {2e-2, 1e-2};
    case PrimitiveType::F16: return {5e-3, 1e-3};
    case PrimitiveType::F8E4M3FN: case PrimitiveType::F8E4M3: case PrimitiveType::F8E4M3FNUZ:
      return {1.25e-1, 1.6e-2};
    case PrimitiveType::F8E5M2: case PrimitiveType::F8E5M2FNUZ: return {2.5e-1, 3.1e-2};
    default:
      if (IsFloatingPoint(t)) return {2.5e-1, 3.1e-2};
      return {0, 0};
  }
}

namespace {

// `ring_ulps` ulps of `ring_magnitude` (the largest magnitude of the terms the output sums,
// from the magnitude run) join the norm-wise term.
// `sum_atol` (the reassociated-sum allowance) joins it too; the elements that pass only thanks
// to it are counted.
OutputComparison CompareLeaf(const Value& a, const Value& b, double rtol, double atol,
                             double norm_ulps, double norm_factor, PrimitiveType ulp_type,
                             double ring_ulps = 0, const Value* ring_magnitude = nullptr,
                             double sum_atol = 0) {
  if (a.storage() == Storage::kComplex && b.storage() == Storage::kComplex) {
    // Complex outputs: the real and imaginary parts compared as a real array [..., 2].
    auto parts = [](const Value& v) {
      const PrimitiveType t = v.shape.element_type == PrimitiveType::C64 ? PrimitiveType::F32 : PrimitiveType::F64;
      std::vector<int64_t> dims = v.shape.dims;
      dims.push_back(2);
      Value r = Value::Zeros(Shape(t, dims));
      for (size_t k = 0; k < v.c.size(); ++k) {
        r.SetDouble(static_cast<int64_t>(2 * k), v.c[k].real());
        r.SetDouble(static_cast<int64_t>(2 * k + 1), v.c[k].imag());
      }
      return r;
    };
    const Value pa = parts(a), pb = parts(b);
    const PrimitiveType part_type = pa.shape.element_type;
    OutputComparison c = CompareLeaf(pa, pb, rtol, atol, norm_ulps, norm_factor, part_type, 0, nullptr, sum_atol);
    c.shape = a.shape.ToString(false);
    c.elements = a.size();
    return c;
  }
  OutputComparison c;
  c.rtol = rtol;
  c.atol = atol;
  c.shape = a.shape.ToString(false);
  const int64_t n = a.size();
  c.elements = n;
  const bool ints = a.storage() == Storage::kInt && b.storage() == Storage::kInt;
  if (!ints && norm_ulps > 0) {
    for (int64_t k = 0; k < n; ++k) {
      const double x = a.GetDouble(k);
      if (std::isfinite(x)) c.max_abs_value = std::max(c.max_abs_value, std::fabs(x));
    }
    c.norm_ulps = norm_ulps;
    c.norm_atol = norm_ulps * norm_factor * UlpOf(c.max_abs_value, ulp_type);
    if (ring_ulps > 0 && ring_magnitude != nullptr && ring_magnitude->size() == n) {
      for (int64_t k = 0; k < n; ++k) {
        const double x = ring_magnitude->GetDouble(k);
        if (std::isfinite(x)) c.ring_magnitude = std::max(c.ring_magnitude, std::fabs(x));
      }
      c.ring_ulps = ring_ulps;
      c.norm_atol += ring_ulps * UlpOf(c.ring_magnitude, ulp_type);
    }
  }
  const double norm_atol_without_sum = c.norm_atol;
  c.sum_atol = sum_atol;
  c.norm_atol += sum_atol;
  for (int64_t k = 0; k < n; ++k) {
    if (ints) {
      const int64_t x = a.i[static_cast<size_t>(k)], y = b.i[static_cast<size_t>(k)];
      const double diff = std::fabs(static_cast<double>(x) - static_cast<double>(y));
      c.max_abs_error = std::max(c.max_abs_error, diff);
      const double m = std::max(std::fabs(static_cast<double>(x)), std::fabs(static_cast<double>(y)));
      if (m > 0) c.max_rel_error = std::max(c.max_rel_error, diff / m);
      if (diff > atol + rtol * std::fabs(static_cast<double>(x))) ++c.mismatches;
      continue;
    }
    const double x = a.GetDouble(k), y = b.GetDouble(k);
    const bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn || yn) {
      if (xn != yn) {
        ++c.nan_diffs;
        ++c.mismatches;
      }
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) {
        ++c.inf_diffs;
        ++c.mismatches;
      }
      continue;
    }
    const double diff = std::fabs(x - y);
    c.max_abs_error = std::max(c.max_abs_error, diff);
    const double m = std::max(std::fabs(x), std::fabs(y));
    if (m > 0) c.max_rel_error = std::max(c.max_rel_error, diff / m);
    const double elementwise = atol + rtol * std::fabs(x);
    if (diff > std::max(elementwise, c.norm_atol)) {
      ++c.mismatches;
    } else if (diff > std::max(elementwise, norm_atol_without_sum)) {
      ++c.by_sum_allowance;
    }
  }
  c.pass = c.mismatches == 0;
  return c;
}

}  // namespace

absl::StatusOr<CompareReport> CompareResults(const HloModule& a, const EvalResult& ra,
                                             const HloModule& b, const EvalResult& rb,
                                             const CompareOptions& options,
                                             const EvalResult* ring_magnitudes) {
  (void)b;
  CompareReport report;
  const std::vector<PathPrecision> precisions =
      options.path_aware ? OutputPathPrecisions(a, ra.num_partitions) : std::vector<PathPrecision>{};
  report.num_partitions = ra.num_partitions;
  report.replica_count = ra.replica_count;
  report.seed = options.eval.seed;
  if (ra.outputs.size() != rb.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("module A ran on ", ra.outputs.size(),
                                                   " devices but module B on ", rb.outputs.size()));
  }
  for (size_t d = 0; d < ra.outputs.size(); ++d) {
    const auto& oa = ra.outputs[d];
    const auto& ob = rb.outputs[d];
    if (oa.size() != ob.size()) {
      return absl::InvalidArgumentError(absl::StrCat("module A has ", oa.size(),
                                                     " outputs but module B has ", ob.size()));
    }
    for (size_t j = 0; j < oa.size(); ++j) {
      if (!oa[j]->shape.Compatible(ob[j]->shape)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output ", j, " is ", oa[j]->shape.ToString(false), " in module A but ",
            ob[j]->shape.ToString(false), " in module B"));
      }
      // Path-aware: judge the output at the narrowest float type its path rounds to in module A,
      // with the norm-wise term scaled by the roundings a correct rewrite may reorder.
      const PrimitiveType out_type = oa[j]->shape.element_type;
      PrimitiveType judged = out_type;
      double factor = 1, ring_ulps = 0;
      std::string path;
      if (options.path_aware && j < precisions.size() && IsFloatingPoint(out_type)) {
        const PathPrecision& pp = precisions[j];
        if (pp.type != PrimitiveType::kInvalid && MantissaBits(pp.type) < MantissaBits(out_type)) {
          judged = pp.type;
          path = absl::StrCat("judged as ", std::string(PrimitiveTypeName(judged)), ": rounded at ", pp.where);
        }
        if (pp.type != PrimitiveType::kInvalid && MantissaBits(pp.type) <= MantissaBits(judged)) {
          factor = NormUlpsFactor(pp);
          ring_ulps = MagnitudeUlpsFactor(pp);
          if (path.empty() && (factor > 1 || pp.ring > 1)) {
            path = absl::StrCat(pp.roundings, " roundings at ", std::string(PrimitiveTypeName(pp.type)),
                                pp.ring > 1 ? absl::StrCat(", a reduction over ", pp.ring, " partitions")
                                            : std::string());
          }
        }
      }
      auto [rt, at] = DefaultTolerance(judged);
      const Value* ring_magnitude = nullptr;
      if (ring_ulps > 0 && ring_magnitudes != nullptr && d < ring_magnitudes->outputs.size() &&
          j < ring_magnitudes->outputs[d].size()) {
        ring_magnitude = ring_magnitudes->outputs[d][j].get();
      }
      OutputComparison c = CompareLeaf(*oa[j], *ob[j], options.rtol.value_or(rt),
                                       options.atol.value_or(at),
                                       options.norm_ulps.value_or(kDefaultNormUlps), factor,
                                       judged, ring_ulps, ring_magnitude);
      c.judged_as = judged;
      c.norm_factor = factor;
      c.path = path;
      c.output = static_cast<int64_t>(j);
      c.device = static_cast<int64_t>(d);
      report.pass &= c.pass;
      report.outputs.push_back(std::move(c));
    }
  }
  return report;
}

absl::StatusOr<EvalResult> RingMagnitudes(const HloModule& a, const EvalOptions& eval,
                                          const Inputs& inputs, const CompareOptions& options) {
  if (!options.path_aware) return EvalResult{};
  std::unique_ptr<HloModule> m = MagnitudeModule(a);
  if (m == nullptr) return EvalResult{};
  auto r = RunModule(*m, eval, &inputs);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat("module A (magnitude run): ", r.status().message()));
  }
  return r;
}

OutputComparison CompareOutputValues(const Value& a, const Value& b,
                                     const CompareOptions& options) {
  auto [rt, at] = DefaultTolerance(a.shape.element_type);
  return CompareLeaf(a, b, options.rtol.value_or(rt), options.atol.value_or(at),
                     options.norm_ulps.value_or(kDefaultNormUlps), 1,
                     a.shape.element_type);
}

OutputComparison CompareOutputValuesOnPath(const Value& a, const Value& b,
                                           const CompareOptions& options,
                                           const PathPrecision& pp,
                                           const Value* ring_magnitude, const Value* sum_magnitude) {
  const PrimitiveType out_type = a.shape.element_type;
  PrimitiveType judged = out_type;
  double factor = 1, ring_ulps = 0;
  bool sums = false;
  std::string path;
  if (options.path_aware && IsFloatingPoint(out_type) && pp.type != PrimitiveType::kInvalid) {
    if (MantissaBits(pp.type) < MantissaBits(out_type)) {
      judged = pp.type;
      path = absl::StrCat("judged as ", std::string(PrimitiveTypeName(judged)), ": rounded at ",
                          pp.where);
    }
    if (MantissaBits(pp.type) <= MantissaBits(judged)) {
      factor = NormUlpsFactor(pp);
      ring_ulps = MagnitudeUlpsFactor(pp);
      sums = sum_magnitude != nullptr && sum_magnitude->shape.Compatible(a.shape) && pp.sum_terms > 1;
    }
  }
  if (ring_magnitude != nullptr && !ring_magnitude->shape.Compatible(a.shape)) {
    ring_magnitude = nullptr;
  }
  double sum_atol = 0, largest = 0;
  if (sums) {
    for (int64_t k = 0; k < sum_magnitude->size(); ++k) {
      const double x = sum_magnitude->GetDouble(k);
      if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
    }
    sum_atol = SumReassociationAtol(pp, largest);
  }
  auto [rt, at] = DefaultTolerance(judged);
  OutputComparison c = CompareLeaf(a, b, options.rtol.value_or(rt), options.atol.value_or(at),
                                   options.norm_ulps.value_or(kDefaultNormUlps), factor, judged,
                                   ring_magnitude != nullptr ? ring_ulps : 0, ring_magnitude, sum_atol);
  if (sum_atol > 0) {
    c.sum_terms = pp.sum_terms;
    if (!path.empty()) path += "; ";
    absl::StrAppendFormat(&path,
                          "a sum of %d terms at %s whose order may change: + %.4g "
                          "(2*%g*sqrt(%d)*u*sum|x|, sum|x| = %.4g; Higham-Mary)",
                          pp.sum_terms, std::string(PrimitiveTypeName(pp.type)), sum_atol, kSumLambda,
                          pp.sum_terms, largest);
  }
  c.judged_as = judged;
  c.norm_factor = factor;
  c.path = path;
  return c;
}

absl::StatusOr<CompareReport> CompareModules(const HloModule& a, const HloModule& b,
                                             const CompareOptions& options, const Inputs* given) {
  if (a.entry() == nullptr || b.entry() == nullptr) {
    return absl::InvalidArgumentError("module without an entry computation");
  }
  const HloComputation* ea = a.entry();
  const HloComputation* eb = b.entry();
  if (ea->num_parameters() != eb->num_parameters()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "module A has ", ea->num_parameters(), " entry parameters but module B has ",
        eb->num_parameters(), ": they cannot run on the same inputs"));
  }
  for (int64_t i = 0; i < ea->num_parameters(); ++i) {
    const Shape& sa = ea->parameter(i)->shape();
    const Shape& sb = eb->parameter(i)->shape();
    if (!sa.Compatible(sb)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry parameter ", i, " is ", sa.ToString(false), " in module A but ",
          sb.ToString(false), " in module B: they cannot run on the same inputs"));
    }
  }
  EvalOptions eo = options.eval;
  eo.num_partitions = ResolvedNumPartitions(a, eo);
  eo.replica_count = ResolvedReplicaCount(a, eo);
  Inputs inputs;
  if (given != nullptr) {
    inputs = *given;
  } else {
    ASSIGN_OR_RETURN(auto in, MakeInputs(a, eo));
    inputs = std::move(in);
  }
  auto ra = RunModule(a, eo, &inputs);
  if (!ra.ok()) return absl::Status(ra.status().code(), absl::StrCat("module A: ", ra.status().message()));
  auto rb = RunModule(b, eo, &inputs);
  if (!rb.ok()) return absl::Status(rb.status().code(), absl::StrCat("module B: ", rb.status().message()));
  CompareOptions co = options;
  co.eval = eo;
  ASSIGN_OR_RETURN(EvalResult magnitudes, RingMagnitudes(a, eo, inputs, options));
  return CompareResults(a, *ra, b, *rb, co, magnitudes.outputs.empty() ? nullptr : &magnitudes);
}

namespace {

// "; judged as bf16: rounded at 'dq' (multiply), norm-wise term x3" when the path-aware
// tolerance applies.
std::string JudgedText(const OutputComparison& c) {
  if (c.path.empty()) return "";
  std::string s = absl::StrCat("; ", c.path);
  if (c.norm_factor > 1) absl::StrAppendFormat(&s, ", norm-wise term x%.3g", c.norm_factor);
  if (c.ring_ulps > 0) {
    absl::StrAppendFormat(&s, ", + %.3g ulps at the magnitude of the terms summed %.4g",
                          c.ring_ulps, c.ring_magnitude);
  }
  return s;
}

}  // namespace

std::string CompareReport::ToString() const {
  std::string s = absl::StrFormat("compare: %d partition(s)%s, seed %d\n", num_partitions,
                                  replica_count > 1 ? absl::StrCat(" x ", replica_count, " replicas") : "",
                                  seed);
  for (const OutputComparison& c : outputs) {
    const std::string dev = replica_count > 1 ? absl::StrCat("device ", c.device)
                                              : absl::StrCat("partition ", c.device);
    absl::StrAppendFormat(&s,
                          "  output %d %s %s: max_abs_err=%.4g max_rel_err=%.4g mismatches=%d/%d "
                          "nan_diffs=%d inf_diffs=%d (rtol=%g atol=%g%s%s) %s\n",
                          c.output, dev, c.shape, c.max_abs_error, c.max_rel_error, c.mismatches,
                          c.elements, c.nan_diffs, c.inf_diffs, c.rtol, c.atol,
                          c.norm_ulps > 0
                              ? absl::StrFormat(", or %g ulps at max |A| %.4g = %.4g",
                                                c.norm_ulps, c.max_abs_value, c.norm_atol)
                              : std::string(),
                          JudgedText(c), c.pass ? "PASS" : "FAIL");
  }
  s += pass ? "PASS\n" : "FAIL\n";
  return s;
}

std::string CompareReport::ToJson() const {
  nlohmann::json j;
  j["pass"] = pass;
  j["num_partitions"] = num_partitions;
  j["replica_count"] = replica_count;
  j["seed"] = seed;
  j["outputs"] = nlohmann::json::array();
  for (const OutputComparison& c : outputs) {
    j["outputs"].push_back({{"output", c.output}, {"device", c.device}, {"shape", c.shape},
                            {"max_abs_error", c.max_abs_error}, {"max_rel_error", c.max_rel_error},
                            {"mismatches", c.mismatches}, {"elements", c.elements},
                            {"nan_diffs", c.nan_diffs}, {"inf_diffs", c.inf_diffs},
                            {"rtol", c.rtol}, {"atol", c.atol}, {"norm_ulps", c.norm_ulps},
                            {"max_abs_value", c.max_abs_value}, {"norm_atol", c.norm_atol},
                            {"judged_as", std::string(PrimitiveTypeName(c.judged_as))},
                            {"norm_factor", c.norm_factor}, {"path", c.path},
                            {"ring_ulps", c.ring_ulps}, {"ring_magnitude", c.ring_magnitude},
                            {"pass", c.pass}});
    if (c.sum_terms > 0) {
      nlohmann::json& o = j["outputs"].back();
      o["sum_terms"] = c.sum_terms;
      o["sum_atol"] = c.sum_atol;
      o["by_sum_allowance"] = c.by_sum_allowance;
      o["exact_sums"] = c.exact_sums;
    }
  }
  return j.dump(2);
}

}  // namespace weave::eval
